/*
 * cluster_backoff_ms: the boot retry delay grows as base * 2^attempt up to
 * the cap, every draw lies in [0, ceiling], the draws spread over the whole
 * window (full jitter, not a fixed step), and two daemons seeded
 * differently do not retry in lock step.
 */
#define _GNU_SOURCE
#include "cluster/cluster_nodes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "core/keyid.h"
#include "runner.h"

TEST(backoff_within_ceiling) {
    uint64_t rng = 12345;
    for (unsigned a = 0; a < 20; a++) {
        int64_t ceil = 100;
        for (unsigned i = 0; i < a && ceil < 3000; i++)
            ceil *= 2;
        if (ceil > 3000)
            ceil = 3000;
        int64_t max = 0;
        for (int k = 0; k < 2000; k++) {
            int64_t ms = cluster_backoff_ms(a, 100, 3000, &rng);
            CHECK(ms >= 0 && ms <= ceil);
            if (ms > max)
                max = ms;
        }
        /* 2000 uniform draws reach the top tenth of the window. */
        CHECK(max >= ceil * 9 / 10);
    }
}

TEST(backoff_full_jitter_spread) {
    /* Attempt 4: window [0, 1600]. Each quarter gets a fair share. */
    uint64_t rng = 99;
    int q[4] = {0};
    for (int k = 0; k < 4000; k++) {
        int64_t ms = cluster_backoff_ms(4, 100, 3000, &rng);
        q[ms * 4 / 1601]++;
    }
    for (int i = 0; i < 4; i++)
        CHECK(q[i] > 800 && q[i] < 1200);
}

TEST(backoff_capped_and_no_overflow) {
    uint64_t rng = 7;
    for (int k = 0; k < 100; k++) {
        int64_t ms = cluster_backoff_ms(4000000000u, 100, 3000, &rng);
        CHECK(ms >= 0 && ms <= 3000);
    }
}

TEST(backoff_zero_state_and_seeds_differ) {
    uint64_t z = 0;
    cluster_backoff_ms(3, 100, 3000, &z);
    CHECK(z != 0);
    uint64_t a = cluster_random_u64(), b = a ^ 0x5555;
    int same = 0;
    for (int k = 0; k < 50; k++)
        same += cluster_backoff_ms(5, 100, 3000, &a) ==
                cluster_backoff_ms(5, 100, 3000, &b);
    CHECK(same < 10);
}

TEST(node_id_check) {
    char *msg = NULL;
    CHECK_EQ_INT(cluster_node_id_check("node-1", &msg), 0);
    CHECK(msg == NULL);
    CHECK_EQ_INT(cluster_node_id_check("a/b", &msg), DETD_EINVAL);
    CHECK(msg != NULL && strstr(msg, "'a/b'") != NULL);
    free(msg);
    CHECK_EQ_INT(cluster_node_id_check("", NULL), DETD_EINVAL);
}

/* Rendezvous order (one claimant per key): for every key the nodes' ranks
 * are 0..n-1 (one owner), the owners spread evenly, a node missing from
 * the registry claims at once, and leaving the owner out makes the next
 * node the owner while the others keep their order. */
TEST(rendezvous_one_owner_per_key) {
    struct cluster_node v[5];
    memset(v, 0, sizeof(v));
    for (int i = 0; i < 5; i++)
        snprintf(v[i].node_id, sizeof(v[i].node_id), "node-%d", i);
    int owned[5] = {0};
    char id[KEYID_HEX_LEN + 1];
    for (int k = 0; k < 5000; k++) {
        snprintf(id, sizeof(id), "%064x", k * 2654435761u);
        int seen[5] = {0};
        int owner = -1;
        for (int i = 0; i < 5; i++) {
            size_t r = cluster_rendezvous_rank(v, 5, v[i].node_id, id, NULL);
            CHECK(r < 5);
            seen[r]++;
            if (r == 0)
                owner = i;
        }
        for (int r = 0; r < 5; r++)
            CHECK_EQ_INT(seen[r], 1);
        owned[owner]++;
        /* Without the owner: the node of rank 1 owns it, every other
         * node moves up by one. */
        for (int i = 0; i < 5; i++) {
            if (i == owner)
                continue;
            size_t r = cluster_rendezvous_rank(v, 5, v[i].node_id, id, NULL);
            CHECK_EQ_INT((int)cluster_rendezvous_rank(v, 5, v[i].node_id, id,
                                                      v[owner].node_id),
                         (int)r - 1);
        }
    }
    for (int i = 0; i < 5; i++)
        CHECK(owned[i] > 850 && owned[i] < 1150);
    CHECK_EQ_INT((int)cluster_rendezvous_rank(v, 5, "node-9", id, NULL), 0);
    CHECK_EQ_INT((int)cluster_rendezvous_rank(NULL, 0, "node-0", id, NULL), 0);
    /* The separator: ("a", "bc") and ("ab", "c") weigh differently. */
    CHECK(cluster_rendezvous_weight("a", "bc") !=
          cluster_rendezvous_weight("ab", "c"));
}

TEST(defer_steps_are_capped) {
    CHECK_EQ_INT((int)cluster_defer_ms(0, 500, 50, 8), 0);
    CHECK_EQ_INT((int)cluster_defer_ms(1, 500, 50, 8), 500);
    CHECK_EQ_INT((int)cluster_defer_ms(2, 500, 50, 8), 550);
    CHECK_EQ_INT((int)cluster_defer_ms(9, 500, 50, 8), 900);
    CHECK_EQ_INT((int)cluster_defer_ms(100000, 500, 50, 8), 900);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
