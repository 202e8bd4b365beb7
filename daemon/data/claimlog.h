/*
 * claimlog: the timing passes handed out, journaled in the state
 * directory (claims.log), so that a daemon that restarts (a crash, an
 * upgrade) gives an open pass back to the process that was timing it
 * instead of to another rank, which would time the key a second time.
 *
 * One line per designation, appended without fsync (a killed daemon
 * leaves it in the page cache): "<decision id> <pid> <uid> <unix ms>".
 * Passes that ended are not written: at start-up the caller skips keys
 * that are decided and holders that are gone. The file is read (at most
 * CLAIMLOG_MAX_BYTES; malformed lines skipped) and started anew at open;
 * past CLAIMLOG_MAX_BYTES it is started anew while running (the passes
 * open then are not restored after a restart). Single-threaded.
 */
#ifndef DETD_CLAIMLOG_H
#define DETD_CLAIMLOG_H

#include <stddef.h>
#include <stdint.h>

#define CLAIMLOG_MAX_BYTES (4 * 1024 * 1024)

typedef struct claimlog claimlog;

/* One journaled designation (the latest for its id). */
struct claimlog_entry {
    char id[65];
    int32_t pid;
    uint32_t uid;
    int64_t at_unix_ms;
};

/*
 * Open dir/claims.log: *ret_entries (heap, caller frees; may be NULL with
 * *ret_n 0) gets the latest designation of each id found, and
 * *ret_written_ms the file's last write (unix ms; 0: none): the daemon
 * that wrote it ran at least until then. Then the file is emptied.
 * Returns 0 or -errno / DETD_ENOMEM (*ret untouched).
 */
int claimlog_open(const char *dir, claimlog **ret,
                  struct claimlog_entry **ret_entries, size_t *ret_n,
                  int64_t *ret_written_ms);

/* Journal a designation. Returns 0 or -errno (nothing else changes). */
int claimlog_add(claimlog *l, const char *id, int32_t pid, uint32_t uid,
                 int64_t at_unix_ms);

/* Close. NULL is a no-op. */
void claimlog_close(claimlog *l);

#endif /* DETD_CLAIMLOG_H */
