"""Writers shared by the probes: `<name>.json` (rows), `<name>.md` (tables), `<name>.png` (plot).

    write_report(out_dir, "lookahead", rows, markdown, fig)

Every file goes to a temporary name first and is renamed into place, so an interrupted run never
leaves a half-written table next to a finished plot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on the machines that run probes
import matplotlib.pyplot as plt  # noqa: E402

from specdec.core.files import durable_replace


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; floats as given (format them before)."""
    right = ["---:" if i else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(right) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | Path, name: str, rows: list[dict], markdown: str, fig) -> dict:
    """Write the three files; returns {kind: path}. `fig` is a matplotlib Figure (closed here)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"{name}.{k}" for k in ("json", "md", "png")}
    _atomic(paths["json"], lambda p: p.write_text(json.dumps(rows, indent=1) + "\n"))
    _atomic(paths["md"], lambda p: p.write_text(markdown))
    _atomic(paths["png"], lambda p: fig.savefig(p, dpi=120, bbox_inches="tight", format="png"))
    plt.close(fig)
    return paths


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    durable_replace(tmp, path)
