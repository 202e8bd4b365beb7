/*
 * benchsplit: the benchmarks of a timing pass split across the node's GPUs
 * (Share, see ShareRequest in proto/detd.proto), on the loop thread.
 *
 * The holder of a key's live claim opens a split with its first Share,
 * taking the reference (the candidate every helper benchmarks first) and
 * naming its device. A waiter that asks Decide with share and bench on a
 * device of its own (neither the holder's nor another helper's) is then
 * admitted as a helper (decide.c calls benchsplit_admit()); helpers take
 * candidates, benchmark them with the reference and give the results; the
 * holder takes from the other end, takes back (reclaim) what is late and
 * collects what was given, then reports as without a split.
 *
 * A split lives as long as the claim it was opened for: every access asks
 * the engine (engine_claim_info()) and drops a split whose claim ended or
 * passed to another session; the splits of ended passes are swept when a
 * new one would exceed DAEMON_MAX_BENCH_SPLITS.
 */
#ifndef DETD_BENCHSPLIT_H
#define DETD_BENCHSPLIT_H

#include <stdint.h>

#include "io/rpc.h"

struct daemon;
struct client_session;
struct benchsplit;

/* A table of no splits into *ret: 0 or DETD_ENOMEM (*ret untouched).
 * Freed with benchsplit_free() when the daemon ends. */
int benchsplit_new(struct benchsplit **ret);

/* Free b and every split in it. NULL is a no-op. */
void benchsplit_free(struct benchsplit *b);

/*
 * Decide's share path: session s (given share *io_index of the live claim
 * of key id) offers to benchmark on device. It is admitted as a helper of
 * id's split when the split is open (its claim live, held by the session
 * that opened it), device is not empty and differs from the holder's and
 * every admitted helper's, and the split has fewer than
 * DAEMON_MAX_BENCH_HELPERS helpers; its helper index is then *io_index.
 * A session admitted before stays a helper: *io_index becomes its helper
 * index. Returns 1 (a benchmark share), or 0 (a compile share; *io_index
 * untouched). Everything is borrowed for the call.
 */
int benchsplit_admit(struct daemon *d, const char *id,
                     const struct client_session *s, const char *device,
                     uint32_t *io_index);

/* The Share method (io/rpc_methods.h): answers ev's call and frees its
 * request. */
void benchsplit_share(struct daemon *d, struct rpc_event *ev);

#endif /* DETD_BENCHSPLIT_H */
