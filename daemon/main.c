/*
 * detd: main() and the command line. Parses the flags into a
 * daemon_config and runs the loop (loop.c) in the foreground.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "detd/client.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "Usage: detd [OPTIONS]\n"
        "\n"
        "The detd node daemon: every process on this node gets the same\n"
        "kernel configuration for every key; undecided keys are timed\n"
        "once, by one designated process, and the winner is stored.\n"
        "\n"
        "Options:\n"
        "  --socket PATH       unix socket for clients and detctl\n"
        "                      (default $DETD_SOCKET, else %s)\n"
        "  --state-dir DIR     decision store directory (default "
        "/var/lib/detd)\n"
        "  --tables DIR        per-architecture table directory; "
        "repeatable,\n"
        "                      searched in the order given\n"
        "  --namespace NAME    decision namespace (default 'default')\n"
        "  --lease-ms N        claim lease in milliseconds (default "
        "30000)\n"
        "  --max-clients N     attached client processes (default 4096)\n"
        "  --max-waiters N     calls waiting for a timing pass (default "
        "65536)\n"
        "  --max-votes N       record-mode votes kept (default 1000000)\n"
        "  --log-level LEVEL   error, warn, info or debug (default info)\n"
        "\n"
        "Multi-node (etcd backend):\n"
        "  --etcd URL[,URL...] etcd v3 endpoints (http:// or https://);\n"
        "                      without it the backend is local\n"
        "  --etcd-ca FILE      CA certificate (PEM) for https endpoints\n"
        "  --etcd-cert FILE    client certificate (PEM)\n"
        "  --etcd-key FILE     client key (PEM)\n"
        "  --etcd-user USER    etcd user; the password comes from\n"
        "                      $DETD_ETCD_PASSWORD or --etcd-password-file\n"
        "  --etcd-password-file FILE  first line is the etcd password\n"
        "  --node-id NAME      this node's name in the cluster (default:\n"
        "                      the host name); --lease-ms is also the\n"
        "                      node lease (whole seconds, at least 1)\n"
        "  --listen HOST:PORT  the Admin API over TCP (detctl from other\n"
        "                      hosts, verify --cluster); Decider methods\n"
        "                      stay on the unix socket\n"
        "  --listen-cert FILE  TLS certificate for --listen (PEM)\n"
        "  --listen-key FILE   TLS key for --listen (PEM)\n"
        "  --listen-client-ca FILE  require client certificates signed\n"
        "                      by this CA on --listen\n"
        "  --version           print the version and exit\n"
        "  --help              print this help and exit\n"
        "\n"
        "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads "
        "tables.\n",
        DETD_DEFAULT_SOCKET);
}

static int parse_u32(const char *flag, const char *s, uint32_t min,
                     uint32_t max, uint32_t *ret) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min ||
        v > max) {
        fprintf(stderr, "detd: %s: '%s' is not a number from %u to %u\n", flag,
                s, min, max);
        return -1;
    }
    *ret = (uint32_t)v;
    return 0;
}

static int valid_namespace(const char *ns) {
    size_t n = strlen(ns);
    if (n == 0 || n > DAEMON_MAX_NAMESPACE)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = ns[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    enum {
        OPT_SOCKET = 256,
        OPT_STATE,
        OPT_TABLES,
        OPT_NS,
        OPT_LEASE,
        OPT_LOG,
        OPT_MAX_CLIENTS,
        OPT_MAX_WAITERS,
        OPT_VERSION,
        OPT_HELP,
        OPT_ETCD,
        OPT_ETCD_CA,
        OPT_ETCD_CERT,
        OPT_ETCD_KEY,
        OPT_ETCD_USER,
        OPT_ETCD_PWFILE,
        OPT_NODE_ID,
        OPT_LISTEN,
        OPT_LISTEN_CERT,
        OPT_LISTEN_KEY,
        OPT_LISTEN_CA,
        OPT_MAX_VOTES,
    };
    static const struct option opts[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"tables", required_argument, NULL, OPT_TABLES},
        {"namespace", required_argument, NULL, OPT_NS},
        {"lease-ms", required_argument, NULL, OPT_LEASE},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
        {"max-waiters", required_argument, NULL, OPT_MAX_WAITERS},
        {"max-votes", required_argument, NULL, OPT_MAX_VOTES},
        {"version", no_argument, NULL, OPT_VERSION},
        {"help", no_argument, NULL, OPT_HELP},
        {"etcd", required_argument, NULL, OPT_ETCD},
        {"etcd-ca", required_argument, NULL, OPT_ETCD_CA},
        {"etcd-cert", required_argument, NULL, OPT_ETCD_CERT},
        {"etcd-key", required_argument, NULL, OPT_ETCD_KEY},
        {"etcd-user", required_argument, NULL, OPT_ETCD_USER},
        {"etcd-password-file", required_argument, NULL, OPT_ETCD_PWFILE},
        {"node-id", required_argument, NULL, OPT_NODE_ID},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"listen-cert", required_argument, NULL, OPT_LISTEN_CERT},
        {"listen-key", required_argument, NULL, OPT_LISTEN_KEY},
        {"listen-client-ca", required_argument, NULL, OPT_LISTEN_CA},
        {NULL, 0, NULL, 0},
    };
    struct daemon_config cfg = {
        .socket_path = getenv("DETD_SOCKET"),
        .state_dir = "/var/lib/detd",
        .ns = "default",
        .lease_ms = 30000,
        .level = LOG_INFO,
        .max_clients = 4096,
        .max_waiters = 65536,
        .max_claims = 1 << 20,
        .max_queue = 1 << 20,
        .max_votes = DAEMON_DEFAULT_MAX_VOTES,
    };
    if (cfg.socket_path == NULL || cfg.socket_path[0] == '\0')
        cfg.socket_path = DETD_DEFAULT_SOCKET;
    const char **tables = calloc((size_t)argc + 1, sizeof(*tables));
    if (tables == NULL)
        return 1;
    cfg.tables = tables;
    const char *pwfile = NULL;
    char password[512] = "";
    char hostname[256] = "";
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case OPT_SOCKET:
            cfg.socket_path = optarg;
            break;
        case OPT_STATE:
            cfg.state_dir = optarg;
            break;
        case OPT_TABLES:
            tables[cfg.n_tables++] = optarg;
            break;
        case OPT_NS:
            if (!valid_namespace(optarg)) {
                fprintf(stderr,
                        "detd: --namespace: '%s' must be 1 to %d characters "
                        "of [A-Za-z0-9._-]\n",
                        optarg, DAEMON_MAX_NAMESPACE);
                return 2;
            }
            cfg.ns = optarg;
            break;
        case OPT_LEASE:
            if (parse_u32("--lease-ms", optarg, 100, 3600000, &cfg.lease_ms))
                return 2;
            break;
        case OPT_LOG:
            if (log_parse_level(optarg, &cfg.level) != 0) {
                fprintf(stderr,
                        "detd: --log-level: '%s' is not one of error, warn, "
                        "info, debug\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_MAX_CLIENTS:
            if (parse_u32("--max-clients", optarg, 1, 1000000,
                          &cfg.max_clients))
                return 2;
            break;
        case OPT_MAX_WAITERS:
            if (parse_u32("--max-waiters", optarg, 1, 10000000,
                          &cfg.max_waiters))
                return 2;
            break;
        case OPT_MAX_VOTES: {
            uint32_t v = 0;
            if (parse_u32("--max-votes", optarg, 1,
                          DAEMON_DEFAULT_MAX_VOTES * 100, &v))
                return 2;
            cfg.max_votes = v;
            break;
        }
        case OPT_ETCD:
            cfg.etcd_endpoints = optarg;
            break;
        case OPT_ETCD_CA:
            cfg.etcd_ca = optarg;
            break;
        case OPT_ETCD_CERT:
            cfg.etcd_cert = optarg;
            break;
        case OPT_ETCD_KEY:
            cfg.etcd_key = optarg;
            break;
        case OPT_ETCD_USER:
            cfg.etcd_user = optarg;
            break;
        case OPT_ETCD_PWFILE:
            pwfile = optarg;
            break;
        case OPT_NODE_ID:
            if (!valid_namespace(optarg)) {
                fprintf(stderr,
                        "detd: --node-id: '%s' must be 1 to %d characters "
                        "of [A-Za-z0-9._-]\n",
                        optarg, DAEMON_MAX_NAMESPACE);
                return 2;
            }
            cfg.node_id = optarg;
            break;
        case OPT_LISTEN:
            cfg.listen = optarg;
            break;
        case OPT_LISTEN_CERT:
            cfg.listen_cert = optarg;
            break;
        case OPT_LISTEN_KEY:
            cfg.listen_key = optarg;
            break;
        case OPT_LISTEN_CA:
            cfg.listen_client_ca = optarg;
            break;
        case OPT_VERSION:
            printf("detd %s\n", DETD_VERSION);
            return 0;
        case OPT_HELP:
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "detd: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "detd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (strlen(cfg.socket_path) >= 100) {
        /* sun_path holds 108 bytes; gRPC needs room for its prefix. */
        fprintf(stderr,
                "detd: --socket: path '%s' is too long for a unix "
                "socket (keep it under 100 bytes)\n",
                cfg.socket_path);
        return 2;
    }
    if ((cfg.listen_cert != NULL) != (cfg.listen_key != NULL) ||
        (cfg.listen_client_ca != NULL && cfg.listen_cert == NULL)) {
        fprintf(stderr, "detd: --listen-cert and --listen-key go together "
                        "(and --listen-client-ca needs them)\n");
        return 2;
    }
    if ((cfg.etcd_cert != NULL) != (cfg.etcd_key != NULL)) {
        fprintf(stderr, "detd: --etcd-cert and --etcd-key go together\n");
        return 2;
    }
    if (cfg.etcd_user != NULL) {
        const char *pw = getenv("DETD_ETCD_PASSWORD");
        if (pwfile != NULL) {
            FILE *f = fopen(pwfile, "r");
            if (f == NULL || fgets(password, sizeof(password), f) == NULL) {
                fprintf(stderr,
                        "detd: --etcd-password-file: cannot read '%s'\n",
                        pwfile);
                if (f != NULL)
                    fclose(f);
                return 2;
            }
            fclose(f);
            password[strcspn(password, "\r\n")] = '\0';
            pw = password;
        }
        if (pw == NULL) {
            fprintf(stderr, "detd: --etcd-user needs $DETD_ETCD_PASSWORD or "
                            "--etcd-password-file\n");
            return 2;
        }
        cfg.etcd_password = pw;
    }
    if (cfg.etcd_endpoints != NULL && cfg.node_id == NULL) {
        if (gethostname(hostname, sizeof(hostname) - 1) != 0 ||
            !valid_namespace(hostname)) {
            fprintf(stderr, "detd: the host name is not a usable node id: "
                            "pass --node-id\n");
            return 2;
        }
        cfg.node_id = hostname;
    }
    log_set_level(cfg.level);
    signal(SIGPIPE, SIG_IGN);
    int rc = daemon_run(&cfg);
    free(tables);
    return rc;
}
