/* detctl_cli: the command line (see detctl_cli.h). */
#define _GNU_SOURCE
#include "detctl_cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "detd/client.h"

/* Every option detctl knows; each command takes a subset. */
enum {
    O_HELP = 'h',
    O_VERBOSE = 'v',
    O_SOCKET = 256,
    O_ADDRESS,
    O_SERVER,
    O_TLS_CA,
    O_TLS_CERT,
    O_TLS_KEY,
    O_TIMEOUT,
    O_VERSION,
    O_OUTPUT,  /* -o FORMAT: text or json */
    O_OUTFILE, /* -o FILE (table export, merge) */
    O_JSON,
    O_NAMESPACE,
    O_KERNEL,
    O_ARCH,
    O_ALL,
    O_CLUSTER,
    O_VOTES,
    O_IMPORTS,
    O_KEY,
    O_TABLE_KEY,
    O_CANDIDATE,
    O_SOURCE,
    O_ALLOW_EMPTY,
    O_EXPECT_RANKS,
    O_JOB,
    O_REPORT,
    O_JUNIT,
    O_PAGE_SIZE,
    O_ALL_JOBS,
    O_LOCK,
    O_TRITON_VERSION,
    O_STRICT_DETERMINISM,
    O_REQUIRE_GOVERNED,
    O_REQUIRE,
    O_END
};

struct opt_def {
    int id;
    const char *name;
    int has_arg;
    int short_; /* 0: long only */
    const char *metavar;
    const char *help;
};

static const struct opt_def opt_defs[] = {
    {O_HELP, "help", no_argument, 'h', NULL, "this help"},
    {O_VERBOSE, "verbose", no_argument, 'v', NULL, "list each disagreement"},
    {O_SOCKET, "socket", required_argument, 0, "PATH",
     "the daemon's socket (default $DETD_SOCKET, else " DETD_DEFAULT_SOCKET
     " when it\n                             exists, else this user's daemon "
     "started on "
     "demand)"},
    {O_ADDRESS, "address", required_argument, 0, "HOST:PORT",
     "a daemon's --listen address instead of the socket (Admin calls)"},
    {O_SERVER, "server", required_argument, 0, "HOST:PORT",
     "the same as --address"},
    {O_TLS_CA, "tls-ca", required_argument, 0, "FILE",
     "TLS to --address, checking the daemon against this CA (PEM)"},
    {O_TLS_CERT, "tls-cert", required_argument, 0, "FILE",
     "client certificate (PEM) for a --listen-client-ca daemon"},
    {O_TLS_KEY, "tls-key", required_argument, 0, "FILE",
     "the key of --tls-cert (PEM)"},
    {O_TIMEOUT, "timeout", required_argument, 0, "MS",
     "deadline of each call (default 5000)"},
    {O_VERSION, "version", no_argument, 0, NULL, "print the version"},
    {O_OUTPUT, "output", required_argument, 'o', "FORMAT",
     "text (default) or json"},
    {O_OUTFILE, "output", required_argument, 'o', "FILE", "the file to write"},
    {O_JSON, "json", no_argument, 0, NULL, "the same as -o json"},
    {O_NAMESPACE, "namespace", required_argument, 0, "NS",
     "the namespace (default $DETD_NAMESPACE, else the daemon's)"},
    {O_KERNEL, "kernel", required_argument, 0, "K",
     "module:qualname@guard, module:qualname (every code version) or a "
     "bare name"},
    {O_ARCH, "arch", required_argument, 0, "A", "the architecture (sm90)"},
    {O_ALL, "all", no_argument, 0, NULL, "every kernel"},
    {O_CLUSTER, "cluster", no_argument, 0, NULL,
     "compare the observations of every registered node (etcd backend)"},
    {O_VOTES, "votes", no_argument, 0, NULL, "record-mode votes instead"},
    {O_IMPORTS, "imports", no_argument, 0, NULL, "imported table entries too"},
    {O_KEY, "key", required_argument, 0, "KEY",
     "the key: canonical ([i:1024,s:\"torch.float32\"]) or as Triton "
     "prints it ((1024, 'torch.float32'))"},
    {O_TABLE_KEY, "table-key", required_argument, 0, "T",
     "the key in Megatron's form (N=128|torch.float32)"},
    {O_CANDIDATE, "candidate", required_argument, 0, "C",
     "a candidate config (repeat); none: table entries are not checked"},
    {O_SOURCE, "source", required_argument, 0, "TEXT",
     "the table's \"source\" text"},
    {O_ALLOW_EMPTY, "allow-empty", no_argument, 0, NULL,
     "exit 0 when nothing was observed (default: exit 1)"},
    {O_STRICT_DETERMINISM, "strict-determinism", no_argument, 0, NULL,
     "also fail on the nondeterminism no config fixes (ops, attention "
     "backend,\n                             settings: "
     "docs/determinism.md)"},
    {O_REQUIRE_GOVERNED, "require-governed", no_argument, 0, NULL,
     "also fail on each autotuner detd could not govern (an Autotuner "
     "subclass\n                             that bypasses Autotuner.run, a "
     "call site timing candidates\n                             itself); "
     "those left out on purpose (scope, exempt) still pass"},
    {O_EXPECT_RANKS, "expect-ranks", required_argument, 0, "N",
     "fail for each key fewer than N ranks (0..N-1) observed, naming the "
     "missing ranks"},
    {O_JOB, "job", required_argument, 0, "J",
     "only the observations of job label J (default: the launcher's job "
     "when run\n                             inside one, $DETD_JOB or "
     "$TORCHELASTIC_RUN_ID, ...; else the job\n                             "
     "observed last)"},
    {O_ALL_JOBS, "all-jobs", no_argument, 0, NULL,
     "the observations of every job"},
    {O_LOCK, "lock", required_argument, 0, "FILE",
     "also fail on a key the run used that the lockfile FILE does not hold, "
     "or\n                             with another config "
     "(docs/lockfile.md)"},
    {O_TRITON_VERSION, "triton-version", required_argument, 0, "V",
     "import only the entries timed with Triton V (the others are listed, "
     "with why)"},
    {O_REQUIRE, "require", required_argument, 0, "FIELD=VALUE",
     "import only the entries whose FIELD (triton_version, torch_version,\n"
     "                             cuda_version, driver) is VALUE "
     "(repeat; the others are misses)"},
    {O_REPORT, "report", required_argument, 0, "FILE",
     "write a report: HTML for .html/.htm, else Markdown"},
    {O_JUNIT, "junit", required_argument, 0, "FILE",
     "write JUnit XML, one testcase per key"},
    {O_PAGE_SIZE, "page-size", required_argument, 0, "N",
     "observations per ListObservations page, 1..1000 (default: the "
     "daemon's)"},
};

#define GLOBAL_OPTS                                                            \
    O_SOCKET, O_ADDRESS, O_SERVER, O_TLS_CA, O_TLS_CERT, O_TLS_KEY, O_TIMEOUT, \
        O_HELP

struct cmd_def {
    const char *name, *sub;
    const char *args; /* after the options in the usage line */
    int files;        /* positional FILE arguments: 0 none, 1 one, 2 many */
    int namespaced;
    const char *summary;
    int opts[24]; /* ids, ended by 0 */
};

static const struct cmd_def cmd_defs[] = {
    {"status",
     NULL,
     "",
     0,
     0,
     "The daemon: version, namespace, backend, uptime, decisions, attached "
     "clients,\nopen claims, waiters, counters, GPUs, table files.",
     {O_OUTPUT, O_JSON, GLOBAL_OPTS, 0}},
    {"decisions",
     NULL,
     "",
     0,
     1,
     "The stored decisions with provenance (who timed it, when, each "
     "candidate's timing).",
     {O_OUTPUT, O_JSON, O_KERNEL, O_NAMESPACE, GLOBAL_OPTS, 0}},
    {"verify",
     NULL,
     "",
     0,
     1,
     "Compare the configs ranks launched (their Observe reports) with each "
     "other and\nwith the decisions. Fails (exit 1) on a divergence, a "
     "fallback launch (on_miss),\na decided config whose timing failed, "
     "a launch that raised, fewer ranks than\n--expect-ranks, an "
     "unreachable node, or nothing checked at all (unless\n--allow-empty). "
     "Lists the autotuners by kind (triton, inductor, native), the\n"
     "ungoverned ones with why, and the determinism audit's findings as "
     "warnings:\nkernels whose outputs change under a fixed config, and "
     "what the runtime does\nthat no config fixes (nondeterministic ops, "
     "the attention backend, settings;\n--strict-determinism makes those "
     "fail;\n--require-governed fails on every autotuner detd could not "
     "govern).\nChecks one job: --job J, else the launcher's (run inside "
     "one), else the job\nobserved last; --all-jobs every job.",
     {O_OUTPUT, O_JSON, O_NAMESPACE, O_CLUSTER, O_ALLOW_EMPTY, O_EXPECT_RANKS,
      O_JOB, O_ALL_JOBS, O_LOCK, O_REPORT, O_JUNIT, O_PAGE_SIZE,
      O_STRICT_DETERMINISM, O_REQUIRE_GOVERNED, GLOBAL_OPTS, 0}},
    {"reset",
     NULL,
     "(--kernel K | --all)",
     0,
     1,
     "Forget decisions (the next run times those keys again); --votes: the "
     "record-mode\nvotes instead; --imports: the imported table entries too.",
     {O_KERNEL, O_ALL, O_NAMESPACE, O_VOTES, O_IMPORTS, O_OUTPUT, O_JSON,
      GLOBAL_OPTS, 0}},
    {"health",
     NULL,
     "",
     0,
     0,
     "grpc.health.v1 check; exit 0 when SERVING, 1 otherwise.",
     {O_OUTPUT, O_JSON, GLOBAL_OPTS, 0}},
    {"reload",
     NULL,
     "",
     0,
     0,
     "Re-read the table directories (as SIGHUP does); lists the files "
     "loaded and skipped.",
     {O_OUTPUT, O_JSON, GLOBAL_OPTS, 0}},
    {"explain",
     NULL,
     "--kernel K --key KEY --arch A",
     0,
     1,
     "Where the answer for a key comes from: a decision, an imported or "
     "table entry, or\na timing pass, with each entry rejected and why.",
     {O_KERNEL, O_KEY, O_ARCH, O_TABLE_KEY, O_CANDIDATE, O_NAMESPACE, O_OUTPUT,
      O_JSON, GLOBAL_OPTS, 0}},
    {"votes",
     NULL,
     "",
     0,
     1,
     "Record-mode votes: each process's own timing-pass winner per key.",
     {O_OUTPUT, O_JSON, O_ARCH, O_KERNEL, O_NAMESPACE, GLOBAL_OPTS, 0}},
    {"table",
     "export",
     "--arch A -o FILE",
     0,
     1,
     "Write the table of arch A from the decisions (--votes: from the "
     "majority of the\nvotes).",
     {O_ARCH, O_OUTFILE, O_VOTES, O_KERNEL, O_NAMESPACE, O_SOURCE, GLOBAL_OPTS,
      0}},
    {"table",
     "merge",
     "FILE... -o OUT",
     2,
     0,
     "The majority of tables and per-rank recordings, one table per arch "
     "(OUT: a\ndirectory for several). No daemon involved.",
     {O_OUTFILE, O_SOURCE, O_VERBOSE, O_HELP, 0}},
    {"table",
     "report",
     "FILE...",
     2,
     0,
     "Entries, votes and disagreements per kernel of those inputs. No "
     "daemon involved.",
     {O_OUTPUT, O_JSON, O_HELP, 0}},
    {"table",
     "import",
     "FILE",
     1,
     1,
     "The table's entries answer Decide in the namespace before the tables "
     "(admin call).",
     {O_NAMESPACE, GLOBAL_OPTS, 0}},
    {"lock",
     "export",
     "-o FILE",
     0,
     1,
     "Write the decisions a job used, with their provenance, as a "
     "content-hashed\nlockfile (docs/lockfile.md): the job as verify picks "
     "it (--job J, --all-jobs),\nor with --all every decision of the "
     "namespace.",
     {O_OUTFILE, O_JOB, O_ALL_JOBS, O_ALL, O_NAMESPACE, GLOBAL_OPTS, 0}},
    {"lock",
     "import",
     "FILE",
     1,
     1,
     "Store a lockfile's decisions in the namespace: its keys are decided, "
     "never\ntimed. Refuses a file whose content hash does not match; "
     "--arch A,\n--triton-version V and --require FIELD=VALUE keep only the "
     "entries made there\n(the others are listed, with why, and explain "
     "names them).",
     {O_ARCH, O_TRITON_VERSION, O_REQUIRE, O_NAMESPACE, GLOBAL_OPTS, 0}},
};

#define N_CMDS (sizeof(cmd_defs) / sizeof(cmd_defs[0]))

static const struct opt_def *opt_find(int id) {
    for (size_t i = 0; i < sizeof(opt_defs) / sizeof(opt_defs[0]); i++)
        if (opt_defs[i].id == id)
            return &opt_defs[i];
    return NULL;
}

static const char exit_text[] =
    "exit status:\n"
    "  0  ok\n"
    "  1  the check said no: verify failed, health not SERVING\n"
    "  2  usage error (unknown command or option, bad value, bad input "
    "file)\n"
    "  3  daemon unreachable or unavailable (socket, TLS, deadline)\n"
    "  4  permission denied by the daemon\n"
    "  5  the daemon answered with another error, or a local failure\n";

static void opt_line(FILE *out, const struct opt_def *d) {
    char lhs[64];
    if (d->short_ != 0)
        snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", d->short_, d->name,
                 d->metavar ? " " : "", d->metavar ? d->metavar : "");
    else
        snprintf(lhs, sizeof lhs, "    --%s%s%s", d->name,
                 d->metavar ? " " : "", d->metavar ? d->metavar : "");
    fprintf(out, "  %-26s %s\n", lhs, d->help);
}

static void usage_global(FILE *out) {
    fprintf(out, "usage: detctl [GLOBAL OPTIONS] COMMAND [OPTIONS]\n\n"
                 "commands:\n");
    for (size_t i = 0; i < N_CMDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s%s%s", cmd_defs[i].name,
                 cmd_defs[i].sub ? " " : "",
                 cmd_defs[i].sub ? cmd_defs[i].sub : "");
        const char *nl = strchr(cmd_defs[i].summary, '\n');
        int n = nl ? (int)(nl - cmd_defs[i].summary)
                   : (int)strlen(cmd_defs[i].summary);
        fprintf(out, "  %-14s %.*s%s\n", name, n, cmd_defs[i].summary,
                nl ? " ..." : "");
    }
    fprintf(out, "\nglobal options (before or after the command):\n");
    static const int g[] = {O_SOCKET,  O_ADDRESS,  O_SERVER,
                            O_TLS_CA,  O_TLS_CERT, O_TLS_KEY,
                            O_TIMEOUT, O_HELP,     O_VERSION};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        opt_line(out, opt_find(g[i]));
    fprintf(out,
            "\n'detctl COMMAND --help' lists a command's options. "
            "Commands that print data\ntake -o json (or --json): each "
            "document has api_version and kind\n(docs/detctl-json.md). "
            "Times are UTC (ISO 8601, Z).\n\n"
            "environment:\n"
            "  DETD_SOCKET     the socket when --socket is not given\n"
            "  DETD_NAMESPACE  the namespace when --namespace is not given\n"
            "\n%s",
            exit_text);
}

static void usage_cmd(FILE *out, const struct cmd_def *c) {
    fprintf(out, "usage: detctl %s%s%s [OPTIONS]%s%s\n\n%s\n\noptions:\n",
            c->name, c->sub ? " " : "", c->sub ? c->sub : "",
            c->args[0] ? " " : "", c->args, c->summary);
    int global = 0;
    for (size_t i = 0; c->opts[i] != 0; i++) {
        const struct opt_def *d = opt_find(c->opts[i]);
        if (d->id == O_SOCKET)
            global = 1;
        if (d->id >= O_SOCKET && d->id <= O_TIMEOUT)
            continue;
        opt_line(out, d);
    }
    if (global)
        fprintf(out, "  (and the global options: --socket, --address, "
                     "--tls-ca, --tls-cert, --tls-key,\n  --timeout; see "
                     "detctl --help)\n");
    if (c->namespaced)
        fprintf(out, "\nenvironment: DETD_NAMESPACE (when --namespace is "
                     "not given), DETD_SOCKET\n");
    fprintf(out, "\n%s", exit_text);
}

static const struct cmd_def *cmd_find(const char *name, const char *sub) {
    for (size_t i = 0; i < N_CMDS; i++)
        if (strcmp(cmd_defs[i].name, name) == 0 &&
            (cmd_defs[i].sub == NULL ||
             (sub != NULL && strcmp(cmd_defs[i].sub, sub) == 0)))
            return &cmd_defs[i];
    return NULL;
}

/* Build getopt_long's tables for the ids. Returns 0 or -1 (too many). */
static void build_opts(const int *ids, struct option *lo, char *so) {
    size_t n = 0, s = 0;
    so[s++] = ':';
    for (size_t i = 0; ids[i] != 0; i++) {
        const struct opt_def *d = opt_find(ids[i]);
        lo[n++] = (struct option){d->name, d->has_arg, NULL, d->id};
        if (d->short_ != 0) {
            so[s++] = (char)d->short_;
            if (d->has_arg == required_argument)
                so[s++] = ':';
        }
    }
    lo[n] = (struct option){NULL, 0, NULL, 0};
    so[s] = '\0';
}

static int short_to_id(const int *ids, int c) {
    for (size_t i = 0; ids[i] != 0; i++) {
        const struct opt_def *d = opt_find(ids[i]);
        if (d->short_ == c)
            return d->id;
    }
    return c;
}

#include <stdarg.h>
__attribute__((format(printf, 2, 3))) static int
usage_err(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "detctl: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd != NULL)
        fprintf(stderr, " (see 'detctl %s --help')\n", cmd);
    else
        fprintf(stderr, " (see 'detctl --help')\n");
    return DETCTL_EXIT_USAGE;
}

static int push(const char ***arr, size_t *n, int argc, const char *v) {
    if (*arr == NULL &&
        (*arr = calloc((size_t)argc + 1, sizeof(**arr))) == NULL)
        return -1;
    (*arr)[(*n)++] = v;
    return 0;
}

/* Apply one option. Returns -1 to go on, or an exit status. */
static int apply(struct detctl_opts *o, int id, const char *arg, int argc,
                 const char *cmd, const char **timeout, const char **expect) {
    switch (id) {
    case O_SOCKET:
        o->socket = arg;
        break;
    case O_ADDRESS:
    case O_SERVER:
        o->address = arg;
        break;
    case O_TLS_CA:
        o->tls_ca = arg;
        break;
    case O_TLS_CERT:
        o->tls_cert = arg;
        break;
    case O_TLS_KEY:
        o->tls_key = arg;
        break;
    case O_TIMEOUT:
        *timeout = arg;
        break;
    case O_OUTPUT:
        if (strcmp(arg, "json") == 0)
            o->json = 1;
        else if (strcmp(arg, "text") == 0)
            o->json = 0;
        else
            return usage_err(cmd, "-o '%s': the formats are text and json",
                             arg);
        break;
    case O_OUTFILE:
        o->out = arg;
        break;
    case O_JSON:
        o->json = 1;
        break;
    case O_NAMESPACE:
        o->namespace_ = arg;
        o->namespace_src = "--namespace";
        break;
    case O_KERNEL:
        o->kernel = arg;
        break;
    case O_ARCH:
        o->arch = arg;
        break;
    case O_ALL:
        o->all = 1;
        break;
    case O_CLUSTER:
        o->cluster = 1;
        break;
    case O_VOTES:
        o->votes = 1;
        break;
    case O_IMPORTS:
        o->imports = 1;
        break;
    case O_VERBOSE:
        o->verbose = 1;
        break;
    case O_KEY:
        o->key = arg;
        break;
    case O_TABLE_KEY:
        o->table_key = arg;
        break;
    case O_CANDIDATE:
        if (push(&o->candidates, &o->n_candidates, argc, arg) != 0)
            goto oom;
        break;
    case O_SOURCE:
        o->source = arg;
        break;
    case O_ALLOW_EMPTY:
        o->allow_empty = 1;
        break;
    case O_STRICT_DETERMINISM:
        o->strict_determinism = 1;
        break;
    case O_REQUIRE_GOVERNED:
        o->require_governed = 1;
        break;
    case O_EXPECT_RANKS:
        *expect = arg;
        break;
    case O_JOB:
        o->job = arg;
        break;
    case O_ALL_JOBS:
        o->all_jobs = 1;
        break;
    case O_LOCK:
        o->lock = arg;
        break;
    case O_TRITON_VERSION:
        o->triton_version = arg;
        break;
    case O_REQUIRE: {
        static const char *const fields[] = {"triton_version", "torch_version",
                                             "cuda_version", "driver"};
        const char *eq = strchr(arg, '=');
        int known = 0;
        for (size_t i = 0; eq != NULL && i < 4; i++)
            known |= strlen(fields[i]) == (size_t)(eq - arg) &&
                     strncmp(arg, fields[i], (size_t)(eq - arg)) == 0;
        if (!known || eq[1] == '\0')
            return usage_err(cmd,
                             "--require '%s' is not FIELD=VALUE with FIELD "
                             "one of triton_version, torch_version, "
                             "cuda_version, driver",
                             arg);
        if (o->n_require == 7) /* --triton-version takes the 8th */
            return usage_err(cmd, "--require: at most 7");
        o->require[o->n_require++] = arg;
        break;
    }
    case O_PAGE_SIZE: {
        char *end = NULL;
        errno = 0;
        long n = strtol(arg, &end, 10);
        if (errno != 0 || end == arg || *end != '\0' || n < 1 || n > 1000)
            return usage_err(cmd,
                             "--page-size '%s' is not a number from 1 "
                             "to 1000",
                             arg);
        o->page_size = (uint32_t)n;
        break;
    }
    case O_REPORT:
        o->report = arg;
        break;
    case O_JUNIT:
        o->junit = arg;
        break;
    default:
        return usage_err(cmd, "internal: option %s", "?");
    }
    return -1;
oom:
    fprintf(stderr, "detctl: out of memory\n");
    return DETCTL_EXIT_ERROR;
}

/* getopt_long over args with the ids; positionals go to o->files. */
static int parse_with(struct detctl_opts *o, int argc, char **argv,
                      const int *ids, const char *cmd, int global,
                      const char **timeout, const char **expect,
                      const struct cmd_def *c) {
    struct option lo[40];
    char so[40];
    build_opts(ids, lo, so);
    char sbuf[44];
    if (global) { /* stop at the command */
        snprintf(sbuf, sizeof sbuf, "+%s", so);
    } else {
        snprintf(sbuf, sizeof sbuf, "%s", so);
    }
    opterr = 0;
    optind = 0; /* GNU: reinitialize */
    for (;;) {
        int li = -1;
        int ch = getopt_long(argc, argv, sbuf, lo, &li);
        if (ch == -1)
            break;
        const char *bad = argv[optind - 1];
        if (ch == '?') {
            if (optopt != 0) {
                char s[3] = {'-', (char)optopt, 0};
                return cmd ? usage_err(cmd, "'%s': not an option of '%s'", s,
                                       cmd)
                           : usage_err(cmd, "unknown option '%s'", s);
            }
            return cmd ? usage_err(cmd, "'%s': not an option of '%s'", bad, cmd)
                       : usage_err(cmd, "unknown option '%s'", bad);
        }
        if (ch == ':')
            return usage_err(cmd, "%s needs a value", bad);
        int id = short_to_id(ids, ch);
        if (id == O_HELP) {
            if (c != NULL)
                usage_cmd(stdout, c);
            else
                usage_global(stdout);
            return DETCTL_EXIT_OK;
        }
        if (id == O_VERSION) {
            printf("detctl %s\n", DETD_VERSION);
            return DETCTL_EXIT_OK;
        }
        int ex = apply(o, id, optarg, argc, cmd, timeout, expect);
        if (ex >= 0)
            return ex;
    }
    if (global)
        return -1;
    for (int i = optind; i < argc; i++) {
        if (c->files == 0 || (c->files == 1 && o->n_files == 1))
            return usage_err(cmd, "unexpected argument '%s'", argv[i]);
        if (push(&o->files, &o->n_files, argc, argv[i]) != 0) {
            fprintf(stderr, "detctl: out of memory\n");
            return DETCTL_EXIT_ERROR;
        }
    }
    return -1;
}

/* See detctl_cli.h. */
int detctl_cli_parse(int argc, char **argv, struct detctl_opts *o) {
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 5000;
    const char *timeout = NULL, *expect = NULL;
    static const int g[] = {GLOBAL_OPTS, O_VERSION, 0};
    int ex = parse_with(o, argc, argv, g, NULL, 1, &timeout, &expect, NULL);
    if (ex >= 0)
        return ex;
    int at = optind;
    if (at >= argc) {
        usage_global(stderr);
        return DETCTL_EXIT_USAGE;
    }
    o->command = argv[at];
    if (strcmp(o->command, "help") == 0) {
        const char *name = at + 1 < argc ? argv[at + 1] : NULL;
        const char *sub = at + 2 < argc ? argv[at + 2] : NULL;
        const struct cmd_def *c = name ? cmd_find(name, sub) : NULL;
        if (name != NULL && c == NULL)
            return usage_err(NULL, "unknown command '%s'", name);
        if (c != NULL)
            usage_cmd(stdout, c);
        else
            usage_global(stdout);
        return DETCTL_EXIT_OK;
    }
    const struct cmd_def *c = NULL;
    if (strcmp(o->command, "table") == 0 || strcmp(o->command, "lock") == 0) {
        const char *subs = strcmp(o->command, "table") == 0
                               ? "export, merge, report and import"
                               : "export and import";
        if (at + 1 >= argc || argv[at + 1][0] == '-') {
            if (at + 1 < argc && (strcmp(argv[at + 1], "--help") == 0 ||
                                  strcmp(argv[at + 1], "-h") == 0)) {
                for (size_t i = 0; i < N_CMDS; i++)
                    if (cmd_defs[i].sub != NULL &&
                        strcmp(cmd_defs[i].name, o->command) == 0) {
                        usage_cmd(stdout, &cmd_defs[i]);
                        fputc('\n', stdout);
                    }
                return DETCTL_EXIT_OK;
            }
            return usage_err(o->command, "%s needs a subcommand: %s",
                             o->command, subs);
        }
        o->subcommand = argv[at + 1];
        c = cmd_find(o->command, o->subcommand);
        if (c == NULL)
            return usage_err(o->command, "%s '%s': the subcommands are %s",
                             o->command, o->subcommand, subs);
        at++;
    } else {
        c = cmd_find(o->command, NULL);
        if (c == NULL)
            return usage_err(NULL, "unknown command '%s'", o->command);
    }
    char cmdname[32];
    snprintf(cmdname, sizeof cmdname, "%s%s%s", c->name, c->sub ? " " : "",
             c->sub ? c->sub : "");
    ex = parse_with(o, argc - at, argv + at, c->opts, cmdname, 0, &timeout,
                    &expect, c);
    if (ex >= 0)
        return ex;
    if (timeout != NULL) {
        char *end = NULL;
        errno = 0;
        long long t = strtoll(timeout, &end, 10);
        if (errno != 0 || end == timeout || *end != '\0' || t <= 0)
            return usage_err(cmdname,
                             "--timeout '%s' is not a positive number of "
                             "milliseconds",
                             timeout);
        o->timeout_ms = t;
    }
    if (expect != NULL) {
        char *end = NULL;
        errno = 0;
        long n = strtol(expect, &end, 10);
        if (errno != 0 || end == expect || *end != '\0' || n <= 0 ||
            n > 1000000)
            return usage_err(cmdname,
                             "--expect-ranks '%s' is not a positive number "
                             "of ranks",
                             expect);
        o->expect_ranks = n;
    }
    if (c->files > 0 && o->n_files == 0)
        return usage_err(cmdname, "%s needs FILE", cmdname);
    if (o->namespace_ == NULL) {
        const char *env = getenv("DETD_NAMESPACE");
        if (env != NULL && env[0] != '\0') {
            o->namespace_ = env;
            o->namespace_src = "DETD_NAMESPACE";
        }
    }
    return -1;
}

/* See detctl_cli.h. */
void detctl_cli_opts_clear(struct detctl_opts *o) {
    free(o->candidates);
    free(o->files);
    o->candidates = o->files = NULL;
    o->n_candidates = o->n_files = 0;
}

/* See detctl_cli.h. */
json_t *detctl_cli_doc(const char *kind) {
    return json_pack("{s:i, s:s}", "api_version", DETCTL_JSON_API_VERSION,
                     "kind", kind);
}

/* See detctl_cli.h. */
int detctl_cli_print_doc(json_t *doc) {
    if (doc == NULL) {
        fprintf(stderr, "detctl: out of memory\n");
        return DETCTL_EXIT_ERROR;
    }
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(doc);
    return DETCTL_EXIT_OK;
}

/* See detctl_cli.h. */
void detctl_cli_iso_time(int64_t unix_ms, char *buf, size_t len) {
    if (unix_ms <= 0) {
        snprintf(buf, len, "-");
        return;
    }
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;
    char s[32];
    if (gmtime_r(&t, &tm) == NULL ||
        strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        snprintf(buf, len, "%lld", (long long)unix_ms);
        return;
    }
    snprintf(buf, len, "%s.%03dZ", s, (int)(unix_ms % 1000));
}

/* See detctl_cli.h. */
json_t *detctl_cli_json_time(int64_t unix_ms) {
    if (unix_ms <= 0)
        return json_null();
    char b[48];
    detctl_cli_iso_time(unix_ms, b, sizeof b);
    return json_string(b);
}
