/*
 * detctl_cli: detctl's command line: the global options, one option set
 * per command parsed with getopt_long (an option a command does not take
 * is a usage error), per-command --help, the namespace selection
 * (--namespace, else $DETD_NAMESPACE, else the daemon's) and the JSON
 * envelope every document carries (docs/detctl-json.md).
 */
#ifndef DETD_DETCTL_CLI_H
#define DETD_DETCTL_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "detctl_exit.h"

/* The version of detctl's JSON documents (api_version in each). */
#define DETCTL_JSON_API_VERSION 1

/* Everything the command line says. Strings are borrowed from argv or
 * the environment; the arrays are the caller's (detctl_cli_opts_clear). */
struct detctl_opts {
    const char *command;
    const char *subcommand; /* table, lock */
    /* connection */
    const char *socket;
    const char *address; /* --address HOST:PORT: a daemon's --listen */
    const char *tls_ca, *tls_cert, *tls_key;
    int64_t timeout_ms;
    /* output */
    int json;
    /* scope */
    const char *namespace_;    /* NULL: the daemon's */
    const char *namespace_src; /* "--namespace", "DETD_NAMESPACE" or NULL */
    const char *kernel;
    const char *arch;
    /* command options */
    int all, cluster, votes, imports, verbose;
    const char *key, *table_key, *source, *out;
    const char **candidates;
    size_t n_candidates;
    const char **files; /* table merge/report/import inputs */
    size_t n_files;
    /* verify */
    int allow_empty;
    int strict_determinism; /* runtime findings fail verify */
    int require_governed;   /* tuners detd could not govern fail verify */
    long expect_ranks;      /* 0: not asked */
    const char *job;
    int all_jobs;     /* --all-jobs */
    const char *lock; /* verify --lock FILE */
    /* lock import */
    const char *triton_version;
    /* lock import --require FIELD=VALUE (repeatable, at most 8). */
    const char *require[8];
    size_t n_require;
    const char *report; /* --report FILE (.html/.htm: HTML, else Markdown) */
    const char *junit;  /* --junit FILE */
    uint32_t page_size; /* --page-size N (0: the daemon's page) */
};

/*
 * Parse argv into *o (zeroed first): global options, the command (and
 * the table subcommand), then the command's own options. --help prints
 * the help (global, or the command's) to stdout. Returns -1 to go on, or
 * an exit status to return at once (0 after --help/--version, 2 after a
 * usage error, which is printed to stderr naming the option and the
 * command).
 */
int detctl_cli_parse(int argc, char **argv, struct detctl_opts *o);

/* Free the arrays of o. */
void detctl_cli_opts_clear(struct detctl_opts *o);

/*
 * A new JSON document {"api_version": 1, "kind": kind} (kind borrowed,
 * copied). NULL when out of memory.
 */
json_t *detctl_cli_doc(const char *kind);

/* Print doc (stolen) as indented JSON with a newline; returns 0, or 5 when
 * doc is NULL (out of memory). */
int detctl_cli_print_doc(json_t *doc);

/* unix_ms as ISO 8601 UTC, "2026-11-29T21:35:14.250Z"; "-" for 0 (JSON:
 * use detctl_cli_json_time, which gives null for 0). */
void detctl_cli_iso_time(int64_t unix_ms, char *buf, size_t len);
json_t *detctl_cli_json_time(int64_t unix_ms);

#endif /* DETD_DETCTL_CLI_H */
