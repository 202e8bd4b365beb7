/*
 * options: the daemon's settings, from the command line and from the
 * configuration file, through one table.
 *
 * Each row of the table (options.c) is one setting: its name (the long
 * flag without "--", which is also its key in the file), the kind of its
 * argument, a validator, where the value goes, whether it repeats, and
 * its help line. argv parsing, the file (conffile.c), --help and the
 * effective configuration printed by --check-config all walk the table,
 * so a new setting is one new row (and its field in daemon_config).
 *
 * Precedence: defaults, then the file (--config), then the command line;
 * for a repeatable setting (--tables), any occurrence on the command line
 * replaces the file's list.
 */
#ifndef DETD_OPTIONS_H
#define DETD_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include <stdint.h>

#include "core/access.h"
#include "config/limits.h"
#include "config/log.h"

/* The daemon's settings, as daemon_run() takes them. */
struct daemon_config {
    const char *socket_path;
    const char *state_dir;
    const char **tables; /* --tables, in order */
    size_t n_tables;
    const char *ns;
    uint32_t lease_ms;
    /* One claimant per key: the deferral of a node not a key's owner. */
    uint32_t claim_defer_ms;
    uint32_t claim_defer_step_ms;
    uint32_t claim_defer_slots;
    uint32_t pass_timeout_ms; /* a timing pass's own deadline */
    log_level level;
    log_format log_format; /* --log-format */
    uint32_t max_clients;
    uint32_t max_connections;         /* open on the unix socket at once */
    uint32_t idle_timeout_ms;         /* a connection with no call; 0: never */
    uint32_t max_connections_per_uid; /* of max_connections, from one uid */
    /* Caps per session and per uid (app/fair.h); 0: off. */
    uint32_t max_claims_per_session, max_claims_per_uid;
    uint32_t max_new_keys_per_session, max_new_keys_per_uid;   /* a minute */
    uint32_t max_store_kib_per_session, max_store_kib_per_uid; /* a minute */
    /* Exit after this long with no client attached, no claim open and no
     * call waiting (a daemon started on demand); 0: never. */
    uint32_t exit_idle_s;
    uint32_t max_waiters;
    uint32_t max_claims;
    uint32_t max_queue; /* events queued for the loop */
    uint32_t max_votes; /* record-mode votes kept (all namespaces) */
    const char *cuda_library;
    /* etcd backend (etcd_endpoints NULL: the local backend). */
    const char *etcd_endpoints;
    const char *etcd_ca;
    const char *etcd_cert;
    const char *etcd_key;
    const char *etcd_user;
    const char *etcd_password;
    const char *node_id;
    /* Admin API over TCP (NULL: none); TLS when cert and key are set. */
    const char *listen;
    const char *listen_cert;
    const char *listen_key;
    const char *listen_client_ca;
    /* The unix socket's mode and group (-1: the daemon's), and who may
     * call through it (access.h). */
    unsigned socket_mode;
    long socket_gid;
    const struct access_policy *access;
    /* Prometheus metrics and /healthz over HTTP ("HOST:PORT"; NULL: off). */
    const char *metrics;
    /* --repair: salvage a store that fails its integrity check, then serve. */
    int repair;
    /* --lock FILE: a lockfile whose decisions are stored at start. */
    const char *lock;
    /* --lock-require FIELD=VALUE: the run's provenance a lock entry must
     * match (docs/lockfile.md), repeatable. */
    const char **lock_require;
    size_t n_lock_require;
};

/* Most errors collected before parsing gives up reporting more. */
#define OPTIONS_MAX_ERRORS 32
#define OPTIONS_MAX_VALUE 4096 /* bytes in one value */
#define OPTIONS_MAX_LIST 256   /* items of a repeatable setting */

struct options {
    struct daemon_config cfg; /* the result, for daemon_run() */
    const char *config_file;  /* --config (NULL: none) */
    int check_config;         /* --check-config */
    int help;                 /* --help */
    int version;              /* --version */
    const char *password_file;

    /* Access settings as given (validated per value), turned into
     * cfg.socket_mode, cfg.socket_gid and access by options_parse(). */
    const char *socket_mode;
    const char *socket_group;
    const char **allow_uid, **allow_gid, **admin_uid, **admin_gid;
    size_t n_allow_uid, n_allow_gid, n_admin_uid, n_admin_gid;
    struct access_policy access; /* cfg.access points here */

    /* Errors ("file:line: key: what" or "--flag: what"), owned. */
    char *errors[OPTIONS_MAX_ERRORS];
    size_t nerrors;
    size_t errors_dropped;

    /* Storage of values and lists, owned; freed by options_free(). */
    char **owned;
    size_t nowned, capowned;
    unsigned char cli_seen[64]; /* repeatable rows seen on argv */
    char password[512];
    char hostname[256];
};

/* Fill o with the defaults (socket from $DETD_SOCKET when set). */
void options_init(struct options *o);

/*
 * Parse argv (argv[0] is skipped), then the file named by --config, and
 * apply them: the file first, the command line over it. Then check the
 * settings that go together, read --etcd-password-file, and default
 * --node-id to the host name with --etcd. Returns 0, or DETD_EINVAL with
 * every problem in o->errors. argv must outlive o (values may point into
 * it). Stops early for --help and --version (o->help / o->version set).
 */
int options_parse(struct options *o, int argc, char **argv);

/*
 * --check-config: check what the daemon would need at start-up without
 * opening anything: the state directory exists or can be created, the
 * socket's directory too, every --tables directory is a readable
 * directory, every certificate or key file is a readable file. Returns 0
 * or DETD_EINVAL with each problem appended to o->errors.
 */
int options_check_paths(struct options *o);

/* Print the effective configuration in the file's format (re-readable). */
void options_print(const struct options *o, FILE *f);

/* Print --help, generated from the table. */
void options_usage(FILE *f);

/* Free what o owns (not o). Pointers in o->cfg die with it. */
void options_free(struct options *o);

#endif /* DETD_OPTIONS_H */
