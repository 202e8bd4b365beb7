/*
 * Fuzz target for the check of received strings (wirecheck_message):
 * the request bytes of every RPC method are untrusted. The first byte of
 * the input picks the request type (a row of rpc_methods.h), the rest is
 * the message. Any input must give 0, DETD_EINVAL naming a field, or
 * DETD_EPROTO, never a crash or undefined behaviour; and against
 * protobuf-c's own decoder: bytes it decodes are never called malformed,
 * and what it decodes from bytes that passed has only valid strings.
 *
 * With libFuzzer (clang -fsanitize=fuzzer,address,undefined) this file is
 * the target; linked with driver.c it runs under ctest with the normal
 * compiler (a seed corpus and deterministic mutations).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/wirecheck.h"
#include "detd.pb-c.h"
#include "detd/error.h"
#include "health.pb-c.h"
#include "io/rpc_methods.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUEST_DESC(name, path, desc, streaming, admin, handler) &desc,
static const ProtobufCMessageDescriptor *const requests[] = {
    RPC_METHODS(REQUEST_DESC)};
#undef REQUEST_DESC
enum { NREQUESTS = sizeof(requests) / sizeof(requests[0]) };

/* Every string of a decoded message, sub-messages included, is valid. */
static int strings_valid(const ProtobufCMessage *m) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *base = (const char *)m + f->offset;
        size_t n = 1;
        const void *const *items = (const void *const *)base;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)((const char *)m + f->quantifier_offset);
            items = *(const void *const *const *)base;
        }
        for (size_t k = 0; k < n; k++) {
            const void *v = items[k];
            if (v == NULL)
                continue;
            if (f->type == PROTOBUF_C_TYPE_STRING &&
                utf8_check(v, strlen(v), NULL) != UTF8_OK)
                return 0;
            if (f->type == PROTOBUF_C_TYPE_MESSAGE && !strings_valid(v))
                return 0;
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    const ProtobufCMessageDescriptor *d = requests[data[0] % NREQUESTS];
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    char why[256];
    memset(why, 0x5a, sizeof(why));
    int rc = wirecheck_message(d, b, n, why, sizeof(why));
    if (rc != 0 && rc != DETD_EINVAL && rc != DETD_EPROTO)
        abort();
    if (memchr(why, '\0', sizeof(why)) == NULL)
        abort();
    if (rc == DETD_EINVAL && strstr(why, " holds a NUL byte") == NULL &&
        strstr(why, " is not valid UTF-8 (byte ") == NULL)
        abort();
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, b);
    if (m != NULL) {
        if (rc == DETD_EPROTO)
            abort();
        if (rc == 0 && !strings_valid(m))
            abort();
        protobuf_c_message_free_unpacked(m, NULL);
    }
    return 0;
}
