/*
 * wirecheck: strings checked on the wire (see wirecheck.h).
 *
 * The walk reads the encoding as protobuf-c does (tags and lengths of at
 * most 5 bytes, varints of at most 10, no groups) and refuses what it
 * cannot read, so every string protobuf-c would hand out has been seen
 * here first; bytes it refuses, protobuf-c refuses too.
 */
#include "core/wirecheck.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "detd/error.h"
#include "utf8.h"

/* Fields of one message whose occurrences are counted for "[i]". */
#define WIRECHECK_MAX_FIELDS 64
#define WIRECHECK_PATH 256

struct walk {
    const uint8_t *base; /* the whole message, for offsets */
    char *why;
    size_t why_len;
    char path[WIRECHECK_PATH];
    size_t plen;
};

/* Read a varint of at most max bytes at p[0..n): its length, 0 if bad. */
static size_t read_varint(const uint8_t *p, size_t n, size_t max,
                          uint64_t *ret) {
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < max; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0) {
            *ret = v;
            return i + 1;
        }
    }
    return 0;
}

/*
 * Read a tag as protobuf-c does: at most 5 bytes, bits past 32 dropped, a
 * first byte naming field 0 refused. Returns its length, 0 if bad.
 */
static size_t read_tag(const uint8_t *p, size_t n, uint32_t *ret_id,
                       unsigned *ret_wire) {
    if (n == 0 || (p[0] & 0xf8) == 0)
        return 0;
    uint32_t id = (uint32_t)(p[0] & 0x7f) >> 3;
    unsigned shift = 4;
    *ret_wire = p[0] & 7;
    if ((p[0] & 0x80) == 0) {
        *ret_id = id;
        return 1;
    }
    for (size_t i = 1; i < n && i < 5; i++, shift += 7) {
        id |= (uint32_t)((uint64_t)(p[i] & 0x7f) << shift);
        if ((p[i] & 0x80) == 0) {
            *ret_id = id;
            return i + 1;
        }
    }
    return 0;
}

/* Append ".name" (or "name" at the start) and "[index]" when index >= 0
 * to the path; returns the length to restore. A path over the buffer is
 * cut short, ending in "...". */
static size_t path_push(struct walk *w, const char *name, long index) {
    size_t saved = w->plen;
    size_t room = sizeof(w->path) - w->plen;
    int k;
    if (index >= 0)
        k = snprintf(w->path + w->plen, room, "%s%s[%ld]",
                     w->plen > 0 ? "." : "", name, index);
    else
        k = snprintf(w->path + w->plen, room, "%s%s", w->plen > 0 ? "." : "",
                     name);
    if (k < 0 || (size_t)k >= room) {
        memcpy(w->path + sizeof(w->path) - 4, "...", 4);
        w->plen = sizeof(w->path) - 1;
    } else {
        w->plen += (size_t)k;
    }
    return saved;
}

static void path_pop(struct walk *w, size_t saved) {
    w->plen = saved;
    w->path[saved] = '\0';
}

static int malformed(struct walk *w, const uint8_t *at, const char *what) {
    if (w->why != NULL && w->why_len > 0)
        snprintf(w->why, w->why_len, "malformed message: %s at byte %zu%s%s",
                 what, (size_t)(at - w->base), w->plen > 0 ? " in " : "",
                 w->path);
    return DETD_EPROTO;
}

static const ProtobufCFieldDescriptor *
find_field(const ProtobufCMessageDescriptor *d, uint32_t id, size_t *ret_i) {
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].id == id) {
            *ret_i = i;
            return &d->fields[i];
        }
    return NULL;
}

static int walk_message(struct walk *w, const ProtobufCMessageDescriptor *d,
                        const uint8_t *p, size_t n, int depth) {
    uint32_t seen[WIRECHECK_MAX_FIELDS];
    memset(seen, 0, sizeof(seen));
    size_t at = 0;
    while (at < n) {
        uint32_t id = 0;
        unsigned wire = 0;
        size_t k = read_tag(p + at, n - at, &id, &wire);
        if (k == 0)
            return malformed(w, p + at, "bad tag");
        const uint8_t *rec = p + at;
        at += k;
        uint64_t len = 0;
        switch (wire) {
        case 0: /* varint */
            k = read_varint(p + at, n - at, 10, &len);
            if (k == 0)
                return malformed(w, rec, "bad varint");
            at += k;
            len = 0;
            break;
        case 1: /* 64-bit */
        case 5: /* 32-bit */
            len = wire == 1 ? 8 : 4;
            if (n - at < len)
                return malformed(w, rec, "truncated field");
            break;
        case 2: /* length-delimited */
            k = read_varint(p + at, n - at, 5, &len);
            if (k == 0 || len > INT_MAX || n - at - k < len)
                return malformed(w, rec, "bad length");
            at += k;
            break;
        default: /* groups (3, 4) and 6, 7: protobuf-c reads none */
            return malformed(w, rec, "unsupported wire type");
        }
        size_t fi = 0;
        const ProtobufCFieldDescriptor *f = find_field(d, id, &fi);
        if (f != NULL && (f->type == PROTOBUF_C_TYPE_STRING ||
                          f->type == PROTOBUF_C_TYPE_MESSAGE)) {
            if (wire != 2)
                return malformed(w, rec, "wrong wire type");
            long index = -1;
            if (f->label == PROTOBUF_C_LABEL_REPEATED)
                index = fi < WIRECHECK_MAX_FIELDS ? (long)seen[fi]++ : -1;
            size_t saved = path_push(w, f->name, index);
            int rc = 0;
            if (f->type == PROTOBUF_C_TYPE_STRING) {
                size_t off = 0;
                utf8_result r = utf8_check(p + at, (size_t)len, &off);
                if (r != UTF8_OK) {
                    if (w->why != NULL && w->why_len > 0) {
                        if (r == UTF8_NUL)
                            snprintf(w->why, w->why_len, "%s holds a NUL byte",
                                     w->path);
                        else
                            snprintf(w->why, w->why_len,
                                     "%s is not valid UTF-8 (byte %zu)",
                                     w->path, off);
                    }
                    rc = DETD_EINVAL;
                }
            } else if (depth + 1 > WIRECHECK_MAX_DEPTH) {
                rc = malformed(w, rec, "nested too deeply");
            } else if (f->descriptor != NULL) {
                rc = walk_message(w, f->descriptor, p + at, (size_t)len,
                                  depth + 1);
            }
            if (rc != 0)
                return rc;
            path_pop(w, saved);
        }
        at += (size_t)len;
    }
    return 0;
}

/* See wirecheck.h. */
int wirecheck_message(const ProtobufCMessageDescriptor *desc,
                      const uint8_t *buf, size_t len, char *why,
                      size_t why_len) {
    if (why != NULL && why_len > 0)
        why[0] = '\0';
    if (desc == NULL || (buf == NULL && len > 0))
        return DETD_EINVAL;
    struct walk w;
    w.base = buf;
    w.why = why;
    w.why_len = why_len;
    w.path[0] = '\0';
    w.plen = 0;
    return walk_message(&w, desc, buf, len, 0);
}
