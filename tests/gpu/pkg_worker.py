"""One process of the package run (see run_packages.py): runs one package's
workload (small shapes, forward and backward) and writes JSON:

    pkg_worker.py --package P --mode default|detd --out F [--quick] [--compare CFG]

``configs``: entry ("module:qualname|key") -> canonical config of every
autotuner this process reached; ``digests``: output name -> SHA-256 of its
bytes; ``passes``: timing passes this process ran; ``audit``: detd's audit
results (DETD_AUDIT=1); ``errors``: op -> the error line of an op that
failed. ``--compare CFG`` (default mode): after the workload, the kernel
time of this process's fresh picks against CFG's configs, per entry.
"""

import argparse
import gc
import hashlib
import json
import os
import runpy
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def setup_paths():
    """Wheels installed with pip --target into $DETD_PKG_SITE (default
    /tmp/site); mamba_ssm and gemlite from unpacked source in .pkgsrc."""
    site = os.environ.get("DETD_PKG_SITE", "/tmp/site")
    src = os.path.join(REPO, ".pkgsrc")
    for p in (site, os.path.join(src, "gemlite-0.6.0.post2"), src):
        if os.path.isdir(p) and p not in sys.path:
            sys.path.insert(0, p)
    # mamba_ssm's __init__ imports its CUDA extensions, which its Triton
    # kernels do not need: a bare package object skips it, here and in
    # detd's compile workers, which run stubs/sitecustomize.py at start.
    stubs = os.path.join(HERE, "stubs")
    if stubs not in sys.path:
        sys.path.insert(0, stubs)
    runpy.run_path(os.path.join(stubs, "sitecustomize.py"))


def sha(t):
    import torch

    t = t.detach().contiguous()
    return hashlib.sha256(t.view(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


# ---------------------------------------------------------------- workloads

def _grads(outs, inputs, seed):
    import torch

    g = torch.Generator(device=outs[0].device).manual_seed(seed)
    loss = sum((o.float() * torch.randn(o.shape, device=o.device, generator=g)).sum() for o in outs)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def liger(quick):
    """Several liger-kernel ops, forward and backward (each in its own try)."""
    import torch

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    ops = {}

    def dyt():
        from liger_kernel.transformers import LigerDyT

        m = LigerDyT(512).to(dev)
        x = torch.randn(64, 512, device=dev, requires_grad=True)
        y = m(x)
        return [y, *_grads([y], [x, *m.parameters()], 1)]

    def rms_norm():
        from liger_kernel.transformers import LigerRMSNorm

        m = LigerRMSNorm(1024).to(dev, dt)
        x = torch.randn(128, 1024, device=dev, dtype=dt, requires_grad=True)
        y = m(x)
        return [y, *_grads([y], [x, m.weight], 2)]

    def swiglu():
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        a = torch.randn(128, 1024, device=dev, dtype=dt, requires_grad=True)
        b = torch.randn(128, 1024, device=dev, dtype=dt, requires_grad=True)
        y = LigerSiLUMulFunction.apply(a, b)
        return [y, *_grads([y], [a, b], 3)]

    def layer_norm():
        from liger_kernel.transformers import LigerLayerNorm

        m = LigerLayerNorm(1024).to(dev, dt)
        x = torch.randn(128, 1024, device=dev, dtype=dt, requires_grad=True)
        y = m(x)
        return [y, *_grads([y], [x, m.weight, m.bias], 4)]

    def group_norm():
        from liger_kernel.transformers import LigerGroupNorm

        m = LigerGroupNorm(64, 8).to(dev)
        x = torch.randn(16, 64, 128, device=dev, requires_grad=True)
        y = m(x)
        return [y, *_grads([y], [x, m.weight, m.bias], 5)]

    def cross_entropy():
        from liger_kernel.transformers import LigerCrossEntropyLoss

        x = torch.randn(64, 4096, device=dev, dtype=dt, requires_grad=True)
        t = torch.randint(0, 4096, (64,), device=dev)
        y = LigerCrossEntropyLoss()(x, t)
        return [y, *_grads([y], [x], 6)]

    def fused_moe():
        from liger_kernel.ops import fused_moe as fm  # noqa: F401 - present in 0.8.x

        fn = getattr(fm, "LigerFusedMoEFunction", None) or getattr(fm, "fused_moe")
        e, h, inter, tok, k = 4, 256, 512, 64, 2
        x = torch.randn(tok, h, device=dev, dtype=dt, requires_grad=True)
        w1 = torch.randn(e, 2 * inter, h, device=dev, dtype=dt, requires_grad=True)
        w2 = torch.randn(e, h, inter, device=dev, dtype=dt, requires_grad=True)
        logits = torch.randn(tok, e, device=dev)
        wts, ids = torch.topk(torch.softmax(logits, -1), k)
        y = fn.apply(x, w1, w2, wts.to(dt), ids.to(torch.int32)) if hasattr(fn, "apply") else fn(x, w1, w2, wts, ids)
        return [y, *_grads([y], [x, w1, w2], 7)]

    def mlp():
        # The TMA SwiGLU MLP: three autotuned kernels (the fused gate/up GEMM
        # forward, and the dGU and dI GEMMs of its backward).
        from liger_kernel.ops import LigerMLPFunction

        b, s, h, inter = 2, 256, 512, 1024
        x = torch.randn(b, s, h, device=dev, dtype=dt, requires_grad=True)
        wg = (torch.randn(inter, h, device=dev, dtype=dt) * h ** -0.5).requires_grad_(True)
        wu = (torch.randn(inter, h, device=dev, dtype=dt) * h ** -0.5).requires_grad_(True)
        wd = (torch.randn(h, inter, device=dev, dtype=dt) * inter ** -0.5).requires_grad_(True)
        y = LigerMLPFunction.apply(x, wg, wu, wd)
        return [y, *_grads([y], [x, wg, wu, wd], 11)]

    def mlp_inference():
        # The same fused gate/up GEMM without the stored pre-activations
        # (store_preact=False): its own autotuned kernel and pre_hook.
        from liger_kernel.ops.mlp import gemm_swiglu

        b, s, h, inter = 2, 256, 512, 1024
        x = torch.randn(b, s, h, device=dev, dtype=dt)
        wg = torch.randn(inter, h, device=dev, dtype=dt) * h ** -0.5
        wu = torch.randn(inter, h, device=dev, dtype=dt) * h ** -0.5
        a, _ = gemm_swiglu(x, wg, wu, 1.0, store_preact=False)
        return [a]

    def int8int2_matmul():
        # The experimental int8 x packed-int2 GEMM (autotuned on M, N, K).
        from liger_kernel.ops.experimental.mm_int8int2 import matmul, pack_weights

        outs = []
        k, n = 1024, 512
        w = torch.randint(-1, 2, (k, n), device=dev, dtype=torch.int8)
        packed = pack_weights(w.clone(), 2)
        for m in ((64,) if quick else (64, 256)):
            a = torch.randint(-8, 8, (m, k), device=dev, dtype=torch.int8)
            outs.append(matmul(a, packed))
        return outs

    table = dict(dyt=dyt, mlp=mlp, mlp_inference=mlp_inference, int8int2_matmul=int8int2_matmul,
                 rms_norm=rms_norm, swiglu=swiglu, layer_norm=layer_norm, group_norm=group_norm,
                 cross_entropy=cross_entropy, fused_moe=fused_moe)
    if quick:
        table = {k: table[k] for k in ("dyt", "mlp", "mlp_inference", "int8int2_matmul", "rms_norm",
                                       "swiglu", "fused_moe")}
    return table


def gemlite(quick):
    import torch

    dev = "cuda"

    def int8():
        from gemlite.helper import A8W8_int8_dynamic

        torch.manual_seed(0)
        lin = torch.nn.Linear(1024, 1024, bias=False).to(dev, torch.float16)
        q = A8W8_int8_dynamic(device=dev).from_linear(lin)
        outs = []
        for m in ((1, 16) if quick else (1, 16, 64)):
            x = torch.randn(m, 1024, device=dev, dtype=torch.float16)
            outs.append(q(x))
        return outs

    def w4():
        from gemlite.core import DType, GemLiteLinearTriton

        torch.manual_seed(0)
        n, k, gs = 1024, 1024, 128
        w_q = torch.randint(0, 16, (n, k), device=dev, dtype=torch.uint8)
        scales = torch.rand(n, k // gs, device=dev, dtype=torch.float16) * 0.01
        zeros = torch.full((n, k // gs), 8.0, device=dev, dtype=torch.float16)
        layer = GemLiteLinearTriton(W_nbits=4, group_size=gs, in_features=k, out_features=n,
                                    input_dtype=DType.FP16, output_dtype=DType.FP16)
        layer.pack(w_q, scales, zeros, None)
        outs = []
        for m in ((1, 16) if quick else (1, 16, 64)):
            x = torch.randn(m, k, device=dev, dtype=torch.float16)
            outs.append(layer(x))
        return outs

    return dict(int8=int8, w4=w4)


def mamba_ssd(b, l, h, p, n, g, chunk, dev="cuda", dt=None):
    """mamba_ssm's Mamba2 chunked scan (``mamba_chunk_scan_combined``, D and
    dt_bias per head, softplus on dt), forward and backward: the output and
    the gradients. Also run_coldstart.py's mamba key set (kernels.py)."""
    import torch

    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    dt = dt or torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(b, l, h, p, device=dev, dtype=dt, requires_grad=True)
    dtt = torch.rand(b, l, h, device=dev, dtype=torch.float32, requires_grad=True)
    A = (-torch.rand(h, device=dev, dtype=torch.float32)).requires_grad_()
    B = torch.randn(b, l, g, n, device=dev, dtype=dt, requires_grad=True)
    C = torch.randn(b, l, g, n, device=dev, dtype=dt, requires_grad=True)
    D = torch.randn(h, device=dev, dtype=torch.float32, requires_grad=True)
    dt_bias = torch.rand(h, device=dev, dtype=torch.float32, requires_grad=True)
    y = mamba_chunk_scan_combined(x, dtt, A, B, C, chunk, D=D, dt_bias=dt_bias, dt_softplus=True)
    return [y, *_grads([y], [x, dtt, A, B, C, D, dt_bias], 11)]


def mamba(quick):
    def ssd():
        return mamba_ssd(1, 256 if quick else 512, 8, 64, 64, 1, 64)

    return dict(ssd=ssd)


def fla(quick):
    import torch

    def gdr():
        import fla.ops.common.chunk_o as chunk_o
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        # fla-core 0.6.0 refuses the gated backward on Hopper with Triton
        # 3.4 <= v < 3.7.1 (fla issue #640: one kernel computes dg and dbeta
        # with a known precision error; the GPU machine has Triton 3.6.0).
        # This run compares bits across processes, not accuracy, so it runs
        # the kernel anyway, as tests/gpu/kernels.py does.
        chunk_o.TRITON_ABOVE_3_7_1 = True

        torch.manual_seed(0)
        b, t, h, d = 1, 256 if quick else 512, 4, 64
        dev, dt = "cuda", torch.bfloat16
        q = torch.randn(b, t, h, d, device=dev, dtype=dt, requires_grad=True)
        k = torch.nn.functional.normalize(torch.randn(b, t, h, d, device=dev, dtype=torch.float32), p=2, dim=-1) \
            .to(dt).requires_grad_()
        v = torch.randn(b, t, h, d, device=dev, dtype=dt, requires_grad=True)
        g = torch.nn.functional.logsigmoid(torch.rand(b, t, h, device=dev, dtype=torch.float32)).requires_grad_()
        beta = torch.rand(b, t, h, device=dev, dtype=dt).sigmoid().requires_grad_()
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=False)
        return [o, *_grads([o], [q, k, v, g, beta], 21)]

    return dict(chunk_gated_delta_rule=gdr)


WORKLOADS = dict(gemlite=gemlite, liger=liger, mamba=mamba, fla=fla)


# ---------------------------------------------------------------- bookkeeping

def tuners():
    from triton.runtime.autotuner import Autotuner

    return [o for o in gc.get_objects() if isinstance(o, Autotuner)]


def entry(t, key):
    fn = t.base_fn
    return f"{fn.__module__}:{fn.__qualname__}|{key!r}"


def chosen():
    from detd import _triton

    out = {}
    for t in tuners():
        cache = t.__dict__.get("cache")
        for key, cfg in (dict(cache) if isinstance(cache, dict) else {}).items():
            out[entry(t, key)] = _triton.config_string(cfg)
    return out


CALLS = {}  # entry -> (tuner, args, kwargs) of the call that resolved it (default mode)
PASSES = [0]


def watch_default():
    """Default Triton: count timing passes (prune_configs runs only on a
    miss) and keep each new key's call for --compare."""
    from triton.runtime import autotuner as at

    orig_run, orig_prune = at.Autotuner.run, at.Autotuner.prune_configs

    def run(self, *a, **k):
        before = set(dict(self.cache))
        ret = orig_run(self, *a, **k)
        for key in set(dict(self.cache)) - before:
            CALLS[entry(self, key)] = (self, a, dict(k))
        return ret

    def prune(self, *a, **k):
        if len(self.configs) > 1:
            PASSES[0] += 1
        return orig_prune(self, *a, **k)

    at.Autotuner.run, at.Autotuner.prune_configs = run, prune


def compare(other):
    """Kernel time of this process's fresh picks against other's configs,
    entry by entry, with the tuner's own benchmarker, alternating A/B."""
    import statistics

    from detd import _triton

    mine, rows = chosen(), []
    for name, (tuner, args, kwargs) in sorted(CALLS.items()):
        a, b = mine.get(name), other.get(name)
        if a is None or b is None:
            continue
        tuner.nargs = dict(zip(tuner.arg_names, args))
        live = {_triton.config_string(c): c for c in list(tuner.prune_configs(kwargs)) + list(tuner.configs)}
        if a not in live or b not in live:
            continue
        ta, tb = [], []
        pairs = [(live[a], ta)] if a == b else [(live[a], ta), (live[b], tb)]
        for _ in range(5):
            for cfg, acc in pairs:
                tuner.nargs = dict(zip(tuner.arg_names, args))
                t = tuner._bench(*args, config=cfg, **kwargs)
                acc.append(t[0] if isinstance(t, (list, tuple)) else t)
        fa = statistics.median(ta)
        rows.append(dict(entry=name, same=a == b, fresh_ms=fa, detd_ms=fa if a == b else statistics.median(tb)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--mode", required=True, choices=("default", "detd"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compare")
    a = ap.parse_args()
    setup_paths()
    import torch

    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import detd

    if a.mode == "detd":
        detd.install()
    else:
        watch_default()
    res = dict(package=a.package, mode=a.mode, digests={}, errors={}, ops=[])
    t_work = time.time()
    for op, fn in WORKLOADS[a.package](a.quick).items():
        try:
            outs = fn()
            torch.cuda.synchronize()
            for i, o in enumerate(outs):
                if o is not None:
                    res["digests"][f"{op}[{i}]"] = sha(o)
            res["ops"].append(op)
        except Exception as e:  # noqa: BLE001 - one op failing is reported, the others run
            res["errors"][op] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            res.setdefault("traces", {})[op] = traceback.format_exc()[-2000:]
    res["workload_s"] = round(time.time() - t_work, 3)
    res["configs"] = chosen()
    if a.mode == "detd":
        recs = detd.autotuners()
        res["passes"] = sum(1 for t in recs for k in t["keys"] if k.get("timed_here"))
        res["ungoverned"] = sorted({t["name"] for t in recs if not t["governed"]})
        res["pass_s"] = {f"{t['kernel']}|{k['key']}": dict(k.get("pass_s") or {}, candidates=len(k.get("timings") or {}))
                         for t in recs for k in t["keys"] if k.get("timed_here")}
        res["audit"] = [dict(name=r["name"], key=r["key"], status=r["status"], differing=r["differing"])
                        for r in detd.audit(enable=False) if r.get("status") != "deterministic"] \
            if os.environ.get("DETD_AUDIT") == "1" else None
    else:
        res["passes"] = PASSES[0]
        if a.compare:
            res["compare"] = compare(json.load(open(a.compare)))
    with open(a.out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
