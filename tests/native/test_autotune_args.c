/*
 * detd_autotune()'s argument checks and its no-GPU error: every bad
 * argument is refused before anything is asked or timed, with
 * detd_client_last_error() naming it. The client points at a socket with
 * no daemon, so a check that let a call through would show as
 * DETD_ECONNECT instead of the expected code.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "detd/autotune.h"
#include "runner.h"

static int launches;

static int launch(void *user, size_t index, const char *config) {
    (void)user;
    (void)index;
    (void)config;
    launches++;
    return 0;
}

static int timer(void *user, size_t index, const char *config,
                 detd_launch_cb fn, void *launch_user, unsigned warmup,
                 unsigned reps, double *ret_ms) {
    (void)user;
    for (unsigned r = 0; r < reps; r++) {
        fn(launch_user, index, config);
        ret_ms[r] = 1.0;
    }
    (void)warmup;
    return 0;
}

static const char *const cands3[] = {"BLOCK=64", "BLOCK=128", "BLOCK=256"};

struct fx {
    detd_client *c;
    struct detd_key k;
    struct detd_autotune_options o;
    size_t idx;
};

static void fx_init(struct fx *f) {
    CHECK_EQ_INT(detd_client_open("/tmp/detd-no-daemon-here.sock", NULL, &f->c),
                 0);
    f->k = (struct detd_key){.arch = "cpu",
                             .kernel = "native::rowsum@v1",
                             .key = "n=1",
                             .candidates = cands3,
                             .n_candidates = 3};
    detd_autotune_options_init(&f->o);
    f->o.timer = timer;
    f->idx = 4242;
}

/* Expect rc and a last error containing `needle`; nothing launched and
 * *ret_index untouched. */
static void expect(struct fx *f, int want, const char *needle) {
    launches = 0;
    int rc = detd_autotune(f->c, &f->k, launch, NULL, &f->o, &f->idx, NULL);
    const char *msg = detd_client_last_error();
    if (rc != want || strstr(msg, needle) == NULL) {
        fprintf(stderr, "want %s containing '%s', got %s: '%s'\n",
                detd_err_name(want), needle, detd_err_name(rc), msg);
        exit(1);
    }
    CHECK_EQ_INT(launches, 0);
    CHECK_EQ_INT(f->idx, 4242);
}

TEST(null_arguments) {
    struct fx f;
    fx_init(&f);
    size_t idx = 7;
    CHECK_EQ_INT(detd_autotune(NULL, &f.k, launch, NULL, &f.o, &idx, NULL),
                 DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "client is NULL");
    CHECK_EQ_INT(detd_autotune(f.c, NULL, launch, NULL, &f.o, &idx, NULL),
                 DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "key is NULL");
    CHECK_EQ_INT(detd_autotune(f.c, &f.k, NULL, NULL, &f.o, &idx, NULL),
                 DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "launch is NULL");
    CHECK_EQ_INT(detd_autotune(f.c, &f.k, launch, NULL, &f.o, NULL, NULL),
                 DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "ret_index is NULL");
    CHECK_EQ_INT(idx, 7);
    f.k.arch = NULL;
    expect(&f, DETD_EINVAL, "key->arch is NULL");
    f.k.arch = "";
    expect(&f, DETD_EINVAL, "key->arch is empty");
    f.k.arch = "cpu";
    f.k.kernel = NULL;
    expect(&f, DETD_EINVAL, "key->kernel is NULL");
    f.k.kernel = "native::rowsum@v1";
    f.k.key = NULL;
    expect(&f, DETD_EINVAL, "key->key is NULL");
    detd_client_close(f.c);
}

TEST(candidates) {
    struct fx f;
    fx_init(&f);
    f.k.n_candidates = 0;
    expect(&f, DETD_EINVAL, "key->n_candidates is 0");
    f.k.n_candidates = 3;
    f.k.candidates = NULL;
    expect(&f, DETD_EINVAL, "key->candidates is NULL");
    const char *with_null[] = {"A=1", NULL, "A=3"};
    f.k.candidates = with_null;
    expect(&f, DETD_EINVAL, "key->candidates[1] is NULL");
    const char *with_empty[] = {"A=1", "A=2", ""};
    f.k.candidates = with_empty;
    expect(&f, DETD_EINVAL, "key->candidates[2] is empty");
    const char *dup[] = {"A=1", "A=2", "A=1"};
    f.k.candidates = dup;
    expect(&f, DETD_EINVAL, "key->candidates[2] repeats key->candidates[0]");
    char *big = malloc(DETD_AUTOTUNE_MAX_CONFIG_BYTES + 2);
    memset(big, 'x', DETD_AUTOTUNE_MAX_CONFIG_BYTES + 1);
    big[DETD_AUTOTUNE_MAX_CONFIG_BYTES + 1] = '\0';
    const char *with_big[] = {"A=1", big, "A=3"};
    f.k.candidates = with_big;
    expect(&f, DETD_ELIMIT, "key->candidates[1] exceeds 1024 bytes");
    free(big);
    f.k.candidates = cands3;
    f.k.n_candidates = DETD_MAX_CANDIDATES + 1;
    expect(&f, DETD_ELIMIT, "key->n_candidates 1025 exceeds the limit");
    detd_client_close(f.c);
}

TEST(report_size_over_the_message_limit) {
    struct fx f;
    fx_init(&f);
    size_t n = DETD_MAX_CANDIDATES;
    char **c = calloc(n, sizeof(*c));
    for (size_t i = 0; i < n; i++) {
        c[i] = malloc(1001);
        memset(c[i], 'a', 1000);
        snprintf(c[i], 12, "C%zu=", i);
        c[i][strlen(c[i])] = 'a';
        c[i][1000] = '\0';
    }
    f.k.candidates = (const char *const *)c;
    f.k.n_candidates = n;
    expect(&f, DETD_ELIMIT, "over the message limit");
    /* 100 of them fit: the call gets past the size check, to the CUDA
     * check (no timer). */
    f.k.n_candidates = 100;
    f.o.timer = NULL;
    setenv("DETD_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    expect(&f, -ENODEV, "/nonexistent/libcuda.so.1");
    for (size_t i = 0; i < n; i++)
        free(c[i]);
    free(c);
    detd_client_close(f.c);
}

TEST(key_kernel_and_options) {
    struct fx f;
    fx_init(&f);
    char *big = malloc(DETD_MAX_KEY_BYTES + 2);
    memset(big, 'k', DETD_MAX_KEY_BYTES + 1);
    big[DETD_MAX_KEY_BYTES + 1] = '\0';
    f.k.key = big;
    expect(&f, DETD_ELIMIT, "key->key exceeds 4096 bytes");
    free(big);
    f.k.key = "n=1";
    const char *bad[] = {"mod:fn@guard",     "native::",        "native::@v1",
                         "native::rowsum",   "native::rowsum@", "native::a@b@c",
                         "Native::rowsum@v1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        f.k.kernel = bad[i];
        expect(&f, DETD_EINVAL, "is not a native kernel id");
    }
    f.k.kernel = "native::mylib::rowsum@3f2a";
    f.o.reps = DETD_AUTOTUNE_MAX_REPS + 1;
    expect(&f, DETD_ELIMIT, "opts->reps 1025 exceeds the limit of 1024");
    f.o.reps = 5;
    f.o.warmup = DETD_AUTOTUNE_MAX_WARMUP + 1;
    expect(&f, DETD_ELIMIT, "opts->warmup 1025 exceeds");
    f.o.warmup = 1;
    f.o.flags = 0x80;
    expect(&f, DETD_EINVAL, "opts->flags has unknown bits 0x80");
    f.o.flags = 0;
    f.o.size = 8;
    expect(&f, DETD_EINVAL, "opts->size is 8");
    f.o.size = sizeof f.o;
    struct detd_autotune_result r = {.size = 4};
    CHECK_EQ_INT(detd_autotune(f.c, &f.k, launch, NULL, &f.o, &f.idx, &r),
                 DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "ret_result->size is 4") != NULL);
    /* Everything valid: the call goes out and finds no daemon. */
    r.size = sizeof r;
    CHECK_EQ_INT(detd_autotune(f.c, &f.k, launch, NULL, &f.o, &f.idx, &r),
                 DETD_ECONNECT);
    CHECK(strstr(detd_client_last_error(), "detd-no-daemon-here.sock") != NULL);
    CHECK_EQ_INT(f.idx, 4242);
    detd_client_close(f.c);
}

TEST(no_gpu_without_a_timer) {
    struct fx f;
    fx_init(&f);
    f.o.timer = NULL;
    setenv("DETD_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    expect(&f, -ENODEV,
           "cannot load $DETD_CUDA_LIBRARY "
           "'/nonexistent/libcuda.so.1'");
    CHECK(strstr(detd_client_last_error(), "options.timer") != NULL);
    /* A library that is no CUDA at all. */
    setenv("DETD_CUDA_LIBRARY", "libm.so.6", 1);
    expect(&f, -ENODEV, "has neither cuInit nor cudaGetDeviceCount");
    char arch[16];
    CHECK_EQ_INT(detd_autotune_arch(arch, sizeof arch), -ENODEV);
    /* The toolkit's runtime, when installed, without a driver or GPU: the
     * real library answers with its own error. */
    const char *rt = getenv("DETD_TEST_CUDART");
    if (rt != NULL && rt[0] != '\0') {
        setenv("DETD_CUDA_LIBRARY", rt, 1);
        expect(&f, -ENODEV, "no CUDA device: cudaGetDeviceCount in '");
        CHECK(strstr(detd_client_last_error(), "cudaError") != NULL);
    }
    detd_client_close(f.c);
}

TEST(native_kernel_id) {
    char buf[64];
    CHECK_EQ_INT(
        detd_native_kernel_id("mylib::rowsum", "3f2a", buf, sizeof buf), 0);
    CHECK_STR(buf, "native::mylib::rowsum@3f2a");
    CHECK_EQ_INT(detd_native_kernel_id("a@b", "v", buf, sizeof buf),
                 DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "native kernel id: name contains '@'");
    CHECK_EQ_INT(detd_native_kernel_id("a", "", buf, sizeof buf), DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "native kernel id: guard is empty");
    CHECK_EQ_INT(detd_native_kernel_id(NULL, "v", buf, sizeof buf),
                 DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "native kernel id: name is NULL");
    CHECK_EQ_INT(detd_native_kernel_id("rowsum", "v1", buf, 10), DETD_ELIMIT);
    CHECK(strstr(detd_client_last_error(), "buf has 10") != NULL);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
