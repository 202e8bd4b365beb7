"""The Python package's layers, checked on its source (no Triton needed):

* every module imports only the package modules its row of :data:`LAYERS`
  allows, each on a lower floor (so no cycle, no upward and no sideways
  import: the adapters ``_hook`` and ``_inductor`` sit side by side and
  neither imports the other), and only their public names (no ``_name``
  of another module); a module the table does not list is a violation;
* no file of the package has more than :data:`MAX_LINES` lines;
* the adapters (:data:`ADAPTERS`: ``_triton.py``, ``_inductor.py`` with
  its ``_coordesc.py``, ``_helion.py``) are the only modules that import
  ``triton`` or touch attributes of Triton's objects;
* ``_canon.py`` is pure string work: it imports only the standard library
  (no package module either) and reads no attribute of its arguments but
  those of plain values.

docs/client-layers.md draws the table and says why each row is there.

Run as a script with a package directory to check another tree:
``python test_layers_py.py path/to/detd``; exits 1 and lists what is wrong.
"""

import ast
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python", "detd")

ADAPTERS = ("_triton.py", "_inductor.py", "_coordesc.py", "_helion.py")

# --------------------------------------------------------------------------
# The layer table. Each row: module, floor, the package modules it may
# import. An import must go to a lower floor (checked on the table itself
# too), which rules out cycles and keeps modules of one floor (the two
# adapters) side by side. "detd" is the package itself (__init__.py).
# --------------------------------------------------------------------------
LAYERS = [
    # module         floor  may import
    ("_canon",        0,    ()),
    ("_samples",      0,    ()),
    ("_native",       0,    ()),
    ("_phases",       0,    ()),
    ("_cli",          0,    ()),
    ("_imports",      0,    ()),
    ("_provenance",   0,    ()),
    ("_triton",       1,    ("_canon",)),
    ("_daemon",       1,    ("_native",)),
    ("_policy",       2,    ("_canon", "_triton")),
    ("_audit",        2,    ("_triton",)),
    ("_megatron",     2,    ("_triton",)),
    ("_coordesc",     2,    ("_canon", "_triton")),
    ("_workers",      2,    ("_triton",)),
    ("_devlock",      3,    ("_policy",)),
    ("_split",        4,    ("_devlock", "_native", "_policy", "_samples")),
    ("_process",      5,    ("_devlock", "_native", "_phases", "_policy", "_split", "_triton", "_workers")),
    ("_loop",         6,    ("_canon", "_native", "_phases", "_process", "_split")),
    ("_nondet",       6,    ("_native", "_process")),
    ("_measure",      6,    ("_phases", "_process", "_samples")),
    ("_early",        6,    ("_native", "_process")),
    ("_timing",       6,    ("_imports", "_native", "_process", "_triton")),
    ("_graphcache",   6,    ("_native", "_process")),
    ("_hook",         7,    ("_audit", "_canon", "_loop", "_measure", "_native", "_phases", "_policy", "_process",
                             "_provenance", "_samples", "_split", "_triton")),
    ("_inductor",     7,    ("_canon", "_coordesc", "_early", "_graphcache", "_imports", "_loop", "_measure",
                             "_native", "_process", "_provenance", "_triton")),
    ("_helion",       7,    ("_canon", "_imports", "_loop", "_native", "_process", "_provenance", "_triton")),
    ("_capture",      7,    ("_imports", "_loop", "_policy", "_process")),
    ("detd",          8,    ("_audit", "_capture", "_daemon", "_helion", "_hook", "_inductor", "_loop", "_measure",
                             "_megatron", "_native", "_nondet", "_phases", "_policy", "_process", "_timing",
                             "_workers")),
    ("run",           9,    ("detd",)),
    ("__main__",     10,    ("run",)),
]
MAX_LINES = 1000

# Attributes of Triton's objects (Autotuner, Config, JITFunction, the run
# frame) and of the module (Autotuner, knobs): any use outside an adapter
# is a leak. Generic names that plain Python values also have (keys, items,
# run, ...) are not listed; "kwargs" is (Config.kwargs), which is why the
# hook's call record names its field "kw".
TRITON_ATTRS = frozenset({
    "Autotuner", "Config", "JITFunction", "InterpretedFunction", "autotuner", "knobs", "autotuning",
    "listener", "runtime", "configs", "cache", "base_fn", "fn", "cache_key", "src", "prune_configs",
    "_bench", "do_bench", "kwargs", "all_kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg",
    "ir_override", "num_buffers_warp_spec", "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer",
    "arg_names", "nargs", "pre_hook", "post_hook", "configs_timings", "bench_time", "dtype",
    "_getframe", "f_locals", "f_code", "f_back", "__detd_original__", "__version__",
})
# The same names as strings, where they name an attribute: getattr() and
# friends, and an object's __dict__ (where the hook's slots "cache" and
# "run" live).
TRITON_STRINGS = TRITON_ATTRS | {"run"}
_ATTR_FUNCS = ("getattr", "hasattr", "setattr", "delattr", "attrgetter")


def _tree(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def _named_attributes(tree):
    """(name, line) of every attribute named by a string: getattr(x, "name")
    (hasattr, setattr, delattr, attrgetter), x.__dict__["name"] and
    x.__dict__.get("name") (pop, setdefault)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if fname in _ATTR_FUNCS:
                args = node.args[1:2] if fname != "attrgetter" else node.args
            elif fname in ("get", "pop", "setdefault") and isinstance(f, ast.Attribute) and \
                    isinstance(f.value, ast.Attribute) and f.value.attr == "__dict__":
                args = node.args[:1]
            else:
                continue
            for a in args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    yield a.value, node.lineno
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "__dict__" and isinstance(node.slice, ast.Constant) and \
                isinstance(node.slice.value, str):
            yield node.slice.value, node.lineno


def _imports(tree):
    """(module name, line) of every import; relative ones as '.name'."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.level and not node.module:
                for a in node.names:
                    yield "." + a.name, node.lineno
            else:
                yield base, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in ("__import__", "import_module") and node.args and isinstance(node.args[0], ast.Constant):
                yield str(node.args[0].value), node.lineno


def _is_triton(mod):
    return mod == "triton" or mod.startswith("triton.")


def violations(pkg):
    """Every layer violation in the package directory ``pkg``, as text."""
    out = []
    for name in sorted(os.listdir(pkg)):
        if not name.endswith(".py") or name in ADAPTERS:
            continue
        path = os.path.join(pkg, name)
        tree = _tree(path)
        for mod, line in _imports(tree):
            if _is_triton(mod):
                out.append(f"{name}:{line}: imports {mod} (only {' and '.join(ADAPTERS)} may)")
            if name == "_canon.py" and (mod.startswith(".") or mod.split(".")[0] not in sys.stdlib_module_names):
                out.append(f"{name}:{line}: imports {mod} (_canon.py imports the standard library only)")
        for node in ast.walk(tree):
            # _triton.configs(...) and the like: calls of the adapter.
            if isinstance(node, ast.Attribute) and node.attr in TRITON_ATTRS and \
                    not (isinstance(node.value, ast.Name) and node.value.id == "_triton"):
                out.append(f"{name}:{node.lineno}: touches .{node.attr} (a Triton attribute: use _triton.py)")
        for attr, line in _named_attributes(tree):
            if attr in TRITON_STRINGS:
                out.append(f"{name}:{line}: names {attr!r} (a Triton attribute: use _triton.py)")
    return out


def _module_of(name):
    """The table's name of a package file: ``__init__.py`` is ``detd``."""
    base = name[:-3]
    return "detd" if base == "__init__" else base


def _package_target(mod, own):
    """The package module an import names (``mod`` as :func:`_imports`
    gives it; ``own``: the importing module), or None for another package.
    ``from . import x`` names x; ``from .x import y`` and ``import
    detd.x.y`` name x; ``from . import`` in __init__ names the package's
    module x too; ``import detd`` names the package."""
    if mod.startswith("."):
        rest = mod.lstrip(".")
        return rest.split(".")[0] if rest else "detd"
    parts = mod.split(".")
    if parts[0] != "detd":
        return None
    return parts[1] if len(parts) > 1 else "detd"


def table_violations(layers=None):
    """Rows of the table that break its own rule: an allowed import that
    is not on a lower floor, or names no row."""
    rows = {m: (floor, uses) for m, floor, uses in (layers or LAYERS)}
    out = []
    for m, (floor, uses) in sorted(rows.items()):
        for u in uses:
            if u not in rows:
                out.append(f"table: {m} may import {u}, which has no row")
            elif rows[u][0] >= floor:
                out.append(f"table: {m} (floor {floor}) may import {u} (floor {rows[u][0]}): not below")
    return out


def _count_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    n = data.count(b"\n")
    return n + 1 if data and not data.endswith(b"\n") else n


def import_violations(pkg, layers=None, max_lines=MAX_LINES):
    """Every violation of the layer table and the size limit in the package
    directory ``pkg``, as text (``file:line: ...``)."""
    rows = {m: (floor, set(uses)) for m, floor, uses in (layers or LAYERS)}
    out = table_violations(layers)
    names = sorted(n for n in os.listdir(pkg) if n.endswith(".py"))
    package_modules = {_module_of(n) for n in names}
    for name in names:
        path = os.path.join(pkg, name)
        n = _count_lines(path)
        if n > max_lines:
            out.append(f"{name}: {n} lines (at most {max_lines})")
        own = _module_of(name)
        if own not in rows:
            out.append(f"{name}: not in the layers table (tests/python/test_layers_py.py, LAYERS)")
            continue
        allowed = rows[own][1]
        tree = _tree(path)
        bound = {}  # local name -> package module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                for a in node.names:
                    if node.level and not node.module or base in ("detd",):
                        target = _package_target("." + a.name if node.level else "detd." + a.name, own)
                        if target in package_modules:
                            bound[a.asname or a.name] = target
                            continue
                    target = _package_target(base, own)
                    if target is not None and a.name.startswith("_") and not a.name.startswith("__"):
                        out.append(f"{name}:{node.lineno}: imports {a.name} from {target} "
                                   "(a private name: import only public names)")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    target = _package_target(a.name, own)
                    if target is not None and (a.asname or target == "detd"):
                        bound[a.asname or "detd"] = target
        for mod, line in _imports(tree):
            target = _package_target(mod, own)
            if target is None or target == own:
                continue
            if target not in allowed:
                where = rows.get(target)
                why = "not in its row" if where is None or where[0] < rows[own][0] else \
                    f"floor {where[0]}, not below {own}'s {rows[own][0]}"
                out.append(f"{name}:{line}: imports {target} ({why})")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in bound and node.attr.startswith("_") and not node.attr.startswith("__"):
                out.append(f"{name}:{node.lineno}: uses {node.value.id}.{node.attr} "
                           "(a private name of another module)")
    return out


def test_package_keeps_its_layers():
    assert import_violations(PKG) == []


def test_the_layer_check_finds_violations(tmp_path):
    """The layer check itself can fail: each kind of violation is reported,
    and a clean module and a file of exactly MAX_LINES lines are not."""
    files = {
        "_canon.py": "import json\n",
        "_native.py": "",
        "_triton.py": "from . import _canon\n",
        "_process.py": "from . import _native\nfrom . import _hook\n",  # upward
        "_loop.py": "from . import _process\nx = _process._state\n",  # private name
        "_hook.py": "from . import _loop, _process\nfrom ._loop import _ENOCAND, MissError\n"
                    "def f():\n    from . import _inductor\n    return _inductor\n",  # sideways, lazily
        "_inductor.py": "from ._process import client\nimport importlib\n"
                        "m = importlib.import_module('detd._hook')\n",
        "_future.py": "",  # no row
        "run.py": "import detd\ndetd.install()\ndetd._kind('x')\n",
        "_big.py": "x = 1\n" * (MAX_LINES + 1),
        "_edge.py": "x = 1\n" * MAX_LINES,
    }
    for n, text in files.items():
        (tmp_path / n).write_text(text)
    layers = LAYERS + [("_edge", 0, ()), ("_big", 0, ())]
    got = import_violations(str(tmp_path), layers)
    assert "_process.py:2: imports _hook (floor 7, not below _process's 5)" in got, got
    assert "_loop.py:2: uses _process._state (a private name of another module)" in got, got
    assert "_hook.py:2: imports _ENOCAND from _loop (a private name: import only public names)" in got, got
    assert "_hook.py:4: imports _inductor (floor 7, not below _hook's 7)" in got, got
    assert "_inductor.py:3: imports _hook (floor 7, not below _inductor's 7)" in got, got
    assert "_future.py: not in the layers table (tests/python/test_layers_py.py, LAYERS)" in got, got
    assert f"_big.py: {MAX_LINES + 1} lines (at most {MAX_LINES})" in got, got
    assert not any(v.startswith(("_edge.py", "_canon.py", "_native.py", "_triton.py")) for v in got), got
    assert not any("MissError" in v or "client" in v for v in got), got  # public names are fine
    assert "run.py:3: uses detd._kind (a private name of another module)" in got, got
    assert len(got) == 8, got


def test_the_table_is_checked_too():
    """A row that allows an import on its own floor or above (a cycle or a
    sideways import waiting to happen) is itself a violation."""
    bad = LAYERS + [("_helion", 7, ("_hook", "_process")), ("_x", 0, ("_nowhere",))]
    got = table_violations(bad)
    assert got == ["table: _helion (floor 7) may import _hook (floor 7): not below",
                   "table: _x may import _nowhere, which has no row"], got
    assert table_violations() == []


def test_only_the_adapter_touches_triton():
    assert os.path.isfile(os.path.join(PKG, "_triton.py"))
    assert violations(PKG) == []


def test_the_check_finds_leaks(tmp_path):
    """The check itself can fail: each kind of leak is reported."""
    (tmp_path / "_canon.py").write_text("import json\nfrom . import _native\nimport numpy\n"
                                        "def f(c):\n    return c.kwargs\n")
    (tmp_path / "_hook.py").write_text('"""Reads tuner.configs (free text: fine)."""\n'
                                       "from triton.runtime import autotuner\n"
                                       "def g(t):\n    import triton.knobs\n"
                                       "    return t.__dict__.get('cache'), getattr(t, 'configs_timings')\n"
                                       "t.__dict__['run'] = _triton.configs(t), {'num_warps': 4}\n")
    (tmp_path / "_policy.py").write_text("import importlib\nm = importlib.import_module('triton')\n")
    (tmp_path / "_triton.py").write_text("import triton\nx = triton.Config({}).kwargs\n")
    got = violations(str(tmp_path))
    text = "\n".join(got)
    assert "_canon.py:2: imports ._native" in text and "_canon.py:3: imports numpy" in text
    assert "_canon.py:1:" not in text  # json is the standard library
    assert "_canon.py:5: touches .kwargs" in text
    assert "_hook.py:2: imports triton.runtime" in text and "_hook.py:4: imports triton.knobs" in text
    assert "_hook.py:5: names 'cache'" in text and "_hook.py:5: names 'configs_timings'" in text
    assert "_hook.py:6: names 'run'" in text
    assert "_hook.py:1:" not in text and "num_warps" not in text  # plain data and adapter calls are fine
    assert "_policy.py:2: imports triton" in text
    assert not [v for v in got if v.startswith("_triton.py")]
    assert len(got) == 9, got


def test_package_imports_without_triton():
    """``import detd`` and the pure modules need no Triton: the adapter
    imports it only when the hook is installed."""
    code = ("import sys\nsys.modules['triton'] = None\n"
            "import detd, detd._canon, detd._hook, detd._policy, detd._triton\n"
            "from detd import _canon\n"
            "assert _canon.config_string({'BLOCK': 64}, {'num_warps': 4, 'num_stages': 1, 'num_ctas': 1}) == "
            "'BLOCK=64,num_warps=4,num_stages=1,num_ctas=1'\n"
            "assert detd._triton.version() == ''\n"
            "assert not any(m == 'triton' or m.startswith('triton.') for m, v in sys.modules.items() if v)\n"
            "print('ok')\n")
    env = dict(os.environ)
    if os.environ.get("DETD_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.path.dirname(PKG) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout


def test_canon_works_on_plain_data_only():
    """_canon's config strings come from plain data, and the adapter gives
    the same string for a live Config: the two layers agree."""
    import triton

    from detd import _canon, _triton

    fields = {"num_warps": 8, "num_stages": 2, "num_ctas": 1, "maxnreg": None, "num_consumer_groups": 0}
    s = _canon.config_string({"BN": 32, "BM": 64}, fields)
    assert s == "BM=64,BN=32,num_warps=8,num_stages=2,num_ctas=1"
    assert _triton.config_string(triton.Config({"BM": 64, "BN": 32}, num_warps=8, num_stages=2)) == s
    assert _canon.config_string({"X": 1}, {"num_consumer_groups": 2}) == "X=1,num_consumer_groups=2"
    try:
        _canon.config_string(triton.Config({"BM": 64}))
    except TypeError as e:
        assert "plain data" in str(e)
    else:
        raise AssertionError("_canon.config_string accepted a Config object")
    assert _canon.megatron_key([("N", 128), ("MODE", True)], ["torch.float32"]) == "N=128|MODE=True|torch.float32"
    assert _canon.kernel_identity(_canon.kernel_name("m.sub", "k"), _canon.code_guard("source", "x")) == \
        "m.sub:k@" + __import__("hashlib").sha256(b"source:x").hexdigest()[:16]


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else PKG
    found = violations(where) + import_violations(where)
    print("\n".join(found) or "ok")
    sys.exit(1 if found else 0)
