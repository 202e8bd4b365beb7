/* autotune: detd_autotune(), a native autotuner's ask / time / report /
 * observe flow over the public calls of client.c. See detd/autotune.h. */
#define _GNU_SOURCE
#include "detd/autotune.h"
#include "autotune_cuda.h"
#include "clock.h"
#include "wire.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DETD_EXPORT __attribute__((visibility("default")))

/* Decide/Report rounds for one key, as the Triton hook: a claim lost to a
 * daemon restart or passed on costs one more round (timeout_ms bounds
 * them too). */
#define AUTOTUNE_MAX_ASKS 8

/* The daemon's reason for a pass in which every candidate failed; it
 * reaches the waiters and later askers as DETD_ENOCAND (libdetd 0.7;
 * DETD_ESTALE before) and the reporter as INVALID_ARGUMENT
 * (DETD_EINVAL). */
#define AUTOTUNE_NOCAND_TEXT "no candidate has a valid timing"

/* Room for the report's framing per timing and for the key's other
 * fields, in the estimate of the report's size. */
#define AUTOTUNE_TIMING_OVERHEAD 16
#define AUTOTUNE_KEY_OVERHEAD 1024

/* Options a caller built against the first release of this header are
 * at least this big. */
#define AUTOTUNE_OPTIONS_V1_SIZE                                               \
    (offsetof(struct detd_autotune_options, version) + sizeof(const char *))
#define AUTOTUNE_RESULT_V1_SIZE                                                \
    (offsetof(struct detd_autotune_result, observe_rc) + sizeof(int))

/* One timing pass's measurements, kept across lost claims. */
struct autotune_pass {
    struct detd_timing *timings; /* one per candidate, in key order */
    double *samples;             /* n_candidates * reps */
    char (*why)[200];            /* per candidate: why it failed, or "" */
    const char **errors;         /* per candidate: why[i] (the report's) */
    size_t n_failed;
    char first_failure[400]; /* "candidates[i] 'cfg': why" */
    /* The timer said this process's environment cannot run the pass
     * (DETD_EENV): what it timed is void, the claim is given back. */
    int env;
};

/* The NVIDIA driver's release from the first line of
 * /proc/driver/nvidia/version ("... Kernel Module [for <arch>]  580.159.04
 * ..."), as the Python client reads it (detd/_provenance.py); 0, or -1
 * when there is none. */
static int autotune_driver_release_(char *buf, size_t size) {
    char line[512];
    FILE *f = fopen("/proc/driver/nvidia/version", "re");
    if (f == NULL)
        return -1;
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    const char *p = got != NULL ? strstr(line, "Kernel Module") : NULL;
    if (p == NULL)
        return -1;
    p += strlen("Kernel Module");
    if (strncmp(p, " for ", 5) == 0)
        p += 5 + strcspn(p + 5, " \t\n");
    p += strspn(p, " \t");
    size_t n = strspn(p, "0123456789.");
    if (n == 0 || p[0] == '.' || n >= size)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 0;
}

/* How detd_autotune() measured, for the report's provenance
 * (detd_timing_info): CUDA events or the caller's timer, the launch
 * counts, and the driver where it can be read. */
static void autotune_provenance_(const struct detd_autotune_options *o,
                                 struct autotune_cuda *cuda, char *driver,
                                 size_t driver_size,
                                 struct detd_timing_info *ti) {
    memset(ti, 0, sizeof *ti);
    ti->benchmarker =
        o->timer != NULL ? "detd_autotune:timer" : "detd_autotune:cuda_events";
    ti->warmup = o->warmup;
    ti->rep = o->reps != 0 ? o->reps : DETD_AUTOTUNE_DEFAULT_REPS;
    ti->return_mode = "median of per-launch samples; warmup and rep count "
                      "launches";
    driver[0] = '\0';
    if (autotune_driver_release_(driver, driver_size) < 0 && cuda != NULL)
        (void)autotune_cuda_driver(cuda, driver, driver_size);
    ti->driver = driver;
}

DETD_EXPORT void detd_autotune_options_init(struct detd_autotune_options *o) {
    if (o == NULL)
        return;
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    o->warmup = DETD_AUTOTUNE_DEFAULT_WARMUP;
    o->reps = DETD_AUTOTUNE_DEFAULT_REPS;
    o->timeout_ms = DETD_AUTOTUNE_DEFAULT_TIMEOUT_MS;
}

/* Whether kernel is "native::<name>@<guard>" (name and guard non-empty,
 * one '@'). */
static int autotune_kernel_ok_(const char *kernel) {
    size_t p = strlen(DETD_NATIVE_PREFIX);
    if (strncmp(kernel, DETD_NATIVE_PREFIX, p) != 0)
        return 0;
    const char *name = kernel + p;
    const char *at = strchr(name, '@');
    return at != NULL && at != name && at[1] != '\0' &&
           strchr(at + 1, '@') == NULL;
}

static int autotune_cmp_str_(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The candidates: present, non-empty, capped, distinct. */
static int autotune_check_candidates_(const struct detd_key *k,
                                      size_t *ret_bytes) {
    size_t n = k->n_candidates, bytes = 0;
    if (n == 0) {
        wire_set_error("key->n_candidates is 0: nothing to choose from");
        return DETD_EINVAL;
    }
    if (n > DETD_MAX_CANDIDATES) {
        wire_set_error("key->n_candidates %zu exceeds the limit of %d", n,
                       DETD_MAX_CANDIDATES);
        return DETD_ELIMIT;
    }
    if (k->candidates == NULL) {
        wire_set_error("key->candidates is NULL (key->n_candidates %zu)", n);
        return DETD_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *c = k->candidates[i];
        if (c == NULL || c[0] == '\0') {
            wire_set_error("key->candidates[%zu] is %s", i,
                           c == NULL ? "NULL" : "empty");
            return DETD_EINVAL;
        }
        size_t len = strnlen(c, DETD_AUTOTUNE_MAX_CONFIG_BYTES + 1);
        if (len > DETD_AUTOTUNE_MAX_CONFIG_BYTES) {
            wire_set_error("key->candidates[%zu] exceeds %d bytes", i,
                           DETD_AUTOTUNE_MAX_CONFIG_BYTES);
            return DETD_ELIMIT;
        }
        bytes += len;
    }
    const char **sorted = malloc(n * sizeof(*sorted));
    if (sorted == NULL)
        return DETD_ENOMEM;
    memcpy(sorted, k->candidates, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), autotune_cmp_str_);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            size_t first = n, second = n;
            for (size_t j = 0; j < n; j++) {
                if (strcmp(k->candidates[j], sorted[i]) != 0)
                    continue;
                if (first == n)
                    first = j;
                else if (second == n)
                    second = j;
            }
            wire_set_error("key->candidates[%zu] repeats key->candidates[%zu] "
                           "'%.200s': candidates must be distinct",
                           second, first, sorted[i]);
            rc = DETD_EINVAL;
        }
    }
    free(sorted);
    *ret_bytes = bytes;
    return rc;
}

/* Check every argument before anything is asked or timed. */
static int autotune_check_(const detd_client *client, const struct detd_key *k,
                           detd_launch_cb launch,
                           const struct detd_autotune_options *o,
                           const size_t *ret_index,
                           const struct detd_autotune_result *ret_result) {
    const char *null = client == NULL      ? "client"
                       : k == NULL         ? "key"
                       : launch == NULL    ? "launch"
                       : ret_index == NULL ? "ret_index"
                                           : NULL;
    if (null != NULL) {
        wire_set_error("%s is NULL", null);
        return DETD_EINVAL;
    }
    if (o->size < AUTOTUNE_OPTIONS_V1_SIZE) {
        wire_set_error("opts->size is %zu, expected at least %zu: initialize "
                       "the options with detd_autotune_options_init()",
                       o->size, (size_t)AUTOTUNE_OPTIONS_V1_SIZE);
        return DETD_EINVAL;
    }
    if (ret_result != NULL && ret_result->size < AUTOTUNE_RESULT_V1_SIZE) {
        wire_set_error("ret_result->size is %zu, expected at least %zu: set "
                       "it to sizeof(struct detd_autotune_result)",
                       ret_result->size, (size_t)AUTOTUNE_RESULT_V1_SIZE);
        return DETD_EINVAL;
    }
    if ((o->flags & ~(DETD_AUTOTUNE_NO_CLAIM | DETD_AUTOTUNE_NO_OBSERVE)) !=
        0) {
        wire_set_error("opts->flags has unknown bits 0x%x", (unsigned)o->flags);
        return DETD_EINVAL;
    }
    if (o->reps > DETD_AUTOTUNE_MAX_REPS ||
        o->warmup > DETD_AUTOTUNE_MAX_WARMUP) {
        wire_set_error("opts->%s %u exceeds the limit of %d",
                       o->reps > DETD_AUTOTUNE_MAX_REPS ? "reps" : "warmup",
                       o->reps > DETD_AUTOTUNE_MAX_REPS ? o->reps : o->warmup,
                       o->reps > DETD_AUTOTUNE_MAX_REPS
                           ? DETD_AUTOTUNE_MAX_REPS
                           : DETD_AUTOTUNE_MAX_WARMUP);
        return DETD_ELIMIT;
    }
    const char *unset = k->arch == NULL || k->arch[0] == '\0' ? "key->arch"
                        : k->kernel == NULL                   ? "key->kernel"
                        : k->key == NULL                      ? "key->key"
                                                              : NULL;
    if (unset != NULL) {
        wire_set_error("%s is %s", unset,
                       unset[5] == 'a' && k->arch != NULL ? "empty" : "NULL");
        return DETD_EINVAL;
    }
    size_t klen = strnlen(k->key, DETD_MAX_KEY_BYTES + 1);
    if (klen > DETD_MAX_KEY_BYTES ||
        strnlen(k->kernel, DETD_MAX_KEY_BYTES + 1) > DETD_MAX_KEY_BYTES) {
        wire_set_error("key->%s exceeds %d bytes",
                       klen > DETD_MAX_KEY_BYTES ? "key" : "kernel",
                       DETD_MAX_KEY_BYTES);
        return DETD_ELIMIT;
    }
    if (!autotune_kernel_ok_(k->kernel)) {
        wire_set_error("key->kernel '%.200s' is not a native kernel id "
                       "\"native::<name>@<guard>\" (see "
                       "detd_native_kernel_id())",
                       k->kernel);
        return DETD_EINVAL;
    }
    size_t bytes = 0;
    int rc = autotune_check_candidates_(k, &bytes);
    if (rc < 0)
        return rc;
    /* The report carries the candidates twice (the key, the timings) and
     * every sample: it must fit one message. */
    unsigned reps = o->reps != 0 ? o->reps : DETD_AUTOTUNE_DEFAULT_REPS;
    size_t est =
        2 * bytes + klen + strlen(k->kernel) + AUTOTUNE_KEY_OVERHEAD +
        k->n_candidates * (AUTOTUNE_TIMING_OVERHEAD + 9 * (size_t)reps);
    if (est > DETD_MAX_MESSAGE_BYTES) {
        wire_set_error("the report of %zu candidates with %u samples each "
                       "would take about %zu bytes, over the message limit "
                       "of %d: use fewer candidates, shorter config strings "
                       "or fewer opts->reps",
                       k->n_candidates, reps, est, DETD_MAX_MESSAGE_BYTES);
        return DETD_ELIMIT;
    }
    return 0;
}

static void autotune_pass_free_(struct autotune_pass *p) {
    free(p->timings);
    free(p->samples);
    free(p->why);
    free(p->errors);
    p->timings = NULL;
    p->samples = NULL;
    p->why = NULL;
    p->errors = NULL;
}

/* Time every candidate once (this process is designated). */
static int autotune_time_all_(const struct detd_key *k, detd_launch_cb launch,
                              void *launch_user,
                              const struct detd_autotune_options *o,
                              struct autotune_cuda *cuda,
                              struct autotune_pass *p) {
    size_t n = k->n_candidates;
    unsigned reps = o->reps != 0 ? o->reps : DETD_AUTOTUNE_DEFAULT_REPS;
    unsigned warmup = o->warmup;
    p->timings = calloc(n, sizeof(*p->timings));
    p->samples = calloc(n * reps, sizeof(*p->samples));
    p->why = calloc(n, sizeof(*p->why));
    p->errors = calloc(n, sizeof(*p->errors));
    if (p->timings == NULL || p->samples == NULL || p->why == NULL ||
        p->errors == NULL) {
        autotune_pass_free_(p);
        return DETD_ENOMEM;
    }
    p->n_failed = 0;
    p->env = 0;
    p->first_failure[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *cfg = k->candidates[i];
        double *ms = p->samples + i * reps;
        char *why = p->why[i];
        int failed;
        if (o->timer != NULL) {
            int trc = o->timer(o->timer_user, i, cfg, launch, launch_user,
                               warmup, reps, ms);
            if (trc == DETD_EENV) {
                /* Nothing about the candidates: the pass stops here. */
                snprintf(p->first_failure, sizeof p->first_failure,
                         "the timer returned DETD_EENV for candidates[%zu] "
                         "'%.100s': this process's environment cannot run "
                         "the timing pass",
                         i, cfg);
                p->env = 1;
                return 0;
            }
            failed = trc != 0;
            if (failed)
                snprintf(why, sizeof p->why[i], "the timer failed (%d)", trc);
            for (unsigned r = 0; r < reps && !failed; r++) {
                if (!isfinite(ms[r]) || ms[r] < 0) {
                    snprintf(why, sizeof p->why[i],
                             "the timer gave sample %u = %g", r, ms[r]);
                    failed = 1;
                }
            }
        } else {
            failed =
                autotune_cuda_time(cuda, o->stream, launch, launch_user, i, cfg,
                                   warmup, reps, ms, why, sizeof p->why[i]);
        }
        p->timings[i].config = cfg;
        p->timings[i].ms = failed ? NULL : ms;
        p->timings[i].n_ms = failed ? 0 : reps;
        p->timings[i].failed = failed;
        p->errors[i] = failed ? why : NULL;
        if (failed && p->n_failed++ == 0)
            snprintf(p->first_failure, sizeof p->first_failure,
                     "candidates[%zu] '%.100s': %s", i, cfg, why);
    }
    return 0;
}

/* Whether the last error says the key's pass failed for every candidate. */
static int autotune_pass_failed_(int rc) {
    return (rc == DETD_ESTALE || rc == DETD_EINVAL || rc == DETD_ENOCAND) &&
           strstr(detd_client_last_error(), AUTOTUNE_NOCAND_TEXT) != NULL;
}

/* DETD_ENOCAND with the daemon's reason, the same code in every process. */
static int autotune_nocand_(const struct detd_key *k) {
    char reason[600];
    snprintf(reason, sizeof reason, "%s", detd_client_last_error());
    wire_set_error("every candidate of kernel %.200s key %.200s failed in the "
                   "timing pass: %s",
                   k->kernel, k->key, reason);
    return DETD_ENOCAND;
}

/* The index of config among the caller's candidates, or n. */
static size_t autotune_index_(const struct detd_key *k, const char *config) {
    for (size_t i = 0; config != NULL && i < k->n_candidates; i++)
        if (strcmp(k->candidates[i], config) == 0)
            return i;
    return k->n_candidates;
}

/* Whether the handle met an outage since it had met `outages`. */
static int autotune_outage_since_(detd_client *client, uint64_t outages) {
    struct detd_stats st = {.size = sizeof st};
    if (detd_client_stats(client, &st) < 0)
        return 1;
    return st.outages != outages || st.down_ms > 0;
}

/* Decide, and when designated time and report, until a decision (or an
 * error). *ret_answer: the decision (DECIDED); res: what happened. */
static int autotune_resolve_(detd_client *client, const struct detd_key *k,
                             detd_launch_cb launch, void *launch_user,
                             const struct detd_autotune_options *o,
                             struct autotune_cuda *cuda,
                             struct detd_autotune_result *res,
                             struct detd_answer **ret_answer) {
    struct autotune_pass pass = {0};
    struct detd_answer *a = NULL;
    int64_t budget =
        o->timeout_ms > 0 ? o->timeout_ms : DETD_AUTOTUNE_DEFAULT_TIMEOUT_MS;
    int64_t deadline = clock_mono_ms() + budget;
    int flags = (o->flags & DETD_AUTOTUNE_NO_CLAIM) ? DETD_DECIDE_NO_CLAIM : 0;
    int rc = DETD_ETIMEDOUT;
    int timed = 0;
    uint64_t waited = 0; /* held, over every Decide of the wait */
    /* The daemon answered this wait (another process holds the key), and
     * the outages the handle had met when it began: a last slice that
     * ends without its answer, with no outage since, is a daemon slow to
     * answer on a loaded machine, not one that was away. */
    int heard = 0;
    struct detd_stats st0 = {.size = sizeof st0};
    if (detd_client_stats(client, &st0) < 0)
        st0.outages = 0;

    wire_set_error("no decision within opts->timeout_ms=%lld",
                   (long long)budget);
    /* The rounds count designations: a TIMEOUT answered before the
     * budget ends (libdetd answers a tenth early) asks again for the rest
     * and is no round (docs/resolve-contract.md). */
    for (int rounds = 0; rounds < AUTOTUNE_MAX_ASKS;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) {
            wire_set_error("no decision within opts->timeout_ms=%lld",
                           (long long)budget);
            rc = DETD_ETIMEDOUT;
            break;
        }
        detd_answer_free(a);
        a = NULL;
        rc = detd_decide(client, k, flags, left, &a);
        if (rc == DETD_ETIMEDOUT)
            continue; /* the Decide's own deadline: the budget decides */
        if (rc < 0) {
            if (autotune_pass_failed_(rc))
                rc = autotune_nocand_(k);
            break;
        }
        if (a->outcome == DETD_OUTCOME_DECIDED) {
            waited += a->waited_ms;
            res->waited_ms =
                waited > UINT32_MAX ? UINT32_MAX : (uint32_t)waited;
            break;
        }
        if (a->outcome == DETD_OUTCOME_MISS) {
            wire_set_error("no decision for kernel %.200s key %.200s: none "
                           "stored and none in the tables "
                           "(DETD_AUTOTUNE_NO_CLAIM: nothing is timed)",
                           k->kernel, k->key);
            rc = DETD_ENOTFOUND;
            break;
        }
        if (a->outcome == DETD_OUTCOME_TIMEOUT && !a->daemon_away)
            heard = 1;
        if (a->outcome == DETD_OUTCOME_TIMEOUT && clock_mono_ms() < deadline) {
            waited += a->waited_ms;
            continue;
        }
        if (a->outcome != DETD_OUTCOME_DESIGNATED && a->daemon_away &&
            !(heard && !autotune_outage_since_(client, st0.outages))) {
            wire_set_error("no answer from the daemon at '%s' for kernel "
                           "%.200s key %.200s within opts->timeout_ms=%lld "
                           "(it was away, starting or just restarted)",
                           detd_client_socket(client), k->kernel, k->key,
                           (long long)budget);
            rc = DETD_ETIMEDOUT;
            break;
        }
        if (a->outcome != DETD_OUTCOME_DESIGNATED) {
            wire_set_error("timed out waiting for another process's timing "
                           "pass of kernel %.200s key %.200s (no decision "
                           "within opts->timeout_ms=%lld)",
                           k->kernel, k->key, (long long)budget);
            rc = DETD_ETIMEDOUT;
            break;
        }
        rounds++;
        res->takeover = res->takeover || a->takeover;
        if (!timed) {
            /* Measured once: designated again after a lost claim, the
             * timings of this key and candidate list are still valid. */
            int64_t t0 = clock_mono_ms();
            rc = autotune_time_all_(k, launch, launch_user, o, cuda, &pass);
            if (rc < 0) {
                /* Never reported: not to be taken again after a restart. */
                detd_claim_forget(client, a->claim_id);
                break;
            }
            deadline += clock_mono_ms() - t0;
            if (pass.env) {
                /* Give the claim back: nothing is stored, the key is
                 * timed again once the environment is fixed. */
                int64_t rl = deadline - clock_mono_ms();
                if (detd_claim_release(client, a->claim_id, k,
                                       pass.first_failure, rl > 0 ? rl : 1) < 0)
                    detd_claim_forget(client, a->claim_id); /* not again */
                wire_set_error("kernel %.200s key %.200s was not timed: %s; "
                               "the claim was given back and nothing was "
                               "stored",
                               k->kernel, k->key, pass.first_failure);
                rc = DETD_EENV;
                break;
            }
            timed = 1;
            res->timed_here = 1;
            res->n_failed = pass.n_failed;
        }
        struct detd_answer *r = NULL;
        int64_t rleft = deadline - clock_mono_ms();
        struct detd_timing_info ti;
        char driver[64];
        autotune_provenance_(o, cuda, driver, sizeof driver, &ti);
        struct detd_report_extra ex = {sizeof ex, pass.errors, &ti};
        rc = detd_report_ex(client, a->claim_id, k, pass.timings,
                            k->n_candidates, &ex, o->version,
                            rleft > 0 ? rleft : 1, &r);
        if (rc == DETD_ESTALE && !autotune_pass_failed_(rc)) {
            res->claims_lost++; /* passed on, or the daemon restarted */
            continue;
        }
        if (rc < 0) {
            if (pass.n_failed == k->n_candidates && autotune_pass_failed_(rc)) {
                wire_set_error("every candidate of kernel %.200s key %.200s "
                               "failed in this timing pass (%zu tried; "
                               "reported, so no other process times it); "
                               "first: %s",
                               k->kernel, k->key, k->n_candidates,
                               pass.first_failure);
                rc = DETD_ENOCAND;
            } else if (autotune_pass_failed_(rc)) {
                rc = autotune_nocand_(k);
            }
            break;
        }
        res->superseded = r->superseded;
        detd_answer_free(a);
        a = r;
        break;
    }
    autotune_pass_free_(&pass);
    if (rc == 0 && (a == NULL || a->outcome != DETD_OUTCOME_DECIDED)) {
        wire_set_error("kernel %.200s key %.200s: the claim was lost %u "
                       "times: no decision",
                       k->kernel, k->key, res->claims_lost);
        rc = DETD_ETIMEDOUT;
    }
    if (rc < 0) {
        detd_answer_free(a);
        return rc;
    }
    *ret_answer = a;
    return 0;
}

/* Copy what the caller's result has room for. */
static void autotune_result_out_(const struct detd_autotune_result *res,
                                 struct detd_autotune_result *out) {
    size_t n = out->size < sizeof(*res) ? out->size : sizeof(*res);
    size_t size = out->size;
    memcpy(out, res, n);
    out->size = size;
}

DETD_EXPORT int detd_autotune(detd_client *client, const struct detd_key *key,
                              detd_launch_cb launch, void *launch_user,
                              const struct detd_autotune_options *opts,
                              size_t *ret_index,
                              struct detd_autotune_result *ret_result) {
    struct detd_autotune_options dflt;
    struct autotune_cuda *cuda = NULL;
    struct detd_answer *a = NULL;
    struct detd_autotune_result res;
    int rc;

    wire_set_error(NULL);
    if (opts == NULL) {
        detd_autotune_options_init(&dflt);
        opts = &dflt;
    }
    rc = autotune_check_(client, key, launch, opts, ret_index, ret_result);
    if (rc < 0)
        return rc;
    if (opts->timer == NULL) {
        /* Before asking: a process that could not time must not take a
         * claim (it would hold the key until its pass deadline). */
        rc = autotune_cuda_open(&cuda);
        if (rc < 0)
            return rc;
    }
    memset(&res, 0, sizeof res);
    rc = autotune_resolve_(client, key, launch, launch_user, opts, cuda, &res,
                           &a);
    if (rc < 0)
        goto out;
    size_t idx = autotune_index_(key, a->config);
    if (idx == key->n_candidates) {
        wire_set_error("the daemon's config '%.200s' for kernel %.200s key "
                       "%.200s is not one of the %zu candidates",
                       a->config != NULL ? a->config : "", key->kernel,
                       key->key, key->n_candidates);
        rc = DETD_EPROTO;
        goto out;
    }
    res.size = sizeof res;
    res.index = idx;
    res.config = key->candidates[idx];
    res.source =
        a->source != DETD_SOURCE_UNSPECIFIED ? a->source : DETD_SOURCE_TIMED;
    if (!(opts->flags & DETD_AUTOTUNE_NO_OBSERVE)) {
        int64_t t = opts->timeout_ms > 0 && opts->timeout_ms < 10000
                        ? opts->timeout_ms
                        : 10000;
        res.observe_rc = detd_observe(client, key, res.config, res.source,
                                      DETD_OBSERVE_GOVERNED, t);
    }
    wire_set_error(NULL);
    *ret_index = idx;
    if (ret_result != NULL)
        autotune_result_out_(&res, ret_result);
out:
    detd_answer_free(a);
    autotune_cuda_close(cuda);
    return rc;
}

DETD_EXPORT int detd_native_kernel_id(const char *name, const char *guard,
                                      char *buf, size_t size) {
    wire_set_error(NULL);
    const char *bad = name == NULL                 ? "name is NULL"
                      : guard == NULL              ? "guard is NULL"
                      : buf == NULL                ? "buf is NULL"
                      : name[0] == '\0'            ? "name is empty"
                      : guard[0] == '\0'           ? "guard is empty"
                      : strchr(name, '@') != NULL  ? "name contains '@'"
                      : strchr(guard, '@') != NULL ? "guard contains '@'"
                                                   : NULL;
    if (bad != NULL) {
        wire_set_error("native kernel id: %s", bad);
        return DETD_EINVAL;
    }
    size_t need =
        strlen(DETD_NATIVE_PREFIX) + strlen(name) + 1 + strlen(guard) + 1;
    if (need > size || need > DETD_MAX_KEY_BYTES + 1) {
        wire_set_error("native kernel id needs %zu bytes, %s %zu", need,
                       need > size ? "buf has" : "over the limit of",
                       need > size ? size : (size_t)DETD_MAX_KEY_BYTES + 1);
        return DETD_ELIMIT;
    }
    snprintf(buf, size, "%s%s@%s", DETD_NATIVE_PREFIX, name, guard);
    return 0;
}

DETD_EXPORT int detd_autotune_arch(char *buf, size_t size) {
    struct autotune_cuda *cuda = NULL;
    wire_set_error(NULL);
    if (buf == NULL) {
        wire_set_error("buf is NULL");
        return DETD_EINVAL;
    }
    int rc = autotune_cuda_open(&cuda);
    if (rc < 0)
        return rc;
    rc = autotune_cuda_arch(cuda, buf, size);
    autotune_cuda_close(cuda);
    return rc;
}
