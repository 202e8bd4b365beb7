/* strfmt: printf into a new heap string (strfmt.h). */
#define _GNU_SOURCE
#include "strfmt.h"

#include <stdarg.h>
#include <stdio.h>

/* See strfmt.h. */
char *strfmt(const char *fmt, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}
