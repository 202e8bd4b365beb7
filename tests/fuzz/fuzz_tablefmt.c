/*
 * Fuzz target for the table parser (tablefmt_parse): any bytes must give
 * either a document whose every entry has a rendered config, or an error
 * naming the file; never a crash, a leak or undefined behaviour.
 *
 * With libFuzzer (clang -fsanitize=fuzzer,address,undefined) this file is
 * the target; linked with driver.c it runs under ctest with the normal
 * compiler (a seed corpus and deterministic mutations).
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
