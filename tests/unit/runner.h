/*
 * A small unit-test runner in the style of libuv's: each test runs in a
 * forked child with a timeout, so a crash or a hang fails that test only.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_EQ_INT(a, b); CHECK_STR(s, "x"); }
 *   int main(int argc, char **argv) { return runner_main(argc, argv); }
 *
 * Run one test: ./test_engine name. Ends with "N passed, N failed".
 */
#ifndef DETD_TEST_RUNNER_H
#define DETD_TEST_RUNNER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*runner_fn)(void);
struct runner_test {
    const char *name;
    runner_fn fn;
};

#define RUNNER_MAX_TESTS 512
static struct runner_test runner_tests_[RUNNER_MAX_TESTS];
static int runner_ntests_;

#define TEST(name)                                                             \
    static void test_##name(void);                                             \
    __attribute__((constructor)) static void register_##name(void) {           \
        if (runner_ntests_ < RUNNER_MAX_TESTS)                                 \
            runner_tests_[runner_ntests_++] =                                  \
                (struct runner_test){#name, test_##name};                      \
    }                                                                          \
    static void test_##name(void)

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) {                                                        \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n",          \
                    __FILE__, __LINE__, #a, #b, a_, b_);                       \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                 \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n",      \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",            \
                    b_ ? b_ : "(null)");                                       \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static int runner_run_one_(const struct runner_test *t, int timeout_s) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        alarm((unsigned)timeout_s);
        t->fn();
        /* exit(), not _exit(): the sanitizers' leak check runs at exit. */
        exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFSIGNALED(st))
        fprintf(stderr, "test %s: killed by signal %d%s\n", t->name,
                WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
    return 1;
}

static int runner_main(int argc, char **argv) {
    int timeout_s = 60;
    const char *env = getenv("DETD_TEST_TIMEOUT");
    if (env != NULL && atoi(env) > 0)
        timeout_s = atoi(env);
    int passed = 0, failed = 0;
    for (int i = 0; i < runner_ntests_; i++) {
        const struct runner_test *t = &runner_tests_[i];
        if (argc > 1) {
            int want = 0;
            for (int j = 1; j < argc; j++)
                if (strcmp(argv[j], t->name) == 0)
                    want = 1;
            if (!want)
                continue;
        }
        int rc = runner_run_one_(t, timeout_s);
        printf("%s %s\n", rc == 0 ? "ok  " : "FAIL", t->name);
        if (rc == 0)
            passed++;
        else
            failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}

#endif /* DETD_TEST_RUNNER_H */
