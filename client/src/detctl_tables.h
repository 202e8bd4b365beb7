/*
 * detctl_tables: how detctl shows the per-architecture tables: the files
 * a daemon loaded and skipped (status, reload) and explain's answer.
 */
#ifndef DETD_DETCTL_TABLES_H
#define DETD_DETCTL_TABLES_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "detd.pb-c.h"

/* Print the files loaded (path, arch, entries) and skipped (error) under
 * a "table files" heading; nothing when both are empty. */
void detctl_tables_print_files(Detd__V1__TableFile *const *files, size_t nf,
                               Detd__V1__TableError *const *errors, size_t ne);

/* Print explain's answer, the entries considered and the notes. */
void detctl_tables_print_explain(const Detd__V1__ExplainResponse *r, FILE *out);

/* JSON forms. Each returns a new reference, or NULL when out of memory. */
json_t *detctl_tables_json_files(Detd__V1__TableFile *const *files, size_t nf);
json_t *detctl_tables_json_errors(Detd__V1__TableError *const *errors,
                                  size_t ne);
json_t *detctl_tables_json_reload(const Detd__V1__ReloadResponse *r);
json_t *detctl_tables_json_explain(const Detd__V1__ExplainResponse *r);

#endif /* DETD_DETCTL_TABLES_H */
