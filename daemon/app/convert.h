/*
 * convert: stored decisions as detd.v1.Decision messages, and the
 * timings of a report or a vote as they are stored.
 */
#ifndef DETD_CONVERT_H
#define DETD_CONVERT_H

#include <jansson.h>

#include "detd.pb-c.h"
#include "data/store.h"

/* A Decision message and the storage it points into. */
struct convert_decision {
    Detd__V1__Decision msg;
    Detd__V1__ClientIdentity by;
    Detd__V1__PeerIdentity peer;        /* msg.decided_peer */
    Detd__V1__CandidateTiming *timings; /* array */
    Detd__V1__CandidateTiming **ptrs;
    double *samples;
    json_t *json;
    Detd__V1__TimingProvenance timing; /* msg.timing, when recorded */
    json_t *timing_doc;                /* what timing's strings borrow */
};

/*
 * Fill p from row r. The message borrows r's strings: r must outlive p.
 * with_timings parses r->timings_json into p (heap, freed by
 * convert_decision_clear()); a row without valid JSON gets no timings.
 * r->timing_json (how it was timed), when recorded, is always parsed
 * into msg.timing.
 */
void convert_decision_fill(const struct decision *r, struct convert_decision *p,
                           int with_timings);

/* Free what convert_decision_fill() allocated. */
void convert_decision_clear(struct convert_decision *p);

/*
 * The timings t[0..n) (a Report's or a Vote's) as the store keeps them:
 * compact JSON, [{"config":..,"ms":[..],"failed":bool},..], a sample that
 * is not finite written as null. Returns a heap string (the caller
 * free()s it), or NULL when out of memory: then nothing is to be stored,
 * never a list missing an entry or its samples. t is borrowed.
 */
char *convert_timings_json(Detd__V1__CandidateTiming *const *t, size_t n);

#endif /* DETD_CONVERT_H */
