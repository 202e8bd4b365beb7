/*
 * detctl_tables: printing of table files, reload and explain answers.
 */
#include "detctl_tables.h"

#include <stdio.h>

#include "detctl_print.h"

/* See detctl_tables.h. */
void detctl_tables_print_files(Detd__V1__TableFile *const *files, size_t nf,
                               Detd__V1__TableError *const *errors, size_t ne) {
    if (nf == 0 && ne == 0)
        return;
    printf("  table files  %zu loaded, %zu skipped\n", nf, ne);
    for (size_t i = 0; i < nf; i++)
        printf("    %s (%s, %llu entries)\n", files[i]->path, files[i]->arch,
               (unsigned long long)files[i]->entries);
    for (size_t i = 0; i < ne; i++)
        printf("    SKIPPED %s\n", errors[i]->error);
}

static const char *answer_name(Detd__V1__ExplainAnswer a) {
    switch (a) {
    case DETD__V1__EXPLAIN_ANSWER__EXPLAIN_DECISION:
        return "decision";
    case DETD__V1__EXPLAIN_ANSWER__EXPLAIN_TABLE:
        return "table";
    case DETD__V1__EXPLAIN_ANSWER__EXPLAIN_TIMED:
        return "timed";
    case DETD__V1__EXPLAIN_ANSWER__EXPLAIN_IMPORT:
        return "import";
    default:
        return "unknown";
    }
}

/* See detctl_tables.h. */
void detctl_tables_print_explain(const Detd__V1__ExplainResponse *r,
                                 FILE *out) {
    const Detd__V1__Decision *d = r->decision;
    const Detd__V1__TableEntryInfo *t = r->table_entry;
    if (r->answer == DETD__V1__EXPLAIN_ANSWER__EXPLAIN_DECISION && d != NULL) {
        char who[160];
        if (d->decided_by != NULL && d->decided_by->host[0] != '\0')
            detctl_print_who(d->decided_by, who, sizeof(who));
        else if (d->table_file[0] != '\0')
            snprintf(who, sizeof(who), "table %s", d->table_file);
        else
            snprintf(who, sizeof(who), "-");
        fprintf(out, "answer: existing decision %s\n", d->id);
        fprintf(out, "  config  %s\n  source  %s\n  by      %s\n", d->config,
                detctl_print_source(d->source), who);
        const Detd__V1__TimingProvenance *tp = d->timing;
        if (tp != NULL && tp->benchmarker[0] != '\0')
            fprintf(out,
                    "  timed   %s (warmup %g ms, rep %g ms, %s, CUDA graphs "
                    "%s, timing lock %s); torch %s, CUDA %s, driver %s; "
                    "package %s %s\n",
                    tp->benchmarker, tp->warmup, tp->rep,
                    tp->return_mode[0] ? tp->return_mode : "-",
                    tp->cuda_graphs ? "yes" : "no",
                    tp->timing_lock ? "yes" : "no",
                    tp->torch_version[0] ? tp->torch_version : "-",
                    tp->cuda_version[0] ? tp->cuda_version : "-",
                    tp->driver[0] ? tp->driver : "-",
                    tp->package[0] ? tp->package : "-",
                    tp->package_version[0] ? tp->package_version : "");
    } else if (r->answer == DETD__V1__EXPLAIN_ANSWER__EXPLAIN_TABLE &&
               t != NULL) {
        fprintf(out, "answer: table %s\n", t->file);
        fprintf(out, "  kernel  %s\n  key     %s\n  config  %s\n", t->kernel,
                t->key, t->config);
        if (!r->candidates_checked)
            fprintf(out, "  (no candidates given: used only if this config "
                         "is among the live candidates)\n");
    } else if (r->answer == DETD__V1__EXPLAIN_ANSWER__EXPLAIN_IMPORT &&
               r->import_entry != NULL) {
        const Detd__V1__TableEntryInfo *e = r->import_entry;
        fprintf(out, "answer: imported entry (from %s)\n", e->file);
        fprintf(out, "  kernel  %s\n  key     %s\n  config  %s\n", e->kernel,
                e->key, e->config);
        if (!r->candidates_checked)
            fprintf(out, "  (no candidates given: used only if this config "
                         "is among the live candidates)\n");
    } else {
        fprintf(out, "answer: would be timed (no decision, no usable imported "
                     "or table entry)\n");
    }
    if (r->n_imports_considered > 0)
        fprintf(out, "imported entries considered:\n");
    for (size_t i = 0; i < r->n_imports_considered; i++) {
        const Detd__V1__TableEntryInfo *c = r->imports_considered[i];
        fprintf(out, "  %s \"%s\" \"%s\" -> %s%s%s\n", c->file, c->kernel,
                c->key, c->config, c->reason[0] ? ": " : "", c->reason);
    }
    fprintf(out, "table files searched: %u\n", r->table_files);
    if (r->n_considered > 0)
        fprintf(out, "entries considered:\n");
    for (size_t i = 0; i < r->n_considered; i++) {
        const Detd__V1__TableEntryInfo *c = r->considered[i];
        fprintf(out, "  %s \"%s\" \"%s\" -> %s%s%s\n", c->file, c->kernel,
                c->key, c->config, c->reason[0] ? ": " : "", c->reason);
    }
    for (size_t i = 0; i < r->n_notes; i++)
        fprintf(out, "note: %s\n", r->notes[i]);
}

/* See detctl_tables.h. */
json_t *detctl_tables_json_files(Detd__V1__TableFile *const *files, size_t nf) {
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < nf; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:I}", "path",
                                           files[i]->path, "arch",
                                           files[i]->arch, "entries",
                                           (json_int_t)files[i]->entries));
    return a;
}

/* See detctl_tables.h. */
json_t *detctl_tables_json_errors(Detd__V1__TableError *const *errors,
                                  size_t ne) {
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < ne; i++)
        json_array_append_new(a,
                              json_pack("{s:s, s:s}", "path", errors[i]->path,
                                        "error", errors[i]->error));
    return a;
}

/* See detctl_tables.h. */
json_t *detctl_tables_json_reload(const Detd__V1__ReloadResponse *r) {
    return json_pack("{s:o, s:o, s:I, s:I}", "files",
                     detctl_tables_json_files(r->files, r->n_files), "errors",
                     detctl_tables_json_errors(r->errors, r->n_errors),
                     "entries", (json_int_t)r->entries, "took_ms",
                     (json_int_t)r->took_ms);
}

static json_t *entry_json(const Detd__V1__TableEntryInfo *e) {
    return json_pack("{s:s, s:s, s:s, s:s, s:b, s:s}", "file", e->file,
                     "kernel", e->kernel, "key", e->key, "config", e->config,
                     "stale", e->stale, "reason", e->reason);
}

/* See detctl_tables.h. */
json_t *detctl_tables_json_explain(const Detd__V1__ExplainResponse *r) {
    json_t *cons = json_array(), *notes = json_array();
    for (size_t i = 0; i < r->n_considered; i++)
        json_array_append_new(cons, entry_json(r->considered[i]));
    for (size_t i = 0; i < r->n_notes; i++)
        json_array_append_new(notes, json_string(r->notes[i]));
    json_t *o =
        json_pack("{s:s, s:b, s:i, s:o, s:o}", "answer", answer_name(r->answer),
                  "candidates_checked", r->candidates_checked, "table_files",
                  (int)r->table_files, "considered", cons, "notes", notes);
    if (o == NULL)
        return NULL;
    if (r->decision != NULL)
        json_object_set_new(o, "decision",
                            detctl_print_json_decision(r->decision));
    if (r->table_entry != NULL)
        json_object_set_new(o, "table_entry", entry_json(r->table_entry));
    if (r->import_entry != NULL)
        json_object_set_new(o, "import_entry", entry_json(r->import_entry));
    json_t *imp = json_array();
    for (size_t i = 0; imp != NULL && i < r->n_imports_considered; i++)
        json_array_append_new(imp, entry_json(r->imports_considered[i]));
    json_object_set_new(o, "imports_considered", imp);
    return o;
}
