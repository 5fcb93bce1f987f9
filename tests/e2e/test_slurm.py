"""specdec-exp through a real SLURM cluster: scripts/slurm-local.sh starts munged, slurmctld and
slurmd on this machine, a 4-job sweep on the bundled tiny model goes through
`hydra/launcher=submitit_slurm` (sbatch, the controller, srun on the node), its report is
written, and `slurm-local.sh stop` leaves no daemon and no state behind.

    sudo .venv/bin/python -m pytest tests/e2e/test_slurm.py

Skipped (with the reason) when not root, when slurm-wlm is not installed (`sudo bash
scripts/slurm-local.sh install`; the suite installs nothing system-wide), or when it cannot start. The
cluster gets its own state folder and ports, so a cluster already running on this machine is
left alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"


def free_port_pair() -> int:
    """A port P with P and P + 1 free (slurmctld, slurmd)."""
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports")


def script(cmd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), cmd], env=env, capture_output=True, text=True, timeout=timeout
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def slurm():
    if os.geteuid() != 0:
        pytest.skip("slurm-local.sh needs root (apt-get install, munged and slurmd as root)")
    if shutil.which("slurmctld") is None:
        # the suite installs nothing system-wide (CI's clean machine skips here)
        pytest.skip("slurm-wlm is not installed: `sudo bash scripts/slurm-local.sh install` first")
    # a short path: munge's unix socket lives in it (sun_path holds 108 bytes)
    state = Path(tempfile.mkdtemp(prefix="specdec-slurm-", dir="/tmp"))
    env = {
        **os.environ,
        "SPECDEC_SLURM_DIR": str(state),
        "SPECDEC_SLURM_PORT": str(free_port_pair()),
    }
    try:
        started = script("start", env, timeout=300)
    except subprocess.TimeoutExpired:
        started = None
    if started is None or started.returncode != 0:
        script("stop", env, timeout=60)
        why = "timed out after 300 s" if started is None else started.stderr.strip()[-500:]
        pytest.skip(f"slurm could not be started here: {why}")
    yield {**env, "SLURM_CONF": str(state / "slurm.conf"), "WANDB_SILENT": "true"}, state
    script("stop", env, timeout=60)  # again, after a failure halfway; a no-op after the test's own


def test_submitit_slurm_sweep_runs_on_the_cluster(slurm, tmp_path):
    env, state = slurm
    sweep = tmp_path / "sweep"
    args = [
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=local",
        "hydra.launcher.timeout_min=5",
        "hydra.launcher.cpus_per_task=1",
        f"hydra.sweep.dir={sweep}",
        "gamma=1,2",
        "drafter=self,oracle",
        "max_tokens=8",
        "logger=disabled",
        "progress=false",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list(sweep.glob("*/result.json"))) == 4
    assert len(json.loads((sweep / "report/tables/jobs.json").read_text())) == 4
    # submitted with sbatch to the partition, and the controller ran and finished all four
    scripts = list(sweep.glob(".submitit/*/*_submission.sh"))
    assert scripts and "#SBATCH --partition=local" in scripts[0].read_text()
    assert len(list(sweep.glob(".submitit/*/*_result.pkl"))) == 4
    log = (state / "log/slurmctld.log").read_text()
    exited_0 = set(re.findall(r"_job_complete: JobId=(\S+) WEXITSTATUS 0", log))
    assert len(exited_0) == 4, log[-2000:]

    pids = [
        int((state / p).read_text()) for p in ("slurmctld.pid", "slurmd.pid", "munge/munged.pid")
    ]
    stopped = script("stop", env, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert not [p for p in pids if alive(p)], "a daemon outlived slurm-local.sh stop"
    assert not state.exists()
