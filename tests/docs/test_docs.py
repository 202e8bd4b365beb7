"""The README and docs/ as a reader follows them: the README stays at most
400 lines (the rest lives in docs/), and every relative link in README.md,
docs/*.md and client/python/README.md points at a file that exists and,
with a #fragment, at a heading that exists there (GitHub's anchor rule);
every `docs/NAME.md` named in backticks exists; every command the README
and docs/*.md show in their code blocks is one a test runs (RUN_BY and
DOCS_RUN_BY below: the test that runs it, and the text of that test that
does; a command added without an entry fails here). A docs/ command that
cannot run here (it needs the GPU, a cluster, root or minutes of benchmark)
is run by this test as written up to its argument parsing, against
parse-only stand-ins of its programs (tests/docs/parse_only.py): a renamed
script, flag or variable fails. That part needs the built detd and detctl
(DETD_BUILD_DIR)."""
import concurrent.futures
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README_MAX_LINES = 400
PAGES = ["README.md", "client/python/README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text):
    """The lines of Markdown text outside fenced code blocks, as (number, line)."""
    out, fenced = [], False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def read(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def anchors(text):
    """GitHub's anchors of Markdown headings: lower case, characters other
    than letters, digits, '-', '_' and spaces dropped, spaces as '-', a
    repeated one suffixed -1, -2, ..."""
    seen, out = {}, set()
    for _, line in prose(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


# A command of the README -> (the file that runs it, a pattern that file
# must hold: where it runs the command). A different argument is named.
RUN_BY = {
    "python3 -m venv venv && . venv/bin/activate": ("tests/install/test_install.py", r'"-m", "venv"'),
    # As written: at a terminal, in the activated venv, from the repository's
    # root, default build isolation.
    "pip install ./client/python": ("tests/install/test_install.py", r"activate && pip install \./client/python"),
    "detd-run train.py": ("tests/install/test_install.py", r'"detd-run", "train.py"'),
    "torchrun --nproc-per-node 8 -m detd.run train.py":
        ("tests/install/test_install.py", r'"torchrun", "--nproc-per-node", "8", "-m", "detd.run", "train.py"'),
    "detctl verify": ("tests/install/test_install.py", r'\[detctl, "verify"\]'),
    "scripts/demo.sh": ("tests/integration/test_demo.py", r'"scripts" / "demo.sh"'),
    "scripts/test-all.sh": (".ci/run", r"scripts/test-all\.sh"),
    "scripts/setup-deps.sh": ("scripts/demo.sh", r'"\$REPO/scripts/setup-deps.sh"'),
    # The suite configures with tests on and warnings as errors; the prefix
    # and DETD_BUILD_TESTS=OFF are what the Dockerfile's build stage and
    # pip's build (client/python/setup.py, run by test_install) pass.
    "cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr -DDETD_BUILD_TESTS=OFF":
        ("scripts/test-all.sh", r'cmake -S "\$REPO" -B "\$dir"'),
    "cmake --build build -j": ("scripts/test-all.sh", r"cmake --build"),
    "cmake --install build": ("tests/deploy/test_manifests.py", r'"cmake", "--install", str\(BUILD\), "--prefix", "/usr"'),
    # Every daemon of the integration tests starts with --socket and --state-dir.
    "detd --socket /run/detd/detd.sock --state-dir /var/lib/detd":
        ("tests/integration/conftest.py", r'"--socket", .*"--state-dir"'),
}
PROGRAMS = ("python3", "pip", "detd-run", "torchrun", "cmake", "detd", "detctl")
SCRIPT_PATH = re.compile(r"^(scripts|tests|examples|venv/bin)/")

# A command of docs/*.md -> how a test runs it: (file, pattern) as in
# RUN_BY (the README's entries count here too); PARSED: this test runs it
# as written, up to its argument parsing (test_docs_commands_parse); SCRIPT:
# a script without arguments that runs on another machine (the GPU one) or
# needs the network: it must exist, be executable and pass `bash -n`;
# USAGE: detctl's usage line, which `detctl --help` must print first.
PARSED, SCRIPT, USAGE = "parsed", "script", "usage"
INSTALL = "tests/install/test_install.py"
DOCS_RUN_BY = {
    # operating.md's install, as the README's (venv/bin/X is the activated venv's X).
    "python3 -m venv venv": (INSTALL, r'"-m", "venv"'),
    "venv/bin/pip install ./client/python": RUN_BY["pip install ./client/python"],
    "venv/bin/detctl --version": (INSTALL, r'"detctl", "--version"'),
    "venv/bin/detd-run train.py": RUN_BY["detd-run train.py"],
    "venv/bin/torchrun --nproc-per-node 8 -m detd.run train.py":
        RUN_BY["torchrun --nproc-per-node 8 -m detd.run train.py"],
    # lockfile.md: `...` is the job's own torchrun flags; the test runs
    # `python -m detd.run --lock` (what torchrun starts in each process).
    "torchrun ... -m detd.run train.py": RUN_BY["torchrun --nproc-per-node 8 -m detd.run train.py"],
    "torchrun ... -m detd.run --lock run-17.lock.json train.py":
        ("tests/integration/test_lockfile.py", r'"-m", "detd\.run", "--lock", lock'),
    "detctl lock import run-17.lock.json --require torch_version=2.11.0+cu128":
        ("tests/integration/test_lockfile.py", r'"lock", "import", lock, .*"--require", "torch_version='),
    "detd --lock run-17.lock.json --lock-require triton_version=3.6.0":
        ("tests/integration/test_lockfile.py", r'"--lock", lock, "--lock-require", "triton_version='),
    "cmake --build build": RUN_BY["cmake --build build -j"],
    "detctl [GLOBAL OPTIONS] COMMAND [OPTIONS]": USAGE,
    # No docker or kubectl on the test machine: the deploy checks read the
    # Dockerfile (every instruction, the context, .dockerignore, the
    # version) and the kustomization these two commands use.
    "docker build -t detd:0.1.0 .": ("tests/deploy/test_manifests.py", r'check_dockerfile\(REPO / "Dockerfile"'),
    "kubectl apply -k deploy/kubernetes": ("tests/deploy/manifest_check.py", r"def check_kustomization"),
    # nvcc builds it and the GPU runs it (native_example_nvcc builds it; the
    # GPU run: tests/gpu/native_run.py, parsed below).
    "DETD_SOCKET=/run/detd/detd.sock examples/native/autotune_rowsum":
        ("tests/native/nvcc_example.sh", r'test -x "\$OUT/autotune_rowsum"'),
    # Reads the decisions a GPU run kept; runs here on known samples.
    "python3 tests/gpu/replay_recheck.py /tmp/detd-coldstart-*/decisions.json":
        ("tests/python/test_replay_recheck.py", r"\[sys\.executable, SCRIPT, str\(path\)\]"),
    "tests/gpu/bundle.sh": SCRIPT,
    "tests/gpu/fetch_packages.sh": SCRIPT,
}
# The rest of docs/: GPU scripts, benchmarks of minutes, the campaign's
# long sweep, daemon flags for root or a cluster, detctl against a store.
for _cmd in (
        "python3 tests/bench/bench_decide.py --seconds 4 --keys 100000",
        "DETD_BUILD_DIR=build-74b7529 python3 tests/bench/scale_bench.py --nodes 16,64,128 --members 3 "
        "--keys 20 --burst 40 --idle-s 3 --late-s 0 --storm-timeout 30 --json before.json",
        "DETD_BUILD_DIR=build python3 tests/bench/scale_bench.py --nodes 16,64,128 --members 3 "
        "--keys 20 --burst 40 --idle-s 3 --late-s 0 --storm-timeout 30 --json after.json",
        "DETD_BUILD_DIR=... python3 tests/bench/scale_bench.py --nodes 16 --members 3 --keys 5 --burst 5 "
        "--pass-ms 3000 --idle-s 3 --late-s 0 --storm-timeout 30",
        "etcd grpc-proxy start --endpoints=10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --listen-addr=10.0.1.1:23790",
        'detd ... --etcd http://10.0.1.1:23790 --node-id "$(hostname)"',
        "python3 tests/campaign/harness.py --seed 17 -v",
        "python3 tests/campaign/run_campaign.py --schedules 500 --seed-start 1",
        "ctest --test-dir build -R campaign",
        "DETD_CAMPAIGN_SCHEDULES=10 ctest --test-dir build -R campaign",
        "DETD_BUILD_DIR=build python3 tests/bench/leader_kill.py --trials 6",
        "python3 tests/gpu/run_gpu.py --procs 8",
        "python3 tests/gpu/run_gpu.py --procs 8 --phases agree,time,table",
        "python3 tests/gpu/run_gpu.py --procs 8 --phases paired,record",
        "python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl",
        "PYTHONPATH=/tmp/site:.pkgsrc:.pkgsrc/gemlite-0.6.0.post2 python3 tests/gpu/run_packages.py --procs 8 "
        "--packages mamba,gemlite",
        "PYTHONPATH=... python3 tests/gpu/run_packages.py --procs 8 --packages liger,fla",
        "python3 tests/gpu/run_flaggems.py --procs 8",
        "python3 tests/gpu/run_coldstart.py --procs 8",
        "python3 tests/gpu/run_coldstart.py --procs 8 --before",
        "python3 tests/gpu/run_coldstart.py --procs 8 --env DETD_COMPILE_AHEAD=8 --no-default",
        "python3 tests/gpu/run_coldstart.py --procs 8 --default-cap 100",
        "python3 tests/gpu/run_coldstart.py --procs 8 --before --no-default",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --default-cap 100",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --default-cap 320",
        "PYTHONPATH=/tmp/site python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --default-cap 380",
        "PYTHONPATH=/tmp/site python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --default-cap 300",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --default-cap 300 --quiet-chain",
        "PYTHONPATH=/tmp/site python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --default-cap 300 "
        "--quiet-chain",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --default-cap 380",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --no-default --env DETD_COMPILE_PROCESSES=off",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default --env DETD_COMPILE_PROCESSES=off",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --env DETD_SCREEN=on --default-cap 60",
        "python3 tests/gpu/run_coldstart.py --procs 8 --no-fla --no-default --env DETD_SCREEN=on",
        "python3 tests/gpu/run_coldstart.py --procs 8 --no-default --env DETD_COMPILE_AHEAD=0",
        "python3 tests/gpu/run_coldstart.py --procs 8 --no-default --env DETD_COMPILE_AHEAD=8",
        "python3 tests/gpu/run_coldstart.py --procs 8 --no-default --env DETD_COMPILE_AHEAD=8 "
        "--env DETD_COMPILE_OVERLAP=on",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --no-default",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default --env DETD_COMPILE_NICE=0",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default --env DETD_COMPILE_NICE=10",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default --env DETD_SCREEN=off "
        "--env DETD_COMPILE_NICE=0",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default --env DETD_SCREEN=0.1 "
        "--env DETD_COMPILE_NICE=10",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys suite --no-default --env DETD_COMPILE_AHEAD=8 "
        "--env DETD_COMPILE_OVERLAP=on",
        "python3 tests/gpu/run_coldstart.py --procs 8 --keys mamba --no-default --env DETD_COMPILE_AHEAD=8 "
        "--env DETD_COMPILE_OVERLAP=on",
        "python3 tests/gpu/run_inductor.py --procs 8",
        "DETD_TEST_COMPILE_THREADS=16 python3 tests/gpu/run_inductor_step.py --rounds 2 --steps 40",
        "DETD_TEST_COMPILE_THREADS=16 python3 tests/gpu/run_coordesc.py",
        "python3 tests/gpu/run_helion.py --procs 4",
        "python3 tests/gpu/run_compile_threads.py --kernels 32 --workers 8",
        "python3 tests/gpu/run_hf_llama.py",
        "python3 tests/gpu/run_hf_llama.py --procs 8 --no-default --no-negative --warm-rerun --budget-s 560 "
        "--cap-s 0,260,150,0",
        "python3 tests/gpu/run_hf_llama.py --procs 8 --only-default --budget-s 585 --cap-s 575,0,0,0 "
        "--out /tmp/hf-default",
        "python3 tests/gpu/run_hf_llama.py --procs 8 --default-from /tmp/hf-default/hf_llama.json --no-negative "
        "--no-rerun --budget-s 480 --cap-s 0,420,0,0",
        "python3 tests/gpu/run_hf_llama.py --procs 8 --split-gpus --no-negative --no-rerun --budget-s 580 "
        "--cap-s 560,400,0,0",
        "python3 tests/gpu/run_hf_llama.py --procs 8 --no-negative --no-rerun --budget-s 1150 "
        "--cap-s 600,500,0,0",
        "python3 tests/gpu/run_hf_settings.py --lock-in hf.lock --default-procs 1 --default-first",
        "detctl lock export -o run-17.lock.json",
        "detctl lock import run-17.lock.json",
        "detctl verify --lock run-17.lock.json",
        "python3 tests/gpu/run_lockfile.py --procs 8 --no-fla",
        "detd --socket /run/detd/detd.sock --state-dir /var/lib/detd --etcd "
        "https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379 --etcd-ca ca.pem --etcd-cert node.pem "
        '--etcd-key node-key.pem --node-id "$(hostname)" --listen 10.0.0.7:7070',
        "DETD_BUILD_DIR=build python3 tests/bench/cluster_bench.py --keys 200",
        "DETD_BUILD_DIR=build python3 tests/bench/scale_bench.py --nodes 16,32,64 --members 3,5 --keys 60 "
        "--burst 100",
        "python3 tests/bench/scale_bench.py --model tests/bench/scale-2026-12-01.json",
        "DETD_BUILD_DIR=build python3 tests/bench/scale_bench.py --nodes 16 --members 3 --keys 5 --burst 5 "
        "--pass-ms 3000 --idle-s 3 --late-s 0 --storm-timeout 30",
        "DETD_BUILD_DIR=build python3 tests/bench/scale_bench.py --nodes 16,32,64 --members 3 --keys 10 "
        "--burst 20 --idle-s 5 --late-s 0 --storm-timeout 30",
        "make -C examples/native DETD_INCLUDE=$PWD/client/include DETD_LIB=$PWD/build/client",
        "DETD_SOCKET=/run/detd/detd.sock python3 examples/native/torch_rowsum.py --detd-include client/include "
        "--detd-lib build/client",
        "python3 tests/gpu/native_run.py --procs 8",
        "detctl votes --arch sm90",
        "detctl table export --arch sm90 --votes -o tables/sm90.json",
        "detctl table merge rank*.json old/sm90.json -o tables/ --verbose",
        "detctl table report rank*.json",
        "detctl table import tables/sm90.json --namespace job1"):
    DOCS_RUN_BY[_cmd] = PARSED
DOC_PROGRAMS = PROGRAMS + ("ctest", "make", "etcd", "docker", "kubectl")
DOCS = sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))


def block_commands(page, programs):
    """The command lines of a page's indented code blocks: in a block with
    shell prompts, the lines after `$ `; in any other, the lines whose first
    word after VAR=value assignments is one of programs or a path under
    scripts/, tests/, examples/ or venv/bin/, and which are not output (no
    `: ` before their first option). A line ending in a backslash continues
    on the next. Comments cut."""
    blocks, block, prev_blank = [], None, True
    for _, line in prose(read(page)):
        if line.startswith("    ") and (block is not None or prev_blank):
            if block is None:
                block = []
                blocks.append(block)
            block.append(line.strip())
        else:
            block = None
        prev_blank = not line.strip()
    cmds = []
    for block in blocks:
        prompted = any(ln.startswith("$ ") for ln in block)
        lines = iter(block)
        for ln in lines:
            while ln.endswith("\\"):
                ln = ln[:-1].rstrip() + " " + next(lines, "")
            ln = re.sub(r"\s+#.*$", "", ln)
            if prompted:
                cmd = ln[2:] if ln.startswith("$ ") else ""
            else:
                words = [w for w in ln.split() if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)]
                word = words[0] if words else ""
                is_cmd = (word in programs or SCRIPT_PATH.match(word)) and ": " not in ln.split(" -")[0]
                cmd = ln if is_cmd else ""
            if cmd:
                cmds.append(cmd)
    return cmds


def readme_commands():
    return block_commands("README.md", PROGRAMS)


def docs_commands():
    """(page, command) of every command in docs/*.md."""
    return [(page, cmd) for page in DOCS for cmd in block_commands(page, DOC_PROGRAMS)]


def test_every_readme_command_is_run_by_a_test():
    cmds = readme_commands()
    assert "scripts/demo.sh" in cmds and "pip install ./client/python" in cmds, cmds
    bad = []
    for cmd in cmds:
        if cmd not in RUN_BY:
            bad.append(f"README command {cmd!r}: no test named in RUN_BY (tests/docs/test_docs.py)")
            continue
        path, pattern = RUN_BY[cmd]
        if not re.search(pattern, read(path)):
            bad.append(f"README command {cmd!r}: {path} no longer holds {pattern!r}")
    assert not bad, "\n".join(bad)


BUILD = os.path.abspath(os.environ.get("DETD_BUILD_DIR") or os.path.join(REPO, "build"))
# Folders a docs command reads a DETD_* variable from: one it sets must be
# read somewhere there (a renamed variable fails).
READERS = ("tests", "scripts", "client", "daemon", "examples")


def source_text():
    """The code of READERS (.py, .sh, .c, .h, .cmake), build folders and
    this folder (whose tables name the variables) left out."""
    here = os.path.dirname(os.path.abspath(__file__))
    texts = []
    for top in READERS:
        for d, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [x for x in dirs if not x.startswith("build") and x != "__pycache__"]
            if os.path.abspath(d) != here:
                texts += [read(os.path.join(d, f)) for f in files if f.endswith((".py", ".sh", ".c", ".h", ".cmake"))]
    return "\n".join(texts)


def test_every_docs_command_is_run_by_a_test():
    cmds = docs_commands()
    assert len(cmds) >= 50, cmds
    bad = [f"DOCS_RUN_BY entry {c!r}: no such command in docs/ any more"
           for c in DOCS_RUN_BY if c not in {cmd for _, cmd in cmds}]
    usage = None
    for page, cmd in cmds:
        entry = DOCS_RUN_BY.get(cmd) or RUN_BY.get(cmd)
        if entry is None:
            bad.append(f"{page}: command {cmd!r}: no test named in DOCS_RUN_BY (tests/docs/test_docs.py)")
        elif entry == SCRIPT:
            path = os.path.join(REPO, cmd)
            if not os.access(path, os.X_OK):
                bad.append(f"{page}: {cmd!r}: no executable {cmd}")
            elif subprocess.run(["bash", "-n", path], capture_output=True).returncode != 0:
                bad.append(f"{page}: {cmd!r}: bash -n {cmd} fails")
        elif entry == USAGE:
            detctl = os.path.join(BUILD, "client", "detctl")
            assert os.access(detctl, os.X_OK), f"build {detctl} first"
            usage = subprocess.run([detctl, "--help"], capture_output=True, text=True).stdout.split("\n")[0]
            if usage != f"usage: {cmd}":
                bad.append(f"{page}: {cmd!r}: detctl --help prints {usage!r}")
        elif entry != PARSED:
            path, pattern = entry
            if not re.search(pattern, read(path)):
                bad.append(f"{page}: command {cmd!r}: {path} no longer holds {pattern!r}")
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    """(bin, cwd, env) to run docs commands in: bin holds the parse-only
    stand-ins of python3, detd, detctl, ctest, make and etcd; cwd is the
    repository's layout (links to its folders, build -> DETD_BUILD_DIR;
    tables/ left out: a command writing there would write the repository's);
    env puts bin first on PATH."""
    for f in (os.path.join("daemon", "detd"), os.path.join("client", "detctl")):
        assert os.access(os.path.join(BUILD, f), os.X_OK), f"build {os.path.join(BUILD, f)} first"
    root = tmp_path_factory.mktemp("docs")
    bindir, cwd, tmp = root / "bin", root / "repo", root / "tmp"
    for d in (bindir, cwd, tmp):
        d.mkdir()
    for prog in ("python3", "detd", "detctl", "ctest", "make", "etcd"):
        f = bindir / prog
        f.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                     f"{shlex.quote(os.path.join(REPO, 'tests', 'docs', 'parse_only.py'))} {prog} \"$@\"\n")
        f.chmod(0o755)
    for name in os.listdir(REPO):
        if name not in ("tables", ".git") and not name.startswith("build"):
            (cwd / name).symlink_to(os.path.join(REPO, name))
    (cwd / "build").symlink_to(BUILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETD_")}
    env.update(PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", TMPDIR=str(tmp),
               DETD_DOCS_STANDINS=str(bindir), DETD_DOCS_BUILD_DIR=BUILD,
               DETD_DOCS_NO_DAEMON=str(root / "no-daemon.sock"))
    return bindir, cwd, env


def test_docs_commands_parse(standins):
    """Every PARSED command, as written, through bash: its scripts exist,
    its flags and values parse, and every DETD_* variable it sets is one the
    code reads. All at once (each takes well under a second)."""
    _, cwd, env = standins
    cmds = sorted({cmd for _, cmd in docs_commands() if DOCS_RUN_BY.get(cmd) == PARSED})

    def one(cmd):
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        return cmd, p

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, cmds))
    bad = [f"{cmd!r} exited {p.returncode}:\n{p.stdout[-1000:]}{p.stderr[-2000:]}"
           for cmd, p in results if p.returncode != 0 or "parsed: " not in p.stdout]
    code = source_text()
    for var in sorted({v for cmd in cmds for v in re.findall(r"(?:^|\s)(DETD_[A-Z0-9_]+)=", cmd)}):
        if not re.search(rf"\b{var}\b", code):
            bad.append(f"{var}: set by a docs command, read nowhere in {', '.join(READERS)}")
    assert not bad, "\n\n".join(bad)


def test_readme_is_at_most_400_lines():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        n = sum(1 for _ in f)
    assert n <= README_MAX_LINES, f"README.md has {n} lines, more than {README_MAX_LINES}: move detail to docs/"


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    bad = []
    base = os.path.dirname(page)
    for n, line in prose(read(page)):
        # Links inside `code` are text, not links.
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(base, path)) if path else page
            if not os.path.exists(os.path.join(REPO, dest)):
                bad.append(f"{page}:{n}: {target}: no file {dest}")
            elif frag and dest.endswith(".md") and frag not in anchors(read(dest)):
                bad.append(f"{page}:{n}: {target}: no heading with anchor #{frag} in {dest}")
        for name in re.findall(r"`(docs/[\w.-]+\.md)", line):
            if not os.path.exists(os.path.join(REPO, name)):
                bad.append(f"{page}:{n}: `{name}` does not exist")
    assert not bad, "\n".join(bad)


def test_anchor_rule():
    # The rule above on headings as this repository writes them.
    got = anchors("# detd — deterministic\n## Operating: access control, TLS\n## torch.compile (Inductor)\n"
                  "## Triton: the `detd` Python package\n## Scale\n## Scale\n```\n# not a heading\n```\n")
    assert got == {"detd--deterministic", "operating-access-control-tls", "torchcompile-inductor",
                   "triton-the-detd-python-package", "scale", "scale-1"}
