"""One process for test_verify_hook.py: detd.install() from the
environment, then the launches named in argv[1] (comma-separated) with the
kernels of pattern_kernels.py (and, for test_nondet.py, an op torch names
nondeterministic and an attention call); prints one JSON line of what
happened."""
import json
import sys

import detd

detd.install()
import pattern_kernels as pk  # noqa: E402  (after install: tuners are governed as users write them)
import torch  # noqa: E402

out = {}
for name in sys.argv[1].split(","):
    try:
        if name == "allfail":
            pk.run_allfail(torch.ones(100))
        elif name == "ok":
            pk.run_det(pk.spread_values(64))
        elif name == "atomic":
            pk.run_atomic(pk.spread_values(64))
        elif name == "put":  # an op torch names nondeterministic on the CPU too
            torch.zeros(8).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]), accumulate=False)
        elif name == "sdpa":  # attention with a backward: the flash CPU kernel
            q = torch.randn(1, 2, 8, 16, requires_grad=True)
            torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
        elif name == "many":  # more ops named than the audit reports (detd._nondet.MAX_OPS)
            import warnings

            for i in range(70):
                warnings.warn(f"fake_op_{i:02d} does not have a deterministic implementation, but you set "
                              "'torch.use_deterministic_algorithms(True, warn_only=True)'.", UserWarning)
        elif name == "bypass":
            t = pk.make_subclass_tuner(pk.FirstConfigTuner, pk.scale_bypass, "bypass")
            pk.run_tuner(t, torch.ones(64))
        out[name] = "ok"
    except Exception as e:  # noqa: BLE001 - the test reads what raised
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
