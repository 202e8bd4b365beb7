/*
 * detctl_verify: `detctl verify`. The daemon's Verify (divergences across
 * ranks and against the decisions) plus, from the namespace's observations
 * and decisions, what a run must not pass with: fallback launches (source
 * FALLBACK), a decided config whose timing failed, fewer ranks than
 * --expect-ranks, and nothing checked at all (unless --allow-empty).
 * --job restricts everything to one job label (checked here, from the
 * observations). The result is one JSON document (kind VerifyReport,
 * docs/detctl-json.md) that the text view, -o json, --report and --junit
 * are all written from.
 */
#ifndef DETD_DETCTL_VERIFY_H
#define DETD_DETCTL_VERIFY_H

#include "detctl_cli.h"

struct wire_channel;

/* Run verify with o through ch. Returns the exit status: 0 every check
 * passed, 1 a check failed, else the failure's status (detctl_exit.h). */
int detctl_verify_run(const struct detctl_opts *o, struct wire_channel *ch);

#endif /* DETD_DETCTL_VERIFY_H */
