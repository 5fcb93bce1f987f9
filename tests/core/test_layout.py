"""The house's shape, held: every import (function-local ones included) points down the stages.

The library's parts, in the data's order (README "Architecture"): a module may import its own
part and the parts before it in `STAGES`, never one after it, and no modules import each other in
a loop, inside the library or in analysis/, experiments/ and benchmarks/.

    pytest tests/core/test_layout.py
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# core imports nothing of specdec; cli is the only place argv becomes typed values.
STAGES = (
    "core",
    "clock",
    "costmodel",
    "store",
    "checkpoint",
    "pack",
    "cache",
    "stream",
    "trace",
    "sim",
    "gamma",
    "decode",
    "probes",
    "bench",
    "report",
    "cli",
)
TOP = ("specdec", "specdec.__main__")  # the package's face and `python -m specdec`


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of its code (absolute names)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            # `from package import module` imports the module
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def graph(folders: tuple[str, ...]) -> dict[str, set[str]]:
    files = [p for f in folders for p in (ROOT / f).rglob("*.py")]
    known = {module_name(p): p for p in files}
    return {m: {i for i in imports(p) if i in known and i != m} for m, p in known.items()}


def stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "specdec" and module not in TOP else None


def test_every_library_module_belongs_to_a_stage():
    strays = [m for m in graph(("specdec",)) if m not in TOP and stage(m) not in STAGES]
    assert not strays, f"modules outside every stage of STAGES: {strays}"


def test_no_import_points_up_the_stages():
    upward = []
    for m, deps in graph(("specdec",)).items():
        if m in TOP:
            continue
        for d in deps:
            if d in TOP or d == "specdec" or STAGES.index(stage(d)) > STAGES.index(stage(m)):
                upward.append(f"{m} -> {d}")
    assert not upward, "imports that point up the stages:\n" + "\n".join(sorted(upward))


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    g = graph(("specdec", "analysis", "experiments", "benchmarks"))
    # a package's __init__ importing its own modules is how registries fill; not a circle of code
    g = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in g.items()}
    assert circles(g) == []


def test_the_checker_sees_function_local_and_relative_imports(tmp_path, monkeypatch):
    # the rule can fail: a local import of a later stage is reported
    pkg = tmp_path / "specdec"
    (pkg / "core").mkdir(parents=True)
    (pkg / "cli").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "cli" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("def f():\n    from specdec.cli import b\n")
    (pkg / "cli" / "b.py").write_text("from ..core import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path, raising=False)
    globals()["ROOT"] = tmp_path
    try:
        g = graph(("specdec",))
    finally:
        globals()["ROOT"] = Path(__file__).resolve().parents[2]
    assert "specdec.cli.b" in g["specdec.core.a"]
    assert "specdec.core.a" in g["specdec.cli.b"]
    assert circles(g) == [["specdec.cli.b", "specdec.core.a"]]
