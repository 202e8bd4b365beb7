/*
 * keyid: decision identity over libcrypto's SHA-256 (FIPS 180-2; the
 * library gRPC already loads). The digest is a standard, so the id of a
 * decision is the same on every node and across releases whatever the
 * library's version; tests/unit/test_keyid.c pins the FIPS vectors and the
 * ids of known keys.
 *
 * The streaming SHA256_* functions are used although OpenSSL 3 marks them
 * deprecated in favour of EVP: they keep the context on the caller's stack
 * and never allocate, so a digest cannot fail and the Decide path never has
 * an error to handle here (EVP_MD_CTX_new() and EVP_Digest() allocate).
 */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include "core/keyid.h"

#include <assert.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "core/search.h"
#include "detd/error.h"

static_assert(sizeof(SHA256_CTX) <= sizeof(struct sha256_ctx),
              "struct sha256_ctx cannot hold SHA256_CTX");
static_assert(alignof(SHA256_CTX) <= alignof(struct sha256_ctx),
              "struct sha256_ctx is not aligned for SHA256_CTX");

static SHA256_CTX *sha(struct sha256_ctx *c) {
    return (SHA256_CTX *)(void *)c->state;
}

/* See keyid.h. */
void sha256_init(struct sha256_ctx *c) {
    SHA256_Init(sha(c));
}

/* See keyid.h. */
void sha256_update(struct sha256_ctx *c, const void *data, size_t n) {
    if (n > 0)
        SHA256_Update(sha(c), data, n);
}

/* See keyid.h. */
void sha256_final(struct sha256_ctx *c, uint8_t out[32]) {
    SHA256_Final(out, sha(c));
}

static void hex_digest(struct sha256_ctx *c, char out[KEYID_HEX_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    uint8_t d[32];
    sha256_final(c, d);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[KEYID_HEX_LEN] = '\0';
}

/* Lowercase hex SHA-256 of data into out. */
void sha256_hex(const void *data, size_t n, char out[KEYID_HEX_LEN + 1]) {
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, data, n);
    hex_digest(&c, out);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Fingerprint of a candidate set. candidates are borrowed for the call.
 * Sorting a copy of the pointers makes the result independent of the
 * order the client listed them in.
 */
int keyid_candidates_fp(const char *const *candidates, size_t n,
                        char ret_hex[KEYID_HEX_LEN + 1]) {
    if ((candidates == NULL && n > 0) || ret_hex == NULL)
        return DETD_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (candidates[i] == NULL)
            return DETD_EINVAL;
    const char **sorted = NULL;
    if (n > 0) {
        sorted = malloc(n * sizeof(*sorted));
        if (sorted == NULL)
            return DETD_ENOMEM;
        memcpy(sorted, candidates, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), cmp_str);
    }
    struct sha256_ctx c;
    sha256_init(&c);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(sorted[i - 1], sorted[i]) == 0)
            continue;
        sha256_update(&c, sorted[i], strlen(sorted[i]));
        sha256_update(&c, "\n", 1);
    }
    hex_digest(&c, ret_hex);
    free(sorted);
    return 0;
}

/* See keyid.h. */
int keyid_has_candidate(const char *config, const char *const *cands,
                        size_t n) {
    if (search_is_descriptor(config))
        return 0;
    if (cands == NULL)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(cands[i], config) == 0)
            return 1;
    return 0;
}

/* Decision id; all strings borrowed for the call, none may be NULL. */
void keyid_decision_id(const char *ns, const char *arch, const char *kernel,
                       const char *key, const char *candidates_fp,
                       char ret_hex[KEYID_HEX_LEN + 1]) {
    static const char tag[] = "detd-key-v1\n";
    const char *parts[5] = {ns, arch, kernel, key, candidates_fp};
    struct sha256_ctx c;
    assert(ret_hex != NULL);
    sha256_init(&c);
    sha256_update(&c, tag, sizeof(tag) - 1);
    for (int i = 0; i < 5; i++) {
        assert(parts[i] != NULL);
        if (i > 0)
            sha256_update(&c, "", 1);
        sha256_update(&c, parts[i], strlen(parts[i]));
    }
    hex_digest(&c, ret_hex);
}
