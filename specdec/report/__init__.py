"""Markdown tables, PNG plots and a wandb run from a run or sweep directory (`build_report`).

    build_report(Path("runs/sweeps/main"))   # writes runs/sweeps/main/report/
    (`specdec report DIR`: specdec.cli.report)

Reads only what the jobs wrote (records JSONL, trace union, config; see specdec.report.collect)
and writes `report.md`, PNGs and `tables/*.json` into DIR/report (or --out), then logs the same
tables, line plots and images as one wandb run (offline by default, under the report folder).
The report folder follows the output rule (specdec.core.files.claim_dir): a new or empty one is
marked `.specdec-report`, and only a marked one is written into again (its wandb run replaced).
Sections: (a) union vs γ with fits and residuals, (b) speedup vs acceptance with break-even and
best γ, (c) real verify batches against the union along the committed trace. `specdec-exp`
runs this at the end of every sweep.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.core.files import claim_dir, locked, write_atomic, write_error
from specdec.costmodel.speedup import check_alpha
from specdec.report.collect import collect_jobs
from specdec.report.markdown import render
from specdec.report.sections import Setting, build_setting
from specdec.report.wandb_sink import WandbSink, check_mode

REPORT_KIND = "report"  # the ownership marker's kind (specdec.core.files)
REPORT_LOCK = ".report-lock"


@dataclass
class Report:
    out_dir: Path
    markdown: Path
    settings: list[Setting]
    others: list = field(default_factory=list)  # finished jobs without records (probes)
    plots: list[Path] = field(default_factory=list)
    tables: dict[str, list[dict]] = field(default_factory=dict)
    wandb_dir: Path | None = None

    def describe(self) -> str:
        lines = [f"report:  {self.markdown}", "plots:"]
        lines += [f"  {p}" for p in self.plots]
        lines.append(f"tables:  {self.out_dir / 'tables'}/ ({len(self.tables)} JSON files)")
        if self.wandb_dir:
            lines.append(f"wandb:   {self.wandb_dir}  (upload: wandb sync {self.wandb_dir})")
        return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def _labels(settings: list[list]) -> list[str]:
    """Name each setting by the config values that differ between them (or its model)."""
    if not settings:
        return []
    configs = [json.loads(jobs[0].setting) for jobs in settings]
    flat = [dict(_flatten(c)) for c in configs]
    differing = [k for k in flat[0] if len({json.dumps(f.get(k)) for f in flat}) > 1]
    if not differing:
        return [settings[0][0].card.title]
    return [", ".join(f"{k}={f.get(k)}" for k in differing) for f in flat]


def _flatten(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def build_report(
    root: Path,
    out: Path | None = None,
    wandb_mode: str = "offline",
    alphas: list[float] | None = None,
) -> Report:
    check_mode(wandb_mode)  # before anything is written or the last report's run removed
    for a in alphas or ():
        check_alpha(a)  # ... and the acceptances: a refused --alpha left a claimed, empty --out
    jobs = collect_jobs(root)
    out = claim_dir(
        Path(out) if out else Path(root) / "report",
        REPORT_KIND,
        "`specdec report`",
        "give --out a new or empty directory (or one a report wrote)",
    )
    # one report of a directory at a time: each replaces the last one's wandb run
    with locked(out / REPORT_LOCK, wait=True, what=f"another report into {out}"):
        return _build(root, out, jobs, wandb_mode, alphas)


def _build(root: Path, out: Path, jobs: list, wandb_mode: str, alphas: list[float] | None):
    try:
        (out / "tables").mkdir(exist_ok=True)
    except OSError as e:
        raise write_error(out, e) from None
    groups: dict[str, list] = {}
    for j in (j for j in jobs if j.records):
        groups.setdefault(j.setting, []).append(j)
    grouped = list(groups.values())
    if alphas is None:
        alphas = sorted({a for j in jobs for a in j.card.alphas})
    settings = [
        build_setting(lab, g, alphas) for lab, g in zip(_labels(grouped), grouped, strict=True)
    ]
    report = Report(out, out / "report.md", settings, others=[j for j in jobs if not j.records])
    for i, st in enumerate(settings):
        suffix = "" if len(settings) == 1 else f"_s{i + 1}"
        _figures(st, out, suffix, report)
        _tables(st, suffix, report)
    for j in report.others:  # tasks without decoding (probes): their own tables and figures
        report.tables.update({f"{_slug(j.dir.name)}_{n}": rows for n, rows in j.tables.items()})
        report.plots += j.plots
    for name, rows in report.tables.items():
        write_atomic(out / "tables" / f"{name}.json", json.dumps(rows, indent=1, default=str))
    write_atomic(report.markdown, render(Path(root), report))
    _log_wandb(report, jobs, wandb_mode)
    return report


def _figures(st: Setting, out: Path, suffix: str, report: Report) -> None:
    from specdec.costmodel.plots import plot_speedup_vs_acceptance, plot_union_vs_gamma
    from specdec.report.figures import plot_verify_vs_trace

    for src in st.sources:
        if src.model is None:
            continue
        path = out / f"union_vs_gamma_{_slug(src.name)}{suffix}.png"
        fits = [
            f
            for f in (
                src.model.linear,
                src.model.power,
                src.model.overlap,
                src.model.overlap_measured,
            )
            if f
        ]
        title = (
            f"Union along the committed trace of the plain run ({st.label})"
            if src.name == "trace"
            else f"Experts read by real verify passes, drafter {src.name.removeprefix('verify: ')}"
            f" ({st.label})"
        )
        st.figures[f"union:{src.name}"] = plot_union_vs_gamma(src.per_layer, fits, path, title)
    if st.cost_model:
        points = [
            (r["acceptance"], r["gamma"], r["speedup_bytes"], r["drafter"]) for r in st.speedup_rows
        ]
        st.figures["speedup"] = plot_speedup_vs_acceptance(
            points,
            st.cost_model.cost_by_gamma,
            out / f"speedup_vs_acceptance{suffix}.png",
            title=f"Streaming-bound speedup, measured (bytes read) vs model ({st.label})",
        )
    if st.trace_rows:
        st.figures["verify_vs_trace"] = plot_verify_vs_trace(
            st, out / f"verify_vs_trace{suffix}.png"
        )
    report.plots += list(st.figures.values())


def _tables(st: Setting, suffix: str, report: Report) -> None:
    t = report.tables
    t[f"jobs{suffix}"] = st.job_rows()
    for src in st.sources:
        t[f"union_{_slug(src.name)}{suffix}"] = src.rows()
        if src.model:
            t[f"fits_{_slug(src.name)}{suffix}"] = src.fit_rows()
    if st.cost_model:
        t[f"speedup_points{suffix}"] = st.speedup_rows
        t[f"gamma_costs{suffix}"] = [
            {
                "gamma": r.gamma,
                "union": r.union,
                "cost": r.cost,
                "ceiling": r.ceiling,
                "break_even_alpha": r.break_even,
            }
            for r in st.cost_model.gammas
        ]
        t[f"best_gamma{suffix}"] = [
            {
                "alpha": r.alpha,
                "best_gamma": r.best_gamma,
                "speedup": r.speedup,
                **{f"speedup_g{g}": s for g, s in r.speedup_by_gamma.items()},
            }
            for r in st.cost_model.alphas
        ]
    if st.trace_rows:
        t[f"verify_vs_trace{suffix}"] = st.trace_rows


def speedup_points(rows: list[dict]) -> dict[int, list[dict]]:
    """γ -> (acceptance, measured speed-up) points of a setting's speed-up rows, for wandb."""
    out: dict[int, list[dict]] = {}
    for r in rows:
        if r["acceptance"] is not None and r["speedup_bytes"] is not None:
            point = {"acceptance": r["acceptance"], "speed-up vs γ=1": r["speedup_bytes"]}
            out.setdefault(r["gamma"], []).append({**point, "drafter": r["drafter"]})
    return dict(sorted(out.items()))


def bytes_lines(rows: list[dict]) -> dict[str, dict[int, float]]:
    """drafter -> {γ: bytes per token} (mean over its jobs), each starting from the γ = 1 jobs'
    value: the line a drafter's γ sweep draws against plain decoding."""
    by: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        by.setdefault(r["drafter"], {}).setdefault(r["gamma"], []).append(r["bytes_per_token"])
    plain = [v for d in by.values() for v in d.get(1, [])]
    out = {}
    for drafter, per_gamma in by.items():
        if set(per_gamma) == {1}:
            continue  # plain decoding alone: the start of every other line
        line = {1: float(np.mean(plain))} if plain else {}
        line.update({g: float(np.mean(v)) for g, v in per_gamma.items() if g != 1})
        out[drafter] = dict(sorted(line.items()))
    return out


def _log_wandb(report: Report, jobs: list, mode: str) -> None:
    sweep = jobs[0].meta.get("sweep", "report")
    shutil.rmtree(report.out_dir / "wandb", ignore_errors=True)  # one report run, the latest
    sink = WandbSink(
        mode,
        report.out_dir,
        name=f"report {sweep}",
        group=sweep,
        job_type="report",
        tags=["report"],
        config={"jobs": len(jobs), "dir": str(report.out_dir.parent)},
    )
    ok = False
    try:
        sink.log_tables(report.tables)
        for i, st in enumerate(report.settings):
            suffix = "" if len(report.settings) == 1 else f"_s{i + 1}"
            srcs = [s for s in st.sources if s.model]
            if srcs:
                sink.log_lines(
                    f"union_vs_gamma{suffix}",
                    [list(s.mean) for s in srcs],
                    {s.name: list(s.mean.values()) for s in srcs},
                    "mean union per verify pass vs γ",
                    "γ",
                )
            if st.cost_model:
                alpha = np.linspace(0, 1, 51).tolist()
                from specdec.costmodel.speedup import speedup

                curves = {
                    f"γ={g}": [float(speedup(a, g, c)) for a in alpha]
                    for g, c in st.cost_model.cost_by_gamma.items()
                    if g > 1
                }
                sink.log_lines(
                    f"speedup_model{suffix}",
                    alpha,
                    curves,
                    "model speedup vs acceptance",
                    "acceptance α",
                )
            for g, points in speedup_points(st.speedup_rows).items():
                sink.log_scatter(
                    f"speedup_vs_acceptance_g{g}{suffix}",
                    points,
                    "acceptance",
                    "speed-up vs γ=1",
                    f"measured speed-up (bytes) vs acceptance, γ = {g}",
                )
            lines = bytes_lines(st.job_rows())
            if lines:
                sink.log_lines(
                    f"bytes_per_token_vs_gamma{suffix}",
                    [list(v) for v in lines.values()],
                    {k: list(v.values()) for k, v in lines.items()},
                    "expert bytes read per token vs γ",
                    "γ",
                )
        sink.log_images(report.plots)
        ok = True
    finally:
        report.wandb_dir = sink.dir
        sink.finish(ok)
