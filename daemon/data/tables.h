/*
 * tables: the loaded set of per-architecture tables and their lookup.
 *
 * tables_load() reads, for each directory in order, every "sm*.json"
 * file in it (tablefmt.c parses and validates each); a bad file is
 * skipped and its error kept (tables_error()). The set is immutable once
 * loaded: the daemon builds a new one on reload and swaps it in.
 *
 * tables_lookup() is pure (no I/O) and uses one hash table per file.
 * For a kernel id "m.sub:fn@abcd" it tries the names "m.sub:fn@abcd",
 * "m.sub:fn", "m.sub.fn", "fn"; for each name the keys: the canonical
 * key, then the Megatron-form table_key, then "*". Files are searched in
 * directory order (an earlier directory overrides a later one), within a
 * file names in the order above and keys in the order above. The first
 * entry whose config is one of the live candidates is the answer; an
 * entry whose config is not among them is stale and the search goes on.
 */
#ifndef DETD_TABLES_H
#define DETD_TABLES_H

#include <stddef.h>

#include "tablefmt.h"

typedef struct tables tables;

/* A file of the set (tables_file()). Strings live as long as the set. */
struct tables_file_info {
    const char *path;
    const char *arch;
    size_t n_entries;
};

/* A file that was skipped, and why (tables_error()). */
struct tables_error {
    const char *path;
    const char *message; /* names the file and the path of the problem */
};

/* Up to this many considered entries are recorded by a lookup. */
#define TABLES_MAX_CONSIDERED 32

/* An entry the lookup looked at. Strings are borrowed from the set. */
struct tables_considered {
    const char *file;   /* path of the table file */
    const char *kernel; /* as written in the file */
    const char *key;    /* as written in the file */
    const char *config; /* the rendered canonical config */
    int stale;          /* 1: config is not among the candidates */
};

/* The result of tables_lookup(). */
struct tables_result {
    int hit;          /* 1: considered[n_considered - 1] is the answer */
    size_t n_files;   /* files of the arch searched */
    size_t n_stale;   /* stale entries met (all, even past the cap) */
    int kernel_found; /* some name variant exists in some file */
    struct tables_considered considered[TABLES_MAX_CONSIDERED];
    size_t n_considered; /* recorded (at most TABLES_MAX_CONSIDERED) */
};

/*
 * Load the set from dirs (n_dirs paths, searched in this order), then
 * from packaged_dir (may be NULL) last. A directory of dirs that cannot
 * be read (missing included) is recorded as an error; a missing
 * packaged_dir is not (a build that installed no tables). lim NULL: the
 * default caps. Does file I/O. Returns 0 with *ret owning the set
 * (tables_free()) or DETD_ENOMEM (*ret untouched). Arguments are borrowed
 * for the call.
 */
int tables_load(const char *const *dirs, size_t n_dirs,
                const char *packaged_dir, const struct tablefmt_limits *lim,
                tables **ret);

/* Free a set. NULL is a no-op. */
void tables_free(tables *t);

/* Files loaded, in search order; entries of all of them. t may be NULL. */
size_t tables_n_files(const tables *t);
const struct tables_file_info *tables_file(const tables *t, size_t i);
size_t tables_n_entries(const tables *t);

/* Files skipped, with their errors. t may be NULL. */
size_t tables_n_errors(const tables *t);
const struct tables_error *tables_error(const tables *t, size_t i);

/*
 * Look up (arch, kernel_id, key, table_key) with the live candidates
 * (cands, n_cands). table_key NULL or "": no Megatron-form key. cands
 * NULL: no candidate check (every entry counts as live: explain without
 * candidates). *ret is filled (hit or not). Pure; t may be NULL (a miss).
 * Strings in *ret are borrowed from t.
 */
void tables_lookup(const tables *t, const char *arch, const char *kernel_id,
                   const char *key, const char *table_key,
                   const char *const *cands, size_t n_cands,
                   struct tables_result *ret);

/*
 * The kernel names a lookup tries for kernel_id, in lookup order (at most
 * 4: "m.sub:fn@abcd", "m.sub:fn", "m.sub.fn", "fn"), as heap strings in
 * ret (the caller frees each). Returns their count; 0 when out of memory.
 */
size_t tables_kernel_names(const char *kernel_id, char *ret[4]);

#endif /* DETD_TABLES_H */
