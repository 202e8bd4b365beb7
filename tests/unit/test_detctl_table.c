/*
 * Unit tests of detctl_table's pure part: canonical config strings parsed
 * back into table entries, and the majority rule over votes.
 */
#define _GNU_SOURCE
#include <stdio.h>

#include <jansson.h>

#include "detctl_table.h"
#include "runner.h"

/* The entry of config as compact JSON with sorted keys, or the error. */
static char *parse(const char *config) {
    json_t *e = NULL;
    char err[256], *out = NULL;
    if (detctl_table_entry_from_config(config, &e, err, sizeof err) != 0) {
        CHECK(asprintf(&out, "error: %s", err) > 0);
        return out;
    }
    out = json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(e);
    return out;
}

#define CHECK_PARSE(config, want)                                              \
    do {                                                                       \
        char *got_ = parse(config);                                            \
        CHECK_STR(got_, want);                                                 \
        free(got_);                                                            \
    } while (0)

TEST(values_of_every_kind) {
    CHECK_PARSE("BLOCK=1024,num_warps=4,num_stages=3,num_ctas=1",
                "{\"kwargs\":{\"BLOCK\":1024},\"maxnreg\":null,\"num_ctas\":1,"
                "\"num_stages\":3,\"num_warps\":4}");
    CHECK_PARSE("A=-3,B=0.5,C=True,D=False,E=None,F=ieee,G=1e-05,"
                "num_warps=8,num_stages=2,num_ctas=2,maxnreg=128",
                "{\"kwargs\":{\"A\":-3,\"B\":0.5,\"C\":true,\"D\":false,"
                "\"E\":null,\"F\":\"ieee\",\"G\":1.0000000000000001e-5},"
                "\"maxnreg\":128,\"num_ctas\":2,\"num_stages\":2,"
                "\"num_warps\":8}");
    /* 1e-05 is written with 17 digits: it reads back as the same double,
     * whose Python repr is 1e-05 again. No kwargs at all: */
    CHECK_PARSE("num_warps=4,num_stages=1,num_ctas=1",
                "{\"kwargs\":{},\"maxnreg\":null,\"num_ctas\":1,"
                "\"num_stages\":1,\"num_warps\":4}");
}

TEST(strings_that_would_not_render_back_are_refused_naming_why) {
    char *e;
    e = parse("BLOCK=16,num_warps=4");
    CHECK(strstr(e, "no num_stages") != NULL);
    free(e);
    e = parse("BLOCK=16,num_warps=4,num_stages=1");
    CHECK(strstr(e, "no num_ctas") != NULL);
    free(e);
    e = parse("B=1,A=2,num_warps=4,num_stages=1,num_ctas=1");
    CHECK(strstr(e, "not sorted") != NULL && strstr(e, "A after B") != NULL);
    free(e);
    e = parse("num_stages=1,num_warps=4,num_ctas=1");
    CHECK(strstr(e, "num_warps after num_stages") != NULL);
    free(e);
    e = parse("BLOCK=16,num_warps=4,num_stages=1,num_ctas=1,"
              "ir_override=x.ttgir");
    CHECK(strstr(e, "ir_override") != NULL);
    free(e);
    e = parse("X=inf,num_warps=4,num_stages=1,num_ctas=1");
    CHECK(strstr(e, "X = inf") != NULL && strstr(e, "finite") != NULL);
    free(e);
    e = parse("BLOCK=16,num_warps=four,num_stages=1,num_ctas=1");
    CHECK(strstr(e, "num_warps = four") != NULL);
    free(e);
    e = parse("BLOCK,num_warps=4,num_stages=1,num_ctas=1");
    CHECK(strstr(e, "'BLOCK' is not NAME=value") != NULL);
    free(e);
    e = parse("");
    CHECK(strstr(e, "empty") != NULL);
    free(e);
}

static struct detctl_table_row vote(const char *kernel, const char *config,
                                    const char *host, int64_t at) {
    return (struct detctl_table_row){kernel,        "[i:1]", config, host,
                                     "NVIDIA H200", "3.6.0", at,     "vote"};
}

TEST(majority_tie_break_and_newest_code_version) {
    const char *c16 = "BLOCK=16,num_warps=4,num_stages=1,num_ctas=1";
    const char *c32 = "BLOCK=32,num_warps=4,num_stages=1,num_ctas=1";
    const char *c128 = "BLOCK=128,num_warps=4,num_stages=1,num_ctas=1";
    struct detctl_table_row rows[] = {
        vote("m:k@new", c32, "a", 10), vote("m:k@new", c128, "b", 11),
        vote("m:k@new", c32, "c", 12), vote("m:k@new", c128, "a", 13),
        vote("m:k@old", c16, "a", 1),  vote("m:k@old", c16, "b", 2),
        vote("m:k@old", c16, "c", 3),  vote("m:k@new", "bad", "d", 14),
    };
    FILE *warn = tmpfile();
    CHECK(warn != NULL);
    json_t *doc = NULL;
    struct detctl_table_stats st;
    CHECK_EQ_INT(detctl_table_build("sm90", "src", 1, rows, 8, warn, &doc, &st),
                 0);
    CHECK_EQ_INT(st.entries, 1);
    CHECK_EQ_INT(st.superseded, 3);
    CHECK_EQ_INT(st.skipped, 1);
    CHECK_EQ_INT(st.disagreeing, 1);
    json_t *e = json_object_get(
        json_object_get(json_object_get(doc, "kernels"), "m:k"), "[i:1]");
    /* 2:2 between BLOCK=32 and BLOCK=128: {"BLOCK":128} sorts first. */
    CHECK_EQ_INT(json_integer_value(
                     json_object_get(json_object_get(e, "kwargs"), "BLOCK")),
                 128);
    char *p =
        json_dumps(json_object_get(json_object_get(doc, "provenance"), "m:k"),
                   JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_STR(p, "{\"[i:1]\":{\"agree\":2,\"devices\":[\"NVIDIA H200\"],"
                 "\"hosts\":3,\"votes\":4}}");
    free(p);
    CHECK_STR(json_string_value(json_object_get(doc, "triton")), "3.6.0");
    json_decref(doc);
    char buf[2048] = "";
    rewind(warn);
    size_t n = fread(buf, 1, sizeof buf - 1, warn);
    buf[n] = '\0';
    fclose(warn);
    CHECK(strstr(buf, "m:k@old and m:k@new") != NULL);
    CHECK(strstr(buf, "config 'bad'") != NULL);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
