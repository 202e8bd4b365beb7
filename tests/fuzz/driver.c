/*
 * The plain fuzz driver: runs a libFuzzer target (LLVMFuzzerTestOneInput)
 * without libFuzzer, so that it runs under ctest with the normal compiler
 * and in the sanitizer build. Every file of a seed corpus directory is run,
 * then a fixed number of deterministic mutation chains of each (bit flips,
 * truncations, deleted runs, inserted JSON tokens).
 *
 *     fuzz_<name>_driver CORPUS_DIR [MUTATIONS_PER_SEED]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
                                      "\"maxnreg\"",
                                      "\"id\"",
                                      "\"source\"",
                                      "\"candidates_fp\"",
                                      "-9223372036854775809"};

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
