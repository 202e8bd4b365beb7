/*
 * tablefmt: one per-architecture table document ("detd-table-1", a
 * superset of Megatron-LM's megatron.core.tuning format): parsing from
 * memory with caps, validation, and rendering of each entry to detd's
 * canonical config string (byte for byte what the Python package's
 * _canon.config_string() produces for the same triton.Config).
 *
 * No daemon state: linked into the daemon (tables.c) and into detctl.
 * Everything but tablefmt_read_file() is pure (no I/O). Never logs: every
 * error comes back as a message naming the file and the JSON path of the
 * bad member, e.g.
 *   sm90.json: kernels."m:f"."[i:1]".num_warps: expected an integer
 *
 * Document (see tables/README.md):
 *   {"format": "detd-table-1",           optional; if present exactly this
 *    "arch": "sm90",                      required, ^sm[0-9]{2,3}[a-z]?$,
 *                                         and the file is named <arch>.json
 *    "triton": "3.6.0", "source": "...",  optional strings
 *    "packages": {"name": "version"},     optional object of strings
 *    "kernels": {kernel: {key: entry}},   required
 *    "provenance": {kernel: {key: {..}}}} optional, never used for lookup
 * Other top-level members are ignored (as Megatron's loader does).
 * entry: {"kwargs": {NAME: int|real|bool|string|null}, "num_warps": int,
 *         "num_stages": int, "num_ctas": int (default 1),
 *         "maxnreg": int|null (default null), "ir_override": null}
 * and nothing else.
 */
#ifndef DETD_TABLEFMT_H
#define DETD_TABLEFMT_H

#include <stddef.h>

#include <jansson.h>

#define TABLEFMT_FORMAT "detd-table-1"
#define TABLEFMT_MAX_FILE_BYTES ((size_t)64 << 20)
#define TABLEFMT_MAX_NAME 4096 /* a kernel name or a key, in bytes */
#define TABLEFMT_MAX_ENTRIES 1000000

/* Caps applied while parsing; tablefmt_default_limits() fills the above. */
struct tablefmt_limits {
    size_t max_file_bytes;
    size_t max_name;
    size_t max_entries;
    /* 1: the file may have any name (detctl table merge reads inputs such
     * as rank0.json); 0 (the default): it must be "<arch>.json". */
    int any_name;
};

/* One entry: kernel and key as written in the file. */
struct tablefmt_entry {
    const char *kernel;       /* borrowed from the document */
    const char *key;          /* borrowed from the document */
    char *config;             /* canonical config string (owned) */
    const json_t *raw;        /* the entry object (borrowed) */
    const json_t *provenance; /* its provenance object, or NULL */
};

/* A parsed, validated document. */
struct tablefmt_doc {
    const char *arch;               /* borrowed from root */
    const char *format;             /* NULL when absent */
    const char *triton;             /* NULL when absent */
    const char *source;             /* NULL when absent */
    const json_t *packages;         /* object of strings, or NULL */
    json_t *root;                   /* the whole document (owned) */
    struct tablefmt_entry *entries; /* in file order */
    size_t n_entries;
};

/* The default caps (64 MiB, 4 KiB, 1,000,000 entries). */
void tablefmt_default_limits(struct tablefmt_limits *ret);

/*
 * 1 if arch matches ^sm[0-9]{2,3}[a-z]?$, else 0. arch may be NULL (0).
 */
int tablefmt_arch_valid(const char *arch);

/*
 * Parse and validate len bytes of buf as the table file named name (a
 * path; its last component must be "<arch>.json"). lim NULL: the default
 * caps. Returns 0 with *ret owning the document (tablefmt_free()), or
 * DETD_EINVAL (bad document), DETD_ELIMIT (over a cap) or DETD_ENOMEM,
 * with *ret untouched and *ret_errmsg (if ret_errmsg is not NULL) a heap
 * message naming the file and the path of the problem (caller frees; NULL
 * if even that allocation failed). buf and name are borrowed for the call.
 */
int tablefmt_parse(const char *name, const void *buf, size_t len,
                   const struct tablefmt_limits *lim, struct tablefmt_doc **ret,
                   char **ret_errmsg);

/*
 * Read the file at path (at most lim->max_file_bytes; more is a
 * DETD_ELIMIT naming the file and the cap) and parse it as above. Errors
 * as tablefmt_parse(), plus -errno when the file cannot be read.
 */
int tablefmt_read_file(const char *path, const struct tablefmt_limits *lim,
                       struct tablefmt_doc **ret, char **ret_errmsg);

/* Free a document. NULL is a no-op. */
void tablefmt_free(struct tablefmt_doc *doc);

/*
 * Render one entry object to its canonical config string: kwargs sorted
 * by name as NAME=value (integers in decimal, reals as Python's repr,
 * True/False, strings raw, None), then num_warps=, num_stages=,
 * num_ctas=, and maxnreg= when not null, joined by ','. where names the
 * entry in messages (e.g. "sm90.json: kernels.\"f\".\"*\""). Returns 0
 * with *ret_config (heap, caller frees), or DETD_EINVAL / DETD_ENOMEM
 * with *ret_errmsg as in tablefmt_parse().
 */
int tablefmt_render_entry(const json_t *entry, const char *where,
                          char **ret_config, char **ret_errmsg);

/*
 * The inverse of tablefmt_render_entry() for the strings it produces:
 * parse a canonical config string ("BLOCK=1024,num_warps=4,num_stages=3,
 * num_ctas=1[,maxnreg=N]": kwargs sorted by name, then the launch options
 * in that order) into an entry {"kwargs": {...}, "num_warps": ..,
 * "num_stages": .., "num_ctas": .., "maxnreg": N or null}. Values:
 * decimal integers, Python float reprs, True/False, None, else raw
 * strings. Returns 0 with *ret a new reference, or DETD_EINVAL (a string
 * the entry would not render back to exactly) / DETD_ENOMEM with *err (if
 * err is not NULL) a heap message naming what is wrong (caller frees).
 */
int tablefmt_entry_from_config(const char *config, json_t **ret, char **err);

/*
 * Python's repr() of a finite double into buf (at least 32 bytes).
 * Returns buf. Non-finite values render as "inf", "-inf", "nan".
 */
char *tablefmt_repr_double(double v, char *buf, size_t size);

#endif /* DETD_TABLEFMT_H */
