"""The configuration file and --check-config, through the real binary.

Checks exit codes and output of --check-config (the effective
configuration, re-readable; errors naming file, line and key), that the
daemon serves with the file's settings and that flags override it, that a
bad file stops the daemon before it creates anything, and that the
packaged example (deploy/detd.conf) lists every key with its default.
"""
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import DETD, REPO, Daemon, ServeClient  # noqa: E402

EXAMPLE = REPO / "deploy" / "detd.conf"


def detd(*args, env=None):
    return subprocess.run([str(DETD), *map(str, args)], capture_output=True,
                          text=True, timeout=30, env=env)


def effective(text):
    """The key = value lines of --check-config output, as a list."""
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def file_keys():
    """The file keys, from --help (every long flag but the CLI-only ones)."""
    out = detd("--help").stdout
    keys = re.findall(r"^  --([a-z-]+)", out, re.M)
    return [k for k in keys if k not in ("config", "check-config", "repair", "lock", "lock-require", "version", "help")]


def test_check_config_prints_effective_configuration(tmpdir_short):
    conf = tmpdir_short / "detd.conf"
    state = tmpdir_short / "state" / "sub"
    sock = tmpdir_short / "run" / "d.sock"
    conf.write_text(f"""# a comment
socket = {sock}
state-dir = "{state}"   # quoted
namespace = from-file
lease-ms = 1500
tables = {tmpdir_short}
tables = /
log-format = json
""")
    r = detd("--check-config", "--config", conf, "--lease-ms", "900",
             "--tables", tmpdir_short)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = effective(r.stdout)
    assert f"socket = {sock}" in lines
    assert f"state-dir = {state}" in lines
    assert "namespace = from-file" in lines
    assert "lease-ms = 900" in lines            # the flag wins
    assert [ln for ln in lines if ln.startswith("tables")] == [f"tables = {tmpdir_short}"]
    assert "log-format = json" in lines
    assert "max-waiters = 65536" in lines       # defaults are shown too
    # Nothing was opened or created.
    assert not state.exists() and not (tmpdir_short / "state").exists()
    assert not sock.exists() and not sock.parent.exists()
    # The output is itself a valid configuration with the same effect.
    again = tmpdir_short / "again.conf"
    again.write_text(r.stdout)
    r2 = detd("--check-config", "--config", again)
    assert r2.returncode == 0, r2.stderr
    assert effective(r2.stdout) == lines


def test_check_config_names_file_line_and_key(tmpdir_short):
    conf = tmpdir_short / "bad.conf"
    conf.write_text("\n".join([
        "socket = /tmp/x.sock",   # 1
        "lease-ms = 5x",          # 2
        "log_level = debug",      # 3 unknown key
        "namespace",              # 4 missing =
        'state-dir = "/a',        # 5 bad quote
        "log-format = xml",       # 6
        "max-clients = 0",        # 7
    ]) + "\n")
    r = detd("--check-config", "--config", conf)
    assert r.returncode == 2
    assert r.stdout == ""
    errs = r.stderr.splitlines()
    assert errs == [
        f"detd: {conf}:2: lease-ms: '5x' is not a number from 100 to 3600000",
        f"detd: {conf}:3: log_level: unknown key (keys are the long flag names without '--'; see detd --help)",
        f"detd: {conf}:4: namespace: missing '=' (lines are 'key = value')",
        f"detd: {conf}:5: state-dir: unterminated quoted value (no closing '\"')",
        f"detd: {conf}:6: log-format: 'xml' is not one of human, json",
        f"detd: {conf}:7: max-clients: '0' is not a number from 1 to 1000000",
    ]
    # A flag error names the flag.
    r = detd("--check-config", "--lease-ms", "5x")
    assert r.returncode == 2
    assert "detd: --lease-ms: '5x' is not a number from 100 to 3600000" in r.stderr
    # A missing file.
    r = detd("--check-config", "--config", tmpdir_short / "nope.conf")
    assert r.returncode == 2
    assert f"{tmpdir_short}/nope.conf: cannot open: No such file or directory" in r.stderr


def test_check_config_checks_paths(tmpdir_short):
    plain = tmpdir_short / "plain"
    plain.write_text("x")
    conf = tmpdir_short / "detd.conf"
    conf.write_text(f"""state-dir = {plain}/state
tables = {tmpdir_short}/missing-tables
etcd = http://127.0.0.1:1
node-id = n1
etcd-ca = {tmpdir_short}/ca.pem
""")
    r = detd("--check-config", "--config", conf, "--socket", tmpdir_short / "d.sock")
    assert r.returncode == 2, r.stdout
    assert f"state-dir: '{plain}/state' cannot be created: '{plain}' is not a directory" in r.stderr
    assert f"tables: '{tmpdir_short}/missing-tables': No such file or directory" in r.stderr
    assert f"etcd-ca: '{tmpdir_short}/ca.pem': No such file or directory" in r.stderr
    assert len(r.stderr.splitlines()) == 3


def test_daemon_serves_with_the_file_and_flags_override(tmpdir_short):
    d = Daemon(tmpdir_short)
    conf = tmpdir_short / "detd.conf"
    conf.write_text(f"""socket = {d.socket}
state-dir = {d.state}
namespace = from-file
lease-ms = 1200
""")
    # Daemon passes --socket/--state-dir itself; they equal the file's.
    d.extra_args = ["--config", str(conf)]
    d.start()
    st = d.status()
    assert st["namespace"] == "from-file"
    assert d.stop() == 0
    d.extra_args = ["--config", str(conf), "--namespace", "from-flag"]
    d.start()
    assert d.status()["namespace"] == "from-flag"
    assert d.stop() == 0


def test_daemon_refuses_a_bad_file_before_creating_anything(tmpdir_short):
    conf = tmpdir_short / "detd.conf"
    state = tmpdir_short / "state"
    sock = tmpdir_short / "d.sock"
    conf.write_text(f"socket = {sock}\nstate-dir = {state}\nlease-ms = 10\n")
    r = detd("--config", conf)
    assert r.returncode == 2
    assert f"{conf}:3: lease-ms: '10' is not a number from 100 to 3600000" in r.stderr
    assert not state.exists() and not sock.exists()


def test_example_lists_every_key_with_its_default(tmpdir_short):
    keys = file_keys()
    assert "log-format" in keys and "tables" in keys and len(keys) >= 20
    text = EXAMPLE.read_text()
    listed = set(re.findall(r"^#([a-z-]+) = ", text, re.M))
    assert set(keys) - listed == set(), "keys missing from deploy/detd.conf"
    assert listed - set(keys) == set(), "deploy/detd.conf lists unknown keys"
    # As shipped (all commented out) it is valid and changes nothing.
    base = detd("--check-config")
    r = detd("--check-config", "--config", EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert effective(r.stdout) == effective(base.stdout)
    # Uncommenting the single-valued local settings gives the defaults.
    local = [ln[1:] for ln in text.splitlines()
             if re.match(r"^#(socket|state-dir|namespace|lease-ms|max-clients|"
                         r"max-waiters|log-level|log-format) = ", ln)]
    assert len(local) == 8
    conf = tmpdir_short / "uncommented.conf"
    conf.write_text("\n".join(local) + "\n")
    r = detd("--check-config", "--config", conf, env={"PATH": "/usr/bin:/bin"})
    base = detd("--check-config", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert effective(r.stdout) == effective(base.stdout)


def test_exit_when_idle_waits_for_the_last_client_then_exits(tmpdir_short):
    """--exit-when-idle-s: an attached client keeps the daemon for longer
    than the idle time (three of them, its checks being a second apart);
    once it leaves, the daemon logs why and exits 0 within the idle time
    plus two checks and the drain."""
    idle_s = 1
    d = Daemon(tmpdir_short, ["--exit-when-idle-s", str(idle_s)]).start()
    try:
        c = ServeClient(d, rank=0)  # libdetd in its own process (the plain build under ASan)
        r = c.call(op="decide", key="i:0", flags=["no_claim"])  # attached; no claim open
        assert r["rc"] == 0, r
        held_until = time.monotonic() + 3 * (idle_s + 1)
        while time.monotonic() < held_until:
            assert d.proc.poll() is None, d.read_log()
            time.sleep(0.1)
        c.close()
        # The idle time, two checks (1 s apart) and the drain's bound (its
        # grace, 2 s): far below this.
        d.proc.wait(timeout=idle_s + 2 + 10)
        assert d.proc.returncode == 0, d.read_log()
        log = d.read_log()
        assert f"no client for {idle_s} s (--exit-when-idle-s): exiting" in log, log
    finally:
        d.stop()


def test_check_config_refuses_the_metrics_values_the_daemon_refuses(tmpdir_short):
    base = ["--state-dir", tmpdir_short / "st", "--socket", tmpdir_short / "d.sock"]
    bad = {"foo": "--metrics: 'foo' is not HOST:PORT",
           ":9100": "--metrics: ':9100' is not HOST:PORT",
           "[::1:9100": "--metrics: '[::1:9100' is not [ADDRESS]:PORT",
           "127.0.0.1:0": "--metrics: '127.0.0.1:0': port must be 1 to 65535",
           "127.0.0.1:99999": "--metrics: '127.0.0.1:99999': port must be 1 to 65535"}
    conf = tmpdir_short / "m.conf"
    for value, msg in bad.items():
        for args in (["--check-config", "--metrics", value], ["--metrics", value]):
            r = detd(*base, *args)
            assert r.returncode == 2 and msg in r.stderr, (args, r.returncode, r.stderr)
        conf.write_text(f"metrics = {value}\n")
        r = detd(*base, "--check-config", "--config", conf)
        assert r.returncode == 2 and msg.split(": ", 1)[1] in r.stderr, r.stderr
    assert not (tmpdir_short / "st").exists()  # refused before anything was made
    for value in ("127.0.0.1:9100", "[::1]:9100"):
        r = detd(*base, "--check-config", "--metrics", value)
        assert r.returncode == 0 and f"metrics = {value}" in r.stdout, r.stderr


def test_dash_h_is_help():
    r, long_ = detd("-h"), detd("--help")
    assert r.returncode == 0 and r.stdout == long_.stdout and r.stdout.startswith("Usage: detd"), r.stderr
    assert "print this help and exit (also -h)" in r.stdout
