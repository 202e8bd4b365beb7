"""The Python package's layers, checked on its source (no Triton needed):

* ``_triton.py`` (and ``_inductor.py``, should it exist) is the only module
  that imports ``triton`` or touches attributes of Triton's objects;
* ``_canon.py`` is pure string work: it imports only the standard library
  (no package module either) and reads no attribute of its arguments but
  those of plain values.

Run as a script with a package directory to check another tree:
``python test_layers_py.py path/to/detd``; exits 1 and lists what is wrong.
"""

import ast
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python", "detd")

ADAPTERS = ("_triton.py", "_inductor.py")

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
    found = violations(sys.argv[1] if len(sys.argv) > 1 else PKG)
    print("\n".join(found) or "ok")
    sys.exit(1 if found else 0)
