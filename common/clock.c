/*
 * clock: monotonic and wall-clock milliseconds (see clock.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "clock.h"

#include <time.h>

static int64_t clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* See clock.h. */
int64_t clock_mono_ms(void) {
    return clock_ms(CLOCK_MONOTONIC);
}

/* See clock.h. */
int64_t clock_unix_ms(void) {
    return clock_ms(CLOCK_REALTIME);
}

/* See clock.h. */
int clock_cond_init(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

/* See clock.h. */
struct timespec clock_after(int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 0)
        ms = 0;
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}
