"""Run-directory bookkeeping: what a job writes, how a rerun knows it is done, what it ran on.

A job directory holds, once finished:

    config.json      resolved config + meta (seed, package versions, device profile, BLAS, git)
    records.jsonl    one line per verify pass (written by the task as it decodes)
    trace_union.json γ = 1 union_cost jobs: union along the committed trace, token overlap
    summary.json     the task's summary, headline and model facts
    tables/NAME.json the task's tables (lists of row dicts)
    wandb/           the job's wandb run (offline mode)
    result.json      the completion marker, written last: config hash + headline

Every file but records.jsonl is written to a temporary name and renamed. A rerun of a sweep
finds `result.json` with the same config hash and skips the job; a directory without it (an
interrupted job) is cleared first, so its partial records never add rows twice.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from specdec.blas import active_blas
from specdec.clock.profiles import get_profile
from specdec.store.files import write_atomic

RESULT = "result.json"
JOB_LOCK = ".job-lock"  # held (flock) while a job runs in this directory
SWEEP_LOCK = ".sweep-lock"  # held by the launching process while a sweep runs
OUTPUTS = ("config.json", "records.jsonl", "summary.json", "trace_union.json", "tables", "wandb")
# Keys that change where or how a job reports, not what it measures.
_NOT_HASHED = ("logger", "progress", "sweep")
PACKAGES = ("specdec", "mlx", "mlx-lm", "numpy", "scipy", "hydra-core", "omegaconf", "wandb")


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, default=str))


def config_hash(resolved: dict) -> str:
    """Hash of everything that determines a job's measurements."""
    kept = {k: v for k, v in resolved.items() if k not in _NOT_HASHED}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def finished(run_dir: Path, key: str) -> dict | None:
    """The completion marker if this job already finished with the same config, else None."""
    path = run_dir / RESULT
    if not path.exists():
        return None
    try:
        done = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return done if done.get("config_hash") == key else None


def clear(run_dir: Path) -> None:
    """Remove what an interrupted or differently configured run left here."""
    for name in (RESULT, *OUTPUTS):
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def meta(cfg, key: str, overrides: list[str]) -> dict:
    return {
        "config_hash": key,
        "seed": cfg.seed,
        "sweep": cfg.sweep,
        "overrides": overrides,
        "device_profile": asdict(get_profile(cfg.device.profile)),
        "blas": active_blas(),
        "ld_preload": os.environ.get("LD_PRELOAD"),  # what ensure_fast_blas preloaded
        "versions": versions(),
        "git_commit": git_commit(),
        "host": platform.node(),
        "platform": platform.platform(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_outputs(run_dir: Path, result) -> None:
    """The task's summary and tables."""
    write_json(
        run_dir / "summary.json",
        {
            "headline": {"name": result.headline_name, "value": result.headline},
            "model": result.model_info,
            "summary": result.summary,
            "plots": [str(Path(p).relative_to(run_dir)) for p in result.plots],
        },
    )
    (run_dir / "tables").mkdir(exist_ok=True)
    for name, rows in result.tables.items():
        write_json(run_dir / "tables" / f"{name}.json", rows)


def mark_done(run_dir: Path, key: str, result, wall_s: float) -> None:
    """The completion marker: a rerun with the same config hash skips this job."""
    write_json(
        run_dir / RESULT,
        {
            "config_hash": key,
            "headline": {"name": result.headline_name, "value": result.headline},
            "wall_s": wall_s,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    )
