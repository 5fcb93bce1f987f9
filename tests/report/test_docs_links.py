"""Every relative link of README.md and docs/**/*.md points at a file of the repository, and every
`#anchor` into a Markdown file at one of its headings (GitHub's slugs).

    pytest tests/report/test_docs_links.py
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def docs(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m[1])
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def dead_links(path: Path, root: Path = ROOT) -> list[str]:
    """`target` for each relative link in `path` that does not resolve inside `root`."""
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    dead = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file, _, frag = target.partition("#")
        where = (path.parent / file).resolve() if file else path.resolve()
        if not where.is_relative_to(root.resolve()) or not where.exists():
            dead.append(target)
        elif frag and where.suffix == ".md" and frag not in anchors(where):
            dead.append(target)
    return dead


def test_every_relative_link_resolves():
    dead = {str(p.relative_to(ROOT)): d for p in docs() if (d := dead_links(p))}
    assert not dead, f"dead links: {dead}"


def test_the_checker_finds_dead_links_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A title (`x.y`)\n\n## Twice\n\n## Twice\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [anchor](docs/a.md#a-title-xy) [second](docs/a.md#twice-1)\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#nope) [up](../outside.md)\n"
        "![img](docs/missing.png) [web](https://example.com/x.md) [self](#no-heading)\n"
        "`[in code](nowhere.md)`\n\n```\n[in a block](nowhere.md)\n```\n"
    )
    assert dead_links(tmp_path / "README.md", tmp_path) == [
        "docs/b.md",
        "docs/a.md#nope",
        "../outside.md",
        "docs/missing.png",
        "#no-heading",
    ]
    assert docs(tmp_path) == [tmp_path / "README.md", tmp_path / "docs" / "a.md"]


def test_the_readme_is_a_front_door():
    """≤ 250 lines, opening with exactly its two commands: set up and run the main job; the tests."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == [
        "bash scripts/setup.sh && .venv/bin/specdec-exp",
        "bash scripts/setup.sh && .venv/bin/python -m pytest",
    ]
