/*
 * lockfmt: the lockfile document (docs/lockfile.md), shared by detctl
 * (lock export, import, verify --lock) and detd (--lock FILE at start):
 * its content hash, its checks, and its entries as detd.v1.Decision
 * messages.
 *
 * The content hash is the SHA-256 (lowercase hex) of the document without
 * its "sha256" member, serialized with keys sorted, no whitespace,
 * non-ASCII escaped and reals with 17 significant digits.
 */
#ifndef DETD_LOCKFMT_H
#define DETD_LOCKFMT_H

#include <stddef.h>

#include <jansson.h>

#include "detd.pb-c.h"

#define LOCKFMT_KIND "Lockfile"
#define LOCKFMT_FORMAT 1
/* A lockfile larger than this is refused before it is parsed. */
#define LOCKFMT_MAX_FILE (64 << 20)
#define LOCKFMT_HEX 64

/* One entry, its strings borrowed from the document. */
struct lockfmt_entry {
    const json_t *j;
    const char *id, *arch, *kernel, *key, *fp, *config;
};

/* A loaded lockfile: the document and its entries. */
struct lockfmt {
    json_t *doc;
    const char *sha256, *ns; /* borrowed from doc */
    struct lockfmt_entry *e;
    size_t n;
};

/* 1 when s is 64 lowercase hex digits (a SHA-256), else 0. */
int lockfmt_is_hex64(const char *s);

/* SHA-256 of p[0..n) as lowercase hex into out (65 bytes). */
void lockfmt_sha256_hex(const void *p, size_t n, char out[LOCKFMT_HEX + 1]);

/* The content hash of doc (borrowed) into out. 0, or DETD_ENOMEM. */
int lockfmt_hash(const json_t *doc, char out[LOCKFMT_HEX + 1]);

/* The decision id of a key (daemon/core/keyid.h: the same bytes hashed)
 * into out; "" when out of memory. */
void lockfmt_key_id(const char *ns, const char *arch, const char *kernel,
                    const char *key, const char *fp, char out[LOCKFMT_HEX + 1]);

/*
 * Read and check the lockfile at path: at most LOCKFMT_MAX_FILE bytes,
 * JSON, kind and format, the content hash, each entry's fields (id, arch,
 * kernel, config and a 64-hex candidates_fp present, n_candidates 1 to
 * DETD_MAX_CANDIDATES) and its id. Returns 0 with *ret (lockfmt_free()),
 * or DETD_EINVAL with why (len bytes) naming what is wrong (the field, or
 * both hashes), -errno when the file cannot be read (why says so), or
 * DETD_ENOMEM.
 */
int lockfmt_load(const char *path, struct lockfmt **ret, char *why, size_t len);
void lockfmt_free(struct lockfmt *l);

/* An entry as a Decision message (source import), in storage of its own;
 * its strings are borrowed from the document. */
struct lockfmt_msg {
    Detd__V1__Decision d;
    Detd__V1__ClientIdentity by;
    Detd__V1__PeerIdentity peer;
    Detd__V1__TimingProvenance timing; /* d.timing when the entry says it */
    Detd__V1__CandidateTiming *t;
    Detd__V1__CandidateTiming **tp;
    double *ms;
};

/* Fill *m from e (zeroed first). 0, or DETD_ENOMEM (clear *m then too). */
int lockfmt_msg_fill(const struct lockfmt_entry *e, struct lockfmt_msg *m);
void lockfmt_msg_clear(struct lockfmt_msg *m);

#endif /* DETD_LOCKFMT_H */
