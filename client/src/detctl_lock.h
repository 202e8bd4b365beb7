/*
 * detctl_lock: lockfiles (docs/lockfile.md). `detctl lock export` writes
 * the decisions a job used with their provenance as one JSON document
 * whose content hash (SHA-256 of its canonical form: every member but
 * "sha256", keys sorted, compact, ASCII, reals with 17 digits) is in the
 * file; `detctl lock import` checks the file and stores its decisions
 * (Admin.ImportLock); `detctl verify --lock` fails on a key a run used
 * that the lock does not hold, or with another config.
 */
#ifndef DETD_DETCTL_LOCK_H
#define DETD_DETCTL_LOCK_H

#include <stddef.h>

#include <jansson.h>

#include "detctl_cli.h"

struct wire_channel;
struct detctl_lock;

/* detctl lock export / import with o through ch. Return the exit
 * status (detctl_exit.h). */
int detctl_lock_export_run(const struct detctl_opts *o,
                           struct wire_channel *ch);
int detctl_lock_import_run(const struct detctl_opts *o,
                           struct wire_channel *ch);

/*
 * Read and check the lockfile at path: its size (at most 64 MiB), JSON,
 * kind and format, the content hash, every entry's fields and id. Returns
 * 0 with *ret the lock (detctl_lock_free()), or an exit status after
 * printing to stderr what is wrong, naming the file and the field (a
 * content hash that does not match: both hashes).
 */
int detctl_lock_load(const char *path, struct detctl_lock **ret);
void detctl_lock_free(struct detctl_lock *l);

/*
 * Check one key of verify's report (its JSON: id, kernel, key, arch,
 * uses) against the lock, for namespace ns: 0 when the key has no
 * governed use or the lock holds it and every governed use ran the lock's
 * config; 1 with msg (len bytes) saying why not (a config other than the
 * lock's; not in the lock; in the lock for another arch or other
 * candidates).
 */
int detctl_lock_check(struct detctl_lock *l, const char *ns, const json_t *key,
                      char *msg, size_t len);

/* The lock's summary for verify's document: file, sha256, entries. */
json_t *detctl_lock_json(const struct detctl_lock *l);

#endif /* DETD_DETCTL_LOCK_H */
