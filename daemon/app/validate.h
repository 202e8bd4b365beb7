/*
 * validate: the request checks shared by every method that takes a key
 * or a client identity (Decide, Report, Observe, Vote, ...), on the loop
 * thread or, quietly, on the rpc thread.
 *
 * Each check returns 0, or -1 after answering call INVALID_ARGUMENT (or
 * RESOURCE_EXHAUSTED) with a message naming the field. With call NULL
 * (the rpc thread's fast path, which leaves every error to the loop) a
 * failing check answers nothing.
 */
#ifndef DETD_VALIDATE_H
#define DETD_VALIDATE_H

#include <stddef.h>

#include "core/keyid.h"
#include "detd.pb-c.h"
#include "io/rpc.h"

/* A key after validation, with its fingerprint and decision id. ns and k
 * borrow from the request (or the daemon's namespace). search: the index
 * of the candidate naming the key's search (core/search.h), -1 for an
 * ordinary key. */
struct vkey {
    const char *ns;
    const Detd__V1__DecisionKey *k;
    char fp[KEYID_HEX_LEN + 1];
    char id[KEYID_HEX_LEN + 1];
    int search;
};

/* s (may be NULL: empty) is at most max bytes, and not empty when
 * required; what names the field in the error. */
int validate_str(rpc_call *call, const char *what, const char *s, size_t max,
                 int required);

/* Every string of the client identity (NULL: none) is within its cap. */
int validate_identity(rpc_call *call, const Detd__V1__ClientIdentity *c);

/*
 * The candidate configs cands[0..n): at most DETD_MAX_CANDIDATES, each 1 to
 * DAEMON_MAX_CONFIG bytes and free of the newline that separates them in
 * the key's fingerprint; what names the list in the error ("key.candidates").
 * An empty list passes (validate_key() requires one).
 */
int validate_candidates(rpc_call *call, const char *what,
                        const char *const *cands, size_t n);

/*
 * Check key k (arch, kernel, key, candidates and their caps; no candidate
 * may hold a newline, the fingerprint's separator; a key naming a search
 * must be a well-formed one, search_check_key()) and compute
 * its candidate fingerprint and decision id into *ret. default_ns is the
 * daemon's namespace, used when the key names none (borrowed by ret).
 */
int validate_key(const char *default_ns, rpc_call *call,
                 const Detd__V1__DecisionKey *k, struct vkey *ret);

/*
 * The fields a call about a timing pass (Decide, Share) carries: the
 * identity c, key k (validate_key(), into *ret) and the device the caller
 * benchmarks on (may be NULL; at most DAEMON_MAX_IDENTITY_STRING bytes).
 */
int validate_pass_call(const char *default_ns, rpc_call *call,
                       const Detd__V1__ClientIdentity *c,
                       const Detd__V1__DecisionKey *k, const char *device,
                       struct vkey *ret);

/* 1 when config is one of k's candidates (a checked key's: at least
 * one), else 0: keyid_has_candidate() on k's list. */
int validate_has_candidate(const Detd__V1__DecisionKey *k, const char *config);

/*
 * 1 when a timing pass of vk may report config: one of its candidates, or
 * for a key naming a search a config of that search (search_config_ok());
 * else 0 with why (why_len bytes) saying what is wrong, starting with
 * "is not".
 */
int validate_pass_config(const struct vkey *vk, const char *config, char *why,
                         size_t why_len);

/* The Observe fields beyond the key and config: error and why (at most
 * DAEMON_MAX_NOTE bytes), the audit (a known status; at most
 * DAEMON_MAX_AUDIT_ARGS names, each not empty, at most 256 bytes, no
 * newline). On success *ret_differing is a heap string (the caller
 * free()s it) of the names joined by '\n' ("" for none). */
int validate_observe_extra(rpc_call *call, const Detd__V1__ObserveRequest *req,
                           char **ret_differing);

#endif /* DETD_VALIDATE_H */
