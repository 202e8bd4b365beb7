/*
 * Unit tests of detctl_key: --kernel patterns and keys as Triton prints
 * them, converted to the canonical form of client/python/detd/_canon.py
 * (key_string).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "detctl_key.h"
#include "runner.h"

static char *canon(const char *in) {
    char err[256], *out = NULL;
    if (detctl_key_canonical(in, &out, err, sizeof err) != 0) {
        CHECK(asprintf(&out, "error: %s", err) > 0);
    }
    return out;
}

#define CHECK_KEY(in, want)                                                    \
    do {                                                                       \
        char *got_ = canon(in);                                                \
        CHECK_STR(got_, want);                                                 \
        free(got_);                                                            \
    } while (0)

TEST(triton_tuples_become_canonical_keys) {
    CHECK_KEY("(1024, 'torch.float32')", "[i:1024,s:\"torch.float32\"]");
    CHECK_KEY("(7,)", "[i:7]");
    CHECK_KEY("()", "[]");
    CHECK_KEY("(-3, 0.5, 1e-05, inf, -inf, nan)",
              "[i:-3,f:0.5,f:1e-05,f:inf,f:-inf,f:nan]");
    CHECK_KEY("(True, False, None)", "[b:true,b:false,n:null]");
    CHECK_KEY("((1, 2), [3, 'a'])", "[t[i:1,i:2],l[i:3,s:\"a\"]]");
    CHECK_KEY("(\"it's\", 'a\\\"b', 'tab\\t', '\\x7f')",
              "[s:\"it's\",s:\"a\\\"b\",s:\"tab\\t\",s:\"\\u007f\"]");
    /* non-ASCII as json.dumps(ensure_ascii=True) writes it */
    CHECK_KEY("('\xc3\xa9', '\\u00e9', '\xf0\x9f\x98\x80')",
              "[s:\"\\u00e9\",s:\"\\u00e9\",s:\"\\ud83d\\ude00\"]");
    /* the canonical form is kept as it is */
    CHECK_KEY("[i:1,s:\"x\"]", "[i:1,s:\"x\"]");
}

TEST(malformed_keys_name_the_problem) {
    CHECK_KEY("(1, 2", "error: at offset 5: missing ')'");
    CHECK_KEY("(1 2)", "error: at offset 3: expected ',' or ')'");
    CHECK_KEY("('abc)", "error: at offset 6: unterminated string");
    CHECK_KEY("(1,) x", "error: at offset 5: unexpected text after the key");
    CHECK_KEY("((1),)",
              "error: at offset 4: a parenthesized value is not a tuple "
              "(write '(x,)')");
    CHECK_KEY("(foo,)", "error: at offset 1: expected a value");
    /* not a tuple: sent as it is (a client's own key form) */
    CHECK_KEY("i:0", "i:0");
}

TEST(kernel_patterns) {
    const char *id = "pkg.mod:Cls.row_sum@0123456789abcdef";
    CHECK_EQ_INT(detctl_kernel_form(id), DETCTL_KERNEL_ID);
    CHECK_EQ_INT(detctl_kernel_form("pkg.mod:Cls.row_sum"),
                 DETCTL_KERNEL_QUALNAME);
    CHECK_EQ_INT(detctl_kernel_form("row_sum"), DETCTL_KERNEL_BARE);
    CHECK(detctl_kernel_match(id, id));
    CHECK(!detctl_kernel_match("pkg.mod:Cls.row_sum@0000", id));
    CHECK(detctl_kernel_match("pkg.mod:Cls.row_sum", id));
    CHECK(!detctl_kernel_match("pkg.mod:Cls.row", id));
    CHECK(!detctl_kernel_match("pkg.mod", id));
    CHECK(detctl_kernel_match("row_sum", id));
    CHECK(detctl_kernel_match("Cls.row_sum", id));
    CHECK(!detctl_kernel_match("sum", id));
    CHECK(!detctl_kernel_match("ow_sum", id));
    CHECK(!detctl_kernel_match("", id));
    CHECK(detctl_kernel_match("f", "m:f@1"));
    CHECK(!detctl_kernel_match("m", "m:f@1"));
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
