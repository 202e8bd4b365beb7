/*
 * utf8: the check of a string's bytes that the daemon makes of every
 * string it receives (daemon/core/wirecheck.c) and libdetd of the strings
 * it keeps for later calls. Pure function, no I/O.
 */
#ifndef DETD_UTF8_H
#define DETD_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* What utf8_check() found. */
typedef enum utf8_result {
    UTF8_OK = 0,
    UTF8_NUL = 1,     /* a NUL byte */
    UTF8_INVALID = 2, /* not a valid UTF-8 sequence */
} utf8_result;

/*
 * Check n bytes at s (borrowed for the call; NULL allowed when n is 0):
 * valid UTF-8 (RFC 3629: overlong forms, surrogates and code points
 * above U+10FFFF are invalid) without a NUL byte. On a problem
 * *ret_offset (may be NULL) is the offset of the first byte of the
 * offending sequence.
 */
utf8_result utf8_check(const uint8_t *s, size_t n, size_t *ret_offset);

#endif /* DETD_UTF8_H */
