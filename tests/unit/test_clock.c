/*
 * clock: the absolute deadline of clock_after() (carry into seconds, a
 * negative span meaning now) and a timed wait on a condition from
 * clock_cond_init(), which runs on CLOCK_MONOTONIC.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "runner.h"

static int64_t ns_of(struct timespec ts) {
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ns_of(ts);
}

TEST(after_is_ms_from_now_on_the_monotonic_clock) {
    int64_t spans[] = {0, 1, 999, 1000, 1500, 61999};
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        int64_t before = mono_ns();
        struct timespec ts = clock_after(spans[i]);
        int64_t after = mono_ns();
        CHECK(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000);
        CHECK(ns_of(ts) >= before + spans[i] * 1000000);
        CHECK(ns_of(ts) <= after + spans[i] * 1000000);
    }
}

TEST(after_a_negative_span_is_now) {
    int64_t before = mono_ns();
    struct timespec ts = clock_after(-5000);
    CHECK(ns_of(ts) >= before && ns_of(ts) <= mono_ns());
}

TEST(cond_wait_times_out_after_the_span) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    CHECK_EQ_INT(clock_cond_init(&cv), 0);
    int64_t t0 = clock_mono_ms();
    pthread_mutex_lock(&mu);
    struct timespec ts = clock_after(120);
    int rc;
    do
        rc = pthread_cond_timedwait(&cv, &mu, &ts);
    while (rc == 0);
    pthread_mutex_unlock(&mu);
    int64_t waited = clock_mono_ms() - t0;
    CHECK_EQ_INT(rc, ETIMEDOUT);
    /* On a realtime condition a monotonic deadline is decades in the
     * past and the wait returns at once. */
    CHECK(waited >= 115);
    CHECK(waited < 5000);
    pthread_cond_destroy(&cv);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
