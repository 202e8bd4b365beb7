"""Self-test of check_layers.py on small trees built in a temporary dir."""

import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_layers.py")
CC = os.environ.get("CC", "cc")

# A tree that keeps every rule: each file uses only what lies below it.
CLEAN = {
    "client/include/detd/error.h": "#pragma once\nint detd_strerror_len(int code);\n",
    "common/strfmt.h": '#pragma once\n#include "detd/error.h"\nint strfmt_len(int n);\n',
    "common/strfmt.c": '#include "strfmt.h"\nint strfmt_len(int n) { return n; }\n',
    "daemon/core/engine.h": "int engine_run(int n);\n",
    "daemon/core/engine.c": """\
        #include "engine.h"
        #include "strfmt.h"
        int engine_run(int n) { return strfmt_len(n); }
        """,
    "daemon/data/store.h": "int store_get(int n);\n",
    "daemon/data/store.c": """\
        #include "store.h"
        #include "core/engine.h"
        int store_get(int n) { return engine_run(n); }
        """,
    "daemon/io/rpc.h": "int io_send(int n);\n",
    "daemon/io/rpc.c": """\
        #include "rpc.h"
        #include "../core/engine.h"
        int io_send(int n) { return engine_run(n) + 1; }
        """,
    "daemon/app/decide.h": "int app_decide(int n);\n",
    "daemon/app/decide.c": """\
        #include "decide.h"
        #include "data/store.h"
        #include "io/rpc.h"
        int app_decide(int n) { return store_get(n) + io_send(n); }
        """,
    "daemon/app/reply.c": """\
        #include "decide.h"
        int app_reply(int n) { return app_decide(n); }
        """,
    "daemon/ops/admin.c": """\
        #include "app/decide.h"
        #include "core/engine.h"
        int ops_admin(int n) { return app_decide(n) + engine_run(n); }
        """,
    "daemon/main.c": """\
        #include "app/decide.h"
        int ops_admin(int n);
        int main(void) { return app_decide(1) + ops_admin(2); }
        """,
    "client/src/client.c": """\
        #include "detd/error.h"
        #include "strfmt.h"
        int detd_strerror_len(int code) { return strfmt_len(code); }
        """,
    "client/src/detctl.c": """\
        #include "detd/error.h"
        int main(void) { return detd_strerror_len(0); }
        """,
    # Tests and generated code may use anything.
    "tests/unit/test_engine.c": """\
        int app_decide(int n);
        int engine_run(int n);
        int main(void) { return app_decide(1) + engine_run(1); }
        """,
    "build/proto/detd.pb-c.c": """\
        int engine_run(int n);
        int pb_pack(int n) { return engine_run(n); }
        """,
}

INCLUDE_DIRS = ["client/include", "common", "daemon"]


def make_tree(root, files):
    build = os.path.join(root, "build")
    os.makedirs(build, exist_ok=True)
    entries = []
    for rel, text in sorted(files.items()):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        if not rel.endswith(".c"):
            continue
        obj = "obj/" + rel.replace("/", "_") + ".o"
        args = [CC, "-std=c11"]
        args += ["-I" + os.path.join(root, d) for d in INCLUDE_DIRS]
        args += ["-o", obj, "-c", path]
        entries.append({"directory": build, "file": path,
                        "command": " ".join(shlex.quote(a) for a in args)})
    os.makedirs(os.path.join(build, "obj"), exist_ok=True)
    for entry in entries:
        subprocess.run(shlex.split(entry["command"]), cwd=build, check=True)
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(entries, f, indent=1)
    return build


def run_checker(tmp_path, files, *extra):
    root = str(tmp_path)
    build = make_tree(root, files)
    res = subprocess.run([sys.executable, CHECKER, *extra, root, build],
                         capture_output=True, text=True)
    return res.returncode, res.stdout.splitlines()


def test_clean_tree_passes(tmp_path):
    rc, lines = run_checker(tmp_path, CLEAN)
    assert rc == 0, lines
    assert len(lines) == 1
    assert lines[0].startswith("layers: ")
    assert lines[0].endswith(" edges, 0 violations")


def test_upward_call(tmp_path):
    files = dict(CLEAN)
    files["daemon/core/engine.c"] = """\
        #include "engine.h"
        #include "strfmt.h"
        int app_decide(int n);
        int engine_run(int n) { return n ? app_decide(n - 1) : strfmt_len(n); }
        """
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ("layers: daemon/core/engine.c uses app_decide "
            "(daemon/app/decide.c): core may not use app") in lines


def test_sideways_call(tmp_path):
    files = dict(CLEAN)
    files["daemon/data/store.c"] = """\
        #include "store.h"
        #include "core/engine.h"
        int io_send(int n);
        int store_get(int n) { return engine_run(n) + io_send(n); }
        """
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ("layers: daemon/data/store.c uses io_send "
            "(daemon/io/rpc.c): data may not use io") in lines
    assert not any("cycle" in line for line in lines)


def test_client_may_not_use_daemon(tmp_path):
    files = dict(CLEAN)
    files["client/src/client.c"] = """\
        #include "detd/error.h"
        #include "core/engine.h"
        int detd_strerror_len(int code) { return engine_run(code); }
        """
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ("layers: client/src/client.c uses engine_run "
            "(daemon/core/engine.c): client may not use core") in lines
    assert ('layers: client/src/client.c includes "core/engine.h" '
            "(daemon/core/engine.h): client may not use core") in lines


def test_upward_include(tmp_path):
    files = dict(CLEAN)
    files["daemon/core/engine.h"] = ('#include "app/decide.h"\n'
                                     "int engine_run(int n);\n")
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ('layers: daemon/core/engine.h includes "app/decide.h" '
            "(daemon/app/decide.h): core may not use app") in lines


def test_public_header_includes_nothing_private(tmp_path):
    files = dict(CLEAN)
    files["client/include/detd/error.h"] = ('#pragma once\n#include "strfmt.h"\n'
                                            "int detd_strerror_len(int);\n")
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ('layers: client/include/detd/error.h includes "strfmt.h" '
            "(common/strfmt.h): public may not use common") in lines


def test_cycle_within_one_folder(tmp_path):
    files = dict(CLEAN)
    files["daemon/app/reply.c"] = """\
        #include "decide.h"
        int app_reply(int n) { return n ? app_decide(n - 1) : 0; }
        """
    files["daemon/app/decide.c"] = """\
        #include "decide.h"
        #include "data/store.h"
        int app_reply(int n);
        int app_decide(int n) { return store_get(n) + app_reply(n); }
        """
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ("layers: cycle: daemon/app/decide.c -> daemon/app/reply.c "
            "-> daemon/app/decide.c") in lines
    assert sum("cycle" in line for line in lines) == 1


def test_cycle_through_three_files(tmp_path):
    files = dict(CLEAN)
    files["daemon/ops/a.c"] = "int ops_b(int);\nint ops_a(int n) { return ops_b(n); }\n"
    files["daemon/ops/b.c"] = "int ops_c(int);\nint ops_b(int n) { return ops_c(n); }\n"
    files["daemon/ops/c.c"] = "int ops_a(int);\nint ops_c(int n) { return n ? ops_a(n - 1) : 0; }\n"
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert ("layers: cycle: daemon/ops/a.c -> daemon/ops/b.c "
            "-> daemon/ops/c.c -> daemon/ops/a.c") in lines


def test_size_limit(tmp_path):
    files = dict(CLEAN)
    body = "int big_%d;\n"
    files["daemon/io/big.c"] = "".join(body % i for i in range(1001))
    files["daemon/io/edge.c"] = "".join(body % (i + 5000) for i in range(1000))
    rc, lines = run_checker(tmp_path, files)
    assert rc == 1
    assert "layers: daemon/io/big.c: 1001 lines (at most 1000)" in lines
    assert not any("edge.c" in line for line in lines)


def test_unbuilt_tree_fails(tmp_path):
    root = str(tmp_path)
    make_tree(root, CLEAN)
    empty = os.path.join(root, "empty")
    os.makedirs(empty)
    with open(os.path.join(empty, "compile_commands.json"), "w") as f:
        f.write("[]")
    res = subprocess.run([sys.executable, CHECKER, root, empty],
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert "no object files" in res.stdout


@pytest.mark.parametrize("rel", ["daemon/loop.c", "daemon/other/x.c"])
def test_root_and_unknown_folders_may_use_all_daemon_layers(tmp_path, rel):
    files = dict(CLEAN)
    files[rel] = """\
        int app_decide(int n);
        int ops_admin(int n);
        int store_get(int n);
        int root_step(int n) { return app_decide(n) + ops_admin(n) + store_get(n); }
        """
    rc, lines = run_checker(tmp_path, files)
    assert rc == 0, lines
