/*
 * convert: the timings of a report or a vote as the store keeps them
 * (convert_timings_json()): the format, and, when any allocation fails,
 * NULL rather than a list missing an entry or its samples.
 */
#define _GNU_SOURCE
#include "app/convert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"

static Detd__V1__CandidateTiming ta, tb;
static Detd__V1__CandidateTiming *tp[2];
static double ms_a[3];

static void two_timings(void) {
    detd__v1__candidate_timing__init(&ta);
    detd__v1__candidate_timing__init(&tb);
    ms_a[0] = 1.5;
    ms_a[1] = NAN;
    ms_a[2] = INFINITY;
    ta.config = "BLOCK=64,num_warps=4";
    ta.ms = ms_a;
    ta.n_ms = 3;
    tb.config = "BLOCK=128,num_warps=4";
    tb.failed = 1;
    tp[0] = &ta;
    tp[1] = &tb;
}

/* Not finite samples are null; a failed candidate keeps its entry. */
static const char WANT[] =
    "[{\"config\":\"BLOCK=64,num_warps=4\",\"ms\":[1.5,null,null],"
    "\"failed\":false},"
    "{\"config\":\"BLOCK=128,num_warps=4\",\"ms\":[],\"failed\":true}]";

TEST(timings_as_stored) {
    two_timings();
    char *s = convert_timings_json(tp, 2);
    CHECK_STR(s, WANT);
    free(s);
    s = convert_timings_json(tp, 0);
    CHECK_STR(s, "[]");
    free(s);
}

/* jansson's allocations (json_set_alloc_funcs), the n-th failing. */
static long fail_at, alloc_calls;

static void *failing_malloc(size_t n) {
    alloc_calls++;
    if (fail_at > 0 && --fail_at == 0)
        return NULL;
    return malloc(n);
}

TEST(timings_out_of_memory_is_null_never_partial) {
    two_timings();
    json_set_alloc_funcs(failing_malloc, free);
    long nulls = 0, k;
    for (k = 1; k < 10000; k++) {
        fail_at = k;
        alloc_calls = 0;
        char *s = convert_timings_json(tp, 2);
        int none_failed = alloc_calls < k;
        if (s == NULL)
            nulls++;
        else
            CHECK_STR(s, WANT);
        free(s);
        if (none_failed) {
            CHECK(s != NULL);
            break; /* the sweep is done */
        }
    }
    json_set_alloc_funcs(malloc, free);
    /* k - 1 allocations were made: each one's failure gave NULL. */
    CHECK(k > 1 && k < 10000);
    CHECK_EQ_INT(nulls, k - 1);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
