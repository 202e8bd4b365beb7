"""The README and docs/ as a reader follows them, without building anything:
the README stays at most 400 lines (the rest lives in docs/), and every
relative link in README.md, docs/*.md and client/python/README.md points at
a file that exists and, with a #fragment, at a heading that exists there
(GitHub's anchor rule); every `docs/NAME.md` named in backticks exists;
every command the README shows in its code blocks is one a test runs
(RUN_BY below: the test that runs it, and the text of that test that
does; a command added to the README without an entry fails here)."""
import os
import re

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
    # pip builds the wheel from ./client/python (default build isolation)
    # and installs it: the same build as `pip install ./client/python`.
    "pip install ./client/python": ("tests/install/test_install.py", r'"wheel", "--no-deps".*"client", "python"'),
    "detd-run train.py": ("tests/install/test_install.py", r'"detd-run", script'),
    # The test runs it with 4 processes (2 CPUs).
    "torchrun --nproc-per-node 8 -m detd.run train.py":
        ("tests/install/test_install.py", r'"torchrun", "--standalone", "--nproc-per-node", "4", "-m", "detd.run"'),
    "torchrun --nproc-per-node 4 -m detd.run train.py":
        ("tests/install/test_install.py", r'"torchrun", "--standalone", "--nproc-per-node", "4", "-m", "detd.run"'),
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


def readme_commands():
    """The command lines of the README's indented code blocks: in a block
    with shell prompts, the lines after `$ `; in any other, the lines whose
    first word is one of PROGRAMS (output lines are neither). Comments cut."""
    blocks, block, prev_blank = [], None, True
    for _, line in prose(read("README.md")):
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
        for ln in block:
            if prompted:
                cmd = ln[2:] if ln.startswith("$ ") else ""
            else:
                word = ln.split()[0] if ln.split() else ""
                cmd = ln if word in PROGRAMS or word.startswith("scripts/") else ""
            cmd = re.sub(r"\s+#.*$", "", cmd)
            if cmd:
                cmds.append(cmd)
    return cmds


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
