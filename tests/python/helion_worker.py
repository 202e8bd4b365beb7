"""One process of the Helion test: a real Helion kernel (Helion 1.5.1,
compiled to Triton and run by Triton's CPU interpreter), detd installed
before Helion is imported, as ``python -m detd.run`` does.

    helion_worker.py OUT.json

What cannot run here, and its stand-in (this machine has no GPU):
Helion's own searches benchmark candidates in a subprocess on the
accelerator, which times out here. The kernel's ``autotuner_fn`` is a
small search of its own (:func:`cpu_search`): Helion's real config space
(``ConfigGeneration``), a few random configs of it (seeded by the
process's rank, so processes left alone disagree) plus the default, each
compiled by Helion (``compile_config``) and timed with a CPU timer in the
interpreter; the fastest wins. Everything around it is Helion's own:
``BoundKernel.autotune``, the backend's call of ``settings.autotuner_fn``,
``set_config`` with the config returned. tests/gpu/run_helion.py runs
Helion's default search on the GPU.

Writes JSON: ``searches`` (searches run here), ``config`` (the config the
kernel runs, Helion's JSON), ``autotuners`` (detd.autotuners()),
``digest`` (SHA-256 of the output's bytes).
"""

import hashlib
import json
import os
import random
import sys
import time

import detd

detd.install()  # before Helion is imported: its Settings are wrapped as they are built

import torch  # noqa: E402

import helion  # noqa: E402
import helion.language as hl  # noqa: E402

SAMPLES = 3  # random configs per search, besides the default
searches = 0


class CpuSearch:
    """A Helion autotuner (``autotune(skip_cache=...) -> Config``) timing
    configs with a CPU timer."""

    def __init__(self, bound_kernel, args):
        self.bk, self.args = bound_kernel, args

    def autotune(self, *, skip_cache=False):
        global searches
        searches += 1
        # Persistent program ids need the device's SM count: none here.
        gen = self.bk.config_spec.create_config_generation(overrides={"pid_type": "flat"})
        rng = random.Random(int(os.environ.get("RANK", "0")))
        random.seed(rng.random())  # Helion's fragments draw from the random module
        configs = [self.bk.config_spec.default_config()]
        configs += [gen.random_config() for _ in range(SAMPLES)]
        best, best_t = None, float("inf")
        for cfg in configs:
            try:
                fn = self.bk.compile_config(cfg)
                fn(*self.args)
                t0 = time.perf_counter()
                fn(*self.args)
                t = time.perf_counter() - t0
            except Exception as e:  # a config this kernel cannot run: skipped, as Helion's search does
                print("config failed:", cfg, repr(e)[:300], file=sys.stderr)
                continue
            if t < best_t:
                best, best_t = cfg, t
        self.best_perf_so_far = best_t * 1000.0
        return best


def cpu_search(bound_kernel, args, **_kw):
    return CpuSearch(bound_kernel, args)


@helion.kernel(autotuner_fn=cpu_search, autotune_precompile=None)
def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] * 0.5 + y[tile]
    return out


def main():
    out_path = sys.argv[1]
    torch.manual_seed(0)
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    out = scale_add(x, y)
    result = dict(searches=searches, config=json.loads(scale_add.bind((x, y))._config.to_json()),
                  digest=hashlib.sha256(out.numpy().tobytes()).hexdigest(), autotuners=detd.autotuners(),
                  not_final=detd.not_final())
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
