/*
 * wirecheck: the strings of a received protobuf message, checked on its
 * wire bytes before protobuf-c decodes them. Pure functions, no I/O.
 *
 * protobuf-c hands string fields out as C strings, so a field holding a
 * NUL byte would be read as its part before the NUL ("k\0x" as "k"), and
 * it does not check UTF-8, so invalid bytes would be stored and later sent
 * to clients whose decoders refuse them. wirecheck_message() walks the
 * encoded message with its descriptor (sub-messages and repeated fields
 * included) and refuses a string field that holds a NUL byte or is not
 * valid UTF-8 (RFC 3629: overlong forms, surrogates and code points above
 * U+10FFFF are invalid), naming the field by its path in the message,
 * e.g. "key.candidates[1]". bytes fields and unknown fields are not
 * strings and are not checked.
 */
#ifndef DETD_WIRECHECK_H
#define DETD_WIRECHECK_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "utf8.h"

/* Deepest nesting of sub-messages walked; deeper is refused. */
#define WIRECHECK_MAX_DEPTH 32

/*
 * Check every string field of the message encoded in buf[0..len) (both
 * borrowed for the call) as described by desc.
 * Returns 0 when every string is valid; DETD_EINVAL when a string field
 * is not, with why (why_len bytes, may be NULL/0) set to e.g.
 * "key.candidates[1] holds a NUL byte" or "client.host is not valid
 * UTF-8 (byte 3)"; DETD_EPROTO when the bytes are not a well-formed
 * message (truncated, a bad tag or length, a string or message field
 * with another wire type, nesting over WIRECHECK_MAX_DEPTH), with why
 * saying where. Whatever it returns, nothing is allocated.
 */
int wirecheck_message(const ProtobufCMessageDescriptor *desc,
                      const uint8_t *buf, size_t len, char *why,
                      size_t why_len);

#endif /* DETD_WIRECHECK_H */
