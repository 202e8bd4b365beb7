/* provfmt: how a timing pass measured (see provfmt.h). */
#include "provfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The string members, in their JSON names. */
#define PROVFMT_STRINGS(X)                                                     \
    X(torch_version, "torch_version")                                          \
    X(cuda_version, "cuda_version")                                            \
    X(driver, "driver")                                                        \
    X(package, "package")                                                      \
    X(package_version, "package_version")

static const char *nz(const char *s) {
    return s != NULL ? s : "";
}

static int str_bad(const char *s, const char *prefix, const char *field,
                   char *why, size_t len) {
    size_t n = strlen(nz(s));
    if (n > PROVFMT_MAX_STRING)
        snprintf(why, len, "%s.%s is %zu bytes, over the limit of %d", prefix,
                 field, n, PROVFMT_MAX_STRING);
    else if (strchr(nz(s), '\n') != NULL)
        snprintf(why, len, "%s.%s holds a newline", prefix, field);
    else
        return 0;
    return -1;
}

static int num_bad(double v, const char *prefix, const char *field, char *why,
                   size_t len) {
    if (isfinite(v) && v >= 0 && v <= PROVFMT_MAX_NUMBER)
        return 0;
    snprintf(why, len, "%s.%s is %g: not 0 to %g", prefix, field, v,
             PROVFMT_MAX_NUMBER);
    return -1;
}

/* See provfmt.h. */
int provfmt_check(const Detd__V1__TimingProvenance *t, const char *prefix,
                  char *why, size_t len) {
    if (t == NULL)
        return 0;
#define CHECK_STR(m, name)                                                     \
    if (str_bad(t->m, prefix, name, why, len))                                 \
        return -1;
    PROVFMT_STRINGS(CHECK_STR)
#undef CHECK_STR
    if (str_bad(t->benchmarker, prefix, "benchmarker", why, len) ||
        str_bad(t->return_mode, prefix, "return_mode", why, len) ||
        num_bad(t->warmup, prefix, "warmup", why, len) ||
        num_bad(t->rep, prefix, "rep", why, len))
        return -1;
    return 0;
}

static json_t *str_or_null(const char *s) {
    return s != NULL && s[0] != '\0' ? json_string(s) : json_null();
}

/* See provfmt.h. */
int provfmt_put(json_t *obj, const Detd__V1__TimingProvenance *t) {
    int rc = 0;
#define PUT_STR(m, name)                                                       \
    rc |= json_object_set_new(obj, name, str_or_null(t ? t->m : NULL));
    PROVFMT_STRINGS(PUT_STR)
#undef PUT_STR
    json_t *b = json_null();
    if (t != NULL && t->benchmarker != NULL && t->benchmarker[0] != '\0')
        b = json_pack("{s:s, s:f, s:f, s:s, s:b, s:b}", "name", t->benchmarker,
                      "warmup", t->warmup, "rep", t->rep, "return_mode",
                      nz(t->return_mode), "cuda_graphs", t->cuda_graphs,
                      "timing_lock", t->timing_lock);
    rc |= json_object_set_new(obj, "benchmarker", b);
    return rc != 0 || b == NULL ? -1 : 0;
}

static const char *get_str(const json_t *o, const char *name) {
    const char *s = json_string_value(json_object_get(o, name));
    return s != NULL ? s : "";
}

/* See provfmt.h. */
int provfmt_get(const json_t *obj, Detd__V1__TimingProvenance *ret) {
    detd__v1__timing_provenance__init(ret);
    if (!json_is_object(obj))
        return 0;
    int any = 0;
#define GET_STR(m, name)                                                       \
    ret->m = (char *)get_str(obj, name);                                       \
    any |= ret->m[0] != '\0';
    PROVFMT_STRINGS(GET_STR)
#undef GET_STR
    const json_t *b = json_object_get(obj, "benchmarker");
    if (json_is_object(b)) {
        ret->benchmarker = (char *)get_str(b, "name");
        ret->return_mode = (char *)get_str(b, "return_mode");
        ret->warmup = json_number_value(json_object_get(b, "warmup"));
        ret->rep = json_number_value(json_object_get(b, "rep"));
        ret->cuda_graphs = json_is_true(json_object_get(b, "cuda_graphs"));
        ret->timing_lock = json_is_true(json_object_get(b, "timing_lock"));
        any |= ret->benchmarker[0] != '\0';
    }
    return any;
}

/* See provfmt.h. */
char *provfmt_json(const Detd__V1__TimingProvenance *t) {
    json_t *o = json_object();
    char *s = NULL;
    if (o != NULL && provfmt_put(o, t) == 0)
        s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

/* See provfmt.h. */
const char *provfmt_field(const Detd__V1__Decision *d, const char *field) {
    const Detd__V1__TimingProvenance *t = d->timing;
    if (strcmp(field, "triton_version") == 0)
        return nz(d->triton_version);
    if (strcmp(field, "torch_version") == 0)
        return t ? nz(t->torch_version) : "";
    if (strcmp(field, "cuda_version") == 0)
        return t ? nz(t->cuda_version) : "";
    if (strcmp(field, "driver") == 0)
        return t ? nz(t->driver) : "";
    return NULL;
}
