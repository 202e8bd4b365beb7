/*
 * detctl_tuners: the autotuners `detctl verify` lists, one per kernel
 * observed, by kind (triton, inductor, native, helion, timing; see
 * docs/operating.md), governed or not, with why; and which of them
 * --require-governed fails on (cannot_govern): each tuner detd could not govern
 * (an Autotuner subclass that bypasses Autotuner.run: source UNGOVERNED; a call
 * site timing candidates itself: kind timing), never one left out on purpose
 * (scope, exempt: source LOCAL).
 */
#ifndef DETD_DETCTL_TUNERS_H
#define DETD_DETCTL_TUNERS_H

#include <jansson.h>

#include "detd.pb-c.h"

/* The autotuner kind of a kernel id. */
const char *detctl_tuner_kind(const char *kernel);

/* Note observation x's tuner in tuners (a JSON object, kernel -> {kernel,
 * kind, governed, ungoverned, cannot_govern, keys, why}). */
void detctl_tuners_add(json_t *tuners, const Detd__V1__Observation *x);

/* Print doc's "autotuners: ..." line (kinds side by side) and one
 * UNGOVERNED line per ungoverned tuner; doc holds strings escaped for the
 * terminal (detctl_print_json_escaped()). */
void detctl_tuners_print(const json_t *doc);

#endif
