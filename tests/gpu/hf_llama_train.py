"""One process of run_hf_llama.py: a randomly initialized Hugging Face
``LlamaForCausalLM`` (transformers, SDPA attention) trained with AdamW
under ``torch.compile`` (``max-autotune`` on the GPU). Every process
builds the same weights and draws the same batches (seeded), so identical
processes must produce identical bits.

    python3 hf_llama_train.py --mode default|detd --out FILE [--recommended] [--settings S,...] [--steps 10]
                              [--timed-steps 20] [--dims H,I,L,HEADS,VOCAB,SEQ,BATCH]
                              [--device cuda|cpu] [--compile-mode M]

``default``: detd is not imported (torch.compile as it is). ``detd``:
``detd.install()`` (coordinated; ``DETD_SOCKET`` names the daemon;
``DETD_AUDIT=1`` from the runner reports what no config fixes).
--recommended applies docs/determinism.md's "Recommended settings for
bit-identical training" before anything else; --settings applies named
ones (apply_settings(); run_hf_settings.py measures what each costs).

Before training, one eager forward and backward (grads dropped) names
the SDPA backward the autograd graph holds (``sdpa_backward``): the
backend torch picks for this model's attention under these settings.

Writes JSON to FILE after step --steps (``losses``: each step's loss as
exact bits; ``grads``: SHA-256 of all gradients' bytes, each step;
``params``: SHA-256 of the parameters' bytes after the last of those
steps; ``wall_to_step``: seconds from $DETD_HF_T0, the runner's start of
the run, to the end of that step) and again after --timed-steps more
steps (``step_ms``: CUDA-event time of each, nothing hashed; with
$DETD_HF_SYNC, a folder the run's processes share, they time their steps
one at a time once all of them have done the hashed steps, so that no
other process's compiling, benchmarking or training shares the GPU
during a timed step), with, under
detd, ``keys`` (Inductor keys listed by detd.autotuners()) and
``governed`` (those governed).
"""

import argparse
import fcntl
import hashlib
import json
import os
import struct
import time

T0 = float(os.environ.get("DETD_HF_T0") or time.time())
SDPA = {"ScaledDotProductCudnnAttentionBackward0": "cudnn",
        "ScaledDotProductFlashAttentionBackward0": "flash",
        "ScaledDotProductEfficientAttentionBackward0": "efficient",
        "ScaledDotProductFlashAttentionForCpuBackward0": "flash_cpu"}


RECOMMENDED = "cublas_ws,det,cudnn_det,no_tf32"  # docs/determinism.md's set, as written there


def apply_settings(names, under_detd):
    """Apply the named settings (comma-separated) before anything else:
    ``--recommended`` is RECOMMENDED, docs/determinism.md's "Recommended
    settings for bit-identical training"; run_hf_settings.py applies
    them one by one to find what each costs and what each is for.

    cublas_ws   CUBLAS_WORKSPACE_CONFIG=:4096:8 (before the first CUDA call)
    det         torch.use_deterministic_algorithms(True) (under detd also
                torch._inductor.config.deterministic = False: keep the
                timed choices detd decides)
    nofill      torch.utils.deterministic.fill_uninitialized_memory = False
                (det fills every new tensor with NaN by default)
    cudnn_det   torch.backends.cudnn.deterministic = True, benchmark = False
    no_tf32     TF32 off for matmul and cuDNN
    no_cudnn_sdp  torch.backends.cuda.enable_cudnn_sdp(False)
    math_sdp    only the math SDPA backend (flash, efficient, cuDNN off)
    """
    names = [n for n in names.split(",") if n]
    unknown = sorted(set(names) - set(SETTING_NAMES))
    if unknown:
        raise SystemExit(f"--settings: unknown {', '.join(unknown)} (known: {', '.join(SETTING_NAMES)})")
    if "cublas_ws" in names:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    if "det" in names:
        torch.use_deterministic_algorithms(True)
        if under_detd:
            import torch._inductor.config

            torch._inductor.config.deterministic = False
    if "nofill" in names:
        torch.utils.deterministic.fill_uninitialized_memory = False
    if "cudnn_det" in names:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    if "no_tf32" in names:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if "no_cudnn_sdp" in names or "math_sdp" in names:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if "math_sdp" in names:
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)


SETTING_NAMES = ("cublas_ws", "det", "nofill", "cudnn_det", "no_tf32", "no_cudnn_sdp", "math_sdp")


def sdpa_backward(loss):
    """The SDPA backward nodes of loss's autograd graph, by backend."""
    seen, todo, found = set(), [loss.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        name = fn.name()
        if "ScaledDotProduct" in name:
            found.add(SDPA.get(name, name))
        todo.extend(f for f, _ in fn.next_functions)
    return sorted(found) or ["math"]


def sha(tensors):
    """SHA-256 of the tensors' bytes, in order."""
    import torch

    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["default", "detd"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--recommended", action="store_true", help=f"--settings {RECOMMENDED}")
    ap.add_argument("--settings", default="", help="settings to apply, comma-separated (apply_settings())")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timed-steps", type=int, default=20)
    ap.add_argument("--dims", default="512,1536,4,8,32000,512,4",
                    help="hidden,intermediate,layers,heads,vocab,seq,batch")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile-mode", default="max-autotune", help="torch.compile's mode; 'none': eager")
    a = ap.parse_args()

    settings = ",".join(x for x in (RECOMMENDED if a.recommended else "", a.settings) if x)
    apply_settings(settings, a.mode == "detd")
    if a.mode == "detd":
        import detd

        detd.install()  # coordinated; after the settings, so the audit finds them on
    import torch
    import torch._inductor.config as ic
    from transformers import LlamaConfig, LlamaForCausalLM

    ic.compile_threads = int(os.environ.get("DETD_TEST_COMPILE_THREADS", "2"))
    hidden, inter, layers, heads, vocab, seq, batch = (int(x) for x in a.dims.split(","))
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, vocab_size=vocab,
                      max_position_embeddings=seq, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dev, dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def batch_for(step):
        g = torch.Generator().manual_seed(1000 + step)
        return torch.randint(0, vocab, (batch, seq), generator=g).to(dev)

    probe = model(input_ids=batch_for(0), labels=batch_for(0)).loss
    probe.backward()
    backend = sdpa_backward(probe)
    opt.zero_grad(set_to_none=True)

    run = model if a.compile_mode == "none" else torch.compile(model, mode=a.compile_mode)
    params = [p for _, p in model.named_parameters()]
    res = dict(pid=os.getpid(), mode=a.mode, recommended=a.recommended, settings=settings, sdpa_backward=backend,
               torch=torch.__version__, device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
               losses=[], grads=[], step_ms=[])

    def write():
        from torch._dynamo.utils import counters

        res["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"]
        if a.mode == "detd":
            import detd

            tuners = [t for t in detd.autotuners() if t.get("kind") == "inductor" and t["kernel"] != "inductor::*"]
            res["keys"] = sum(len(t["keys"]) for t in tuners)
            res["governed"] = sum(len(t["keys"]) for t in tuners if t.get("governed"))
            res["inductor"] = [t.get("status") for t in detd.autotuners() if t["kernel"] == "inductor::*"]
            st = detd.stats()
            res["stats"] = {k: st.get(k) for k in ("inductor_failed_here", "inductor_lost_used", "inductor_precompiles_skipped",
                                                   "inductor_shares", "inductor_precompiles_deferred",
                                                   "inductor_deferred_compiled", "early_claims", "early_passed_on",
                                                   "inductor_graph_cache_hits", "inductor_graph_cache_refused",
                                                   "inductor_graph_cache_unsaved")}
        with open(a.out + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(a.out + ".tmp", a.out)

    turn = None
    for step in range(a.steps + a.timed_steps):
        if step == a.steps and a.timed_steps and os.environ.get("DETD_HF_SYNC"):
            turn = alone_on_the_gpu(os.environ["DETD_HF_SYNC"])
        ids = batch_for(step)
        timed = step >= a.steps and dev.type == "cuda"
        if timed:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        loss = run(input_ids=ids, labels=ids).loss
        loss.backward()
        if step < a.steps:
            res["grads"].append(sha(p.grad for p in params))
            res["losses"].append(struct.pack(">d", loss.item()).hex())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if timed:
            end.record()
            torch.cuda.synchronize()
            res["step_ms"].append(start.elapsed_time(end))
        if step < a.steps:
            # How far a process got, for a run capped before its last
            # hashed step (the runner reads it after the kill).
            with open(a.out + ".progress", "w") as f:
                json.dump({"step": step + 1, "s": time.time() - T0}, f)
        if step + 1 == a.steps:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            res["wall_to_step"] = time.time() - T0
            res["params"] = sha(params)
            write()
    write()
    if turn is not None:
        turn.close()  # the next process's turn


def alone_on_the_gpu(sync):
    """Wait until every process of the run (WORLD_SIZE) has done its
    hashed steps, then for this process's turn: an exclusive lock on
    sync/turn, held (the open file returned) until it closes it. The
    runner's cap bounds the wait."""
    n = int(os.environ.get("WORLD_SIZE", "1"))
    open(os.path.join(sync, f"ready_{os.environ.get('RANK', '0')}"), "w").close()
    while sum(f.startswith("ready_") for f in os.listdir(sync)) < n:
        time.sleep(0.05)
    f = open(os.path.join(sync, "turn"), "a")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


if __name__ == "__main__":
    main()
