/*
 * votes: record-mode votes and the rows behind `detctl table export`, on
 * the loop thread. In record mode every rank times as Triton would and
 * sends its winner as a vote (Decider.Vote); nothing is decided. The
 * votes are kept in the store for `detctl votes` (Admin.ListVotes) and
 * `detctl table export --votes`; Admin.ExportDecisions pages through the
 * decisions of one architecture for `detctl table export`.
 *
 * Each function consumes the event: it answers the call and frees the
 * request message.
 */
#ifndef DETD_VOTES_H
#define DETD_VOTES_H

#include "app/daemon.h"

/* Decider.Vote: validate like Decide, then store (replace) the vote. */
void votes_on_vote(struct daemon *d, struct rpc_event *ev);

/* Admin.ListVotes: one page of votes, ordered by seq. */
void votes_list(struct daemon *d, struct rpc_event *ev);

/* Admin.ExportDecisions: one page of an arch's decisions, by id. */
void votes_export_decisions(struct daemon *d, struct rpc_event *ev);

/* Admin.Reset with votes=true: forget votes (of a kernel, or all). */
void votes_reset(struct daemon *d, struct rpc_event *ev);

#endif /* DETD_VOTES_H */
