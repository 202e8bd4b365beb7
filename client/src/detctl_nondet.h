/*
 * detctl_nondet: what `detctl verify` lists beside the configs' agreement:
 * the runtime findings processes observed (source RUNTIME, see
 * proto/detd.proto): ops torch names nondeterministic, the attention
 * (SDPA) backend chosen, and settings that decide determinism
 * (docs/determinism.md). Each finding is grouped by (kind, name) with the
 * ranks that reported each value; one is nondeterministic when a process
 * said why (its observation's why) or when ranks report different values.
 */
#ifndef DETD_DETCTL_NONDET_H
#define DETD_DETCTL_NONDET_H

#include <jansson.h>

#include "detd.pb-c.h"

/* Whether x is a runtime finding rather than a config choice. */
int detctl_nondet_is(const Detd__V1__Observation *x);

/*
 * Add the finding x to acc (a JSON object detctl_nondet_add() owns the
 * layout of; start from json_object()). Returns 0, or -1 when out of
 * memory.
 */
int detctl_nondet_add(json_t *acc, const Detd__V1__Observation *x);

/*
 * The verify document's "runtime" array from acc (a new reference; NULL
 * when out of memory): one entry per (kind, name), sorted, each {kind,
 * name, why, nondeterministic, differs, values: [{value, ranks, who}],
 * ranks, message}. *ret_n: how many are nondeterministic. With strict,
 * each of those is also appended to failures as {kind "nondeterminism",
 * message}.
 */
json_t *detctl_nondet_json(json_t *acc, int strict, json_t *failures,
                           size_t *ret_n);

/*
 * Print doc's runtime findings for `detctl verify` (text): the line
 * "configs agree (N keys); ..." or "nondeterminism no config fixes:",
 * then one NONDET line per finding; nothing when there is none. doc holds
 * strings escaped for the terminal (detctl_print_json_escaped()).
 */
void detctl_nondet_print(const json_t *doc);

/* Print ", N nondeterministic (...)" for verify's summary line; nothing
 * when doc has no nondeterministic finding. */
void detctl_nondet_print_count(const json_t *doc);

#endif
