"""The README and docs/ as a reader follows them, without building anything:
the README stays at most 400 lines (the rest lives in docs/), and every
relative link in README.md, docs/*.md and client/python/README.md points at
a file that exists and, with a #fragment, at a heading that exists there
(GitHub's anchor rule); every `docs/NAME.md` named in backticks exists."""
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
