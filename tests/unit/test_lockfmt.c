/*
 * lockfmt and provfmt: how a decision was timed, as the daemon checks it,
 * stores it and a lockfile carries it (a round trip through the JSON,
 * the content hash covering it, the checks naming the field), and the
 * fields a run can require of a lock entry.
 */
#define _GNU_SOURCE
#include "lockfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "detd/error.h"
#include "provfmt.h"
#include "runner.h"

static Detd__V1__TimingProvenance full(void) {
    Detd__V1__TimingProvenance t = DETD__V1__TIMING_PROVENANCE__INIT;
    t.benchmarker = "triton.testing.do_bench";
    t.warmup = 25;
    t.rep = 100;
    t.return_mode = "quantiles=0.5,0.2,0.8";
    t.cuda_graphs = 0;
    t.timing_lock = 1;
    t.torch_version = "2.11.0+cu128";
    t.cuda_version = "12.8";
    t.driver = "12.9";
    t.package = "flash-linear-attention";
    t.package_version = "0.3.1";
    return t;
}

static void check_same(const Detd__V1__TimingProvenance *a,
                       const Detd__V1__TimingProvenance *b) {
    CHECK_STR(a->benchmarker, b->benchmarker);
    CHECK(a->warmup == b->warmup && a->rep == b->rep);
    CHECK_STR(a->return_mode, b->return_mode);
    CHECK_EQ_INT(a->cuda_graphs, b->cuda_graphs);
    CHECK_EQ_INT(a->timing_lock, b->timing_lock);
    CHECK_STR(a->torch_version, b->torch_version);
    CHECK_STR(a->cuda_version, b->cuda_version);
    CHECK_STR(a->driver, b->driver);
    CHECK_STR(a->package, b->package);
    CHECK_STR(a->package_version, b->package_version);
}

TEST(provenance_round_trip_through_its_json) {
    Detd__V1__TimingProvenance t = full(), back;
    char *s = provfmt_json(&t);
    CHECK(s != NULL);
    json_t *o = json_loads(s, 0, NULL);
    CHECK(provfmt_get(o, &back) == 1);
    check_same(&t, &back);
    json_decref(o);
    free(s);
    /* Nothing said: every member null, and nothing read back. */
    s = provfmt_json(NULL);
    CHECK_STR(s, "{\"benchmarker\":null,\"cuda_version\":null,\"driver\":null,"
                 "\"package\":null,\"package_version\":null,\"torch_version\":"
                 "null}");
    o = json_loads(s, 0, NULL);
    CHECK(provfmt_get(o, &back) == 0);
    CHECK_STR(back.torch_version, "");
    json_decref(o);
    free(s);
}

TEST(provenance_checks_name_the_field) {
    Detd__V1__TimingProvenance t = full();
    char why[256];
    CHECK_EQ_INT(provfmt_check(&t, "timing", why, sizeof why), 0);
    CHECK_EQ_INT(provfmt_check(NULL, "timing", why, sizeof why), 0);
    char big[PROVFMT_MAX_STRING + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    t.package_version = big;
    CHECK_EQ_INT(provfmt_check(&t, "decisions[2].timing", why, sizeof why), -1);
    CHECK_STR(why, "decisions[2].timing.package_version is 257 bytes, over "
                   "the limit of 256");
    t = full();
    t.driver = "12.9\nforged line";
    CHECK_EQ_INT(provfmt_check(&t, "timing", why, sizeof why), -1);
    CHECK_STR(why, "timing.driver holds a newline");
    t = full();
    t.rep = NAN;
    CHECK_EQ_INT(provfmt_check(&t, "timing", why, sizeof why), -1);
    CHECK_STR(why, "timing.rep is nan: not 0 to 1e+09");
    t = full();
    t.warmup = -1;
    CHECK_EQ_INT(provfmt_check(&t, "timing", why, sizeof why), -1);
    CHECK_STR(why, "timing.warmup is -1: not 0 to 1e+09");
}

TEST(requirable_fields) {
    Detd__V1__TimingProvenance t = full();
    Detd__V1__Decision d = DETD__V1__DECISION__INIT;
    d.triton_version = "3.6.0";
    CHECK_STR(provfmt_field(&d, "triton_version"), "3.6.0");
    CHECK_STR(provfmt_field(&d, "torch_version"), ""); /* not recorded */
    d.timing = &t;
    CHECK_STR(provfmt_field(&d, "torch_version"), "2.11.0+cu128");
    CHECK_STR(provfmt_field(&d, "cuda_version"), "12.8");
    CHECK_STR(provfmt_field(&d, "driver"), "12.9");
    /* Informational only: not a field a run can require. */
    CHECK(provfmt_field(&d, "package_version") == NULL);
    CHECK(provfmt_field(&d, "benchmarker") == NULL);
}

/* A lockfile of one entry whose provenance says t, hashed (or not). */
static void write_lock(const char *path, const Detd__V1__TimingProvenance *t,
                       int rehash) {
    const char *ns = "default", *arch = "sm90", *kernel = "m:k@1",
               *key = "[i:1]";
    char fp[LOCKFMT_HEX + 1], id[LOCKFMT_HEX + 1], hash[LOCKFMT_HEX + 1];
    lockfmt_sha256_hex("x", 1, fp);
    lockfmt_key_id(ns, arch, kernel, key, fp, id);
    json_t *prov = json_pack("{s:s, s:s}", "triton_version", "3.6.0", "device",
                             "NVIDIA H200");
    CHECK_EQ_INT(provfmt_put(prov, t), 0);
    json_t *doc = json_pack(
        "{s:s, s:i, s:s, s:[{s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:o}]}", "kind",
        LOCKFMT_KIND, "format", LOCKFMT_FORMAT, "namespace", ns, "entries",
        "id", id, "arch", arch, "kernel", kernel, "key", key, "candidates_fp",
        fp, "n_candidates", 2, "config", "BLOCK=64", "provenance", prov);
    CHECK_EQ_INT(lockfmt_hash(doc, hash), 0);
    json_object_set_new(doc, "sha256", json_string(hash));
    if (!rehash) /* changed after export */
        json_object_set_new(
            json_object_get(json_array_get(json_object_get(doc, "entries"), 0),
                            "provenance"),
            "driver", json_string("13.0"));
    CHECK_EQ_INT(json_dump_file(doc, path, JSON_INDENT(2)), 0);
    json_decref(doc);
}

TEST(a_lock_entry_carries_its_provenance_and_the_hash_covers_it) {
    char path[] = "/tmp/detd-lockfmt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    Detd__V1__TimingProvenance t = full();
    write_lock(path, &t, 1);
    struct lockfmt *l = NULL;
    char why[512];
    CHECK_EQ_INT(lockfmt_load(path, &l, why, sizeof why), 0);
    CHECK_EQ_INT((int)l->n, 1);
    struct lockfmt_msg m;
    CHECK_EQ_INT(lockfmt_msg_fill(&l->e[0], &m), 0);
    CHECK(m.d.timing != NULL);
    check_same(m.d.timing, &t);
    CHECK_STR(provfmt_field(&m.d, "driver"), "12.9");
    lockfmt_msg_clear(&m);
    lockfmt_free(l);

    write_lock(path, &t, 0);
    l = NULL;
    CHECK_EQ_INT(lockfmt_load(path, &l, why, sizeof why), DETD_EINVAL);
    CHECK(l == NULL);
    CHECK(strstr(why, "content hash mismatch: the file says sha256 ") == why);
    unlink(path);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
