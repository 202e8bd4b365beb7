/*
 * loop: start-up, the libuv loop and the drain of the daemon (the root).
 */
#ifndef DETD_LOOP_H
#define DETD_LOOP_H

#include "config/options.h"

/* Run the daemon with cfg (borrowed) until SIGTERM/SIGINT; returns the
 * process's exit code: 0 after a drain, 1 when a start-up step failed
 * (logged). Either way every step begun is undone first. */
int daemon_run(const struct daemon_config *cfg);

#endif /* DETD_LOOP_H */
