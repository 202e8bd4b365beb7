/*
 * verify: cross-rank agreement check over Observe reports. Pure logic.
 *
 * Feed observations grouped by decision id (all rows of one id
 * contiguous), each with the committed config for that id (NULL when the
 * key has no decision). A key diverges when its governed observations
 * name more than one config, or when one of them differs from the
 * decision. Ungoverned observations (autotuners outside the scope) are
 * counted but never make the check fail.
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
};

struct verify_client {
    char *host;
    int32_t pid;
    int32_t rank;
    int32_t local_rank;
};

struct verify_use {
    char *config;
    struct verify_client *clients;
    size_t n_clients;
    int chaos; /* at least one of these clients ran in chaos mode */
};

struct verify_divergence {
    char *id;
    char *kernel;
    char *key;
    char *arch;
    char *decided; /* NULL: no decision */
    struct verify_use *uses; /* sorted by config */
    size_t n_uses;
    char *reason;  /* "ranks disagree", "differs from decision", ... */
};

struct verify_result {
    uint64_t keys_checked;
    uint64_t observations;
    uint64_t ungoverned;
    struct verify_divergence *divergences;
    size_t n_divergences;
};

typedef struct verifier verifier;

/* Returns 0 or DETD_ENOMEM; *ret owns the verifier (verify_free()). */
int verify_new(verifier **ret);

/*
 * Add one observation; decided is the committed config for o->id or
 * NULL. Rows of one id must be contiguous. Copies what it keeps.
 * Returns 0, DETD_EINVAL (ids out of order) or DETD_ENOMEM.
 */
int verify_add(verifier *v, const struct verify_obs *o, const char *decided);

/*
 * Finish and move the result into *ret (free with verify_result_clear()).
 * The verifier may then only be freed.
 */
int verify_finish(verifier *v, struct verify_result *ret);

void verify_result_clear(struct verify_result *r);
void verify_free(verifier *v);

#endif /* DETD_VERIFY_H */
