/*
 * decision: see decision.h.
 */
#define _GNU_SOURCE
#include "core/decision.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

/* Every string member of a decision. */
static const size_t decision_strings[] = {
    offsetof(struct decision, id),
    offsetof(struct decision, ns),
    offsetof(struct decision, arch),
    offsetof(struct decision, kernel),
    offsetof(struct decision, key),
    offsetof(struct decision, candidates_fp),
    offsetof(struct decision, config),
    offsetof(struct decision, by_host),
    offsetof(struct decision, by_device),
    offsetof(struct decision, by_arch),
    offsetof(struct decision, triton_version),
    offsetof(struct decision, timings_json),
    offsetof(struct decision, table_file),
    offsetof(struct decision, by_node),
    offsetof(struct decision, by_job),
    offsetof(struct decision, timing_json),
};
#define N_STRINGS (sizeof decision_strings / sizeof decision_strings[0])

static char **field(struct decision *d, size_t i) {
    return (char **)((char *)d + decision_strings[i]);
}

/* See decision.h. */
void decision_clear(struct decision *d) {
    if (d == NULL)
        return;
    for (size_t i = 0; i < N_STRINGS; i++)
        free(*field(d, i));
    memset(d, 0, sizeof *d);
}

/* See decision.h. */
int decision_copy(const struct decision *src, int with_timings,
                  struct decision *ret) {
    struct decision c = *src;
    for (size_t i = 0; i < N_STRINGS; i++) {
        char **f = field(&c, i);
        if (!with_timings &&
            decision_strings[i] == offsetof(struct decision, timings_json)) {
            *f = NULL;
            continue;
        }
        *f = strdup(*f != NULL ? *f : "");
        if (*f == NULL) {
            /* The strings after i are still src's: forget them first. */
            for (size_t j = i + 1; j < N_STRINGS; j++)
                *field(&c, j) = NULL;
            decision_clear(&c);
            return DETD_ENOMEM;
        }
    }
    *ret = c;
    return 0;
}
