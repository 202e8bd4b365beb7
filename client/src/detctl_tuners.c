/* detctl_tuners: the autotuners of `detctl verify` (see detctl_tuners.h). */
#include "detctl_tuners.h"

#include <stdio.h>
#include <string.h>

/* See detctl_tuners.h. */
const char *detctl_tuner_kind(const char *kernel) {
    if (strncmp(kernel, "inductor::", 10) == 0)
        return "inductor";
    if (strncmp(kernel, "native::", 8) == 0)
        return "native";
    if (strncmp(kernel, "helion::", 8) == 0)
        return "helion";
    if (strncmp(kernel, "timing::", 8) == 0)
        return "timing"; /* a call site timing outside detd (detd._timing) */
    return "triton";
}

/* See detctl_tuners.h. */
void detctl_tuners_add(json_t *tuners, const Detd__V1__Observation *x) {
    if (strstr(x->kernel, "#pruning") != NULL)
        return; /* the companion key of a pruner, not an autotuner */
    json_t *t = json_object_get(tuners, x->kernel);
    if (t == NULL) {
        t = json_pack("{s:s, s:s, s:b, s:b, s:b, s:i, s:s}", "kernel",
                      x->kernel, "kind", detctl_tuner_kind(x->kernel),
                      "governed", 0, "ungoverned", 0, "cannot_govern", 0,
                      "keys", 0, "why", "");
        if (t == NULL || json_object_set_new(tuners, x->kernel, t) != 0)
            return;
    }
    json_object_set_new(t, x->governed ? "governed" : "ungoverned",
                        json_true());
    /* Not left out on purpose: a tuner detd could not govern (it bypasses
     * Autotuner.run), or a call site timing candidates itself. */
    if (!x->governed && (x->source == DETD__V1__SOURCE__SOURCE_UNGOVERNED ||
                         strcmp(detctl_tuner_kind(x->kernel), "timing") == 0))
        json_object_set_new(t, "cannot_govern", json_true());
    if (!x->governed && x->why != NULL && x->why[0] != '\0')
        json_object_set_new(t, "why", json_string(x->why));
}

/* See detctl_tuners.h. */
void detctl_tuners_print(const json_t *doc) {
    size_t i;
    json_t *f;
    static const char *const kinds[] = {"triton", "inductor", "native",
                                        "helion", "timing"};
    char line[256] = "";
    size_t len = 0;
    for (size_t m = 0; m < sizeof kinds / sizeof *kinds; m++) {
        size_t nk = 0, ng = 0;
        json_array_foreach(json_object_get(doc, "autotuners"), i, f) {
            if (strcmp(json_string_value(json_object_get(f, "kind")),
                       kinds[m]) != 0)
                continue;
            nk++;
            ng += json_is_true(json_object_get(f, "governed")) &&
                  !json_is_true(json_object_get(f, "ungoverned"));
        }
        if (nk > 0 && len < sizeof line)
            len += (size_t)snprintf(line + len, sizeof line - len,
                                    "%s%s %zu (%zu governed)", len ? ", " : "",
                                    kinds[m], nk, ng);
    }
    if (line[0] != '\0')
        printf("autotuners: %s\n", line);
    json_array_foreach(json_object_get(doc, "autotuners"), i, f) {
        if (!json_is_true(json_object_get(f, "ungoverned")))
            continue;
        const char *why = json_string_value(json_object_get(f, "why"));
        printf("UNGOVERNED %s %s: %s\n",
               json_string_value(json_object_get(f, "kind")),
               json_string_value(json_object_get(f, "kernel")),
               why && why[0] ? why : "not governed (no reason sent)");
    }
}
