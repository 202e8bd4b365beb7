"""One rank of the multi-GPU training run (started by torchrun; see
run_train.py). A small model whose forward and backward run autotuned
Triton kernels: the GPU suite's bf16 matmul (a linear layer with a Triton
forward and backward) around FLA's ``chunk_gated_delta_rule``, with the
suite's row sum for the per-step gradient-norm metric. Data-parallel SGD:
gradients all-reduced over NCCL, the same initial weights on every rank.

    torchrun --nproc_per_node=G tests/gpu/train.py --mode default|detd --out DIR [--steps N]

Writes DIR/rank<r>.json: the loss and metric of every step as exact float
bit patterns, a digest of the final weights, the config each autotuner entry
launched, the timing passes this rank ran, and the step times.
"""

import argparse
import gc
import hashlib
import json
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
from triton.runtime import autotuner as _at

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from worker import COUNTS, install_counters  # noqa: E402

def bits(x: float) -> str:
    return struct.pack(">d", float(x)).hex()


class TritonLinear(torch.autograd.Function):
    """y = x @ w with the autotuned Triton matmul in forward and backward
    (bf16 operands, fp32 result)."""

    @staticmethod
    def forward(ctx, x, w):
        import kernels

        ctx.save_for_backward(x, w)
        return kernels.matmul(x, w)

    @staticmethod
    def backward(ctx, dy):
        import kernels

        x, w = ctx.saved_tensors
        dyb = dy.to(torch.bfloat16)
        dx = kernels.matmul(dyb, w.t()).to(x.dtype)
        dw = kernels.matmul(x.t(), dyb).to(w.dtype)
        return dx, dw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["default", "detd"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--verify-every", type=int, default=50)
    a = ap.parse_args()

    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    if a.mode == "detd":
        import detd

        detd.install()  # coordinated, settings from DETD_*
    install_counters(a.mode == "detd")  # counted as in the agreement run
    import kernels
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    import fla.ops.common.chunk_o as chunk_o

    chunk_o.TRITON_ABOVE_3_7_1 = True  # see kernels.run_fla

    B, T, H, K = 2, 2048, 16, 128
    D = H * K
    M = B * T
    g0 = torch.Generator(device="cuda").manual_seed(7)  # same weights on every rank
    params = {n: (torch.randn(D, D, device="cuda", generator=g0) * D ** -0.5).to(torch.bfloat16)
              for n in ("wq", "wk", "wv", "wo")}
    params["wg"] = torch.randn(D, H, device="cuda", generator=g0) * D ** -0.5
    params["wb"] = torch.randn(D, H, device="cuda", generator=g0) * D ** -0.5
    for p in params.values():
        p.requires_grad_(True)
    lr = 0.05

    losses, metrics, step_s = [], [], []
    verified = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        gd = torch.Generator(device="cuda").manual_seed(1000 * step + rank)
        x = torch.randn(M, D, device="cuda", generator=gd).to(torch.bfloat16)
        target = torch.randn(M, D, device="cuda", generator=gd)
        q = TritonLinear.apply(x, params["wq"]).view(B, T, H, K).to(torch.bfloat16)
        k = torch.nn.functional.normalize(TritonLinear.apply(x, params["wk"]).view(B, T, H, K), p=2,
                                          dim=-1).to(torch.bfloat16)
        v = TritonLinear.apply(x, params["wv"]).view(B, T, H, K).to(torch.bfloat16)
        xf = x.float()
        g = torch.nn.functional.logsigmoid(xf @ params["wg"]).view(B, T, H)
        beta = torch.sigmoid(xf @ params["wb"]).view(B, T, H).to(torch.bfloat16)
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, scale=K ** -0.5, output_final_state=False)
        y = TritonLinear.apply(o.reshape(M, D), params["wo"])
        loss = ((y - target) ** 2).mean()
        for p in params.values():
            p.grad = None
        loss.backward()
        with torch.no_grad():
            flat = []
            for n in sorted(params):
                gr = params[n].grad.float()
                dist.all_reduce(gr)
                gr /= world
                flat.append(gr.reshape(-1))
                params[n].copy_((params[n].float() - lr * gr).to(params[n].dtype))
            allg = torch.cat(flat)
            rows = allg[: (allg.numel() // 4096) * 4096].view(-1, 4096)
            gnorm = kernels.row_sum(rows * rows).sum()
            lsum = loss.detach().clone()
            dist.all_reduce(lsum)
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        losses.append(bits(lsum.item() / world))
        metrics.append(bits(gnorm.item()))
        if a.mode == "detd" and a.verify_every > 0 and (step + 1) % a.verify_every == 0:
            import detd

            r = detd.verify(strict=True)  # raises DivergenceError on a divergence
            verified.append({"step": step + 1, "ok": bool(r.get("ok")), "keys": r.get("keys_checked")})

    h = hashlib.sha256()
    for n in sorted(params):
        h.update(params[n].detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    configs = {}
    for obj in gc.get_objects():
        if isinstance(obj, _at.Autotuner):
            fn = obj.base_fn
            for key, cfg in dict(obj.cache).items():
                configs[f"{fn.__module__}:{fn.__qualname__}|{key!r}"] = str(cfg)
    res = {"rank": rank, "world": world, "mode": a.mode, "losses": losses, "metrics": metrics,
           "weights": h.hexdigest(), "configs": configs, "passes": COUNTS["passes"],
           "bench_calls": COUNTS["bench_calls"], "step_s": step_s, "verified": verified}
    if a.mode == "detd":
        import detd

        res["sources"] = {f"{t['kernel']}|{k['key']}": k["source"] for t in detd.autotuners() for k in t["keys"]}
    os.makedirs(a.out, exist_ok=True)
    json.dump(res, open(os.path.join(a.out, f"rank{rank}.json"), "w"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
