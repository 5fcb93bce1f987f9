"""The wandb sink: one wandb run, written after the local files (JSONL and JSON come first).

    sink = WandbSink("offline", run_dir, name="γ=4 mtp", group="main", job_type="union_cost",
                     tags=["tiny"], config=resolved)
    try:
        sink.log_tables({"union": rows}); sink.log_summary({"mean_union": 9.1})
    finally:
        sink.finish(ok)          # always: a sweep must never leave a run open

mode "offline" (default everywhere) writes under `run_dir/wandb/`, uploadable later with
`wandb sync`; "online" needs `wandb login`; "disabled" imports nothing and logs nothing.
Tables become `wandb.Table`s (stored as files/media/table/*.table.json in the run directory).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from specdec.core.errors import SpecdecError

MODES = ("offline", "online", "disabled")


def check_mode(mode: str) -> None:
    """A SpecdecError unless runs can be logged in `mode`: a known mode, and for online
    credentials. Callers that replace earlier output call it first, so a run that cannot log
    leaves what is there untouched."""
    if mode not in MODES:
        raise SpecdecError(f"unknown wandb mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _logged_in()):
        raise SpecdecError(
            "wandb online mode needs credentials: run `wandb login` (or set WANDB_API_KEY), "
            "or log offline (logger=wandb_offline / --wandb offline) and `wandb sync` later"
        )


class WandbSink:
    def __init__(
        self,
        mode: str,
        run_dir: Path,
        *,
        name: str,
        group: str | None = None,
        job_type: str | None = None,
        tags: Sequence[str] = (),
        config: dict | None = None,
        project: str = "specdec",
        entity: str | None = None,
    ):
        check_mode(mode)
        self.mode, self.run = mode, None
        if mode == "disabled":
            return
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=mode,
            dir=str(run_dir),
            name=name,
            group=group,
            job_type=job_type,
            tags=[str(t)[:64] for t in tags],
            config=config or {},
            reinit="finish_previous",
        )

    @property
    def dir(self) -> Path | None:
        """The run's own directory (offline-run-*/ or run-*/), None when disabled."""
        return Path(self.run.dir).parent if self.run else None

    def log_steps(self, rows: Sequence[dict], step_key: str) -> None:
        """One wandb step per row (e.g. per verify pass), numeric values only."""
        if not self.run:
            return
        for row in rows:
            values = {k: v for k, v in row.items() if _is_number(v) and k != step_key}
            self.run.log(values, step=int(row[step_key]))

    def log_tables(self, tables: dict[str, list[dict]]) -> None:
        if not self.run:
            return
        for name, rows in tables.items():
            if rows:
                self.run.log({name: self.table(rows)})

    def table(self, rows: list[dict]):
        columns = list(dict.fromkeys(k for r in rows for k in r))
        data = [[_cell(r.get(c)) for c in columns] for r in rows]
        return self._wandb.Table(columns=columns, data=data)

    def log_lines(self, name: str, xs, ys_by_key: dict[str, list], title: str, xname: str) -> None:
        """A line plot with one series per key (e.g. union vs γ per drafter)."""
        if not self.run:
            return
        keys = list(ys_by_key)
        plot = self._wandb.plot.line_series(
            xs=xs, ys=[ys_by_key[k] for k in keys], keys=keys, title=title, xname=xname
        )
        self.run.log({name: plot})

    def log_scatter(self, name: str, rows: list[dict], x: str, y: str, title: str) -> None:
        """A native wandb scatter of `rows`' columns x and y (zoomable, not an image)."""
        if not self.run or not rows:
            return
        plot = self._wandb.plot.scatter(self.table(rows), x, y, title=title)
        self.run.log({name: plot})

    def log_images(self, paths: Sequence[Path]) -> None:
        if not self.run:
            return
        for p in paths:
            self.run.log({Path(p).stem: self._wandb.Image(str(p))})

    def log_summary(self, values: dict) -> None:
        """The whole summary: nested dicts as `a/b` keys, lists of numbers as lists (a
        histogram: accepted lengths, γ chosen), flags as booleans; None and NaN left out."""
        if not self.run:
            return
        for k, v in summary_items(values):
            self.run.summary[k] = v

    def finish(self, ok: bool = True) -> None:
        if self.run:
            self.run.finish(exit_code=0 if ok else 1)
            self.run = None


def summary_items(values: dict, prefix: str = "") -> list[tuple[str, object]]:
    """(key, value) pairs wandb's run summary holds, from a nested summary dict."""
    out: list[tuple[str, object]] = []
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += summary_items(v, f"{key}/")
        elif isinstance(v, bool) or isinstance(v, str) or _is_number(v):
            out.append((key, v))
        elif isinstance(v, (list, tuple)) and all(_is_number(x) for x in v):
            out.append((key, list(v)))
    return out


def _logged_in() -> bool:
    """Whether `wandb login` stored a key (~/.netrc, where wandb keeps it)."""
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.exists() and "api.wandb.ai" in netrc.read_text()


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _cell(v):
    """wandb tables hold scalars: lists and dicts become their string form, None stays None."""
    return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)
