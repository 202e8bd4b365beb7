/*
 * convert: stored decisions as detd.v1.Decision messages.
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
};

/*
 * Fill p from row r. The message borrows r's strings: r must outlive p.
 * with_timings parses r->timings_json into p (heap, freed by
 * convert_decision_clear()); a row without valid JSON gets no timings.
 */
void convert_decision_fill(const struct decision *r, struct convert_decision *p,
                           int with_timings);

/* Free what convert_decision_fill() allocated. */
void convert_decision_clear(struct convert_decision *p);

#endif /* DETD_CONVERT_H */
