/*
 * options: the table of settings, argv parsing, the configuration file
 * applied through the same rows, and --check-config (see options.h).
 */
#define _GNU_SOURCE
#include "config/options.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/conffile.h"
#include "detd/client.h"
#include "detd/error.h"
#include "strfmt.h"

typedef enum option_kind {
    KIND_FLAG,   /* no argument; int set to 1; command line only */
    KIND_STRING, /* const char * */
    KIND_U32,    /* uint32_t within [min, max] */
    KIND_ENUM,   /* int: the index of the value in names */
    KIND_LIST,   /* const char ** + size_t count; repeatable */
} option_kind;

#define ROW_CLI_ONLY 1u /* not a file key (--config, --help, ...) */

struct option_row;
/* Extra check of a value: 0, or DETD_EINVAL with *ret_err (malloc'd). */
typedef int (*option_check_fn)(const struct option_row *r, const char *value,
                               char **ret_err);

struct option_row {
    const char *name; /* flag without "--" = key in the file */
    const char *arg;  /* metavar in --help; NULL for KIND_FLAG */
    option_kind kind;
    size_t offset;            /* of the target in struct options */
    size_t count_offset;      /* KIND_LIST: of its size_t count */
    uint32_t min, max;        /* KIND_U32 */
    const char *const *names; /* KIND_ENUM */
    option_check_fn check;    /* optional */
    unsigned flags;
    const char *section; /* heading printed before this row in --help */
    const char *help;    /* lines separated by '\n' */
};

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > DAEMON_MAX_NAMESPACE)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

static int check_name(const struct option_row *r, const char *v,
                      char **ret_err) {
    if (valid_name(v))
        return 0;
    *ret_err = strfmt("'%s' must be 1 to %d characters of [A-Za-z0-9._-]", v,
                      DAEMON_MAX_NAMESPACE);
    return DETD_EINVAL;
}

static int check_lock_require(const struct option_row *r, const char *v,
                              char **ret_err) {
    static const char *const fields[] = {"triton_version", "torch_version",
                                         "cuda_version", "driver"};
    const char *eq = strchr(v, '=');
    for (size_t i = 0; eq != NULL && i < 4; i++)
        if (strlen(fields[i]) == (size_t)(eq - v) &&
            strncmp(v, fields[i], (size_t)(eq - v)) == 0)
            return 0;
    *ret_err = strfmt("'%s' is not FIELD=VALUE with FIELD one of "
                      "triton_version, torch_version, cuda_version, driver",
                      v);
    return DETD_EINVAL;
}

static int check_socket(const struct option_row *r, const char *v,
                        char **ret_err) {
    /* sun_path holds 108 bytes; gRPC needs room for its prefix. */
    if (strlen(v) >= 100) {
        *ret_err = strfmt("path '%s' is too long for a unix socket (keep it "
                          "under 100 bytes)",
                          v);
        return DETD_EINVAL;
    }
    return 0;
}

/* --metrics: what the metrics endpoint resolves at start (metrics_http.c),
 * so that --check-config refuses what the daemon would: [ADDRESS]:PORT or
 * HOST:PORT, a port from 1 to 65535, a host that resolves now. */
static int check_metrics(const struct option_row *r, const char *v,
                         char **ret_err) {
    char host[256];
    const char *end = v[0] == '[' ? strchr(v, ']') : strrchr(v, ':');
    const char *port = end == NULL ? NULL : v[0] == '[' ? end + 1 : end;
    size_t hl = end == NULL ? 0 : (size_t)(end - v) - (v[0] == '[');
    if (port == NULL || port[0] != ':' || end == v || hl == 0 ||
        hl >= sizeof host) {
        *ret_err = strfmt("'%s' is not %s", v,
                          v[0] == '[' ? "[ADDRESS]:PORT" : "HOST:PORT");
        return DETD_EINVAL;
    }
    memcpy(host, v + (v[0] == '['), hl);
    host[hl] = '\0';
    port++;
    char *pend = NULL;
    long p = strtol(port, &pend, 10);
    if (pend == port || *pend != '\0' || p < 1 || p > 65535) {
        *ret_err = strfmt("'%s': port must be 1 to 65535", v);
        return DETD_EINVAL;
    }
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        *ret_err = strfmt("'%s': %s", v, gai_strerror(rc));
        return DETD_EINVAL;
    }
    freeaddrinfo(ai);
    return 0;
}

static int check_mode(const struct option_row *r, const char *v,
                      char **ret_err) {
    char *end = NULL;
    errno = 0;
    unsigned long m = strtoul(v, &end, 8);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || m > 0777) {
        *ret_err = strfmt("'%s' is not an octal mode from 0 to 0777", v);
        return DETD_EINVAL;
    }
    return 0;
}

/* A user (min 0) or group (min 1) name or id that resolves now. */
static int check_id(const struct option_row *r, const char *v, char **ret_err) {
    struct access_ids one = {.n = 0};
    const char *why = "";
    if (access_ids_add(&one, v, r->min == 1, &why) != 0) {
        *ret_err = strfmt("'%s': %s", v, why);
        return DETD_EINVAL;
    }
    return 0;
}

#define CFG(field) offsetof(struct options, cfg.field)
#define OPT(field) offsetof(struct options, field)

/* clang-format off */
static const struct option_row rows[] = {
    {"config", "FILE", KIND_STRING, OPT(config_file), 0, 0, 0, NULL, NULL,
     ROW_CLI_ONLY, NULL,
     "read settings from FILE (key = value lines; flags\n"
     "given here override it)"},
    {"check-config", NULL, KIND_FLAG, OPT(check_config), 0, 0, 0, NULL, NULL,
     ROW_CLI_ONLY, NULL,
     "validate the file and the flags, print the\n"
     "effective configuration and exit (0: valid, 2: not)"},
    {"socket", "PATH", KIND_STRING, CFG(socket_path), 0, 0, 0, NULL,
     check_socket, 0, NULL,
     "unix socket for clients and detctl\n"
     "(default $DETD_SOCKET, else " DETD_DEFAULT_SOCKET ")"},
    {"state-dir", "DIR", KIND_STRING, CFG(state_dir), 0, 0, 0, NULL, NULL, 0,
     NULL, "decision store directory (default /var/lib/detd)"},
    {"repair", NULL, KIND_FLAG, CFG(repair), 0, 0, 0, NULL, NULL, ROW_CLI_ONLY,
     NULL,
     "if the store fails its integrity check, salvage\n"
     "every readable row into a fresh store (the damaged\n"
     "file is kept as detd.sqlite.corrupt-<unix-ms>), then\n"
     "serve"},
    {"lock", "FILE", KIND_STRING, CFG(lock), 0, 0, 0, NULL, NULL,
     ROW_CLI_ONLY, NULL,
     "store the decisions of this lockfile at start\n"
     "(docs/lockfile.md; as detctl lock import; with\n"
     "--etcd, committed through etcd before serving)"},
    {"lock-require", "FIELD=VALUE", KIND_LIST, CFG(lock_require),
     CFG(n_lock_require), 0, 0, NULL, check_lock_require, ROW_CLI_ONLY, NULL,
     "with --lock: a lock entry whose FIELD (triton_version,\n"
     "torch_version, cuda_version, driver) is not VALUE\n"
     "is not stored (a miss); repeatable"},
    {"tables", "DIR", KIND_LIST, CFG(tables), CFG(n_tables), 0, 0, NULL, NULL,
     0, NULL,
     "per-architecture table directory; repeatable,\n"
     "searched in the order given"},
    {"namespace", "NAME", KIND_STRING, CFG(ns), 0, 0, 0, NULL, check_name, 0,
     NULL, "decision namespace (default 'default')"},
    {"lease-ms", "N", KIND_U32, CFG(lease_ms), 0, 100, 3600000, NULL, NULL, 0,
     NULL, "claim lease in milliseconds (default 30000)"},
    {"pass-timeout-ms", "N", KIND_U32, CFG(pass_timeout_ms), 0, 100, 86400000,
     NULL, NULL, 0, NULL,
     "deadline of one timing pass: after it the claim passes\n"
     "to the next waiter, attached or not (default 600000)"},
    {"max-clients", "N", KIND_U32, CFG(max_clients), 0, 1, 1000000, NULL, NULL,
     0, NULL, "attached client processes (default 4096)"},
    {"max-connections", "N", KIND_U32, CFG(max_connections), 0, 1, 1000000,
     NULL, NULL, 0, NULL,
     "open connections on the unix socket; new ones over it\n"
     "are closed at once (default 4096)"},
    {"max-connections-per-uid", "N", KIND_U32, CFG(max_connections_per_uid),
     0, 1, 1000000, NULL, NULL, 0, NULL,
     "of those, open from one user (SO_PEERCRED) at once;\n"
     "new ones over it are closed at once (default: a\n"
     "quarter of --max-connections)"},
    {"idle-timeout-ms", "N", KIND_U32, CFG(idle_timeout_ms), 0, 0, 3600000,
     NULL, NULL, 0, NULL,
     "close a connection that made no call this long after\n"
     "it was accepted; 0: never (default 30000)"},
    {"exit-when-idle-s", "N", KIND_U32, CFG(exit_idle_s), 0, 0, 604800, NULL,
     NULL, 0, NULL,
     "exit (as on SIGTERM) after N seconds with no client\n"
     "attached, no claim open and no call waiting; 0: never\n"
     "(default 0; a daemon started on demand uses it)"},
    {"max-waiters", "N", KIND_U32, CFG(max_waiters), 0, 1, 10000000, NULL,
     NULL, 0, NULL, "calls waiting for a timing pass (default 65536)"},
    {"max-claims-per-session", "N", KIND_U32, CFG(max_claims_per_session), 0,
     0, 10000000, NULL, NULL, 0, NULL,
     "timing passes one attached process holds at once;\n"
     "0: no cap (default 1024)"},
    {"max-claims-per-uid", "N", KIND_U32, CFG(max_claims_per_uid), 0, 0,
     10000000, NULL, NULL, 0, NULL,
     "timing passes one user's processes hold at once;\n"
     "0: no cap (default 4096)"},
    {"max-new-keys-per-session", "N", KIND_U32, CFG(max_new_keys_per_session),
     0, 0, 100000000, NULL, NULL, 0, NULL,
     "timing passes one attached process starts per\n"
     "minute; 0: no cap (default 10000)"},
    {"max-new-keys-per-uid", "N", KIND_U32, CFG(max_new_keys_per_uid), 0, 0,
     100000000, NULL, NULL, 0, NULL,
     "timing passes one user's processes start per\n"
     "minute; 0: no cap (default 40000)"},
    {"max-store-kib-per-session", "N", KIND_U32, CFG(max_store_kib_per_session),
     0, 0, 100000000, NULL, NULL, 0, NULL,
     "KiB one attached process adds to the store per\n"
     "minute (reports, observations); 0: no cap\n"
     "(default 65536)"},
    {"max-store-kib-per-uid", "N", KIND_U32, CFG(max_store_kib_per_uid), 0, 0,
     100000000, NULL, NULL, 0, NULL,
     "KiB one user's processes add to the store per\n"
     "minute (reports, observations, votes); 0: no cap\n"
     "(default 262144)"},
    {"max-votes", "N", KIND_U32, CFG(max_votes), 0, 1, 100000000, NULL,
     NULL, 0, NULL, "record-mode votes kept (default 1000000)"},
    {"log-level", "LEVEL", KIND_ENUM, CFG(level), 0, 0, 0, log_level_names,
     NULL, 0, NULL, "error, warn, info or debug (default info)"},
    {"log-format", "FORMAT", KIND_ENUM, CFG(log_format), 0, 0, 0,
     log_format_names, NULL, 0, NULL,
     "human or json (one JSON object per line);\n"
     "default human"},
    {"etcd", "URL[,URL...]", KIND_STRING, CFG(etcd_endpoints), 0, 0, 0, NULL,
     NULL, 0, "Multi-node (etcd backend):",
     "etcd v3 endpoints (http:// or https://);\n"
     "without it the backend is local"},
    {"etcd-ca", "FILE", KIND_STRING, CFG(etcd_ca), 0, 0, 0, NULL, NULL, 0,
     NULL, "CA certificate (PEM) for https endpoints"},
    {"etcd-cert", "FILE", KIND_STRING, CFG(etcd_cert), 0, 0, 0, NULL, NULL, 0,
     NULL, "client certificate (PEM)"},
    {"etcd-key", "FILE", KIND_STRING, CFG(etcd_key), 0, 0, 0, NULL, NULL, 0,
     NULL, "client key (PEM)"},
    {"etcd-user", "USER", KIND_STRING, CFG(etcd_user), 0, 0, 0, NULL, NULL, 0,
     NULL,
     "etcd user; the password comes from\n"
     "$DETD_ETCD_PASSWORD or --etcd-password-file"},
    {"etcd-password-file", "FILE", KIND_STRING, OPT(password_file), 0, 0, 0,
     NULL, NULL, 0, NULL, "first line is the etcd password"},
    {"node-id", "NAME", KIND_STRING, CFG(node_id), 0, 0, 0, NULL, check_name,
     0, NULL,
     "this node's name in the cluster (default: the\n"
     "host name); --lease-ms is also the node lease\n"
     "(whole seconds, at least 1)"},
    {"claim-defer-ms", "N", KIND_U32, CFG(claim_defer_ms), 0, 1, 60000, NULL,
     NULL, 0, NULL,
     "a node that is not a new key's owner waits N ms\n"
     "for its decision before it claims (default 500)"},
    {"claim-defer-step-ms", "N", KIND_U32, CFG(claim_defer_step_ms), 0, 0,
     10000, NULL, NULL, 0, NULL,
     "plus N ms per rank after the owner's (default 50)"},
    {"claim-defer-slots", "N", KIND_U32, CFG(claim_defer_slots), 0, 0, 1024,
     NULL, NULL, 0, NULL, "for at most N ranks (default 8)"},
    {"listen", "HOST:PORT", KIND_STRING, CFG(listen), 0, 0, 0, NULL, NULL, 0,
     NULL,
     "the Admin API over TCP (detctl from other hosts,\n"
     "verify --cluster); Decider methods stay on the\n"
     "unix socket"},
    {"listen-cert", "FILE", KIND_STRING, CFG(listen_cert), 0, 0, 0, NULL, NULL,
     0, NULL, "TLS certificate for --listen (PEM)"},
    {"listen-key", "FILE", KIND_STRING, CFG(listen_key), 0, 0, 0, NULL, NULL,
     0, NULL, "TLS key for --listen (PEM)"},
    {"listen-client-ca", "FILE", KIND_STRING, CFG(listen_client_ca), 0, 0, 0,
     NULL, NULL, 0, NULL,
     "require client certificates signed by this CA\n"
     "on --listen"},
    {"socket-mode", "OCTAL", KIND_STRING, OPT(socket_mode), 0, 0, 0, NULL,
     check_mode, 0, "Access (the unix socket) and metrics:",
     "socket file mode (default 0660)"},
    {"socket-group", "GROUP", KIND_STRING, OPT(socket_group), 0, 1, 0, NULL,
     check_id, 0, NULL,
     "socket file group, name or gid (default: the\n"
     "daemon's)"},
    {"allow-uid", "USER", KIND_LIST, OPT(allow_uid), OPT(n_allow_uid), 0, 0,
     NULL, check_id, 0, NULL,
     "repeatable, name or uid: only these users (or\n"
     "members of --allow-gid groups) may call; default:\n"
     "whoever can open the socket"},
    {"allow-gid", "GROUP", KIND_LIST, OPT(allow_gid), OPT(n_allow_gid), 1, 0,
     NULL, check_id, 0, NULL, "repeatable, name or gid (see allow-uid)"},
    {"admin-uid", "USER", KIND_LIST, OPT(admin_uid), OPT(n_admin_uid), 0, 0,
     NULL, check_id, 0, NULL,
     "repeatable: only these users (or --admin-gid\n"
     "members) may make admin calls that change state\n"
     "(Reset, Reload, ImportTable); default: every\n"
     "allowed caller"},
    {"admin-gid", "GROUP", KIND_LIST, OPT(admin_gid), OPT(n_admin_gid), 1, 0,
     NULL, check_id, 0, NULL, "repeatable, name or gid (see admin-uid)"},
    {"metrics", "HOST:PORT", KIND_STRING, CFG(metrics), 0, 0, 0, NULL,
     check_metrics,
     0, NULL, "Prometheus /metrics and /healthz over HTTP"},
    {"version", NULL, KIND_FLAG, OPT(version), 0, 0, 0, NULL, NULL,
     ROW_CLI_ONLY, "", "print the version and exit"},
    {"help", NULL, KIND_FLAG, OPT(help), 0, 0, 0, NULL, NULL, ROW_CLI_ONLY,
     NULL, "print this help and exit (also -h)"},
};
/* clang-format on */
#define NROWS (sizeof(rows) / sizeof(rows[0]))
_Static_assert(NROWS <= sizeof(((struct options *)0)->cli_seen),
               "cli_seen has a byte per row");

static const struct option_row *row_find(const char *name) {
    for (size_t i = 0; i < NROWS; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

static void add_error(struct options *o, char *msg) {
    if (msg == NULL) {
        o->errors_dropped++;
        return;
    }
    if (o->nerrors == OPTIONS_MAX_ERRORS) {
        o->errors_dropped++;
        free(msg);
        return;
    }
    o->errors[o->nerrors++] = msg;
}

/* Keep s (a copy) for as long as o lives. */
static const char *own(struct options *o, const char *s) {
    if (o->nowned == o->capowned) {
        size_t cap = o->capowned ? o->capowned * 2 : 16;
        char **v = realloc(o->owned, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        o->owned = v;
        o->capowned = cap;
    }
    char *c = strdup(s);
    if (c != NULL)
        o->owned[o->nowned++] = c;
    return c;
}

void options_init(struct options *o) {
    memset(o, 0, sizeof(*o));
    o->cfg = (struct daemon_config){
        .socket_path = getenv("DETD_SOCKET"),
        .state_dir = "/var/lib/detd",
        .ns = "default",
        .lease_ms = 30000,
        .claim_defer_ms = 500,
        .claim_defer_step_ms = 50,
        .claim_defer_slots = 8,
        .pass_timeout_ms = 600000,
        .level = LOG_INFO,
        .log_format = LOG_FORMAT_HUMAN,
        .max_clients = 4096,
        .max_connections = 4096,
        .idle_timeout_ms = 30000,
        .max_waiters = 65536,
        .max_claims_per_session = 1024,
        .max_claims_per_uid = 4096,
        .max_new_keys_per_session = 10000,
        .max_new_keys_per_uid = 40000,
        .max_store_kib_per_session = 65536,
        .max_store_kib_per_uid = 262144,
        .max_votes = DAEMON_DEFAULT_MAX_VOTES,
        .max_claims = 1 << 20,
        .max_queue = 1 << 20,
        .socket_mode = 0660,
        .socket_gid = -1,
    };
    o->cfg.access = &o->access;
    if (o->cfg.socket_path == NULL || o->cfg.socket_path[0] == '\0')
        o->cfg.socket_path = DETD_DEFAULT_SOCKET;
}

static int parse_u32(const struct option_row *r, const char *s, uint32_t *ret,
                     char **ret_err) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || s[0] == '+' ||
        s[0] == ' ' || v < r->min || v > r->max) {
        *ret_err =
            strfmt("'%s' is not a number from %u to %u", s, r->min, r->max);
        return DETD_EINVAL;
    }
    *ret = (uint32_t)v;
    return 0;
}

/*
 * Apply value to row r. from_cli: a command-line occurrence (a list then
 * drops what the file gave it on its first one). Returns 0 or DETD_EINVAL
 * / DETD_ENOMEM with *ret_err set.
 */
static int apply(struct options *o, const struct option_row *r,
                 const char *value, int from_cli, char **ret_err) {
    char *base = (char *)o;
    int rc;
    if (r->kind == KIND_FLAG) {
        *(int *)(base + r->offset) = 1;
        return 0;
    }
    if (strlen(value) > OPTIONS_MAX_VALUE) {
        *ret_err = strfmt("value longer than %d bytes", OPTIONS_MAX_VALUE);
        return DETD_ELIMIT;
    }
    if (value[0] == '\0') {
        *ret_err = strfmt("empty value");
        return DETD_EINVAL;
    }
    if (r->check != NULL && (rc = r->check(r, value, ret_err)) != 0)
        return rc;
    switch (r->kind) {
    case KIND_STRING: {
        const char *v = own(o, value);
        if (v == NULL)
            goto nomem;
        *(const char **)(base + r->offset) = v;
        return 0;
    }
    case KIND_U32:
        return parse_u32(r, value, (uint32_t *)(base + r->offset), ret_err);
    case KIND_ENUM:
        for (int i = 0; r->names[i] != NULL; i++) {
            if (strcmp(value, r->names[i]) == 0) {
                *(int *)(base + r->offset) = i;
                return 0;
            }
        }
        {
            char list[256] = "";
            for (int i = 0; r->names[i] != NULL; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list),
                         "%s%s", i > 0 ? ", " : "", r->names[i]);
            *ret_err = strfmt("'%s' is not one of %s", value, list);
        }
        return DETD_EINVAL;
    case KIND_LIST: {
        const char ***items = (const char ***)(base + r->offset);
        size_t *n = (size_t *)(base + r->count_offset);
        size_t idx = (size_t)(r - rows);
        if (from_cli && !o->cli_seen[idx]) {
            o->cli_seen[idx] = 1;
            *n = 0; /* the command line replaces the file's list */
        }
        if (*n == OPTIONS_MAX_LIST) {
            *ret_err = strfmt("more than %d values", OPTIONS_MAX_LIST);
            return DETD_ELIMIT;
        }
        if (*items == NULL) {
            /* One array of the maximum size, owned through own(). */
            char *arr = calloc(OPTIONS_MAX_LIST + 1, sizeof(char *));
            if (arr == NULL)
                goto nomem;
            if (o->nowned == o->capowned) {
                size_t cap = o->capowned ? o->capowned * 2 : 16;
                char **v = realloc(o->owned, cap * sizeof(*v));
                if (v == NULL) {
                    free(arr);
                    goto nomem;
                }
                o->owned = v;
                o->capowned = cap;
            }
            o->owned[o->nowned++] = arr;
            *items = (const char **)arr;
        }
        const char *v = own(o, value);
        if (v == NULL)
            goto nomem;
        (*items)[(*n)++] = v;
        return 0;
    }
    case KIND_FLAG:
        break;
    }
    return DETD_EINTERNAL;
nomem:
    *ret_err = strfmt("out of memory");
    return DETD_ENOMEM;
}

/* ---- the file ---- */

static int file_entry(void *ctx, const char *key, const char *value,
                      unsigned line, char **ret_err) {
    struct options *o = ctx;
    (void)line;
    const struct option_row *r = row_find(key);
    if (r == NULL) {
        *ret_err = strfmt("unknown key (keys are the long flag names without "
                          "'--'; see detd --help)");
        return DETD_EINVAL;
    }
    if (r->flags & ROW_CLI_ONLY) {
        *ret_err = strfmt("only valid on the command line, not in a "
                          "configuration file");
        return DETD_EINVAL;
    }
    return apply(o, r, value, 0, ret_err);
}

static void file_error(void *ctx, const char *msg) {
    add_error(ctx, strfmt("%s", msg));
}

/* ---- argv ---- */

struct cli_value {
    const struct option_row *row;
    const char *value;
};

/* The access settings (each value already checked) into the config. */
static void finish_access(struct options *o) {
    struct daemon_config *c = &o->cfg;
    const char *why = "";
    if (o->socket_mode != NULL)
        c->socket_mode = (unsigned)strtoul(o->socket_mode, NULL, 8);
    if (o->socket_group != NULL) {
        struct access_ids one = {.n = 0};
        if (access_ids_add(&one, o->socket_group, 1, &why) == 0)
            c->socket_gid = (long)one.ids[0];
    }
    const struct {
        const char *key;
        const char *const *items;
        size_t n;
        int group;
        struct access_ids *ids;
    } lists[] = {
        {"allow-uid", o->allow_uid, o->n_allow_uid, 0, &o->access.allow_uid},
        {"allow-gid", o->allow_gid, o->n_allow_gid, 1, &o->access.allow_gid},
        {"admin-uid", o->admin_uid, o->n_admin_uid, 0, &o->access.admin_uid},
        {"admin-gid", o->admin_gid, o->n_admin_gid, 1, &o->access.admin_gid},
    };
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        lists[i].ids->n = 0;
        for (size_t j = 0; j < lists[i].n; j++)
            if (access_ids_add(lists[i].ids, lists[i].items[j], lists[i].group,
                               &why) != 0)
                add_error(o, strfmt("%s: '%s': %s", lists[i].key,
                                    lists[i].items[j], why));
    }
}

/* Cross-field rules, the password, the default node id. */
static void finish(struct options *o) {
    struct daemon_config *c = &o->cfg;
    finish_access(o);
    /* One user cannot take every connection: by default a quarter. */
    if (c->max_connections_per_uid == 0)
        c->max_connections_per_uid =
            c->max_connections / 4 > 0 ? c->max_connections / 4 : 1;
    if (c->max_connections_per_uid > c->max_connections)
        add_error(o, strfmt("max-connections-per-uid (%u) is over "
                            "max-connections (%u)",
                            c->max_connections_per_uid, c->max_connections));
    if ((c->listen_cert != NULL) != (c->listen_key != NULL) ||
        (c->listen_client_ca != NULL && c->listen_cert == NULL))
        add_error(o, strfmt("listen-cert and listen-key go together (and "
                            "listen-client-ca needs them)"));
    if ((c->etcd_cert != NULL) != (c->etcd_key != NULL))
        add_error(o, strfmt("etcd-cert and etcd-key go together"));
    if (c->etcd_user != NULL) {
        const char *pw = getenv("DETD_ETCD_PASSWORD");
        if (o->password_file != NULL) {
            FILE *f = fopen(o->password_file, "r");
            if (f == NULL ||
                fgets(o->password, sizeof(o->password), f) == NULL) {
                add_error(o, strfmt("etcd-password-file: cannot read '%s'%s%s",
                                    o->password_file, f == NULL ? ": " : "",
                                    f == NULL ? strerror(errno) : ""));
                pw = NULL;
            } else {
                o->password[strcspn(o->password, "\r\n")] = '\0';
                pw = o->password;
            }
            if (f != NULL)
                fclose(f);
            if (pw == NULL)
                return;
        }
        if (pw == NULL) {
            add_error(o, strfmt("etcd-user needs $DETD_ETCD_PASSWORD or "
                                "etcd-password-file"));
            return;
        }
        c->etcd_password = pw;
    }
    if (c->etcd_endpoints != NULL && c->node_id == NULL) {
        if (gethostname(o->hostname, sizeof(o->hostname) - 1) != 0 ||
            !valid_name(o->hostname)) {
            add_error(o, strfmt("the host name is not a usable node id: set "
                                "node-id"));
            return;
        }
        c->node_id = o->hostname;
    }
}

/* See options.h. */
int options_parse(struct options *o, int argc, char **argv) {
    struct option lopts[NROWS + 1];
    struct cli_value *vals = calloc((size_t)argc + 1, sizeof(*vals));
    size_t nvals = 0;
    if (vals == NULL) {
        add_error(o, strfmt("out of memory"));
        return DETD_ENOMEM;
    }
    for (size_t i = 0; i < NROWS; i++)
        lopts[i] = (struct option){
            rows[i].name,
            rows[i].kind == KIND_FLAG ? no_argument : required_argument, NULL,
            256 + (int)i};
    lopts[NROWS] = (struct option){NULL, 0, NULL, 0};

    /* 1. Collect the command line (applied after the file). */
    optind = 0; /* full re-initialisation (glibc) */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", lopts, NULL)) != -1) {
        if (c == 'h') { /* -h: --help, as detctl and most tools take it */
            o->help = 1;
            continue;
        }
        if (c == '?') {
            add_error(o, strfmt("unknown option '%s' (see detd --help)",
                                argv[optind - 1]));
            continue;
        }
        if (c == ':') {
            add_error(o, strfmt("option '%s' needs a value", argv[optind - 1]));
            continue;
        }
        const struct option_row *r = &rows[c - 256];
        if (r->kind == KIND_FLAG) {
            char *unused = NULL;
            apply(o, r, "", 1, &unused);
            continue;
        }
        if (r->flags & ROW_CLI_ONLY) {
            /* --config: needed before the file is read. */
            char *err = NULL;
            if (apply(o, r, optarg, 1, &err) != 0)
                add_error(o, strfmt("--%s: %s", r->name, err ? err : "?"));
            free(err);
            continue;
        }
        vals[nvals++] = (struct cli_value){r, optarg};
    }
    if (optind < argc)
        add_error(o, strfmt("unexpected argument '%s'", argv[optind]));
    if (o->help || o->version)
        goto out;

    /* 2. The file. */
    if (o->config_file != NULL)
        conffile_parse(o->config_file, file_entry, file_error, o);

    /* 3. The command line over it. */
    for (size_t i = 0; i < nvals; i++) {
        char *err = NULL;
        if (apply(o, vals[i].row, vals[i].value, 1, &err) != 0)
            add_error(o,
                      strfmt("--%s: %s", vals[i].row->name, err ? err : "?"));
        free(err);
    }

    /* 4. What goes together. */
    if (o->nerrors == 0)
        finish(o);
out:
    free(vals);
    return o->nerrors > 0 || o->errors_dropped > 0 ? DETD_EINVAL : 0;
}

/* ---- --check-config ---- */

/* dir exists as a directory we may write, or can be created. */
static void check_dir_creatable(struct options *o, const char *key,
                                const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            add_error(
                o, strfmt("%s: '%s' exists and is not a directory", key, dir));
        else if (access(dir, W_OK | X_OK) != 0)
            add_error(o, strfmt("%s: directory '%s' is not writable: %s", key,
                                dir, strerror(errno)));
        return;
    }
    if (errno != ENOENT && errno != ENOTDIR) {
        add_error(o, strfmt("%s: '%s': %s", key, dir, strerror(errno)));
        return;
    }
    /* Walk up to the nearest existing ancestor: it must be a writable
     * directory (the daemon creates the rest, like mkdir -p). */
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        add_error(o, strfmt("%s: path too long", key));
        return;
    }
    for (;;) {
        char *slash = strrchr(path, '/');
        if (slash == NULL)
            snprintf(path, sizeof(path), ".");
        else if (slash == path)
            path[1] = '\0';
        else
            *slash = '\0';
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                add_error(o, strfmt("%s: '%s' cannot be created: '%s' is not "
                                    "a directory",
                                    key, dir, path));
            else if (access(path, W_OK | X_OK) != 0)
                add_error(o, strfmt("%s: '%s' cannot be created: '%s' is not "
                                    "writable",
                                    key, dir, path));
            return;
        }
        if (errno != ENOENT && errno != ENOTDIR) {
            add_error(o, strfmt("%s: '%s' cannot be created: '%s': %s", key,
                                dir, path, strerror(errno)));
            return;
        }
        if (strcmp(path, ".") == 0 || strcmp(path, "/") == 0)
            return;
    }
}

static void check_readable_file(struct options *o, const char *key,
                                const char *file) {
    struct stat st;
    if (file == NULL)
        return;
    if (stat(file, &st) != 0)
        add_error(o, strfmt("%s: '%s': %s", key, file, strerror(errno)));
    else if (!S_ISREG(st.st_mode))
        add_error(o, strfmt("%s: '%s' is not a regular file", key, file));
    else if (access(file, R_OK) != 0)
        add_error(o, strfmt("%s: '%s' is not readable: %s", key, file,
                            strerror(errno)));
}

/* See options.h. */
int options_check_paths(struct options *o) {
    const struct daemon_config *c = &o->cfg;
    size_t before = o->nerrors + o->errors_dropped;
    check_dir_creatable(o, "state-dir", c->state_dir);
    check_readable_file(o, "lock", c->lock);
    char sockdir[4096];
    snprintf(sockdir, sizeof(sockdir), "%s", c->socket_path);
    char *slash = strrchr(sockdir, '/');
    if (slash != NULL) {
        if (slash == sockdir)
            slash[1] = '\0';
        else
            *slash = '\0';
        check_dir_creatable(o, "socket", sockdir);
    }
    for (size_t i = 0; i < c->n_tables; i++) {
        struct stat st;
        if (stat(c->tables[i], &st) != 0)
            add_error(
                o, strfmt("tables: '%s': %s", c->tables[i], strerror(errno)));
        else if (!S_ISDIR(st.st_mode))
            add_error(o,
                      strfmt("tables: '%s' is not a directory", c->tables[i]));
        else if (access(c->tables[i], R_OK | X_OK) != 0)
            add_error(o, strfmt("tables: directory '%s' is not readable",
                                c->tables[i]));
    }
    check_readable_file(o, "etcd-ca", c->etcd_ca);
    check_readable_file(o, "etcd-cert", c->etcd_cert);
    check_readable_file(o, "etcd-key", c->etcd_key);
    check_readable_file(o, "listen-cert", c->listen_cert);
    check_readable_file(o, "listen-key", c->listen_key);
    check_readable_file(o, "listen-client-ca", c->listen_client_ca);
    return o->nerrors + o->errors_dropped > before ? DETD_EINVAL : 0;
}

/* ---- printing ---- */

static void print_value(FILE *f, const char *key, const char *v) {
    size_t n = strlen(v);
    int quote = n == 0 || v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' ||
                v[n - 1] == '\t' || v[0] == '"' || strchr(v, '#') != NULL;
    if (!quote) {
        fprintf(f, "%s = %s\n", key, v);
        return;
    }
    fprintf(f, "%s = \"", key);
    for (const char *p = v; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', f);
        fputc(*p, f);
    }
    fputs("\"\n", f);
}

/* See options.h. */
void options_print(const struct options *o, FILE *f) {
    const char *base = (const char *)o;
    if (o->config_file != NULL)
        fprintf(f,
                "# detd %s: effective configuration (%s, then the "
                "command line)\n",
                DETD_VERSION, o->config_file);
    else
        fprintf(f, "# detd %s: effective configuration (command line)\n",
                DETD_VERSION);
    for (size_t i = 0; i < NROWS; i++) {
        const struct option_row *r = &rows[i];
        if (r->flags & ROW_CLI_ONLY)
            continue;
        const void *p = base + r->offset;
        char num[32];
        switch (r->kind) {
        case KIND_STRING: {
            const char *v = *(const char *const *)p;
            if (v == NULL)
                fprintf(f, "# %s is not set\n", r->name);
            else
                print_value(f, r->name, v);
            break;
        }
        case KIND_U32:
            snprintf(num, sizeof(num), "%u", *(const uint32_t *)p);
            print_value(f, r->name, num);
            break;
        case KIND_ENUM:
            print_value(f, r->name, r->names[*(const int *)p]);
            break;
        case KIND_LIST: {
            const char *const *items = *(const char *const *const *)p;
            size_t n = *(const size_t *)(base + r->count_offset);
            if (n == 0)
                fprintf(f, "# %s is not set\n", r->name);
            for (size_t j = 0; j < n; j++)
                print_value(f, r->name, items[j]);
            break;
        }
        case KIND_FLAG:
            break;
        }
    }
}

/* See options.h. */
void options_usage(FILE *f) {
    fputs("Usage: detd [OPTIONS]\n"
          "\n"
          "The detd node daemon: every process on this node gets the same\n"
          "kernel configuration for every key; undecided keys are timed\n"
          "once, by one designated process, and the winner is stored.\n"
          "Every option except --config, --check-config, --version and\n"
          "--help is also a key of the configuration file.\n"
          "\n"
          "Options:\n",
          f);
    for (size_t i = 0; i < NROWS; i++) {
        const struct option_row *r = &rows[i];
        if (r->section != NULL)
            fprintf(f, "\n%s%s", r->section, r->section[0] ? "\n" : "");
        char head[64];
        snprintf(head, sizeof(head), "  --%s%s%s", r->name, r->arg ? " " : "",
                 r->arg ? r->arg : "");
        const char *h = r->help;
        int first = 1;
        while (*h != '\0' || first) {
            const char *nl = strchr(h, '\n');
            int len = nl != NULL ? (int)(nl - h) : (int)strlen(h);
            if (first && strlen(head) < 21)
                fprintf(f, "%-22s%.*s\n", head, len, h);
            else if (first)
                fprintf(f, "%s\n%-22s%.*s\n", head, "", len, h);
            else
                fprintf(f, "%-22s%.*s\n", "", len, h);
            first = 0;
            h += len;
            if (*h == '\n')
                h++;
        }
    }
    fputs("\nSignals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads "
          "tables.\n",
          f);
}

/* See options.h. */
void options_free(struct options *o) {
    if (o == NULL)
        return;
    for (size_t i = 0; i < o->nowned; i++)
        free(o->owned[i]);
    free(o->owned);
    for (size_t i = 0; i < o->nerrors; i++)
        free(o->errors[i]);
    memset(o->password, 0, sizeof(o->password));
    o->owned = NULL;
    o->nowned = o->capowned = 0;
    o->nerrors = 0;
}
