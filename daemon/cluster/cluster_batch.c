/*
 * cluster_batch: claims and commits of keys met together, one Txn each
 * (etcd_create_batch()). A worker that takes a claim (commit) job gathers
 * the other claim (commit) jobs queued then or within
 * CLUSTER_BATCH_WINDOW_MS, up to CLUSTER_BATCH_MAX distinct keys; other
 * workers leave those to it meanwhile.
 *
 * A claim: the claim key is created (under the node lease) only if it and
 * the key's decision are both absent: one Raft proposal, and a key
 * decided meanwhile costs no claim. A commit: the decision is created
 * only if absent, and this node's claim key (held under its lease) is
 * deleted in the same Txn, won or lost: one proposal for the decision
 * and the claim's end. Each key wins or loses on its own (etcd's nested
 * transactions), so safety is per key as before: a claim only if absent,
 * a decision only if absent.
 *
 * Worker threads; the job queue under c->mu.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "detd/error.h"
#include "cluster/cluster_codec.h"

/* Unlink and return the first queued job a worker may take: not a claim
 * or commit while another worker gathers those (c->mu held). */
struct job *cluster_take_job(cluster *c) {
    struct job *prev = NULL;
    for (struct job *j = c->jobs; j != NULL; prev = j, j = j->next) {
        if ((c->gathering & (1u << j->kind)) != 0)
            continue;
        if (prev != NULL)
            prev->next = j->next;
        else
            c->jobs = j->next;
        if (c->jobs_tail == j)
            c->jobs_tail = prev;
        j->next = NULL;
        return j;
    }
    return NULL;
}

/* Move queued jobs of kind whose id is not in batch yet into it, up to
 * CLUSTER_BATCH_MAX (c->mu held). */
void cluster_gather(cluster *c, enum job_kind kind, struct job **batch,
                    size_t *n) {
    struct job **pp = &c->jobs, *prev = NULL;
    while (*pp != NULL && *n < CLUSTER_BATCH_MAX) {
        struct job *j = *pp;
        int dup = j->kind != kind;
        for (size_t i = 0; !dup && i < *n; i++)
            dup = strcmp(batch[i]->id, j->id) == 0;
        if (dup) {
            prev = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (c->jobs_tail == j)
            c->jobs_tail = prev;
        j->next = NULL;
        batch[(*n)++] = j;
    }
}

/* One key of a batched claim or commit (do_claim(), do_commit()). */
struct bkey {
    struct job *j;
    char *ckey, *dkey;
    int done;
    int go; /* a recheck found the key free to claim */
};

/* Jobs of the batch still unanswered; those whose deadline passed are
 * answered with err (fail: CLAIM_FAILED or COMMITTED). Returns how many
 * remain and the earliest deadline among them. */
static size_t batch_left(cluster *c, struct bkey *b, size_t n, int err,
                         cluster_event_kind fail, int64_t *ret_deadline) {
    int64_t now = clock_mono_ms(), first = INT64_MAX;
    int stop = cluster_stopping(c);
    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        if (b[i].done)
            continue;
        if (err != 0 && (stop || b[i].j->deadline_ms <= now)) {
            cluster_post(c, fail, b[i].j->id, stop ? DETD_ECANCELLED : err, 0,
                         NULL, 0, 0, b[i].j->cookie);
            b[i].done = 1;
            continue;
        }
        if (b[i].j->deadline_ms < first)
            first = b[i].j->deadline_ms;
        left++;
    }
    *ret_deadline = first;
    return left;
}

/* The claim value: this node, this process, now. */
static char *claim_value(cluster *c) {
    json_t *o = json_pack("{s:s, s:s, s:I}", "node", c->node_id, "writer",
                          c->writer, "at_ms", (json_int_t)clock_unix_ms());
    char *v = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return v;
}

/* The reads before a claim, RECHECK_CHUNK keys per request: each key's
 * claim and decision, read at once (one round trip, no Raft proposal).
 * The claim held by another node (the usual answer while its pass runs):
 * say so without a write. The decision there (the commit deletes the
 * claim in the Txn that stores the decision, so a read that etcd answers
 * just after a commit, before the watch brought it, finds the claim
 * gone): answer it. Neither, or the claim ours: go set. Returns 0 or the
 * read's error. */
#define RECHECK_CHUNK (ETCD_GET_MANY_MAX / 2)
static int recheck(cluster *c, struct bkey **k, size_t n) {
    const char *keys[2 * RECHECK_CHUNK];
    struct etcd_kv kv[2 * RECHECK_CHUNK];
    for (size_t at = 0; at < n; at += RECHECK_CHUNK) {
        size_t m = n - at < RECHECK_CHUNK ? n - at : RECHECK_CHUNK;
        for (size_t i = 0; i < m; i++) {
            keys[2 * i] = k[at + i]->ckey;
            keys[2 * i + 1] = k[at + i]->dkey;
        }
        int err = etcd_get_many(c->etcd, keys, 2 * m, kv);
        cluster_note(c, err, "claim");
        if (err != 0)
            return err;
        for (size_t i = 0; i < m; i++) {
            struct bkey *b = k[at + i];
            struct etcd_kv *ck = &kv[2 * i], *dk = &kv[2 * i + 1];
            int mine = ck->key != NULL &&
                       cluster_value_is_mine(c, ck->value, ck->value_len);
            if (dk->key != NULL) {
                cluster_post(c, CLUSTER_EV_DECISION, b->j->id, 0, 0, dk->value,
                             dk->value_len, 0, 0);
                if (mine)
                    cluster_drop_claim_key(c, b->ckey);
                b->done = 1;
            } else if (ck->key != NULL && !mine) {
                cluster_post(c, CLUSTER_EV_CLAIM_LOST, b->j->id, 0, 0,
                             ck->value, ck->value_len, 0, 0);
                b->done = 1;
            } else {
                b->go = 1;
            }
            etcd_kv_clear(ck);
            etcd_kv_clear(dk);
        }
    }
    return 0;
}

/* What one key's claim Txn found: answer its job. */
static void claim_result(cluster *c, struct bkey *k, struct etcd_create *o) {
    int mine = o->won || o->same_value ||
               (o->kv.key != NULL &&
                cluster_value_is_mine(c, o->kv.value, o->kv.value_len));
    k->done = 1;
    if (o->guard_kv.key != NULL) {
        /* Decided already: the claim was not made (a claim of an earlier
         * attempt of this call is dropped). */
        cluster_post(c, CLUSTER_EV_DECISION, k->j->id, 0, 0, o->guard_kv.value,
                     o->guard_kv.value_len, 0, 0);
        if (o->kv.key != NULL && mine)
            cluster_drop_claim_key(c, k->ckey);
    } else if (mine) {
        cluster_post(c, CLUSTER_EV_CLAIMED, k->j->id, 0, 1, NULL, 0, 0, 0);
    } else {
        cluster_post(c, CLUSTER_EV_CLAIM_LOST, k->j->id, 0, 0, o->kv.value,
                     o->kv.value_len, 0, 0);
    }
}

static void do_claim(cluster *c, struct bkey *b, size_t n);
static void do_commit(cluster *c, struct bkey *b, size_t n);

/* A batch etcd refused as such (a --max-txn-ops below ours): each half
 * on its own; one key alone fails with err. */
static void split(cluster *c, struct bkey *b, size_t n, int err,
                  cluster_event_kind fail,
                  void (*run)(cluster *, struct bkey *, size_t)) {
    struct bkey *rest = calloc(n, sizeof(*rest));
    size_t m = 0;
    for (size_t i = 0; rest != NULL && i < n; i++)
        if (!b[i].done)
            rest[m++] = b[i];
    if (rest == NULL || m <= 1) {
        for (size_t i = 0; i < n; i++)
            if (!b[i].done)
                cluster_post(c, fail, b[i].j->id,
                             rest == NULL ? DETD_ENOMEM : err, 0, NULL, 0, 0,
                             b[i].j->cookie);
    } else {
        run(c, rest, m / 2);
        run(c, rest + m / 2, m - m / 2);
    }
    for (size_t i = 0; i < n; i++)
        b[i].done = 1;
    free(rest);
}

/* Claim the batch's keys in one Txn: each claim key is created (under the
 * node lease) only if it and the key's decision are absent. Rechecks read
 * both keys first (recheck()). */
static void do_claim(cluster *c, struct bkey *b, size_t n) {
    char *val = claim_value(c);
    struct etcd_create *ops = calloc(n, sizeof(*ops));
    struct bkey **of = calloc(n, sizeof(*of));
    int err = DETD_ENOMEM;
    int64_t first;
    if (val == NULL || ops == NULL || of == NULL)
        goto out;
    err = 0;
    while (batch_left(c, b, n, err, CLUSTER_EV_CLAIM_FAILED, &first) > 0) {
        if (err != 0)
            cluster_nap(c, CLUSTER_BACKOFF_MS);
        etcd_thread_deadline(first);
        int64_t lease = cluster_wait_lease(c, first);
        err = DETD_EUNAVAILABLE;
        if (lease == 0)
            continue;
        /* Rechecks read first; then the keys still open claim. */
        size_t m = 0, r = 0;
        for (size_t i = 0; i < n; i++) {
            b[i].go = 0;
            if (!b[i].done && b[i].j->recheck)
                of[r++] = &b[i];
        }
        err = r > 0 ? recheck(c, of, r) : 0;
        etcd_thread_deadline(first); /* a claim key dropped took its own */
        if (err != 0 && !cluster_transient(err))
            break;
        if (err != 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (!b[i].done && (!b[i].j->recheck || b[i].go))
                of[m++] = &b[i];
        if (m == 0)
            continue;
        for (size_t i = 0; i < m; i++)
            ops[i] = (struct etcd_create){.key = of[i]->ckey,
                                          .value = val,
                                          .value_len = strlen(val),
                                          .lease = lease,
                                          .guard = of[i]->dkey};
        err = etcd_create_batch(c->etcd, ops, m, NULL);
        cluster_note(c, err, "claim");
        for (size_t i = 0; err == 0 && i < m; i++)
            claim_result(c, of[i], &ops[i]);
        for (size_t i = 0; i < m; i++)
            etcd_create_clear(&ops[i]);
        if (err != 0 && !cluster_transient(err))
            break;
    }
out:
    if (err != 0 && !cluster_transient(err))
        split(c, b, n, err, CLUSTER_EV_CLAIM_FAILED, do_claim);
    free(val);
    free(ops);
    free(of);
}

/* Commit the batch's decisions in one Txn: each is created only if
 * absent, and its claim key deleted in the same Txn when it is this
 * node's (held under its lease), whoever won: one Raft proposal for the
 * decision and the claim's end. */
static void do_commit(cluster *c, struct bkey *b, size_t n) {
    struct etcd_create *ops = calloc(n, sizeof(*ops));
    struct bkey **of = calloc(n, sizeof(*of));
    int err = ops == NULL || of == NULL ? DETD_ENOMEM : 0;
    int64_t first;
    while (err == 0 || cluster_transient(err)) {
        if (batch_left(c, b, n, err, CLUSTER_EV_COMMITTED, &first) == 0)
            break;
        if (err != 0)
            cluster_nap(c, CLUSTER_BACKOFF_MS);
        etcd_thread_deadline(first);
        pthread_mutex_lock(&c->mu);
        int64_t lease = c->lease_id;
        pthread_mutex_unlock(&c->mu);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (b[i].done)
                continue;
            of[m] = &b[i];
            ops[m++] =
                (struct etcd_create){.key = b[i].dkey,
                                     .value = b[i].j->value,
                                     .value_len = b[i].j->value_len,
                                     .drop = lease != 0 ? b[i].ckey : NULL,
                                     .drop_lease = lease};
        }
        err = etcd_create_batch(c->etcd, ops, m, NULL);
        cluster_note(c, err, "commit");
        for (size_t i = 0; err == 0 && i < m; i++) {
            struct etcd_create *o = &ops[i];
            char w[512], mine[512];
            cluster_value_writer(o->kv.value, o->kv.value_len, w, sizeof(w));
            cluster_value_writer(o->value, o->value_len, mine, sizeof(mine));
            int won = o->won || o->same_value || strcmp(w, mine) == 0;
            if (o->kv.key == NULL) { /* not decided, yet refused */
                err = DETD_EPROTO;
                break;
            }
            cluster_post(c, CLUSTER_EV_COMMITTED, of[i]->j->id, 0, won,
                         o->kv.value, o->kv.value_len, 0, of[i]->j->cookie);
            of[i]->done = 1;
        }
        for (size_t i = 0; i < m; i++)
            etcd_create_clear(&ops[i]);
    }
    if (err != 0 && !cluster_transient(err))
        split(c, b, n, err, CLUSTER_EV_COMMITTED, do_commit);
    free(ops);
    free(of);
}

/* Run a batch of claim or commit jobs (same kind, distinct ids): each
 * answers within its own deadline; no etcd call runs past the earliest
 * deadline still open. */
void cluster_run_batch(cluster *c, struct job **jobs, size_t n) {
    struct bkey b[CLUSTER_BATCH_MAX];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        b[m] =
            (struct bkey){.j = jobs[i],
                          .ckey = cluster_key_of(c, "claims", jobs[i]->id),
                          .dkey = cluster_key_of(c, "decisions", jobs[i]->id)};
        if (b[m].ckey == NULL || b[m].dkey == NULL) {
            cluster_post(c,
                         jobs[i]->kind == JOB_CLAIM ? CLUSTER_EV_CLAIM_FAILED
                                                    : CLUSTER_EV_COMMITTED,
                         jobs[i]->id, DETD_ENOMEM, 0, NULL, 0, 0,
                         jobs[i]->cookie);
            free(b[m].ckey);
            free(b[m].dkey);
            continue;
        }
        m++;
    }
    if (m > 0 && jobs[0]->kind == JOB_CLAIM)
        do_claim(c, b, m);
    else if (m > 0)
        do_commit(c, b, m);
    etcd_thread_deadline(0);
    for (size_t i = 0; i < m; i++) {
        free(b[i].ckey);
        free(b[i].dkey);
    }
}

/* See cluster_int.h. A chunk that fails transiently is read again after a
 * backoff until the job's deadline; its keys are then answered with the
 * error (a stop: DETD_ECANCELLED). */
void cluster_do_read(cluster *c, struct job *j) {
    size_t n = j->value_len / KEYID_HEX_LEN;
    char ids[ETCD_GET_MANY_MAX][KEYID_HEX_LEN + 1];
    char *keys[ETCD_GET_MANY_MAX];
    struct etcd_kv kv[ETCD_GET_MANY_MAX];
    etcd_thread_deadline(j->deadline_ms);
    for (size_t at = 0; at < n; at += ETCD_GET_MANY_MAX) {
        size_t m = n - at < ETCD_GET_MANY_MAX ? n - at : ETCD_GET_MANY_MAX;
        int err = 0;
        for (size_t i = 0; i < m; i++) {
            memcpy(ids[i], j->value + (at + i) * KEYID_HEX_LEN, KEYID_HEX_LEN);
            ids[i][KEYID_HEX_LEN] = '\0';
            keys[i] = cluster_key_of(c, "decisions", ids[i]);
            if (keys[i] == NULL)
                err = DETD_ENOMEM;
        }
        while (err == 0) {
            err = etcd_get_many(c->etcd, (const char *const *)keys, m, kv);
            cluster_note(c, err, "read decisions");
            if (err == 0 || !cluster_transient(err) || cluster_stopping(c) ||
                clock_mono_ms() >= j->deadline_ms)
                break;
            cluster_nap(c, CLUSTER_BACKOFF_MS);
            err = 0;
        }
        if (err != 0 && cluster_stopping(c))
            err = DETD_ECANCELLED;
        for (size_t i = 0; i < m; i++) {
            cluster_post(c, CLUSTER_EV_READ, ids[i], err, 0,
                         err == 0 ? kv[i].value : NULL,
                         err == 0 ? kv[i].value_len : 0, 0, j->cookie + at + i);
            if (err == 0)
                etcd_kv_clear(&kv[i]);
            free(keys[i]);
        }
    }
    etcd_thread_deadline(0);
}
