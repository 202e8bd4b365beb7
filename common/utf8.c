/*
 * utf8: UTF-8 without NUL (see utf8.h).
 */
#include "utf8.h"

/* See utf8.h. */
utf8_result utf8_check(const uint8_t *s, size_t n, size_t *ret_offset) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xbf; /* range of the second byte */
        if (c == 0) {
            if (ret_offset != NULL)
                *ret_offset = i;
            return UTF8_NUL;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0)
                lo = 0xa0; /* overlong below U+0800 */
            else if (c == 0xed)
                hi = 0x9f; /* U+D800..U+DFFF: surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0)
                lo = 0x90; /* overlong below U+10000 */
            else if (c == 0xf4)
                hi = 0x8f; /* above U+10FFFF */
        } else {
            /* 0x80..0xc1: a continuation byte or an overlong lead;
             * 0xf5..0xff: never in UTF-8. */
            goto bad;
        }
        if (n - i - 1 < need)
            goto bad;
        if (s[i + 1] < lo || s[i + 1] > hi)
            goto bad;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                goto bad;
        i += need + 1;
        continue;
    bad:
        if (ret_offset != NULL)
            *ret_offset = i;
        return UTF8_INVALID;
    }
    return UTF8_OK;
}
