/*
 * detctl_key: what an operator types for a kernel and a key, turned into
 * what the daemon stores. Pure string work (no daemon, no allocation
 * beyond the result).
 *
 * Kernels are stored as "module:qualname@guard" (client/python/detd/
 * _canon.py: kernel_identity). detctl accepts that id, "module:qualname"
 * (every code version of it) or a bare name (the qualname, or its last
 * dotted part: "row_sum" matches "mod:row_sum@..." and "mod:Cls.row_sum@...").
 *
 * Keys are stored in the canonical, type-tagged form ("[i:1024,s:\"torch.
 * float32\"]", _canon.key_string). detctl also accepts the key as Triton
 * prints it, a Python tuple repr: "(1024, 'torch.float32')".
 */
#ifndef DETD_DETCTL_KEY_H
#define DETD_DETCTL_KEY_H

#include <stddef.h>

/* Forms of a --kernel argument. */
enum detctl_kernel_form {
    DETCTL_KERNEL_ID,       /* "module:qualname@guard": exact */
    DETCTL_KERNEL_QUALNAME, /* "module:qualname": every guard */
    DETCTL_KERNEL_BARE,     /* "name": the qualname or its last part */
};

/* The form of pattern (a --kernel argument). */
enum detctl_kernel_form detctl_kernel_form(const char *pattern);

/* 1 when the stored kernel id matches pattern in its form, else 0. */
int detctl_kernel_match(const char *pattern, const char *kernel_id);

/*
 * The canonical key of in: a Python tuple repr ("(1024, 'torch.float32')",
 * "(7,)", "()") is converted: int -> i:, float -> f: (the repr as printed), str
 * -> s: (JSON, ASCII-escaped), True/False -> b:, None -> n:null, tuple ->
 * t[...], list -> l[...]. Anything else (the canonical form "[...]", or a key a
 * client sent in its own form) is returned as it is. Returns 0 with *ret a heap
 * string (caller frees), or -1 with err naming the position and the problem
 * (*ret untouched).
 */
int detctl_key_canonical(const char *in, char **ret, char *err, size_t errlen);

#endif /* DETD_DETCTL_KEY_H */
