"""Read the finished jobs of a run or sweep directory: config, records, trace union, tables.

Decoding jobs have records (one line per verify pass); other tasks (probes) only their tables
and figures. Only finished jobs count (a `result.json` completion marker, written last by `specdec-exp`);
each job's summary is recomputed from its records JSONL, never taken from wandb. Two job
directories with the same config hash (the same measurement run twice) give one job, the later.

    jobs = collect_jobs(Path("runs/sweeps/main"))
    jobs[0].gamma, jobs[0].drafter, jobs[0].summary["mean_union"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from specdec.decode.records import PassRecord, read_records, summarize
from specdec.errors import SpecdecError

# Config keys that vary across the jobs one table compares; the rest form the "setting".
_VARIED = ("drafter", "gamma", "task", "logger", "progress", "sweep")


@dataclass
class TraceUnion:
    mean: float
    per_layer: dict[str, float]


@dataclass
class Job:
    dir: Path
    config: dict  # the resolved Hydra config
    meta: dict
    model: dict  # top_k, n_experts, moe_layers, ... of the loaded model
    records: list[PassRecord]
    trace: dict[int, TraceUnion] | None  # union along the committed trace (γ = 1 jobs)
    rho: float | None  # share of a token's top-k the next token keeps, on that trace
    finished_at: str
    tables: dict[str, list[dict]]  # the task's own tables (tables/NAME.json)
    plots: list[Path]  # the task's own figures

    @property
    def gamma(self) -> int:
        return int(self.config["gamma"])

    @property
    def drafter(self) -> str:
        d = self.config["drafter"]
        if d["name"] == "oracle":
            return f"oracle:{d['alpha']:g}"
        return f"draft:{d['path']}" if d["name"] == "draft" else d["name"]

    @property
    def profile(self) -> str:
        return self.meta["device_profile"]["name"]

    @property
    def setting(self) -> str:
        """What must match for two jobs to be compared (model, cache, device, tokens, ...)."""
        return json.dumps(
            {k: v for k, v in self.config.items() if k not in _VARIED}, sort_keys=True
        )

    @cached_property
    def summary(self) -> dict:
        return summarize(self.records, [self.profile])

    @cached_property
    def per_layer_union(self) -> dict[str, float]:
        layers = sorted({lid for r in self.records for lid in r.union}, key=int)
        return {lid: float(np.mean([r.union.get(lid, 0) for r in self.records])) for lid in layers}

    @property
    def modeled_tps(self) -> float | None:
        return self.summary.get(f"modeled_tokens_per_s/{self.profile}")


def _load_job(result_path: Path) -> Job:
    d = result_path.parent
    try:
        result = json.loads(result_path.read_text())
        cfg = json.loads((d / "config.json").read_text())
        summary = json.loads((d / "summary.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecdecError(
            f"{d}: unreadable job files ({e}); delete the directory and rerun"
        ) from e
    records_path = d / "records.jsonl"
    records = (
        [PassRecord.from_row(row, str(records_path)) for row in read_records(records_path)]
        if records_path.exists()
        else []
    )
    try:
        trace, rho = None, None
        if (d / "trace_union.json").exists():
            raw = json.loads((d / "trace_union.json").read_text())
            trace = {int(g): TraceUnion(t["mean"], t["per_layer"]) for g, t in raw["union"].items()}
            rho = raw["consecutive_overlap"]
        model = summary.get("model", {})
        done = result.get("finished_at", "")
        tables = {t.stem: json.loads(t.read_text()) for t in sorted((d / "tables").glob("*.json"))}
        plots = [d / p for p in summary.get("plots", [])]
        return Job(d, cfg["config"], cfg["meta"], model, records, trace, rho, done, tables, plots)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SpecdecError(
            f"{d}: job files in an unknown layout ({type(e).__name__}: {e}; written by another "
            "specdec version?); rerun the job"
        ) from None


def collect_jobs(root: Path) -> list[Job]:
    """Every finished job under `root` (itself a job directory, or a sweep of them)."""
    root = Path(root)
    if not root.is_dir():
        raise SpecdecError(f"{root} is not a directory: pass a run or sweep directory under runs/")
    paths = sorted(
        p for p in root.rglob("result.json") if "report" not in p.relative_to(root).parts
    )
    by_hash: dict[str, Job] = {}
    for p in paths:
        job = _load_job(p)
        key = job.meta.get("config_hash", str(p))
        if key not in by_hash or job.finished_at >= by_hash[key].finished_at:
            by_hash[key] = job
    if not by_hash:
        raise SpecdecError(f"{root} holds no finished job: run `specdec-exp -m ...` into it first")
    return sorted(by_hash.values(), key=lambda j: (j.setting, j.drafter, j.gamma))
