"""Read the finished jobs of a run or sweep directory: their cards, records, trace union, tables.

Decoding jobs have records (one line per verify pass); other tasks (probes) only their tables
and figures. Only finished jobs count (specdec.report.rundir's completion marker, written last by
`specdec-exp`); each job's summary is recomputed from its records JSONL, never taken from wandb.
Two job directories with the same config hash (the same measurement run twice) give one job,
the later. Jobs are compared by the `JobCard` the harness wrote, never by its config format.

    jobs = collect_jobs(Path("runs/sweeps/main"))
    jobs[0].gamma, jobs[0].drafter, jobs[0].summary["mean_union"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.decode.records import summarize
from specdec.report.rundir import JobFiles, finished_markers, read_job


@dataclass
class Job(JobFiles):
    @property
    def task(self) -> str:
        return self.card.task

    @property
    def gamma(self) -> int | str:
        """The fixed γ, or "auto" (chosen per pass: such jobs are listed, not fitted)."""
        return self.card.gamma

    @property
    def speculative(self) -> bool:
        """A fixed γ above 1: the jobs the union and speed-up fits compare."""
        return isinstance(self.gamma, int) and self.gamma > 1

    @property
    def drafter(self) -> str:
        return self.card.drafter

    @property
    def profile(self) -> str:
        return self.card.profile

    @property
    def setting(self) -> str:
        """What must match for two jobs to be compared (model, cache, device, tokens, ...)."""
        return json.dumps(self.card.setting, sort_keys=True)

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


def collect_jobs(root: Path) -> list[Job]:
    """Every finished job under `root` (itself a job directory, or a sweep of them)."""
    root = Path(root)
    if not root.is_dir():
        raise SpecdecError(f"{root} is not a directory: pass a run or sweep directory under runs/")
    by_hash: dict[str, Job] = {}
    for p in finished_markers(root):
        job = Job(**vars(read_job(p)))
        key = job.meta.get("config_hash", str(p))
        if key not in by_hash or job.finished_at >= by_hash[key].finished_at:
            by_hash[key] = job
    if not by_hash:
        raise SpecdecError(f"{root} holds no finished job: run `specdec-exp -m ...` into it first")
    return sorted(by_hash.values(), key=lambda j: (j.setting, j.drafter, str(j.gamma).zfill(4)))
