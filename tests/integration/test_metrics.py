"""The Prometheus endpoint (--metrics): every line of /metrics parsed by a
strict reader of the text format (0.0.4), counters and histograms checked
against a workload of real clients, and /healthz."""
import json
import math
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from conftest import CLIENT, DETCTL, DETD, IS_ROOT, Daemon, release_clients, requires

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"')


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse_value(s):
    if s in ("+Inf", "-Inf", "NaN"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?", s), s
    return float(s)


def parse(text):
    """Strict parse: returns ({(name, labels): value}, {family: type})."""
    assert text.endswith("\n")
    samples, types, helps = {}, {}, {}
    for n, line in enumerate(text.splitlines(), 1):
        assert line, f"line {n}: empty line"
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            assert NAME.fullmatch(name) and help_ and name not in helps, line
            helps[name] = help_
            continue
        if line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            assert typ in ("counter", "gauge", "histogram"), line
            assert name in helps and name not in types, f"line {n}: TYPE before HELP or twice"
            types[name] = typ
            continue
        assert not line.startswith("#"), line
        m = NAME.match(line)
        assert m, line
        name, rest = m.group(0), line[m.end():]
        labels = ()
        if rest.startswith("{"):
            end = rest.index("} ")
            body = rest[1:end]
            pos, items = 0, []
            while pos < len(body):
                lm = LABEL.match(body, pos)
                assert lm, f"line {n}: bad label at {body[pos:]!r}"
                items.append((lm.group(1), lm.group(2)))
                pos = lm.end()
                if pos < len(body):
                    assert body[pos] == ",", line
                    pos += 1
            labels = tuple(items)
            rest = rest[end + 1:]
        assert rest.startswith(" ") and " " not in rest[1:], line
        value = parse_value(rest[1:])
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in types:
                family = name[: -len(suffix)]
        assert family in types, f"line {n}: sample of undeclared family {name}"
        if types[family] == "counter":
            assert name.endswith("_total") and value >= 0, line
        assert (name, labels) not in samples, f"line {n}: duplicate series"
        samples[(name, labels)] = value
    # Histograms: cumulative buckets, +Inf equal to _count.
    for fam, typ in types.items():
        if typ != "histogram":
            continue
        series = {}
        for (name, labels), v in samples.items():
            if name == fam + "_bucket":
                rest = tuple(l for l in labels if l[0] != "le")
                le = dict(labels)["le"]
                series.setdefault(rest, []).append((parse_value(le), v))
        assert series, fam
        for rest, buckets in series.items():
            values = [v for _, v in buckets]
            assert [b for b, _ in buckets] == sorted(b for b, _ in buckets)
            assert values == sorted(values), f"{fam}{rest}: not cumulative"
            assert buckets[-1][0] == math.inf
            assert buckets[-1][1] == samples[(fam + "_count", rest)]
            assert (fam + "_sum", rest) in samples
    return samples, types


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(r.read().decode())


def val(samples, name, **labels):
    return samples[(name, tuple(labels.items()))]


@pytest.fixture
def mdaemon(tmpdir_short):
    port = free_port()
    d = Daemon(tmpdir_short, ["--metrics", f"127.0.0.1:{port}"]).start()
    d.port = port
    yield d
    d.stop()


def run_client(d, *args):
    r = subprocess.run([sys.executable, str(CLIENT), "--socket", d.socket, *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["errors"] == []
    return out


def test_counters_follow_a_workload(mdaemon):
    d = mdaemon
    s0, types = scrape(d.port)
    assert types["detd_decisions_total"] == "counter"
    assert types["detd_request_duration_seconds"] == "histogram"
    assert types["detd_clients_attached"] == "gauge"
    assert val(s0, "detd_decisions_total", source="timed") == 0
    assert val(s0, "detd_start_time_seconds") > 1.7e9

    run_client(d, "--keys", 7, "--key-prefix", "m:")  # 7 new keys: each timed once
    s1, _ = scrape(d.port)
    assert val(s1, "detd_decisions_total", source="timed") == 7
    assert val(s1, "detd_decisions_total", source="table") == 0
    assert val(s1, "detd_store_decisions") == 7
    assert val(s1, "detd_timing_passes_total") == 7
    assert val(s1, "detd_request_duration_seconds_count", method="Decide") == 7
    assert val(s1, "detd_request_duration_seconds_count", method="Report") == 7

    run_client(d, "--keys", 10, "--key-prefix", "m:")  # 7 hits, 3 new keys
    s2, _ = scrape(d.port)
    assert val(s2, "detd_decisions_total", source="timed") == 10
    assert val(s2, "detd_decide_lookups_total", result="hit") - \
        val(s1, "detd_decide_lookups_total", result="hit") == 7
    assert val(s2, "detd_request_duration_seconds_count", method="Decide") == 17
    assert val(s2, "detd_request_duration_seconds_count", method="Report") == 10
    assert val(s2, "detd_request_duration_seconds_bucket", method="Decide", le="+Inf") == 17
    assert val(s2, "detd_request_duration_seconds_sum", method="Decide") > 0
    # Calls refused before decoding count too: one undecodable Decide.
    code, _ = d.probe("/detd.v1.Decider/Decide", "ff")
    assert code == 3
    s3, _ = scrape(d.port)
    assert val(s3, "detd_request_duration_seconds_count", method="Decide") == 18
    st = d.status()
    assert st["decisions"] == 10


def test_waits_are_counted_and_timed(mdaemon):
    d = mdaemon
    start = d.root / "go"
    procs = [d.client("--keys", 4, "--key-prefix", "w:", "--rank", r, "--sleep-ms", 200,
                      "--wait-start", start, stdout=subprocess.PIPE) for r in range(3)]
    # All up before the race: a client that started late could find every
    # key decided and wait for none.
    release_clients(start, procs, 60)
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(o["errors"] == [] for o in outs)
    s, _ = scrape(d.port)
    waits = val(s, "detd_waits_total")
    assert waits >= 1
    assert val(s, "detd_wait_duration_seconds_count") == waits
    assert val(s, "detd_wait_duration_seconds_sum") >= 0.05 * waits
    assert val(s, "detd_decisions_total", source="timed") == 4
    assert val(s, "detd_request_duration_seconds_count", method="Decide") == 12


def test_healthz_and_other_paths(mdaemon):
    base = f"http://127.0.0.1:{mdaemon.port}"
    with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
        assert r.status == 200 and r.read() == b"ok\n"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nope", timeout=10)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x", method="POST"), timeout=10)
    assert e.value.code == 405


@requires(IS_ROOT, "needs root to switch users")
def test_refusals_are_exported(tmpdir_short):
    port = free_port()
    os.chmod(tmpdir_short, 0o755)
    d = Daemon(tmpdir_short, ["--metrics", f"127.0.0.1:{port}", "--allow-uid", "0",
                              "--socket-mode", "0666"]).start()
    try:
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            sys.executable, str(CLIENT), "--socket", d.socket, "--keys", "2"],
                           capture_output=True, text=True, timeout=60)
        out = json.loads(r.stdout)
        assert len(out["errors"]) == 2
        s, _ = scrape(port)
        assert val(s, "detd_refused_calls_total", reason="allow_list") >= 2
        assert val(s, "detd_refused_calls_total", reason="admin_list") == 0
        assert val(s, "detd_refused_connections_total") >= 1
        assert val(s, "detd_decisions_total", source="timed") == 0
    finally:
        d.stop()


@pytest.mark.parametrize("addr,needle", [
    ("127.0.0.1", "--metrics: '127.0.0.1' is not HOST:PORT"),
    ("127.0.0.1:0", "port must be 1 to 65535"),
    ("127.0.0.1:99999", "port must be 1 to 65535"),
])
def test_bad_metrics_address(tmpdir_short, addr, needle):
    r = subprocess.run([str(DETD), "--socket", str(tmpdir_short / "s.sock"),
                        "--state-dir", str(tmpdir_short / "st"), "--metrics", addr],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert needle in r.stdout + r.stderr
    assert not (tmpdir_short / "s.sock").exists()


def test_metrics_port_in_use(tmpdir_short):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        r = subprocess.run([str(DETD), "--socket", str(tmpdir_short / "s.sock"),
                            "--state-dir", str(tmpdir_short / "st"), "--metrics", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode != 0
        assert f"cannot listen on '127.0.0.1:{port}'" in r.stdout + r.stderr
    finally:
        s.close()


def test_build_info_and_table_load_failures(tmpdir_short):
    tables = os.path.join(tmpdir_short, "tables")
    os.makedirs(tables)
    with open(os.path.join(tables, "sm90.json"), "w") as f:
        f.write('{"format": "detd-table-1", "arch": ')  # cut short: cannot load
    port = free_port()
    d = Daemon(tmpdir_short, ["--metrics", f"127.0.0.1:{port}", "--tables", tables]).start()
    try:
        s, _ = scrape(port)
        st = json.loads(subprocess.run([str(DETCTL), "--socket", d.socket, "status", "--json"],
                                       capture_output=True, text=True, timeout=30, check=True).stdout)
        version = st.get("version") or st.get("daemon", {}).get("version")
        assert val(s, "detd_build_info", version=version, api_version="1") == 1
        assert val(s, "detd_table_files_skipped") == 1
        assert val(s, "detd_table_reload_failures_total") == 0
        # Fixed, reloaded: nothing skipped any more.
        with open(os.path.join(tables, "sm90.json"), "w") as f:
            json.dump({"format": "detd-table-1", "arch": "sm90", "kernels": {}}, f)
        subprocess.run([str(DETCTL), "--socket", d.socket, "reload"], capture_output=True, text=True,
                       timeout=30, check=True)
        s, _ = scrape(port)
        assert val(s, "detd_table_files_skipped") == 0
    finally:
        d.stop()
