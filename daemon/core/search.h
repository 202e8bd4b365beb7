/*
 * search: keys that name a search instead of listing every candidate.
 * Pure functions, no I/O, no allocation.
 *
 * A tuner that walks a space too large to list (Inductor's coordinate
 * descent from a start config) sends a key whose candidates are exactly
 * two strings: the config the search starts from, and a descriptor
 * naming the search:
 *
 *   search:<method>;tune=<F>:<lo>-<hi>,<F>:<lo>-<hi>...[;<name>=<value>...]
 *
 * <method> and the other parts only identify the search: like any
 * candidate they enter the key's fingerprint, so a different tuner, radius
 * or release is a different key. tune names the fields the search may
 * change (identifiers, each once, at most SEARCH_MAX_FIELDS) and the
 * inclusive range of each (decimal integers, 1 <= lo <= hi <= 2^31-1).
 * No part holds ';' in its value; the descriptor is never itself a config
 * (keyid_has_candidate() says no to it).
 *
 * A config belongs to the search when it is the start config with only
 * tuned fields changed: the two strings, split at ',', have the same
 * number of parts; each part of the config equals the start's part, or
 * both are "<F>=<value>" with F tuned and the config's value a canonical
 * decimal integer (no sign, no leading zero) within F's range. The
 * daemon vouches for that shape; the client checks an answer against its
 * live tuner's own rules before it compiles it.
 */
#ifndef DETD_SEARCH_H
#define DETD_SEARCH_H

#include <stddef.h>
#include <string.h>

#define SEARCH_PREFIX "search:"
#define SEARCH_MAX_FIELDS 32

/* 1 when s (NULL: 0) begins with SEARCH_PREFIX, else 0. Inline: keyid.c
 * uses it and is compiled alone into some fuzz targets. */
static inline int search_is_descriptor(const char *s) {
    return s != NULL &&
           strncmp(s, SEARCH_PREFIX, sizeof(SEARCH_PREFIX) - 1) == 0;
}

/*
 * Check the candidates cands[0..n) of a key (each a NUL-terminated
 * string, borrowed for the call). A key with no descriptor is no search
 * key: 0 with *ret_desc -1. A search key (exactly two candidates, a
 * well-formed descriptor, a start config holding each tuned field once
 * with an integer value in its range): 0 with *ret_desc the descriptor's
 * index (the start is the other). Otherwise -1 with why (why_len bytes,
 * NUL-terminated) naming the candidate by index and what is wrong.
 */
int search_check_key(const char *const *cands, size_t n, int *ret_desc,
                     char *why, size_t why_len);

/*
 * 1 when config belongs to the search desc started at start (a search
 * key that passed search_check_key(); all borrowed for the call), else 0
 * with why (why_len bytes) naming the part that differs.
 */
int search_config_ok(const char *desc, const char *start, const char *config,
                     char *why, size_t why_len);

#endif /* DETD_SEARCH_H */
