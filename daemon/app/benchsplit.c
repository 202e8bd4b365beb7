/*
 * benchsplit: a timing pass's benchmarks split across the node's GPUs
 * (see benchsplit.h).
 */
#define _GNU_SOURCE
#include "app/benchsplit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/daemon.h"
#include "app/session.h"
#include "app/validate.h"
#include "detd/client.h"
#include "detd/error.h"

/* The owner of a candidate taken by the holder (else a helper's slot). */
#define OWNER_HOLDER (-1)

enum cand_state { CAND_FREE, CAND_TAKEN, CAND_GIVEN };

struct cand {
    char *config;
    enum cand_state state;
    int owner;  /* CAND_TAKEN, CAND_GIVEN: OWNER_HOLDER or a helper slot */
    double *ms; /* CAND_GIVEN: the helper's samples */
    size_t n_ms;
    int failed;
};

struct helper {
    uint64_t session;
    char *device;
    uint32_t index; /* its share_index */
    double *ref;    /* its latest reference samples */
    size_t n_ref;
};

struct split {
    char id[KEYID_HEX_LEN + 1];
    uint64_t claim_id;
    uint64_t holder; /* the session that opened it */
    char *device;    /* the holder's */
    size_t reference;
    struct cand *cands;
    size_t n;
    struct helper helpers[DAEMON_MAX_BENCH_HELPERS];
    size_t nhelpers;
    size_t samples; /* held: given ms and reference samples */
};

struct benchsplit {
    struct split *splits[DAEMON_MAX_BENCH_SPLITS];
    size_t n;
};

/* See benchsplit.h. */
int benchsplit_new(struct benchsplit **ret) {
    struct benchsplit *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return DETD_ENOMEM;
    *ret = b;
    return 0;
}

static void split_free(struct split *sp) {
    for (size_t i = 0; i < sp->n; i++) {
        free(sp->cands[i].config);
        free(sp->cands[i].ms);
    }
    for (size_t i = 0; i < sp->nhelpers; i++) {
        free(sp->helpers[i].device);
        free(sp->helpers[i].ref);
    }
    free(sp->cands);
    free(sp->device);
    free(sp);
}

/* See benchsplit.h. */
void benchsplit_free(struct benchsplit *b) {
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->n; i++)
        split_free(b->splits[i]);
    free(b);
}

/* Whether sp's claim is still the live claim of its key, held by the
 * session that opened it. */
static int split_live(const struct daemon *d, const struct split *sp) {
    struct engine_claim_info ci;
    return engine_claim_info(d->engine, sp->id, &ci) &&
           ci.claim_id == sp->claim_id && ci.session == sp->holder;
}

static void split_drop(struct benchsplit *b, size_t i) {
    split_free(b->splits[i]);
    b->splits[i] = b->splits[--b->n];
}

/* The live split of key id, or NULL; drops its split if that pass ended. */
static struct split *split_find(struct daemon *d, const char *id) {
    struct benchsplit *b = d->splits;
    for (size_t i = 0; i < b->n; i++) {
        if (strcmp(b->splits[i]->id, id) != 0)
            continue;
        if (split_live(d, b->splits[i]))
            return b->splits[i];
        split_drop(b, i);
        return NULL;
    }
    return NULL;
}

/* Drop the splits of every pass that ended. */
static void split_sweep(struct daemon *d) {
    struct benchsplit *b = d->splits;
    for (size_t i = b->n; i-- > 0;)
        if (!split_live(d, b->splits[i]))
            split_drop(b, i);
}

static struct cand *split_cand(struct split *sp, const char *config) {
    for (size_t i = 0; i < sp->n; i++)
        if (strcmp(sp->cands[i].config, config) == 0)
            return &sp->cands[i];
    return NULL;
}

static struct helper *split_helper(struct split *sp, uint64_t session) {
    for (size_t i = 0; i < sp->nhelpers; i++)
        if (sp->helpers[i].session == session)
            return &sp->helpers[i];
    return NULL;
}

/* A split of vk for claim, held by session on device, with reference
 * taken by the holder; NULL when out of memory. */
static struct split *split_new(const struct vkey *vk, uint64_t claim,
                               uint64_t session, const char *device,
                               const char *reference) {
    struct split *sp = calloc(1, sizeof(*sp));
    if (sp == NULL)
        return NULL;
    memcpy(sp->id, vk->id, sizeof(sp->id));
    sp->claim_id = claim;
    sp->holder = session;
    sp->device = strdup(device != NULL ? device : "");
    sp->cands = calloc(vk->k->n_candidates, sizeof(*sp->cands));
    if (sp->device == NULL || sp->cands == NULL)
        goto nomem;
    for (size_t i = 0; i < vk->k->n_candidates; i++) {
        sp->cands[i].config = strdup(vk->k->candidates[i]);
        if (sp->cands[i].config == NULL)
            goto nomem;
        sp->n++;
        if (strcmp(vk->k->candidates[i], reference) == 0) {
            sp->reference = i;
            sp->cands[i].state = CAND_TAKEN;
            sp->cands[i].owner = OWNER_HOLDER;
        }
    }
    return sp;
nomem:
    split_free(sp);
    return NULL;
}

/* ---- Decide's share path ---------------------------------------------- */

/* See benchsplit.h. */
int benchsplit_admit(struct daemon *d, const char *id,
                     const struct client_session *s, const char *device,
                     uint32_t *io_index) {
    if (d->splits == NULL || s == NULL || device == NULL || device[0] == '\0')
        return 0;
    struct split *sp = split_find(d, id);
    if (sp == NULL || s->id == sp->holder)
        return 0;
    const struct helper *old = split_helper(sp, s->id);
    if (old != NULL) {
        *io_index = old->index;
        return 1;
    }
    if (strcmp(device, sp->device) == 0 ||
        sp->nhelpers >= DAEMON_MAX_BENCH_HELPERS)
        return 0;
    for (size_t i = 0; i < sp->nhelpers; i++)
        if (strcmp(device, sp->helpers[i].device) == 0)
            return 0;
    char *dev = strdup(device);
    if (dev == NULL)
        return 0; /* a compile share helps too */
    struct helper *h = &sp->helpers[sp->nhelpers++];
    *h = (struct helper){.session = s->id, .device = dev, .index = *io_index};
    d->counters.bench_helpers++;
    log_info("session %" PRIu64 " (pid %d, rank %d) on device '%s' "
             "benchmarks a share of key %.12s as helper %u (the timing "
             "rank's device: '%s', %zu helpers)",
             s->id, (int)s->peer_pid, (int)s->rank, device, id, h->index,
             sp->device, sp->nhelpers);
    return 1;
}

/* ---- Share ------------------------------------------------------------ */

/*
 * Samples v[0..n) of field what: 1 to DAEMON_MAX_TIMING_SAMPLES of them,
 * each finite and >= 0 (> 0 when positive); of a failed candidate
 * (failed), only at most DAEMON_MAX_TIMING_SAMPLES. Returns 0, or -1
 * after answering call INVALID_ARGUMENT.
 */
static int check_samples(rpc_call *call, const char *what, const double *v,
                         size_t n, int failed, int positive) {
    if (n > DAEMON_MAX_TIMING_SAMPLES) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "%s has %zu samples, over the limit of %d", what, n,
                 DAEMON_MAX_TIMING_SAMPLES);
        return -1;
    }
    if (!failed && n == 0) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "%s has no samples: at least 1 is required", what);
        return -1;
    }
    for (size_t i = 0; !failed && i < n; i++) {
        if (!isfinite(v[i]) || v[i] < 0 || (positive && v[i] == 0)) {
            rpc_fail(call, RPC_INVALID_ARGUMENT,
                     "%s[%zu] is %g: a sample is finite and %s", what, i, v[i],
                     positive ? "> 0" : ">= 0");
            return -1;
        }
    }
    return 0;
}

/* The checks of a helper's gift that need no split: every config a
 * candidate of vk, every sample sound, reference_ms with any timing. */
static int check_gift(rpc_call *call, const struct vkey *vk,
                      const Detd__V1__ShareRequest *req) {
    char what[64];
    if (req->n_timings > vk->k->n_candidates) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "timings has %zu entries, over the key's %zu candidates",
                 req->n_timings, vk->k->n_candidates);
        return -1;
    }
    for (size_t i = 0; i < req->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = req->timings[i];
        if (!validate_has_candidate(vk->k, t->config)) {
            rpc_fail(call, RPC_INVALID_ARGUMENT,
                     "timings[%zu].config '%.200s' is not one of the key's "
                     "candidates",
                     i, t->config);
            return -1;
        }
        snprintf(what, sizeof what, "timings[%zu].ms", i);
        if (check_samples(call, what, t->ms, t->n_ms, t->failed, 0) != 0)
            return -1;
    }
    if (req->n_timings > 0 || req->n_reference_ms > 0)
        return check_samples(call, "reference_ms", req->reference_ms,
                             req->n_reference_ms, 0, 1);
    return 0;
}

/* The checks of a helper's gift against split sp: each config taken by
 * helper h and not given yet, nor twice in the call; the samples within
 * DAEMON_MAX_BENCH_SAMPLES. */
static int check_gift_taken(rpc_call *call, struct split *sp, int h,
                            const Detd__V1__ShareRequest *req) {
    /* New reference samples replace the helper's old ones. */
    size_t held =
        sp->samples - (req->n_reference_ms > 0 ? sp->helpers[h].n_ref : 0);
    size_t add = req->n_reference_ms;
    for (size_t i = 0; i < req->n_timings; i++) {
        const char *config = req->timings[i]->config;
        const struct cand *c = split_cand(sp, config);
        const char *why = NULL;
        if (c == NULL || c->owner != h || c->state == CAND_FREE)
            why = "was not taken by this helper (or the timing rank took it "
                  "back)";
        else if (c->state == CAND_GIVEN)
            why = "was given already";
        for (size_t j = 0; why == NULL && j < i; j++)
            if (strcmp(req->timings[j]->config, config) == 0)
                why = "is given twice in this call";
        if (why != NULL) {
            rpc_fail(call, RPC_INVALID_ARGUMENT,
                     "timings[%zu].config '%.200s' %s", i, config, why);
            return -1;
        }
        add += req->timings[i]->n_ms;
    }
    if (held + add > DAEMON_MAX_BENCH_SAMPLES) {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED,
                 "timings: the split of key %.12s would hold %zu samples, "
                 "over the limit of %d (DAEMON_MAX_BENCH_SAMPLES)",
                 sp->id, held + add, DAEMON_MAX_BENCH_SAMPLES);
        return -1;
    }
    return 0;
}

static double *samples_dup(const double *v, size_t n) {
    double *c = malloc((n > 0 ? n : 1) * sizeof(*c));
    if (c != NULL && n > 0)
        memcpy(c, v, n * sizeof(*c));
    return c;
}

/* Store helper h's gift (checked): all copies are made before anything
 * changes. Returns 0 or DETD_ENOMEM (nothing changed). */
static int split_give(struct split *sp, int h,
                      const Detd__V1__ShareRequest *req) {
    size_t n = req->n_timings;
    double **ms = calloc(n + 1, sizeof(*ms));
    double *ref = NULL;
    if (ms == NULL)
        return DETD_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if ((ms[i] = samples_dup(req->timings[i]->ms, req->timings[i]->n_ms)) ==
            NULL)
            goto nomem;
    if (req->n_reference_ms > 0 &&
        (ref = samples_dup(req->reference_ms, req->n_reference_ms)) == NULL)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        struct cand *c = split_cand(sp, req->timings[i]->config);
        c->state = CAND_GIVEN;
        c->ms = ms[i];
        c->n_ms = req->timings[i]->n_ms;
        c->failed = req->timings[i]->failed;
        sp->samples += c->n_ms;
    }
    if (ref != NULL) {
        struct helper *hp = &sp->helpers[h];
        sp->samples -= hp->n_ref;
        free(hp->ref);
        hp->ref = ref;
        hp->n_ref = req->n_reference_ms;
        sp->samples += hp->n_ref;
    }
    free(ms);
    return 0;
nomem:
    for (size_t i = 0; i < n; i++)
        free(ms[i]);
    free(ms);
    return DETD_ENOMEM;
}

/* Answer call: open, granted, sp's reference, and with collect every
 * given result and the candidates taken by helpers and not given. */
static void reply_share(rpc_call *call, const struct split *sp, int granted,
                        int collect) {
    Detd__V1__ShareResponse resp = DETD__V1__SHARE_RESPONSE__INIT;
    Detd__V1__ShareTiming *st = NULL, **stp = NULL;
    Detd__V1__CandidateTiming *ct = NULL;
    char **pending = NULL;
    resp.api_version = DETD_API_VERSION;
    resp.open = sp != NULL;
    resp.granted = granted;
    if (sp != NULL)
        resp.reference = sp->cands[sp->reference].config;
    if (sp != NULL && collect) {
        st = calloc(sp->n, sizeof(*st));
        stp = calloc(sp->n, sizeof(*stp));
        ct = calloc(sp->n, sizeof(*ct));
        pending = calloc(sp->n, sizeof(*pending));
        if (st == NULL || stp == NULL || ct == NULL || pending == NULL) {
            rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < sp->n; i++) {
            const struct cand *c = &sp->cands[i];
            if (c->state == CAND_TAKEN && c->owner != OWNER_HOLDER)
                pending[resp.n_pending++] = c->config;
            if (c->state != CAND_GIVEN)
                continue;
            const struct helper *h = &sp->helpers[c->owner];
            size_t k = resp.n_given++;
            Detd__V1__CandidateTiming ti = DETD__V1__CANDIDATE_TIMING__INIT;
            ti.config = c->config;
            ti.ms = c->ms;
            ti.n_ms = c->n_ms;
            ti.failed = c->failed;
            ct[k] = ti;
            Detd__V1__ShareTiming si = DETD__V1__SHARE_TIMING__INIT;
            si.timing = &ct[k];
            si.device = h->device;
            si.reference_ms = h->ref;
            si.n_reference_ms = h->n_ref;
            si.helper = h->index;
            st[k] = si;
            stp[k] = &st[k];
        }
        resp.given = stp;
        resp.pending = pending;
    }
    rpc_reply(call, &resp.base);
out:
    free(st);
    free(stp);
    free(ct);
    free(pending);
}

/* A holder's call (req->claim_id, of session s, checked). */
static void share_holder(struct daemon *d, rpc_call *call,
                         const struct vkey *vk, const struct client_session *s,
                         const Detd__V1__ShareRequest *req) {
    if (req->n_timings > 0 || req->n_reference_ms > 0) {
        d->counters.rejected++;
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "%s: the timing rank gives nothing (it reports every "
                 "candidate with Report); only helpers give timings",
                 req->n_timings > 0 ? "timings" : "reference_ms");
        return;
    }
    struct engine_claim_info ci;
    if (!engine_claim_info(d->engine, vk->id, &ci) ||
        ci.claim_id != req->claim_id || ci.session != s->id) {
        rpc_fail(call, RPC_FAILED_PRECONDITION,
                 "claim %" PRIu64 " is not the live claim of key %.12s held "
                 "by session %" PRIu64 " (it was reported, released, expired "
                 "or passed to another rank): no split",
                 req->claim_id, vk->id, s->id);
        return;
    }
    const char *take = req->take != NULL ? req->take : "";
    struct split *sp = split_find(d, vk->id);
    int granted = 0;
    if (sp == NULL) {
        if (take[0] == '\0') {
            d->counters.rejected++;
            rpc_fail(call, RPC_INVALID_ARGUMENT,
                     "take is required: the timing rank's first Share opens "
                     "the split of key %.12s with the reference",
                     vk->id);
            return;
        }
        struct benchsplit *b = d->splits;
        if (b->n >= DAEMON_MAX_BENCH_SPLITS)
            split_sweep(d);
        if (b->n >= DAEMON_MAX_BENCH_SPLITS) {
            d->counters.busy++;
            rpc_fail(call, RPC_RESOURCE_EXHAUSTED,
                     "open benchmark splits limit (%d, "
                     "DAEMON_MAX_BENCH_SPLITS) reached: time key %.12s alone",
                     DAEMON_MAX_BENCH_SPLITS, vk->id);
            return;
        }
        sp = split_new(vk, req->claim_id, s->id, req->device, take);
        if (sp == NULL) {
            rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        b->splits[b->n++] = sp;
        d->counters.bench_splits++;
        granted = 1;
        log_info("session %" PRIu64 " (pid %d, rank %d) opened the benchmark "
                 "split of claim %" PRIu64 " on key %.12s (%s) on device "
                 "'%s', reference '%s', %zu candidates",
                 s->id, (int)s->peer_pid, (int)s->rank, req->claim_id, vk->id,
                 vk->k->kernel, sp->device, take, sp->n);
    } else if (take[0] != '\0') {
        struct cand *c = split_cand(sp, take);
        if (c != NULL && c->state == CAND_FREE) {
            c->state = CAND_TAKEN;
            c->owner = OWNER_HOLDER;
            granted = 1;
        } else if (c != NULL && req->reclaim && c->state == CAND_TAKEN &&
                   c->owner != OWNER_HOLDER) {
            log_debug("the timing rank of key %.12s took '%s' back from "
                      "helper %u",
                      vk->id, take, sp->helpers[c->owner].index);
            c->owner = OWNER_HOLDER;
            d->counters.bench_reclaimed++;
            granted = 1;
        }
    }
    reply_share(call, sp, granted, req->collect);
}

/* A helper's call (claim_id 0, of session s, checked). */
static void share_helper(struct daemon *d, rpc_call *call,
                         const struct vkey *vk, const struct client_session *s,
                         const Detd__V1__ShareRequest *req) {
    if (req->collect || req->reclaim) {
        d->counters.rejected++;
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "%s: only the timing rank (claim_id) may %s",
                 req->collect ? "collect" : "reclaim",
                 req->collect ? "collect" : "take back a candidate");
        return;
    }
    if (check_gift(call, vk, req) != 0) {
        d->counters.rejected++;
        return;
    }
    struct split *sp = split_find(d, vk->id);
    if (sp == NULL) {
        reply_share(call, NULL, 0, 0); /* the pass is over */
        return;
    }
    const struct helper *hp = split_helper(sp, s->id);
    if (hp == NULL) {
        rpc_fail(call, RPC_FAILED_PRECONDITION,
                 "session %" PRIu64 " was not given a benchmark share of key "
                 "%.12s (ask Decide with share and bench, on a device of its "
                 "own)",
                 s->id, vk->id);
        return;
    }
    int h = (int)(hp - sp->helpers);
    if (check_gift_taken(call, sp, h, req) != 0) {
        d->counters.rejected++;
        return;
    }
    if (split_give(sp, h, req) != 0) {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    d->counters.bench_given += req->n_timings;
    int granted = 0;
    if (req->take != NULL && req->take[0] != '\0') {
        struct cand *c = split_cand(sp, req->take);
        if (c != NULL && c->state == CAND_FREE) {
            c->state = CAND_TAKEN;
            c->owner = h;
            granted = 1;
        }
    }
    reply_share(call, sp, granted, 0);
}

/* See benchsplit.h. */
void benchsplit_share(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ShareRequest *req = (Detd__V1__ShareRequest *)ev->msg;
    struct vkey vk;
    if (validate_pass_call(d->cfg->ns, ev->call, req->client, req->key,
                           req->device, &vk) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    if (req->take != NULL && req->take[0] != '\0' &&
        !validate_has_candidate(vk.k, req->take)) {
        d->counters.rejected++;
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "take '%.200s' is not one of the key's candidates", req->take);
        goto free_msg;
    }
    struct client_session *s;
    if (session_of_call(d, ev->call, req->session_id, &s) != 0)
        goto free_msg;
    if (s == NULL) {
        rpc_fail(ev->call, RPC_FAILED_PRECONDITION,
                 "session_id %" PRIu64 " names no attached session: only "
                 "attached processes share a timing pass",
                 req->session_id);
        goto free_msg;
    }
    if (req->claim_id != 0)
        share_holder(d, ev->call, &vk, s, req);
    else
        share_helper(d, ev->call, &vk, s, req);
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
