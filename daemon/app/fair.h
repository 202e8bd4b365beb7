/*
 * fair: caps that keep one client (a session) or one user (a uid, from the
 * kernel's SO_PEERCRED, never from what the client says) from taking a
 * shared daemon for itself: open claims, new keys per minute and store
 * growth per minute, each per session and per uid (loop thread). A call
 * over a cap is answered RESOURCE_EXHAUSTED naming it ("open claims per
 * session: limit 1024 reached (max-claims-per-session)"); each cap's
 * refusals are logged once per episode per session or uid (an episode
 * ends when that subject's next call passes the cap) and counted. A cap
 * of 0 is off.
 */
#ifndef DETD_FAIR_H
#define DETD_FAIR_H

#include <stdint.h>

#include "io/rpc.h"

struct daemon;
struct client_session;

/* The caps; FAIR_CAP_NAMES below names them in the same order. */
typedef enum fair_cap {
    FAIR_CLAIMS_SESSION,
    FAIR_CLAIMS_UID,
    FAIR_KEYS_SESSION,
    FAIR_KEYS_UID,
    FAIR_GROWTH_SESSION,
    FAIR_GROWTH_UID,
    FAIR_CAP_COUNT
} fair_cap;

/* What a session has used of its per-minute caps (in struct
 * client_session; zeroed at attach). */
struct fair_usage {
    int64_t keys_since_ms, growth_since_ms; /* the current minute's start */
    uint64_t keys, growth_bytes;            /* used in it */
    unsigned refusing;                      /* bit per fair_cap: noted */
};

/* The setting (config key and flag) that sets cap c, e.g.
 * "max-claims-per-session". */
const char *fair_cap_key(fair_cap c);

/*
 * A Decide of s (attached; uid from the kernel) would start a timing pass
 * for a key nobody claims: within the open-claims and new-keys caps of s
 * and of uid, returns 0 and counts the new key; else answers call
 * RESOURCE_EXHAUSTED naming the cap and returns -1.
 */
int fair_new_claim(struct daemon *d, rpc_call *call, struct client_session *s,
                   uint32_t uid);

/*
 * A call of s (NULL: none) and uid is about to add about bytes to the
 * store: within the growth caps, returns 0 and counts them; else answers
 * call RESOURCE_EXHAUSTED naming the cap and returns -1.
 */
int fair_grow(struct daemon *d, rpc_call *call, struct client_session *s,
              uint32_t uid, uint64_t bytes);

/* Free the per-uid table (at exit). */
void fair_free(struct daemon *d);

#endif /* DETD_FAIR_H */
