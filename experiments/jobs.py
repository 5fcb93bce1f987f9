"""Bookkeeping of `specdec-exp` around specdec.report.rundir (which owns the run directory's files):
the config hash a rerun is skipped by, the provenance recorded with a job, and its JobCard.

A rerun of a sweep finds the completion marker with the same config hash and skips the job; a
directory without it (an interrupted job) is cleared first, so its partial records never add
rows twice.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from specdec.clock.profiles import get_profile
from specdec.core.blas import active_blas
from specdec.report.rundir import JobCard

# Keys that change where or how a job reports, not what it measures.
_NOT_HASHED = ("logger", "progress", "sweep")
# Keys that vary across the jobs one table compares; the rest form the "setting".
_VARIED = ("drafter", "gamma", "task", "logger", "progress", "sweep")
PACKAGES = ("specdec", "mlx", "mlx-lm", "numpy", "scipy", "hydra-core", "omegaconf", "wandb")


def config_hash(resolved: dict) -> str:
    """Hash of everything that determines a job's measurements."""
    kept = {k: v for k, v in resolved.items() if k not in _NOT_HASHED}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


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


def card(cfg, resolved: dict) -> JobCard:
    """What the reports compare this job by, in the library's words."""
    return JobCard(
        task=cfg.task.name,
        drafter=str(cfg.drafter_spec),
        gamma=cfg.gamma.label,
        profile=get_profile(cfg.device.profile).name,
        setting={k: v for k, v in resolved.items() if k not in _VARIED},
        title=f"{cfg.model.name}, cache {cfg.cache.policy} {cfg.cache.budget}, "
        f"{cfg.max_tokens} tokens",
        alphas=list(cfg.task.alphas),
    )
