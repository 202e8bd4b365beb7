"""One process of the Inductor GPU run (see run_inductor.py): a small MLP
block (two linear layers, GELU, LayerNorm, a softmax cross-entropy loss)
trained with SGD under ``torch.compile(mode="max-autotune")``, with
max-autotune's GEMM selection, pointwise/reduction config benchmarking and
coordinate-descent tuning on. Every process draws the same data and the
same initial weights.

    python3 inductor_train.py --mode default|detd --out FILE [--steps N] [--compile-mode M]

``default``: detd installed in ``auto`` mode, which changes nothing in
Inductor (its caches stay on; each process has its own cache folder) and
only lists the choices Inductor made on its own. ``detd``: coordinated
(``DETD_SOCKET`` names the daemon).

Writes JSON: ``choices`` ((kernel, key) -> the config or choice used),
``sources`` (its source: timed, local, ...), ``timed`` (the keys this process ran a timing pass for), ``losses`` (exact
bit patterns, every step), ``grads`` (SHA-256 of all gradients' bytes,
every step), ``step_ms`` (CUDA-event time of each step after warm-up),
``compile_s``, ``searches`` ((kernel, key) -> the candidates of each key
that names a search: the start config and the descriptor); with
--profile-steps, ``kernels_us`` (GPU kernel name -> [launches,
microseconds per step]).
"""

import argparse
import hashlib
import json
import os
import struct
import time


def bits(x: float) -> str:
    return struct.pack(">d", float(x)).hex()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["default", "detd"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="after the timed steps, run this many more under torch.profiler and write "
                         "each GPU kernel's count and total time (``kernels_us``)")
    ap.add_argument("--dims", default="512,2048,256,512", help="d_in,d_hid,n_cls,batch")
    ap.add_argument("--compile-mode", default="max-autotune",
                    help="torch.compile's mode (coordinate descent is on in every mode)")
    a = ap.parse_args()

    import detd

    detd.install(mode="auto" if a.mode == "default" else "coordinated")
    import torch
    import torch._inductor.config as ic

    ic.coordinate_descent_tuning = True
    ic.max_autotune_pointwise = True
    ic.compile_threads = int(os.environ.get("DETD_TEST_COMPILE_THREADS", "2"))

    torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    dev = "cuda"
    d_in, d_hid, n_cls, batch = (int(x) for x in a.dims.split(","))
    w1 = (torch.randn(d_hid, d_in, device=dev) / d_in ** 0.5).requires_grad_()
    w2 = (torch.randn(n_cls, d_hid, device=dev) / d_hid ** 0.5).requires_grad_()
    ln_w = torch.ones(d_hid, device=dev, requires_grad=True)
    ln_b = torch.zeros(d_hid, device=dev, requires_grad=True)
    params = [w1, w2, ln_w, ln_b]
    xs = torch.randn(a.steps + a.warmup, batch, d_in, device=dev)
    ys = torch.randint(0, n_cls, (a.steps + a.warmup, batch), device=dev)

    def step_fn(x, y, w1, w2, ln_w, ln_b):
        h = torch.nn.functional.gelu(x @ w1.t())
        h = torch.nn.functional.layer_norm(h, (d_hid,), ln_w, ln_b)
        logits = h @ w2.t()
        return torch.nn.functional.cross_entropy(logits.float(), y)

    compiled = torch.compile(step_fn, mode=a.compile_mode)
    losses, grads, step_ms = [], [], []
    t0 = time.time()
    compile_s = None
    for i in range(a.steps + a.warmup):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = compiled(xs[i], ys[i], *params)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= 0.05 * p.grad
        end.record()
        torch.cuda.synchronize()
        if compile_s is None:
            compile_s = time.time() - t0
        losses.append(bits(loss.item()))
        h = hashlib.sha256()
        for p in params:
            h.update(p.grad.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
            p.grad = None
        grads.append(h.hexdigest())
        if i >= a.warmup:
            step_ms.append(start.elapsed_time(end))

    kernels_us = {}
    if a.profile_steps > 0:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(a.profile_steps):
                loss = compiled(xs[i], ys[i], *params)
                loss.backward()
                with torch.no_grad():
                    for p in params:
                        p -= 0.05 * p.grad
                        p.grad = None
            torch.cuda.synchronize()
        for ev in prof.key_averages():
            us = getattr(ev, "device_time_total", None)
            if us is None:
                us = getattr(ev, "cuda_time_total", 0)
            if us > 0:
                kernels_us[ev.key] = [ev.count, us / a.profile_steps]

    choices, sources, timed, kernels, searches = {}, {}, [], 0, {}
    for t in detd.autotuners():
        if t.get("kind") != "inductor" or t["kernel"] == "inductor::*":
            continue
        kernels += 1
        for k in t["keys"]:
            ident = f"{t['kernel']} {k['key']}"
            choices[ident] = k["config"]
            sources[ident] = k["source"]
            if k.get("timed_here"):
                timed.append(ident)
            if any(c.startswith("search:") for c in k.get("candidates") or ()):
                searches[ident] = k["candidates"]
    status = [t for t in detd.autotuners() if t["kernel"] == "inductor::*"]
    stages = {}  # the key's first element: configs, coordesc, select
    for ident in choices:
        st = ident.split(" ", 1)[1].split(",", 1)[0].lstrip("[").replace('s:"', "").rstrip('"')
        stages[st] = stages.get(st, 0) + 1
    doc = dict(pid=os.getpid(), mode=a.mode, stages=stages, choices=choices, sources=sources, timed=timed,
               kernels=kernels, searches=searches, losses=losses,
               grads=grads, step_ms=step_ms, compile_s=compile_s, kernels_us=kernels_us, status=status[0] if status else None,
               torch=torch.__version__, device=torch.cuda.get_device_name(), stats=detd.stats())
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
