/*
 * decision: see decision.h.
 */
#include "core/decision.h"

#include <stdlib.h>
#include <string.h>

/* See decision.h. */
void decision_clear(struct decision *d) {
    if (d == NULL)
        return;
    char **s[] = {&d->id,
                  &d->ns,
                  &d->arch,
                  &d->kernel,
                  &d->key,
                  &d->candidates_fp,
                  &d->config,
                  &d->by_host,
                  &d->by_device,
                  &d->by_arch,
                  &d->triton_version,
                  &d->timings_json,
                  &d->table_file};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        free(*s[i]);
    memset(d, 0, sizeof *d);
}
