/*
 * Fuzz target for the etcd backend's decision decoder
 * (cluster_decision_decode): the values it reads from etcd are untrusted
 * bytes. Any input must give either a decision whose id is the hash of its
 * key fields and whose config is set, or DETD_EPROTO / DETD_ELIMIT /
 * DETD_ENOMEM with nothing returned; never a crash, a leak or undefined
 * behaviour.
 *
 * With libFuzzer (clang -fsanitize=fuzzer,address,undefined) this file is
 * the target; linked with driver.c it runs under ctest with the normal
 * compiler (a seed corpus and deterministic mutations).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "detd/error.h"
#include "core/keyid.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct decision d;
    memset(&d, 0x5a, sizeof(d)); /* must stay untouched on failure */
    char *writer = NULL;
    int rc = cluster_decision_decode((const char *)data, size, &d, &writer);
    if (rc == 0) {
        char id[KEYID_HEX_LEN + 1];
        keyid_decision_id(d.ns, d.arch, d.kernel, d.key, d.candidates_fp, id);
        if (strcmp(id, d.id) != 0 || d.config == NULL || d.config[0] == '\0' ||
            d.source < 0 || d.source > 7)
            abort();
        decision_clear(&d);
        free(writer);
        return 0;
    }
    if (rc != DETD_EPROTO && rc != DETD_ELIMIT && rc != DETD_ENOMEM)
        abort();
    if (writer != NULL)
        abort();
    return 0;
}
