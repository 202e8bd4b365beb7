/*
 * campaign_client: one training process of the fault campaign.
 *
 *   campaign_client --socket S --history FILE --kernel K --keys N
 *       [--order-seed X] [--candidates C] [--pass-ms T] [--deadline-ms D]
 *       [--on-miss error|first] [--daemon NAME] [--rank R] [--no-retry]
 *       [--until FILE [--max-rounds M]]
 *
 * It decides keys 0..N-1 of kernel K in an order shuffled by X (with
 * --until: round after round, keys "r<round>:<i>", until FILE exists or M
 * rounds are done, so processes keep meeting fresh keys together), the way
 * the Triton hook does: Decide; when designated, a simulated timing pass
 * (sleep T ms) whose pseudo-timings depend on the pid (so two processes
 * timing one key would pick different winners), then Report and use the
 * committed config; an ESTALE report asks again. A failed call (the daemon
 * unreachable or restarting) is retried with a short backoff within the
 * key's budget of D ms, as the hook promises; a key that still has no
 * decision goes to on_miss: `first` uses the first candidate, `error` (the
 * coordinated default) ends the process with status 3, as a training
 * process raising MissError would.
 *
 * Every answer is appended to FILE as one JSON line, written with one
 * write(2) as soon as it arrives (so a kill -9 loses nothing already
 * answered):
 *   {"ev":"answer","op":"decide"|"report","kernel","key","cands":[...],
 *    "outcome":"decided"|"designated"|"miss"|"timeout"|"error",
 *    "config","err","start","end" (CLOCK_MONOTONIC seconds),
 *    "deadline_ms","pid","daemon","rank","decision_id"}
 * plus {"ev":"fallback",...} when on_miss=first applied, {"ev":"died",
 * "reason"} before exiting on on_miss=error, and {"ev":"exit"} at the end.
 * Exit status: 0 done, 3 died by on_miss=error, 2 bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "detd/client.h"

#define CC_MAX_CANDS 16
#define CC_MAX_ATTEMPTS 64

struct cc_opts {
    const char *socket;
    const char *history;
    const char *kernel;
    const char *daemon;
    int keys;
    uint64_t order_seed;
    int candidates;
    int pass_ms;
    int64_t deadline_ms;
    int on_miss_error;
    int rank;
    int retry;
    const char *until;
    int max_rounds;
};

static int cc_fd = -1;
static char *cc_cands[CC_MAX_CANDS];
static int cc_ncands;

static double cc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t cc_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A growing line buffer; JSON strings escaped. */
struct cc_buf {
    char b[8192];
    size_t n;
};

static void cc_raw(struct cc_buf *w, const char *s) {
    size_t l = strlen(s);
    if (w->n + l < sizeof(w->b) - 2) {
        memcpy(w->b + w->n, s, l);
        w->n += l;
    }
}

static void cc_str(struct cc_buf *w, const char *s) {
    if (s == NULL) {
        cc_raw(w, "null");
        return;
    }
    cc_raw(w, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        if (*p == '"' || *p == '\\')
            snprintf(e, sizeof(e), "\\%c", *p);
        else if (*p < 0x20)
            snprintf(e, sizeof(e), "\\u%04x", *p);
        else
            snprintf(e, sizeof(e), "%c", *p);
        cc_raw(w, e);
    }
    cc_raw(w, "\"");
}

static void cc_kv(struct cc_buf *w, const char *k, const char *v) {
    cc_raw(w, ",\"");
    cc_raw(w, k);
    cc_raw(w, "\":");
    cc_str(w, v);
}

static void cc_num(struct cc_buf *w, const char *k, double v, int prec) {
    char t[64];
    snprintf(t, sizeof(t), ",\"%s\":%.*f", k, prec, v);
    cc_raw(w, t);
}

static void cc_emit(struct cc_buf *w) {
    cc_raw(w, "}\n");
    ssize_t off = 0;
    while (off < (ssize_t)w->n) {
        ssize_t r = write(cc_fd, w->b + off, w->n - (size_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        off += r;
    }
}

static void cc_head(struct cc_buf *w, const struct cc_opts *o, const char *ev,
                    const char *key) {
    w->n = 0;
    cc_raw(w, "{\"ev\":");
    cc_str(w, ev);
    cc_kv(w, "kernel", o->kernel);
    cc_kv(w, "key", key);
    cc_kv(w, "daemon", o->daemon);
    cc_num(w, "pid", (double)getpid(), 0);
    cc_num(w, "rank", (double)o->rank, 0);
}

static const char *cc_outcome(detd_outcome x) {
    switch (x) {
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

static void cc_answer(const struct cc_opts *o, const char *op, const char *key,
                      int rc, const struct detd_answer *a, double t0, double t1,
                      int64_t deadline_ms) {
    struct cc_buf w;
    cc_head(&w, o, "answer", key);
    cc_kv(&w, "op", op);
    cc_raw(&w, ",\"cands\":[");
    for (int j = 0; j < cc_ncands; j++) {
        if (j)
            cc_raw(&w, ",");
        cc_str(&w, cc_cands[j]);
    }
    cc_raw(&w, "]");
    if (rc < 0) {
        char e[600];
        snprintf(e, sizeof(e), "%s: %s", detd_err_name(rc),
                 detd_client_last_error());
        cc_kv(&w, "outcome", "error");
        cc_kv(&w, "err", e);
        cc_kv(&w, "errname", detd_err_name(rc));
    } else {
        cc_kv(&w, "outcome", cc_outcome(a->outcome));
        cc_kv(&w, "config", a->config);
        cc_kv(&w, "decision_id", a->decision_id);
        cc_num(&w, "superseded", a->superseded ? 1 : 0, 0);
        cc_num(&w, "takeover", a->takeover ? 1 : 0, 0);
    }
    cc_num(&w, "start", t0, 6);
    cc_num(&w, "end", t1, 6);
    cc_num(&w, "deadline_ms", (double)deadline_ms, 0);
    cc_emit(&w);
}

static void cc_note(const struct cc_opts *o, const char *ev, const char *key,
                    const char *reason) {
    struct cc_buf w;
    cc_head(&w, o, ev, key);
    cc_kv(&w, "reason", reason);
    cc_num(&w, "t", cc_now(), 6);
    cc_emit(&w);
}

static int cc_retryable(int rc) {
    return rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE ||
           rc == DETD_ECANCELLED || rc == DETD_EPROTO || rc == DETD_EINTERNAL;
}

static void cc_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* 0: the key got a config (decided or fallback); -1: on_miss=error. */
static int cc_key(const struct cc_opts *o, detd_client *c, int round, int i) {
    char keyname[64], reason[700] = "no attempt";
    snprintf(keyname, sizeof(keyname), "r%d:%d", round, i);
    struct detd_key k = {NULL,
                         "sm90",
                         o->kernel,
                         keyname,
                         (const char *const *)cc_cands,
                         (size_t)cc_ncands,
                         NULL};
    double budget_end = cc_now() + (double)o->deadline_ms / 1000.0;
    int backoff = 50;
    for (int attempt = 0; attempt < CC_MAX_ATTEMPTS; attempt++) {
        int64_t remaining = (int64_t)((budget_end - cc_now()) * 1000.0);
        if (remaining <= 0) {
            snprintf(reason, sizeof(reason), "budget spent");
            break;
        }
        struct detd_answer *a = NULL;
        double t0 = cc_now();
        int rc = detd_decide(c, &k, 0, remaining, &a);
        double t1 = cc_now();
        cc_answer(o, "decide", keyname, rc, a, t0, t1, remaining);
        if (rc < 0) {
            snprintf(reason, sizeof(reason), "decide: %s: %s",
                     detd_err_name(rc), detd_client_last_error());
            if (o->retry && cc_retryable(rc)) {
                cc_sleep_ms(backoff);
                backoff = backoff * 2 > 400 ? 400 : backoff * 2;
                continue;
            }
            break;
        }
        if (a->outcome == DETD_OUTCOME_DECIDED) {
            detd_answer_free(a);
            return 0;
        }
        if (a->outcome != DETD_OUTCOME_DESIGNATED) {
            snprintf(reason, sizeof(reason), "outcome %s",
                     cc_outcome(a->outcome));
            detd_answer_free(a);
            break;
        }
        /* designated: the timing pass */
        uint64_t claim = a->claim_id;
        detd_answer_free(a);
        cc_sleep_ms(o->pass_ms);
        struct detd_timing tm[CC_MAX_CANDS];
        double ms[CC_MAX_CANDS];
        for (int j = 0; j < cc_ncands; j++) {
            ms[j] = 1.0 + (double)((j + (int)getpid()) % cc_ncands);
            tm[j] = (struct detd_timing){cc_cands[j], &ms[j], 1, 0};
        }
        struct detd_answer *r = NULL;
        t0 = cc_now();
        rc = detd_report(c, claim, &k, tm, (size_t)cc_ncands, "campaign",
                         o->deadline_ms, &r);
        t1 = cc_now();
        cc_answer(o, "report", keyname, rc, r, t0, t1, o->deadline_ms);
        detd_answer_free(r);
        if (rc == 0)
            return 0;
        snprintf(reason, sizeof(reason), "report: %s: %s", detd_err_name(rc),
                 detd_client_last_error());
        if (rc == DETD_ESTALE || (o->retry && cc_retryable(rc)))
            continue; /* ask again: a decision may exist now */
        break;
    }
    if (o->on_miss_error) {
        cc_note(o, "died", keyname, reason);
        return -1;
    }
    cc_note(o, "fallback", keyname, reason);
    return 0;
}

static int cc_int(const char *s, long long lo, long long hi, long long *ret) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s == NULL || errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *ret = v;
    return 0;
}

int main(int argc, char **argv) {
    struct cc_opts o = {.kernel = "campaign:kernel@1",
                        .daemon = "d0",
                        .keys = 4,
                        .order_seed = 1,
                        .candidates = 4,
                        .pass_ms = 100,
                        .deadline_ms = 3000,
                        .on_miss_error = 1,
                        .rank = 0,
                        .retry = 1,
                        .max_rounds = 200};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n = 0;
#define CC_NUM(name, lo, hi, field)                                            \
    if (strcmp(a, name) == 0) {                                                \
        if (v == NULL || cc_int(v, lo, hi, &n) < 0) {                          \
            fprintf(stderr, "campaign_client: %s needs a number\n", name);     \
            return 2;                                                          \
        }                                                                      \
        o.field = n;                                                           \
        i++;                                                                   \
        continue;                                                              \
    }
        CC_NUM("--keys", 1, 100000, keys)
        CC_NUM("--order-seed", 0, INT64_MAX, order_seed)
        CC_NUM("--candidates", 1, CC_MAX_CANDS, candidates)
        CC_NUM("--pass-ms", 0, 600000, pass_ms)
        CC_NUM("--deadline-ms", 1, 3600000, deadline_ms)
        CC_NUM("--rank", 0, 1000000, rank)
        CC_NUM("--max-rounds", 1, 100000, max_rounds)
#undef CC_NUM
        if (strcmp(a, "--socket") == 0 && v != NULL) {
            o.socket = v;
            i++;
        } else if (strcmp(a, "--history") == 0 && v != NULL) {
            o.history = v;
            i++;
        } else if (strcmp(a, "--kernel") == 0 && v != NULL) {
            o.kernel = v;
            i++;
        } else if (strcmp(a, "--daemon") == 0 && v != NULL) {
            o.daemon = v;
            i++;
        } else if (strcmp(a, "--on-miss") == 0 && v != NULL) {
            if (strcmp(v, "error") != 0 && strcmp(v, "first") != 0) {
                fprintf(stderr, "campaign_client: --on-miss error|first\n");
                return 2;
            }
            o.on_miss_error = strcmp(v, "error") == 0;
            i++;
        } else if (strcmp(a, "--until") == 0 && v != NULL) {
            o.until = v;
            i++;
        } else if (strcmp(a, "--no-retry") == 0) {
            o.retry = 0;
        } else {
            fprintf(stderr, "campaign_client: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (o.socket == NULL || o.history == NULL) {
        fprintf(stderr, "campaign_client: --socket and --history needed\n");
        return 2;
    }
    cc_fd = open(o.history, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (cc_fd < 0) {
        perror(o.history);
        return 2;
    }
    /* candidates in a per-process order: their order must not matter */
    cc_ncands = o.candidates;
    for (int j = 0; j < cc_ncands; j++)
        if (asprintf(&cc_cands[j], "BLOCK=%d,num_warps=%d", 16 << j,
                     4 << (j % 2)) < 0)
            return 2;
    uint64_t x = o.order_seed * 2654435761ULL + 7;
    for (int j = cc_ncands - 1; j > 0; j--) {
        x = cc_mix(x);
        int r = (int)(x % (uint64_t)(j + 1));
        char *t = cc_cands[j];
        cc_cands[j] = cc_cands[r];
        cc_cands[r] = t;
    }
    int *order = calloc((size_t)o.keys, sizeof(*order));
    if (order == NULL)
        return 2;
    for (int j = 0; j < o.keys; j++)
        order[j] = j;
    for (int j = o.keys - 1; j > 0; j--) {
        x = cc_mix(x);
        int r = (int)(x % (uint64_t)(j + 1));
        int t = order[j];
        order[j] = order[r];
        order[r] = t;
    }
    char host[64];
    snprintf(host, sizeof(host), "node-%s", o.daemon);
    struct detd_identity id = {host,           o.rank, o.rank, 64,
                               "Campaign GPU", "sm90", 132,    "campaign"};
    detd_client *c = NULL;
    if (detd_client_open(o.socket, &id, &c) < 0) {
        cc_note(&o, "died", "", "detd_client_open failed");
        return 3;
    }
    int status = 0;
    int rounds = o.until != NULL ? o.max_rounds : 1;
    for (int round = 0; round < rounds && status == 0; round++) {
        for (int j = 0; j < o.keys; j++) {
            if (o.until != NULL && access(o.until, F_OK) == 0) {
                rounds = 0;
                break;
            }
            if (cc_key(&o, c, round, order[j]) < 0) {
                status = 3;
                break;
            }
        }
    }
    cc_note(&o, "exit", "", status ? "on_miss=error" : "done");
    /* On on_miss=error the process dies as MissError would: no clean
     * detach (the daemon sees the connection drop). */
    if (status == 0)
        detd_client_close(c);
    for (int j = 0; j < cc_ncands; j++)
        free(cc_cands[j]);
    free(order);
    close(cc_fd);
    return status;
}
