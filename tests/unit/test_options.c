/*
 * Unit tests of the option table (options.c) and the configuration file
 * reader (conffile.c): real files in a temporary directory. Every error
 * must name the file, the line and the key.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/conffile.h"
#include "detd/error.h"
#include "config/options.h"
#include "runner.h"

static char dir[64];
static char conf[128];

static void setup(const char *text) {
    snprintf(dir, sizeof(dir), "/tmp/detd-opt-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(conf, sizeof(conf), "%s/detd.conf", dir);
    FILE *f = fopen(conf, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
    unsetenv("DETD_SOCKET");
}

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Parse "detd --config <conf> args..." (NULL-terminated). */
static int parse(struct options *o, ...) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = "detd";
    argv[argc++] = "--config";
    argv[argc++] = conf;
    va_list ap;
    va_start(ap, o);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    options_init(o);
    /* argv must outlive o: keep a static copy. */
    static char *keep[32];
    memcpy(keep, argv, sizeof(keep));
    return options_parse(o, argc, keep);
}

/* The one error, which must contain every needle. */
static void check_error(const struct options *o, size_t i, const char *a,
                        const char *b) {
    CHECK(o->nerrors > i);
    if (strstr(o->errors[i], a) == NULL ||
        (b != NULL && strstr(o->errors[i], b) == NULL)) {
        fprintf(stderr, "error '%s' lacks '%s' / '%s'\n", o->errors[i], a,
                b ? b : "");
        exit(1);
    }
}

TEST(file_values_applied) {
    setup("# detd settings\n"
          "\n"
          "   # indented comment\n"
          "socket = /tmp/x.sock   # trailing comment\n"
          "state-dir=/tmp/state\n"
          "namespace = team-a\n"
          "lease-ms = 1500\n"
          "log-level = debug\n"
          "log-format = json\n"
          "etcd = http://a#b\n"
          "max-clients\t=\t7\r\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), 0);
    CHECK_STR(o.cfg.socket_path, "/tmp/x.sock");
    CHECK_STR(o.cfg.state_dir, "/tmp/state");
    CHECK_STR(o.cfg.ns, "team-a");
    CHECK_EQ_INT(o.cfg.lease_ms, 1500);
    CHECK_EQ_INT(o.cfg.level, LOG_DEBUG);
    CHECK_EQ_INT(o.cfg.log_format, LOG_FORMAT_JSON);
    /* '#' not after whitespace is part of the value. */
    CHECK_STR(o.cfg.etcd_endpoints, "http://a#b");
    CHECK_EQ_INT(o.cfg.max_clients, 7);
    /* --etcd without --node-id: the host name. */
    CHECK(o.cfg.node_id != NULL);
    options_free(&o);
    cleanup();
}

TEST(quoted_values) {
    setup("tables = \"/t/a b # not a comment\"  # a comment\n"
          "tables = \"q\\\"uote\\\\d\"\n"
          "namespace = \"ns\"\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), 0);
    CHECK_EQ_INT(o.cfg.n_tables, 2);
    CHECK_STR(o.cfg.tables[0], "/t/a b # not a comment");
    CHECK_STR(o.cfg.tables[1], "q\"uote\\d");
    CHECK_STR(o.cfg.ns, "ns");
    options_free(&o);
    cleanup();
}

TEST(flags_override_file) {
    setup("socket = /tmp/file.sock\n"
          "lease-ms = 1500\n"
          "tables = /f1\n"
          "tables = /f2\n"
          "namespace = from-file\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, "--lease-ms", "900", "--tables", "/c1", "--tables",
                       "/c2", "--tables", "/c3", NULL),
                 0);
    CHECK_EQ_INT(o.cfg.lease_ms, 900);
    CHECK_STR(o.cfg.socket_path, "/tmp/file.sock");
    CHECK_STR(o.cfg.ns, "from-file");
    /* A command-line occurrence replaces the file's list. */
    CHECK_EQ_INT(o.cfg.n_tables, 3);
    CHECK_STR(o.cfg.tables[0], "/c1");
    CHECK_STR(o.cfg.tables[2], "/c3");
    options_free(&o);

    /* Flags placed before --config override the file too. */
    char *argv[] = {"detd", "--namespace", "cli", "--config", conf, NULL};
    options_init(&o);
    CHECK_EQ_INT(options_parse(&o, 5, argv), 0);
    CHECK_STR(o.cfg.ns, "cli");
    CHECK_EQ_INT(o.cfg.n_tables, 2);
    CHECK_STR(o.cfg.tables[1], "/f2");
    options_free(&o);
    cleanup();
}

/* The claim deferral of one claimant per key (docs/cluster-scale.md). */
TEST(claim_defer_options) {
    setup("claim-defer-step-ms = 0\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), 0);
    CHECK_EQ_INT(o.cfg.claim_defer_ms, 500);
    CHECK_EQ_INT(o.cfg.claim_defer_step_ms, 0);
    CHECK_EQ_INT(o.cfg.claim_defer_slots, 8);
    options_free(&o);
    CHECK_EQ_INT(parse(&o, "--claim-defer-ms", "1200", "--claim-defer-slots",
                       "32", NULL),
                 0);
    CHECK_EQ_INT(o.cfg.claim_defer_ms, 1200);
    CHECK_EQ_INT(o.cfg.claim_defer_slots, 32);
    options_free(&o);
    CHECK_EQ_INT(
        parse(&o, "--claim-defer-ms", "0", "--claim-defer-slots", "2000", NULL),
        DETD_EINVAL);
    check_error(&o, 0, "--claim-defer-ms: '0' is not a number from 1 to 60000",
                NULL);
    check_error(&o, 1, "--claim-defer-slots: '2000' is not a number from 0",
                NULL);
    options_free(&o);
    cleanup();
}

TEST(error_unknown_key) {
    setup("socket = /tmp/a.sock\n"
          "\n"
          "lease_ms = 100\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 1);
    check_error(&o, 0, conf, ":3: lease_ms: unknown key");
    CHECK(strncmp(o.errors[0], conf, strlen(conf)) == 0);
    options_free(&o);
    cleanup();
}

TEST(error_bad_number) {
    char text[4200];
    /* Line 12, as in the documented example. */
    snprintf(text, sizeof(text), "%s",
             "#\n#\n#\n#\n#\n#\n#\n#\n#\n#\n#\nlease-ms = 5x\n");
    setup(text);
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    char want[256];
    snprintf(want, sizeof(want),
             "%s:12: lease-ms: '5x' is not a number from 100 to 3600000", conf);
    CHECK_EQ_INT(o.nerrors, 1);
    CHECK_STR(o.errors[0], want);
    options_free(&o);
    cleanup();
}

TEST(error_range_and_enum) {
    setup("lease-ms = 99\n"
          "max-waiters = -1\n"
          "log-level = loud\n"
          "log-format = xml\n"
          "namespace = a/b\n"
          "socket = \"\"\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 6);
    check_error(&o, 0, ":1: lease-ms: '99' is not a number from 100", NULL);
    check_error(&o, 1, ":2: max-waiters: '-1' is not a number", NULL);
    check_error(&o, 2, ":3: log-level: 'loud' is not one of error, warn", NULL);
    check_error(&o, 3, ":4: log-format: 'xml' is not one of human, json", NULL);
    check_error(&o, 4, ":5: namespace: 'a/b' must be", NULL);
    check_error(&o, 5, ":6: socket: empty value", NULL);
    options_free(&o);
    cleanup();
}

TEST(error_missing_equals) {
    setup("socket /tmp/a.sock\n"
          "namespace\n"
          "= value\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 3);
    check_error(&o, 0, ":1: socket: missing '='", NULL);
    check_error(&o, 1, ":2: namespace: missing '='", NULL);
    check_error(&o, 2, ":3: expected 'key = value'", NULL);
    options_free(&o);
    cleanup();
}

TEST(error_bad_quote) {
    setup("namespace = \"open\n"
          "state-dir = \"/a\\nb\"\n"
          "socket = \"/tmp/a.sock\" extra\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 3);
    check_error(&o, 0, ":1: namespace: unterminated quoted value", NULL);
    check_error(&o, 1, ":2: state-dir: bad escape '\\n'", NULL);
    check_error(&o, 2, ":3: socket: unexpected text after the quoted value",
                NULL);
    options_free(&o);
    cleanup();
}

TEST(error_cli_only_key_in_file) {
    setup("config = /etc/other.conf\n"
          "help = yes\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 2);
    check_error(&o, 0, ":1: config: only valid on the command line", NULL);
    check_error(&o, 1, ":2: help: only valid on the command line", NULL);
    options_free(&o);
    cleanup();
}

TEST(caps_line_and_file) {
    char *text = malloc(CONFFILE_MAX_BYTES + 100);
    CHECK(text != NULL);
    /* A line over the cap, then a good one. */
    size_t n = (size_t)sprintf(text, "namespace = ");
    memset(text + n, 'a', CONFFILE_MAX_LINE);
    n += CONFFILE_MAX_LINE;
    n += (size_t)sprintf(text + n, "\nlease-ms = 200\n");
    setup(text);
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 1);
    check_error(&o, 0, ":1: line longer than 4096 bytes", NULL);
    CHECK_EQ_INT(o.cfg.lease_ms, 200);
    options_free(&o);
    cleanup();

    /* A file over the cap: refused as a whole, nothing applied. */
    memset(text, '#', CONFFILE_MAX_BYTES + 10);
    memcpy(text, "lease-ms = 200\n", 15);
    text[CONFFILE_MAX_BYTES + 10] = '\0';
    setup(text);
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 1);
    check_error(&o, 0, conf, "larger than 1048576 bytes");
    CHECK_EQ_INT(o.cfg.lease_ms, 30000);
    options_free(&o);
    cleanup();
    free(text);
}

TEST(missing_file) {
    setup("");
    struct options o;
    char *argv[] = {"detd", "--config", "/nonexistent/detd.conf", NULL};
    options_init(&o);
    CHECK_EQ_INT(options_parse(&o, 3, argv), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 1);
    check_error(&o, 0, "/nonexistent/detd.conf: cannot open", NULL);
    options_free(&o);
    cleanup();
}

TEST(cli_errors) {
    setup("");
    struct options o;
    CHECK_EQ_INT(parse(&o, "--lease-ms", "abc", "--frobnicate", "stray",
                       "--socket", NULL),
                 DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 4);
    check_error(&o, 0, "unknown option '--frobnicate'", NULL);
    check_error(&o, 1, "option '--socket' needs a value", NULL);
    check_error(&o, 2, "unexpected argument 'stray'", NULL);
    check_error(&o, 3, "--lease-ms: 'abc' is not a number", NULL);
    options_free(&o);
    cleanup();
}

TEST(settings_that_go_together) {
    setup("etcd = http://127.0.0.1:2379\n"
          "node-id = n1\n"
          "etcd-cert = /x/cert.pem\n"
          "listen-client-ca = /x/ca.pem\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 2);
    check_error(&o, 0, "listen-cert and listen-key go together", NULL);
    check_error(&o, 1, "etcd-cert and etcd-key go together", NULL);
    options_free(&o);
    cleanup();
}

TEST(password_file) {
    setup("etcd = http://127.0.0.1:2379\n"
          "node-id = n1\n"
          "etcd-user = root\n");
    char pw[160];
    snprintf(pw, sizeof(pw), "%s/pw", dir);
    FILE *f = fopen(pw, "w");
    CHECK(f != NULL);
    fputs("s3cret\n", f);
    fclose(f);
    unsetenv("DETD_ETCD_PASSWORD");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), DETD_EINVAL);
    check_error(&o, 0, "etcd-user needs $DETD_ETCD_PASSWORD", NULL);
    options_free(&o);
    CHECK_EQ_INT(parse(&o, "--etcd-password-file", pw, NULL), 0);
    CHECK_STR(o.cfg.etcd_password, "s3cret");
    options_free(&o);
    cleanup();
}

TEST(check_paths) {
    setup("");
    char file[160], tdir[160], state[200], sock[200];
    snprintf(file, sizeof(file), "%s/plain", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    fclose(f);
    snprintf(tdir, sizeof(tdir), "%s/no-tables", dir);
    snprintf(state, sizeof(state), "%s/plain/state", dir);
    snprintf(sock, sizeof(sock), "%s/new/sub/d.sock", dir);
    struct options o;
    CHECK_EQ_INT(parse(&o, "--state-dir", state, "--tables", tdir, "--tables",
                       dir, "--socket", sock, "--listen-cert",
                       "/nonexistent/c.pem", "--listen-key", file, "--listen",
                       "127.0.0.1:0", NULL),
                 0);
    CHECK_EQ_INT(options_check_paths(&o), DETD_EINVAL);
    CHECK_EQ_INT(o.nerrors, 3);
    check_error(&o, 0, "state-dir: ", "is not a directory");
    check_error(&o, 1, "tables: ", "no-tables");
    check_error(&o, 2, "listen-cert: '/nonexistent/c.pem'", NULL);
    options_free(&o);

    /* All good: a state dir to create under an existing one. */
    snprintf(state, sizeof(state), "%s/a/b/state", dir);
    CHECK_EQ_INT(parse(&o, "--state-dir", state, "--tables", dir, "--socket",
                       sock, NULL),
                 0);
    CHECK_EQ_INT(options_check_paths(&o), 0);
    CHECK_EQ_INT(o.nerrors, 0);
    options_free(&o);
    cleanup();
}

TEST(print_reads_back) {
    setup("tables = \"/t/with space\"\n"
          "tables = \"/t/q\\\"#\"\n"
          "namespace = n\n"
          "lease-ms = 4321\n"
          "log-format = json\n");
    struct options o;
    CHECK_EQ_INT(parse(&o, NULL), 0);
    char out[160];
    snprintf(out, sizeof(out), "%s/printed.conf", dir);
    FILE *f = fopen(out, "w");
    CHECK(f != NULL);
    options_print(&o, f);
    fclose(f);
    options_free(&o);

    struct options p;
    char *argv[] = {"detd", "--config", out, NULL};
    options_init(&p);
    CHECK_EQ_INT(options_parse(&p, 3, argv), 0);
    CHECK_EQ_INT(p.cfg.n_tables, 2);
    CHECK_STR(p.cfg.tables[0], "/t/with space");
    CHECK_STR(p.cfg.tables[1], "/t/q\"#");
    CHECK_STR(p.cfg.ns, "n");
    CHECK_EQ_INT(p.cfg.lease_ms, 4321);
    CHECK_EQ_INT(p.cfg.log_format, LOG_FORMAT_JSON);
    options_free(&p);
    cleanup();
}

TEST(usage_lists_every_key) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    options_usage(f);
    fclose(f);
    const char *keys[] = {"socket",
                          "state-dir",
                          "tables",
                          "namespace",
                          "lease-ms",
                          "max-clients",
                          "max-waiters",
                          "log-level",
                          "log-format",
                          "etcd",
                          "etcd-ca",
                          "etcd-cert",
                          "etcd-key",
                          "etcd-user",
                          "etcd-password-file",
                          "node-id",
                          "listen",
                          "listen-cert",
                          "listen-key",
                          "listen-client-ca",
                          "config",
                          "check-config",
                          "claim-defer-ms",
                          "claim-defer-step-ms",
                          "claim-defer-slots"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char flag[64];
        snprintf(flag, sizeof(flag), "  --%s ", keys[i]);
        if (strstr(buf, flag) == NULL) {
            snprintf(flag, sizeof(flag), "  --%s\n", keys[i]);
            CHECK(strstr(buf, flag) != NULL);
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
