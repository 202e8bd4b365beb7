/*
 * engine: claims, waiters and leases of the decide engine. Pure logic.
 *
 * Layout. A keyent exists while its id has a claim or waiters; it holds
 * the claim inline and the waiters in a FIFO list. Four chained hash
 * tables find keys (by id), waiters (by token), sessions (by id) and
 * live claims (by claim id: ids stay unique); three binary min-heaps
 * order waiter deadlines, claim lease expiries and timing-pass
 * deadlines, so every operation is O(1) or O(log n) whatever the number
 * of keys.
 *
 * Leases. A claim is in the lease heap only while its session is not
 * attached. Renewing an attached session's leases on every tick would
 * cost O(claims) per tick; leaving those claims out of the heap is the
 * same thing (their lease never runs out while attached) for free.
 *
 * Memory. Every allocation an operation needs is made before it changes
 * any state, so a DETD_ENOMEM leaves the engine as it was; passing a
 * claim never allocates (a waiter's session record exists while it
 * waits, and the lease heap always has room for every claim).
 */
#include "core/engine.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

#define ID_MAX 64 /* a decision id is 64 hex chars (keyid.h) */
#define NOT_IN_HEAP SIZE_MAX

#define container_of(p, type, member)                                          \
    ((type *)(void *)((char *)(p)-offsetof(type, member)))

/* ---- intrusive chained hash table ---- */

struct hlink {
    struct hlink *next;
    uint64_t hash;
};

struct htab {
    struct hlink **b;
    size_t nb; /* power of two */
    size_t n;
};

static int htab_init(struct htab *t) {
    t->nb = 64;
    t->n = 0;
    t->b = calloc(t->nb, sizeof(*t->b));
    return t->b == NULL ? DETD_ENOMEM : 0;
}

/* Make room for one more entry (load factor at most 1). */
static int htab_reserve(struct htab *t) {
    if (t->n + 1 <= t->nb)
        return 0;
    size_t nb = t->nb * 2;
    struct hlink **b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return DETD_ENOMEM;
    for (size_t i = 0; i < t->nb; i++) {
        struct hlink *l = t->b[i];
        while (l != NULL) {
            struct hlink *next = l->next;
            l->next = b[l->hash & (nb - 1)];
            b[l->hash & (nb - 1)] = l;
            l = next;
        }
    }
    free(t->b);
    t->b = b;
    t->nb = nb;
    return 0;
}

static void htab_insert(struct htab *t, struct hlink *l) {
    struct hlink **head = &t->b[l->hash & (t->nb - 1)];
    assert(t->n + 1 <= t->nb);
    l->next = *head;
    *head = l;
    t->n++;
}

static void htab_remove(struct htab *t, struct hlink *l) {
    struct hlink **pp = &t->b[l->hash & (t->nb - 1)];
    while (*pp != l) {
        assert(*pp != NULL);
        pp = &(*pp)->next;
    }
    *pp = l->next;
    t->n--;
}

static struct hlink *htab_first(const struct htab *t, uint64_t hash) {
    return t->b[hash & (t->nb - 1)];
}

static uint64_t hash_u64(uint64_t x) {
    /* splitmix64 finalizer: tokens and sessions are often sequential */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return hash_u64(h);
}

/* ---- indexed binary min-heap ---- */

struct hnode {
    int64_t at;
    uint64_t seq; /* ties in insertion order: deterministic events */
    size_t idx;   /* NOT_IN_HEAP when out */
};

struct heap {
    struct hnode **v;
    size_t n, cap;
};

static int hnode_less(const struct hnode *a, const struct hnode *b) {
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static int heap_reserve(struct heap *h, size_t want) {
    if (want <= h->cap)
        return 0;
    size_t cap = h->cap > 0 ? h->cap : 64;
    while (cap < want)
        cap *= 2;
    struct hnode **v = realloc(h->v, cap * sizeof(*v));
    if (v == NULL)
        return DETD_ENOMEM;
    h->v = v;
    h->cap = cap;
    return 0;
}

static void heap_set(struct heap *h, size_t i, struct hnode *x) {
    h->v[i] = x;
    x->idx = i;
}

static void heap_up(struct heap *h, size_t i) {
    struct hnode *x = h->v[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hnode_less(x, h->v[p]))
            break;
        heap_set(h, i, h->v[p]);
        i = p;
    }
    heap_set(h, i, x);
}

static void heap_down(struct heap *h, size_t i) {
    struct hnode *x = h->v[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && hnode_less(h->v[c + 1], h->v[c]))
            c++;
        if (!hnode_less(h->v[c], x))
            break;
        heap_set(h, i, h->v[c]);
        i = c;
    }
    heap_set(h, i, x);
}

/* Capacity must have been reserved. */
static void heap_push(struct heap *h, struct hnode *x) {
    assert(h->n < h->cap && x->idx == NOT_IN_HEAP);
    h->v[h->n] = x;
    x->idx = h->n++;
    heap_up(h, x->idx);
}

static void heap_remove(struct heap *h, struct hnode *x) {
    size_t i = x->idx;
    assert(i < h->n && h->v[i] == x);
    x->idx = NOT_IN_HEAP;
    struct hnode *last = h->v[--h->n];
    if (i == h->n)
        return;
    heap_set(h, i, last);
    if (i > 0 && hnode_less(last, h->v[(i - 1) / 2]))
        heap_up(h, i);
    else
        heap_down(h, i);
}

static struct hnode *heap_top(const struct heap *h) {
    return h->n > 0 ? h->v[0] : NULL;
}

/* ---- engine state ---- */

/* A session id as the engine sees it: whether it is attached, its claims
 * and its waiters (the daemon's struct client_session holds the call). */
struct engine_session {
    struct hlink link;
    uint64_t id;
    int attached;
    int ended; /* its waiters are never designated */
    uint32_t n_claims;
    uint32_t n_waiters;
    struct keyent *claims; /* list through keyent.snext */
};

struct waiter {
    struct hlink link; /* by token */
    struct hnode deadline;
    uint64_t token;
    struct engine_session *sess;
    struct keyent *key;
    struct waiter *prev, *next; /* FIFO on key */
};

struct keyent {
    struct hlink link;  /* by id */
    struct hlink clink; /* by claim id, while it has a claim */
    char id[ID_MAX + 1];
    int has_claim;
    uint64_t claim_id;
    uint64_t last_claim_id; /* the one before: never drawn again at once */
    struct engine_session *owner;
    struct hnode lease;
    struct hnode pass; /* the timing pass's deadline (pass_timeout_ms) */
    struct keyent *sprev, *snext; /* owner's claims */
    struct waiter *whead, *wtail;
    int64_t claimed_ms; /* when the live claim was granted */
    uint32_t shares;    /* shares of its pass given (engine_claim_share) */
    int told;           /* the live claim was answered (engine_claim_told) */
};

struct engine {
    struct engine_limits lim;
    engine_event_cb cb;
    void *cb_ctx;
    struct engine_options opt;
    struct htab keys, tokens, sessions, claims;
    struct heap deadlines, leases, passes;
    uint64_t next_claim_id;
    uint64_t seq;
    uint32_t n_claims;
    uint32_t n_waiters;
    struct engine_stats st;
};

static int64_t add_sat(int64_t a, uint32_t b) {
    return a > INT64_MAX - (int64_t)b ? INT64_MAX : a + (int64_t)b;
}

static int id_valid(const char *id) {
    if (id == NULL || id[0] == '\0')
        return 0;
    return memchr(id, '\0', ID_MAX + 1) != NULL;
}

static struct keyent *key_find(const engine *e, const char *id, uint64_t h) {
    for (struct hlink *l = htab_first(&e->keys, h); l != NULL; l = l->next) {
        struct keyent *k = container_of(l, struct keyent, link);
        if (l->hash == h && strcmp(k->id, id) == 0)
            return k;
    }
    return NULL;
}

static struct waiter *waiter_find(const engine *e, uint64_t token) {
    uint64_t h = hash_u64(token);
    for (struct hlink *l = htab_first(&e->tokens, h); l != NULL; l = l->next) {
        struct waiter *w = container_of(l, struct waiter, link);
        if (w->token == token)
            return w;
    }
    return NULL;
}

static struct engine_session *session_find(const engine *e, uint64_t id) {
    uint64_t h = hash_u64(id);
    for (struct hlink *l = htab_first(&e->sessions, h); l != NULL;
         l = l->next) {
        struct engine_session *s = container_of(l, struct engine_session, link);
        if (s->id == id)
            return s;
    }
    return NULL;
}

/* The record of session id, made when there is none (NULL: out of
 * memory). */
static struct engine_session *session_get(engine *e, uint64_t id) {
    struct engine_session *s = session_find(e, id);
    if (s != NULL)
        return s;
    if (htab_reserve(&e->sessions) < 0 || (s = calloc(1, sizeof(*s))) == NULL)
        return NULL;
    s->id = id;
    s->link.hash = hash_u64(id);
    htab_insert(&e->sessions, &s->link);
    return s;
}

/* A session record lives while it is attached, holds claims or waits. */
static void session_maybe_free(engine *e, struct engine_session *s) {
    if (s->attached || s->n_claims > 0 || s->n_waiters > 0)
        return;
    htab_remove(&e->sessions, &s->link);
    free(s);
}

static void key_maybe_free(engine *e, struct keyent *k) {
    if (k->has_claim || k->whead != NULL)
        return;
    htab_remove(&e->keys, &k->link);
    free(k);
}

static int claim_id_live(const engine *e, uint64_t cid) {
    uint64_t h = hash_u64(cid);
    for (struct hlink *l = htab_first(&e->claims, h); l != NULL; l = l->next)
        if (container_of(l, struct keyent, clink)->claim_id == cid)
            return 1;
    return 0;
}

/* A claim id for k: nonzero, held by no live claim, not k's last one.
 * A source that keeps failing (64 draws) gives way to counting. */
static uint64_t claim_id_draw(engine *e, const struct keyent *k) {
    for (int i = 0;; i++) {
        uint64_t cid = e->opt.claim_id != NULL && i < 64
                           ? e->opt.claim_id(e->opt.claim_id_ctx)
                           : e->next_claim_id++;
        if (cid != 0 && cid != k->last_claim_id && !claim_id_live(e, cid))
            return cid;
    }
}

static void emit(engine *e, engine_event_kind kind, uint64_t token,
                 const struct keyent *k, int takeover) {
    struct engine_event ev = {
        .kind = kind,
        .token = token,
        .id = k->id,
        .claim_id = kind == ENGINE_EV_DESIGNATE ? k->claim_id : 0,
        .takeover = takeover,
    };
    e->cb(e->cb_ctx, &ev);
}

/* Put k on s's list of claims, as its owner. */
static void owner_link(struct keyent *k, struct engine_session *s) {
    k->owner = s;
    k->sprev = NULL;
    k->snext = s->claims;
    if (s->claims != NULL)
        s->claims->sprev = k;
    s->claims = k;
    s->n_claims++;
}

/* Take k off its owner's list of claims (the owner stays set). */
static void owner_unlink(struct keyent *k) {
    struct engine_session *s = k->owner;
    if (k->sprev != NULL)
        k->sprev->snext = k->snext;
    else
        s->claims = k->snext;
    if (k->snext != NULL)
        k->snext->sprev = k->sprev;
    k->sprev = k->snext = NULL;
    s->n_claims--;
}

/* Give k a fresh claim owned by s. The lease and pass heaps and the
 * claims table have room (reserved). */
static void claim_grant(engine *e, struct keyent *k, struct engine_session *s,
                        int64_t now_ms) {
    assert(!k->has_claim);
    k->has_claim = 1;
    k->claim_id = claim_id_draw(e, k);
    k->clink.hash = hash_u64(k->claim_id);
    htab_insert(&e->claims, &k->clink);
    owner_link(k, s);
    k->claimed_ms = now_ms;
    k->shares = 0;
    k->told = 0;
    e->n_claims++;
    e->st.designations++;
    k->lease.at = add_sat(now_ms, e->lim.lease_ms);
    k->lease.seq = e->seq++;
    k->lease.idx = NOT_IN_HEAP;
    if (!s->attached)
        heap_push(&e->leases, &k->lease);
    k->pass.idx = NOT_IN_HEAP;
    if (e->opt.pass_timeout_ms > 0) {
        k->pass.at = add_sat(now_ms, e->opt.pass_timeout_ms);
        k->pass.seq = e->seq++;
        heap_push(&e->passes, &k->pass);
    }
}

/* End k's claim; the caller frees the session and key records if idle. */
static void claim_end(engine *e, struct keyent *k) {
    assert(k->has_claim);
    if (k->lease.idx != NOT_IN_HEAP)
        heap_remove(&e->leases, &k->lease);
    if (k->pass.idx != NOT_IN_HEAP)
        heap_remove(&e->passes, &k->pass);
    htab_remove(&e->claims, &k->clink);
    k->last_claim_id = k->claim_id;
    owner_unlink(k);
    k->has_claim = 0;
    k->owner = NULL;
    e->n_claims--;
}

/* Unlink w from every structure; the caller frees it. */
static void waiter_unlink(engine *e, struct waiter *w) {
    struct keyent *k = w->key;
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        k->whead = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        k->wtail = w->prev;
    htab_remove(&e->tokens, &w->link);
    if (w->deadline.idx != NOT_IN_HEAP)
        heap_remove(&e->deadlines, &w->deadline);
    w->sess->n_waiters--;
    e->n_waiters--;
}

/*
 * The waiter to designate next: the oldest whose session has not ended,
 * preferring attached-or-named sessions over session 0 (an unattached
 * caller is designated only when nobody else could be).
 */
static struct waiter *next_waiter(const engine *e, const struct keyent *k) {
    struct waiter *zero = NULL;
    for (struct waiter *w = k->whead; w != NULL; w = w->next) {
        if (w->sess->ended)
            continue;
        if (w->sess->id != 0)
            return w;
        if (zero == NULL && !e->opt.named_only)
            zero = w;
    }
    return zero;
}

/* Abort k's session-0 waiters (named_only, k has no claim and nobody
 * else can be designated). Frees their records, not k. */
static void abort_unattached(engine *e, struct keyent *k) {
    struct waiter *w = k->whead;
    while (w != NULL) {
        struct waiter *next = w->next;
        if (w->sess->id == 0) {
            struct engine_session *s = w->sess;
            waiter_unlink(e, w);
            struct engine_event ev = {.kind = ENGINE_EV_ABORT,
                                      .token = w->token,
                                      .id = k->id,
                                      .abort = ENGINE_ABORT_UNATTACHED};
            e->cb(e->cb_ctx, &ev);
            free(w);
            session_maybe_free(e, s);
        }
        w = next;
    }
}

/*
 * k's claim holder is gone (session ended or lease expired): end the
 * claim and pass a new one to the next waiter, or drop it. Never
 * allocates. Frees the old owner's record and k when they become idle.
 */
static int claim_pass(engine *e, struct keyent *k, int64_t now_ms,
                      int takeover) {
    struct engine_session *old = k->owner;
    claim_end(e, k);
    struct waiter *w = next_waiter(e, k);
    if (w != NULL) {
        struct engine_session *s = w->sess;
        waiter_unlink(e, w);
        claim_grant(e, k, s, now_ms);
        if (takeover)
            e->st.takeovers++;
        emit(e, ENGINE_EV_DESIGNATE, w->token, k, takeover);
        free(w);
    }
    int passed = w != NULL;
    if (!passed && e->opt.named_only)
        abort_unattached(e, k);
    if (old != k->owner)
        session_maybe_free(e, old);
    key_maybe_free(e, k);
    return passed;
}

/* ---- public API ---- */

/* See engine.h. limits is copied; cb_ctx is borrowed for the lifetime. */
int engine_new(const struct engine_limits *limits, engine_event_cb cb,
               void *cb_ctx, engine **ret) {
    if (limits == NULL || cb == NULL || ret == NULL || limits->lease_ms == 0)
        return DETD_EINVAL;
    engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return DETD_ENOMEM;
    e->lim = *limits;
    e->cb = cb;
    e->cb_ctx = cb_ctx;
    e->next_claim_id = 1;
    if (htab_init(&e->keys) < 0 || htab_init(&e->tokens) < 0 ||
        htab_init(&e->sessions) < 0 || htab_init(&e->claims) < 0) {
        engine_free(e);
        return DETD_ENOMEM;
    }
    *ret = e;
    return 0;
}

/* See engine.h. */
int engine_set_options(engine *e, const struct engine_options *opts) {
    if (e == NULL || opts == NULL)
        return DETD_EINVAL;
    e->opt = *opts;
    return 0;
}

static void htab_free_all(struct htab *t, size_t link_off) {
    if (t->b == NULL)
        return;
    for (size_t i = 0; i < t->nb; i++) {
        struct hlink *l = t->b[i];
        while (l != NULL) {
            struct hlink *next = l->next;
            free((char *)l - link_off);
            l = next;
        }
    }
    free(t->b);
}

/* See engine.h. */
void engine_free(engine *e) {
    if (e == NULL)
        return;
    htab_free_all(&e->tokens, offsetof(struct waiter, link));
    htab_free_all(&e->keys, offsetof(struct keyent, link));
    htab_free_all(&e->sessions, offsetof(struct engine_session, link));
    free(e->claims.b); /* its entries are the keys' */
    free(e->deadlines.v);
    free(e->leases.v);
    free(e->passes.v);
    free(e);
}

/* See engine.h. id is copied when kept. */
int engine_ask(engine *e, const char *id, uint64_t session, uint64_t token,
               int64_t deadline_ms, int64_t now_ms, uint64_t *ret_claim_id) {
    if (e == NULL || !id_valid(id) || token == 0 || ret_claim_id == NULL)
        return DETD_EINVAL;
    if (waiter_find(e, token) != NULL)
        return DETD_EINVAL;
    uint64_t h = hash_str(id);
    struct keyent *k = key_find(e, id, h);
    if (k != NULL && k->has_claim) {
        /* Session 0 is shared by every unattached caller: never a retry. */
        if (session != 0 && k->owner->id == session) {
            *ret_claim_id = k->claim_id;
            return ENGINE_ASK_DESIGNATED;
        }
        if (e->n_waiters >= e->lim.max_waiters)
            return DETD_EBUSY;
    } else if (session == 0 && e->opt.named_only) {
        return ENGINE_ASK_UNATTACHED;
    } else if (e->n_claims >= e->lim.max_claims) {
        return DETD_EBUSY;
    }
    int wait = k != NULL && k->has_claim;

    /* Allocate everything first: on failure nothing has changed. */
    struct engine_session *s = session_find(e, session), *new_s = NULL;
    struct keyent *new_k = NULL;
    struct waiter *w = NULL;
    if (s == NULL) {
        if (htab_reserve(&e->sessions) < 0)
            goto nomem;
        s = new_s = calloc(1, sizeof(*s));
        if (s == NULL)
            goto nomem;
        s->id = session;
        s->link.hash = hash_u64(session);
    }
    if (k == NULL) {
        if (htab_reserve(&e->keys) < 0)
            goto nomem;
        k = new_k = calloc(1, sizeof(*k));
        if (k == NULL)
            goto nomem;
        memcpy(k->id, id, strlen(id) + 1);
        k->link.hash = h;
        k->lease.idx = NOT_IN_HEAP;
        k->pass.idx = NOT_IN_HEAP;
    }
    if (wait) {
        if (heap_reserve(&e->deadlines, (size_t)e->n_waiters + 1) < 0 ||
            htab_reserve(&e->tokens) < 0)
            goto nomem;
        w = calloc(1, sizeof(*w));
        if (w == NULL)
            goto nomem;
    } else if (heap_reserve(&e->leases, (size_t)e->n_claims + 1) < 0 ||
               heap_reserve(&e->passes, (size_t)e->n_claims + 1) < 0 ||
               htab_reserve(&e->claims) < 0) {
        goto nomem;
    }

    if (new_s != NULL)
        htab_insert(&e->sessions, &new_s->link);
    if (new_k != NULL)
        htab_insert(&e->keys, &new_k->link);
    if (!wait) {
        claim_grant(e, k, s, now_ms);
        *ret_claim_id = k->claim_id;
        return ENGINE_ASK_DESIGNATED;
    }
    w->token = token;
    w->link.hash = hash_u64(token);
    w->sess = s;
    w->key = k;
    w->prev = k->wtail;
    if (k->wtail != NULL)
        k->wtail->next = w;
    else
        k->whead = w;
    k->wtail = w;
    htab_insert(&e->tokens, &w->link);
    w->deadline.at = deadline_ms;
    w->deadline.seq = e->seq++;
    w->deadline.idx = NOT_IN_HEAP;
    heap_push(&e->deadlines, &w->deadline);
    s->n_waiters++;
    e->n_waiters++;
    return ENGINE_ASK_WAIT;

nomem:
    free(new_s);
    free(new_k);
    return DETD_ENOMEM;
}

/* See engine.h. */
int engine_report(engine *e, const char *id, uint64_t claim_id) {
    if (e == NULL || !id_valid(id))
        return DETD_EINVAL;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k != NULL && k->has_claim && claim_id != 0 && k->claim_id == claim_id)
        return ENGINE_REPORT_ACCEPT;
    e->st.stale_reports++;
    return ENGINE_REPORT_STALE;
}

/* See engine.h. */
int engine_report_from(engine *e, const char *id, uint64_t claim_id,
                       uint64_t session) {
    if (e == NULL || !id_valid(id))
        return DETD_EINVAL;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k != NULL && k->has_claim && claim_id != 0 && k->claim_id == claim_id) {
        if (k->owner->id == session)
            return ENGINE_REPORT_ACCEPT;
        e->st.foreign_reports++;
        return ENGINE_REPORT_FOREIGN;
    }
    e->st.stale_reports++;
    return ENGINE_REPORT_STALE;
}

/* See engine.h. Waiters are aborted in FIFO order. */
int engine_reject(engine *e, const char *id, uint64_t claim_id,
                  engine_event_cb cb, void *ctx) {
    if (e == NULL || !id_valid(id) || claim_id == 0 || cb == NULL)
        return DETD_EINVAL;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim || k->claim_id != claim_id)
        return DETD_ENOTFOUND;
    struct engine_session *owner = k->owner;
    claim_end(e, k);
    session_maybe_free(e, owner);
    e->st.rejected_reports++;
    int n = 0;
    while (k->whead != NULL) {
        struct waiter *w = k->whead;
        struct engine_session *s = w->sess;
        waiter_unlink(e, w);
        struct engine_event ev = {.kind = ENGINE_EV_ABORT,
                                  .token = w->token,
                                  .id = k->id,
                                  .abort = ENGINE_ABORT_REJECTED};
        cb(ctx, &ev);
        free(w);
        session_maybe_free(e, s);
        n++;
    }
    key_maybe_free(e, k);
    return n;
}

/* See engine.h. Waiters are released in FIFO order. */
size_t engine_decided(engine *e, const char *id) {
    return e != NULL ? engine_decided_each(e, id, e->cb, e->cb_ctx) : 0;
}

/* See engine.h. */
size_t engine_decided_each(engine *e, const char *id, engine_event_cb cb,
                           void *ctx) {
    if (e == NULL || !id_valid(id))
        return 0;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL)
        return 0;
    if (k->has_claim) {
        struct engine_session *owner = k->owner;
        claim_end(e, k);
        session_maybe_free(e, owner);
    }
    size_t n = 0;
    while (k->whead != NULL) {
        struct waiter *w = k->whead;
        struct engine_session *s = w->sess;
        waiter_unlink(e, w);
        struct engine_event ev = {
            .kind = ENGINE_EV_RELEASE, .token = w->token, .id = k->id};
        cb(ctx, &ev);
        free(w);
        session_maybe_free(e, s);
        n++;
    }
    key_maybe_free(e, k);
    return n;
}

/* See engine.h. */
int engine_claim_of(const engine *e, const char *id, uint64_t *ret_claim_id) {
    if (e == NULL || !id_valid(id))
        return 0;
    const struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim)
        return 0;
    if (ret_claim_id != NULL)
        *ret_claim_id = k->claim_id;
    return 1;
}

/* See engine.h. */
int engine_claim_told(engine *e, const char *id, uint64_t claim) {
    if (e == NULL || !id_valid(id))
        return 1;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim || k->claim_id != claim)
        return 1;
    if (k->told)
        return 0;
    k->told = 1;
    return 1;
}

/* See engine.h. */
int engine_claim_info(const engine *e, const char *id,
                      struct engine_claim_info *ret) {
    if (e == NULL || ret == NULL || !id_valid(id))
        return 0;
    const struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim)
        return 0;
    ret->claim_id = k->claim_id;
    ret->session = k->owner->id;
    ret->claimed_ms = k->claimed_ms;
    ret->shares = k->shares;
    return 1;
}

/* See engine.h. */
int engine_claim_share(engine *e, const char *id, uint64_t session,
                       uint32_t *ret_index) {
    if (e == NULL || ret_index == NULL || !id_valid(id) || session == 0)
        return 0;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim || k->owner->id == session ||
        k->shares == UINT32_MAX)
        return 0;
    *ret_index = ++k->shares;
    return 1;
}

/* See engine.h. Never allocates. */
int engine_release(engine *e, const char *id, uint64_t claim_id,
                   int64_t now_ms) {
    if (e == NULL || !id_valid(id) || claim_id == 0)
        return DETD_EINVAL;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim || k->claim_id != claim_id)
        return DETD_ENOTFOUND;
    return claim_pass(e, k, now_ms, 0);
}

/* See engine.h. Attaching twice is harmless. */
int engine_session_attach(engine *e, uint64_t session, int64_t now_ms) {
    if (e == NULL || session == 0)
        return DETD_EINVAL;
    struct engine_session *s = session_get(e, session);
    if (s == NULL)
        return DETD_ENOMEM;
    s->attached = 1;
    s->ended = 0;
    /* Its claims' leases now last while it stays attached. */
    for (struct keyent *k = s->claims; k != NULL; k = k->snext) {
        k->lease.at = add_sat(now_ms, e->lim.lease_ms);
        if (k->lease.idx != NOT_IN_HEAP)
            heap_remove(&e->leases, &k->lease);
    }
    return 0;
}

/* See engine.h. Session 0 never ends (it is not a session). */
void engine_session_end(engine *e, uint64_t session, int64_t now_ms) {
    if (e == NULL || session == 0)
        return;
    struct engine_session *s = session_find(e, session);
    if (s == NULL)
        return;
    s->attached = 0;
    s->ended = 1;
    /* Waiters of s are skipped by next_waiter, so s keeps none of these. */
    while (s->claims != NULL) {
        int last = s->n_claims == 1 && s->n_waiters == 0;
        claim_pass(e, s->claims, now_ms, 1);
        if (last)
            return; /* claim_pass freed s */
    }
    session_maybe_free(e, s);
}

/* See engine.h. */
int engine_cancel(engine *e, uint64_t token) {
    if (e == NULL || token == 0)
        return DETD_EINVAL;
    struct waiter *w = waiter_find(e, token);
    if (w == NULL)
        return DETD_ENOTFOUND;
    struct keyent *k = w->key;
    struct engine_session *s = w->sess;
    waiter_unlink(e, w);
    free(w);
    session_maybe_free(e, s);
    key_maybe_free(e, k);
    return 0;
}

/* See engine.h. Waiters time out before expired claims pass, so a waiter
 * whose deadline has passed is never designated. */
int64_t engine_tick(engine *e, int64_t now_ms) {
    if (e == NULL)
        return INT64_MAX;
    struct hnode *n;
    while ((n = heap_top(&e->deadlines)) != NULL && n->at <= now_ms) {
        struct waiter *w = container_of(n, struct waiter, deadline);
        struct keyent *k = w->key;
        struct engine_session *s = w->sess;
        waiter_unlink(e, w);
        e->st.timeouts++;
        emit(e, ENGINE_EV_TIMEOUT, w->token, k, 0);
        free(w);
        session_maybe_free(e, s);
        key_maybe_free(e, k);
    }
    while ((n = heap_top(&e->leases)) != NULL && n->at <= now_ms) {
        struct keyent *k = container_of(n, struct keyent, lease);
        assert(!k->owner->attached);
        claim_pass(e, k, now_ms, 1);
    }
    while ((n = heap_top(&e->passes)) != NULL && n->at <= now_ms) {
        struct keyent *k = container_of(n, struct keyent, pass);
        e->st.pass_timeouts++;
        claim_pass(e, k, now_ms, 1);
    }
    int64_t next = INT64_MAX;
    if ((n = heap_top(&e->deadlines)) != NULL)
        next = n->at;
    if ((n = heap_top(&e->leases)) != NULL && n->at < next)
        next = n->at;
    if ((n = heap_top(&e->passes)) != NULL && n->at < next)
        next = n->at;
    return next;
}

/* See engine.h. */
void engine_get_stats(const engine *e, struct engine_stats *ret) {
    if (e == NULL || ret == NULL)
        return;
    *ret = e->st;
    ret->claims = e->n_claims;
    ret->waiters = e->n_waiters;
}

/* See engine.h. */
uint32_t engine_session_claims(const engine *e, uint64_t session) {
    if (e == NULL)
        return 0;
    const struct engine_session *s = session_find(e, session);
    return s != NULL ? s->n_claims : 0;
}

/* See engine.h. */
int engine_claim_restore(engine *e, const char *id, uint64_t session,
                         int64_t ran_ms, int64_t now_ms,
                         uint64_t *ret_claim_id) {
    if (e == NULL || !id_valid(id) || session == 0 || ret_claim_id == NULL)
        return DETD_EINVAL;
    if (engine_claim_of(e, id, NULL))
        return DETD_EEXIST;
    /* No claim on id: an ask is a designation (the token is not kept). */
    uint64_t claim = 0;
    int rc = engine_ask(e, id, session, UINT64_MAX, now_ms, now_ms, &claim);
    if (rc != ENGINE_ASK_DESIGNATED)
        return rc < 0 ? rc : DETD_EEXIST;
    struct keyent *k = key_find(e, id, hash_str(id));
    k->claimed_ms = now_ms - (ran_ms > 0 ? ran_ms : 0);
    if (k->pass.idx != NOT_IN_HEAP) {
        heap_remove(&e->passes, &k->pass);
        k->pass.at = add_sat(k->claimed_ms, e->opt.pass_timeout_ms);
        heap_push(&e->passes, &k->pass);
    }
    *ret_claim_id = claim;
    return 0;
}

/* See engine.h. */
int engine_claim_adopt(engine *e, const char *id, uint64_t from, uint64_t to) {
    if (e == NULL || !id_valid(id) || to == 0)
        return DETD_EINVAL;
    struct keyent *k = key_find(e, id, hash_str(id));
    if (k == NULL || !k->has_claim || k->owner->id != from)
        return DETD_ENOTFOUND;
    struct engine_session *s = session_get(e, to);
    if (s == NULL)
        return DETD_ENOMEM;
    struct engine_session *old = k->owner;
    owner_unlink(k);
    owner_link(k, s);
    /* An attached holder keeps its claims' leases renewed. */
    if (s->attached && k->lease.idx != NOT_IN_HEAP)
        heap_remove(&e->leases, &k->lease);
    session_maybe_free(e, old);
    return 0;
}
