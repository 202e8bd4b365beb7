/*
 * strfmt: printf into a new heap string, for error messages handed to a
 * caller (the "char **ret_errmsg" convention of the daemon's modules).
 */
#ifndef DETD_STRFMT_H
#define DETD_STRFMT_H

/*
 * Format into a malloc'd string the caller frees. Returns NULL when out of
 * memory (callers treat a NULL message as "no details").
 */
char *strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* DETD_STRFMT_H */
