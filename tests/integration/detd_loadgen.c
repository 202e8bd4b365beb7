/*
 * detd_loadgen: a client process for integration tests and benchmarks.
 *
 *   detd_loadgen --socket S --keys N --kernel K [--rank R] [--candidates C]
 *                [--sleep-ms T] [--seed X] [--timeout MS]
 *                [--report-json FILE] [--observe] [--chaos] [--hold]
 *   detd_loadgen --socket S --bench [--threads M] [--seconds S] [--keys N]
 *
 * Normal mode: for each key, detd_decide(); when designated, a simulated
 * timing pass (sleep T ms, deterministic pseudo-timings from the seed),
 * detd_report(), then the committed config is used. --hold stops (pauses
 * forever) right after the first designation so a test can kill -9 this
 * process mid-pass; "designated KEY" is printed to stdout first. --chaos
 * uses a different config per rank on purpose (the verify positive
 * control). The JSON report lists, for each key, the config used, the
 * outcome, the source and whether this process ran a timing pass.
 * Exit status: 0 every key got a config, 1 some did not, 2 bad usage.
 *
 * Bench mode: decides every key once, then M threads call detd_decide on
 * those already-decided keys for S seconds and print calls/s and p50/p99
 * latency, then the same for a grpc.health.v1 Check round trip (the
 * floor: the cheapest call the daemon can answer).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "detd/client.h"
#include "wire.h"

struct loadgen_opts {
    const char *socket;
    int keys;
    const char *kernel;
    int rank;
    int candidates;
    int sleep_ms;
    uint64_t seed;
    int64_t timeout_ms;
    const char *report_json;
    int observe;
    int chaos;
    int hold;
    int bench;
    int threads;
    int seconds;
};

static int64_t loadgen_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* splitmix64: deterministic pseudo-timings. */
static uint64_t loadgen_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static const char *loadgen_outcome(detd_outcome o) {
    switch (o) {
    case DETD_OUTCOME_DECIDED:
        return "decided";
    case DETD_OUTCOME_DESIGNATED:
        return "designated";
    case DETD_OUTCOME_MISS:
        return "miss";
    case DETD_OUTCOME_TIMEOUT:
        return "timeout";
    }
    return "unknown";
}

static const char *loadgen_source(detd_source s) {
    static const char *const names[] = {"unspecified", "timed",  "table",
                                        "override",    "import", "fallback",
                                        "local"};
    return (int)s >= 0 && (int)s <= 6 ? names[s] : "unknown";
}

struct loadgen_keyset {
    char **cands;
    int n;
};

static int loadgen_candidates(int n, struct loadgen_keyset *ret) {
    ret->cands = calloc((size_t)n, sizeof(*ret->cands));
    if (ret->cands == NULL)
        return -1;
    for (int j = 0; j < n; j++)
        if (asprintf(&ret->cands[j], "BLOCK=%d,num_stages=%d,num_warps=%d",
                     16 << (j % 8), 2 + j / 8, 4) < 0)
            return -1;
    ret->n = n;
    return 0;
}

static void loadgen_key_name(int i, char *buf, size_t len) {
    snprintf(buf, len, "(%d,'torch.float16')", 1024 * (i + 1));
}

/* Decide one key; run the pass when designated. Appends to results. */
static int loadgen_one(const struct loadgen_opts *o, detd_client *c,
                       const struct loadgen_keyset *ks, int i, json_t *results,
                       int *passes) {
    char keyname[64];
    loadgen_key_name(i, keyname, sizeof(keyname));
    struct detd_key k = {NULL,
                         "sm90",
                         o->kernel,
                         keyname,
                         (const char *const *)ks->cands,
                         (size_t)ks->n,
                         NULL};
    struct detd_answer *a = NULL, *r = NULL;
    int timed = 0, ok = 0;
    const char *config = NULL;
    detd_source source = DETD_SOURCE_UNSPECIFIED;
    const char *outcome = "error";
    char errbuf[512] = "";

    int rc = detd_decide(c, &k, 0, o->timeout_ms, &a);
    if (rc < 0) {
        snprintf(errbuf, sizeof(errbuf), "decide: %s: %s", detd_err_name(rc),
                 detd_client_last_error());
        goto record;
    }
    outcome = loadgen_outcome(a->outcome);
    if (a->outcome == DETD_OUTCOME_DECIDED) {
        config = a->config;
        source = a->source;
        ok = 1;
    } else if (a->outcome == DETD_OUTCOME_DESIGNATED) {
        if (o->hold) {
            printf("designated %s\n", keyname);
            fflush(stdout);
            for (;;)
                pause();
        }
        timed = 1;
        (*passes)++;
        if (o->sleep_ms > 0)
            usleep((useconds_t)o->sleep_ms * 1000);
        struct detd_timing *tm = calloc((size_t)ks->n, sizeof(*tm));
        double *ms = calloc((size_t)ks->n, sizeof(*ms));
        if (tm == NULL || ms == NULL) {
            free(tm);
            free(ms);
            snprintf(errbuf, sizeof(errbuf), "out of memory");
            goto record;
        }
        for (int j = 0; j < ks->n; j++) {
            uint64_t h = loadgen_mix(o->seed ^ loadgen_mix((uint64_t)i) ^
                                     ((uint64_t)j << 32));
            ms[j] = 1.0 + (double)(h % 1000) / 1000.0;
            tm[j] = (struct detd_timing){ks->cands[j], &ms[j], 1, 0};
        }
        rc = detd_report(c, a->claim_id, &k, tm, (size_t)ks->n, "loadgen",
                         o->timeout_ms, &r);
        free(tm);
        free(ms);
        if (rc < 0) {
            snprintf(errbuf, sizeof(errbuf), "report: %s: %s",
                     detd_err_name(rc), detd_client_last_error());
            goto record;
        }
        config = r->config;
        source = r->source;
        ok = 1;
    } else {
        /* miss / timeout: the first candidate, like on_miss=first */
        config = ks->cands[0];
        source = DETD_SOURCE_FALLBACK;
        ok = 1;
    }
    if (o->chaos) {
        config = ks->cands[(o->rank < 0 ? 0 : o->rank) % ks->n];
        source = DETD_SOURCE_LOCAL;
    }
    if (o->observe) {
        int flags = DETD_OBSERVE_GOVERNED | (o->chaos ? DETD_OBSERVE_CHAOS : 0);
        rc = detd_observe(c, &k, config, source, flags, o->timeout_ms);
        if (rc < 0)
            snprintf(errbuf, sizeof(errbuf), "observe: %s: %s",
                     detd_err_name(rc), detd_client_last_error());
    }
record:;
    json_t *e = json_pack("{s:s, s:s, s:s?, s:s, s:b}", "key", keyname,
                          "outcome", outcome, "config", config, "source",
                          loadgen_source(source), "timed", timed);
    if (e != NULL && errbuf[0] != '\0')
        json_object_set_new(e, "error", json_string(errbuf));
    if (e != NULL && a != NULL && a->decided_by_host != NULL)
        json_object_set_new(
            e, "decided_by",
            json_pack("{s:s, s:i, s:i}", "host", a->decided_by_host, "rank",
                      (int)a->decided_by_rank, "pid", (int)a->decided_by_pid));
    json_array_append_new(results, e);
    if (errbuf[0] != '\0')
        fprintf(stderr, "detd_loadgen: key %s: %s\n", keyname, errbuf);
    detd_answer_free(r);
    detd_answer_free(a);
    return ok && errbuf[0] == '\0' ? 0 : -1;
}

/* ---- bench --------------------------------------------------------- */

struct loadgen_bench {
    const struct loadgen_opts *o;
    detd_client *client;
    struct wire_channel *channel; /* health mode when not NULL */
    const struct loadgen_keyset *ks;
    int64_t until_us;
    int id;
    int64_t *lat;
    size_t n, cap;
    int errors;
};

static void *loadgen_bench_thread(void *arg) {
    struct loadgen_bench *b = arg;
    uint64_t x = (uint64_t)b->id * 7919 + 1;
    while (loadgen_now_us() < b->until_us) {
        int64_t t0 = loadgen_now_us();
        int rc;
        if (b->channel != NULL) {
            int st = 0;
            rc = wire_health_check(b->channel, "", 10000, &st);
        } else {
            char keyname[64];
            x = loadgen_mix(x);
            loadgen_key_name((int)(x % (uint64_t)b->o->keys), keyname,
                             sizeof(keyname));
            struct detd_key k = {NULL,
                                 "sm90",
                                 b->o->kernel,
                                 keyname,
                                 (const char *const *)b->ks->cands,
                                 (size_t)b->ks->n,
                                 NULL};
            struct detd_answer *a = NULL;
            rc = detd_decide(b->client, &k, DETD_DECIDE_NO_CLAIM, 10000, &a);
            if (rc == 0 && a->outcome != DETD_OUTCOME_DECIDED)
                rc = -1;
            detd_answer_free(a);
        }
        int64_t dt = loadgen_now_us() - t0;
        if (rc != 0) {
            b->errors++;
            continue;
        }
        if (b->n == b->cap) {
            size_t cap = b->cap ? b->cap * 2 : 4096;
            int64_t *n = realloc(b->lat, cap * sizeof(*n));
            if (n == NULL)
                break;
            b->lat = n;
            b->cap = cap;
        }
        b->lat[b->n++] = dt;
    }
    return NULL;
}

static int loadgen_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int loadgen_bench_run(const struct loadgen_opts *o, detd_client *c,
                             struct wire_channel *ch,
                             const struct loadgen_keyset *ks,
                             const char *label) {
    struct loadgen_bench *b = calloc((size_t)o->threads, sizeof(*b));
    pthread_t *th = calloc((size_t)o->threads, sizeof(*th));
    if (b == NULL || th == NULL)
        return -1;
    int64_t start = loadgen_now_us();
    for (int t = 0; t < o->threads; t++) {
        b[t] = (struct loadgen_bench){.o = o,
                                      .client = c,
                                      .channel = ch,
                                      .ks = ks,
                                      .until_us =
                                          start + (int64_t)o->seconds * 1000000,
                                      .id = t};
        pthread_create(&th[t], NULL, loadgen_bench_thread, &b[t]);
    }
    size_t total = 0;
    int errors = 0;
    for (int t = 0; t < o->threads; t++) {
        pthread_join(th[t], NULL);
        total += b[t].n;
        errors += b[t].errors;
    }
    double secs = (double)(loadgen_now_us() - start) / 1e6;
    int64_t *all = malloc((total ? total : 1) * sizeof(*all));
    size_t k = 0;
    for (int t = 0; t < o->threads; t++) {
        if (all != NULL)
            memcpy(all + k, b[t].lat, b[t].n * sizeof(*all));
        k += b[t].n;
        free(b[t].lat);
    }
    if (all != NULL && total > 0) {
        qsort(all, total, sizeof(*all), loadgen_cmp);
        printf("%-7s threads %d  calls %zu  %.0f calls/s  p50 %lld us  p99 "
               "%lld us  errors %d\n",
               label, o->threads, total, (double)total / secs,
               (long long)all[total / 2], (long long)all[total * 99 / 100],
               errors);
    } else {
        printf("%-7s threads %d  no successful call, errors %d\n", label,
               o->threads, errors);
    }
    free(all);
    free(b);
    free(th);
    return total > 0 && errors == 0 ? 0 : -1;
}

static void loadgen_usage(void) {
    fprintf(stderr,
            "usage: detd_loadgen --socket S --keys N --kernel K [--rank R]\n"
            "         [--candidates C] [--sleep-ms T] [--seed X] "
            "[--timeout MS]\n"
            "         [--report-json FILE] [--observe] [--chaos] [--hold]\n"
            "       detd_loadgen --socket S --bench [--threads M] "
            "[--seconds S] [--keys N]\n");
}

static int loadgen_int(const char *s, long long lo, long long hi,
                       long long *ret) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *ret = v;
    return 0;
}

int main(int argc, char **argv) {
    struct loadgen_opts o = {.keys = 1,
                             .kernel = "loadgen:kernel@1",
                             .rank = -1,
                             .candidates = 4,
                             .sleep_ms = 0,
                             .seed = 1,
                             .timeout_ms = 600000,
                             .threads = 4,
                             .seconds = 5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n = 0;
#define LOADGEN_NUM(name, lo, hi, field)                                       \
    if (strcmp(a, name) == 0) {                                                \
        if (v == NULL || loadgen_int(v, lo, hi, &n) < 0) {                     \
            fprintf(stderr,                                                    \
                    "detd_loadgen: %s needs a number in [%lld, "               \
                    "%lld]\n",                                                 \
                    name, (long long)(lo), (long long)(hi));                   \
            return 2;                                                          \
        }                                                                      \
        o.field = n;                                                           \
        i++;                                                                   \
        continue;                                                              \
    }
        LOADGEN_NUM("--keys", 1, 10000000, keys)
        LOADGEN_NUM("--rank", -1, 1000000, rank)
        LOADGEN_NUM("--candidates", 1, DETD_MAX_CANDIDATES, candidates)
        LOADGEN_NUM("--sleep-ms", 0, 3600000, sleep_ms)
        LOADGEN_NUM("--seed", 0, INT64_MAX, seed)
        LOADGEN_NUM("--timeout", 1, INT64_MAX, timeout_ms)
        LOADGEN_NUM("--threads", 1, 1024, threads)
        LOADGEN_NUM("--seconds", 1, 86400, seconds)
#undef LOADGEN_NUM
        if (strcmp(a, "--socket") == 0 && v != NULL) {
            o.socket = v;
            i++;
        } else if (strcmp(a, "--kernel") == 0 && v != NULL) {
            o.kernel = v;
            i++;
        } else if (strcmp(a, "--report-json") == 0 && v != NULL) {
            o.report_json = v;
            i++;
        } else if (strcmp(a, "--observe") == 0) {
            o.observe = 1;
        } else if (strcmp(a, "--chaos") == 0) {
            o.chaos = 1;
        } else if (strcmp(a, "--hold") == 0) {
            o.hold = 1;
        } else if (strcmp(a, "--bench") == 0) {
            o.bench = 1;
        } else {
            loadgen_usage();
            return 2;
        }
    }

    struct loadgen_keyset ks;
    if (loadgen_candidates(o.candidates, &ks) < 0) {
        fprintf(stderr, "detd_loadgen: out of memory\n");
        return 2;
    }
    struct detd_identity id = {NULL,      o.rank, o.rank, 0,
                               "loadgen", "sm90", 0,      "loadgen"};
    detd_client *c = NULL;
    int rc = detd_client_open(o.socket, &id, &c);
    if (rc < 0) {
        fprintf(stderr, "detd_loadgen: open '%s': %s: %s\n",
                o.socket ? o.socket : "(default)", detd_strerror(rc),
                detd_client_last_error());
        return 2;
    }

    int failed = 0, passes = 0;
    json_t *results = json_array();
    int64_t t0 = loadgen_now_us();
    for (int i = 0; i < o.keys; i++)
        if (loadgen_one(&o, c, &ks, i, results, &passes) < 0)
            failed++;
    double secs = (double)(loadgen_now_us() - t0) / 1e6;

    if (o.report_json != NULL) {
        json_t *rep = json_pack(
            "{s:i, s:i, s:s, s:i, s:i, s:f, s:o}", "pid", (int)getpid(), "rank",
            o.rank, "kernel", o.kernel, "timing_passes", passes, "failed",
            failed, "seconds", secs, "keys", json_incref(results));
        if (rep == NULL ||
            json_dump_file(rep, o.report_json, JSON_INDENT(2)) != 0) {
            fprintf(stderr, "detd_loadgen: cannot write '%s'\n", o.report_json);
            failed++;
        }
        json_decref(rep);
    }
    json_decref(results);

    if (o.bench && failed == 0) {
        if (loadgen_bench_run(&o, c, NULL, &ks, "decide") < 0)
            failed++;
        char *target = NULL;
        struct wire_channel *ch = NULL;
        if (asprintf(&target, "unix:%s", detd_client_socket(c)) < 0 ||
            wire_channel_new(target, &ch) < 0) {
            failed++;
        } else {
            if (loadgen_bench_run(&o, NULL, ch, &ks, "health") < 0)
                failed++;
            wire_channel_free(ch);
        }
        free(target);
    } else if (!o.bench) {
        printf("detd_loadgen: %d keys, %d timing passes, %d failed, %.3f s\n",
               o.keys, passes, failed, secs);
    }
    detd_client_close(c);
    for (int j = 0; j < ks.n; j++)
        free(ks.cands[j]);
    free(ks.cands);
    return failed == 0 ? 0 : 1;
}
