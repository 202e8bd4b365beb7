/*
 * detctl_merge: `detctl table merge` and `detctl table report`: the
 * majority of several tables and per-rank recordings, per architecture
 * (see tables/README.md).
 *
 * Inputs:
 *  - detd tables and Megatron-LM tables ({"arch": .., "kernels": {..}}),
 *    parsed and validated by tablefmt (any file name); an entry whose
 *    provenance has "votes": N counts as N votes;
 *  - Megatron-LM per-rank recordings (what MCORE_AUTOTUNE_RECORD writes):
 *    {"<arch>": {"<kernel>": {"<key>": entry}}}, recognized by having
 *    neither "kernels" nor "arch" at the top; one vote per entry.
 * Entries are normalized (num_ctas defaults to 1, maxnreg to null) and
 * counted per (arch, kernel, key) with the majority rule of
 * detctl_table.h. The result does not depend on the order of the inputs.
 *
 * The collecting and building part is pure (inputs from memory);
 * detctl_merge_add_file() reads a file, detctl_merge_run() and
 * detctl_merge_report_run() are the commands.
 */
#ifndef DETD_DETCTL_MERGE_H
#define DETD_DETCTL_MERGE_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

struct detctl_merge;

/* Per architecture, after detctl_merge_build(). */
struct detctl_merge_stats {
    size_t entries;
    size_t kernels;
    size_t disagreeing; /* entries whose inputs named different configs */
};

/* A new, empty merge. Returns 0 with *ret (detctl_merge_free()), or -1
 * when out of memory. */
int detctl_merge_new(struct detctl_merge **ret);

/* Free m. NULL is a no-op. */
void detctl_merge_free(struct detctl_merge *m);

/*
 * Add one input of len bytes at buf, named name in messages (a path).
 * Returns 0, or -1 with *ret_errmsg a heap message naming name and the
 * JSON path of the problem (caller frees; may be NULL when out of
 * memory); on failure nothing of this input was added. buf and name are
 * borrowed for the call.
 */
int detctl_merge_add(struct detctl_merge *m, const char *name, const void *buf,
                     size_t len, char **ret_errmsg);

/* Read the file at path (at most the table file cap) and add it as
 * detctl_merge_add() does. */
int detctl_merge_add_file(struct detctl_merge *m, const char *path,
                          char **ret_errmsg);

/* Inputs added so far. */
size_t detctl_merge_n_inputs(const struct detctl_merge *m);

/*
 * The merged tables: *ret_docs is a new object mapping each arch to its
 * document (format detd-table-1 with "provenance": votes, agree, devices
 * and hosts when the inputs knew them; "triton" when every input that
 * names one names the same). source is written as "source". Returns 0,
 * -1 when out of memory, or -2 when an arch is over the table format's
 * entries cap (*ret_errmsg says which; caller frees).
 */
int detctl_merge_build(struct detctl_merge *m, const char *source,
                       json_t **ret_docs, char **ret_errmsg);

/* The statistics of arch after detctl_merge_build() (zeros if none). */
void detctl_merge_stats(const struct detctl_merge *m, const char *arch,
                        struct detctl_merge_stats *ret);

/*
 * The report: a new object {"inputs": N, "archs": {arch: {"entries",
 * "votes", "disagreeing", "kernels": {kernel: {"entries", "votes",
 * "disagreeing", "splits": [{"key", "votes": {config string: n}}]}}}}}
 * (splits list the entries whose inputs disagree). NULL when out of
 * memory.
 */
json_t *detctl_merge_report(struct detctl_merge *m);

/* Print the disagreements of every arch (kernel, key, votes per config)
 * to out. */
void detctl_merge_print_disagreements(struct detctl_merge *m, FILE *out);

/* Options of `detctl table merge` / `report`. */
struct detctl_merge_opts {
    const char *const *files;
    size_t n_files;
    const char *out;    /* merge: a file, or a directory (one per arch) */
    const char *source; /* merge: NULL: a default */
    int verbose;        /* merge: list each disagreement */
    int json;           /* report */
};

/* The commands. Return a detctl exit status (0 ok, 2 failure: nothing is
 * written when any input is bad). */
int detctl_merge_run(const struct detctl_merge_opts *o);
int detctl_merge_report_run(const struct detctl_merge_opts *o);

#endif /* DETD_DETCTL_MERGE_H */
