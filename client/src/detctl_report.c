/* detctl_report: verify reports (see detctl_report.h). */
#define _GNU_SOURCE
#include "detctl_report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "detctl_exit.h"

static const char *sget(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s != NULL ? s : "";
}

static long long iget(const json_t *o, const char *k) {
    return (long long)json_integer_value(json_object_get(o, k));
}

/* See detctl_report.h. */
enum detctl_report_format detctl_report_format_of(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot != NULL &&
        (strcasecmp(dot, ".html") == 0 || strcasecmp(dot, ".htm") == 0))
        return DETCTL_REPORT_HTML;
    return DETCTL_REPORT_MARKDOWN;
}

/* Text escaped for the format: Markdown table cells (| and newlines),
 * or HTML/XML (& < > " ', control characters dropped). */
static void esc(FILE *out, const char *s, enum detctl_report_format f) {
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (f == DETCTL_REPORT_MARKDOWN) {
            if (c == '|')
                fputs("\\|", out);
            else if (c == '\n' || c == '\r')
                fputc(' ', out);
            else
                fputc(c, out);
            continue;
        }
        switch (c) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&apos;", out);
            break;
        default:
            if (c >= 0x20 || c == '\n' || c == '\t')
                fputc(c, out);
        }
    }
}

/* The distinct kernels of the keys, sorted. The array is the caller's to
 * free; the strings are borrowed from doc. */
static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char **kernels_of(const json_t *keys, size_t *ret_n) {
    size_t n = 0, i;
    json_t *k;
    const char **ks = calloc(json_array_size(keys) + 1, sizeof(*ks));
    if (ks == NULL)
        return NULL;
    json_array_foreach(keys, i, k) {
        const char *name = sget(k, "kernel");
        int dup = 0;
        for (size_t j = 0; j < n && !dup; j++)
            dup = strcmp(ks[j], name) == 0;
        if (!dup)
            ks[n++] = name;
    }
    qsort(ks, n, sizeof(*ks), str_cmp);
    *ret_n = n;
    return ks;
}

/* "rank 0 host pid 1, rank 1 ..." of the clients that launched config. */
static void used_by(FILE *out, const json_t *key, const char *config,
                    enum detctl_report_format f) {
    size_t i, j;
    json_t *u, *c;
    int first = 1;
    json_array_foreach(json_object_get(key, "uses"), i, u) {
        if (strcmp(sget(u, "config"), config) != 0)
            continue;
        json_array_foreach(json_object_get(u, "clients"), j, c) {
            fputs(first ? "" : ", ", out);
            esc(out, sget(c, "who"), f);
            const char *src = sget(c, "source");
            if (strcmp(src, "fallback") == 0 || strcmp(src, "local") == 0 ||
                strcmp(src, "override") == 0) {
                fputs(" (", out);
                esc(out, src, f);
                fputs(")", out);
            }
            first = 0;
        }
    }
    if (first)
        fputs("-", out);
}

/* One row: key, arch, candidate, median, samples, failed, decided, used. */
static void row(FILE *out, enum detctl_report_format f, const json_t *key,
                const char *config, const json_t *timing, int decided) {
    const char *o = f == DETCTL_REPORT_HTML ? "<tr><td>" : "| ";
    const char *s = f == DETCTL_REPORT_HTML ? "</td><td>" : " | ";
    const char *e = f == DETCTL_REPORT_HTML ? "</td></tr>\n" : " |\n";
    const char *cq = f == DETCTL_REPORT_HTML ? "<code>" : "`";
    const char *cqe = f == DETCTL_REPORT_HTML ? "</code>" : "`";
    fprintf(out, "%s%s", o, cq);
    esc(out, sget(key, "key"), f);
    fprintf(out, "%s%s", cqe, s);
    esc(out, sget(key, "arch"), f);
    fprintf(out, "%s%s", s, cq);
    esc(out, config, f);
    fprintf(out, "%s%s", cqe, s);
    json_t *med = timing ? json_object_get(timing, "median_ms") : NULL;
    if (json_is_number(med))
        fprintf(out, "%.4f", json_number_value(med));
    else
        fputs("-", out);
    fputs(s, out);
    if (timing != NULL)
        fprintf(out, "%zu", json_array_size(json_object_get(timing, "ms")));
    else
        fputs("-", out);
    fputs(s, out);
    fputs(timing && json_is_true(json_object_get(timing, "failed")) ? "FAILED"
                                                                    : "",
          out);
    fputs(s, out);
    fputs(decided ? "yes" : "", out);
    fputs(s, out);
    used_by(out, key, config, f);
    fputs(e, out);
}

static void kernel_table(FILE *out, enum detctl_report_format f,
                         const json_t *keys, const char *kernel) {
    if (f == DETCTL_REPORT_HTML) {
        fputs("<h3><code>", out);
        esc(out, kernel, f);
        fputs("</code></h3>\n<table>\n<tr><th>key</th><th>arch</th>"
              "<th>candidate</th><th>median ms</th><th>samples</th>"
              "<th>failed</th><th>decided</th><th>used by</th></tr>\n",
              out);
    } else {
        fputs("### `", out);
        esc(out, kernel, f);
        fputs("`\n\n| key | arch | candidate | median ms | samples | failed "
              "| decided | used by |\n|---|---|---|---:|---:|---|---|---|\n",
              out);
    }
    size_t i, j, m;
    json_t *k, *t, *u;
    json_array_foreach(keys, i, k) {
        if (strcmp(sget(k, "kernel"), kernel) != 0)
            continue;
        const char *dec = sget(k, "decided");
        json_array_foreach(json_object_get(k, "timings"), j, t)
            row(out, f, k, sget(t, "config"), t,
                strcmp(sget(t, "config"), dec) == 0);
        /* Configs launched or decided that have no timing (tables, fallbacks).
         */
        int dec_timed = 0;
        json_array_foreach(json_object_get(k, "timings"), j, t) dec_timed |=
            strcmp(sget(t, "config"), dec) == 0;
        if (dec[0] && !dec_timed)
            row(out, f, k, dec, NULL, 1);
        json_array_foreach(json_object_get(k, "uses"), j, u) {
            const char *cfg = sget(u, "config");
            int known = strcmp(cfg, dec) == 0;
            json_array_foreach(json_object_get(k, "timings"), m, t) known |=
                strcmp(sget(t, "config"), cfg) == 0;
            /* a config used twice (governed and not) is one row */
            for (size_t p = 0; p < j && !known; p++)
                known =
                    strcmp(sget(json_array_get(json_object_get(k, "uses"), p),
                                "config"),
                           cfg) == 0;
            if (!known)
                row(out, f, k, cfg, NULL, 0);
        }
    }
    fputs(f == DETCTL_REPORT_HTML ? "</table>\n" : "\n", out);
}

static void summary(FILE *out, const json_t *doc, enum detctl_report_format f) {
    int ok = json_is_true(json_object_get(doc, "ok"));
    char nums[6][32];
    const char *names[] = {"keys checked", "observations", "divergences",
                           "fallbacks",    "ungoverned",   "failures"};
    snprintf(nums[0], 32, "%lld", iget(doc, "keys_checked"));
    snprintf(nums[1], 32, "%lld", iget(doc, "observations"));
    snprintf(nums[2], 32, "%zu",
             json_array_size(json_object_get(doc, "divergences")));
    snprintf(nums[3], 32, "%lld", iget(doc, "fallbacks"));
    snprintf(nums[4], 32, "%lld", iget(doc, "ungoverned"));
    snprintf(nums[5], 32, "%zu",
             json_array_size(json_object_get(doc, "failures")));
    const char *job = json_string_value(json_object_get(doc, "job"));
    char ranks[32] = "-";
    if (json_is_integer(json_object_get(doc, "expect_ranks")))
        snprintf(ranks, sizeof ranks, "%lld", iget(doc, "expect_ranks"));
    const char *rows[][2] = {
        {"result", ok ? "ok" : "FAIL"},
        {"namespace", sget(doc, "namespace")},
        {"namespace from", sget(doc, "namespace_source")},
        {"job", job ? job : "-"},
        {"expected ranks", ranks},
        {"generated (UTC)", sget(doc, "generated_at")},
    };
    if (f == DETCTL_REPORT_HTML)
        fputs("<table>\n", out);
    else
        fputs("| | |\n|---|---|\n", out);
    for (size_t i = 0; i < 6 + 6; i++) {
        const char *k = i < 6 ? rows[i][0] : names[i - 6];
        const char *v = i < 6 ? rows[i][1] : nums[i - 6];
        fputs(f == DETCTL_REPORT_HTML ? "<tr><th>" : "| ", out);
        esc(out, k, f);
        fputs(f == DETCTL_REPORT_HTML ? "</th><td>" : " | ", out);
        if (i == 0 && f == DETCTL_REPORT_MARKDOWN)
            fputs("**", out);
        esc(out, v, f);
        if (i == 0 && f == DETCTL_REPORT_MARKDOWN)
            fputs("**", out);
        fputs(f == DETCTL_REPORT_HTML ? "</td></tr>\n" : " |\n", out);
    }
    fputs(f == DETCTL_REPORT_HTML ? "</table>\n" : "\n", out);
}

/* The runtime findings that are nondeterministic (docs/determinism.md):
 * a section of their own, only when there is one. */
static void nondet_section(FILE *out, const json_t *doc,
                           enum detctl_report_format f) {
    int html = f == DETCTL_REPORT_HTML, any = 0;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(doc, "runtime"), i, x) {
        if (!json_is_true(json_object_get(x, "nondeterministic")))
            continue;
        if (!any)
            fputs(html ? "<h2>Nondeterminism no config fixes</h2>\n<ul>\n"
                       : "\n## Nondeterminism no config fixes\n\n",
                  out);
        any = 1;
        fputs(html ? "<li>" : "- ", out);
        esc(out, sget(x, "message"), f);
        fputs(html ? "</li>\n" : "\n", out);
    }
    if (any && html)
        fputs("</ul>\n", out);
}

static int write_doc(FILE *out, const json_t *doc,
                     enum detctl_report_format f) {
    const json_t *keys = json_object_get(doc, "keys");
    size_t nk = 0, i;
    const char **ks = kernels_of(keys, &nk);
    if (ks == NULL) {
        errno = ENOMEM;
        return -1;
    }
    if (f == DETCTL_REPORT_HTML)
        fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
              "<title>detd verify report</title>\n<style>table{border-"
              "collapse:collapse}td,th{border:1px solid #999;padding:2px "
              "6px;text-align:left}</style></head><body>\n<h1>detd verify "
              "report</h1>\n",
              out);
    else
        fputs("# detd verify report\n\n", out);
    summary(out, doc, f);
    fputs(f == DETCTL_REPORT_HTML ? "<h2>Failures</h2>\n" : "## Failures\n\n",
          out);
    json_t *x;
    const json_t *fl = json_object_get(doc, "failures");
    if (json_array_size(fl) == 0)
        fputs(f == DETCTL_REPORT_HTML ? "<p>None.</p>\n" : "None.\n", out);
    else if (f == DETCTL_REPORT_HTML)
        fputs("<ul>\n", out);
    json_array_foreach(fl, i, x) {
        fputs(f == DETCTL_REPORT_HTML ? "<li>" : "- ", out);
        fputs(f == DETCTL_REPORT_HTML ? "<b>" : "**", out);
        esc(out, sget(x, "kind"), f);
        fputs(f == DETCTL_REPORT_HTML ? "</b> " : "** ", out);
        if (json_object_get(x, "kernel") != NULL) {
            fputs(f == DETCTL_REPORT_HTML ? "<code>" : "`", out);
            esc(out, sget(x, "kernel"), f);
            fputs(" ", out);
            esc(out, sget(x, "key"), f);
            fputs(f == DETCTL_REPORT_HTML ? "</code>" : "`", out);
            fputs(" [", out);
            esc(out, sget(x, "arch"), f);
            fputs("]: ", out);
        }
        esc(out, sget(x, "message"), f);
        fputs(f == DETCTL_REPORT_HTML ? "</li>\n" : "\n", out);
    }
    if (json_array_size(fl) > 0 && f == DETCTL_REPORT_HTML)
        fputs("</ul>\n", out);
    nondet_section(out, doc, f);
    fputs(f == DETCTL_REPORT_HTML ? "<h2>Kernels</h2>\n" : "\n## Kernels\n\n",
          out);
    if (nk == 0)
        fputs(f == DETCTL_REPORT_HTML ? "<p>No key was observed.</p>\n"
                                      : "No key was observed.\n",
              out);
    for (i = 0; i < nk; i++)
        kernel_table(out, f, keys, ks[i]);
    if (f == DETCTL_REPORT_HTML)
        fputs("</body></html>\n", out);
    free(ks);
    return ferror(out) ? -1 : 0;
}

static int write_junit(FILE *out, const json_t *doc) {
    const enum detctl_report_format f = DETCTL_REPORT_JUNIT;
    const json_t *keys = json_object_get(doc, "keys");
    const json_t *fl = json_object_get(doc, "failures");
    size_t i, j, run_failures = 0, failed_keys = 0;
    json_t *x, *k;
    json_array_foreach(fl, i, x) run_failures +=
        json_object_get(x, "kernel") == NULL;
    json_array_foreach(keys, i, k) failed_keys +=
        json_array_size(json_object_get(k, "failures")) > 0;
    size_t tests = json_array_size(keys) + (run_failures > 0);
    size_t failures = failed_keys + (run_failures > 0);
    fprintf(out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<testsuites name=\"detctl verify\" tests=\"%zu\" "
            "failures=\"%zu\" errors=\"0\">\n<testsuite name=\"",
            tests, failures);
    fputs("detd verify ", out);
    esc(out, sget(doc, "namespace"), f);
    const char *job = json_string_value(json_object_get(doc, "job"));
    if (job != NULL) {
        fputs(" job ", out);
        esc(out, job, f);
    }
    fprintf(out,
            "\" tests=\"%zu\" failures=\"%zu\" errors=\"0\" skipped=\"0\" "
            "timestamp=\"",
            tests, failures);
    esc(out, sget(doc, "generated_at"), f);
    fputs("\">\n", out);
    json_array_foreach(keys, i, k) {
        fputs("  <testcase classname=\"", out);
        esc(out, sget(k, "kernel"), f);
        fputs("\" name=\"", out);
        esc(out, sget(k, "key"), f);
        fputs(" [", out);
        esc(out, sget(k, "arch"), f);
        fputs("]\"", out);
        const json_t *kf = json_object_get(k, "failures");
        if (json_array_size(kf) == 0) {
            fputs("/>\n", out);
            continue;
        }
        const json_t *f0 = json_array_get(kf, 0);
        fputs(">\n    <failure type=\"", out);
        esc(out, sget(f0, "kind"), f);
        fputs("\" message=\"", out);
        esc(out, sget(f0, "message"), f);
        fputs("\">", out);
        json_array_foreach(kf, j, x) {
            esc(out, sget(x, "kind"), f);
            fputs(": ", out);
            esc(out, sget(x, "message"), f);
            fputs("\n", out);
        }
        fputs("decided: ", out);
        esc(out,
            json_is_string(json_object_get(k, "decided")) ? sget(k, "decided")
                                                          : "(none)",
            f);
        fputs("</failure>\n  </testcase>\n", out);
    }
    if (run_failures > 0) {
        fputs("  <testcase classname=\"detd.verify\" name=\"run\">\n"
              "    <failure type=\"",
              out);
        const json_t *first = NULL;
        json_array_foreach(fl, i, x) if (first == NULL &&
                                         json_object_get(x, "kernel") == NULL)
            first = x;
        esc(out, sget(first, "kind"), f);
        fputs("\" message=\"", out);
        esc(out, sget(first, "message"), f);
        fputs("\">", out);
        json_array_foreach(fl, i, x) {
            if (json_object_get(x, "kernel") != NULL)
                continue;
            esc(out, sget(x, "kind"), f);
            fputs(": ", out);
            esc(out, sget(x, "message"), f);
            fputs("\n", out);
        }
        fputs("</failure>\n  </testcase>\n", out);
    }
    fputs("</testsuite>\n</testsuites>\n", out);
    return ferror(out) ? -1 : 0;
}

/* See detctl_report.h. */
int detctl_report_write(FILE *out, const json_t *doc,
                        enum detctl_report_format f) {
    if (out == NULL || doc == NULL) {
        errno = EINVAL;
        return -1;
    }
    return f == DETCTL_REPORT_JUNIT ? write_junit(out, doc)
                                    : write_doc(out, doc, f);
}

/* See detctl_report.h. */
int detctl_report_write_file(const char *path, const json_t *doc,
                             enum detctl_report_format f) {
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        fprintf(stderr, "detctl: out of memory\n");
        return DETCTL_EXIT_ERROR;
    }
    FILE *out = fopen(tmp, "w");
    int err = 0;
    if (out == NULL) {
        err = errno;
    } else {
        if (detctl_report_write(out, doc, f) != 0)
            err = errno ? errno : EIO;
        if (fclose(out) != 0 && err == 0)
            err = errno;
        if (err == 0 && rename(tmp, path) != 0)
            err = errno;
        if (err != 0)
            unlink(tmp);
    }
    free(tmp);
    if (err != 0) {
        fprintf(stderr, "detctl: write report '%s': %s\n", path, strerror(err));
        return DETCTL_EXIT_ERROR;
    }
    return DETCTL_EXIT_OK;
}
