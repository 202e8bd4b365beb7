/*
 * Unit tests of detctl_merge's pure part: the majority of tables and
 * recordings per (arch, kernel, key), the tie-break, provenance weights,
 * recognizing recordings, several architectures, and the same bytes for
 * the inputs in any order.
 */
#define _GNU_SOURCE
#include <stdio.h>

#include <jansson.h>

#include "detctl_merge.h"
#include "runner.h"

#define E32 "{\"kwargs\":{\"BLOCK\":32},\"num_warps\":4,\"num_stages\":2}"
#define E64 "{\"kwargs\":{\"BLOCK\":64},\"num_warps\":4,\"num_stages\":2}"
#define E64FULL                                                                \
    "{\"kwargs\":{\"BLOCK\":64},\"num_warps\":4,\"num_stages\":2,"             \
    "\"num_ctas\":1,\"maxnreg\":null}"

static struct detctl_merge *merged(const char *const *names,
                                   const char *const *docs, size_t n) {
    struct detctl_merge *m = NULL;
    CHECK(detctl_merge_new(&m) == 0);
    for (size_t i = 0; i < n; i++) {
        char *err = NULL;
        int rc = detctl_merge_add(m, names[i], docs[i], strlen(docs[i]), &err);
        if (rc != 0)
            fprintf(stderr, "add %s: %s\n", names[i], err);
        CHECK(rc == 0);
    }
    return m;
}

/* The document of arch as compact sorted JSON. */
static char *doc_of(struct detctl_merge *m, const char *arch) {
    json_t *docs = NULL;
    CHECK(detctl_merge_build(m, "src", &docs, NULL) == 0);
    char *s = json_dumps(json_object_get(docs, arch),
                         JSON_SORT_KEYS | JSON_INDENT(1));
    json_decref(docs);
    CHECK(s != NULL);
    return s;
}

static const char *entry_block(const char *doc, const char *kernel,
                               const char *key) {
    static char out[64];
    json_t *j = json_loads(doc, 0, NULL);
    json_t *e = json_object_get(
        json_object_get(json_object_get(j, "kernels"), kernel), key);
    snprintf(out, sizeof out, "%lld",
             (long long)json_integer_value(
                 json_object_get(json_object_get(e, "kwargs"), "BLOCK")));
    json_decref(j);
    return out;
}

TEST(majority_of_recordings_and_a_table) {
    const char *names[] = {"r0.json", "r1.json", "t.json"};
    const char *docs[] = {
        "{\"sm90\":{\"m:f\":{\"[i:1]\":" E64 "}}}",
        "{\"sm90\":{\"m:f\":{\"[i:1]\":" E32 "}}}",
        "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"[i:1]\":" E64FULL "}}}",
    };
    struct detctl_merge *m = merged(names, docs, 3);
    char *d = doc_of(m, "sm90");
    CHECK_STR(entry_block(d, "m:f", "[i:1]"), "64");
    CHECK(strstr(d, "\"votes\": 3") != NULL);
    CHECK(strstr(d, "\"agree\": 2") != NULL);
    struct detctl_merge_stats st;
    detctl_merge_stats(m, "sm90", &st);
    CHECK_EQ_INT(st.entries, 1);
    CHECK_EQ_INT(st.disagreeing, 1);
    free(d);
    detctl_merge_free(m);
}

TEST(a_tie_goes_to_the_smallest_canonical_json) {
    /* {"kwargs":{"BLOCK":32},...} < {"kwargs":{"BLOCK":64},...} */
    const char *names[] = {"a.json", "b.json"};
    const char *docs[] = {"{\"sm90\":{\"k\":{\"*\":" E64 "}}}",
                          "{\"sm90\":{\"k\":{\"*\":" E32 "}}}"};
    struct detctl_merge *m = merged(names, docs, 2);
    char *d = doc_of(m, "sm90");
    CHECK_STR(entry_block(d, "k", "*"), "32");
    free(d);
    detctl_merge_free(m);
}

TEST(provenance_votes_weigh_an_entry) {
    const char *names[] = {"t.json", "r0.json", "r1.json"};
    const char *docs[] = {
        "{\"arch\":\"sm90\",\"kernels\":{\"k\":{\"*\":" E64 "}},"
        "\"provenance\":{\"k\":{\"*\":{\"votes\":3,\"agree\":3,"
        "\"devices\":[\"NVIDIA H200\"],\"hosts\":2}}}}",
        "{\"sm90\":{\"k\":{\"*\":" E32 "}}}",
        "{\"sm90\":{\"k\":{\"*\":" E32 "}}}",
    };
    struct detctl_merge *m = merged(names, docs, 3);
    char *d = doc_of(m, "sm90");
    CHECK_STR(entry_block(d, "k", "*"), "64");
    CHECK(strstr(d, "\"votes\": 5") != NULL);
    CHECK(strstr(d, "\"agree\": 3") != NULL);
    CHECK(strstr(d, "NVIDIA H200") != NULL);
    /* Two recordings do not know their hosts: none written. */
    CHECK(strstr(d, "\"hosts\"") == NULL);
    free(d);
    detctl_merge_free(m);
    /* A bad weight is an error naming the file and the path. */
    struct detctl_merge *m2 = NULL;
    char *err = NULL;
    const char *bad = "{\"arch\":\"sm90\",\"kernels\":{\"k\":{\"*\":" E64
                      "}},\"provenance\":{\"k\":{\"*\":{\"votes\":0}}}}";
    CHECK(detctl_merge_new(&m2) == 0);
    CHECK(detctl_merge_add(m2, "w.json", bad, strlen(bad), &err) != 0);
    CHECK(strstr(err, "w.json: provenance.\"k\".\"*\".votes") != NULL);
    CHECK_EQ_INT(detctl_merge_n_inputs(m2), 0);
    free(err);
    detctl_merge_free(m2);
}

TEST(recordings_are_recognized_and_checked_naming_the_path) {
    struct detctl_merge *m = NULL;
    char *err = NULL;
    CHECK(detctl_merge_new(&m) == 0);
    /* Not an arch at the top: named. */
    const char *a = "{\"sm90\":{},\"meta\":{}}";
    CHECK(detctl_merge_add(m, "r.json", a, strlen(a), &err) != 0);
    CHECK(strstr(err, "r.json: \"meta\": not an architecture name") != NULL);
    free(err);
    /* A bad entry deep inside: the JSON path; nothing of it counted. */
    const char *b = "{\"sm90\":{\"k\":{\"[i:1]\":" E64 ",\"[i:2]\":"
                    "{\"kwargs\":{},\"num_warps\":\"4\",\"num_stages\":1}}}}";
    CHECK(detctl_merge_add(m, "r.json", b, strlen(b), &err) != 0);
    CHECK(strstr(err, "r.json: \"sm90\".\"k\".\"[i:2]\".num_warps") != NULL);
    free(err);
    json_t *docs = NULL;
    CHECK(detctl_merge_build(m, "s", &docs, NULL) == 0);
    CHECK_EQ_INT(json_object_size(docs), 0);
    json_decref(docs);
    /* A table error comes from tablefmt with its path too. */
    const char *c = "{\"arch\":\"sm90\",\"kernels\":{\"k\":{\"*\":"
                    "{\"kwargs\":{},\"num_warps\":4}}}}";
    CHECK(detctl_merge_add(m, "t.json", c, strlen(c), &err) != 0);
    CHECK(strstr(err, "t.json: kernels.\"k\".\"*\".num_stages") != NULL);
    free(err);
    detctl_merge_free(m);
}

TEST(several_architectures_give_one_document_each) {
    const char *names[] = {"r0.json", "t.json"};
    const char *docs[] = {
        "{\"sm90\":{\"k\":{\"*\":" E32 "}},\"sm100\":{\"k\":{\"*\":" E64 "}}}",
        "{\"arch\":\"sm100\",\"kernels\":{\"k\":{\"*\":" E64 "}}}",
    };
    struct detctl_merge *m = merged(names, docs, 2);
    json_t *out = NULL;
    CHECK(detctl_merge_build(m, "s", &out, NULL) == 0);
    CHECK_EQ_INT(json_object_size(out), 2);
    CHECK_STR(json_string_value(
                  json_object_get(json_object_get(out, "sm100"), "arch")),
              "sm100");
    json_decref(out);
    struct detctl_merge_stats st;
    detctl_merge_stats(m, "sm100", &st);
    CHECK_EQ_INT(st.entries, 1);
    CHECK_EQ_INT(st.disagreeing, 0);
    detctl_merge_free(m);
}

TEST(any_input_order_gives_the_same_bytes) {
    const char *names[] = {"a", "b", "c", "d"};
    const char *docs[] = {
        "{\"sm90\":{\"k\":{\"[i:1]\":" E32 ",\"[i:2]\":" E64 "}}}",
        "{\"sm90\":{\"k\":{\"[i:1]\":" E64 "},\"j\":{\"*\":" E32 "}}}",
        "{\"arch\":\"sm90\",\"triton\":\"3.6.0\",\"kernels\":{\"j\":{\"*\":" E64
        "}}}",
        "{\"sm90\":{\"k\":{\"[i:2]\":" E32 "}}}",
    };
    static const int perms[][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2},
                                   {2, 0, 3, 1}, {1, 0, 2, 3}, {3, 1, 2, 0}};
    char *first = NULL;
    for (size_t p = 0; p < sizeof perms / sizeof perms[0]; p++) {
        const char *n[4], *d[4];
        for (int i = 0; i < 4; i++) {
            n[i] = names[perms[p][i]];
            d[i] = docs[perms[p][i]];
        }
        struct detctl_merge *m = merged(n, d, 4);
        char *s = doc_of(m, "sm90");
        if (first == NULL)
            first = s;
        else {
            CHECK_STR(s, first);
            free(s);
        }
        detctl_merge_free(m);
    }
    /* Every key a tie: 32 wins each time; triton from the one table. */
    CHECK_STR(entry_block(first, "k", "[i:1]"), "32");
    CHECK_STR(entry_block(first, "k", "[i:2]"), "32");
    CHECK_STR(entry_block(first, "j", "*"), "32");
    CHECK(strstr(first, "\"triton\": \"3.6.0\"") != NULL);
    free(first);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
