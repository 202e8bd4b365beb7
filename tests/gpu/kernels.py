"""The GPU suite's autotuned kernels and the workload each process runs.

- ``row_sum``: fp32 row sums; BLOCK and num_warps change the reduction tree,
  so the output bits depend on the config.
- ``matmul_bf16``: bf16 inputs, fp32 accumulation; BLOCK_K changes the
  accumulation order, so the output bits depend on the config.
- FLA's ``chunk_gated_delta_rule`` forward and backward (``fla-core``): many
  autotuned kernels of a third-party library, reached unmodified.

Those make the ``suite`` key set. The ``mamba`` key set (``run_mamba``) is
mamba_ssm's own Triton kernels at a Mamba2 layer's sizes.
"""

import hashlib

import torch
import triton
import triton.language as tl


def _rowsum_configs():
    return [triton.Config({"BLOCK": b}, num_warps=w, num_stages=1)
            for b in (256, 512, 1024, 2048) for w in (2, 4, 8)]


@triton.autotune(configs=_rowsum_configs(), key=["N"])
@triton.jit
def row_sum_kernel(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + offs, mask=offs < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0))
    return out


def _mm_configs():
    return [triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": k}, num_warps=w, num_stages=s)
            for k in (32, 64, 128) for w in (4, 8) for s in (3, 4)]


@triton.autotune(configs=_mm_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
    return c


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


ROWSUM_SHAPES = [(4096, 4096), (4096, 16384), (2048, 65536), (8192, 8192)]
MATMUL_SHAPES = [(4096, 4096, 4096), (2048, 8192, 4096), (8192, 2048, 8192)]
FLA_SHAPE = dict(B=2, T=4096, H=16, K=128, V=128)


# The mamba key set: a Mamba2 layer of d_model 2048 (expand 2, headdim 64:
# 64 heads; d_state 128, one group, chunk 256), batch 2 x 2048 tokens, bf16.
MAMBA_SHAPE = dict(b=2, l=2048, h=64, p=64, n=128, g=1, chunk=256)
MAMBA_D_MODEL = 2048


def run_mamba(dev="cuda", shape=None, d_model=MAMBA_D_MODEL):
    """mamba_ssm 2.3.2.post1's autotuned Triton kernels as a Mamba2 block
    meets them, forward and backward: the chunked scan
    (``mamba_chunk_scan_combined``, pkg_worker.mamba_ssd, as the package
    run) and the block's fused residual add + RMSNorm (``rms_norm_fn``,
    prenorm, residual in fp32). Its gated RMSNorm (``layernorm_gated``) and
    ``selective_state_update`` (decoding) do not autotune."""
    import pkg_worker

    pkg_worker.setup_paths()  # mamba_ssm from .pkgsrc, without its CUDA extensions
    from mamba_ssm.ops.triton.layer_norm import rms_norm_fn

    shape = shape or MAMBA_SHAPE
    outs = {f"mamba.ssd[{i}]": t for i, t in enumerate(pkg_worker.mamba_ssd(**shape, dev=dev))}
    g = torch.Generator(device=dev).manual_seed(7)
    rows = shape["b"] * shape["l"]
    x, res = (torch.randn(rows, d_model, device=dev, generator=g, dtype=torch.bfloat16).requires_grad_()
              for _ in range(2))
    w = (1 + 0.1 * torch.randn(d_model, device=dev, generator=g)).requires_grad_()
    y, r = rms_norm_fn(x, w, None, residual=res, prenorm=True, residual_in_fp32=True, eps=1e-5)
    for i, t in enumerate([y, r, *pkg_worker._grads([y, r], [x, res, w], 12)]):
        outs[f"mamba.rms_norm[{i}]"] = t
    return {k: v for k, v in outs.items() if v is not None}


def inputs(seed=1234, keys="suite"):
    """The same inputs in every process (fixed seed, generated on the GPU).
    The mamba key set makes its own in its workload, from fixed seeds too."""
    if keys == "mamba":
        return None
    g = torch.Generator(device="cuda").manual_seed(seed)
    rs = []
    for m, n in ROWSUM_SHAPES:
        x = torch.randn(m, n, device="cuda", generator=g, dtype=torch.float32)
        x = x * torch.exp2(torch.randint(-20, 20, (m, n), device="cuda", generator=g).float())
        rs.append(x)
    mm = []
    for m, n, k in MATMUL_SHAPES:
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda", generator=g).to(torch.bfloat16)
        mm.append((a, b))
    s = FLA_SHAPE
    q = torch.randn(s["B"], s["T"], s["H"], s["K"], device="cuda", generator=g, dtype=torch.bfloat16)
    k = torch.nn.functional.normalize(
        torch.randn(s["B"], s["T"], s["H"], s["K"], device="cuda", generator=g, dtype=torch.float32), p=2, dim=-1
    ).to(torch.bfloat16)
    v = torch.randn(s["B"], s["T"], s["H"], s["V"], device="cuda", generator=g, dtype=torch.bfloat16)
    gg = torch.nn.functional.logsigmoid(torch.randn(s["B"], s["T"], s["H"], device="cuda", generator=g)).float()
    beta = torch.rand(s["B"], s["T"], s["H"], device="cuda", generator=g).sigmoid().to(torch.bfloat16)
    do = torch.randn(s["B"], s["T"], s["H"], s["V"], device="cuda", generator=g, dtype=torch.bfloat16)
    fla = (q, k, v, gg, beta, do)
    return rs, mm, fla


def run_fla(fla):
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    # fla-core 0.6.0 refuses the gated backward on Hopper with Triton
    # 3.4 <= v < 3.7.1: one kernel there computes dg and dbeta with a known
    # precision error (fla issue #640; fixed by Triton 3.7.1). The GPU
    # machine has Triton 3.6.0. This suite compares output bits across
    # processes, not accuracy, so it runs the kernel anyway: the dg and
    # dbeta digests are reproducible but their values are the buggy ones.
    chunk_o.TRITON_ABOVE_3_7_1 = True
    q, k, v, g, beta, do = (t.detach().clone() for t in fla)
    for t in (q, k, v, g, beta):
        t.requires_grad_(True)
    o, _ = chunk_gated_delta_rule(q, k, v, g, beta, scale=q.shape[-1] ** -0.5, output_final_state=False)
    o.backward(do)
    return {"o": o, "dq": q.grad, "dk": k.grad, "dv": v.grad, "dg": g.grad, "dbeta": beta.grad}


def workload(data, with_fla=True, keys="suite"):
    """Run every kernel of the key set once; return {name: tensor}."""
    if keys == "mamba":
        return run_mamba()
    rs, mm, fla = data
    out = {}
    for (m, n), x in zip(ROWSUM_SHAPES, rs):
        out[f"row_sum[{m}x{n}]"] = row_sum(x)
    for (m, n, k), (a, b) in zip(MATMUL_SHAPES, mm):
        out[f"matmul_bf16[{m}x{n}x{k}]"] = matmul(a, b)
    if with_fla:
        for name, t in run_fla(fla).items():
            out[f"fla.{name}"] = t
    return out
