"""A job directory is the job's own: `hydra.run.dir=DIR` never deletes or overwrites a user's files.

Run: `pytest tests/report/test_rundir.py`. specdec.report.rundir.claim marks a new or empty
directory (Hydra's `.hydra/` and log aside) and refuses any other; `clear` (a rerun with another
config) deletes the job's outputs only in a claimed directory. Through `specdec-exp` itself:
tests/e2e/test_experiments.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.core.errors import SpecdecError
from specdec.report import rundir


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "files",
    [
        # a user's results folder given as hydra.run.dir=DIR
        {"tables/mydata.json": "[1]", "config.json": "mine", "summary.json": "mine"},
        # hydra.run.dir=. inside a model directory
        {"config.json": '{"model_type": "qwen3_moe"}', "model.safetensors": "weights"},
    ],
    ids=["results-folder", "model-dir"],
)
def test_a_users_folder_is_refused_and_left_as_it_was(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / ".hydra").mkdir()  # what Hydra wrote before the job started
    before = tree(tmp_path)
    with pytest.raises(SpecdecError, match="holds files specdec-exp did not write"):
        rundir.claim(tmp_path)
    with pytest.raises(SpecdecError, match="not a specdec-exp job directory"):
        rundir.clear(tmp_path)
    assert tree(tmp_path) == before


def test_a_new_job_directory_is_claimed_and_a_rerun_clears_only_its_outputs(tmp_path):
    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("hydra's")
    (job / "run.log").write_text("hydra's log")
    rundir.claim(job)
    (job / rundir.TABLES).mkdir()
    (job / rundir.TABLES / "t.json").write_text("[]")
    (job / rundir.CONFIG).write_text("{}")
    rundir.claim(job)  # a rerun: its own directory
    rundir.clear(job)
    assert sorted(p.name for p in job.iterdir()) == [".hydra", ".specdec-run", "run.log"]
