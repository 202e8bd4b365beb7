"""What the audit names beyond configs, on one GPU: 2 processes of a tiny
attention model (audit_worker.py: SDPA, AdamW, one governed Triton kernel)
under detd with the audit on (DETD_AUDIT=1), twice, each against a fresh
daemon: with torch's defaults, then with the settings docs/determinism.md
recommends (use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG=
:4096:8, cuDNN deterministic, no benchmark).

    python3 tests/gpu/run_audit.py [--device cuda|cpu] [--out DIR]

Prints what `detctl verify` reports (its NONDET lines and exit codes, with
and without --strict-determinism), one table, and a PASS/FAIL line. Fails
unless, in both runs: verify names the SDPA backend the autograd graph of
each process holds, on both ranks; verify exits 0, and with
--strict-determinism exits 1 exactly when something is nondeterministic;
a cuDNN, flash or memory-efficient backward is named nondeterministic
when it ran under torch's defaults; and with the recommended settings nothing is
nondeterministic and both ranks' gradients and weights are bit-identical.
--device cpu runs the same on the CPU without the Triton kernel (a check
of the script; the local build: DETD_BIN, DETD_LIBRARY). Binaries: .gpu/ from tests/gpu/bundle.sh.
About a minute.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run_gpu import Daemon, env_for  # noqa: E402


def run(name, recommended, device, root):
    work = os.path.join(root, name)
    d = Daemon(os.path.join(work, "detd"))
    try:
        extra = {"DETD_AUDIT": "1", "WORLD_SIZE": "2", "DETD_JOB": name}
        if recommended:
            extra["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        procs = []
        for r in (0, 1):
            out = os.path.join(work, f"r{r}.json")
            log = open(os.path.join(work, f"r{r}.log"), "w")
            args = [sys.executable, os.path.join(HERE, "audit_worker.py"), "--out", out, "--device", device]
            procs.append((subprocess.Popen(args + (["--recommended"] if recommended else []),
                                           env=env_for({**extra, "RANK": str(r), "LOCAL_RANK": "0"}),
                                           stdout=log, stderr=subprocess.STDOUT), out, log))
        res = []
        for p, out, log in procs:
            rc = p.wait(600)
            log.close()
            if rc != 0:
                sys.stdout.write(open(log.name).read()[-3000:])
                raise SystemExit(f"{name}: worker exited {rc}")
            res.append(json.load(open(out)))
        # The CPU run has no Triton key (no timer there): nothing else to check.
        empty = ["--allow-empty"] if device == "cpu" else []
        text = d.detctl("verify", *empty)
        doc = json.loads(d.detctl("verify", "--json", *empty).stdout)
        strict = d.detctl("verify", "--strict-determinism", *empty)
    finally:
        d.stop()
    return dict(name=name, res=res, text=text, doc=doc, strict=strict)


def check(c, recommended):
    fails = []
    doc, res = c["doc"], c["res"]
    rt = {(e["kind"], e["name"]): e for e in doc.get("runtime", [])}
    backends = {r["backend"] for r in res}
    for b in backends:
        e = rt.get(("sdpa", b))
        if e is None or e["ranks"] != [0, 1]:
            fails.append(f"{c['name']}: verify does not name the SDPA backend {b} on ranks 0-1: {sorted(rt)}")
        elif b in ("cudnn", "flash", "efficient") and not recommended and not e["nondeterministic"]:
            fails.append(f"{c['name']}: the {b} backward is not named nondeterministic")
    if c["text"].returncode != 0:
        fails.append(f"{c['name']}: verify exited {c['text'].returncode}:\n{c['text'].stdout[-1500:]}")
    want = 1 if doc.get("nondeterministic", 0) > 0 else 0
    if c["strict"].returncode != want:
        fails.append(f"{c['name']}: verify --strict-determinism exited {c['strict'].returncode}, not {want}")
    if recommended:
        if doc.get("nondeterministic", 0) != 0:
            fails.append(f"{c['name']}: still nondeterministic: "
                         + "; ".join(e["message"] for e in doc["runtime"] if e["nondeterministic"]))
        if len({r["grads0"] for r in res}) != 1 or len({r["weights"] for r in res}) != 1:
            fails.append(f"{c['name']}: the ranks' gradients or weights differ")
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-audit-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="detd-audit-run-", dir="/tmp")
    fails, rows = [], []
    for name, rec in (("defaults", False), ("recommended", True)):
        c = run(name, rec, a.device, root)
        print(f"\n== {name}: detctl verify")
        print("\n".join(ln for ln in c["text"].stdout.splitlines()
                        if ln.startswith(("configs agree", "nondeterminism", "NONDET", "runtime:", "ok:", "FAIL"))))
        json.dump(c["doc"], open(os.path.join(a.out, f"verify-{name}.json"), "w"), indent=1)
        res, doc = c["res"], c["doc"]
        rows.append((name, "/".join(sorted({r["backend"] for r in res})), doc.get("keys_checked"),
                     doc.get("nondeterministic"), c["text"].returncode, c["strict"].returncode,
                     "yes" if len({r["grads0"] for r in res}) == 1 else "no",
                     "yes" if len({r["weights"] for r in res}) == 1 else "no"))
        fails += check(c, rec)
    print(f"\n2 processes, one {a.device} device, audit on")
    print("| settings | SDPA backward ran | config keys | nondeterministic | verify exit | --strict exit "
          "| step-0 grads equal | weights equal |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    for f in fails:
        print("FAIL:", f)
    print("audit run:", "PASS" if not fails else "FAIL")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
