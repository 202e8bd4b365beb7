/*
 * Fuzz target for the table parser (tablefmt_parse): any bytes must give
 * either a document whose every entry has a rendered config, or an error
 * naming the file; never a crash, a leak or undefined behaviour.
 *
 * With libFuzzer (clang -fsanitize=fuzzer,address,undefined) this file is
 * the target. Built with -DDETD_FUZZ_DRIVER it also has a main() that
 * runs every file of a seed corpus directory and a fixed number of
 * deterministic mutations of each (bit flips, truncations, splices of
 * JSON tokens), so it runs under ctest with the normal compiler.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "tablefmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Small caps so the cap paths are reached too. */
    struct tablefmt_limits lim = {1 << 20, 256, 2000, 0};
    struct tablefmt_doc *doc = NULL;
    char *err = NULL;
    int rc = tablefmt_parse("fuzz/sm90.json", data, size, &lim, &doc, &err);
    if (rc == 0) {
        if (err != NULL || doc == NULL || strcmp(doc->arch, "sm90") != 0)
            abort();
        for (size_t i = 0; i < doc->n_entries; i++)
            if (doc->entries[i].config == NULL ||
                doc->entries[i].kernel == NULL || doc->entries[i].key == NULL)
                abort();
        tablefmt_free(doc);
    } else {
        if (doc != NULL)
            abort();
        if (rc != DETD_EINVAL && rc != DETD_ELIMIT && rc != DETD_ENOMEM)
            abort();
        if (err != NULL && strstr(err, "fuzz/sm90.json") == NULL)
            abort();
        free(err);
    }
    return 0;
}

#ifdef DETD_FUZZ_DRIVER
#include <dirent.h>

static uint64_t rng_ = 0x9E3779B97F4A7C15ULL;

static uint64_t next_rand(void) {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
}

static const char *const tokens_[] = {"{",
                                      "}",
                                      "[",
                                      "]",
                                      ",",
                                      ":",
                                      "\"",
                                      "null",
                                      "true",
                                      "1e400",
                                      "-0",
                                      "1.5",
                                      "\"*\"",
                                      "\"kwargs\"",
                                      "\"arch\"",
                                      "\"sm90\"",
                                      "{}",
                                      "[]",
                                      "\\u0000",
                                      "\"num_warps\"",
                                      "9223372036854775808",
                                      "\"maxnreg\""};

static size_t mutate(const uint8_t *in, size_t n, uint8_t *out, size_t cap) {
    size_t m = n < cap ? n : cap;
    memcpy(out, in, m);
    switch (next_rand() % 4) {
    case 0: /* flip bits */
        for (int k = 0; k < 3 && m > 0; k++)
            out[next_rand() % m] ^= (uint8_t)(1u << (next_rand() % 8));
        return m;
    case 1: /* truncate */
        return m > 0 ? (size_t)(next_rand() % m) : 0;
    case 2: { /* insert a token */
        const char *t =
            tokens_[next_rand() % (sizeof(tokens_) / sizeof(tokens_[0]))];
        size_t tl = strlen(t), at = m > 0 ? next_rand() % m : 0;
        if (m + tl > cap)
            return m;
        memmove(out + at + tl, out + at, m - at);
        memcpy(out + at, t, tl);
        return m + tl;
    }
    default: { /* delete a run */
        if (m == 0)
            return 0;
        size_t at = next_rand() % m, len = 1 + next_rand() % 8;
        if (at + len > m)
            len = m - at;
        memmove(out + at, out + at + len, m - at - len);
        return m - len;
    }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS_PER_SEED]\n", argv[0]);
        return 2;
    }
    int per_seed = argc > 2 ? atoi(argv[2]) : 500;
    DIR *dh = opendir(argv[1]);
    if (dh == NULL) {
        perror(argv[1]);
        return 2;
    }
    size_t seeds = 0, runs = 0;
    struct dirent *de;
    static uint8_t in[1 << 16], buf[1 << 17], tmp[1 << 17];
    while ((de = readdir(dh)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        size_t n = fread(in, 1, sizeof(in), f);
        fclose(f);
        seeds++;
        LLVMFuzzerTestOneInput(in, n);
        runs++;
        /* Chains of mutations: each builds on the previous one. */
        memcpy(buf, in, n);
        size_t bn = n;
        for (int i = 0; i < per_seed; i++) {
            if (i % 16 == 0) {
                memcpy(buf, in, n);
                bn = n;
            }
            size_t tn = mutate(buf, bn, tmp, sizeof(tmp));
            LLVMFuzzerTestOneInput(tmp, tn);
            memcpy(buf, tmp, tn);
            bn = tn;
            runs++;
        }
    }
    closedir(dh);
    printf("%zu seeds, %zu inputs, no failure\n", seeds, runs);
    return seeds > 0 ? 0 : 1;
}
#endif
