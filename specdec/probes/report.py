"""Writers shared by the probes: `<name>.json` (rows), `<name>.md` (tables), `<name>.png` (plot).

    write_report(out_dir, "lookahead", rows, markdown, fig)

Every file goes to a temporary name first and is renamed into place, so an interrupted run never
leaves a half-written table next to a finished plot. The output directory follows the output
rule (specdec.core.files.claim_dir): files are replaced only in a directory a probe marked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on the machines that run probes
import matplotlib.pyplot as plt  # noqa: E402

from specdec.core.files import claim_dir, write_atomic, write_with

PROBE_KIND = "probe"  # the ownership marker's kind (specdec.core.files)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; floats as given (format them before)."""
    right = ["---:" if i else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(right) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | Path, name: str, rows: list[dict], markdown: str, fig) -> dict:
    """Write the three files; returns {kind: path}. `fig` is a matplotlib Figure (closed here)."""
    paths = {k: f"{name}.{k}" for k in ("json", "md", "png")}
    out = claim_dir(
        out_dir,
        PROBE_KIND,
        "`specdec probe`",
        "give --out a new or empty directory (or one a probe wrote)",
        names=paths.values(),
        also=("run",),  # a specdec-exp job directory (specdec.report.rundir.RUN_KIND)
    )
    paths = {k: out / n for k, n in paths.items()}
    try:
        write_atomic(paths["json"], json.dumps(rows, indent=1) + "\n")
        write_atomic(paths["md"], markdown)
        write_with(
            paths["png"], lambda p: fig.savefig(p, dpi=120, bbox_inches="tight", format="png")
        )
    finally:
        plt.close(fig)
    return paths
