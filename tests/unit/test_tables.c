/*
 * tables: loading directories (bad files skipped and kept with their
 * errors) and the lookup order: kernel names most specific first; keys
 * exact > table_key > "*"; directory order; stale entries skipped.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detd/error.h"
#include "runner.h"
#include "data/tables.h"

static char root_[64];

static void mkroot(void) {
    snprintf(root_, sizeof(root_), "/tmp/tables-XXXXXX");
    CHECK(mkdtemp(root_) != NULL);
}

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", root_, dir);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/%s/%s", root_, dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

static char *dirpath(const char *dir) {
    char *p;
    CHECK(asprintf(&p, "%s/%s", root_, dir) > 0);
    return p;
}

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root_);
    CHECK(system(cmd) == 0);
}

#define E(b) "{\"kwargs\":{\"B\":" #b "},\"num_warps\":4,\"num_stages\":1}"
#define C(b) "B=" #b ",num_warps=4,num_stages=1,num_ctas=1"

static const char *const all_[] = {C(1), C(2), C(3), C(4), C(5), C(6)};

static tables *load2(void) {
    char *a = dirpath("a"), *b = dirpath("b");
    const char *dirs[] = {a, b};
    tables *t = NULL;
    CHECK_EQ_INT(tables_load(dirs, 2, NULL, NULL, &t), 0);
    free(a);
    free(b);
    return t;
}

TEST(load_skips_bad_files) {
    mkroot();
    put("a", "sm90.json",
        "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"[i:1]\":" E(1) "}}}");
    put("a", "sm80.json", "{\"arch\":\"sm80\",\"kernels\":{\"m:f\":");
    put("a", "notes.json", "not a table: ignored");
    put("b", "sm100.json",
        "{\"arch\":\"sm100\",\"kernels\":{\"f\":{\"*\":" E(2) ",\"x\":" E(
            3) "}}}");
    tables *t = load2();
    CHECK_EQ_INT(tables_n_files(t), 2);
    CHECK(strstr(tables_file(t, 0)->path, "/a/sm90.json") != NULL);
    CHECK_STR(tables_file(t, 0)->arch, "sm90");
    CHECK_EQ_INT(tables_file(t, 0)->n_entries, 1);
    CHECK_STR(tables_file(t, 1)->arch, "sm100");
    CHECK_EQ_INT(tables_n_entries(t), 3);
    CHECK_EQ_INT(tables_n_errors(t), 1);
    CHECK(strstr(tables_error(t, 0)->path, "sm80.json") != NULL);
    CHECK(strstr(tables_error(t, 0)->message, "sm80.json") != NULL);
    CHECK(strstr(tables_error(t, 0)->message, "invalid JSON") != NULL);
    tables_free(t);

    /* A --tables directory that does not exist is an error; a missing
     * packaged directory is not. */
    char *missing = dirpath("nope");
    const char *dirs[] = {missing};
    CHECK_EQ_INT(tables_load(dirs, 1, "/nonexistent/detd/tables", NULL, &t), 0);
    CHECK_EQ_INT(tables_n_files(t), 0);
    CHECK_EQ_INT(tables_n_errors(t), 1);
    CHECK(strstr(tables_error(t, 0)->message, missing) != NULL);
    tables_free(t);
    free(missing);
    cleanup();
}

TEST(key_order_exact_table_key_star) {
    mkroot();
    put("a", "sm90.json",
        "{\"arch\":\"sm90\",\"kernels\":{\"m.sub:fn\":{"
        "\"[i:1]\":" E(1) ",\"N=1|torch.float32\":" E(2) ",\"*\":" E(3) "}}}");
    tables *t = load2();
    struct tables_result r;
    tables_lookup(t, "sm90", "m.sub:fn@abcd", "[i:1]", "N=1|torch.float32",
                  all_, 6, &r);
    CHECK(r.hit);
    CHECK_STR(r.considered[r.n_considered - 1].config, C(1));
    CHECK_STR(r.considered[r.n_considered - 1].key, "[i:1]");
    tables_lookup(t, "sm90", "m.sub:fn@abcd", "[i:2]", "N=1|torch.float32",
                  all_, 6, &r);
    CHECK(r.hit);
    CHECK_STR(r.considered[r.n_considered - 1].config, C(2));
    tables_lookup(t, "sm90", "m.sub:fn@abcd", "[i:2]", "N=2|torch.float32",
                  all_, 6, &r);
    CHECK(r.hit);
    CHECK_STR(r.considered[r.n_considered - 1].key, "*");
    tables_lookup(t, "sm90", "m.sub:fn@abcd", "[i:2]", NULL, all_, 6, &r);
    CHECK(r.hit);
    CHECK_STR(r.considered[r.n_considered - 1].config, C(3));
    /* Other arch: nothing. */
    tables_lookup(t, "sm80", "m.sub:fn@abcd", "[i:1]", NULL, all_, 6, &r);
    CHECK(!r.hit);
    CHECK_EQ_INT(r.n_files, 0);
    tables_free(t);
    cleanup();
}

TEST(kernel_name_order) {
    mkroot();
    put("a", "sm90.json",
        "{\"arch\":\"sm90\",\"kernels\":{"
        "\"m.sub:fn@abcd\":{\"*\":" E(
            1) "},"
               "\"m.sub:fn\":{\"*\":" E(2) "},"
                                           "\"m.sub.fn\":{\"*\":" E(
                                               3) "},"
                                                  "\"fn\":{\"*\":" E(4) "}}}");
    tables *t = load2();
    struct tables_result r;
    tables_lookup(t, "sm90", "m.sub:fn@abcd", "k", NULL, all_, 6, &r);
    CHECK_STR(r.considered[r.n_considered - 1].config, C(1));
    /* Another guard: the pinned entry does not apply. */
    tables_lookup(t, "sm90", "m.sub:fn@ffff", "k", NULL, all_, 6, &r);
    CHECK_STR(r.considered[r.n_considered - 1].config, C(2));
    CHECK_STR(r.considered[r.n_considered - 1].kernel, "m.sub:fn");
    /* Stale names fall through to the next name, in order. */
    const char *only34[] = {C(3), C(4)};
    tables_lookup(t, "sm90", "m.sub:fn@ffff", "k", NULL, only34, 2, &r);
    CHECK(r.hit);
    CHECK_EQ_INT(r.n_stale, 1);
    CHECK_STR(r.considered[r.n_considered - 1].kernel, "m.sub.fn");
    const char *only4[] = {C(4)};
    tables_lookup(t, "sm90", "m.sub:fn@abcd", "k", NULL, only4, 1, &r);
    CHECK(r.hit);
    CHECK_EQ_INT(r.n_stale, 3);
    CHECK_EQ_INT(r.n_considered, 4);
    CHECK_STR(r.considered[3].kernel, "fn");
    CHECK(r.considered[0].stale && !r.considered[3].stale);
    /* Nested qualname: the bare name is its last part. */
    tables_lookup(t, "sm90", "other:Cls.fn@1", "k", NULL, only4, 1, &r);
    CHECK(r.hit);
    CHECK_STR(r.considered[r.n_considered - 1].kernel, "fn");
    /* Absent kernel. */
    tables_lookup(t, "sm90", "m:g@1", "k", NULL, all_, 6, &r);
    CHECK(!r.hit);
    CHECK(!r.kernel_found);
    CHECK_EQ_INT(r.n_files, 1);
    tables_free(t);
    cleanup();
}

TEST(directory_order_and_stale) {
    mkroot();
    put("a", "sm90.json",
        "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"*\":" E(5) "}}}");
    put("b", "sm90.json",
        "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"[i:1]\":" E(
            1) ",\"[i:2]\":" E(6) "}}}");
    tables *t = load2();
    struct tables_result r;
    /* The earlier directory wins, even with a less specific key. */
    tables_lookup(t, "sm90", "m:f@1", "[i:1]", NULL, all_, 6, &r);
    CHECK(r.hit);
    CHECK(strstr(r.considered[r.n_considered - 1].file, "/a/") != NULL);
    CHECK_STR(r.considered[r.n_considered - 1].config, C(5));
    /* Stale in a: the next directory answers. */
    const char *c16[] = {C(1), C(6)};
    tables_lookup(t, "sm90", "m:f@1", "[i:1]", NULL, c16, 2, &r);
    CHECK(r.hit);
    CHECK_EQ_INT(r.n_stale, 1);
    CHECK(strstr(r.considered[0].file, "/a/") && r.considered[0].stale);
    CHECK_STR(r.considered[1].config, C(1));
    /* Stale everywhere: a miss naming every stale entry. */
    const char *c2[] = {C(2)};
    tables_lookup(t, "sm90", "m:f@1", "[i:2]", NULL, c2, 1, &r);
    CHECK(!r.hit);
    CHECK_EQ_INT(r.n_stale, 2);
    CHECK_EQ_INT(r.n_considered, 2);
    CHECK(r.kernel_found);
    /* No candidates (explain): the first entry counts. */
    tables_lookup(t, "sm90", "m:f@1", "[i:2]", NULL, NULL, 0, &r);
    CHECK(r.hit);
    CHECK_STR(r.considered[0].config, C(5));
    /* NULL set: a miss. */
    tables_lookup(NULL, "sm90", "m:f@1", "[i:2]", NULL, all_, 6, &r);
    CHECK(!r.hit);
    tables_free(t);
    cleanup();
}

TEST(many_entries_lookup) {
    mkroot();
    char path[512];
    snprintf(path, sizeof(path), "%s/a", root_);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/a/sm90.json", root_);
    FILE *f = fopen(path, "w");
    fputs("{\"arch\":\"sm90\",\"kernels\":{", f);
    for (int k = 0; k < 50; k++) {
        fprintf(f, "%s\"m:k%d\":{", k ? "," : "", k);
        for (int i = 0; i < 200; i++)
            fprintf(f, "%s\"[i:%d]\":" E(1), i ? "," : "", i);
        fputs("}", f);
    }
    fputs("}}", f);
    fclose(f);
    tables *t = load2();
    CHECK_EQ_INT(tables_n_entries(t), 10000);
    struct tables_result r;
    for (int k = 0; k < 50; k++) {
        char kid[32], key[32];
        snprintf(kid, sizeof(kid), "m:k%d@g", k);
        snprintf(key, sizeof(key), "[i:%d]", (k * 7) % 200);
        tables_lookup(t, "sm90", kid, key, NULL, all_, 6, &r);
        CHECK(r.hit);
        CHECK_STR(r.considered[0].key, key);
        snprintf(key, sizeof(key), "[i:%d]", 200 + k);
        tables_lookup(t, "sm90", kid, key, NULL, all_, 6, &r);
        CHECK(!r.hit && r.kernel_found && r.n_considered == 0);
    }
    tables_free(t);
    cleanup();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
