/*
 * detd: main(). The settings come from options.c (flags and the
 * configuration file, through one table); the loop (loop.c) runs the
 * daemon in the foreground.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "loop.h"
#include "detd/client.h"
#include "config/options.h"

static void print_errors(const struct options *o) {
    for (size_t i = 0; i < o->nerrors; i++)
        fprintf(stderr, "detd: %s\n", o->errors[i]);
    if (o->errors_dropped > 0)
        fprintf(stderr, "detd: ... and %zu more error%s\n", o->errors_dropped,
                o->errors_dropped == 1 ? "" : "s");
}

int main(int argc, char **argv) {
    struct options o;
    int rc;
    options_init(&o);
    rc = options_parse(&o, argc, argv);
    if (o.help) {
        options_usage(stdout);
        rc = 0;
        goto out;
    }
    if (o.version) {
        printf("detd %s\n", DETD_VERSION);
        rc = 0;
        goto out;
    }
    if (o.check_config) {
        /* Everything is checked, nothing is opened. */
        if (rc == 0)
            rc = options_check_paths(&o);
        if (rc != 0) {
            print_errors(&o);
            rc = 2;
            goto out;
        }
        options_print(&o, stdout);
        rc = 0;
        goto out;
    }
    if (rc != 0) {
        print_errors(&o);
        if (o.config_file == NULL)
            fprintf(stderr, "detd: see detd --help\n");
        rc = 2;
        goto out;
    }
    log_set_level(o.cfg.level);
    log_set_format(o.cfg.log_format);
    signal(SIGPIPE, SIG_IGN);
    rc = daemon_run(&o.cfg);
out:
    options_free(&o);
    return rc;
}
