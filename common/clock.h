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

#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC (arbitrary origin). Thread-safe. */
int64_t clock_mono_ms(void);

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). Thread-safe. */
int64_t clock_unix_ms(void);

#endif /* DETD_CLOCK_H */
