/*
 * cluster_backoff_ms: the boot retry delay grows as base * 2^attempt up to
 * the cap, every draw lies in [0, ceiling], the draws spread over the whole
 * window (full jitter, not a fixed step), and two daemons seeded
 * differently do not retry in lock step.
 */
#define _GNU_SOURCE
#include "cluster/cluster_nodes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
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

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
