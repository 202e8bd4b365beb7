/*
 * verify: agreement, disagreement between ranks, disagreement with the
 * decision, ungoverned rows, ordering of uses and clients, input errors.
 */
#include "core/verify.h"

#include <stdio.h>
#include <string.h>

#include "detd/error.h"
#include "runner.h"

#include "failalloc.h"

static struct verify_obs obs(const char *id, const char *config,
                             const char *host, int32_t rank, int32_t pid) {
    struct verify_obs o = {
        .id = id,
        .kernel = "mod:fn@g",
        .key = "(i32:1024,)",
        .arch = "sm90",
        .config = config,
        .host = host,
        .pid = pid,
        .rank = rank,
        .local_rank = rank % 8,
        .governed = 1,
        .chaos = 0,
    };
    return o;
}

static verifier *mk(void) {
    verifier *v = NULL;
    CHECK_EQ_INT(verify_new(&v), 0);
    CHECK(v != NULL);
    return v;
}

static void add(verifier *v, struct verify_obs o, const char *decided) {
    CHECK_EQ_INT(verify_add(v, &o, decided), 0);
}

static void finish(verifier *v, struct verify_result *r) {
    memset(r, 0xaa, sizeof(*r));
    CHECK_EQ_INT(verify_finish(v, r), 0);
}

TEST(empty_input_is_ok) {
    verifier *v = mk();
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 0);
    CHECK_EQ_INT(r.observations, 0);
    CHECK_EQ_INT(r.ungoverned, 0);
    CHECK_EQ_INT(r.n_divergences, 0);
    CHECK(r.divergences == NULL);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(agreeing_ranks_matching_decision) {
    verifier *v = mk();
    for (int rank = 0; rank < 8; rank++)
        add(v, obs("k1", "B=64", "h0", rank, 100 + rank), "B=64");
    for (int rank = 0; rank < 8; rank++)
        add(v, obs("k2", "B=128", "h0", rank, 100 + rank), "B=128");
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 2);
    CHECK_EQ_INT(r.observations, 16);
    CHECK_EQ_INT(r.ungoverned, 0);
    CHECK_EQ_INT(r.n_divergences, 0);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(agreeing_ranks_without_decision) {
    verifier *v = mk();
    add(v, obs("k1", "B=64", "h0", 0, 1), NULL);
    add(v, obs("k1", "B=64", "h1", 1, 2), NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 1);
    CHECK_EQ_INT(r.n_divergences, 0);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(ranks_disagree) {
    verifier *v = mk();
    add(v, obs("k0", "A", "h0", 0, 1), "A"); /* fine */
    /* Fed in a scrambled order: uses sort by config, clients by host,
     * rank, pid. */
    add(v, obs("k1", "B=64", "h1", 3, 40), NULL);
    add(v, obs("k1", "B=128", "h1", 2, 30), NULL);
    add(v, obs("k1", "B=64", "h0", 1, 20), NULL);
    add(v, obs("k1", "B=64", "h0", 0, 10), NULL);
    add(v, obs("k1", "B=128", "h0", 5, 11), NULL);
    add(v, obs("k2", "C", "h0", 0, 1), "C"); /* fine */
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 3);
    CHECK_EQ_INT(r.observations, 7);
    CHECK_EQ_INT(r.n_divergences, 1);
    struct verify_divergence *d = &r.divergences[0];
    CHECK_STR(d->id, "k1");
    CHECK_STR(d->kernel, "mod:fn@g");
    CHECK_STR(d->key, "(i32:1024,)");
    CHECK_STR(d->arch, "sm90");
    CHECK(d->decided == NULL);
    CHECK_STR(d->reason, "ranks disagree");
    CHECK_EQ_INT(d->n_uses, 2);
    /* strcmp: "B=128" < "B=64" */
    CHECK_STR(d->uses[0].config, "B=128");
    CHECK_EQ_INT(d->uses[0].n_clients, 2);
    CHECK_STR(d->uses[0].clients[0].host, "h0");
    CHECK_EQ_INT(d->uses[0].clients[0].rank, 5);
    CHECK_EQ_INT(d->uses[0].clients[0].pid, 11);
    CHECK_EQ_INT(d->uses[0].clients[0].local_rank, 5);
    CHECK_STR(d->uses[0].clients[1].host, "h1");
    CHECK_EQ_INT(d->uses[0].clients[1].rank, 2);
    CHECK_STR(d->uses[1].config, "B=64");
    CHECK_EQ_INT(d->uses[1].n_clients, 3);
    CHECK_STR(d->uses[1].clients[0].host, "h0");
    CHECK_EQ_INT(d->uses[1].clients[0].rank, 0);
    CHECK_STR(d->uses[1].clients[1].host, "h0");
    CHECK_EQ_INT(d->uses[1].clients[1].rank, 1);
    CHECK_STR(d->uses[1].clients[2].host, "h1");
    CHECK_EQ_INT(d->uses[1].clients[2].rank, 3);
    CHECK_EQ_INT(d->uses[0].chaos, 0);
    CHECK_EQ_INT(d->uses[1].chaos, 0);
    verify_result_clear(&r);
    CHECK_EQ_INT(r.n_divergences, 0);
    CHECK(r.divergences == NULL);
    verify_free(v);
}

TEST(same_rank_ordered_by_pid) {
    verifier *v = mk();
    add(v, obs("k", "X", "h", 0, 300), NULL);
    add(v, obs("k", "X", "h", 0, 200), NULL);
    add(v, obs("k", "Y", "h", 0, 100), NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    struct verify_use *u = &r.divergences[0].uses[0];
    CHECK_STR(u->config, "X");
    CHECK_EQ_INT(u->n_clients, 2);
    CHECK_EQ_INT(u->clients[0].pid, 200);
    CHECK_EQ_INT(u->clients[1].pid, 300);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(differs_from_decision) {
    verifier *v = mk();
    add(v, obs("k1", "B=64", "h0", 0, 1), "B=128");
    add(v, obs("k1", "B=64", "h0", 1, 2), "B=128");
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    struct verify_divergence *d = &r.divergences[0];
    CHECK_STR(d->reason, "differs from decision");
    CHECK_STR(d->decided, "B=128");
    CHECK_EQ_INT(d->n_uses, 1);
    CHECK_STR(d->uses[0].config, "B=64");
    CHECK_EQ_INT(d->uses[0].n_clients, 2);
    verify_result_clear(&r);
    verify_free(v);
}

/* Both disagreeing and off the decision: "ranks disagree" wins. */
TEST(disagree_and_differ_reports_disagree) {
    verifier *v = mk();
    add(v, obs("k1", "B=64", "h0", 0, 1), "B=256");
    add(v, obs("k1", "B=128", "h0", 1, 2), "B=256");
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_STR(r.divergences[0].reason, "ranks disagree");
    CHECK_STR(r.divergences[0].decided, "B=256");
    CHECK_EQ_INT(r.divergences[0].n_uses, 2);
    verify_result_clear(&r);
    verify_free(v);
}

/* One rank agreeing with the decision, another not: still disagree. */
TEST(partial_match_with_decision_is_disagreement) {
    verifier *v = mk();
    add(v, obs("k1", "B=64", "h0", 0, 1), "B=64");
    add(v, obs("k1", "B=128", "h0", 1, 2), "B=64");
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_STR(r.divergences[0].reason, "ranks disagree");
    verify_result_clear(&r);
    verify_free(v);
}

TEST(ungoverned_counted_never_fail) {
    verifier *v = mk();
    struct verify_obs o = obs("k1", "B=64", "h0", 0, 1);
    o.governed = 0;
    add(v, o, "B=128"); /* off the decision, but ungoverned */
    o = obs("k1", "B=32", "h0", 1, 2);
    o.governed = 0;
    add(v, o, "B=128");
    add(v, obs("k1", "B=128", "h0", 2, 3), "B=128");
    o = obs("k2", "Z", "h0", 0, 1); /* a key with only ungoverned rows */
    o.governed = 0;
    add(v, o, NULL);
    o.config = "W";
    o.rank = 1;
    add(v, o, NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 2);
    CHECK_EQ_INT(r.observations, 5);
    CHECK_EQ_INT(r.ungoverned, 4);
    CHECK_EQ_INT(r.n_divergences, 0);
    verify_result_clear(&r);
    verify_free(v);
}

/* A tuner detd cannot govern (must_agree): its ranks must still agree;
 * counted as ungoverned, listed in the uses, never compared with a
 * decision it does not have. */
TEST(must_agree_rows_checked_for_agreement) {
    verifier *v = mk();
    struct verify_obs o = obs("k1", "B=64", "h0", 0, 1);
    o.governed = 0;
    o.must_agree = 1;
    add(v, o, NULL);
    o = obs("k1", "B=32", "h1", 1, 2);
    o.governed = 0;
    o.must_agree = 1;
    add(v, o, NULL);
    o = obs("k2", "B=16", "h0", 0, 1); /* agreeing: no divergence */
    o.governed = 0;
    o.must_agree = 1;
    add(v, o, NULL);
    o.rank = 1;
    o.host = "h1";
    add(v, o, NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 2);
    CHECK_EQ_INT(r.observations, 4);
    CHECK_EQ_INT(r.ungoverned, 4);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_STR(r.divergences[0].id, "k1");
    CHECK_STR(r.divergences[0].reason, "ranks disagree");
    CHECK_EQ_INT(r.divergences[0].n_uses, 2);
    CHECK_STR(r.divergences[0].uses[0].config, "B=32");
    CHECK_STR(r.divergences[0].uses[1].config, "B=64");
    verify_result_clear(&r);
    verify_free(v);
}

/* Ungoverned rows are not listed among the uses of a divergence. */
TEST(ungoverned_not_listed_in_uses) {
    verifier *v = mk();
    struct verify_obs o = obs("k1", "Q", "h9", 9, 9);
    o.governed = 0;
    add(v, o, NULL);
    add(v, obs("k1", "A", "h0", 0, 1), NULL);
    add(v, obs("k1", "B", "h0", 1, 2), NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_EQ_INT(r.divergences[0].n_uses, 2);
    CHECK_STR(r.divergences[0].uses[0].config, "A");
    CHECK_STR(r.divergences[0].uses[1].config, "B");
    verify_result_clear(&r);
    verify_free(v);
}

TEST(chaos_flag_marks_the_use) {
    verifier *v = mk();
    struct verify_obs o = obs("k1", "A", "h0", 0, 1);
    o.chaos = 1;
    add(v, o, NULL);
    add(v, obs("k1", "A", "h0", 2, 3), NULL);
    add(v, obs("k1", "B", "h0", 1, 2), NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_EQ_INT(r.divergences[0].uses[0].chaos, 1);
    CHECK_EQ_INT(r.divergences[0].uses[1].chaos, 0);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(repeated_observation_of_one_client_listed_once) {
    verifier *v = mk();
    for (int i = 0; i < 5; i++)
        add(v, obs("k1", "A", "h0", 0, 1), NULL);
    add(v, obs("k1", "B", "h0", 1, 2), NULL);
    add(v, obs("k1", "B", "h0", 1, 2), NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.observations, 7);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_EQ_INT(r.divergences[0].uses[0].n_clients, 1);
    CHECK_EQ_INT(r.divergences[0].uses[1].n_clients, 1);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(divergences_in_feed_order_and_null_fields) {
    verifier *v = mk();
    struct verify_obs o = obs("zz", "A", NULL, 0, 1);
    o.kernel = o.key = o.arch = NULL;
    add(v, o, "B");
    add(v, obs("aa", "A", "h", 0, 1), NULL);
    add(v, obs("aa", "B", "h", 1, 2), NULL);
    add(v, obs("mm", "A", "h", 0, 1), "A");
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 3);
    CHECK_EQ_INT(r.n_divergences, 2);
    CHECK_STR(r.divergences[0].id, "zz");
    CHECK_STR(r.divergences[0].kernel, "");
    CHECK_STR(r.divergences[0].key, "");
    CHECK_STR(r.divergences[0].arch, "");
    CHECK_STR(r.divergences[0].uses[0].clients[0].host, "");
    CHECK_STR(r.divergences[0].reason, "differs from decision");
    CHECK_STR(r.divergences[1].id, "aa");
    CHECK_STR(r.divergences[1].reason, "ranks disagree");
    verify_result_clear(&r);
    verify_free(v);
}

/* The verifier copies: the caller's buffers may change after add. */
TEST(inputs_are_copied) {
    verifier *v = mk();
    char id[8] = "k1", cfg[8] = "A", host[8] = "h0", dec[8] = "C";
    add(v, obs(id, cfg, host, 0, 1), dec);
    strcpy(cfg, "B");
    strcpy(host, "h1");
    add(v, obs(id, cfg, host, 1, 2), dec);
    strcpy(id, "zz");
    strcpy(cfg, "Q");
    strcpy(host, "hq");
    strcpy(dec, "Q");
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.n_divergences, 1);
    CHECK_STR(r.divergences[0].id, "k1");
    CHECK_STR(r.divergences[0].decided, "C");
    CHECK_STR(r.divergences[0].uses[0].config, "A");
    CHECK_STR(r.divergences[0].uses[0].clients[0].host, "h0");
    CHECK_STR(r.divergences[0].uses[1].config, "B");
    CHECK_STR(r.divergences[0].uses[1].clients[0].host, "h1");
    verify_result_clear(&r);
    verify_free(v);
}

TEST(ids_out_of_order_rejected) {
    verifier *v = mk();
    add(v, obs("k1", "A", "h", 0, 1), NULL);
    add(v, obs("k2", "A", "h", 0, 1), NULL);
    struct verify_obs o = obs("k1", "B", "h", 1, 2);
    CHECK_EQ_INT(verify_add(v, &o, NULL), DETD_EINVAL);
    /* The refused row changed nothing; the current group continues. */
    add(v, obs("k2", "A", "h", 1, 2), NULL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, 2);
    CHECK_EQ_INT(r.observations, 3);
    CHECK_EQ_INT(r.n_divergences, 0);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(decided_must_not_change_within_an_id) {
    verifier *v = mk();
    add(v, obs("k1", "A", "h", 0, 1), "A");
    struct verify_obs o = obs("k1", "A", "h", 1, 2);
    CHECK_EQ_INT(verify_add(v, &o, "B"), DETD_EINVAL);
    CHECK_EQ_INT(verify_add(v, &o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(verify_add(v, &o, "A"), 0);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.observations, 2);
    verify_result_clear(&r);
    verify_free(v);
}

TEST(bad_arguments) {
    verifier *v = mk();
    struct verify_obs o = obs("k1", "A", "h", 0, 1);
    struct verify_result r;
    CHECK_EQ_INT(verify_new(NULL), DETD_EINVAL);
    CHECK_EQ_INT(verify_add(NULL, &o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(verify_add(v, NULL, NULL), DETD_EINVAL);
    o.id = NULL;
    CHECK_EQ_INT(verify_add(v, &o, NULL), DETD_EINVAL);
    o = obs("k1", NULL, "h", 0, 1);
    CHECK_EQ_INT(verify_add(v, &o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(verify_finish(v, NULL), DETD_EINVAL);
    CHECK_EQ_INT(verify_finish(NULL, &r), DETD_EINVAL);
    finish(v, &r);
    CHECK_EQ_INT(r.observations, 0);
    /* After finish: only free. */
    o = obs("k1", "A", "h", 0, 1);
    CHECK_EQ_INT(verify_add(v, &o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(verify_finish(v, &r), DETD_EINVAL);
    verify_result_clear(&r);
    verify_result_clear(NULL);
    verify_free(v);
    verify_free(NULL);
}

/* Free with an unfinished group and a result still inside. */
TEST(free_without_finish) {
    verifier *v = mk();
    add(v, obs("k1", "A", "h", 0, 1), NULL);
    add(v, obs("k1", "B", "h", 1, 2), NULL);
    add(v, obs("k2", "A", "h", 0, 1), NULL);
    verify_free(v);
}

/* Many keys: the set of closed ids grows; every 10th key diverges. */
TEST(many_keys) {
    enum { KEYS = 20000 };
    verifier *v = mk();
    char id[32];
    for (int k = 0; k < KEYS; k++) {
        snprintf(id, sizeof(id), "key-%d", k);
        for (int rank = 0; rank < 4; rank++) {
            const char *cfg = (k % 10 == 0 && rank == 3) ? "odd" : "even";
            add(v, obs(id, cfg, "h", rank, rank), "even");
        }
    }
    snprintf(id, sizeof(id), "key-%d", 1234);
    struct verify_obs o = obs(id, "even", "h", 0, 0);
    CHECK_EQ_INT(verify_add(v, &o, "even"), DETD_EINVAL);
    struct verify_result r;
    finish(v, &r);
    CHECK_EQ_INT(r.keys_checked, KEYS);
    CHECK_EQ_INT(r.observations, 4 * KEYS);
    CHECK_EQ_INT(r.n_divergences, KEYS / 10);
    for (size_t i = 0; i < r.n_divergences; i++) {
        snprintf(id, sizeof(id), "key-%d", (int)i * 10);
        CHECK_STR(r.divergences[i].id, id);
        CHECK_STR(r.divergences[i].reason, "ranks disagree");
        CHECK_EQ_INT(r.divergences[i].n_uses, 2);
        CHECK_STR(r.divergences[i].uses[0].config, "even");
        CHECK_EQ_INT(r.divergences[i].uses[0].n_clients, 3);
        CHECK_STR(r.divergences[i].uses[1].config, "odd");
        CHECK_EQ_INT(r.divergences[i].uses[1].clients[0].rank, 3);
    }
    verify_result_clear(&r);
    verify_free(v);
}

/* A text rendering of a result, to compare two runs. */
static size_t render(const struct verify_result *r, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(
        buf, cap, "%llu %llu %llu %zu\n", (unsigned long long)r->keys_checked,
        (unsigned long long)r->observations, (unsigned long long)r->ungoverned,
        r->n_divergences);
    for (size_t i = 0; i < r->n_divergences && n < cap; i++) {
        const struct verify_divergence *d = &r->divergences[i];
        n += (size_t)snprintf(buf + n, cap - n, "%s|%s|%s|%s|%s|%s\n", d->id,
                              d->kernel, d->key, d->arch,
                              d->decided ? d->decided : "-", d->reason);
        for (size_t u = 0; u < d->n_uses && n < cap; u++) {
            const struct verify_use *use = &d->uses[u];
            n += (size_t)snprintf(buf + n, cap - n,
                                  " %s chaos=%d:", use->config, use->chaos);
            for (size_t c = 0; c < use->n_clients && n < cap; c++)
                n += (size_t)snprintf(
                    buf + n, cap - n, " %s/%d/%d/%d", use->clients[c].host,
                    (int)use->clients[c].rank, (int)use->clients[c].pid,
                    (int)use->clients[c].local_rank);
            n += (size_t)snprintf(buf + n, cap - n, "\n");
        }
    }
    CHECK(n < cap);
    return n;
}

#define SWEEP_ROWS 120

static struct verify_obs sweep_row(int i, const char **ret_decided) {
    static char ids[SWEEP_ROWS][16], hosts[SWEEP_ROWS][16];
    snprintf(ids[i], sizeof(ids[i]), "key-%d", i / 4);
    snprintf(hosts[i], sizeof(hosts[i]), "h%d", (i * 7) % 3);
    static const char *cfgs[] = {"A", "B", "C"};
    /* Keys whose number is a multiple of 3 disagree. */
    const char *cfg = (i / 4) % 3 == 0 ? cfgs[i % 3] : "A";
    struct verify_obs o = obs(ids[i], cfg, hosts[i], i % 4, 100 + i);
    o.governed = i % 5 != 4;
    o.chaos = i % 7 == 0;
    *ret_decided = (i / 4) % 2 == 0 ? "A" : ((i / 4) % 5 == 1 ? "B" : NULL);
    return o;
}

/*
 * Every allocation of verify_new, verify_add and verify_finish fails in
 * turn; each failure returns DETD_ENOMEM, the retry succeeds, and the
 * final result is the same as without failures.
 */
TEST(alloc_failures_then_retry_give_the_same_result) {
    check_wrapped();
    static char want[1 << 16], got[1 << 16];
    const char *decided;
    verifier *v = mk();
    for (int i = 0; i < SWEEP_ROWS; i++) {
        struct verify_obs o = sweep_row(i, &decided);
        add(v, o, decided);
    }
    struct verify_result r;
    finish(v, &r);
    CHECK(r.n_divergences > 5);
    size_t nw = render(&r, want, sizeof(want));
    verify_result_clear(&r);
    verify_free(v);

    long f, failures = 0;
    v = NULL;
    for (f = 1;; f++) {
        fail_at = f;
        int rc = verify_new(&v);
        long left = fail_at;
        fail_at = 0;
        if (left > 0) {
            CHECK_EQ_INT(rc, 0);
            break;
        }
        CHECK_EQ_INT(rc, DETD_ENOMEM);
        CHECK(v == NULL);
        failures++;
    }
    for (int i = 0; i < SWEEP_ROWS; i++) {
        struct verify_obs o = sweep_row(i, &decided);
        for (f = 1;; f++) {
            fail_at = f;
            int rc = verify_add(v, &o, decided);
            long left = fail_at;
            fail_at = 0;
            if (left > 0) {
                CHECK_EQ_INT(rc, 0);
                break;
            }
            CHECK_EQ_INT(rc, DETD_ENOMEM);
            failures++;
        }
    }
    for (f = 1;; f++) {
        memset(&r, 0, sizeof(r));
        fail_at = f;
        int rc = verify_finish(v, &r);
        long left = fail_at;
        fail_at = 0;
        if (left > 0) {
            CHECK_EQ_INT(rc, 0);
            break;
        }
        CHECK_EQ_INT(rc, DETD_ENOMEM);
        CHECK_EQ_INT(r.n_divergences, 0);
        failures++;
    }
    CHECK(failures > SWEEP_ROWS);
    size_t ng = render(&r, got, sizeof(got));
    CHECK_EQ_INT(ng, nw);
    CHECK_STR(got, want);
    verify_result_clear(&r);
    verify_free(v);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
