/*
 * detd_autotune(): one coordinated timing pass for a native (C, C++,
 * CUDA) autotuner, added in 0.4.
 *
 * A native autotuner has a kernel with several variants (tile sizes,
 * template instantiations, CUTLASS configurations) and a key (the problem
 * shape, the dtypes). detd_autotune() asks the daemon which variant to use
 * for the key through the same calls the Triton hook makes (detd_decide(),
 * detd_report(), detd_observe()), so the same rules hold:
 *
 *  - A decided key (stored, from a table, an import or an override) is
 *    answered at once: nothing is timed, on any rerun either.
 *  - An undecided key is timed once in the whole cluster: one process is
 *    designated, every other asking process waits server-side. The
 *    designated process times every candidate (CUDA events, or the
 *    caller's timer), reports every timing, and the daemon commits the
 *    winner: lowest median, ties broken by the config string, first writer
 *    wins. Every process gets the committed candidate, also the timing
 *    process when its own fastest differed.
 *  - The timing process dying, or its pass outlasting the daemon's pass
 *    deadline, passes the claim to the next waiter (a takeover). A report
 *    refused as stale (the claim moved on, or the daemon restarted) makes
 *    this call ask again and report the timings it already has: a key is
 *    timed at most once per process.
 *  - A candidate whose launch fails is reported failed (never the
 *    winner). A pass in which every candidate failed ends with
 *    DETD_ENOCAND in the timing process, and in every process waiting for
 *    the key or asking later (the daemon keeps the failure: the key is not
 *    timed again until its kernel id changes or `detctl reset` clears it).
 *  - The choice is observed (detd_observe(), governed), so `detctl
 *    verify` compares native launches across processes and nodes with the
 *    Triton ones.
 *
 * Kernel ids. key->kernel must be "native::<name>@<guard>": <name> names
 * the kernel (any text without '@', C++ scopes welcome:
 * "native::mylib::rowsum@3f2a"), <guard> is its code version, to change
 * whenever the kernel's code changes (a hash of its source or binary, a
 * version string) so that a changed kernel is timed anew. Triton kernels
 * are "module:qualname@guard", where "::" cannot occur: the two never
 * collide. detd_native_kernel_id() builds one.
 *
 * Candidates are the caller's canonical config strings ("TILE=128,
 * ITEMS=4"): distinct, non-empty, at most DETD_AUTOTUNE_MAX_CONFIG_BYTES
 * each; the key string is the caller's canonical key ("rows=4096,
 * cols=1024,dtype=float32"). A string must describe the same thing in
 * every process: they are compared byte for byte.
 *
 * Timing without a GPU. Without options.timer, CUDA events time the
 * launches; CUDA is loaded at run time (no link-time dependency):
 * $DETD_CUDA_LIBRARY when set, else a CUDA runtime already loaded by the
 * process, else the driver libcuda.so.1. Without a usable CUDA (no
 * library, no device) detd_autotune() returns -ENODEV before asking the
 * daemon, with detd_client_last_error() naming the library and the CUDA
 * error, unless the caller supplies options.timer.
 *
 * Threads: detd_autotune() may be called from several threads at once,
 * on one client. The launches run on the calling thread.
 */
#ifndef DETD_AUTOTUNE_H
#define DETD_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "detd/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The prefix of every native kernel id. */
#define DETD_NATIVE_PREFIX "native::"

/* Limits checked by detd_autotune() before anything is asked or timed. */
#define DETD_AUTOTUNE_MAX_CONFIG_BYTES 1024 /* one candidate string */
#define DETD_AUTOTUNE_MAX_REPS 1024         /* timed launches per candidate */
#define DETD_AUTOTUNE_MAX_WARMUP 1024       /* untimed launches */

/* The defaults detd_autotune_options_init() sets; a zero reps or
 * timeout_ms means the default too. */
#define DETD_AUTOTUNE_DEFAULT_WARMUP 3
#define DETD_AUTOTUNE_DEFAULT_REPS 20
#define DETD_AUTOTUNE_DEFAULT_TIMEOUT_MS 600000

/*
 * Launch candidate `index` (config: key->candidates[index], borrowed for
 * the call) once, asynchronously, on the stream given in the options
 * (with CUDA events) or however the caller's timer expects. Returns 0 when
 * the launch was issued, nonzero when it could not be (the candidate then
 * counts as failed): a launch through the CUDA runtime should return
 * cudaGetLastError() != cudaSuccess, as the runtime keeps that error per
 * runtime instance, which need not be the one libdetd loaded.
 */
typedef int (*detd_launch_cb)(void *launch_user, size_t index,
                              const char *config);

/*
 * A caller's timer, replacing CUDA events: measure candidate `index`
 * (config borrowed for the call), usually by calling
 * launch(launch_user, index, config) warmup times untimed and then reps
 * times timed, and write reps samples in milliseconds into ret_ms[0..reps)
 * (the daemon uses their median). Returns 0 when measured, nonzero when
 * the candidate failed. A sample that is negative, NaN or infinite also
 * makes the candidate fail. Since 0.7, DETD_EENV says this process's
 * environment cannot run the pass at all (no device, a library missing:
 * nothing about this candidate): the pass stops, its claim is given back
 * (detd_claim_release()), nothing is stored, and detd_autotune() returns
 * DETD_EENV here and in every process waiting for the key.
 */
typedef int (*detd_timer_cb)(void *timer_user, size_t index, const char *config,
                             detd_launch_cb launch, void *launch_user,
                             unsigned warmup, unsigned reps, double *ret_ms);

/* Flags for detd_autotune_options.flags. */
#define DETD_AUTOTUNE_NO_CLAIM 0x1   /* pinned: never time (DETD_ENOTFOUND) */
#define DETD_AUTOTUNE_NO_OBSERVE 0x2 /* do not record the launch for verify */

/*
 * Options. Initialize with detd_autotune_options_init() (which sets size),
 * then change what is needed. Members are appended only, behind size.
 */
struct detd_autotune_options {
    size_t size;     /* sizeof(struct detd_autotune_options) of the caller */
    unsigned warmup; /* untimed launches per candidate (0: none) */
    unsigned reps;   /* timed launches (samples) per candidate (0: default) */
    /* Budget for asking, waiting for another process's pass and reporting
     * (this process's own timing pass not counted); <= 0: default. */
    int64_t timeout_ms;
    int flags;    /* DETD_AUTOTUNE_* */
    void *stream; /* CUstream / cudaStream_t of the launches; NULL: default */
    detd_timer_cb timer; /* NULL: CUDA events */
    void *timer_user;
    /* Recorded with a timed decision as the tuner's version (provenance,
     * shown by `detctl decisions`); NULL: none. */
    const char *version;
};

/* Set *opts to the defaults (its size included). */
void detd_autotune_options_init(struct detd_autotune_options *opts);

/*
 * What a detd_autotune() call did. Set size to sizeof(struct
 * detd_autotune_result) before the call; members past the caller's size
 * are not written.
 */
struct detd_autotune_result {
    size_t size;
    size_t index;         /* the committed candidate */
    const char *config;   /* key->candidates[index] (borrowed from the key) */
    detd_source source;   /* where the decision came from (timed, table...) */
    int timed_here;       /* this call ran the timing pass */
    int takeover;         /* ... after the previous timing process left */
    int superseded;       /* ... and another claim's report decided it */
    unsigned claims_lost; /* reports refused as stale: asked again */
    size_t n_failed;      /* candidates that failed in this call's pass */
    uint32_t waited_ms;   /* held while another process timed the key */
    /* 0, or why recording the launch for verify failed (the choice stands
     * and is returned; verify then misses this process). */
    int observe_rc;
};

/*
 * Decide which candidate of key to launch (see the top of this file).
 * client: an open handle. key: namespace_ may be NULL, arch (e.g. "sm90":
 * detd_autotune_arch()) and key set, kernel a native kernel id, the
 * candidates as described above; table_key optional. launch: required,
 * called only in a timing pass; launch_user is passed to it. opts: NULL
 * for the defaults. All are borrowed for the call.
 * On success *ret_index is the committed candidate's index into
 * key->candidates (always one of them: an answer naming no candidate is
 * DETD_EPROTO), and *ret_result, when not NULL, says how it was decided.
 * On failure both are untouched.
 * Returns 0 or:
 *   DETD_EINVAL   a NULL or malformed argument; detd_client_last_error()
 *                 names it ("key->candidates[2] is NULL").
 *   DETD_ELIMIT   a size over its limit, named likewise (the key, a
 *                 candidate, the candidate count, reps, the report size).
 *   -ENODEV       no usable CUDA and no options.timer (nothing was asked).
 *   DETD_ENOCAND  every candidate failed in the key's timing pass (here
 *                 or in the process that timed it); the message names
 *                 the first candidate's error (0.7).
 *   DETD_EENV     the timer returned DETD_EENV here, or in the process
 *                 whose pass this call waited for (0.7): nothing stored.
 *   DETD_ENOTFOUND  DETD_AUTOTUNE_NO_CLAIM and nothing decided.
 *   DETD_ETIMEDOUT  no decision within timeout_ms.
 *   DETD_ECONNECT, DETD_EUNAVAILABLE, DETD_EPROTO, ... as detd_decide().
 */
int detd_autotune(detd_client *client, const struct detd_key *key,
                  detd_launch_cb launch, void *launch_user,
                  const struct detd_autotune_options *opts, size_t *ret_index,
                  struct detd_autotune_result *ret_result);

/*
 * Write the native kernel id "native::<name>@<guard>" into buf (size
 * bytes, NUL included). name: not empty, no '@'; guard: not empty, no
 * '@'. Returns 0, DETD_EINVAL (naming the argument through
 * detd_client_last_error()) or DETD_ELIMIT (buf too small; the key limit
 * DETD_MAX_KEY_BYTES bounds the id too).
 */
int detd_native_kernel_id(const char *name, const char *guard, char *buf,
                          size_t size);

/*
 * The compute capability of the current CUDA device as "sm<major><minor>"
 * (e.g. "sm90", the arch Triton keys use), found through the CUDA library
 * detd_autotune() would load. Returns 0, -ENODEV (no usable CUDA) or
 * DETD_ELIMIT (buf too small).
 */
int detd_autotune_arch(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* DETD_AUTOTUNE_H */
