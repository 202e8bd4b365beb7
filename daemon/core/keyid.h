/*
 * keyid: decision identity. Pure functions, no I/O.
 *
 * candidates_fp = hex SHA-256 of the candidate config strings, sorted by
 * strcmp, de-duplicated, each followed by '\n'.
 * id = hex SHA-256 of "detd-key-v1\n" + namespace + '\0' + arch + '\0' +
 *      kernel + '\0' + key + '\0' + candidates_fp.
 */
#ifndef DETD_KEYID_H
#define DETD_KEYID_H

#include <stddef.h>
#include <stdint.h>

#define KEYID_HEX_LEN 64

/* A digest in progress: room for libcrypto's SHA256_CTX on the caller's
 * stack (keyid.c checks the size), so this header needs no OpenSSL. */
struct sha256_ctx {
    uint64_t state[16];
};
/*
 * Streaming SHA-256 (FIPS 180-2, libcrypto): init, update any number of
 * times (data may be NULL when n is 0), final. After final, init before
 * reuse. None of them allocates or fails.
 */
void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *data, size_t n);
void sha256_final(struct sha256_ctx *c, uint8_t out[32]);
/* Lowercase hex digest of data into out (65 bytes incl. NUL). */
void sha256_hex(const void *data, size_t n, char out[KEYID_HEX_LEN + 1]);

/*
 * Fingerprint of a candidate set into ret_hex (65 bytes). Order and
 * duplicates in candidates do not matter; an empty set is valid.
 * candidates are borrowed for the call. Returns 0, DETD_EINVAL (NULL
 * array with n > 0, a NULL entry, NULL ret_hex) or DETD_ENOMEM; on error
 * ret_hex is untouched.
 */
int keyid_candidates_fp(const char *const *candidates, size_t n,
                        char ret_hex[KEYID_HEX_LEN + 1]);

/*
 * 1 when config is one of cands[0..n), else 0; with cands NULL (no set
 * to check against) every config is: 1. strcmp, so exact bytes. A search
 * descriptor (core/search.h) is never a config: 0. All borrowed for the
 * call.
 */
int keyid_has_candidate(const char *config, const char *const *cands, size_t n);

/*
 * Decision id into ret_hex (65 bytes). All strings are borrowed for the
 * call and must not be NULL. Never fails.
 */
void keyid_decision_id(const char *ns, const char *arch, const char *kernel,
                       const char *key, const char *candidates_fp,
                       char ret_hex[KEYID_HEX_LEN + 1]);

#endif /* DETD_KEYID_H */
