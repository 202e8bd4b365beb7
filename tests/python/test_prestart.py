"""The suite's prestarted workers (prestart.py) start as a real process
would: their own pid, environment, argv, working directory and sys.path,
stdout and stderr, the interpreter's exit (threads joined, atexit run, the
status returned, a signal as a negative status), consecutive workers with
different string-hash seeds, and a real process where the interpreter
would have started differently."""

import json
import os
import subprocess
import sys

import prestart

SCRIPT = r'''
import atexit, json, os, sys, threading, time
atexit.register(lambda: print("atexit ran", flush=True))
mode = sys.argv[1]
print(json.dumps({"pid": os.getpid(), "argv": sys.argv, "cwd": os.getcwd(), "x": os.environ.get("PRESTART_X"),
                  "path0": sys.path[0], "extra": sys.path[1], "hash": hash("detd"),
                  "preloaded": "torch" in sys.modules}), flush=True)
print("on stderr", file=sys.stderr, flush=True)
if mode == "sleep":
    print("sleeping", flush=True)
    time.sleep(3600)
t = threading.Thread(target=lambda: print("thread done", flush=True))
t.start()
sys.exit(int(sys.argv[2]))
'''


def _script(tmp_path):
    p = tmp_path / "w" / "child.py"
    p.parent.mkdir()
    p.write_text(SCRIPT)
    return str(p)


def test_a_prestarted_worker_is_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv("DETD_TEST_PRESTART", "1")
    script = _script(tmp_path)
    env = dict(os.environ, PRESTART_X="one", PYTHONPATH=str(tmp_path / "extra"))
    p = prestart.popen([sys.executable, script, "run", "3"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert isinstance(p, prestart.Prestarted)
    out, err = p.communicate(timeout=120)
    first, *rest = out.splitlines()
    doc = json.loads(first)
    assert p.returncode == 3, (out, err)
    assert doc["pid"] == p.pid != os.getpid()
    assert doc["argv"] == [script, "run", "3"] and doc["cwd"] == str(tmp_path) and doc["x"] == "one"
    assert doc["path0"] == os.path.dirname(script) and doc["extra"] == str(tmp_path / "extra")
    assert doc["preloaded"] and err == "on stderr\n"
    assert rest == ["thread done", "atexit ran"], out


def test_kill_is_a_negative_status(tmp_path, monkeypatch):
    monkeypatch.setenv("DETD_TEST_PRESTART", "1")
    p = prestart.popen([sys.executable, _script(tmp_path), "sleep", "0"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert isinstance(p, prestart.Prestarted)
    assert p.stdout.readline() and p.stdout.readline() in ("on stderr\n", "sleeping\n")
    assert p.poll() is None
    try:
        p.communicate(timeout=0.2)
        raise AssertionError("a sleeping worker ended")
    except subprocess.TimeoutExpired:
        pass
    p.kill()
    p.communicate(timeout=120)
    assert p.returncode == -9


def test_consecutive_workers_hash_differently(tmp_path, monkeypatch):
    monkeypatch.setenv("DETD_TEST_PRESTART", "1")
    script = _script(tmp_path)
    docs = []
    for _ in range(2):
        out, _ = prestart.popen([sys.executable, script, "run", "0"], stdout=subprocess.PIPE, text=True,
                                env={k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}).communicate(
                                    timeout=120)
        docs.append(json.loads(out.splitlines()[0]))
    assert docs[0]["hash"] != docs[1]["hash"], docs


def test_an_interpreter_variable_that_differs_gets_a_real_process(tmp_path):
    env = dict(os.environ, PYTHONHASHSEED="7")
    p = prestart.popen([sys.executable, _script(tmp_path), "run", "0"], env=env, stdout=subprocess.PIPE, text=True)
    assert isinstance(p, subprocess.Popen)
    out, _ = p.communicate(timeout=120)
    assert not json.loads(out.splitlines()[0])["preloaded"] and p.returncode == 0


def test_a_server_that_cannot_start_says_why_and_its_workers_are_real(tmp_path, monkeypatch, capfd):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "torch.py").write_text("raise ImportError('no torch in this test')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken))
    server = prestart._Server()
    try:
        assert server.wait_ready() is False
    finally:
        server.stop()
    err = capfd.readouterr().err
    assert "the prestart server ended" in err and "no torch in this test" in err, err
    assert "workers run as real processes" in err, err
    monkeypatch.setenv("DETD_TEST_PRESTART", "1")
    monkeypatch.setattr(prestart, "_server", lambda: None)
    p = prestart.popen([sys.executable, _script(tmp_path), "run", "0"], stdout=subprocess.PIPE, text=True)
    assert isinstance(p, subprocess.Popen)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0 and not json.loads(out.splitlines()[0])["preloaded"]
