"""`specdec-exp`: compose a config with Hydra, run one experiment, write its run directory.

    specdec-exp -m                     # the main job: experiment=main (γ × drafter sweep on tiny)
    specdec-exp experiment=union_cost drafter=mtp gamma=4 max_tokens=128
    specdec-exp -m experiment=speedup_vs_acceptance drafter.alpha=0.5,0.7,0.9,1.0 gamma=1,2,4,8
    specdec-exp -m model=random_deepseek_v3 logger=disabled gamma=1,2 drafter=self,oracle
    specdec-exp -m ... hydra/launcher=joblib hydra.launcher.n_jobs=2   # CPU-only simulations
    specdec-exp --cfg job              # print the composed config and exit (Hydra's flags)

Without `python -m` inside a checkout: `python -m experiments.run ...`. Each job writes into
its run directory (runs/single/... or runs/sweeps/SWEEP/JOB/) what specdec/report/rundir.py lists,
logs to wandb (offline by default, under the run directory), always finishes the wandb run, and
returns its headline metric for sweepers. A sweep run again skips the jobs that finished; at
the end of a sweep `specdec report` runs on the sweep directory (experiments/callbacks.py).
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from experiments import jobs
from experiments.config import register, to_config
from experiments.tasks import get_task
from specdec.core.blas import ensure_fast_blas
from specdec.core.errors import SpecdecError
from specdec.core.files import locked
from specdec.core.registry import load_plugins
from specdec.decode.records import read_records
from specdec.report import rundir
from specdec.report.wandb_sink import WandbSink

log = logging.getLogger("specdec-exp")


def _short(item: str) -> str:
    """One override `key=value`, its value a path's basename plus a hash of the path (two
    `model.path`s of one basename stay apart), or the value itself."""
    key, eq, value = item.partition("=")
    if not eq or "/" not in value:
        return item
    base = value.rstrip("/").rsplit("/", 1)[-1] or "root"
    return f"{key}={base}-{hashlib.sha1(value.encode()).hexdigest()[:6]}"


def slug(text: str) -> str:
    """A job's override string as one short, stable directory name: paths as their basename and
    a hash, odd characters folded, anything past 80 characters cut and hashed."""
    short = ",".join(_short(item) for item in text.split(",")) if text else ""
    safe = re.sub(r"[^A-Za-z0-9._=,:+-]+", "_", short).strip("_") or "default"
    if len(safe) > 80:  # keep names short and still distinct
        safe = f"{safe[:60]}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"
    return safe


# an experiment's own sweep axes and where it logs: overriding them keeps the experiment's sweep
SWEEP_AXES = ("experiment", "sweep", "gamma", "drafter", "progress", "logger")


def sweep_name(sweep: str, overrides) -> str:
    """The sweep's folder under runs/sweeps/: `sweep` for the experiment as it is (its own axes,
    γ and drafter, may take more values) or when `sweep=` is given; otherwise `sweep+KEYS`, the
    other keys the command line changes, so an ad-hoc sweep gets its own folder and report
    instead of merging into the experiment's (keys, not values: the same for every job)."""
    keys = sorted({str(o).split("=", 1)[0].lstrip("+~") for o in overrides})
    if "sweep" in keys:
        return sweep
    extra = [k for k in keys if k.split(".")[0] not in SWEEP_AXES]
    return f"{sweep}+{slug(','.join(extra))}" if extra else sweep


OmegaConf.register_new_resolver("specdec_slug", slug, replace=True)
OmegaConf.register_new_resolver("specdec_sweep", sweep_name, replace=True)
register()


def run_job(cfg: DictConfig) -> float | None:
    try:
        return _run(cfg)
    except SpecdecError as e:  # a user error: one line, no traceback (SystemExit passes Hydra)
        raise SystemExit(f"specdec-exp: error: {e}") from None


def _run(cfg: DictConfig) -> float | None:
    load_plugins()  # drafters, policies, ... from files outside the package (SPECDEC_PLUGINS)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # one process per job directory: two identical runs would interleave one records.jsonl
    with locked(run_dir / rundir.JOB_LOCK, wait=False, what=f"job directory {run_dir}"):
        return _run_locked(cfg, run_dir)


def _run_locked(cfg: DictConfig, run_dir: Path) -> float | None:
    c = to_config(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    key = jobs.config_hash(resolved)
    done = rundir.finished(run_dir, key)
    if done:
        log.info("%s: finished before, skipped", run_dir)
        return done["headline"]["value"]
    rundir.claim(run_dir)  # a directory of the user's (hydra.run.dir=DIR) is refused here
    rundir.clear(run_dir)
    overrides = list(HydraConfig.get().overrides.task)
    rundir.write_card(run_dir, resolved, jobs.meta(c, key, overrides), jobs.card(c, resolved))
    task = get_task(c.task.name)
    sink = WandbSink(
        c.logger.mode,
        run_dir,
        name=f"{c.task.name} {c.drafter_spec} γ={c.gamma}",
        group=c.sweep,
        job_type=c.task.name,
        tags=[
            c.task.name,
            c.model.name,
            c.drafter_spec.name,
            f"gamma={c.gamma}",
            c.device.profile,
            *c.logger.tags,
        ],
        config=resolved,
        project=c.logger.project,
        entity=c.logger.entity,
    )
    ok = False
    try:
        t0 = time.perf_counter()
        result = task(c, run_dir)
        wall_s = time.perf_counter() - t0
        rundir.write_outputs(run_dir, result)
        records = run_dir / rundir.RECORDS
        if records.exists():
            sink.log_steps(read_records(records), "pass_idx")
        sink.log_tables(result.tables)
        sink.log_summary({**result.summary, "headline": result.headline})
        ok = True
    finally:
        wandb_dir = sink.dir
        sink.finish(ok)
    rundir.mark_done(run_dir, key, result, wall_s)  # last: local files and wandb are complete
    log.info("%s = %s  (%s)", result.headline_name, result.headline, run_dir)
    if wandb_dir:
        log.info("wandb run: %s  (upload: wandb sync %s)", wandb_dir, wandb_dir)
    return result.headline


# An absolute path: Hydra resolves a relative one against the calling *module* when started from
# the console script, and `conf/` is a folder of the checkout, not a package.
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
_hydra_main = hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")(run_job)


def main() -> None:
    try:
        ensure_fast_blas()
    except SpecdecError as e:  # SPECDEC_BLAS naming no library
        raise SystemExit(f"specdec-exp: error: {e}") from None
    try:
        _hydra_main()
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status, not a traceback
        print("specdec-exp: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
