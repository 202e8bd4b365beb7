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
