/*
 * detctl_table: `detctl table export`: turns decisions or record-mode
 * votes into a per-architecture table file (format detd-table-1, a
 * superset of Megatron-LM's megatron.core.tuning tables; see
 * tables/README.md).
 *
 * The pure part (config parsing, grouping, majority, the JSON document)
 * takes rows and is independent of the daemon; detctl_table_export()
 * fetches the rows over the admin API, page by page.
 */
#ifndef DETD_DETCTL_TABLE_H
#define DETD_DETCTL_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

struct wire_channel;

/* One decision or vote. Strings are borrowed. */
struct detctl_table_row {
    const char *kernel; /* "module:qualname@guard" */
    const char *key;    /* canonical key */
    const char *config; /* canonical config string */
    const char *host;
    const char *device;
    const char *triton_version;
    int64_t at_ms;     /* decided or voted at */
    const char *label; /* names the row in messages */
};

struct detctl_table_stats {
    size_t entries;
    size_t kernels;
    size_t skipped;     /* rows whose config cannot be a table entry */
    size_t disagreeing; /* votes: entries whose voters did not all agree */
    size_t superseded;  /* rows of an older code version or decision */
};

/*
 * Parse a canonical config string ("BLOCK=1024,num_warps=4,num_stages=3,
 * num_ctas=1[,maxnreg=N]": kwargs sorted by name, then the launch options
 * in that order) into a table entry {"kwargs": {...}, "num_warps": ..,
 * "num_stages": .., "num_ctas": .., "maxnreg": N or null}. Values: decimal
 * integers, Python float reprs, True/False, None, else raw strings.
 * Returns 0 with *ret a new reference, or -1 with err naming what is wrong
 * (a string the entry would not render back to exactly).
 */
int detctl_table_entry_from_config(const char *config, json_t **ret, char *err,
                                   size_t errlen);

/*
 * The member names of object o in bytewise order, borrowed from o (valid
 * while o is unchanged); the array is the caller's to free(). *ret_n is
 * their count. NULL when out of memory.
 */
const char **detctl_table_sorted_keys(json_t *o, size_t *ret_n);

/*
 * The majority rule shared by export --votes and merge. counts maps the
 * canonical JSON of an entry (sorted keys, compact) to its vote count.
 * detctl_table_tally_add: add weight votes for entry (borrowed); returns
 * 0, or -1 when out of memory. detctl_table_tally_winner: the entry with
 * the most votes, a tie going to the bytewise smallest canonical JSON;
 * returns that key (borrowed from counts) or NULL when counts is empty,
 * with *ret_n its votes and *ret_total all votes (either may be NULL).
 */
int detctl_table_tally_add(json_t *counts, const json_t *entry,
                           json_int_t weight);
const char *detctl_table_tally_winner(json_t *counts, json_int_t *ret_n,
                                      json_int_t *ret_total);

/*
 * Build the table document for arch from rows. votes: majority per
 * (kernel without guard, key), ties to the bytewise smallest canonical
 * JSON of the entry, with a "provenance" member; else one decision per
 * (kernel, key), the newest when several code versions have one. Rows of
 * an older code version are dropped with a warning naming both; rows that
 * cannot be parsed are reported and skipped. Warnings go to warn.
 * Returns 0 with *ret_doc a new reference and *ret_stats filled, or -1
 * (out of memory).
 */
int detctl_table_build(const char *arch, const char *source, int votes,
                       const struct detctl_table_row *rows, size_t n,
                       FILE *warn, json_t **ret_doc,
                       struct detctl_table_stats *ret_stats);

/*
 * Write doc to path through a temporary file (path.tmp.PID) renamed over
 * it: sorted keys, indent 1, a trailing newline. On failure the message
 * naming the file is printed to stderr and nothing is left behind.
 * Returns a detctl exit status (0 ok, 2 failure).
 */
int detctl_table_write(const char *path, json_t *doc);

/* Options of `detctl table export`. */
struct detctl_table_opts {
    const char *arch;
    const char *ns;     /* NULL: the daemon's */
    const char *kernel; /* NULL: all */
    const char *source; /* NULL: a default naming the origin */
    const char *out;    /* the file to write */
    int votes;
    int64_t timeout_ms;
};

/*
 * Fetch the rows through ch (ExportDecisions or ListVotes, paged), build
 * the table and write it to o->out atomically (a temporary file renamed
 * over it): sorted keys, indent 1, a trailing newline, so the same store
 * gives the same bytes. Prints a summary to stdout and problems to
 * stderr. Returns a detctl exit status (0 ok, 2 bad input, 3-5 a failed call:
 * detctl_exit.h).
 */
int detctl_table_export(const struct detctl_table_opts *o,
                        struct wire_channel *ch);

/*
 * `detctl table import`: parse and validate the table o->out (any file
 * name; errors name the file and the JSON path) and send its entries to
 * the daemon's namespace o->ns with Admin.ImportTable, in batches well
 * under the 1 MiB message cap (each batch is stored in one transaction).
 * Prints what was added, replaced (naming the old config) and left
 * unchanged. Returns a detctl exit status (0 ok, 2 bad input, 3-5 a failed
 * call: detctl_exit.h).
 */
int detctl_table_import(const struct detctl_table_opts *o,
                        struct wire_channel *ch);

#endif /* DETD_DETCTL_TABLE_H */
