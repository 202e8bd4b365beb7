/*
 * engine_winner: the winner rule of a timing pass (see engine.h). Pure:
 * no engine state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "detd/error.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * Median of samples into *ret: 0, 1 (not usable: a NaN sample) or
 * DETD_ENOMEM. Small sample sets are sorted on the stack.
 */
static int median_of(const double *ms, size_t n, double *ret) {
    double small[64], *v = small;
    for (size_t i = 0; i < n; i++)
        if (isnan(ms[i]))
            return 1;
    if (n > sizeof(small) / sizeof(small[0])) {
        v = malloc(n * sizeof(*v));
        if (v == NULL)
            return DETD_ENOMEM;
    }
    memcpy(v, ms, n * sizeof(*v));
    qsort(v, n, sizeof(*v), cmp_double);
    /* Halves first: the sum of two finite samples may overflow. */
    *ret = n % 2 == 1 ? v[n / 2] : v[n / 2 - 1] / 2 + v[n / 2] / 2;
    if (v != small)
        free(v);
    return 0;
}

static int config_allowed(const char *config, const char *const *allowed,
                          size_t n_allowed) {
    if (allowed == NULL)
        return 1;
    for (size_t i = 0; i < n_allowed; i++)
        if (allowed[i] != NULL && strcmp(allowed[i], config) == 0)
            return 1;
    return 0;
}

/* See engine.h. All inputs are borrowed for the call. */
int engine_pick_winner(const struct engine_timing *timings, size_t n,
                       const char *const *allowed, size_t n_allowed) {
    if ((timings == NULL && n > 0) || n > (size_t)INT32_MAX ||
        (allowed == NULL && n_allowed > 0))
        return DETD_EINVAL;
    double small[64], *score = small;
    if (n > sizeof(small) / sizeof(small[0])) {
        score = malloc(n * sizeof(*score));
        if (score == NULL)
            return DETD_ENOMEM;
    }
    /* First the best score; then, of the candidates within epsilon of it,
     * the smallest config string: a difference inside the noise band
     * never decides, so noise cannot turn a pass towards a slower config
     * by more than epsilon, and the same timings always give the same
     * winner. */
    int rc = 0;
    double best_score = INFINITY;
    for (size_t i = 0; i < n; i++) {
        const struct engine_timing *t = &timings[i];
        score[i] = NAN;
        if (t->config == NULL || t->failed || t->n_ms == 0 || t->ms == NULL)
            continue;
        if (!config_allowed(t->config, allowed, n_allowed))
            continue;
        double sc;
        int mr = median_of(t->ms, t->n_ms, &sc);
        if (mr < 0) {
            rc = mr;
            goto out;
        }
        if (mr > 0 || !isfinite(sc) || sc < 0)
            continue;
        score[i] = sc;
        if (sc < best_score)
            best_score = sc;
    }
    rc = DETD_ENOCAND;
    if (!isfinite(best_score))
        goto out;
    double bound = best_score + best_score * ENGINE_WINNER_EPSILON;
    for (size_t i = 0; i < n; i++) {
        if (isnan(score[i]) || score[i] > bound)
            continue;
        if (rc < 0 || strcmp(timings[i].config, timings[rc].config) < 0)
            rc = (int)i;
    }
out:
    if (score != small)
        free(score);
    return rc;
}
