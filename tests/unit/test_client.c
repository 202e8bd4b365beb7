/*
 * libdetd without a daemon: argument validation, limits, error names,
 * socket resolution, and a refused connection within the deadline.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "detd/client.h"
#include "runner.h"

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *const cands_[] = {"BLOCK=64,num_warps=4",
                                     "BLOCK=128,num_warps=4"};

static detd_client *open_missing_(void) {
    detd_client *c = NULL;
    CHECK_EQ_INT(detd_client_open("/nonexistent/detd.sock", NULL, &c), 0);
    CHECK(c != NULL);
    return c;
}

TEST(error_names_and_messages) {
    CHECK_STR(detd_err_name(0), "OK");
    CHECK_STR(detd_err_name(DETD_ELIMIT), "DETD_ELIMIT");
    CHECK_STR(detd_err_name(DETD_EFORK), "DETD_EFORK");
    CHECK_STR(detd_err_name(-2), "ENOENT");
    CHECK_STR(detd_err_name(12345), "UNKNOWN");
    CHECK_STR(detd_strerror(DETD_ECONNECT), "cannot reach the detd daemon");
    CHECK_STR(detd_strerror(DETD_ETIMEDOUT), "deadline exceeded");
    CHECK_STR(detd_strerror(0), "success");
    CHECK(strlen(detd_strerror(-2)) > 0);
    CHECK_STR(detd_strerror(99999), "unknown error");
}

TEST(version) {
    CHECK_STR(detd_version(), DETD_VERSION);
}

TEST(close_null_and_free_null) {
    detd_client_close(NULL);
    detd_answer_free(NULL);
    CHECK(detd_client_socket(NULL) == NULL);
}

TEST(socket_resolution) {
    detd_client *c = NULL;
    unsetenv("DETD_SOCKET");
    CHECK_STR(detd_client_default_socket(), DETD_DEFAULT_SOCKET);
    CHECK_EQ_INT(detd_client_open(NULL, NULL, &c), 0);
    CHECK_STR(detd_client_socket(c), DETD_DEFAULT_SOCKET);
    detd_client_close(c);

    setenv("DETD_SOCKET", "/tmp/from-env.sock", 1);
    CHECK_EQ_INT(detd_client_open(NULL, NULL, &c), 0);
    CHECK_STR(detd_client_socket(c), "/tmp/from-env.sock");
    detd_client_close(c);
    /* an explicit path wins over the environment */
    CHECK_EQ_INT(detd_client_open("/tmp/explicit.sock", NULL, &c), 0);
    CHECK_STR(detd_client_socket(c), "/tmp/explicit.sock");
    detd_client_close(c);
    /* empty DETD_SOCKET means unset */
    setenv("DETD_SOCKET", "", 1);
    CHECK_STR(detd_client_default_socket(), DETD_DEFAULT_SOCKET);
}

TEST(open_rejects_bad_arguments) {
    detd_client *c = (detd_client *)(uintptr_t)0x1;
    CHECK_EQ_INT(detd_client_open("", NULL, &c), DETD_EINVAL);
    CHECK(c == (detd_client *)(uintptr_t)0x1); /* untouched on failure */
    char long_path[300];
    memset(long_path, 'a', sizeof(long_path) - 1);
    long_path[0] = '/';
    long_path[sizeof(long_path) - 1] = '\0';
    CHECK_EQ_INT(detd_client_open(long_path, NULL, &c), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "exceeds") != NULL);
    CHECK_EQ_INT(detd_client_open("/tmp/x.sock", NULL, NULL), DETD_EINVAL);
}

TEST(decide_validates_before_sending) {
    detd_client *c = open_missing_();
    struct detd_answer *a = NULL;
    struct detd_key k = {NULL, "sm90", "m:k@1", "(1024,)", cands_, 2, NULL};

    CHECK_EQ_INT(detd_decide(NULL, &k, 0, 1000, &a), DETD_EINVAL);
    CHECK_EQ_INT(detd_decide(c, NULL, 0, 1000, &a), DETD_EINVAL);
    CHECK_EQ_INT(detd_decide(c, &k, 0, 1000, NULL), DETD_EINVAL);
    CHECK_EQ_INT(detd_decide(c, &k, 0x80, 1000, &a), DETD_EINVAL);

    struct detd_key bad = k;
    bad.kernel = NULL;
    CHECK_EQ_INT(detd_decide(c, &bad, 0, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "kernel") != NULL);
    bad = k;
    bad.arch = NULL;
    CHECK_EQ_INT(detd_decide(c, &bad, 0, 1000, &a), DETD_EINVAL);
    bad = k;
    bad.n_candidates = 0;
    CHECK_EQ_INT(detd_decide(c, &bad, 0, 1000, &a), DETD_EINVAL);
    const char *with_null[] = {"a", NULL};
    bad = k;
    bad.candidates = with_null;
    CHECK_EQ_INT(detd_decide(c, &bad, 0, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "candidate 1") != NULL);
    CHECK(a == NULL);
    detd_client_close(c);
}

/* A listening unix socket nobody answers on: a test can see whether a
 * client connected to it (accept4 with SOCK_NONBLOCK finds a connection). */
static int listen_at_(char *path, size_t size) {
    snprintf(path, size, "/tmp/detd-test-client-%d.sock", (int)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(listen(fd, 8) == 0);
    return fd;
}

TEST(decide_limits) {
    /* Over a limit the call is refused locally: nothing is sent, not even
     * a connection is made to the socket (one is listening there). */
    char path[108];
    int lfd = listen_at_(path, sizeof(path));
    detd_client *c = NULL;
    CHECK_EQ_INT(detd_client_open(path, NULL, &c), 0);
    struct detd_answer *a = NULL;
    char *key = malloc(DETD_MAX_KEY_BYTES + 2);
    memset(key, 'k', DETD_MAX_KEY_BYTES + 1);
    key[DETD_MAX_KEY_BYTES + 1] = '\0';
    struct detd_key k = {NULL, "sm90", "m:k@1", key, cands_, 2, NULL};
    CHECK_EQ_INT(detd_decide(c, &k, 0, 1000, &a), DETD_ELIMIT);
    CHECK(strstr(detd_client_last_error(), "4096") != NULL);
    CHECK(accept(lfd, NULL, NULL) < 0); /* refused locally, nothing sent */
    detd_client_close(c);
    close(lfd);
    unlink(path);
    c = open_missing_();

    /* exactly at the limit is accepted locally (then fails to connect) */
    key[DETD_MAX_KEY_BYTES] = '\0';
    int rc = detd_decide(c, &k, 0, 2000, &a);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);

    const char **many = calloc(DETD_MAX_CANDIDATES + 1, sizeof(*many));
    for (size_t i = 0; i <= DETD_MAX_CANDIDATES; i++)
        many[i] = "c";
    struct detd_key km = {
        NULL, "sm90", "m:k@1", "x", many, DETD_MAX_CANDIDATES + 1, NULL};
    CHECK_EQ_INT(detd_decide(c, &km, 0, 1000, &a), DETD_ELIMIT);
    CHECK(strstr(detd_client_last_error(), "1024") != NULL);
    free(many);
    free(key);
    detd_client_close(c);
}

TEST(report_and_observe_validate) {
    detd_client *c = open_missing_();
    struct detd_answer *a = NULL;
    struct detd_key k = {NULL, "sm90", "m:k@1", "x", cands_, 2, NULL};
    double ms[] = {1.0};
    struct detd_timing t[] = {{cands_[0], ms, 1, 0}};
    CHECK_EQ_INT(detd_report(c, 0, &k, t, 1, NULL, 1000, &a), DETD_EINVAL);
    CHECK_EQ_INT(detd_report(c, 7, &k, NULL, 1, NULL, 1000, &a), DETD_EINVAL);
    struct detd_timing tn[] = {{NULL, ms, 1, 0}};
    CHECK_EQ_INT(detd_report(c, 7, &k, tn, 1, NULL, 1000, &a), DETD_EINVAL);
    struct detd_timing tm[] = {{cands_[0], NULL, 3, 0}};
    CHECK_EQ_INT(detd_report(c, 7, &k, tm, 1, NULL, 1000, &a), DETD_EINVAL);
    CHECK_EQ_INT(
        detd_report(c, 7, &k, t, DETD_MAX_CANDIDATES + 1, NULL, 1000, &a),
        DETD_ELIMIT);
    CHECK_EQ_INT(detd_observe(c, &k, NULL, DETD_SOURCE_TIMED, 0, 1000),
                 DETD_EINVAL);
    CHECK_EQ_INT(detd_observe(c, &k, "x", (detd_source)42, 0, 1000),
                 DETD_EINVAL);
    CHECK_EQ_INT(detd_observe(c, &k, "x", DETD_SOURCE_TIMED, 0x10, 1000),
                 DETD_EINVAL);
    CHECK(a == NULL);
    detd_client_close(c);
}

TEST(report_ex_and_claim_release_validate) {
    detd_client *c = open_missing_();
    struct detd_answer *a = NULL;
    struct detd_key k = {NULL, "sm90", "m:k@1", "x", cands_, 2, NULL};
    double ms[] = {1.0};
    struct detd_timing t[] = {{cands_[0], ms, 1, 1}};
    const char *errs[] = {"ValueError: broke"};
    struct detd_report_extra bad = {0, errs, NULL};
    CHECK_EQ_INT(detd_report_ex(c, 7, &k, t, 1, &bad, NULL, 1000, &a),
                 DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "extra->size 0") != NULL);
    bad.size = sizeof bad + 8; /* a newer release's: not this one */
    CHECK_EQ_INT(detd_report_ex(c, 7, &k, t, 1, &bad, NULL, 1000, &a),
                 DETD_EINVAL);
    CHECK_EQ_INT(detd_claim_release(c, 7, &k, "", 1000), DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "why is empty");
    CHECK_EQ_INT(detd_claim_release(c, 7, &k, NULL, 1000), DETD_EINVAL);
    CHECK_EQ_INT(detd_claim_release(c, 0, &k, "no driver", 1000), DETD_EINVAL);
    CHECK_EQ_INT(detd_claim_release(NULL, 7, &k, "no driver", 1000),
                 DETD_EINVAL);
    /* Valid: only the missing daemon stops it. */
    struct detd_timing_info ti = {"triton.testing.do_bench",
                                  25,
                                  100,
                                  NULL,
                                  0,
                                  1,
                                  "2.11.0",
                                  "none",
                                  "none",
                                  NULL,
                                  NULL};
    struct detd_report_extra ok = {sizeof ok, errs, &ti};
    CHECK_EQ_INT(detd_report_ex(c, 7, &k, t, 1, &ok, NULL, 1000, &a),
                 DETD_ECONNECT);
    /* A 0.7 caller's extra (no timing member) is still valid. */
    ok.size = offsetof(struct detd_report_extra, timing);
    CHECK_EQ_INT(detd_report_ex(c, 7, &k, t, 1, &ok, NULL, 1000, &a),
                 DETD_ECONNECT);
    CHECK_EQ_INT(detd_claim_release(c, 7, &k, "no driver", 1000),
                 DETD_ECONNECT);
    CHECK(a == NULL);
    /* Passing a claim on: checked arguments; with no daemon attached it
     * cannot be known to pass claims on, so nothing is sent. */
    CHECK_EQ_INT(detd_claim_pass_on(c, 0, &k, 1000), DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "claim_id is 0");
    CHECK_EQ_INT(detd_claim_pass_on(NULL, 7, &k, 1000), DETD_EINVAL);
    CHECK_EQ_INT(detd_client_can_pass_on(c), 0);
    CHECK_EQ_INT(detd_client_can_pass_on(NULL), 0);
    CHECK_EQ_INT(detd_claim_pass_on(c, 7, &k, 1000), DETD_EUNIMPL);
    CHECK(strstr(detd_client_last_error(), "claim 7 is still held") != NULL);
    CHECK_STR(detd_err_name(DETD_EENV), "DETD_EENV");
    detd_client_close(c);
}

TEST(connection_refused_within_deadline) {
    detd_client *c = open_missing_();
    struct detd_key k = {NULL, "sm90", "m:k@1", "x", cands_, 2, NULL};
    struct detd_answer *a = NULL;
    /* Refused at once, not after the deadline (which is far away, so a
     * loaded machine cannot blur the two). */
    int64_t t0 = now_ms();
    int rc = detd_decide(c, &k, 0, 60000, &a);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    CHECK(now_ms() - t0 < 30000);
    CHECK(a == NULL);
    CHECK(strstr(detd_client_last_error(), "/nonexistent/detd.sock") != NULL);
    rc = detd_client_connect(c, 2000);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    rc = detd_observe(c, &k, "x", DETD_SOURCE_LOCAL, 0, 2000);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    detd_client_close(c);
}

TEST(reconnect_window_setting) {
    detd_client *c = NULL;
    const char *bad[] = {"abc", "-1", "3600001", "10ms"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("DETD_RECONNECT_MS", bad[i], 1);
        CHECK_EQ_INT(detd_client_open("/nonexistent/detd.sock", NULL, &c),
                     DETD_EINVAL);
        CHECK(c == NULL);
        CHECK(strstr(detd_client_last_error(), "DETD_RECONNECT_MS") != NULL);
    }
    const char *good[] = {"0", "1500", "3600000", ""};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        setenv("DETD_RECONNECT_MS", good[i], 1);
        CHECK_EQ_INT(detd_client_open("/nonexistent/detd.sock", NULL, &c), 0);
        detd_client_close(c);
        c = NULL;
    }
    unsetenv("DETD_RECONNECT_MS");
}

/* A daemon this handle never reached is not waited for, even with a
 * long reconnect window and deadline. */
TEST(never_reached_is_not_waited_for) {
    setenv("DETD_RECONNECT_MS", "3600000", 1);
    detd_client *c = open_missing_();
    unsetenv("DETD_RECONNECT_MS");
    struct detd_key k = {NULL, "sm90", "m:k@1", "x", cands_, 2, NULL};
    struct detd_answer *a = NULL;
    int64_t t0 = now_ms();
    for (int i = 0; i < 3; i++) {
        int rc = detd_decide(c, &k, 0, 120000, &a);
        CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    }
    CHECK(now_ms() - t0 < 30000);
    CHECK(a == NULL);
    detd_client_close(c);
}

/* The counters: arguments checked, nothing met before a daemon answered
 * (a daemon never reached is no outage), the window as set. */
TEST(stats) {
    setenv("DETD_RECONNECT_MS", "1500", 1);
    detd_client *c = open_missing_();
    unsetenv("DETD_RECONNECT_MS");
    struct detd_stats st = {.size = sizeof st};
    CHECK_EQ_INT(detd_client_stats(NULL, &st), DETD_EINVAL);
    CHECK_STR(detd_client_last_error(), "client is NULL");
    CHECK_EQ_INT(detd_client_stats(c, NULL), DETD_EINVAL);
    st.size = 0;
    CHECK_EQ_INT(detd_client_stats(c, &st), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "ret_stats->size 0") != NULL);
    st.size = sizeof st + 1;
    CHECK_EQ_INT(detd_client_stats(c, &st), DETD_EINVAL);
    struct detd_key k = {NULL, "sm90", "m:k@1", "x", cands_, 2, NULL};
    struct detd_answer *a = NULL;
    int rc = detd_decide(c, &k, 0, 2000, &a);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    memset(&st, 0xff, sizeof st);
    st.size = sizeof st;
    CHECK_EQ_INT(detd_client_stats(c, &st), 0);
    CHECK_EQ_INT(st.size, sizeof st);
    CHECK_EQ_INT(st.outages, 0);
    CHECK_EQ_INT(st.attaches, 0);
    CHECK_EQ_INT(st.claims_renewed, 0);
    CHECK_EQ_INT(st.reconnect_ms, 1500);
    /* An older caller's smaller struct: members past its size untouched. */
    struct detd_stats old;
    memset(&old, 0xab, sizeof old);
    old.size = offsetof(struct detd_stats, down_ms);
    CHECK_EQ_INT(detd_client_stats(c, &old), 0);
    CHECK_EQ_INT(old.outages, 0);
    CHECK_EQ_INT(old.down_ms, (int64_t)0xabababababababab);
    detd_client_close(c);
}

TEST(share_and_device_validate_before_sending) {
    detd_client *c = open_missing_();
    struct detd_share_answer *a = NULL;
    struct detd_key k = {NULL, "sm90", "m:k@1", "x", cands_, 2, NULL};
    struct detd_share sh = {.claim_id = 7, .take = cands_[0]};
    CHECK_EQ_INT(detd_share(NULL, &k, &sh, 1000, &a), DETD_EINVAL);
    CHECK_EQ_INT(detd_share(c, &k, NULL, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "share") != NULL);
    CHECK_EQ_INT(detd_share(c, &k, &sh, 1000, NULL), DETD_EINVAL);
    CHECK_EQ_INT(detd_share(c, NULL, &sh, 1000, &a), DETD_EINVAL);
    double ms[] = {1.0};
    struct detd_timing t[] = {{cands_[1], ms, 1, 0}};
    /* The holder gives nothing; a helper neither collects nor reclaims. */
    struct detd_share bad = sh;
    bad.timings = t;
    bad.n_timings = 1;
    CHECK_EQ_INT(detd_share(c, &k, &bad, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "timings") != NULL);
    bad = (struct detd_share){.collect = 1};
    CHECK_EQ_INT(detd_share(c, &k, &bad, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "collect") != NULL);
    bad = (struct detd_share){.claim_id = 7, .reclaim = 1};
    CHECK_EQ_INT(detd_share(c, &k, &bad, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "reclaim") != NULL);
    bad = (struct detd_share){.n_reference_ms = 2};
    CHECK_EQ_INT(detd_share(c, &k, &bad, 1000, &a), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "reference_ms") != NULL);
    bad = (struct detd_share){.timings = NULL, .n_timings = 1};
    CHECK_EQ_INT(detd_share(c, &k, &bad, 1000, &a), DETD_EINVAL);
    struct detd_timing tn[] = {{NULL, ms, 1, 0}};
    bad = (struct detd_share){.timings = tn, .n_timings = 1};
    CHECK_EQ_INT(detd_share(c, &k, &bad, 1000, &a), DETD_EINVAL);
    CHECK(a == NULL);
    detd_share_answer_free(NULL);

    /* The device: at most 256 bytes of UTF-8; NULL and "" clear it. */
    char dev[300];
    memset(dev, 'g', sizeof dev - 1);
    dev[sizeof dev - 1] = '\0';
    CHECK_EQ_INT(detd_client_set_device(c, dev), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "device") != NULL);
    dev[256] = '\0';
    CHECK_EQ_INT(detd_client_set_device(c, dev), 0);
    CHECK_EQ_INT(detd_client_set_device(c, "gpu-\xc3\x28"), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "UTF-8") != NULL);
    CHECK_EQ_INT(detd_client_set_device(c, "gpu-\xc3\xa9"), 0);
    CHECK_EQ_INT(detd_client_set_device(c, NULL), 0);
    CHECK_EQ_INT(detd_client_set_device(c, ""), 0);
    CHECK_EQ_INT(detd_client_set_device(NULL, "gpu-0"), DETD_EINVAL);
    /* DETD_DECIDE_BENCH asks for a share: alone it is refused. */
    struct detd_answer *da = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, DETD_DECIDE_BENCH, 1000, &da), DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "DETD_DECIDE_SHARE") != NULL);
    CHECK(da == NULL);
    /* Flags past DETD_DECIDE_WAIT_ONLY (0.8) are refused, named. */
    CHECK_EQ_INT(detd_decide(c, &k, DETD_DECIDE_WAIT_ONLY << 1, 1000, &da),
                 DETD_EINVAL);
    CHECK(strstr(detd_client_last_error(), "unknown flags 0x10") != NULL);
    CHECK(da == NULL);
    detd_client_close(c);
}

TEST(connect_null) {
    CHECK_EQ_INT(detd_client_connect(NULL, 100), DETD_EINVAL);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
