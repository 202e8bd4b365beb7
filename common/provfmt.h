/*
 * provfmt: how a timing pass measured (detd.v1.TimingProvenance), as the
 * daemon checks it, stores it (a JSON object in a decision's row) and a
 * lockfile carries it (members of an entry's "provenance", docs/
 * lockfile.md); and the lock policy's fields a run can require to match.
 * Shared by detd and detctl.
 */
#ifndef DETD_PROVFMT_H
#define DETD_PROVFMT_H

#include <stddef.h>

#include <jansson.h>

#include "detd.pb-c.h"

/* The longest string member, and the largest warmup or rep. */
#define PROVFMT_MAX_STRING 256
#define PROVFMT_MAX_NUMBER 1e9
/* At most this many requirements in one import. */
#define PROVFMT_MAX_REQUIRE 8

/*
 * Check t (NULL: nothing said, fine): every string at most
 * PROVFMT_MAX_STRING bytes without a newline, warmup and rep finite and
 * 0 to PROVFMT_MAX_NUMBER. Returns 0, or -1 with why (len bytes) naming
 * the field as "<prefix>.<field>".
 */
int provfmt_check(const Detd__V1__TimingProvenance *t, const char *prefix,
                  char *why, size_t len);

/*
 * Set t's members in obj (a JSON object, borrowed): "torch_version",
 * "cuda_version", "driver", "package", "package_version" (strings, null
 * when t is NULL or the string empty) and "benchmarker" (an object of
 * name, warmup, rep, return_mode, cuda_graphs, timing_lock; null when t
 * is NULL or names no benchmarker). Returns 0, or -1 when out of memory.
 */
int provfmt_put(json_t *obj, const Detd__V1__TimingProvenance *t);

/*
 * Read those members of obj (borrowed; NULL or not an object: none) into
 * *ret (initialized here), its strings borrowed from obj. Returns 1 when
 * obj says anything, else 0 (*ret then empty).
 */
int provfmt_get(const json_t *obj, Detd__V1__TimingProvenance *ret);

/* t as the compact JSON object provfmt_put() makes (heap; NULL when out
 * of memory). */
char *provfmt_json(const Detd__V1__TimingProvenance *t);

/*
 * The value decision d records for a requirable field ("triton_version",
 * "torch_version", "cuda_version", "driver"; "" when not recorded), or
 * NULL for a field the lock policy does not know.
 */
const char *provfmt_field(const Detd__V1__Decision *d, const char *field);

#endif /* DETD_PROVFMT_H */
