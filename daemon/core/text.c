/*
 * text: string helpers (see text.h).
 */
#define _GNU_SOURCE
#include "core/text.h"

#include <string.h>

/* See text.h. */
char *text_dup(const char *s) {
    return strdup(s != NULL ? s : "");
}
