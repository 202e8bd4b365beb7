/*
 * detd_probe: send raw bytes to any method of a gRPC server on a unix
 * socket and print the status. For tests of hostile input: unknown
 * methods, undecodable requests, oversized messages.
 *
 *   detd_probe SOCKET METHOD (--hex HEX | --file PATH | --bytes N [--fill
 * BYTE])
 *
 * SOCKET is a unix socket path, or tcp:HOST:PORT for a --listen address
 * (plaintext).
 *
 * Prints "status=<code> message=<text>" and exits 0 once the call ended
 * (whatever its status), 2 on a usage or local error. With
 * DETD_PROBE_RESPONSE=1 in the environment a second line
 * "response=<hex>" holds the response message (empty when none came).
 *
 * Built a second time as libdetd_probe.so (DETD_PROBE_LIB: no main), whose
 * detd_probe_call() makes the same call from inside the process that
 * loads it: the daemon then sees that process's credentials, as a raw
 * request from a session's own process needs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

/* One call of METHOD on SOCKET with the request BUF (N bytes), bounded by
 * DEADLINE_MS (10 s when not positive). Sets *STATUS and MSG (at most
 * MSGCAP bytes with its NUL, cut) and, when RESP is not NULL, *RESP (from
 * malloc, the caller frees it; NULL when no response came) and *RESP_LEN.
 * Returns 0 once the call ended, whatever its status; -1 when it could not
 * be started. */
int detd_probe_call(const char *socket, const char *method,
                    const unsigned char *buf, size_t n, long deadline_ms,
                    int *status, char *msg, size_t msgcap, unsigned char **resp,
                    size_t *resp_len) {
    int rc = -1;
    if (resp != NULL) {
        *resp = NULL;
        *resp_len = 0;
    }
    grpc_init();
    char target[512];
    if (strncmp(socket, "tcp:", 4) == 0)
        snprintf(target, sizeof(target), "%s", socket + 4);
    else
        snprintf(target, sizeof(target), "unix:%s", socket);
    grpc_arg arg;
    arg.type = GRPC_ARG_INTEGER;
    arg.key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    arg.value.integer = 64 * 1024 * 1024;
    grpc_channel_args args = {1, &arg};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice meth = grpc_slice_from_copied_string(method);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                     gpr_time_from_millis(deadline_ms > 0 ? deadline_ms : 10000,
                                          GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, meth, NULL, deadline, NULL);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    grpc_metadata_array md, tmd;
    grpc_metadata_array_init(&md);
    grpc_metadata_array_init(&tmd);
    grpc_byte_buffer *rbb = NULL;
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &rbb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &tmd;
    ops[5].data.recv_status_on_client.status = &st;
    ops[5].data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(call, ops, 6, (void *)1, NULL) == GRPC_CALL_OK) {
        grpc_completion_queue_pluck(cq, (void *)1,
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        rc = 0;
        *status = (int)st;
        char *text = grpc_slice_to_c_string(details);
        snprintf(msg, msgcap, "%s", text);
        gpr_free(text);
        grpc_byte_buffer_reader rd;
        if (resp != NULL && rbb != NULL &&
            grpc_byte_buffer_reader_init(&rd, rbb)) {
            grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
            size_t len = GRPC_SLICE_LENGTH(all);
            *resp = malloc(len + 1);
            if (*resp != NULL) {
                memcpy(*resp, GRPC_SLICE_START_PTR(all), len);
                *resp_len = len;
            }
            grpc_slice_unref(all);
            grpc_byte_buffer_reader_destroy(&rd);
        }
    }
    grpc_slice_unref(details);
    if (rbb != NULL)
        grpc_byte_buffer_destroy(rbb);
    grpc_byte_buffer_destroy(bb);
    grpc_metadata_array_destroy(&md);
    grpc_metadata_array_destroy(&tmd);
    grpc_call_unref(call);
    grpc_slice_unref(meth);
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    grpc_shutdown();
    return rc;
}

#ifndef DETD_PROBE_LIB
static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: detd_probe SOCKET METHOD (--hex HEX | "
                        "--file PATH | --bytes N [--fill BYTE])\n");
        return 2;
    }
    size_t n = 0;
    unsigned char *buf = NULL;
    if (strcmp(argv[3], "--hex") == 0) {
        size_t len = strlen(argv[4]);
        if (len % 2 != 0)
            return 2;
        n = len / 2;
        buf = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            int hi = hexval(argv[4][2 * i]), lo = hexval(argv[4][2 * i + 1]);
            if (hi < 0 || lo < 0)
                return 2;
            buf[i] = (unsigned char)(hi * 16 + lo);
        }
    } else if (strcmp(argv[3], "--file") == 0) {
        FILE *f = fopen(argv[4], "rb");
        if (f == NULL)
            return 2;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len < 0 || len > 64L * 1024 * 1024)
            return 2;
        n = (size_t)len;
        buf = malloc(n + 1);
        if (buf == NULL || fread(buf, 1, n, f) != n)
            return 2;
        fclose(f);
    } else if (strcmp(argv[3], "--bytes") == 0) {
        n = strtoull(argv[4], NULL, 10);
        int fill = argc > 6 && strcmp(argv[5], "--fill") == 0
                       ? (int)strtol(argv[6], NULL, 0)
                       : 0x41;
        buf = malloc(n + 1);
        memset(buf, fill, n);
    } else {
        return 2;
    }
    /* DETD_PROBE_DEADLINE_MS: the call's deadline (default 10 s). */
    const char *dl_env = getenv("DETD_PROBE_DEADLINE_MS");
    long dl_ms = dl_env != NULL ? strtol(dl_env, NULL, 10) : 10000;
    const char *want = getenv("DETD_PROBE_RESPONSE");
    int with_resp = want != NULL && strcmp(want, "1") == 0;
    int status = 0;
    static char msg[65536];
    unsigned char *resp = NULL;
    size_t resp_len = 0;
    if (detd_probe_call(argv[1], argv[2], buf, n, dl_ms, &status, msg,
                        sizeof msg, with_resp ? &resp : NULL, &resp_len) != 0)
        return 2;
    printf("status=%d message=%s\n", status, msg);
    if (with_resp) {
        fputs("response=", stdout);
        for (size_t i = 0; i < resp_len; i++)
            printf("%02x", resp[i]);
        fputs("\n", stdout);
    }
    free(resp);
    free(buf);
    return 0;
}
#endif
