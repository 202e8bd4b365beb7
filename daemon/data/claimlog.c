/*
 * claimlog: the journal of timing passes handed out (see claimlog.h).
 */
#define _GNU_SOURCE
#include "data/claimlog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detd/error.h"

struct claimlog {
    int fd;
    int64_t size;
};

static int hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

struct seq_entry {
    struct claimlog_entry e;
    size_t seq; /* line order: the later line wins */
};

static int cmp_seq(const void *a, const void *b) {
    const struct seq_entry *x = a, *y = b;
    int c = strcmp(x->e.id, y->e.id);
    if (c != 0)
        return c;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Parse the file's text into the latest entry per id. */
static int parse(char *text, struct claimlog_entry **ret, size_t *ret_n) {
    struct seq_entry *v = NULL;
    size_t n = 0, cap = 0;
    for (char *line = strtok(text, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        char id[128];
        long long pid, uid, at;
        if (sscanf(line, "%127s %lld %lld %lld", id, &pid, &uid, &at) != 4 ||
            strlen(id) != 64 || !hex64(id) || pid <= 0 || pid > INT32_MAX ||
            uid < 0 || uid > UINT32_MAX)
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 64;
            struct seq_entry *nv = realloc(v, c * sizeof(*nv));
            if (nv == NULL) {
                free(v);
                return DETD_ENOMEM;
            }
            v = nv;
            cap = c;
        }
        memcpy(v[n].e.id, id, 65);
        v[n].e.pid = (int32_t)pid;
        v[n].e.uid = (uint32_t)uid;
        v[n].e.at_unix_ms = at;
        v[n].seq = n;
        n++;
    }
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_seq);
    struct claimlog_entry *out = calloc(n ? n : 1, sizeof(*out));
    if (out == NULL) {
        free(v);
        return DETD_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || strcmp(v[i].e.id, v[i + 1].e.id) != 0)
            out[k++] = v[i].e;
    free(v);
    *ret = out;
    *ret_n = k;
    return 0;
}

/* See claimlog.h. */
int claimlog_open(const char *dir, claimlog **ret,
                  struct claimlog_entry **ret_entries, size_t *ret_n,
                  int64_t *ret_written_ms) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/claims.log", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    claimlog *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return DETD_ENOMEM;
    l->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (l->fd < 0) {
        int err = -errno;
        free(l);
        return err;
    }
    struct stat st;
    int64_t written =
        fstat(l->fd, &st) == 0 && st.st_size > 0
            ? (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000
            : 0;
    char *text = malloc(CLAIMLOG_MAX_BYTES + 1);
    if (text == NULL) {
        claimlog_close(l);
        return DETD_ENOMEM;
    }
    size_t got = 0;
    ssize_t r;
    while (got < CLAIMLOG_MAX_BYTES &&
           (r = pread(l->fd, text + got, CLAIMLOG_MAX_BYTES - got,
                      (off_t)got)) > 0)
        got += (size_t)r;
    text[got] = '\0';
    struct claimlog_entry *v = NULL;
    size_t n = 0;
    int rc = parse(text, &v, &n);
    free(text);
    if (rc == 0 && ftruncate(l->fd, 0) != 0)
        rc = -errno;
    if (rc != 0) {
        free(v);
        claimlog_close(l);
        return rc;
    }
    *ret = l;
    *ret_entries = v;
    *ret_n = n;
    *ret_written_ms = written;
    return 0;
}

/* See claimlog.h. */
int claimlog_add(claimlog *l, const char *id, int32_t pid, uint32_t uid,
                 int64_t at_unix_ms) {
    if (l == NULL)
        return 0;
    char line[160];
    int len = snprintf(line, sizeof(line), "%s %d %u %" PRId64 "\n", id,
                       (int)pid, (unsigned)uid, at_unix_ms);
    if (len <= 0 || len >= (int)sizeof(line))
        return -EINVAL;
    if (l->size + len > CLAIMLOG_MAX_BYTES) {
        if (ftruncate(l->fd, 0) != 0)
            return -errno;
        l->size = 0;
    }
    if (pwrite(l->fd, line, (size_t)len, (off_t)l->size) != len)
        return errno != 0 ? -errno : -EIO;
    l->size += len;
    return 0;
}

/* See claimlog.h. */
void claimlog_close(claimlog *l) {
    if (l == NULL)
        return;
    if (l->fd >= 0)
        close(l->fd);
    free(l);
}
