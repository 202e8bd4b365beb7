/*
 * keyid: SHA-256 (FIPS 180-2) and decision identity.
 *
 * The digest is self-contained on purpose: the id of a decision must be
 * the same on every node and across releases, so it depends on no
 * library's version or build options.
 */
#include "core/keyid.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, unsigned n) {
    return (x >> n) | (x << (32 - n));
}

static void sha256_block(struct sha256_ctx *c, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 =
            ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 =
            ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
    uint32_t e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t s1 = ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + s1 + ch + sha256_k[i] + w[i];
        uint32_t s0 = ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22);
        uint32_t maj = (a & b) ^ (a & cc) ^ (b & cc);
        uint32_t t2 = s0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = cc;
        cc = b;
        b = a;
        a = t1 + t2;
    }
    c->h[0] += a;
    c->h[1] += b;
    c->h[2] += cc;
    c->h[3] += d;
    c->h[4] += e;
    c->h[5] += f;
    c->h[6] += g;
    c->h[7] += h;
}

/* Start a digest. */
void sha256_init(struct sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                   0xa54ff53a, 0x510e527f, 0x9b05688c,
                                   0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof(iv));
    c->len = 0;
    c->n = 0;
}

/* Feed n bytes of data (borrowed for the call only; NULL allowed if n 0). */
void sha256_update(struct sha256_ctx *c, const void *data, size_t n) {
    const uint8_t *p = data;
    if (n == 0)
        return;
    c->len += (uint64_t)n;
    if (c->n > 0) {
        size_t take = 64 - c->n < n ? 64 - c->n : n;
        memcpy(c->buf + c->n, p, take);
        c->n += take;
        p += take;
        n -= take;
        if (c->n < 64)
            return;
        sha256_block(c, c->buf);
        c->n = 0;
    }
    for (; n >= 64; n -= 64, p += 64)
        sha256_block(c, p);
    if (n > 0) {
        memcpy(c->buf, p, n);
        c->n = n;
    }
}

/* Finish the digest into out; c must be re-initialized to be reused. */
void sha256_final(struct sha256_ctx *c, uint8_t out[32]) {
    uint64_t bits = c->len * 8;
    c->buf[c->n++] = 0x80;
    if (c->n > 56) {
        memset(c->buf + c->n, 0, 64 - c->n);
        sha256_block(c, c->buf);
        c->n = 0;
    }
    memset(c->buf + c->n, 0, 56 - c->n);
    for (int i = 0; i < 8; i++)
        c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_block(c, c->buf);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
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
