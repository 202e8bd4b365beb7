/*
 * tablefmt: parsing, validation (every error names the file and the JSON
 * path), caps, and rendering byte-equal to the Python package's
 * _canon.config_string() (the cases in tests/tables/render_cases.json,
 * which tests/python/test_canon.py checks against the Python function).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "runner.h"
#include "tablefmt.h"

static struct tablefmt_doc *parse_ok(const char *name, const char *text) {
    struct tablefmt_doc *doc = NULL;
    char *err = NULL;
    int rc = tablefmt_parse(name, text, strlen(text), NULL, &doc, &err);
    if (rc != 0)
        fprintf(stderr, "unexpected error: %s\n", err ? err : "?");
    CHECK_EQ_INT(rc, 0);
    CHECK(err == NULL);
    return doc;
}

/* Parse must fail with rc; the message must contain every needle. */
static void parse_bad(const char *name, const char *text, int rc_want,
                      const char *n1, const char *n2) {
    struct tablefmt_doc *doc = (struct tablefmt_doc *)0x1;
    char *err = NULL;
    int rc = tablefmt_parse(name, text, strlen(text), NULL, &doc, &err);
    CHECK_EQ_INT(rc, rc_want);
    CHECK(doc == (struct tablefmt_doc *)0x1); /* untouched */
    CHECK(err != NULL);
    if ((n1 && !strstr(err, n1)) || (n2 && !strstr(err, n2)))
        fprintf(stderr, "message: %s\n", err);
    CHECK(strstr(err, name) != NULL);
    CHECK(n1 == NULL || strstr(err, n1) != NULL);
    CHECK(n2 == NULL || strstr(err, n2) != NULL);
    free(err);
}

#define ENTRY "{\"kwargs\":{\"BLOCK\":16},\"num_warps\":4,\"num_stages\":3}"

TEST(good_file) {
    struct tablefmt_doc *doc = parse_ok(
        "dir/sm90.json",
        "{\"format\":\"detd-table-1\",\"arch\":\"sm90\",\"triton\":\"3.6.0\","
        "\"packages\":{\"fla-core\":\"0.4.0\"},\"source\":\"H200 run\","
        "\"kernels\":{\"m:f\":{\"[i:1]\":" ENTRY ",\"*\":{\"kwargs\":{},"
        "\"num_warps\":8,\"num_stages\":2,\"num_ctas\":2,\"maxnreg\":64}}},"
        "\"provenance\":{\"m:f\":{\"[i:1]\":{\"votes\":8,\"agree\":7}}}}");
    CHECK_STR(doc->arch, "sm90");
    CHECK_STR(doc->format, "detd-table-1");
    CHECK_STR(doc->triton, "3.6.0");
    CHECK_STR(doc->source, "H200 run");
    CHECK_EQ_INT(doc->n_entries, 2);
    CHECK_STR(doc->entries[0].kernel, "m:f");
    CHECK_STR(doc->entries[0].key, "[i:1]");
    CHECK_STR(doc->entries[0].config,
              "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1");
    CHECK(doc->entries[0].provenance != NULL);
    CHECK_EQ_INT(json_integer_value(
                     json_object_get(doc->entries[0].provenance, "votes")),
                 8);
    CHECK_STR(doc->entries[1].key, "*");
    CHECK_STR(doc->entries[1].config,
              "num_warps=8,num_stages=2,num_ctas=2,maxnreg=64");
    CHECK(doc->entries[1].provenance == NULL);
    CHECK(json_is_object(doc->entries[1].raw));
    tablefmt_free(doc);
}

TEST(megatron_fixture) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tables/megatron/sm100.json",
             DETD_TEST_DIR);
    struct tablefmt_doc *doc = NULL;
    char *err = NULL;
    int rc = tablefmt_read_file(path, NULL, &doc, &err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR(doc->arch, "sm100");
    CHECK(doc->format == NULL);
    CHECK_EQ_INT(doc->n_entries, 5);
    int found = 0;
    for (size_t i = 0; i < doc->n_entries; i++) {
        if (strcmp(doc->entries[i].kernel, "row_sum_kernel") == 0 &&
            strcmp(doc->entries[i].key, "N=4096|torch.float32|torch.float32") ==
                0) {
            CHECK_STR(doc->entries[i].config,
                      "BLOCK=1024,num_warps=4,num_stages=1,num_ctas=1");
            found = 1;
        }
    }
    CHECK(found);
    tablefmt_free(doc);
}

TEST(truncated_json) {
    parse_bad("sm90.json", "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{",
              DETD_EINVAL, "invalid JSON", "line 1");
    parse_bad("sm90.json", "", DETD_EINVAL, "invalid JSON", NULL);
    parse_bad("sm90.json", "[1,2]", DETD_EINVAL, "JSON object", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"arch\":\"sm90\",\"kernels\":{}}",
              DETD_EINVAL, "duplicate", NULL);
}

TEST(wrong_types_name_the_path) {
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"[i:1]\":{"
              "\"kwargs\":{},\"num_warps\":\"4\",\"num_stages\":3}}}}",
              DETD_EINVAL,
              "sm90.json: kernels.\"m:f\".\"[i:1]\".num_warps: expected an "
              "integer",
              NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"k\":{"
              "\"kwargs\":{\"B\":[1]},\"num_warps\":4,\"num_stages\":3}}}}",
              DETD_EINVAL, "kernels.\"m:f\".\"k\".kwargs.B: expected", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"k\":{"
              "\"kwargs\":{},\"num_warps\":4,\"num_stages\":3,\"bogus\":1}}}}",
              DETD_EINVAL, "kernels.\"m:f\".\"k\".bogus: unknown member", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"k\":{"
              "\"kwargs\":{},\"num_warps\":4}}}}",
              DETD_EINVAL, "kernels.\"m:f\".\"k\".num_stages: missing", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"k\":{"
              "\"kwargs\":{},\"num_warps\":4,\"num_stages\":3,"
              "\"maxnreg\":1.5}}}}",
              DETD_EINVAL, ".maxnreg: expected an integer or null", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"k\":{"
              "\"kwargs\":{},\"num_warps\":4,\"num_stages\":3,"
              "\"ir_override\":\"x\"}}}}",
              DETD_EINVAL, ".ir_override: only null", NULL);
    parse_bad("sm90.json", "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":[]}}",
              DETD_EINVAL, "kernels.\"m:f\": expected an object", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{\"m:f\":{\"k\":1}}}",
              DETD_EINVAL, "kernels.\"m:f\".\"k\": expected an object", NULL);
    parse_bad("sm90.json", "{\"arch\":\"sm90\"}", DETD_EINVAL,
              "kernels: missing", NULL);
    parse_bad("sm90.json", "{\"arch\":\"sm90\",\"kernels\":{},\"triton\":3}",
              DETD_EINVAL, "triton: expected a string", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{},\"packages\":{\"a\":1}}",
              DETD_EINVAL, "packages.\"a\": expected a string", NULL);
    parse_bad("sm90.json",
              "{\"format\":\"detd-table-2\",\"arch\":\"sm90\",\"kernels\":{}}",
              DETD_EINVAL, "format: 'detd-table-2' is not detd-table-1", NULL);
    parse_bad("sm90.json",
              "{\"arch\":\"sm90\",\"kernels\":{},\"provenance\":[]}",
              DETD_EINVAL, "provenance: expected an object", NULL);
}

TEST(unknown_arch_and_mismatch) {
    parse_bad("gpu.json", "{\"arch\":\"gpu\",\"kernels\":{}}", DETD_EINVAL,
              "arch: unknown architecture 'gpu'", NULL);
    parse_bad("sm9.json", "{\"arch\":\"sm9\",\"kernels\":{}}", DETD_EINVAL,
              "unknown architecture", NULL);
    parse_bad("sm1000.json", "{\"arch\":\"sm1000\",\"kernels\":{}}",
              DETD_EINVAL, "unknown architecture", NULL);
    parse_bad("t/sm80.json", "{\"arch\":\"sm90\",\"kernels\":{}}", DETD_EINVAL,
              "arch: 'sm90' does not match the file name", NULL);
    parse_bad("sm90.json", "{\"kernels\":{}}", DETD_EINVAL, "arch: missing",
              NULL);
    CHECK(tablefmt_arch_valid("sm90"));
    CHECK(tablefmt_arch_valid("sm100a"));
    CHECK(tablefmt_arch_valid("sm103"));
    CHECK(!tablefmt_arch_valid("sm90ab"));
    CHECK(!tablefmt_arch_valid("SM90"));
    CHECK(!tablefmt_arch_valid(NULL));
    struct tablefmt_doc *d =
        parse_ok("x/sm100a.json", "{\"arch\":\"sm100a\",\"kernels\":{}}");
    CHECK_EQ_INT(d->n_entries, 0);
    tablefmt_free(d);
}

TEST(caps) {
    struct tablefmt_limits lim = {64, 8, 2, 0};
    const char *small = "{\"arch\":\"sm90\",\"kernels\":{}}";
    const char *big = "{\"arch\":\"sm90\",\"kernels\":{}, \"source\": "
                      "\"0123456789012345678901234567890123456789\"}";
    struct tablefmt_doc *doc = NULL;
    char *err = NULL;
    CHECK_EQ_INT(
        tablefmt_parse("sm90.json", small, strlen(small), &lim, &doc, &err), 0);
    tablefmt_free(doc);
    doc = NULL;
    CHECK_EQ_INT(
        tablefmt_parse("sm90.json", big, strlen(big), &lim, &doc, &err),
        DETD_ELIMIT);
    CHECK(strstr(err, "sm90.json") && strstr(err, "cap of 64 bytes"));
    free(err);
    lim.max_file_bytes = 4096;
    const char *names =
        "{\"arch\":\"sm90\",\"kernels\":{\"a_long_kernel\":{}}}";
    CHECK_EQ_INT(
        tablefmt_parse("sm90.json", names, strlen(names), &lim, &doc, &err),
        DETD_ELIMIT);
    CHECK(strstr(err, "sm90.json") && strstr(err, "kernel name cap"));
    free(err);
    const char *keys = "{\"arch\":\"sm90\",\"kernels\":{\"k\":{\"[i:123456]"
                       "\":" ENTRY "}}}";
    CHECK_EQ_INT(
        tablefmt_parse("sm90.json", keys, strlen(keys), &lim, &doc, &err),
        DETD_ELIMIT);
    CHECK(strstr(err, "key cap") != NULL);
    free(err);
    const char *three = "{\"arch\":\"sm90\",\"kernels\":{\"k\":{\"a\":" ENTRY
                        ",\"b\":" ENTRY "},\"j\":{\"c\":" ENTRY "}}}";
    CHECK_EQ_INT(
        tablefmt_parse("sm90.json", three, strlen(three), &lim, &doc, &err),
        DETD_ELIMIT);
    CHECK(strstr(err, "entries cap") != NULL && strstr(err, "2 entries"));
    free(err);
    lim.max_entries = 3;
    CHECK_EQ_INT(
        tablefmt_parse("sm90.json", three, strlen(three), &lim, &doc, &err), 0);
    CHECK_EQ_INT(doc->n_entries, 3);
    tablefmt_free(doc);

    /* The file reader stops at the cap too. */
    char path[] = "/tmp/tablefmt-XXXXXX";
    CHECK(mkdtemp(path) != NULL);
    char file[256];
    snprintf(file, sizeof(file), "%s/sm90.json", path);
    FILE *f = fopen(file, "w");
    fputs(big, f);
    fclose(f);
    lim.max_file_bytes = 64;
    CHECK_EQ_INT(tablefmt_read_file(file, &lim, &doc, &err), DETD_ELIMIT);
    CHECK(strstr(err, file) && strstr(err, "cap of 64 bytes"));
    free(err);
    lim.max_file_bytes = 4096;
    CHECK_EQ_INT(tablefmt_read_file(file, &lim, &doc, &err), 0);
    tablefmt_free(doc);
    unlink(file);
    snprintf(file, sizeof(file), "%s/sm80.json", path);
    CHECK(tablefmt_read_file(file, &lim, &doc, &err) < 0);
    CHECK(strstr(err, "sm80.json") != NULL);
    free(err);
    rmdir(path);
}

/* Byte-equality with _canon.config_string, through the shared cases. */
TEST(render_matches_python) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tables/render_cases.json", DETD_TEST_DIR);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 7);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        char *cfg = NULL, *err = NULL;
        CHECK_EQ_INT(tablefmt_render_entry(json_object_get(c, "entry"), "case",
                                           &cfg, &err),
                     0);
        const char *want = json_string_value(json_object_get(c, "expected"));
        if (strcmp(cfg, want) != 0)
            fprintf(stderr, "case %zu:\n  C:      %s\n  Python: %s\n", i, cfg,
                    want);
        CHECK_STR(cfg, want);
        free(cfg);
    }
    json_decref(root);
}

TEST(repr_double) {
    char b[64];
    CHECK_STR(tablefmt_repr_double(0.1, b, sizeof(b)), "0.1");
    CHECK_STR(tablefmt_repr_double(1e16, b, sizeof(b)), "1e+16");
    CHECK_STR(tablefmt_repr_double(1e-5, b, sizeof(b)), "1e-05");
    CHECK_STR(tablefmt_repr_double(123.0, b, sizeof(b)), "123.0");
    CHECK_STR(tablefmt_repr_double(-0.0, b, sizeof(b)), "-0.0");
    CHECK_STR(tablefmt_repr_double(1.5e-7, b, sizeof(b)), "1.5e-07");
    CHECK_STR(tablefmt_repr_double(2.5e22, b, sizeof(b)), "2.5e+22");
    CHECK_STR(tablefmt_repr_double(0.001, b, sizeof(b)), "0.001");
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
