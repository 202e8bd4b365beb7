/*
 * waiters: the held Decide calls, found by engine token or by call; the
 * drain's take_any; the wait histogram (each pending taken is observed
 * once, a miss is not); tokens that share a hash bucket.
 */
#include "app/waiters.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "fake_rpc.h"
#include "runner.h"

static const char ID_A[] =
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char ID_B[] =
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/* The bucket waiters.c puts a token in (it has 1024). */
static size_t bucket_of(uint64_t token) {
    return (size_t)((token * 0x9E3779B97F4A7C15ULL) >> 32) % 1024;
}

static waiters *new_table(void) {
    waiters *w = NULL;
    CHECK_EQ_INT(waiters_new(&w), 0);
    CHECK(w != NULL);
    CHECK_EQ_INT(waiters_count(w), 0);
    CHECK_EQ_INT(waiters_hist(w)->count, 0);
    return w;
}

static struct pending *new_pending(uint64_t token, rpc_call *call,
                                   const char *id, int64_t started_ms) {
    struct pending *p =
        pending_new(token, call, fake_decide_request(0), id, started_ms);
    CHECK(p != NULL);
    return p;
}

TEST(pending_new_fields) {
    rpc_call *call = fake_call_new(INT64_MAX);
    struct pending *p = new_pending(42, call, ID_A, 1234);
    CHECK_EQ_INT(p->token, 42);
    CHECK(p->call == call);
    CHECK(p->req != NULL);
    CHECK_STR(p->id, ID_A);
    CHECK_EQ_INT(p->started_ms, 1234);
    CHECK_EQ_INT(p->held, 0);
    CHECK_EQ_INT(p->claim_id, 0);
    CHECK(p->next == NULL);
    /* Nothing is answered or watched by creating a pending. */
    CHECK_EQ_INT(call->answers, 0);
    CHECK_EQ_INT(call->watched, 0);
    pending_free(p);
    pending_free(NULL);
    fake_call_free(call);
}

TEST(add_take_by_token) {
    waiters *w = new_table();
    rpc_call *c1 = fake_call_new(INT64_MAX), *c2 = fake_call_new(INT64_MAX);
    struct pending *p1 = new_pending(7, c1, ID_A, clock_mono_ms());
    struct pending *p2 = new_pending(8, c2, ID_B, clock_mono_ms());
    waiters_add(w, p1);
    CHECK_EQ_INT(waiters_count(w), 1);
    /* Adding watches the call for a client giving up, once per add. */
    CHECK_EQ_INT(c1->watched, 1);
    CHECK_EQ_INT(c2->watched, 0);
    waiters_add(w, p2);
    CHECK_EQ_INT(waiters_count(w), 2);
    CHECK_EQ_INT(c2->watched, 1);

    CHECK(waiters_take(w, 9) == NULL);
    CHECK_EQ_INT(waiters_count(w), 2);
    CHECK(waiters_take(w, 8) == p2);
    CHECK(p2->next == NULL);
    CHECK_EQ_INT(waiters_count(w), 1);
    CHECK(waiters_take(w, 8) == NULL); /* taken once */
    CHECK(waiters_take(w, 7) == p1);
    CHECK_EQ_INT(waiters_count(w), 0);
    CHECK(waiters_take(w, 7) == NULL);
    CHECK(waiters_take_any(w) == NULL);
    /* The table never answers a call. */
    CHECK_EQ_INT(c1->answers, 0);
    CHECK_EQ_INT(c2->answers, 0);
    pending_free(p1);
    pending_free(p2);
    waiters_free(w);
    waiters_free(NULL);
    fake_call_free(c1);
    fake_call_free(c2);
}

TEST(take_by_call) {
    waiters *w = new_table();
    rpc_call *c[3];
    struct pending *p[3];
    for (int i = 0; i < 3; i++) {
        c[i] = fake_call_new(INT64_MAX);
        p[i] = new_pending(100 + (uint64_t)i, c[i], ID_A, clock_mono_ms());
        waiters_add(w, p[i]);
    }
    rpc_call *stranger = fake_call_new(INT64_MAX);
    CHECK(waiters_take_call(w, stranger) == NULL);
    CHECK_EQ_INT(waiters_count(w), 3);
    CHECK(waiters_take_call(w, c[1]) == p[1]);
    CHECK_EQ_INT(p[1]->token, 101);
    CHECK_EQ_INT(waiters_count(w), 2);
    CHECK(waiters_take_call(w, c[1]) == NULL);
    /* Taken by call, it is gone by token too. */
    CHECK(waiters_take(w, 101) == NULL);
    CHECK(waiters_take_call(w, c[2]) == p[2]);
    CHECK(waiters_take(w, 100) == p[0]);
    CHECK(waiters_take_call(w, c[0]) == NULL);
    CHECK_EQ_INT(waiters_count(w), 0);
    CHECK_EQ_INT(waiters_hist(w)->count, 3);
    for (int i = 0; i < 3; i++) {
        pending_free(p[i]);
        fake_call_free(c[i]);
    }
    fake_call_free(stranger);
    waiters_free(w);
}

TEST(take_any_until_empty) {
    enum { N = 300 };
    waiters *w = new_table();
    static rpc_call *c[N];
    static int seen[N];
    for (int i = 0; i < N; i++) {
        c[i] = fake_call_new(INT64_MAX);
        waiters_add(
            w, new_pending(1000 + (uint64_t)i, c[i], ID_A, clock_mono_ms()));
    }
    CHECK_EQ_INT(waiters_count(w), N);
    struct pending *p;
    int taken = 0;
    while ((p = waiters_take_any(w)) != NULL) {
        CHECK(p->token >= 1000 && p->token < 1000 + N);
        int i = (int)(p->token - 1000);
        CHECK_EQ_INT(seen[i], 0); /* each exactly once */
        seen[i] = 1;
        CHECK(p->call == c[i]);
        taken++;
        CHECK_EQ_INT(waiters_count(w), N - taken);
        pending_free(p);
    }
    CHECK_EQ_INT(taken, N);
    CHECK_EQ_INT(waiters_count(w), 0);
    CHECK(waiters_take_any(w) == NULL);
    CHECK_EQ_INT(waiters_hist(w)->count, N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(c[i]->answers, 0);
        CHECK_EQ_INT(c[i]->watched, 1);
        fake_call_free(c[i]);
    }
    waiters_free(w);
}

TEST(pending_waited_ms) {
    rpc_call *call = fake_call_new(INT64_MAX);
    int64_t now = clock_mono_ms();
    struct pending *p = new_pending(1, call, ID_A, now - 1500);
    uint32_t waited = pending_waited(p);
    CHECK(waited >= 1500);
    CHECK(waited < 1500 + 5000);
    pending_free(p);
    /* Started in the future (clock skew between callers): 0, not a wrap. */
    p = new_pending(2, call, ID_A, clock_mono_ms() + 100000);
    CHECK_EQ_INT(pending_waited(p), 0);
    pending_free(p);
    fake_call_free(call);
}

TEST(histogram_observes_each_take_once) {
    waiters *w = new_table();
    rpc_call *c1 = fake_call_new(INT64_MAX), *c2 = fake_call_new(INT64_MAX),
             *c3 = fake_call_new(INT64_MAX);
    int64_t now = clock_mono_ms();
    struct pending *p1 = new_pending(1, c1, ID_A, now - 2000);
    struct pending *p2 = new_pending(2, c2, ID_A, now - 3000);
    struct pending *p3 = new_pending(3, c3, ID_B, now);
    waiters_add(w, p1);
    waiters_add(w, p2);
    waiters_add(w, p3);
    /* Adding observes nothing; misses observe nothing. */
    CHECK_EQ_INT(waiters_hist(w)->count, 0);
    CHECK(waiters_take(w, 99) == NULL);
    CHECK(waiters_take_call(w, NULL) == NULL);
    CHECK_EQ_INT(waiters_hist(w)->count, 0);

    CHECK(waiters_take(w, 1) == p1);
    CHECK_EQ_INT(waiters_hist(w)->count, 1);
    double s1 = waiters_hist(w)->sum;
    CHECK(s1 >= 2.0 && s1 < 2.0 + 5.0); /* seconds, not milliseconds */
    CHECK(waiters_take(w, 1) == NULL);
    CHECK_EQ_INT(waiters_hist(w)->count, 1);

    CHECK(waiters_take_call(w, c2) == p2);
    CHECK_EQ_INT(waiters_hist(w)->count, 2);
    CHECK(waiters_hist(w)->sum >= s1 + 3.0);
    CHECK(waiters_take_any(w) == p3);
    CHECK_EQ_INT(waiters_hist(w)->count, 3);
    CHECK(waiters_hist(w)->sum < 5.0 + 5.0 + 5.0);
    CHECK(waiters_take_any(w) == NULL);
    CHECK_EQ_INT(waiters_hist(w)->count, 3);
    pending_free(p1);
    pending_free(p2);
    pending_free(p3);
    fake_call_free(c1);
    fake_call_free(c2);
    fake_call_free(c3);
    waiters_free(w);
}

TEST(colliding_buckets) {
    enum { N = 24 };
    /* Tokens that all land in the bucket of token 1. */
    uint64_t tok[N];
    int n = 0;
    size_t b = bucket_of(1);
    for (uint64_t t = 1; n < N; t++)
        if (bucket_of(t) == b)
            tok[n++] = t;
    CHECK(tok[N - 1] > tok[0]);
    /* A token of the same bucket that is never added. */
    uint64_t absent = tok[N - 1] + 1;
    while (bucket_of(absent) != b)
        absent++;

    waiters *w = new_table();
    rpc_call *c[N];
    struct pending *p[N];
    for (int i = 0; i < N; i++) {
        c[i] = fake_call_new(INT64_MAX);
        p[i] = new_pending(tok[i], c[i], ID_A, clock_mono_ms());
        waiters_add(w, p[i]);
    }
    CHECK_EQ_INT(waiters_count(w), N);
    CHECK(waiters_take(w, absent) == NULL);
    CHECK_EQ_INT(waiters_count(w), N);
    /* From the middle of the chain, its head (the last added), its tail
     * (the first added), and by call. */
    CHECK(waiters_take(w, tok[N / 2]) == p[N / 2]);
    CHECK(waiters_take(w, tok[N - 1]) == p[N - 1]);
    CHECK(waiters_take(w, tok[0]) == p[0]);
    CHECK(waiters_take_call(w, c[5]) == p[5]);
    CHECK(waiters_take(w, tok[5]) == NULL);
    CHECK(waiters_take(w, tok[N / 2]) == NULL);
    CHECK_EQ_INT(waiters_count(w), N - 4);
    /* The others are all still found, each by its own token. */
    for (int i = 1; i < N - 1; i++) {
        if (i == N / 2 || i == 5)
            continue;
        struct pending *q = waiters_take(w, tok[i]);
        CHECK(q == p[i]);
        CHECK_EQ_INT(q->token, tok[i]);
    }
    CHECK_EQ_INT(waiters_count(w), 0);
    CHECK(waiters_take_any(w) == NULL);
    CHECK_EQ_INT(waiters_hist(w)->count, N);
    for (int i = 0; i < N; i++) {
        pending_free(p[i]);
        fake_call_free(c[i]);
    }
    waiters_free(w);
}

TEST(many_tokens) {
    enum { N = 20000 };
    waiters *w = new_table();
    rpc_call *call = fake_call_new(INT64_MAX);
    /* Tokens as the daemon hands them out (++next_token) and spread ones:
     * more than buckets, so every chain is long. */
    for (uint64_t i = 1; i <= N; i++) {
        uint64_t t = (i % 2) ? i : (i << 33) | i;
        waiters_add(w, new_pending(t, call, ID_A, clock_mono_ms()));
    }
    CHECK_EQ_INT(waiters_count(w), N);
    /* Take in a scattered order (a stride coprime to N). */
    for (uint64_t k = 0; k < N; k++) {
        uint64_t i = (k * 7919) % N + 1;
        uint64_t t = (i % 2) ? i : (i << 33) | i;
        struct pending *p = waiters_take(w, t);
        CHECK(p != NULL);
        CHECK(p->token == t);
        pending_free(p);
    }
    CHECK_EQ_INT(waiters_count(w), 0);
    CHECK_EQ_INT(waiters_hist(w)->count, N);
    CHECK_EQ_INT(call->watched, N);
    fake_call_free(call);
    waiters_free(w);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
