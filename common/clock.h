/*
 * clock: the one source of time for the daemon, libdetd and detctl.
 *
 * clock_mono_ms() is for deadlines, leases and durations: it never jumps.
 * clock_unix_ms() is for timestamps shown to people and stored with rows
 * (decided_at, attached_at): it follows the wall clock and may jump.
 * Never mix the two in one computation.
 */
#ifndef DETD_CLOCK_H
#define DETD_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (arbitrary origin). Thread-safe. */
int64_t clock_mono_ms(void);

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). Thread-safe. */
int64_t clock_unix_ms(void);

/*
 * Initialize cond so that its timed waits run on CLOCK_MONOTONIC: a step
 * of the wall clock neither shortens nor stretches them. Every condition
 * waited on with clock_after() is initialized here. Returns 0 or
 * pthread_cond_init()'s error.
 */
int clock_cond_init(pthread_cond_t *cond);

/*
 * The absolute CLOCK_MONOTONIC time ms milliseconds from now (ms < 0:
 * now), for pthread_cond_timedwait() on a condition initialized by
 * clock_cond_init(). Thread-safe.
 */
struct timespec clock_after(int64_t ms);

#endif /* DETD_CLOCK_H */
