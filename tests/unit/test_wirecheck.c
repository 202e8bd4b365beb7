/*
 * Unit tests of daemon/core/wirecheck.c: the UTF-8 rule class by class,
 * the field paths through nested and repeated fields of the real request
 * descriptors, and malformed bytes (every prefix, every byte flipped)
 * checked against protobuf-c's own decoder.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/wirecheck.h"
#include "detd.pb-c.h"
#include "detd/error.h"
#include "runner.h"

/* ---- a tiny encoder for hand-made wire bytes ---- */

struct enc {
    uint8_t b[4096];
    size_t n;
};

static void put_varint(struct enc *e, uint64_t v) {
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        e->b[e->n++] = c | (v ? 0x80 : 0);
    } while (v);
}

static void put_bytes(struct enc *e, uint32_t field, const void *p, size_t n) {
    put_varint(e, (uint64_t)field << 3 | 2);
    put_varint(e, n);
    memcpy(e->b + e->n, p, n);
    e->n += n;
}

static void put_str(struct enc *e, uint32_t field, const char *s) {
    put_bytes(e, field, s, strlen(s));
}

static void put_uint(struct enc *e, uint32_t field, uint64_t v) {
    put_varint(e, (uint64_t)field << 3);
    put_varint(e, v);
}

static void put_sub(struct enc *e, uint32_t field, const struct enc *sub) {
    put_bytes(e, field, sub->b, sub->n);
}

static int check(const ProtobufCMessageDescriptor *d, const struct enc *e,
                 char *why, size_t why_len) {
    return wirecheck_message(d, e->b, e->n, why, why_len);
}

/* A DecideRequest with every string field set to a valid value, except
 * the one named by bad_field ("host", "kernel", "candidate1", ...), which
 * gets bad[0..bad_len). */
static void decide_request(struct enc *out, const char *bad_field,
                           const void *bad, size_t bad_len) {
    struct enc client = {0}, key = {0};
#define STR(e, f, name, val)                                                   \
    do {                                                                       \
        if (bad_field != NULL && strcmp(bad_field, name) == 0)                 \
            put_bytes(e, f, bad, bad_len);                                     \
        else                                                                   \
            put_str(e, f, val);                                                \
    } while (0)
    STR(&client, 1, "host", "gpu-3");
    put_uint(&client, 2, 4121);
    STR(&client, 6, "device_name", "NVIDIA H200");
    STR(&client, 7, "arch", "sm90");
    STR(&client, 9, "client_version", "0.1");
    STR(&client, 10, "job", "job \xc3\xa9t\xc3\xa9");
    STR(&key, 1, "namespace", "default");
    STR(&key, 2, "karch", "sm90");
    STR(&key, 3, "kernel", "kernels:row_sum@ab12");
    STR(&key, 4, "key", "(4096, 'torch.float32')");
    STR(&key, 5, "candidate0", "BLOCK=64,num_warps=4");
    STR(&key, 5, "candidate1", "BLOCK=128,num_warps=4");
    STR(&key, 5, "candidate2", "BLOCK=256,num_warps=8");
    STR(&key, 6, "table_key", "4096");
#undef STR
    memset(out, 0, sizeof(*out));
    put_uint(out, 1, 1);
    put_sub(out, 2, &client);
    put_uint(out, 3, 7);
    put_sub(out, 4, &key);
    put_uint(out, 6, 5000);
}

static const ProtobufCMessageDescriptor *decide_desc(void) {
    return &detd__v1__decide_request__descriptor;
}

/* ---- UTF-8 ---- */

static utf8_result utf8(const char *s, size_t n, size_t *off) {
    return utf8_check((const uint8_t *)s, n, off);
}

TEST(utf8_valid_multibyte) {
    static const char *ok[] = {
        "",
        "plain ascii ~\x7f",
        "\xc2\x80",         /* U+0080, the first 2-byte */
        "\xdf\xbf",         /* U+07FF */
        "\xe0\xa0\x80",     /* U+0800, the first 3-byte */
        "\xe2\x82\xac",     /* euro sign */
        "\xed\x9f\xbf",     /* U+D7FF, below the surrogates */
        "\xee\x80\x80",     /* U+E000, above them */
        "\xef\xbf\xbf",     /* U+FFFF */
        "\xf0\x90\x80\x80", /* U+10000, the first 4-byte */
        "\xf3\xbf\xbf\xbf", /* U+FFFFF */
        "\xf4\x8f\xbf\xbf", /* U+10FFFF, the last code point */
        "a\xc3\xa9"
        "b\xe6\x97\xa5"
        "c\xf0\x9f\x98\x80"
        "d", /* mixed */
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        size_t off = 99;
        CHECK_EQ_INT(utf8(ok[i], strlen(ok[i]), &off), UTF8_OK);
    }
    CHECK_EQ_INT(utf8_check(NULL, 0, NULL), UTF8_OK);
}

TEST(utf8_nul) {
    size_t off = 99;
    CHECK_EQ_INT(utf8("\0", 1, &off), UTF8_NUL);
    CHECK_EQ_INT(off, 0);
    CHECK_EQ_INT(utf8("k\0x", 3, &off), UTF8_NUL);
    CHECK_EQ_INT(off, 1);
    CHECK_EQ_INT(utf8("ab\0", 3, &off), UTF8_NUL);
    CHECK_EQ_INT(off, 2);
    /* An overlong NUL (C0 80, "modified UTF-8") is invalid, not a NUL. */
    CHECK_EQ_INT(utf8("a\xc0\x80", 3, &off), UTF8_INVALID);
    CHECK_EQ_INT(off, 1);
}

TEST(utf8_invalid_classes) {
    static const struct {
        const char *s;
        size_t off; /* where the bad sequence starts */
    } bad[] = {
        {"\x80", 0},                     /* lone continuation */
        {"a\xbf", 1},                    /* lone continuation */
        {"\xc0\xaf", 0},                 /* overlong '/' (2 bytes) */
        {"\xc1\xbf", 0},                 /* overlong U+007F */
        {"\xe0\x80\xaf", 0},             /* overlong '/' (3 bytes) */
        {"\xe0\x9f\xbf", 0},             /* overlong U+07FF */
        {"\xf0\x80\x80\xaf", 0},         /* overlong '/' (4 bytes) */
        {"\xf0\x8f\xbf\xbf", 0},         /* overlong U+FFFF */
        {"x\xed\xa0\x80", 1},            /* U+D800, first surrogate */
        {"\xed\xbf\xbf", 0},             /* U+DFFF, last surrogate */
        {"\xed\xa0\xbd\xed\xb8\x80", 0}, /* a CESU-8 surrogate pair */
        {"\xf4\x90\x80\x80", 0},         /* U+110000 */
        {"\xf5\x80\x80\x80", 0},         /* lead byte F5 */
        {"\xf8\x88\x80\x80\x80", 0},     /* 5-byte form */
        {"\xfc\x84\x80\x80\x80\x80", 0}, /* 6-byte form */
        {"\xfe", 0},
        {"\xff", 0},
        {"ab\xc3", 2},           /* truncated 2-byte */
        {"\xe2\x82", 0},         /* truncated 3-byte */
        {"\xf0\x9f\x98", 0},     /* truncated 4-byte */
        {"\xe2\x28\xa1", 0},     /* bad second byte */
        {"\xe2\x82\x28", 0},     /* bad third byte */
        {"\xf0\x9f\x28\x80", 0}, /* bad third byte of four */
        {"\xf0\x9f\x98\x28", 0}, /* bad fourth byte */
        {"\xc3\xc3\xa9", 0},     /* lead where a continuation goes */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t off = 99;
        if (utf8(bad[i].s, strlen(bad[i].s), &off) != UTF8_INVALID ||
            off != bad[i].off) {
            fprintf(stderr, "case %zu: off %zu\n", i, off);
            CHECK(0);
        }
    }
}

/* Every 1- and 2-byte string against a reference decoder. */
static int ref_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len;
        if (s[i] == 0)
            return 0;
        if (s[i] < 0x80) {
            i++;
            continue;
        } else if ((s[i] & 0xe0) == 0xc0) {
            len = 2;
            cp = s[i] & 0x1f;
        } else if ((s[i] & 0xf0) == 0xe0) {
            len = 3;
            cp = s[i] & 0x0f;
        } else if ((s[i] & 0xf8) == 0xf0) {
            len = 4;
            cp = s[i] & 0x07;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

TEST(utf8_against_reference) {
    uint8_t s[4];
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        CHECK_EQ_INT(utf8_check(s, 1, NULL) == UTF8_OK, ref_valid(s, 1));
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            CHECK_EQ_INT(utf8_check(s, 2, NULL) == UTF8_OK, ref_valid(s, 2));
        }
    }
    /* Every 3- and 4-byte sequence with a lead of E0..F4 and one of the
     * interesting continuation values. */
    static const uint8_t conts[] = {0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90,
                                    0x9f, 0xa0, 0xbf, 0xc0, 0xff};
    enum { NC = sizeof(conts) };
    for (unsigned a = 0xe0; a <= 0xf4; a++)
        for (int i = 0; i < NC; i++)
            for (int j = 0; j < NC; j++)
                for (int k = 0; k < NC; k++) {
                    s[0] = (uint8_t)a;
                    s[1] = conts[i];
                    s[2] = conts[j];
                    s[3] = conts[k];
                    CHECK_EQ_INT(utf8_check(s, 3, NULL) == UTF8_OK,
                                 ref_valid(s, 3));
                    CHECK_EQ_INT(utf8_check(s, 4, NULL) == UTF8_OK,
                                 ref_valid(s, 4));
                }
}

/* ---- messages ---- */

TEST(valid_request_passes_and_decodes) {
    struct enc e;
    char why[256] = "x";
    decide_request(&e, NULL, NULL, 0);
    CHECK_EQ_INT(check(decide_desc(), &e, why, sizeof(why)), 0);
    CHECK_STR(why, "");
    /* The hand-made bytes are what protobuf-c reads. */
    Detd__V1__DecideRequest *m =
        detd__v1__decide_request__unpack(NULL, e.n, e.b);
    CHECK(m != NULL);
    CHECK_STR(m->key->kernel, "kernels:row_sum@ab12");
    CHECK_EQ_INT(m->key->n_candidates, 3);
    CHECK_STR(m->client->job, "job \xc3\xa9t\xc3\xa9");
    detd__v1__decide_request__free_unpacked(m, NULL);
    /* And the bytes protobuf-c writes pass too. */
    Detd__V1__ClientIdentity c = DETD__V1__CLIENT_IDENTITY__INIT;
    c.host = "h\xc3\xb4te";
    Detd__V1__DecisionKey k = DETD__V1__DECISION_KEY__INIT;
    char *cands[] = {"A", "\xf0\x9f\x98\x80"};
    k.arch = "sm90";
    k.kernel = "k";
    k.candidates = cands;
    k.n_candidates = 2;
    Detd__V1__DecideRequest r = DETD__V1__DECIDE_REQUEST__INIT;
    r.client = &c;
    r.key = &k;
    uint8_t buf[512];
    size_t n = detd__v1__decide_request__pack(&r, buf);
    CHECK_EQ_INT(wirecheck_message(decide_desc(), buf, n, why, sizeof(why)), 0);
}

/* The field path named for a bad value in each string field. */
TEST(every_string_field_named) {
    static const struct {
        const char *field, *path;
    } cases[] = {
        {"host", "client.host"},
        {"device_name", "client.device_name"},
        {"arch", "client.arch"},
        {"client_version", "client.client_version"},
        {"job", "client.job"},
        {"namespace", "key.namespace"},
        {"karch", "key.arch"},
        {"kernel", "key.kernel"},
        {"key", "key.key"},
        {"candidate0", "key.candidates[0]"},
        {"candidate1", "key.candidates[1]"},
        {"candidate2", "key.candidates[2]"},
        {"table_key", "key.table_key"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct enc e;
        char why[256], want[256];
        decide_request(&e, cases[i].field, "k\0x", 3);
        CHECK_EQ_INT(check(decide_desc(), &e, why, sizeof(why)), DETD_EINVAL);
        snprintf(want, sizeof(want), "%s holds a NUL byte", cases[i].path);
        CHECK_STR(why, want);
        decide_request(&e, cases[i].field, "ok\xed\xa0\x80", 5);
        CHECK_EQ_INT(check(decide_desc(), &e, why, sizeof(why)), DETD_EINVAL);
        snprintf(want, sizeof(want), "%s is not valid UTF-8 (byte 2)",
                 cases[i].path);
        CHECK_STR(why, want);
        /* The first problem is named, in wire order. */
        decide_request(&e, cases[i].field, "\xff", 1);
        CHECK_EQ_INT(check(decide_desc(), &e, why, sizeof(why)), DETD_EINVAL);
        snprintf(want, sizeof(want), "%s is not valid UTF-8 (byte 0)",
                 cases[i].path);
        CHECK_STR(why, want);
    }
}

TEST(nested_repeated_messages) {
    /* ReportRequest.timings[i].config: a repeated message's string. */
    struct enc rep = {0}, t = {0};
    char why[256];
    for (int i = 0; i < 3; i++) {
        memset(&t, 0, sizeof(t));
        if (i == 2)
            put_bytes(&t, 1, "B\0", 2);
        else
            put_str(&t, 1, "BLOCK=64");
        /* packed doubles (LEN of non-strings) are not strings */
        uint8_t dbl[16];
        memset(dbl, 0, sizeof(dbl));
        dbl[3] = 0; /* a NUL inside packed doubles is fine */
        put_bytes(&t, 2, dbl, sizeof(dbl));
        put_sub(&rep, 6, &t);
    }
    CHECK_EQ_INT(wirecheck_message(&detd__v1__report_request__descriptor, rep.b,
                                   rep.n, why, sizeof(why)),
                 DETD_EINVAL);
    CHECK_STR(why, "timings[2].config holds a NUL byte");
    /* The same timings with valid configs pass. */
    memset(&rep, 0, sizeof(rep));
    memset(&t, 0, sizeof(t));
    put_str(&t, 1, "BLOCK=\xc3\xa9");
    put_sub(&rep, 6, &t);
    put_sub(&rep, 6, &t);
    CHECK_EQ_INT(wirecheck_message(&detd__v1__report_request__descriptor, rep.b,
                                   rep.n, why, sizeof(why)),
                 0);
    /* A sub-message given twice is merged by protobuf-c: both are read. */
    struct enc dec = {0}, k1 = {0}, k2 = {0};
    put_str(&k1, 3, "good");
    put_bytes(&k2, 3, "\xc0\x80", 2);
    put_sub(&dec, 4, &k1);
    put_sub(&dec, 4, &k2);
    CHECK_EQ_INT(check(decide_desc(), &dec, why, sizeof(why)), DETD_EINVAL);
    CHECK_STR(why, "key.kernel is not valid UTF-8 (byte 0)");
}

TEST(unknown_and_non_string_fields_ignored) {
    struct enc e;
    char why[256];
    decide_request(&e, NULL, NULL, 0);
    put_bytes(&e, 99, "\0\xff", 2); /* unknown length-delimited */
    put_uint(&e, 98, UINT64_MAX);   /* unknown varint, 10 bytes */
    put_varint(&e, 97 << 3 | 1);    /* unknown 64-bit */
    memset(e.b + e.n, 0, 8);
    e.n += 8;
    put_varint(&e, 96 << 3 | 5); /* unknown 32-bit */
    memset(e.b + e.n, 0xff, 4);
    e.n += 4;
    CHECK_EQ_INT(check(decide_desc(), &e, why, sizeof(why)), 0);
    Detd__V1__DecideRequest *m =
        detd__v1__decide_request__unpack(NULL, e.n, e.b);
    CHECK(m != NULL);
    detd__v1__decide_request__free_unpacked(m, NULL);
}

TEST(malformed_is_eproto) {
    char why[256];
    const ProtobufCMessageDescriptor *d = decide_desc();
    struct {
        const char *b;
        size_t n;
    } bad[] = {
        {"\x22\x05"
         "ab",
         4},         /* key: length past the end */
        {"\x22", 1}, /* key: no length */
        {"\x08", 1}, /* varint: nothing */
        {"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12}, /* 11 */
        {"\x09"
         "1234567",
         8}, /* 64-bit: 7 bytes */
        {"\x0d"
         "123",
         4},             /* 32-bit: 3 bytes */
        {"\x0b", 1},     /* start group */
        {"\x0c", 1},     /* end group */
        {"\x0e", 1},     /* wire type 6 */
        {"\x0f", 1},     /* wire type 7 */
        {"\x00\x01", 2}, /* field 0, varint 1 */
        {"\x05"
         "1234",
         5},                             /* field 0, 32-bit */
        {"\x80\x80\x80\x80\x80\x01", 6}, /* tag over 5 bytes */
        {"\x20\x01", 2},                 /* key (a message) as a varint */
        {"\x22\x02\x18\x01", 4},         /* key.kernel (a string) as a varint */
        {"\x22\x06\x1a\x85\x80\x80\x80\x10", 8}, /* length over 32 bits */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = wirecheck_message(d, (const uint8_t *)bad[i].b, bad[i].n, why,
                                   sizeof(why));
        if (rc != DETD_EPROTO)
            fprintf(stderr, "case %zu: %d %s\n", i, rc, why);
        CHECK_EQ_INT(rc, DETD_EPROTO);
        CHECK(strncmp(why, "malformed message: ", 19) == 0);
        /* protobuf-c refuses each of them too */
        ProtobufCMessage *m = protobuf_c_message_unpack(
            d, NULL, bad[i].n, (const uint8_t *)bad[i].b);
        if (m != NULL)
            fprintf(stderr, "case %zu: protobuf-c accepts it\n", i);
        CHECK(m == NULL);
    }
    /* The nested one says where. */
    wirecheck_message(d, (const uint8_t *)"\x22\x02\x18\x01", 4, why,
                      sizeof(why));
    CHECK_STR(why, "malformed message: wrong wire type at byte 2 in key");
    /* Empty input is the empty message; NULL with a length is refused. */
    CHECK_EQ_INT(wirecheck_message(d, NULL, 0, why, sizeof(why)), 0);
    CHECK_EQ_INT(wirecheck_message(d, NULL, 1, why, sizeof(why)), DETD_EINVAL);
    CHECK_EQ_INT(wirecheck_message(NULL, (const uint8_t *)"", 0, NULL, 0),
                 DETD_EINVAL);
    /* why may be absent */
    CHECK_EQ_INT(wirecheck_message(d, (const uint8_t *)"\x0b", 1, NULL, 0),
                 DETD_EPROTO);
}

/* What protobuf-c decodes from bytes wirecheck passes has only valid
 * strings; bytes protobuf-c decodes are never called malformed. */
static void consistent(const ProtobufCMessageDescriptor *d, const uint8_t *b,
                       size_t n) {
    char why[256];
    int rc = wirecheck_message(d, b, n, why, sizeof(why));
    CHECK(rc == 0 || rc == DETD_EINVAL || rc == DETD_EPROTO);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, b);
    if (m != NULL) {
        if (rc == DETD_EPROTO)
            fprintf(stderr, "protobuf-c decodes what wirecheck refuses: %s\n",
                    why);
        CHECK(rc != DETD_EPROTO);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (rc == DETD_EINVAL)
        CHECK(strstr(why, " holds a NUL byte") != NULL ||
              strstr(why, " is not valid UTF-8 (byte ") != NULL);
}

TEST(every_prefix_and_flip_consistent_with_protobuf_c) {
    struct enc e;
    decide_request(&e, NULL, NULL, 0);
    for (size_t n = 0; n <= e.n; n++)
        consistent(decide_desc(), e.b, n);
    for (size_t i = 0; i < e.n; i++)
        for (int bit = 0; bit < 8; bit++) {
            struct enc f = e;
            f.b[i] ^= (uint8_t)(1u << bit);
            consistent(decide_desc(), f.b, f.n);
        }
    for (size_t i = 0; i < e.n; i++) {
        static const uint8_t vals[] = {0x00, 0x7f, 0x80, 0xff, 0x0b, 0x22};
        for (size_t v = 0; v < sizeof(vals); v++) {
            struct enc f = e;
            f.b[i] = vals[v];
            consistent(decide_desc(), f.b, f.n);
            consistent(&detd__v1__report_request__descriptor, f.b, f.n);
        }
    }
}

/* ---- depth and path length, with a message that contains itself ---- */

extern const ProtobufCMessageDescriptor self_desc;
static const ProtobufCFieldDescriptor self_fields[] = {
    {"a_rather_long_field_name_for_the_path", 1, PROTOBUF_C_LABEL_NONE,
     PROTOBUF_C_TYPE_MESSAGE, 0, 0, &self_desc, NULL, 0, 0, NULL, NULL},
    {"s", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, 0, NULL, NULL, 0,
     0, NULL, NULL},
};
const ProtobufCMessageDescriptor self_desc = {
    PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
    "t.Self",
    "Self",
    "Self",
    "t",
    0,
    2,
    self_fields,
    NULL,
    0,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

static size_t nest(uint8_t *buf, size_t cap, int depth, const char *leaf) {
    struct enc *e = calloc(1, sizeof(*e));
    put_str(e, 2, leaf);
    for (int i = 0; i < depth; i++) {
        struct enc *o = calloc(1, sizeof(*o));
        put_sub(o, 1, e);
        free(e);
        e = o;
    }
    CHECK(e->n <= cap);
    memcpy(buf, e->b, e->n);
    size_t n = e->n;
    free(e);
    return n;
}

TEST(depth_and_long_paths) {
    uint8_t buf[4096];
    char why[512];
    size_t n = nest(buf, sizeof(buf), WIRECHECK_MAX_DEPTH, "fine");
    CHECK_EQ_INT(wirecheck_message(&self_desc, buf, n, why, sizeof(why)), 0);
    n = nest(buf, sizeof(buf), WIRECHECK_MAX_DEPTH + 1, "fine");
    CHECK_EQ_INT(wirecheck_message(&self_desc, buf, n, why, sizeof(why)),
                 DETD_EPROTO);
    CHECK(strstr(why, "nested too deeply") != NULL);
    /* A path longer than the buffer is cut, still named and terminated. */
    n = nest(buf, sizeof(buf), 20, "\xff");
    CHECK_EQ_INT(wirecheck_message(&self_desc, buf, n, why, sizeof(why)),
                 DETD_EINVAL);
    CHECK(strncmp(why, "a_rather_long_field_name_for_the_path.a_rather", 46) ==
          0);
    CHECK(strstr(why, "... is not valid UTF-8 (byte 0)") != NULL);
    /* A short one is exact. */
    n = nest(buf, sizeof(buf), 1, "a\0");
    n = nest(buf, sizeof(buf), 1, "ok");
    buf[n - 1] = 0; /* "o\0" */
    CHECK_EQ_INT(wirecheck_message(&self_desc, buf, n, why, sizeof(why)),
                 DETD_EINVAL);
    CHECK_STR(why, "a_rather_long_field_name_for_the_path.s holds a NUL byte");
    /* A small why is truncated, never overrun. */
    char small[8];
    memset(small, 'z', sizeof(small));
    CHECK_EQ_INT(wirecheck_message(&self_desc, buf, n, small, sizeof(small)),
                 DETD_EINVAL);
    CHECK_STR(small, "a_rathe");
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
