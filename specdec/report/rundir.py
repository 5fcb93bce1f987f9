"""The run directory of one job: what it holds, written by `specdec-exp` and read by reports.

    config.json      {"config": resolved config, "meta": seed, versions, device profile, BLAS,
                      git, ..., "job": the JobCard below}
    records.jsonl    one line per verify pass (decode.records, written as the job decodes)
    trace_union.json γ = 1 union_cost jobs: union along the committed trace, token overlap
    summary.json     the task's summary, headline and model facts
    tables/NAME.json the task's tables (lists of row dicts)
    wandb/           the job's wandb run (offline mode)
    result.json      the completion marker, written last: config hash + headline

Every file but records.jsonl is written to a temporary name and renamed. A job directory is
`claim`ed first: a new or empty one (Hydra's own `.hydra/` and `*.log` aside) gets the
`.specdec-run` marker, one holding anything else is refused, so a rerun's `clear` only ever
deletes what a job wrote (specdec.core.files: the output rule). The harness's config
format stays opaque here: what a report compares jobs by is the `JobCard` the harness writes.

    claim(run_dir); write_card(run_dir, resolved, meta, card) ... mark_done(run_dir, key, result, wall_s)
    job = read_job(run_dir / RESULT)
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdec.core.errors import SpecdecError
from specdec.core.files import claim_dir, owner, write_atomic
from specdec.decode.records import PassRecord, read_records
from specdec.gamma.spec import Gamma

CONFIG = "config.json"
RECORDS = "records.jsonl"
TRACE_UNION = "trace_union.json"
SUMMARY = "summary.json"
TABLES = "tables"
WANDB = "wandb"
RESULT = "result.json"
JOB_LOCK = ".job-lock"  # held (flock) while a job runs in this directory
SWEEP_LOCK = ".sweep-lock"  # held by the launching process while a sweep runs
OUTPUTS = (CONFIG, RECORDS, SUMMARY, TRACE_UNION, TABLES, WANDB)
RUN_KIND = "run"  # the ownership marker's kind (specdec.core.files)
HYDRA_OWN = (".hydra", JOB_LOCK)  # Hydra writes .hydra/ (and NAME.log) before the job starts


@dataclass
class JobCard:
    """What a report compares jobs by, in the library's own words."""

    task: str  # the task that ran (union_cost, eviction, ...)
    drafter: str  # the DrafterSpec's label: `oracle:0.9`, `mtp`, ...
    gamma: int | str  # a fixed γ, or "auto"
    profile: str  # device profile name of the modeled times
    setting: dict  # what must match for two jobs to be compared (model, cache, tokens, ...)
    title: str  # the setting in a few words, for headings
    alphas: list[float] = field(default_factory=list)  # acceptances to tabulate speedups at


@dataclass
class TraceUnion:
    mean: float
    per_layer: dict[str, float]


@dataclass
class JobFiles:
    """A finished job's directory, read back."""

    dir: Path
    card: JobCard
    meta: dict
    model: dict  # top_k, n_experts, moe_layers, ... of the loaded model
    records: list[PassRecord]
    trace: dict[int, TraceUnion] | None  # union along the committed trace (γ = 1 jobs)
    rho: float | None  # share of a token's top-k the next token keeps, on that trace
    finished_at: str
    tables: dict[str, list[dict]]  # the task's own tables (tables/NAME.json)
    plots: list[Path]  # the task's own figures


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, default=str))


def finished(run_dir: Path, key: str) -> dict | None:
    """The completion marker if this job already finished with config hash `key`, else None."""
    path = run_dir / RESULT
    if not path.exists():
        return None
    try:
        done = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return done if done.get("config_hash") == key else None


def claim(run_dir: Path) -> None:
    """Make `run_dir` a job directory of ours, or refuse: one of an earlier job (its marker) is
    ours; a new or empty one gets the marker; one with anything else in it is the user's."""
    claim_dir(
        run_dir,
        RUN_KIND,
        "specdec-exp",
        "give hydra.run.dir a new or empty directory",
        ignore=lambda p: p.name in HYDRA_OWN or (p.name.endswith(".log") and p.is_file()),
    )


def clear(run_dir: Path) -> None:
    """Remove what an interrupted or differently configured run left here (only in a directory
    `claim` made ours)."""
    if owner(run_dir) != RUN_KIND:
        raise SpecdecError(f"{run_dir} is not a specdec-exp job directory; nothing cleared")
    for name in (RESULT, *OUTPUTS):
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def write_card(run_dir: Path, config: dict, meta: dict, card: JobCard) -> None:
    write_json(run_dir / CONFIG, {"config": config, "meta": meta, "job": asdict(card)})


def write_trace_union(run_dir: Path, rho: float | None, union: dict) -> None:
    write_json(run_dir / TRACE_UNION, {"consecutive_overlap": rho, "union": union})


def write_outputs(run_dir: Path, result) -> None:
    """The task's summary and tables (`result`: experiments.tasks.TaskResult)."""
    write_json(
        run_dir / SUMMARY,
        {
            "headline": {"name": result.headline_name, "value": result.headline},
            "model": result.model_info,
            "summary": result.summary,
            "plots": [str(Path(p).relative_to(run_dir)) for p in result.plots],
        },
    )
    (run_dir / TABLES).mkdir(exist_ok=True)
    for name, rows in result.tables.items():
        write_json(run_dir / TABLES / f"{name}.json", rows)


def mark_done(run_dir: Path, key: str, result, wall_s: float) -> None:
    """The completion marker: a rerun with the same config hash skips this job. It counts the
    job's records, so a report sees a records.jsonl cut short later."""
    records = run_dir / RECORDS
    write_json(
        run_dir / RESULT,
        {
            "config_hash": key,
            "records": len(read_records(records)) if records.exists() else None,
            "headline": {"name": result.headline_name, "value": result.headline},
            "wall_s": wall_s,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    )


def finished_markers(root: Path) -> list[Path]:
    """The completion markers under `root` (a job directory or a sweep), reports left out."""
    return sorted(p for p in root.rglob(RESULT) if "report" not in p.relative_to(root).parts)


def read_job(result_path: Path) -> JobFiles:
    """A finished job, from its completion marker's path."""
    d = result_path.parent
    try:
        result = json.loads(result_path.read_text())
        cfg = json.loads((d / CONFIG).read_text())
        summary = json.loads((d / SUMMARY).read_text())
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        raise SpecdecError(
            f"{d}: unreadable job files ({e}); delete the directory and rerun"
        ) from e
    records_path = d / RECORDS
    records = (
        [PassRecord.from_row(row, str(records_path)) for row in read_records(records_path)]
        if records_path.exists()
        else []
    )
    written = result.get("records") if isinstance(result, dict) else None
    if written is not None and len(records) != written:
        raise SpecdecError(
            f"{records_path} holds {len(records)} of the {written} passes its job wrote (cut "
            f"short or edited since); rerun the job (delete {d / RESULT} first)"
        )
    try:
        trace, rho = None, None
        if (d / TRACE_UNION).exists():
            raw = json.loads((d / TRACE_UNION).read_text())
            trace = {int(g): TraceUnion(t["mean"], t["per_layer"]) for g, t in raw["union"].items()}
            rho = raw["consecutive_overlap"]
        card = JobCard(**cfg["job"])
        try:  # a whole number >= 1 or auto: the report sorts and labels its jobs by it
            Gamma.parse(card.gamma)
        except SpecdecError as e:
            raise SpecdecError(f"{d / CONFIG}: job.gamma: {e}; rerun the job") from None
        tables = {t.stem: json.loads(t.read_text()) for t in sorted((d / TABLES).glob("*.json"))}
        plots = [d / p for p in summary.get("plots", [])]
        model = summary.get("model", {})
        done = result.get("finished_at", "")
        return JobFiles(d, card, cfg["meta"], model, records, trace, rho, done, tables, plots)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SpecdecError(
            f"{d}: job files in an unknown layout ({type(e).__name__}: {e}; written by another "
            "specdec version?); rerun the job"
        ) from None
