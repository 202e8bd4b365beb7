/*
 * native_driver: one process of a native autotuner, driven by
 * test_native.py against a real daemon.
 *
 * The "kernel" is a CPU row sum whose candidates differ in their block
 * size (BLOCK=<b>): each block's partial sum is added in turn, so the
 * bits of the result depend on the candidate, as a GPU reduction's do.
 * The timer is deterministic (no GPU): candidate i "takes" ms[i] from
 * --ms, or, with --skew, this process's rank makes candidate rank % n its
 * own fastest, so that only the daemon's decision can make processes
 * agree. Every call of the timer appends "pid key index" to --log, so the
 * test counts timing work across processes.
 *
 *   native_driver --socket S --kernel K [--keys N] [--key-prefix P]
 *                 [--blocks 64,128,256] [--ms 3,1,2] [--skew RANK]
 *                 [--fail IDX,...] [--log FILE] [--timer cpu|cuda]
 *                 [--reps N] [--warmup N] [--timeout-ms N] [--no-claim]
 *                 [--sleep-ms N] [--raw-candidates] [--arch A]
 *
 * Prints per key "RESULT key=<k> index=<i> config=<c> source=<s>
 * timed_here=<0|1> n_failed=<n> takeover=<0|1> claims_lost=<n>
 * observe_rc=<rc> digest=<hex>" or "ERROR key=<k> rc=<DETD_NAME>
 * msg=<message>". Exit status: 0, 3 when some key failed, 2 on usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "detd/autotune.h"

#define MAXC 64

struct drv {
    size_t n;
    int blocks[MAXC];
    char *cands[MAXC];
    double ms[MAXC];
    int fail[MAXC];
    int skew; /* -1: none */
    int log_fd;
    const char *key;
    int sleep_ms;
    float data[4096];
    float out;
};

/* The CPU row sum with block size b: partial sums per block, added in
 * order. */
static float rowsum(const float *x, size_t n, int b) {
    float total = 0;
    for (size_t s = 0; s < n; s += (size_t)b) {
        float part = 0;
        for (size_t i = s; i < n && i < s + (size_t)b; i++)
            part += x[i];
        total += part;
    }
    return total;
}

static int launch(void *user, size_t index, const char *config) {
    struct drv *d = user;
    (void)config;
    if (d->fail[index])
        return 7; /* as a launch that could not start */
    d->out =
        rowsum(d->data, sizeof d->data / sizeof *d->data, d->blocks[index]);
    return 0;
}

static int timer(void *user, size_t index, const char *config,
                 detd_launch_cb fn, void *launch_user, unsigned warmup,
                 unsigned reps, double *ret_ms) {
    struct drv *d = user;
    if (d->log_fd >= 0) {
        char line[256];
        int n = snprintf(line, sizeof line, "%d %s %zu\n", (int)getpid(),
                         d->key, index);
        if (write(d->log_fd, line, (size_t)n) != n)
            return 1;
    }
    if (d->sleep_ms > 0) {
        struct timespec ts = {d->sleep_ms / 1000,
                              (long)(d->sleep_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (unsigned w = 0; w < warmup; w++)
        if (fn(launch_user, index, config) != 0)
            return 1;
    for (unsigned r = 0; r < reps; r++) {
        if (fn(launch_user, index, config) != 0)
            return 1;
        double ms = d->ms[index];
        if (d->skew >= 0)
            ms = index == (size_t)d->skew % d->n ? 0.5 : 1.0 + (double)index;
        ret_ms[r] = ms + 0.001 * r; /* samples vary; the median decides */
    }
    return 0;
}

static size_t split_ints(char *s, int *out, size_t max) {
    size_t n = 0;
    for (char *tok = strtok(s, ","); tok != NULL && n < max;
         tok = strtok(NULL, ","))
        out[n++] = atoi(tok);
    return n;
}

static const char *source_name(detd_source s) {
    static const char *const names[] = {"unspecified", "timed",  "table",
                                        "override",    "import", "fallback",
                                        "local"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

static void usage(void) {
    fprintf(stderr, "usage: native_driver --socket S --kernel K [options]; "
                    "see the top of native_driver.c\n");
    exit(2);
}

int main(int argc, char **argv) {
    static struct drv d;
    const char *sock = NULL, *kernel = NULL, *log = NULL, *prefix = "n=";
    const char *arch = "cpu", *timer_kind = "cpu";
    char blocks_arg[512] = "64,128,256,512", ms_arg[512] = "",
         fail_arg[512] = "";
    int keys = 1, raw = 0;
    struct detd_autotune_options o;
    detd_autotune_options_init(&o);
    o.warmup = 1;
    o.reps = 5;
    d.skew = -1;
    d.log_fd = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-claim") == 0) {
            o.flags |= DETD_AUTOTUNE_NO_CLAIM;
            continue;
        }
        if (strcmp(a, "--raw-candidates") == 0) {
            raw = 1;
            continue;
        }
        if (v == NULL)
            usage();
        i++;
        if (strcmp(a, "--socket") == 0)
            sock = v;
        else if (strcmp(a, "--kernel") == 0)
            kernel = v;
        else if (strcmp(a, "--keys") == 0)
            keys = atoi(v);
        else if (strcmp(a, "--key-prefix") == 0)
            prefix = v;
        else if (strcmp(a, "--blocks") == 0)
            snprintf(blocks_arg, sizeof blocks_arg, "%s", v);
        else if (strcmp(a, "--ms") == 0)
            snprintf(ms_arg, sizeof ms_arg, "%s", v);
        else if (strcmp(a, "--fail") == 0)
            snprintf(fail_arg, sizeof fail_arg, "%s", v);
        else if (strcmp(a, "--skew") == 0)
            d.skew = atoi(v);
        else if (strcmp(a, "--log") == 0)
            log = v;
        else if (strcmp(a, "--timer") == 0)
            timer_kind = v;
        else if (strcmp(a, "--reps") == 0)
            o.reps = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--warmup") == 0)
            o.warmup = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--timeout-ms") == 0)
            o.timeout_ms = strtoll(v, NULL, 10);
        else if (strcmp(a, "--sleep-ms") == 0)
            d.sleep_ms = atoi(v);
        else if (strcmp(a, "--arch") == 0)
            arch = v;
        else
            usage();
    }
    if (sock == NULL || kernel == NULL)
        usage();
    d.n = split_ints(blocks_arg, d.blocks, MAXC);
    for (size_t i = 0; i < d.n; i++) {
        if (asprintf(&d.cands[i], raw ? "%d" : "BLOCK=%d", d.blocks[i]) < 0)
            return 1;
        d.ms[i] = 1.0 + (double)((i * 7919) % 13) / 10.0;
    }
    if (ms_arg[0] != '\0') {
        int ms[MAXC];
        size_t n = split_ints(ms_arg, ms, MAXC);
        for (size_t i = 0; i < n && i < d.n; i++)
            d.ms[i] = ms[i];
    }
    if (fail_arg[0] != '\0') {
        int f[MAXC];
        size_t n = split_ints(fail_arg, f, MAXC);
        for (size_t i = 0; i < n; i++)
            if (f[i] >= 0 && (size_t)f[i] < d.n)
                d.fail[f[i]] = 1;
    }
    for (size_t i = 0; i < sizeof d.data / sizeof *d.data; i++)
        d.data[i] = (float)((i * 2654435761u) % 1000) / 7.0f;
    if (log != NULL) {
        d.log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (d.log_fd < 0) {
            perror(log);
            return 1;
        }
    }
    if (strcmp(timer_kind, "cpu") == 0) {
        o.timer = timer;
        o.timer_user = &d;
    } else if (strcmp(timer_kind, "cuda") != 0) {
        usage();
    }

    detd_client *c = NULL;
    int rc = detd_client_open(sock, NULL, &c);
    if (rc < 0) {
        fprintf(stderr, "open: %s\n", detd_strerror(rc));
        return 1;
    }
    int status = 0;
    for (int k = 0; k < keys; k++) {
        char key[128];
        snprintf(key, sizeof key, "%s%d", prefix, k);
        d.key = key;
        struct detd_key dk = {
            .arch = arch,
            .kernel = kernel,
            .key = key,
            .candidates = (const char *const *)d.cands,
            .n_candidates = d.n,
        };
        struct detd_autotune_result res = {.size = sizeof res};
        size_t idx = (size_t)-1;
        rc = detd_autotune(c, &dk, launch, &d, &o, &idx, &res);
        if (rc < 0) {
            printf("ERROR key=%s rc=%s msg=%s\n", key, detd_err_name(rc),
                   detd_client_last_error());
            status = 3;
            continue;
        }
        float y = rowsum(d.data, sizeof d.data / sizeof *d.data, d.blocks[idx]);
        uint32_t bits;
        memcpy(&bits, &y, sizeof bits);
        printf("RESULT key=%s index=%zu config=%s source=%s timed_here=%d "
               "n_failed=%zu takeover=%d superseded=%d claims_lost=%u "
               "observe_rc=%d "
               "digest=%08" PRIx32 "\n",
               key, idx, res.config, source_name(res.source), res.timed_here,
               res.n_failed, res.takeover, res.superseded, res.claims_lost,
               res.observe_rc, bits);
        fflush(stdout);
    }
    detd_client_close(c);
    for (size_t i = 0; i < d.n; i++)
        free(d.cands[i]);
    return status;
}
