/*
 * detd_bench: load generator for the decide benchmark.
 *
 *   detd_bench SOCKET populate N THREADS
 *       decide + report N distinct keys (each becomes a timed decision)
 *   detd_bench SOCKET decide KEYS THREADS SECONDS
 *       decide already-decided keys i:0..KEYS-1 through libdetd (one
 *       handle shared by THREADS threads, as in a training process)
 *   detd_bench SOCKET miss KEYS THREADS SECONDS
 *       as decide, for keys u:0..KEYS-1 nobody decided, without claiming
 *       them: each call is answered MISS by the daemon's loop (store and
 *       table lookups), never from the answer cache
 *   detd_bench SOCKET health THREADS SECONDS
 *       the grpc.health.v1 Check round trip on the same socket: the floor
 *
 * Prints one line: "mode=... threads=... calls=... per_s=... p50_us=...
 * p99_us=... max_us=... errors=...".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "detd.pb-c.h"
#include "detd/client.h"

#define KERNEL "bench:kernel@0000000000000000"
static const char *const CANDS[] = {
    "BLOCK=16,num_warps=4", "BLOCK=32,num_warps=4", "BLOCK=64,num_warps=4",
    "BLOCK=128,num_warps=4"};

static const char *sock;
static detd_client *client;
static long nkeys;
static double seconds;
static atomic_long next_key;
static atomic_long errors;
static int miss_mode; /* keys u:N, answered MISS */

struct lat {
    double *us;
    size_t n, cap;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void lat_add(struct lat *l, double us) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->us = realloc(l->us, l->cap * sizeof(double));
    }
    l->us[l->n++] = us;
}

static void make_key(long i, char *buf, size_t n, struct detd_key *k) {
    snprintf(buf, n, miss_mode ? "u:%ld" : "i:%ld", i);
    k->namespace_ = NULL;
    k->arch = "sm90";
    k->kernel = KERNEL;
    k->key = buf;
    k->candidates = CANDS;
    k->n_candidates = 4;
    k->table_key = NULL;
}

static void *populate_thread(void *arg) {
    (void)arg;
    char buf[64];
    for (;;) {
        long i = atomic_fetch_add(&next_key, 1);
        if (i >= nkeys)
            break;
        struct detd_key k;
        make_key(i, buf, sizeof(buf), &k);
        struct detd_answer *a = NULL;
        if (detd_decide(client, &k, 0, 60000, &a) != 0) {
            atomic_fetch_add(&errors, 1);
            continue;
        }
        if (a->outcome == DETD_OUTCOME_DESIGNATED) {
            double ms[4][3] = {
                {4, 4, 4}, {3, 3, 3}, {2, 2, 2}, {1 + (double)(i % 3), 3, 3}};
            struct detd_timing t[4];
            for (int j = 0; j < 4; j++)
                t[j] = (struct detd_timing){CANDS[j], ms[j], 3, 0};
            struct detd_answer *r = NULL;
            if (detd_report(client, a->claim_id, &k, t, 4, "bench", 60000,
                            &r) != 0)
                atomic_fetch_add(&errors, 1);
            detd_answer_free(r);
        }
        detd_answer_free(a);
    }
    return NULL;
}

static void *decide_thread(void *arg) {
    struct lat *l = arg;
    char buf[64];
    unsigned seed = (unsigned)(uintptr_t)arg;
    double end = now_s() + seconds;
    while (now_s() < end) {
        struct detd_key k;
        make_key((long)(rand_r(&seed) % nkeys), buf, sizeof(buf), &k);
        struct detd_answer *a = NULL;
        double t0 = now_s();
        int rc = detd_decide(client, &k, DETD_DECIDE_NO_CLAIM, 10000, &a);
        double t1 = now_s();
        if (rc != 0 || a->outcome != (miss_mode ? DETD_OUTCOME_MISS
                                                : DETD_OUTCOME_DECIDED))
            atomic_fetch_add(&errors, 1);
        detd_answer_free(a);
        lat_add(l, (t1 - t0) * 1e6);
    }
    return NULL;
}

static grpc_channel *hchan;
static const char *raw_method = "/grpc.health.v1.Health/Check";
static uint8_t *raw_buf;
static size_t raw_len;

static void *health_thread(void *arg) {
    struct lat *l = arg;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice method = grpc_slice_from_static_string(raw_method);
    double end = now_s() + seconds;
    while (now_s() < end) {
        double t0 = now_s();
        gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                       gpr_time_from_seconds(10, GPR_TIMESPAN));
        grpc_call *call = grpc_channel_create_call(
            hchan, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL, dl, NULL);
        grpc_slice rs =
            grpc_slice_from_copied_buffer((const char *)raw_buf, raw_len);
        grpc_byte_buffer *req = grpc_raw_byte_buffer_create(&rs, 1);
        grpc_slice_unref(rs);
        grpc_metadata_array md, tmd;
        grpc_metadata_array_init(&md);
        grpc_metadata_array_init(&tmd);
        grpc_byte_buffer *resp = NULL;
        grpc_status_code st = GRPC_STATUS_UNKNOWN;
        grpc_slice details;
        grpc_op ops[6];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = req;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
        ops[4].op = GRPC_OP_RECV_MESSAGE;
        ops[4].data.recv_message.recv_message = &resp;
        ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[5].data.recv_status_on_client.trailing_metadata = &tmd;
        ops[5].data.recv_status_on_client.status = &st;
        ops[5].data.recv_status_on_client.status_details = &details;
        grpc_call_start_batch(call, ops, 6, (void *)1, NULL);
        grpc_completion_queue_pluck(cq, (void *)1,
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        double t1 = now_s();
        if (st != GRPC_STATUS_OK && atomic_fetch_add(&errors, 1) == 0) {
            char *m = grpc_slice_to_c_string(details);
            fprintf(stderr, "first error: status %d: %s\n", (int)st, m);
            gpr_free(m);
        }
        grpc_slice_unref(details);
        if (resp != NULL)
            grpc_byte_buffer_destroy(resp);
        grpc_byte_buffer_destroy(req);
        grpc_metadata_array_destroy(&md);
        grpc_metadata_array_destroy(&tmd);
        grpc_call_unref(call);
        lat_add(l, (t1 - t0) * 1e6);
    }
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: see the comment at the top of detd_bench.c\n");
        return 2;
    }
    sock = argv[1];
    const char *mode = argv[2];
    int threads = 1;
    struct detd_identity id = {.host = "bench",
                               .rank = 0,
                               .local_rank = 0,
                               .world_size = 1,
                               .arch = "sm90"};
    if (detd_client_open(sock, &id, &client) != 0)
        return 1;
    pthread_t th[256];
    struct lat lats[256];
    memset(lats, 0, sizeof(lats));
    double t0 = now_s();
    if (strcmp(mode, "populate") == 0) {
        nkeys = atol(argv[3]);
        threads = argc > 4 ? atoi(argv[4]) : 4;
        for (int i = 0; i < threads; i++)
            pthread_create(&th[i], NULL, populate_thread, NULL);
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        printf("mode=populate keys=%ld seconds=%.1f per_s=%.0f errors=%ld\n",
               nkeys, dt, (double)nkeys / dt, atomic_load(&errors));
        detd_client_close(client);
        return errors ? 1 : 0;
    }
    int is_health =
        strcmp(mode, "health") == 0 || strcmp(mode, "rawdecide") == 0;
    if (strcmp(mode, "rawdecide") == 0) {
        /* The same Decide as the libdetd mode, sent over a bare channel:
         * separates the library's cost from the daemon's. */
        Detd__V1__DecideRequest req = DETD__V1__DECIDE_REQUEST__INIT;
        Detd__V1__DecisionKey k = DETD__V1__DECISION_KEY__INIT;
        k.arch = "sm90";
        k.kernel = KERNEL;
        k.key = "i:1";
        k.candidates = (char **)CANDS;
        k.n_candidates = 4;
        req.api_version = 1;
        req.key = &k;
        req.no_claim = 1;
        raw_len = protobuf_c_message_get_packed_size(&req.base);
        raw_buf = malloc(raw_len);
        protobuf_c_message_pack(&req.base, raw_buf);
        raw_method = "/detd.v1.Decider/Decide";
    }
    if (is_health) {
        threads = atoi(argv[3]);
        seconds = atof(argv[4]);
        grpc_init();
        char target[512];
        snprintf(target, sizeof(target), "unix:%s", sock);
        grpc_channel_credentials *c = grpc_insecure_credentials_create();
        hchan = grpc_channel_create(target, c, NULL);
        grpc_channel_credentials_release(c);
    } else {
        miss_mode = strcmp(mode, "miss") == 0;
        nkeys = atol(argv[3]);
        threads = atoi(argv[4]);
        seconds = atof(argv[5]);
        /* Connect and attach before timing. */
        detd_client_connect(client, 5000);
    }
    if (threads < 1 || threads > 256)
        return 2;
    t0 = now_s();
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, is_health ? health_thread : decide_thread,
                       &lats[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    struct lat all = {0};
    for (int i = 0; i < threads; i++)
        for (size_t j = 0; j < lats[i].n; j++)
            lat_add(&all, lats[i].us[j]);
    qsort(all.us, all.n, sizeof(double), cmp);
    printf("mode=%s threads=%d calls=%zu per_s=%.0f p50_us=%.1f p99_us=%.1f "
           "max_us=%.1f errors=%ld\n",
           mode, threads, all.n, (double)all.n / dt,
           all.n ? all.us[all.n / 2] : 0.0,
           all.n ? all.us[(size_t)((double)all.n * 0.99)] : 0.0,
           all.n ? all.us[all.n - 1] : 0.0, atomic_load(&errors));
    detd_client_close(client);
    return 0;
}
