"""One process of run_audit.py: a tiny attention model (embedding, one
attention block through F.scaled_dot_product_attention, an MLP) trained
for a few AdamW steps under detd with the audit on (DETD_AUDIT=1 from the
runner), plus one governed Triton kernel (row_sum of the logits), so that
verify has a config key to agree on (on the GPU only).

    python3 audit_worker.py --out FILE [--recommended] [--device cuda|cpu]

--recommended applies the settings docs/determinism.md recommends
(CUBLAS_WORKSPACE_CONFIG comes from the runner's environment). Writes
JSON: the SDPA backward the autograd graph holds (the backend that ran),
a digest of the gradients after step 0 and of the weights after the last
step.
"""
import argparse
import hashlib
import json
import os

import detd

detd.install()  # DETD_AUDIT=1: the audit's runtime findings start here
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernels  # noqa: E402  (after install: its autotuner is governed)

BACKENDS = {"ScaledDotProductCudnnAttentionBackward0": "cudnn",
            "ScaledDotProductFlashAttentionBackward0": "flash",
            "ScaledDotProductEfficientAttentionBackward0": "efficient",
            "ScaledDotProductFlashAttentionForCpuBackward0": "flash_cpu"}


class Tiny(torch.nn.Module):
    def __init__(self, vocab=512, dim=256, heads=4):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, vocab)
        self.attn_grad_fn = None

    def forward(self, ids):
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if a.grad_fn is not None and self.attn_grad_fn is None:
            self.attn_grad_fn = a.grad_fn.name()
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(x)
        return self.head(x)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--recommended", action="store_true")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if a.recommended:  # docs/determinism.md, "Recommended settings for bit-identical training"
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    model = Tiny().to(dev, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, 512, (8, 256), generator=g).to(dev)
    grads0 = None
    for step in range(4):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            grads0 = digest(p.grad for p in model.parameters())
            rows = logits.detach().float().reshape(-1, logits.shape[-1]).contiguous()
            if dev.type == "cuda":  # the CPU has no Triton timer (the interpreter would need a do_bench=)
                rows = kernels.row_sum(rows)
        opt.step()
    out = {"backend": BACKENDS.get(model.attn_grad_fn, f"math ({model.attn_grad_fn})"), "grads0": grads0,
           "weights": digest(model.parameters()), "row_sum": digest([rows]),
           "findings": {f"{k[0]} {k[1]}": list(v) for k, v in detd._nondet.findings().items()}}
    json.dump(out, open(a.out, "w"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
