"""One process of the flag-gems GPU run (run_flaggems.py).

    python flaggems_worker.py --mode default|detd --out OUT.json [--quick]

flag_gems.enable() sends every ATen op it covers through its Triton
kernels; the workload runs GEMMs and reductions of a few shapes and keeps
each output's SHA-256. Every LibTuner call is recorded (kernel, LibTuner's
key, the config it launched), whatever governs it. With --mode detd,
detd.install() comes first (flag-gems' LibTuner is governed through its
cache by default). OUT.json: configs (kernel|key -> config), digests
(op -> sha), passes (timing passes this process made, from
detd.autotuners()), workload_s, ungoverned, errors.
"""

import argparse
import hashlib
import json
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=("default", "detd"), required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--quick", action="store_true")
a = ap.parse_args()

if a.mode == "detd":
    import detd

    detd.install()

import torch  # noqa: E402
import flag_gems  # noqa: E402
from flag_gems.utils.libentry import LibTuner  # noqa: E402  (flag_gems.utils.libentry is also a function)

configs = {}
_run = LibTuner.run


def recording_run(self, *args, **kwargs):
    ret = _run(self, *args, **kwargs)
    if len(self.configs) > 1:
        named = {k: v for k, v in {**dict(zip(self.arg_names, args)), **kwargs}.items() if k in self.arg_names}
        configs[f"{self.__name__}|{self.get_key(named)!r}"] = str(self.best_config)
    return ret


LibTuner.run = recording_run

dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(1234)
ops = {}
mm_shapes = [(1024, 1024, 1024), (2048, 4096, 1024)] if a.quick else \
    [(1024, 1024, 1024), (2048, 4096, 1024), (4096, 4096, 4096), (8192, 1024, 2048)]
for m, n, k in mm_shapes:
    for dt in (torch.bfloat16,) if a.quick else (torch.bfloat16, torch.float16):
        x = torch.randn(m, k, device=dev, dtype=dt, generator=g)
        y = torch.randn(k, n, device=dev, dtype=dt, generator=g)
        ops[f"mm {m}x{n}x{k} {dt}"] = lambda x=x, y=y: torch.mm(x, y)
for rows, cols in [(4096, 8192), (1024, 32000)] if a.quick else [(4096, 8192), (1024, 32000), (16384, 4096)]:
    x = torch.randn(rows, cols, device=dev, dtype=torch.float32, generator=g)
    ops[f"sum {rows}x{cols}"] = lambda x=x: x.sum(dim=-1)
    ops[f"mean {rows}x{cols}"] = lambda x=x: x.mean(dim=0)
    ops[f"amax {rows}x{cols}"] = lambda x=x: x.amax(dim=-1)

flag_gems.enable()  # after the inputs: they come from torch's own generator
digests, errors = {}, {}
t0 = time.time()
for name, fn in ops.items():
    try:
        out = fn()
        torch.cuda.synchronize()
        digests[name] = hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()
    except Exception as e:  # noqa: BLE001 - one op failing leaves the others
        errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
workload_s = time.time() - t0

res = {"configs": configs, "digests": digests, "errors": errors, "workload_s": workload_s, "passes": 0,
       "ungoverned": []}
if a.mode == "detd":
    tuners = detd.autotuners()
    res["passes"] = sum(1 for t in tuners for k in t["keys"] if k.get("timed_here"))
    res["ungoverned"] = sorted({f"{t['kernel']}: {t.get('why')}" for t in tuners if not t.get("governed")})
    res["sources"] = sorted({k["source"] for t in tuners for k in t["keys"]})
with open(a.out, "w") as f:
    json.dump(res, f)
