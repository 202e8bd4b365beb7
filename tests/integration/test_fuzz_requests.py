"""Mutation fuzzing of the daemon's request decoding and validation: valid
Decide, Report, Observe, Attach and Admin requests are mutated (bytes
flipped, cut, duplicated, spliced, fields set to extreme values) and sent
raw over the unix socket. Every call must end with a status, and the daemon
must keep serving the real clients afterwards. Under the sanitizer build
(CI runs this suite against it) a memory error aborts the daemon and fails
the health check here.

Seeded, so a failure is reproducible: DETD_FUZZ_SEED, DETD_FUZZ_CASES."""

import os
import random

from conftest import counter
from test_daemon import _field, decide_request, run_clients

SEED = int(os.environ.get("DETD_FUZZ_SEED", "20261129"))
CASES = int(os.environ.get("DETD_FUZZ_CASES", "400"))

METHODS = [
    "/detd.v1.Decider/Decide",
    "/detd.v1.Decider/Report",
    "/detd.v1.Decider/Observe",
    "/detd.v1.Admin/Status",
    "/detd.v1.Admin/ListDecisions",
    "/detd.v1.Admin/Verify",
    "/detd.v1.Admin/Reset",
    "/grpc.health.v1.Health/Check",
    "/detd.v1.Decider/Vote",
    "/detd.v1.Admin/ListVotes",
    "/detd.v1.Admin/ExportDecisions",
    "/detd.v1.Admin/ImportTable",
]


def identity(rng):
    return (_field(1, rng.choice([b"host", b"", b"h" * 300])) + _field(2, rng.randrange(1 << 31))
            + _field(3, rng.randrange(1 << 31)) + _field(6, b"GPU" * rng.randrange(4)))


def key(rng):
    cands = [b"BLOCK=%d,num_warps=4" % (16 << i) for i in range(rng.randrange(0, 6))]
    k = _field(2, b"sm90") + _field(3, b"m:k@0") + _field(4, b"i:%d" % rng.randrange(8))
    for c in cands:
        k += _field(5, c)
    return k


def seed_request(method, rng):
    if method.endswith("/Decide"):
        return decide_request(key=b"i:%d" % rng.randrange(8)) + _field(2, identity(rng))
    if method.endswith("/Report"):
        t = _field(1, b"BLOCK=16,num_warps=4") + _field(2, b"\x00" * 8 * rng.randrange(3))
        return (_field(1, 1) + _field(2, identity(rng)) + _field(4, rng.randrange(1 << 20))
                + _field(5, key(rng)) + _field(6, t))
    if method.endswith("/Observe"):
        return (_field(1, 1) + _field(2, identity(rng)) + _field(3, key(rng))
                + _field(4, b"BLOCK=16,num_warps=4") + _field(6, 1))
    if method.endswith("/Reset"):
        return _field(1, 1) + _field(3, b"m:nothing")
    if method.endswith("/ImportTable"):
        e = (_field(1, b"sm90") + _field(2, b"m:fuzz") + _field(3, b"i:%d" % rng.randrange(8))
             + _field(4, b"BLOCK=16,num_warps=4,num_stages=1,num_ctas=1"))
        return _field(1, 1) + _field(3, b"fuzz.json") + _field(4, e) * rng.randrange(1, 4)
    return _field(1, 1)


def mutate(data, rng):
    b = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(6)
        if op == 0 and b:  # flip bits
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # cut
            del b[rng.randrange(len(b)):]
        elif op == 2 and b:  # duplicate a slice
            i = rng.randrange(len(b))
            j = min(len(b), i + rng.randrange(1, 64))
            b[i:i] = b[i:j]
        elif op == 3:  # random bytes
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        elif op == 4:  # a huge varint length
            b += bytes([0x2A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
        else:  # an oversized string field
            b += _field(4, b"x" * rng.choice([4097, 40000]))
    return bytes(b)


def test_mutated_requests_never_break_the_daemon(daemon, tmpdir_short):
    rng = random.Random(SEED)
    codes = {}
    for _ in range(CASES):
        method = rng.choice(METHODS)
        payload = mutate(seed_request(method, rng), rng)
        code, msg = daemon.probe(method, payload.hex())
        assert code >= 0, f"{method}: the call did not end with a status: {msg}"
        codes[code] = codes.get(code, 0) + 1
    # Both accepted and refused requests were produced (the fuzzer reaches
    # past the decoder), and the daemon is still healthy.
    assert codes.get(0, 0) > 0 and codes.get(3, 0) > 0, codes
    assert daemon.probe("/grpc.health.v1.Health/Check", "")[0] == 0
    before = daemon.status()
    assert counter(before, "rejected") > 0
    res = run_clients(daemon, tmpdir_short, 4, 10, extra=("--key-prefix", "after:"))
    assert all(r["errors"] == [] for r in res)
    by = {}
    for r in res:
        for k, e in r["keys"].items():
            by.setdefault(k, set()).add(e["config"])
    assert len(by) == 10 and all(len(v) == 1 for v in by.values())
    assert daemon.stop() == 0
    assert "AddressSanitizer" not in daemon.read_log()
    assert "runtime error" not in daemon.read_log()
