/*
 * verify: cross-rank agreement check over Observe reports. Pure logic.
 *
 * Feed observations grouped by decision id (all rows of one id
 * contiguous), each with the committed config for that id (NULL when the
 * key has no decision). A key diverges when its governed observations
 * name more than one config, or when one of them differs from the
 * decision. Ungoverned observations (autotuners outside the scope) are
 * counted but never make the check fail, and are not listed in uses;
 * except those of a tuner detd cannot govern (must_agree: source
 * ungoverned), whose configs must agree as the governed ones must.
 */
#ifndef DETD_VERIFY_H
#define DETD_VERIFY_H

#include <stddef.h>
#include <stdint.h>

struct verify_obs {
    const char *id;
    const char *kernel;
    const char *key;
    const char *arch;
    const char *config;
    const char *host;
    int32_t pid;
    int32_t rank;
    int32_t local_rank;
    int governed;
    int chaos;
    /* Not governed, yet checked for agreement (a tuner detd cannot
     * govern: DETD_SOURCE_UNGOVERNED); counted as ungoverned too. */
    int must_agree;
};

struct verify_client {
    char *host;
    int32_t pid;
    int32_t rank;
    int32_t local_rank;
};

struct verify_use {
    char *config;
    /* Sorted by host, rank, pid (then local_rank); a client observed
     * more than once is listed once. */
    struct verify_client *clients;
    size_t n_clients;
    int chaos; /* at least one of these clients ran in chaos mode */
};

struct verify_divergence {
    char *id;
    char *kernel;
    char *key;
    char *arch;
    char *decided;           /* NULL: no decision */
    struct verify_use *uses; /* governed (and must-agree) uses, by config */
    size_t n_uses;
    /* "ranks disagree" (more than one config used), else "differs from
     * decision" (the one config used is not the decided one). */
    char *reason;
};

struct verify_result {
    uint64_t keys_checked; /* distinct ids fed */
    uint64_t observations; /* all rows, ungoverned included */
    uint64_t ungoverned;
    struct verify_divergence *divergences;
    size_t n_divergences;
};

typedef struct verifier verifier;

/*
 * Create a verifier. Returns 0, DETD_EINVAL (NULL ret) or DETD_ENOMEM;
 * *ret owns the verifier (verify_free()).
 */
int verify_new(verifier **ret);

/*
 * Add one observation; decided is the committed config for o->id or
 * NULL, the same for every row of that id. Rows of one id must be
 * contiguous. o->id and o->config are required; NULL kernel, key, arch
 * or host read as "". Borrows o and decided for the call, copies what it
 * keeps. Returns 0, DETD_EINVAL (NULL argument, an id seen before another
 * one, decided changing within an id, after verify_finish) or
 * DETD_ENOMEM (the observation is not counted; the call may be retried).
 */
int verify_add(verifier *v, const struct verify_obs *o, const char *decided);

/*
 * Finish and move the result into *ret (free with verify_result_clear()).
 * The verifier may then only be freed. Divergences come in the order
 * their ids were fed. Returns 0, DETD_EINVAL (NULL argument, finished
 * already) or DETD_ENOMEM (*ret untouched; the call may be retried).
 */
int verify_finish(verifier *v, struct verify_result *ret);

/* Free everything r owns and zero it. NULL is a no-op. */
void verify_result_clear(struct verify_result *r);

/* Free the verifier and anything it still holds. NULL is a no-op. */
void verify_free(verifier *v);

#endif /* DETD_VERIFY_H */
