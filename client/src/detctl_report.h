/*
 * detctl_report: the verify report a person keeps, written from verify's
 * JSON document (kind VerifyReport, docs/detctl-json.md): Markdown or HTML
 * with, per kernel, a table of every key's candidates (their timings from
 * the decision, the decided one marked) and the ranks that launched each;
 * and JUnit XML for CI, one testcase per key (a failure per failed check),
 * plus one testcase for run-wide failures (nothing checked, a node
 * unreachable). Pure: FILE in, nothing else.
 */
#ifndef DETD_DETCTL_REPORT_H
#define DETD_DETCTL_REPORT_H

#include <stdio.h>

#include <jansson.h>

enum detctl_report_format {
    DETCTL_REPORT_MARKDOWN,
    DETCTL_REPORT_HTML,
    DETCTL_REPORT_JUNIT,
};

/* The format a --report path asks for: HTML for .html/.htm (any case),
 * else Markdown. */
enum detctl_report_format detctl_report_format_of(const char *path);

/* Write doc (borrowed) in format f to out. Returns 0, or -1 when a write
 * failed (errno set). */
int detctl_report_write(FILE *out, const json_t *doc,
                        enum detctl_report_format f);

/*
 * Write doc to path through path.tmp.PID renamed over it. On failure the
 * message naming the file goes to stderr and nothing is left behind.
 * Returns a detctl exit status (0, or 5).
 */
int detctl_report_write_file(const char *path, const json_t *doc,
                             enum detctl_report_format f);

#endif /* DETD_DETCTL_REPORT_H */
