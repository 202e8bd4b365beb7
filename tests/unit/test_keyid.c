/*
 * keyid: SHA-256 against the FIPS 180-2 vectors, and the decision
 * identity (candidate fingerprint, decision id) against digests computed
 * independently of this code.
 */
#include "core/keyid.h"

#include <stdint.h>
#include <string.h>

#include "detd/error.h"
#include "runner.h"

#include "failalloc.h"

static const char vec_empty[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char vec_abc[] =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char msg_448[] =
    "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
static const char vec_448[] =
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
static const char vec_million_a[] =
    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

static void hex_of_ctx(struct sha256_ctx *c, char out[KEYID_HEX_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    uint8_t d[32];
    sha256_final(c, d);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = '\0';
}

TEST(sha256_empty) {
    char hex[KEYID_HEX_LEN + 1];
    sha256_hex("", 0, hex);
    CHECK_STR(hex, vec_empty);
    sha256_hex(NULL, 0, hex);
    CHECK_STR(hex, vec_empty);
}

TEST(sha256_abc) {
    char hex[KEYID_HEX_LEN + 1];
    sha256_hex("abc", 3, hex);
    CHECK_STR(hex, vec_abc);
}

TEST(sha256_448_bits) {
    char hex[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(strlen(msg_448), 56);
    sha256_hex(msg_448, strlen(msg_448), hex);
    CHECK_STR(hex, vec_448);
}

TEST(sha256_million_a_one_call) {
    static char buf[1000000];
    char hex[KEYID_HEX_LEN + 1];
    memset(buf, 'a', sizeof(buf));
    sha256_hex(buf, sizeof(buf), hex);
    CHECK_STR(hex, vec_million_a);
}

/* Uneven chunk sizes cross every buffer boundary case in update. */
TEST(sha256_million_a_chunked) {
    static char buf[1000];
    char hex[KEYID_HEX_LEN + 1];
    memset(buf, 'a', sizeof(buf));
    struct sha256_ctx c;
    sha256_init(&c);
    size_t left = 1000000, step = 1;
    while (left > 0) {
        size_t n = step < left ? step : left;
        sha256_update(&c, buf, n);
        left -= n;
        step = step % 997 + 1;
    }
    hex_of_ctx(&c, hex);
    CHECK_STR(hex, vec_million_a);
}

TEST(sha256_streaming_equals_one_shot) {
    char one[KEYID_HEX_LEN + 1], split[KEYID_HEX_LEN + 1];
    sha256_hex(msg_448, 56, one);
    for (size_t cut = 0; cut <= 56; cut++) {
        struct sha256_ctx c;
        sha256_init(&c);
        sha256_update(&c, msg_448, cut);
        sha256_update(&c, NULL, 0);
        sha256_update(&c, msg_448 + cut, 56 - cut);
        hex_of_ctx(&c, split);
        CHECK_STR(split, one);
    }
}

/* Lengths around the padding boundary (55, 56, 64 bytes). */
TEST(sha256_padding_boundaries) {
    char a[64], hex[KEYID_HEX_LEN + 1];
    memset(a, 'a', sizeof(a));
    sha256_hex(a, 55, hex);
    CHECK_STR(hex, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e91"
                   "0f734318");
    sha256_hex(a, 56, hex);
    CHECK_STR(hex, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef797068"
                   "6ec6738a");
    sha256_hex(a, 64, hex);
    CHECK_STR(hex, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df"
                   "154668eb");
}

/* sha256("BLOCK=1024,num_warps=4\nBLOCK=512,num_warps=8\n") */
static const char fp_two[] =
    "8b2b9f0684c6c1246260bb0fb26ee373b3ac8c18ff940b2244d019b107dfb5ca";

TEST(candidates_fp_known_value) {
    const char *c[] = {"BLOCK=1024,num_warps=4", "BLOCK=512,num_warps=8"};
    char hex[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(keyid_candidates_fp(c, 2, hex), 0);
    CHECK_STR(hex, fp_two);
}

TEST(candidates_fp_order_insensitive) {
    const char *a[] = {"BLOCK=512,num_warps=8", "BLOCK=1024,num_warps=4"};
    char hex[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(keyid_candidates_fp(a, 2, hex), 0);
    CHECK_STR(hex, fp_two);
}

TEST(candidates_fp_duplicates_ignored) {
    const char *a[] = {"BLOCK=512,num_warps=8", "BLOCK=1024,num_warps=4",
                       "BLOCK=512,num_warps=8", "BLOCK=1024,num_warps=4",
                       "BLOCK=512,num_warps=8"};
    char hex[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(keyid_candidates_fp(a, 5, hex), 0);
    CHECK_STR(hex, fp_two);
}

TEST(candidates_fp_single_and_empty) {
    const char *one[] = {"BLOCK=1024,num_warps=4"};
    char hex[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(keyid_candidates_fp(one, 1, hex), 0);
    CHECK_STR(hex, "aa598e766082620d8ace8ca9fd18c9c015723d72066906ca047a7baf"
                   "628287e2");
    CHECK_EQ_INT(keyid_candidates_fp(NULL, 0, hex), 0);
    CHECK_STR(hex, vec_empty);
}

/* Sorting is by strcmp (bytes), not by locale or numeric value. */
TEST(candidates_fp_sorted_by_strcmp) {
    const char *a[] = {"b", "B", "a", "10", "9"};
    const char *sorted[] = {"10", "9", "B", "a", "b"};
    char h1[KEYID_HEX_LEN + 1], h2[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(keyid_candidates_fp(a, 5, h1), 0);
    sha256_hex("10\n9\nB\na\nb\n", strlen("10\n9\nB\na\nb\n"), h2);
    CHECK_STR(h1, h2);
    CHECK_EQ_INT(keyid_candidates_fp(sorted, 5, h2), 0);
    CHECK_STR(h1, h2);
}

TEST(candidates_fp_different_sets_differ) {
    const char *a[] = {"x", "y"};
    const char *b[] = {"x", "y", "z"};
    const char *c[] = {"xy"};
    char ha[KEYID_HEX_LEN + 1], hb[KEYID_HEX_LEN + 1], hc[KEYID_HEX_LEN + 1];
    CHECK_EQ_INT(keyid_candidates_fp(a, 2, ha), 0);
    CHECK_EQ_INT(keyid_candidates_fp(b, 3, hb), 0);
    CHECK_EQ_INT(keyid_candidates_fp(c, 1, hc), 0);
    CHECK(strcmp(ha, hb) != 0);
    CHECK(strcmp(ha, hc) != 0);
}

TEST(candidates_fp_invalid) {
    const char *a[] = {"x", NULL};
    char hex[KEYID_HEX_LEN + 1] = "untouched";
    CHECK_EQ_INT(keyid_candidates_fp(NULL, 1, hex), DETD_EINVAL);
    CHECK_EQ_INT(keyid_candidates_fp(a, 2, hex), DETD_EINVAL);
    CHECK_STR(hex, "untouched");
    CHECK_EQ_INT(keyid_candidates_fp(a, 1, NULL), DETD_EINVAL);
}

TEST(decision_id_known_value) {
    char hex[KEYID_HEX_LEN + 1];
    keyid_decision_id("ns", "sm90", "mod:fn@abc", "(i32:4096,)", fp_two, hex);
    CHECK_STR(hex, "72975c3d486db4a7a7aea0246c96d07f5a9aae2cf1d25abb3f229957"
                   "8d723336");
}

TEST(decision_id_matches_spelled_out_preimage) {
    static const char pre[] = "detd-key-v1\nns\0sm90\0k\0key\0fp";
    char h1[KEYID_HEX_LEN + 1], h2[KEYID_HEX_LEN + 1];
    keyid_decision_id("ns", "sm90", "k", "key", "fp", h1);
    sha256_hex(pre, sizeof(pre) - 1, h2);
    CHECK_STR(h1, h2);
}

/* The NUL separators keep field boundaries: "ab"+"c" != "a"+"bc". */
TEST(decision_id_fields_do_not_run_together) {
    char h1[KEYID_HEX_LEN + 1], h2[KEYID_HEX_LEN + 1];
    keyid_decision_id("ns", "sm90", "ab", "c", "fp", h1);
    keyid_decision_id("ns", "sm90", "a", "bc", "fp", h2);
    CHECK(strcmp(h1, h2) != 0);
    keyid_decision_id("", "sm90", "k", "key", "fp", h1);
    keyid_decision_id("ns", "sm90", "k", "key", "fp", h2);
    CHECK(strcmp(h1, h2) != 0);
    keyid_decision_id("ns", "sm80", "k", "key", "fp", h1);
    CHECK(strcmp(h1, h2) != 0);
    keyid_decision_id("ns", "sm90", "k", "key", "fq", h1);
    CHECK(strcmp(h1, h2) != 0);
    keyid_decision_id("ns", "sm90", "k", "key", "fp", h1);
    CHECK_STR(h1, h2);
    CHECK_EQ_INT(strlen(h1), KEYID_HEX_LEN);
}

TEST(candidates_fp_alloc_failure) {
    check_wrapped();
    const char *c[] = {"BLOCK=512,num_warps=8", "BLOCK=1024,num_warps=4"};
    char hex[KEYID_HEX_LEN + 1] = "untouched";
    fail_at = 1;
    CHECK_EQ_INT(keyid_candidates_fp(c, 2, hex), DETD_ENOMEM);
    CHECK_EQ_INT(fail_at, 0);
    CHECK_STR(hex, "untouched");
    CHECK_EQ_INT(keyid_candidates_fp(c, 2, hex), 0);
    CHECK_STR(hex, fp_two);
}

/* Exact bytes; no list (NULL) admits every config, an empty one none. */
TEST(has_candidate) {
    const char *c[] = {"BLOCK=64,num_warps=4", "BLOCK=128,num_warps=4"};
    CHECK_EQ_INT(keyid_has_candidate("BLOCK=128,num_warps=4", c, 2), 1);
    CHECK_EQ_INT(keyid_has_candidate("BLOCK=64,num_warps=4", c, 2), 1);
    CHECK_EQ_INT(keyid_has_candidate("BLOCK=64,num_warps=4 ", c, 2), 0);
    CHECK_EQ_INT(keyid_has_candidate("BLOCK=64", c, 2), 0);
    CHECK_EQ_INT(keyid_has_candidate("BLOCK=128,num_warps=4", c, 1), 0);
    CHECK_EQ_INT(keyid_has_candidate("BLOCK=64,num_warps=4", c, 0), 0);
    CHECK_EQ_INT(keyid_has_candidate("anything", NULL, 0), 1);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
