"""Pure unit tests: canonical config strings, type-tagged keys, kernel
identity, settings validation. No daemon needed."""

import os
import types

import pytest
import triton

from conftest import require_module
from detd import _canon, _policy, _triton

# Runs on every Triton release (run_matrix.sh): it drives the hook through Triton's own API.
pytestmark = pytest.mark.triton_release


def cfg(kwargs, **kw):
    return triton.Config(kwargs, **kw)


def test_config_string_sorted_and_ordered():
    c = cfg({"BLOCK_N": 64, "BLOCK": 1024}, num_warps=4, num_stages=3)
    assert _triton.config_string(c) == "BLOCK=1024,BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1"


def test_config_string_documented_example_and_maxnreg():
    c = cfg({"BLOCK": 1024}, num_warps=4, num_stages=3, maxnreg=128)
    assert _triton.config_string(c) == "BLOCK=1024,num_warps=4,num_stages=3,num_ctas=1,maxnreg=128"
    d = cfg({"BLOCK": 1024}, num_warps=4, num_stages=3)
    assert _triton.config_string(d) != _triton.config_string(c)


def test_config_string_ignores_kwarg_insertion_order_and_pre_hook():
    a = cfg({"A": 1, "B": 2}, num_warps=8)
    b = cfg({"B": 2, "A": 1}, num_warps=8, pre_hook=lambda nargs: None)
    assert _triton.config_string(a) == _triton.config_string(b)


def test_config_string_distinguishes_types_and_values():
    assert _triton.config_string(cfg({"X": True})) != _triton.config_string(cfg({"X": 1}))
    assert _triton.config_string(cfg({"X": 1.0})) != _triton.config_string(cfg({"X": 1}))
    assert _triton.config_string(cfg({"X": 16})) != _triton.config_string(cfg({"X": 32}))
    assert _triton.config_string(cfg({}, num_warps=4)) != _triton.config_string(cfg({}, num_warps=8))


def test_key_tags_bool_int_float_collide_never():
    strings = {_canon.key_string((v,)) for v in (True, 1, 1.0, "1", None, False, 0, 0.0)}
    assert len(strings) == 8
    assert _canon.key_string((True,)) == "[b:true]"
    assert _canon.key_string((1,)) == "[i:1]"
    assert _canon.key_string((1.0,)) == "[f:1.0]"


def test_key_floats_use_repr():
    assert _canon.key_string((0.1,)) == "[f:0.1]"
    assert _canon.key_string((1e-300,)) == "[f:1e-300]"
    assert _canon.key_string((float("inf"), float("-inf"))) == "[f:inf,f:-inf]"
    assert _canon.key_string((float("nan"),)) == "[f:nan]"
    assert _canon.key_string((0.1 + 0.2,)) != _canon.key_string((0.3,))


def test_key_dtypes_and_strings():
    import torch

    assert _canon.key_string((128, str(torch.float32))) == '[i:128,s:"torch.float32"]'
    assert _canon.key_string(('a"b',)) == '[s:"a\\"b"]'
    # A dtype object (not its str) is tagged by type, distinct from the string.
    assert _canon.key_string((torch.float16,)) != _canon.key_string(("torch.float16",))
    assert _canon.key_string((torch.float16,)).startswith("[o:torch.dtype:")


def test_key_nested_tuples_and_lists():
    assert _canon.key_string(((1, 2), [3])) == "[t[i:1,i:2],l[i:3]]"
    assert _canon.key_string(((1, 2),)) != _canon.key_string((1, 2))
    assert _canon.key_string(((True,),)) != _canon.key_string(((1,),))
    assert _canon.key_string(()) == "[]"


def test_key_numpy_scalars():
    np = require_module("numpy")
    assert _canon.key_string((np.int64(7),)) == "[i:7]"
    assert _canon.key_string((np.bool_(True),)) == "[b:true]"
    assert _canon.key_string((np.float32(0.5),)) == "[f:0.5]"


def test_kernel_identity_format_and_stability():
    import rowsum_kernels as rk

    ident = _triton.kernel_identity(rk.row_sum_kernel)
    name, guard = ident.split("@")
    assert name == "rowsum_kernels:row_sum_kernel"
    assert len(guard) == 16 and int(guard, 16) >= 0
    assert _triton.kernel_identity(rk.row_sum_kernel) == ident


def test_code_guard_changes_with_source(tmp_path):
    import importlib.util
    import sys

    src = (
        "import triton, triton.language as tl\n"
        "@triton.autotune(configs=[triton.Config({'B': 1})], key=['n'], do_bench=lambda f, quantiles=None: [1,1,1])\n"
        "@triton.jit\n"
        "def k(x, n, B: tl.constexpr):\n"
        "    pass@EXTRA@\n")
    guards = []
    for i, extra in enumerate(("", "\n    pass")):
        p = tmp_path / f"gmod{i}.py"
        p.write_text(src.replace("@EXTRA@", extra))
        spec = importlib.util.spec_from_file_location("gmod", p)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        guards.append(_triton.code_guard(m.k))
    assert guards[0] != guards[1]


def test_triton_key_matches_triton():
    import rowsum_kernels as rk

    x = rk.make_input(rows=2, n=64)
    out = x.new_empty(2)
    assert _triton.triton_key(rk.row_sum_kernel, (x, out, 64), {}) == (64, "torch.float32", "torch.float32")


# ------------------------------------------------------------- settings

def test_defaults():
    s = _policy.parse(environ={})
    assert (s.mode, s.on_miss, s.scope, s.chaos) == ("coordinated", "error", None, False)


def test_env_and_args():
    env = {"DETD_MODE": "pinned", "DETD_SCOPE": "a.b, c", "DETD_ON_MISS": "first", "DETD_CHAOS": "0",
           "DETD_SOCKET": "/tmp/x.sock", "DETD_EXEMPT": "a.b:k*", "DETD_TIMEOUT_MS": "1500"}
    s = _policy.parse(environ=env)
    assert s.mode == "pinned" and s.scope == ("a.b", "c") and s.on_miss == "first"
    assert s.socket == "/tmp/x.sock" and s.timeout_ms == 1500 and s.exempt == ("a.b:k*",)
    s2 = _policy.parse(environ=env, mode="auto", on_miss="cheapest")
    assert s2.mode == "auto" and s2.on_miss == "cheapest"


@pytest.mark.parametrize("env,name", [
    ({"DETD_MODE": "fast"}, "mode"),
    ({"DETD_ON_MISS": "random"}, "on_miss"),
    ({"DETD_CHAOS": "maybe"}, "chaos"),
    ({"DETD_TIMEOUT_MS": "-3"}, "timeout_ms"),
    ({"DETD_TIMEOUT_MS": "soon"}, "timeout_ms"),
    ({"DETD_OVERRIDES": "{not json"}, "overrides"),
    ({"DETD_OVERRIDES": '{"nocolon": "BLOCK=16"}'}, "overrides"),
    ({"DETD_OVERRIDES": '{"m:k": "BLOCK"}'}, "overrides"),
    ({"DETD_SCOPE": "a b"}, "scope"),
    ({"DETD_ARCH": "sm 90"}, "arch"),
    ({"DETD_MODE": "auto", "DETD_CHAOS": "1"}, "chaos"),
])
def test_invalid_settings_name_the_setting(env, name):
    with pytest.raises(ValueError) as e:
        _policy.parse(environ=env)
    assert f"invalid setting {name} " in str(e.value)
    assert "DETD_" in str(e.value)


def test_invalid_argument_names_the_argument():
    with pytest.raises(ValueError, match="invalid setting mode"):
        _policy.parse(environ={}, mode="sometimes")
    with pytest.raises(TypeError, match="unknown settings: colour"):
        _policy.parse(environ={}, colour="blue")


def test_overrides_forms(tmp_path):
    p = tmp_path / "ov.json"
    p.write_text('{"m:k": {"BLOCK": 64, "num_warps": 8}}')
    s = _policy.parse(environ={"DETD_OVERRIDES": "@" + str(p)})
    assert s.override_for("m:k", "m:k@0123456789abcdef") == "BLOCK=64,num_warps=8,num_stages=3,num_ctas=1"
    s = _policy.parse(environ={}, overrides={"m:k@0123456789abcdef": "BLOCK=16,num_warps=4",
                                             "m:k": "BLOCK=32,num_warps=4"})
    assert s.override_for("m:k", "m:k@0123456789abcdef") == "BLOCK=16,num_warps=4"
    assert s.override_for("m:k", "m:k@ffffffffffffffff") == "BLOCK=32,num_warps=4"
    assert s.override_for("m:other", "m:other@0") is None


def test_scope_and_exempt():
    s = _policy.parse(environ={}, scope=["pkg.ops"], exempt=["pkg.ops.copy:*"])
    assert s.is_governed("pkg.ops:k")
    assert s.is_governed("pkg.ops.sub:k")
    assert not s.is_governed("pkg.opsx:k")
    assert not s.is_governed("other:k")
    assert not s.is_governed("pkg.ops.copy:kernel")
    assert _policy.parse(environ={}).is_governed("anything:k")
    assert not _policy.parse(environ={}, mode="auto").is_governed("anything:k")
    assert not _policy.parse(environ={}, mode="record").is_governed("anything:k")


def test_install_rejects_bad_rank(monkeypatch):
    import detd

    monkeypatch.setenv("RANK", "zero")
    with pytest.raises(ValueError, match="RANK"):
        detd.install(mode="auto")


def test_config_string_matches_table_render_cases():
    """tests/tables/render_cases.json holds table entries and the config
    strings tablefmt.c must render (tests/unit/test_tablefmt.c checks the C
    side against the same file): each must be what config_string() gives
    for a triton.Config with those values."""
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "tables" / "render_cases.json"
    cases = json.loads(path.read_text())["cases"]
    assert len(cases) >= 7
    for case in cases:
        e = case["entry"]
        c = cfg(dict(e["kwargs"]), num_warps=e["num_warps"], num_stages=e["num_stages"],
                num_ctas=e.get("num_ctas", 1), maxnreg=e.get("maxnreg"))
        assert _triton.config_string(c) == case["expected"], e


def test_megatron_key_form():
    """name=str(value) for the tuner's key names present, then str(dtype)
    of every tensor argument in argument order, joined by '|'."""

    class T:
        dtype = "torch.float32"

        def __str__(self):
            return "tensor"

    tuner = types.SimpleNamespace(arg_names=["x", "y", "N", "MODE", "out"], keys=["N", "MODE", "MISSING"])
    x, out = T(), T()
    out.dtype = "torch.bfloat16"
    assert _triton.megatron_key(tuner, (x, 3, 128), {"MODE": True, "out": out}) == \
        "N=128|MODE=True|torch.float32|torch.bfloat16"
