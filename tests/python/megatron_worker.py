"""One process for test_megatron_coexist.py: detd and the stand-in
megatron.core.tuning (fake_megatron/ on sys.path) installed in the order
argv[2] names, then one autotuned launch; writes what governed it to the
JSON file argv[1]."""
import json
import sys
import warnings

order = sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import detd

    if order == "megatron-first":
        import megatron.core.tuning as mt

        mt.install_from_env()
        detd.install()
    else:  # detd-first, megatron-governs (DETD_MEGATRON=megatron)
        detd.install()
        import megatron.core.tuning as mt

        mt.install_from_env()
    import pattern_kernels as pk
    from triton.runtime.autotuner import Autotuner

    out = pk.run_det(pk.spread_values(64))
tuners = detd.autotuners()
keys = [k for t in tuners if ":det_sum@" in t["kernel"] for k in t["keys"]]
res = {
    "installed": detd.installed(),
    "run_module": Autotuner.run.__globals__["__name__"],  # wraps() copies __module__
    "megatron_calls": len(mt.calls),
    "megatron_installed": mt.interception._installed,
    "detd_keys": [dict(source=k["source"], governed=k["governed"], timed_here=k["timed_here"]) for k in keys],
    "log": [str(w.message) for w in caught if "megatron.core.tuning" in str(w.message)],
    "sum": float(out.sum()),
}
with open(sys.argv[1], "w") as f:
    json.dump(res, f)
