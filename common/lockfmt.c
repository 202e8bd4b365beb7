/* lockfmt: the lockfile document (see lockfmt.h). */
#define _GNU_SOURCE
#include "lockfmt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "detd/client.h"
#include "detd/error.h"
#include "provfmt.h"

/* See lockfmt.h. */
void lockfmt_sha256_hex(const void *p, size_t n, char out[LOCKFMT_HEX + 1]) {
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* See lockfmt.h. */
void lockfmt_key_id(const char *ns, const char *arch, const char *kernel,
                    const char *key, const char *fp,
                    char out[LOCKFMT_HEX + 1]) {
    const char *parts[5] = {ns, arch, kernel, key, fp};
    size_t n = strlen("detd-key-v1\n");
    for (int i = 0; i < 5; i++)
        n += strlen(parts[i]) + (i > 0);
    char *b = malloc(n), *w = b;
    if (b == NULL) {
        out[0] = '\0';
        return;
    }
    w = stpcpy(w, "detd-key-v1\n");
    for (int i = 0; i < 5; i++) {
        if (i > 0)
            *w++ = '\0';
        memcpy(w, parts[i], strlen(parts[i]));
        w += strlen(parts[i]);
    }
    lockfmt_sha256_hex(b, n, out);
    free(b);
}

/* See lockfmt.h. */
int lockfmt_hash(const json_t *doc, char out[LOCKFMT_HEX + 1]) {
    json_t *c = json_copy((json_t *)doc);
    if (c == NULL)
        return DETD_ENOMEM;
    json_object_del(c, "sha256");
    char *s = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII |
                                JSON_REAL_PRECISION(17));
    json_decref(c);
    if (s == NULL)
        return DETD_ENOMEM;
    lockfmt_sha256_hex(s, strlen(s), out);
    free(s);
    return 0;
}

/* See lockfmt.h. */
int lockfmt_is_hex64(const char *s) {
    size_t n = 0;
    for (; s[n] != '\0'; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == LOCKFMT_HEX;
}

static const char *str_of(const json_t *o, const char *name) {
    return json_string_value(json_object_get(o, name));
}

/* See lockfmt.h. */
void lockfmt_free(struct lockfmt *l) {
    if (l == NULL)
        return;
    json_decref(l->doc);
    free(l->e);
    free(l);
}

/* The checks of a parsed document (why empty: it passed). */
static void check_doc(struct lockfmt *l, char *why, size_t len) {
    char hash[LOCKFMT_HEX + 1];
    const json_t *doc = l->doc;
    const char *kind = str_of(doc, "kind");
    json_t *entries = json_object_get(doc, "entries");
    l->sha256 = str_of(doc, "sha256");
    l->ns = str_of(doc, "namespace");
    if (!json_is_object(doc) || kind == NULL || strcmp(kind, LOCKFMT_KIND) != 0)
        snprintf(why, len, "kind: not \"%s\"", LOCKFMT_KIND);
    else if (json_integer_value(json_object_get(doc, "format")) !=
             LOCKFMT_FORMAT)
        snprintf(why, len, "format: not %d (a lockfile of another version?)",
                 LOCKFMT_FORMAT);
    else if (l->sha256 == NULL || !lockfmt_is_hex64(l->sha256))
        snprintf(why, len, "sha256: missing or not 64 lowercase hex digits");
    else if (lockfmt_hash(doc, hash) != 0)
        snprintf(why, len, "out of memory");
    else if (strcmp(hash, l->sha256) != 0)
        snprintf(why, len,
                 "content hash mismatch: the file says sha256 %s, its content "
                 "hashes to %s: it was changed after export (export it "
                 "again; a lock is not edited by hand)",
                 l->sha256, hash);
    else if (l->ns == NULL)
        snprintf(why, len, "namespace: missing");
    else if (!json_is_array(entries))
        snprintf(why, len, "entries: missing or not a list");
    size_t n = json_array_size(entries);
    if (why[0] == '\0' && (l->e = calloc(n + 1, sizeof(*l->e))) == NULL)
        snprintf(why, len, "out of memory");
    for (size_t i = 0; why[0] == '\0' && i < n; i++) {
        const json_t *j = json_array_get(entries, i);
        struct lockfmt_entry *e = &l->e[i];
        static const char *const names[] = {"id",  "arch",          "kernel",
                                            "key", "candidates_fp", "config"};
        const char **f[] = {&e->id,  &e->arch, &e->kernel,
                            &e->key, &e->fp,   &e->config};
        e->j = j;
        for (size_t k = 0; why[0] == '\0' && k < 6; k++)
            if ((*f[k] = str_of(j, names[k])) == NULL ||
                ((*f[k])[0] == '\0' && k != 3))
                snprintf(why, len, "entries[%zu].%s: missing", i, names[k]);
        json_int_t nc = json_integer_value(json_object_get(j, "n_candidates"));
        char id[LOCKFMT_HEX + 1];
        if (why[0] != '\0')
            break;
        if (!lockfmt_is_hex64(e->fp))
            snprintf(why, len,
                     "entries[%zu].candidates_fp: not 64 lowercase hex digits",
                     i);
        else if (nc < 1 || nc > DETD_MAX_CANDIDATES)
            snprintf(why, len, "entries[%zu].n_candidates: not 1 to %d", i,
                     DETD_MAX_CANDIDATES);
        else if (lockfmt_key_id(l->ns, e->arch, e->kernel, e->key, e->fp, id),
                 strcmp(id, e->id) != 0)
            snprintf(why, len,
                     "entries[%zu].id: not the id of its namespace, arch, "
                     "kernel, key and candidates_fp",
                     i);
    }
    l->n = n;
}

/* See lockfmt.h. */
int lockfmt_load(const char *path, struct lockfmt **ret, char *why,
                 size_t len) {
    struct stat sb;
    why[0] = '\0';
    if (stat(path, &sb) != 0) {
        int err = errno;
        snprintf(why, len, "%s", strerror(err));
        return -err;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > LOCKFMT_MAX_FILE) {
        snprintf(why, len, "%s",
                 S_ISREG(sb.st_mode) ? "larger than 64 MiB" : "not a file");
        return DETD_EINVAL;
    }
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (doc == NULL) {
        snprintf(why, len, "line %d: %s", je.line, je.text);
        return DETD_EINVAL;
    }
    struct lockfmt *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        json_decref(doc);
        return DETD_ENOMEM;
    }
    l->doc = doc;
    check_doc(l, why, len);
    if (why[0] != '\0') {
        lockfmt_free(l);
        return DETD_EINVAL;
    }
    *ret = l;
    return 0;
}

static const char *s0(const json_t *o, const char *name) {
    const char *s = str_of(o, name);
    return s != NULL ? s : "";
}

/* See lockfmt.h. */
int lockfmt_msg_fill(const struct lockfmt_entry *e, struct lockfmt_msg *m) {
    memset(m, 0, sizeof(*m));
    const json_t *p = json_object_get(e->j, "provenance");
    const json_t *by = json_object_get(p, "timed_by");
    const json_t *seen = json_object_get(p, "seen");
    const json_t *tm = json_object_get(p, "timings");
    detd__v1__decision__init(&m->d);
    m->d.id = (char *)e->id;
    m->d.arch = (char *)e->arch;
    m->d.kernel = (char *)e->kernel;
    m->d.key = (char *)e->key;
    m->d.candidates_fp = (char *)e->fp;
    m->d.config = (char *)e->config;
    m->d.n_candidates =
        (int32_t)json_integer_value(json_object_get(e->j, "n_candidates"));
    m->d.source = DETD__V1__SOURCE__SOURCE_IMPORT;
    m->d.triton_version = (char *)s0(p, "triton_version");
    m->d.decided_at_ms =
        json_integer_value(json_object_get(p, "decided_at_ms"));
    m->d.claim_id = strtoull(s0(p, "claim_id"), NULL, 10);
    if (json_is_object(by)) {
        detd__v1__client_identity__init(&m->by);
        m->by.host = (char *)s0(by, "host");
        m->by.pid = (int32_t)json_integer_value(json_object_get(by, "pid"));
        m->by.rank = (int32_t)json_integer_value(json_object_get(by, "rank"));
        m->by.local_rank =
            (int32_t)json_integer_value(json_object_get(by, "local_rank"));
        m->by.device_name = (char *)s0(by, "device_name");
        m->by.arch = (char *)s0(by, "arch");
        m->d.decided_by = &m->by;
    }
    if (json_is_object(seen)) {
        detd__v1__peer_identity__init(&m->peer);
        m->peer.pid = (int32_t)json_integer_value(json_object_get(seen, "pid"));
        m->peer.uid = json_integer_value(json_object_get(seen, "uid"));
        m->peer.node = (char *)s0(seen, "node");
        m->peer.claimed_pid =
            (int32_t)json_integer_value(json_object_get(seen, "claimed_pid"));
        m->d.decided_peer = &m->peer;
    }
    if (provfmt_get(p, &m->timing))
        m->d.timing = &m->timing;
    size_t nt = json_array_size(tm), ns = 0, i;
    json_t *t;
    json_array_foreach(tm, i, t) ns +=
        json_array_size(json_object_get(t, "ms"));
    m->t = calloc(nt + 1, sizeof(*m->t));
    m->tp = calloc(nt + 1, sizeof(*m->tp));
    m->ms = calloc(ns + 1, sizeof(*m->ms));
    if (m->t == NULL || m->tp == NULL || m->ms == NULL)
        return DETD_ENOMEM;
    size_t k = 0;
    json_array_foreach(tm, i, t) {
        Detd__V1__CandidateTiming *c = &m->t[i];
        detd__v1__candidate_timing__init(c);
        c->config = (char *)s0(t, "config");
        c->failed = json_is_true(json_object_get(t, "failed"));
        c->ms = m->ms + k;
        size_t j;
        json_t *v;
        json_array_foreach(json_object_get(t, "ms"), j, v) m->ms[k++] =
            json_number_value(v);
        c->n_ms = json_array_size(json_object_get(t, "ms"));
        m->tp[i] = c;
    }
    m->d.timings = m->tp;
    m->d.n_timings = nt;
    return 0;
}

/* See lockfmt.h. */
void lockfmt_msg_clear(struct lockfmt_msg *m) {
    free(m->t);
    free(m->tp);
    free(m->ms);
    m->t = NULL;
    m->tp = NULL;
    m->ms = NULL;
}
