/*
 * libdetd: the detd client library.
 *
 * A training process opens one detd_client and asks its node's daemon
 * which kernel configuration to use for a decision key. The daemon answers
 * with a decided configuration, or designates this process to time the
 * candidates once for the whole cluster; the process then reports its
 * timings and uses the configuration the daemon committed.
 *
 * Threads: every function may be called from any thread at any time on
 * the same handle. Calls are independent; a slow Decide (waiting for
 * another rank's timing pass) does not block other calls.
 *
 * Fork: the handle may be used in a forked child. The child never touches
 * the parent's connection; it opens its own on first use and attaches as
 * a new client (with its own pid).
 *
 * Daemon restarts (added in 0.3): a handle that has reached its daemon
 * outlives it. When the daemon goes away (connection refused, socket
 * gone, the connection lost, the Attach stream ended, a draining daemon
 * answering UNAVAILABLE or cancelling the calls still open), the handle
 * attaches again by itself, with exponential backoff and jitter: at once, then
 * after 50 ms doubling to at most 1 s, each wait drawn uniformly from [d/2, d],
 * until the daemon answers or the handle is closed. Every re-attach is a new
 * session (a new session id); heartbeats resume on it. Meanwhile the calls
 * behave as follows:
 *
 *  - detd_decide(), detd_observe() and detd_vote() are idempotent: one that
 *    fails because the daemon is gone (connection refused at a socket file
 *    a killed daemon left, no socket file, the connection lost, also one
 *    in flight or held server-side when it died, or a daemon that accepts
 *    but does not serve yet) is made again, with the same backoff, until
 *    it is answered, its deadline passes, or the daemon has been gone for
 *    longer than the reconnect window. Past the window the call returns
 *    the connection error (DETD_ECONNECT or DETD_EUNAVAILABLE) and
 *    detd_client_last_error() says for how long the daemon was missing.
 *    A detd_decide() whose own deadline comes before any answer, within
 *    the window, returns DETD_OUTCOME_TIMEOUT with answer->daemon_away
 *    set, as a wait that ended: a caller that asks in slices asks again.
 *  - detd_report() is not replayed to a daemon that did not give the
 *    claim. A claim belongs to the session that received it; when that
 *    session ends (the daemon restarted: the new daemon never gave this
 *    claim) the handle takes the claim again as soon as it has attached
 *    anew, before anything else (a Decide for the claim's key under the
 *    new session), and detd_report() waits for the daemon within its
 *    deadline and the window and sends the report under the claim taken
 *    again. A restarted daemon keeps each pass open at its end for its
 *    holder while that process runs (up to the lease), so other
 *    processes wait for it: a pass in flight across a restart is timed
 *    once. When the claim could not be taken again
 *    (another process holds or decided the key), detd_report() returns
 *    DETD_ESTALE without sending anything.
 *
 * The rule for a designated caller whose report returns DETD_ESTALE: call
 * detd_decide() again for the same key (it waits for the daemon as above).
 * DECIDED: use that config (another rank committed it, or this process's
 * report was committed before the answer was lost: a committed decision is
 * stored before it is acknowledged and survives the restart). DESIGNATED:
 * report again with the new claim. Timings this process measured for
 * exactly this key and candidate list remain valid (they are measurements,
 * not state of the daemon) and may be reported again without timing anew;
 * time again only if the key or the candidates changed. Thus a restart
 * costs no extra timing pass when the claim is taken again, at most one
 * per key whose pass was in flight otherwise (the holder itself died, or
 * a process met the key for the first time during the settling), and
 * never a second decision: the store's first writer wins.
 *
 * detd_client_stats() counts the outages a handle met and the claims it
 * took again.
 *
 * The reconnect window is DETD_RECONNECT_DEFAULT_MS (60 s), or
 * $DETD_RECONNECT_MS read by detd_client_open() (0 to DETD_RECONNECT_MAX_MS;
 * 0: never wait). It counts from the first failure of an outage; once it
 * has passed, calls fail at once until the handle reaches a daemon again
 * (the handle keeps attaching in the background). A handle that never
 * reached a daemon does not wait: its calls fail at once, as a missing
 * daemon is a configuration error. A forked child of a process that
 * reached the daemon waits like its parent.
 *
 * The library never logs, never aborts and never writes to stdout/stderr.
 */
#ifndef DETD_CLIENT_H
#define DETD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "detd/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DETD_API_VERSION 1

/* Default socket when neither the argument nor DETD_SOCKET names one. */
#define DETD_DEFAULT_SOCKET "/run/detd/detd.sock"

/* The reconnect window (see the top of this file; added in 0.3). */
#define DETD_RECONNECT_DEFAULT_MS 60000
#define DETD_RECONNECT_MAX_MS 3600000
/* Limits enforced by the daemon and checked early by the library. */
#define DETD_MAX_KEY_BYTES 4096
#define DETD_MAX_CANDIDATES 1024
#define DETD_MAX_MESSAGE_BYTES (1024 * 1024)

typedef struct detd_client detd_client;

/*
 * Who this process is. Strings are copied by detd_client_open(). A NULL
 * string means "unknown"; rank/local_rank -1 and world_size 0 likewise.
 * host defaults to the host name, pid is always taken from getpid().
 * Since 0.7 an unknown rank, local_rank and world_size are read from the
 * launcher's $RANK, $LOCAL_RANK and $WORLD_SIZE (torchrun's) when they
 * hold integers, and an unknown job from $DETD_JOB, else
 * $TORCHELASTIC_RUN_ID, else $SLURM_JOB_ID.
 */
struct detd_identity {
    const char *host;
    int32_t rank;
    int32_t local_rank;
    int32_t world_size;
    const char *device_name;
    const char *arch;
    int32_t sm_count;
    const char *job;
};

/* Where a decision came from (values match detd.v1.Source). */
typedef enum detd_source {
    DETD_SOURCE_UNSPECIFIED = 0,
    DETD_SOURCE_TIMED = 1,
    DETD_SOURCE_TABLE = 2,
    DETD_SOURCE_OVERRIDE = 3,
    DETD_SOURCE_IMPORT = 4,
    DETD_SOURCE_FALLBACK = 5,
    DETD_SOURCE_LOCAL = 6,
    /* A tuner detd cannot govern: its own choice; verify requires every
     * process that launched the key to agree (observe only). */
    DETD_SOURCE_UNGOVERNED = 7,
    /* Added in 0.8: not a config choice but a finding about the process's
     * runtime that no config fixes (a nondeterministic op, the attention
     * backend, a setting): key->kernel "runtime::op", "runtime::sdpa" or
     * "runtime::setting", key->key the name, config the detail or value
     * (each <= 256 bytes, no control characters), extra->why why it
     * breaks bit-identity ("": it does not). Observe only, never
     * governed; verify lists it beside the configs' agreement. */
    DETD_SOURCE_RUNTIME = 8,
} detd_source;

/* What a Decide call produced (values match detd.v1.Outcome). */
typedef enum detd_outcome {
    DETD_OUTCOME_DECIDED = 1,    /* use answer->config */
    DETD_OUTCOME_DESIGNATED = 2, /* time, then detd_report() */
    DETD_OUTCOME_MISS = 3,       /* nothing decided, no claim given */
    DETD_OUTCOME_TIMEOUT = 4,    /* another rank's pass outlasted the wait */
} detd_outcome;

/*
 * A decision key. All strings are borrowed for the duration of the call.
 * namespace_ may be NULL (the daemon's namespace). candidates are
 * canonical config strings; their order does not matter.
 */
struct detd_key {
    const char *namespace_;
    const char *arch;
    const char *kernel;
    const char *key;
    const char *const *candidates;
    size_t n_candidates;
    /* Optional (NULL: none): the key in Megatron-LM's tuning_key form
     * ("N=128|torch.float32"), used by the daemon only to look the key
     * up in per-architecture tables. Never part of the decision id. */
    const char *table_key;
};

/* One candidate's timing, for detd_report(). */
struct detd_timing {
    const char *config;
    const double *ms; /* samples or quantiles; the daemon uses the median */
    size_t n_ms;
    int failed; /* nonzero: the candidate could not run */
};

/*
 * The answer to detd_decide() or detd_report(). Owned by the caller,
 * freed with detd_answer_free(). Strings live as long as the answer.
 * Only the library allocates answers, and members are only ever
 * appended (each names the release that added it), so a caller built
 * against an older header reads a prefix of the same layout.
 */
struct detd_answer {
    detd_outcome outcome;
    char *config; /* chosen config (DECIDED, report) or NULL */
    detd_source source;
    char *decision_id; /* hex SHA-256 of the key, or NULL */
    uint64_t claim_id; /* DESIGNATED: pass to detd_report() */
    uint32_t lease_ms;
    int takeover;   /* designated after the previous timer left */
    int superseded; /* report: another claim made the decision */
    char *decided_by_host;
    int32_t decided_by_rank;
    int32_t decided_by_pid;
    uint32_t waited_ms;
    /* Added in 0.4, for DETD_OUTCOME_TIMEOUT: who holds the key's claim
     * on the daemon (the rank timing it) and for how long (holder_host
     * NULL: not held there, e.g. on another node), and the share given
     * (DETD_DECIDE_SHARE; 0: none). */
    char *holder_host;
    int32_t holder_rank;
    int32_t holder_pid;
    uint32_t held_ms;
    uint32_t share_index;
    /* Added in 0.5, with share_index (DETD_DECIDE_BENCH): a benchmark
     * share: take candidates with detd_share() and benchmark them on
     * this process's device (detd_client_set_device()). */
    int bench;
    /* Added in 0.6, for DETD_OUTCOME_TIMEOUT: nonzero when the deadline
     * came before the daemon answered at all (it was away within the
     * reconnect window, starting, just back, or not answering; see
     * "Daemon restarts"): nothing was decided; ask again. */
    int daemon_away;
};

/*
 * Create a client handle. socket_path: the daemon's unix socket, or NULL
 * for $DETD_SOCKET, else DETD_DEFAULT_SOCKET. identity may be NULL.
 * Nothing is connected yet: the first call connects and attaches.
 * On success *ret_client owns a handle to free with detd_client_close();
 * on failure *ret_client is untouched.
 * Returns 0, DETD_EINVAL or DETD_ENOMEM.
 */
int detd_client_open(const char *socket_path,
                     const struct detd_identity *identity,
                     detd_client **ret_client);

/*
 * Detach and free the handle. Claims it holds pass to the next waiter.
 * No call may be in flight on another thread. NULL is a no-op.
 */
void detd_client_close(detd_client *client);

/*
 * Connect and attach now (otherwise done lazily), waiting at most
 * timeout_ms (<= 0: 5 s). Returns 0, DETD_ECONNECT, DETD_ETIMEDOUT or
 * DETD_EPROTO. Calling it again when attached is a cheap no-op.
 */
int detd_client_connect(detd_client *client, int64_t timeout_ms);

/* Flags for detd_decide(). */
#define DETD_DECIDE_NO_CLAIM 0x1 /* pinned: never be designated */
/* Added in 0.4: while another rank holds the key's claim on this daemon,
 * answer DETD_OUTCOME_TIMEOUT at once with answer->share_index set (the
 * next share of that timing pass: 1, 2, ...) instead of waiting; the
 * caller helps the pass (compiles candidates) and asks again. Without a
 * claim held there, the call is answered as without the flag. */
#define DETD_DECIDE_SHARE 0x2
/* Added in 0.5, with DETD_DECIDE_SHARE: offer to benchmark a share of the
 * pass on this process's device (detd_client_set_device(); without one the
 * flag is ignored). The daemon gives a benchmark share (answer->bench)
 * when the timing rank opened a split (detd_share()) and this device is
 * neither the timing rank's nor another helper's of that pass; else a
 * compile share. */
#define DETD_DECIDE_BENCH 0x4
/* Added in 0.8: wait for the key's decision, never be designated: a
 * decided key is answered DETD_OUTCOME_DECIDED at once; while a timing
 * pass is in progress the call waits like any waiter (DETD_OUTCOME_TIMEOUT
 * with the holder at the deadline), and a takeover passes over it; with
 * no decision and no pass in progress: DETD_OUTCOME_MISS. For a process
 * that launched a fallback and waits for the decision before it relies
 * on it (detd.wait_final() in the Python package). Overrides
 * DETD_DECIDE_NO_CLAIM; DETD_DECIDE_SHARE is ignored with it. A daemon
 * older than 0.8 would designate the caller: DETD_EPROTO. */
#define DETD_DECIDE_WAIT_ONLY 0x8

/*
 * Ask which config to use for key. Waits server-side while another rank
 * times the key, for at most timeout_ms (<= 0: 10 minutes); across a
 * daemon restart it asks again within the same timeout (see the top of
 * this file).
 * On success *ret_answer holds the outcome (free it with
 * detd_answer_free()). Errors: DETD_EINVAL, DETD_ELIMIT (key or candidate
 * limits), DETD_ECONNECT, DETD_ETIMEDOUT, DETD_EBUSY, DETD_EPROTO, ...;
 * since 0.7, DETD_ENOCAND when the key's timing pass failed for every
 * candidate (kept by the daemon: detd_client_last_error() says why, with
 * the first candidate's error; before 0.7 this was DETD_ESTALE) and
 * DETD_EENV when the pass this call waited for could not run in its
 * timing process's environment (detd_claim_release(); the text names the
 * cause).
 */
int detd_decide(detd_client *client, const struct detd_key *key, int flags,
                int64_t timeout_ms, struct detd_answer **ret_answer);

/*
 * Report the timings of a designated pass (claim_id from detd_decide()).
 * The daemon picks the winner (the smallest config string among those
 * within 1% of the lowest median: README "The winner rule"),
 * commits it and answers with the committed decision, which the caller
 * must use: answer->config. Repeating a report is harmless. A report
 * for a claim that moved on returns DETD_ESTALE, or the decision with
 * answer->superseded set if one was made meanwhile. A report for a claim
 * whose session ended (a daemon restart) returns DETD_ESTALE at once and
 * sends nothing: ask again with detd_decide() (the rule is at the top of
 * this file). Waits at most timeout_ms (<= 0: 30 s).
 */
int detd_report(detd_client *client, uint64_t claim_id,
                const struct detd_key *key, const struct detd_timing *timings,
                size_t n_timings, const char *triton_version,
                int64_t timeout_ms, struct detd_answer **ret_answer);

/*
 * Added in 0.7: the longest error text a report carries per candidate
 * (detd_report_extra.errors) and for an environment error
 * (detd_claim_release()); longer texts are cut to it (at a UTF-8
 * character boundary).
 */
#define DETD_MAX_ERROR_BYTES 1024

/*
 * Added in 0.8: how a timing pass measured, recorded with the decision it
 * makes (docs/lockfile.md, "Provenance"). Strings NULL or "": not known;
 * each at most 256 bytes without a newline, warmup and rep 0 to 1e9 (the
 * daemon refuses the report otherwise, naming the field).
 */
struct detd_timing_info {
    const char *benchmarker; /* "triton.testing.do_bench", "module:qualname" */
    double warmup, rep;      /* its settings (ms for Triton's); 0: unknown */
    const char *return_mode; /* "quantiles=0.5,0.2,0.8", "median", ... */
    int cuda_graphs;         /* timed as CUDA graph replays */
    int timing_lock;         /* the device's timing lock was held */
    const char *torch_version, *cuda_version, *driver;
    const char *package, *package_version; /* owning the kernel's module */
};

/* Added in 0.7: what a report carries besides the timings. */
struct detd_report_extra {
    size_t size; /* the caller sets sizeof(struct detd_report_extra) */
    /* NULL, or one entry per timing: why timings[i] failed (NULL or "":
     * not said), e.g. "CompilationError: ...". When every candidate
     * failed, the daemon keeps the first candidate's error with the
     * failure and names it to every process that asks for the key. */
    const char *const *errors;
    /* Added in 0.8 (read when size covers it): how the timings were
     * measured, or NULL. */
    const struct detd_timing_info *timing;
};

/*
 * detd_report() with extra (NULL: as detd_report()), added in 0.7.
 * Returns what detd_report() returns, and DETD_EINVAL for a bad
 * extra->size.
 */
int detd_report_ex(detd_client *client, uint64_t claim_id,
                   const struct detd_key *key,
                   const struct detd_timing *timings, size_t n_timings,
                   const struct detd_report_extra *extra,
                   const char *triton_version, int64_t timeout_ms,
                   struct detd_answer **ret_answer);

/*
 * Give claim_id back because its timing pass could not run in this
 * process's environment (added in 0.7): why names the cause (a module
 * missing, no GPU driver, no device: nothing about the candidates),
 * required, cut to DETD_MAX_ERROR_BYTES. The daemon ends the claim and
 * stores nothing, so the key is timed again once the cause is fixed;
 * the processes waiting for the key get DETD_EENV from detd_decide()
 * with the daemon's text naming why and this process (they would most
 * likely meet it too). Returns 0 (given back), DETD_ESTALE (the claim
 * was no longer held, or the key was decided meanwhile: nothing to give
 * back), DETD_EINVAL, or a connection error (the daemon then ends the
 * claim at its pass deadline or with the session). Waits at most
 * timeout_ms (<= 0: 30 s).
 */
int detd_claim_release(detd_client *client, uint64_t claim_id,
                       const struct detd_key *key, const char *why,
                       int64_t timeout_ms);

/*
 * Pass claim_id on before timing anything, with nothing wrong (added in
 * 0.9): this process asked for the claim early, ahead of the pass, and
 * the pass did not come (its caller went another way). The daemon hands
 * the claim to the key's oldest waiting process, which is designated as
 * if it had asked first (not a takeover), or drops it when none waits;
 * nothing is stored and the waiters are told nothing else, unlike
 * detd_claim_release(). Returns 0 (passed on), DETD_ESTALE (the claim
 * was no longer held, or the key was decided meanwhile: nothing to pass
 * on), DETD_EUNIMPL without sending anything when the daemon does not
 * pass claims on (detd_client_can_pass_on() says 0: the claim is still
 * held; give it up with detd_claim_release() or time it), DETD_EINVAL,
 * or a connection error (the daemon then ends the claim at its pass
 * deadline or with the session). Waits at most timeout_ms (<= 0: 30 s).
 */
int detd_claim_pass_on(detd_client *client, uint64_t claim_id,
                       const struct detd_key *key, int64_t timeout_ms);

/*
 * 1 when the daemon this process is attached to now passes claims on
 * (detd_claim_pass_on()), else 0 (an older daemon, or none attached yet:
 * any detd_decide() attaches). Never blocks. Added in 0.9.
 */
int detd_client_can_pass_on(detd_client *client);

/* Flags for detd_observe(). */
#define DETD_OBSERVE_GOVERNED 0x1
#define DETD_OBSERVE_CHAOS 0x2

/*
 * Record that this process launched config for key (source: where the
 * caller got it). Used by detctl verify. Returns 0 or an error.
 */
int detd_observe(detd_client *client, const struct detd_key *key,
                 const char *config, detd_source source, int flags,
                 int64_t timeout_ms);

/* Added in 0.3: a flag for detd_observe_ex(): the launch raised. */
#define DETD_OBSERVE_FAILED 0x4

/* detd_observe_extra.audit: the client's determinism audit of the key. */
typedef enum {
    DETD_AUDIT_NONE = 0,             /* not audited */
    DETD_AUDIT_DETERMINISTIC = 1,    /* every replay gave the same bytes */
    DETD_AUDIT_NONDETERMINISTIC = 2, /* see differing */
    DETD_AUDIT_ERROR = 3,            /* a replay raised */
} detd_audit_status;

/*
 * Added in 0.3: what an observation says beyond the config, for
 * detd_observe_ex(). Set size to sizeof(struct detd_observe_extra): a
 * later release appends members and reads only the first size bytes.
 * Strings are borrowed for the call; NULL reads as "".
 */
struct detd_observe_extra {
    size_t size;
    const char *error; /* DETD_OBSERVE_FAILED: why (<= 1024 bytes) */
    detd_audit_status audit;
    const char *const *differing; /* audit: the arguments that differed */
    size_t n_differing;           /* <= 64, each <= 256 bytes, no '\n' */
    const char *why;              /* not governed: why (<= 1024 bytes) */
};

/*
 * Added in 0.3: detd_observe() with extra facts (extra may be NULL, then
 * it is detd_observe()). flags may also hold DETD_OBSERVE_FAILED; then
 * config may be "" (the launch raised before a config was chosen) and
 * the daemon keeps the observation failed. An extra whose size is 0 or
 * larger than this release knows is DETD_EINVAL.
 */
int detd_observe_ex(detd_client *client, const struct detd_key *key,
                    const char *config, detd_source source, int flags,
                    const struct detd_observe_extra *extra, int64_t timeout_ms);

/*
 * Record mode: vote for config, the winner of this process's own timing
 * pass for key (it must be one of key's candidates), with the timings of
 * every candidate timed (timings may be NULL when n_timings is 0; each
 * timing's config must be a candidate too). Nothing is decided: the
 * daemon keeps the vote for `detctl votes` and `detctl table export
 * --votes`, which takes the majority per key. A repeated vote of this
 * process (host, pid) for the same key replaces its earlier vote.
 * table_key: the key in Megatron-LM's tuning_key form ("N=128|
 * torch.float32"), or NULL; triton_version may be NULL. Strings are
 * borrowed for the call. Waits at most timeout_ms (<= 0: 30 s).
 * Returns 0, DETD_EINVAL (NULL arguments, a config that is not a
 * candidate: detd_client_last_error() names it), DETD_ELIMIT (a size
 * limit, or the daemon's vote store is full), DETD_ECONNECT,
 * DETD_ETIMEDOUT, DETD_EPROTO, ...
 */
int detd_vote(detd_client *client, const struct detd_key *key,
              const char *config, const struct detd_timing *timings,
              size_t n_timings, const char *triton_version,
              const char *table_key, int64_t timeout_ms);

/* Free an answer. NULL is a no-op. */
void detd_answer_free(struct detd_answer *answer);

/*
 * Added in 0.5: the device this process benchmarks on, e.g.
 * "gpu-<UUID>" (at most 256 bytes, no NUL inside, valid UTF-8), sent
 * with DETD_DECIDE_BENCH asks and a holder's first detd_share() call.
 * NULL or "": none. The string is copied. Returns 0, DETD_EINVAL or
 * DETD_ENOMEM.
 */
int detd_client_set_device(detd_client *client, const char *device);

/*
 * A call of the split of a timing pass's benchmarks (added in 0.5; see
 * ShareRequest in proto/detd.proto for the protocol). The holder (the
 * designated process) passes its claim_id; a helper given a benchmark
 * share passes 0. Every pointer member may be NULL when unused.
 */
struct detd_share {
    uint64_t claim_id; /* the holder's live claim; 0: a helper */
    const char *take;  /* a candidate to benchmark here, or NULL */
    int reclaim;       /* holder, with take: also from a late helper */
    const struct detd_timing *timings; /* helper: candidates it took */
    size_t n_timings;
    const double *reference_ms; /* helper: its reference samples */
    size_t n_reference_ms;
    int collect; /* holder: answer with given and pending */
};

/* A helper's result, as given (struct detd_share_answer). */
struct detd_share_timing {
    char *config;
    double *ms;
    size_t n_ms;
    int failed;
    char *device;         /* where it was measured */
    double *reference_ms; /* that helper's latest reference samples */
    size_t n_reference_ms;
    uint32_t helper; /* that helper's share_index */
};

/* The answer to detd_share(); freed with detd_share_answer_free(). */
struct detd_share_answer {
    int open;        /* the split is live; 0: the pass is over */
    int granted;     /* take: this caller benchmarks it */
    char *reference; /* the candidate every helper benchmarks first, or NULL */
    struct detd_share_timing *given; /* collect */
    size_t n_given;
    char **pending; /* collect: taken by helpers, not given yet */
    size_t n_pending;
};

/*
 * One Share call for key (the key the claim is for, candidates
 * included). Not retried across a daemon restart: a split ends with its
 * claim. Waits at most timeout_ms (<= 0: 30 s). On success
 * *ret_answer holds the answer. Errors: DETD_EINVAL (NULL arguments, a
 * config outside the candidates, a bad sample: the daemon's message
 * names the field), DETD_EDENIED, DETD_ESTALE (the holder's claim is not
 * live), DETD_ECONNECT, DETD_ETIMEDOUT, DETD_EPROTO, ...
 */
#if defined(__cplusplus) && defined(__GNUC__)
/* C++ allows a function named like a struct (as stat() and struct stat);
 * GCC's -Wshadow would still call it hiding the struct's constructor. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif
int detd_share(detd_client *client, const struct detd_key *key,
               const struct detd_share *share, int64_t timeout_ms,
               struct detd_share_answer **ret_answer);
#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* Free a share answer. NULL is a no-op. */
void detd_share_answer_free(struct detd_share_answer *answer);

/*
 * Give up claim_id without reporting (added in 0.6): this process will not
 * time its key (its pass could not run). libdetd stops tracking the claim,
 * so it is not taken again after a daemon restart. Sends nothing: the
 * daemon ends the claim at its pass deadline or with the session, as for
 * any claim never reported. Unknown claims are ignored.
 * Returns 0 or DETD_EINVAL (client NULL or claim_id 0).
 */
int detd_claim_forget(detd_client *client, uint64_t claim_id);

/* What a handle lived through (added in 0.6). */
struct detd_stats {
    size_t size;       /* the caller sets sizeof(struct detd_stats) */
    uint64_t outages;  /* times the daemon went away after the handle had
                          reached it, in this process: one per outage,
                          however many calls waited through it */
    int64_t down_ms;   /* how long the current outage has lasted; 0: none */
    uint64_t attaches; /* sessions attached in this process (1 + the
                          re-attaches) */
    uint64_t claims_renewed; /* claims taken again after a re-attach */
    uint32_t reconnect_ms;   /* the handle's reconnect window */
};

/*
 * Fill *ret_stats (ret_stats->size set by the caller; members past it are
 * not written). Never blocks on the network.
 * Returns 0 or DETD_EINVAL.
 */
int detd_client_stats(detd_client *client, struct detd_stats *ret_stats);

/*
 * The detail of the last failure of a detd_* call on the calling thread:
 * the daemon's own message ("key exceeds 4096 bytes") or the library's
 * ("cannot reach detd at '/run/detd/detd.sock': ..."). Never NULL; ""
 * when the last call succeeded or gave no detail. The string is
 * thread-local and valid until the next detd_* call on this thread.
 */
const char *detd_client_last_error(void);

/*
 * The socket path client uses (borrowed, lives as long as client), or
 * NULL for a NULL client.
 */
const char *detd_client_socket(const detd_client *client);

/*
 * The socket path detd_client_open(NULL, ...) would use: $DETD_SOCKET
 * when set and not empty; else DETD_DEFAULT_SOCKET when that socket
 * exists; else the socket of a daemon started on demand for this user
 * (by the Python package, where no daemon is configured) when it exists:
 * $XDG_RUNTIME_DIR/detd/detd.sock, or /tmp/detd-<uid>/detd.sock without
 * XDG_RUNTIME_DIR; else DETD_DEFAULT_SOCKET. The string is borrowed from
 * the environment, static or thread-local; never NULL.
 */
const char *detd_client_default_socket(void);

/* The library's version string, e.g. "0.1.0". */
const char *detd_version(void);

#ifdef __cplusplus
}
#endif

#endif /* DETD_CLIENT_H */
