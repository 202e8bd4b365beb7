/*
 * validate: request checks (see validate.h).
 */
#include "app/validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/limits.h"
#include "core/search.h"
#include "detd/client.h"

/* Answer call with an error; with call NULL say nothing. */
#define VFAIL(call, ...)                                                       \
    do {                                                                       \
        if ((call) != NULL)                                                    \
            rpc_fail((call), __VA_ARGS__);                                     \
    } while (0)

/* See validate.h. */
int validate_str(rpc_call *call, const char *what, const char *s, size_t max,
                 int required) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (required && n == 0) {
        VFAIL(call, RPC_INVALID_ARGUMENT, "%s is required", what);
        return -1;
    }
    if (n > max) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "%s is %zu bytes, over the limit of %zu bytes", what, n, max);
        return -1;
    }
    return 0;
}

/* See validate.h. */
int validate_identity(rpc_call *call, const Detd__V1__ClientIdentity *c) {
    if (c == NULL)
        return 0;
    const char *f[] = {c->host, c->device_name, c->arch, c->client_version,
                       c->job};
    const char *names[] = {"client.host", "client.device_name", "client.arch",
                           "client.client_version", "client.job"};
    for (int i = 0; i < 5; i++)
        if (validate_str(call, names[i], f[i], DAEMON_MAX_IDENTITY_STRING, 0))
            return -1;
    return 0;
}

/* See validate.h. */
int validate_candidates(rpc_call *call, const char *what,
                        const char *const *cands, size_t n) {
    if (n > DETD_MAX_CANDIDATES) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "%s has %zu configs, over the limit of %d", what, n,
              DETD_MAX_CANDIDATES);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(cands[i]);
        if (len == 0 || len > DAEMON_MAX_CONFIG) {
            VFAIL(call, RPC_INVALID_ARGUMENT,
                  "%s[%zu] is %zu bytes: must be 1 to %d", what, i, len,
                  DAEMON_MAX_CONFIG);
            return -1;
        }
        /* The fingerprint ends each candidate with '\n' (keyid.h): one
         * holding it could make two candidate sets hash alike. The other
         * fields of the id are joined with NUL, which no string from the
         * socket holds (rpc.c checks them on the wire). */
        if (memchr(cands[i], '\n', len) != NULL) {
            VFAIL(call, RPC_INVALID_ARGUMENT,
                  "%s[%zu] holds a newline (\\n), which separates "
                  "candidates in the key's fingerprint",
                  what, i);
            return -1;
        }
    }
    return 0;
}

/* See validate.h. */
int validate_key(const char *default_ns, rpc_call *call,
                 const Detd__V1__DecisionKey *k, struct vkey *ret) {
    if (k == NULL) {
        VFAIL(call, RPC_INVALID_ARGUMENT, "key is required");
        return -1;
    }
    if (validate_str(call, "key.namespace", k->namespace_, DAEMON_MAX_NAMESPACE,
                     0) ||
        validate_str(call, "key.arch", k->arch, DAEMON_MAX_ARCH, 1) ||
        validate_str(call, "key.kernel", k->kernel, DAEMON_MAX_KERNEL, 1) ||
        validate_str(call, "key.key", k->key, DETD_MAX_KEY_BYTES, 0) ||
        validate_str(call, "key.table_key", k->table_key, DETD_MAX_KEY_BYTES,
                     0))
        return -1;
    if (k->n_candidates == 0) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "key.candidates is empty: at least one config is required");
        return -1;
    }
    if (validate_candidates(call, "key.candidates",
                            (const char *const *)k->candidates,
                            k->n_candidates) != 0)
        return -1;
    char why[512];
    if (search_check_key((const char *const *)k->candidates, k->n_candidates,
                         &ret->search, why, sizeof why) != 0) {
        VFAIL(call, RPC_INVALID_ARGUMENT, "key.candidates%s", why);
        return -1;
    }
    ret->k = k;
    ret->ns = k->namespace_ != NULL && k->namespace_[0] != '\0' ? k->namespace_
                                                                : default_ns;
    if (keyid_candidates_fp((const char *const *)k->candidates, k->n_candidates,
                            ret->fp) != 0) {
        VFAIL(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    keyid_decision_id(ret->ns, k->arch, k->kernel, k->key ? k->key : "",
                      ret->fp, ret->id);
    return 0;
}

/* See validate.h. */
int validate_pass_call(const char *default_ns, rpc_call *call,
                       const Detd__V1__ClientIdentity *c,
                       const Detd__V1__DecisionKey *k, const char *device,
                       struct vkey *ret) {
    if (validate_identity(call, c) != 0 ||
        validate_key(default_ns, call, k, ret) != 0)
        return -1;
    return validate_str(call, "device", device, DAEMON_MAX_IDENTITY_STRING, 0);
}

/* See validate.h. */
int validate_has_candidate(const Detd__V1__DecisionKey *k, const char *config) {
    return keyid_has_candidate(config, (const char *const *)k->candidates,
                               k->n_candidates);
}

/* A runtime finding's text: required where named so, capped, and free of
 * control characters (verify prints it on a line of its own). */
static int validate_runtime_text(rpc_call *call, const char *what,
                                 const char *s, int required) {
    if (validate_str(call, what, s, DAEMON_MAX_RUNTIME_TEXT, required) != 0)
        return -1;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        if (*p < 0x20 || *p == 0x7f) {
            VFAIL(call, RPC_INVALID_ARGUMENT,
                  "%s contains the control character 0x%02x at byte %zu", what,
                  (unsigned)*p, (size_t)(p - (const unsigned char *)s));
            return -1;
        }
    return 0;
}

/* The kinds of SOURCE_RUNTIME observations (proto/detd.proto, Source). */
static const char *const runtime_kinds[] = {"runtime::op", "runtime::sdpa",
                                            "runtime::setting"};

/* The source and, for SOURCE_RUNTIME, the finding's fields; no other
 * source may use a kernel of the runtime:: kinds. */
static int validate_observe_source(rpc_call *call,
                                   const Detd__V1__ObserveRequest *req) {
    const char *kernel = req->key && req->key->kernel ? req->key->kernel : "";
    int runtime = req->source == DETD__V1__SOURCE__SOURCE_RUNTIME;
    if ((int)req->source < DETD__V1__SOURCE__SOURCE_UNSPECIFIED ||
        (int)req->source > DETD__V1__SOURCE__SOURCE_RUNTIME) {
        VFAIL(call, RPC_INVALID_ARGUMENT, "source %d is not a Source",
              (int)req->source);
        return -1;
    }
    if (!runtime) {
        if (strncmp(kernel, "runtime::", 9) == 0) {
            VFAIL(call, RPC_INVALID_ARGUMENT,
                  "key.kernel '%.64s' is a runtime finding's kind: it needs "
                  "source RUNTIME",
                  kernel);
            return -1;
        }
        return 0;
    }
    int known = 0;
    for (size_t i = 0; i < sizeof runtime_kinds / sizeof *runtime_kinds; i++)
        known |= strcmp(kernel, runtime_kinds[i]) == 0;
    if (!known) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "key.kernel '%.64s' is not a runtime finding's kind "
              "(runtime::op, runtime::sdpa, runtime::setting)",
              kernel);
        return -1;
    }
    if (req->governed || req->failed || req->chaos ||
        (req->audit != NULL &&
         req->audit->status != DETD__V1__AUDIT_STATUS__AUDIT_NONE)) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "a runtime finding (source RUNTIME) is never governed, failed, "
              "chaos or audited");
        return -1;
    }
    return validate_runtime_text(call, "key.key", req->key->key, 1) != 0 ||
                   validate_runtime_text(call, "config", req->config, 0) != 0
               ? -1
               : 0;
}

/* See validate.h. */
int validate_pass_config(const struct vkey *vk, const char *config, char *why,
                         size_t why_len) {
    if (validate_has_candidate(vk->k, config))
        return 1;
    if (vk->search < 0) {
        snprintf(why, why_len, "is not one of the key's candidates");
        return 0;
    }
    const char *desc = vk->k->candidates[vk->search];
    const char *start = vk->k->candidates[vk->search == 0 ? 1 : 0];
    char sub[400];
    if (search_config_ok(desc, start, config, sub, sizeof sub))
        return 1;
    snprintf(why, why_len, "is not a config of the key's search: %s", sub);
    return 0;
}

/* See validate.h. */
int validate_observe_extra(rpc_call *call, const Detd__V1__ObserveRequest *req,
                           char **ret_differing) {
    if (validate_str(call, "error", req->error, DAEMON_MAX_NOTE, 0) != 0 ||
        validate_str(call, "why", req->why, DAEMON_MAX_NOTE, 0) != 0 ||
        validate_observe_source(call, req) != 0)
        return -1;
    const Detd__V1__AuditResult *a = req->audit;
    size_t n = a != NULL ? a->n_differing : 0;
    if (a != NULL && (a->status < DETD__V1__AUDIT_STATUS__AUDIT_NONE ||
                      a->status > DETD__V1__AUDIT_STATUS__AUDIT_ERROR)) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "audit.status %d is not an "
              "AuditStatus",
              (int)a->status);
        return -1;
    }
    if (n > DAEMON_MAX_AUDIT_ARGS) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "audit.differing has %zu names, over the limit of %d", n,
              DAEMON_MAX_AUDIT_ARGS);
        return -1;
    }
    size_t len = 1;
    for (size_t i = 0; i < n; i++) {
        const char *s = a->differing[i];
        if (validate_str(call, "audit.differing[]", s,
                         DAEMON_MAX_IDENTITY_STRING, 1) != 0)
            return -1;
        if (strchr(s, '\n') != NULL) {
            VFAIL(call, RPC_INVALID_ARGUMENT,
                  "audit.differing[%zu] contains a newline", i);
            return -1;
        }
        len += strlen(s) + 1;
    }
    char *j = malloc(len);
    if (j == NULL) {
        VFAIL(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    j[0] = '\0';
    for (size_t i = 0, off = 0; i < n; i++) {
        size_t m = strlen(a->differing[i]);
        if (i > 0)
            j[off++] = '\n';
        memcpy(j + off, a->differing[i], m + 1);
        off += m;
    }
    *ret_differing = j;
    return 0;
}
