/*
 * conffile: the reader of detd's configuration file.
 *
 * Format: one "key = value" per line; '#' starts a comment (a whole line,
 * or after whitespace); blank lines are ignored; a value may be
 * double-quoted, and then \" and \\ are its only escapes. Keys are the
 * long flag names without the leading dashes; what a key means is the
 * caller's business (options.c). The reader knows nothing about keys: it
 * tokenizes, and hands each entry to a callback.
 *
 * Every error names the file and the line (and the key when there is
 * one): "/etc/detd/detd.conf:12: lease-ms: '5x' is not a number ...".
 * The reader goes on after a bad line so that one run reports them all.
 */
#ifndef DETD_CONFFILE_H
#define DETD_CONFFILE_H

#include <stddef.h>

/* Caps: a configuration file is small; anything bigger is a mistake. */
#define CONFFILE_MAX_BYTES (1024 * 1024)
#define CONFFILE_MAX_LINE 4096

/*
 * One entry. key and value are borrowed for the call. Returns 0, or a
 * negative DETD_E* with *ret_err set to a malloc'd message (the reader
 * prefixes "file:line: key: " and frees it).
 */
typedef int (*conffile_entry_cb)(void *ctx, const char *key, const char *value,
                                 unsigned line, char **ret_err);

/* One error, fully formatted ("file:line: key: what"); borrowed. */
typedef void (*conffile_error_cb)(void *ctx, const char *msg);

/*
 * Read the file at path and call entry for each "key = value" line, in
 * order, and error for each problem (the file itself, or a line). Lines
 * after a bad one are still read. Returns 0 when there was no problem,
 * DETD_EINVAL when some line was bad (each reported), or a negative errno
 * / DETD_ELIMIT when the file could not be read at all (reported too).
 */
int conffile_parse(const char *path, conffile_entry_cb entry,
                   conffile_error_cb error, void *ctx);

/*
 * The same on a buffer held in memory (len bytes, not NUL-terminated);
 * name stands for the file in messages.
 */
int conffile_parse_buffer(const char *name, const char *buf, size_t len,
                          conffile_entry_cb entry, conffile_error_cb error,
                          void *ctx);

#endif /* DETD_CONFFILE_H */
