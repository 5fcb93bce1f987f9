"""The output rule of specdec.core.files, and what the commands built on it refuse.

Run: `pytest tests/core/test_files.py`. A directory swap is never seen half-done (Ctrl-C between
the two renames of the fallback path is held until both are done); leftovers of dead writers are
cleaned by the next writer, a live one's and a user's folder kept; a probe writes only into a
folder it created or marked. Permissions: as root, chmod blocks nothing, so those cases run the
real CLI in a user namespace (`unshare --user --map-user=65534`: root's files become another
user's, and the modes apply); skipped where unshare is missing or not allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.core import files
from specdec.core.errors import SpecdecError
from tests.helpers import random_checkpoint

ROOT = Path(__file__).resolve().parents[2]
UNSHARE = ["unshare", "--user", "--map-user=65534", "--map-group=65534"]
# unshare(2) refuses a threaded process: no preloaded BLAS (its threads start at load) for it
NO_PRELOAD = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def marked_dir(path: Path, kind: str, text: str) -> Path:
    path.mkdir()
    files.mark(path, kind)
    (path / "data.txt").write_text(text)
    return path


def test_ctrl_c_between_the_two_renames_leaves_the_new_directory(tmp_path, monkeypatch):
    """Without an exchange call (an old kernel, a file system without it) the swap is two
    renames; a real SIGINT arriving after the first is held until the second is done."""
    dst = marked_dir(tmp_path / "out", "pack", "old")
    new = marked_dir(tmp_path / "out.tmp-1", "pack", "new")
    monkeypatch.setattr(files, "_exchange", lambda a, b: False, raising=False)
    real_replace = os.replace

    def replace_then_interrupt(src, target):
        real_replace(src, target)
        if Path(target).name.startswith("out.old-"):  # old moved aside: Ctrl-C lands now
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(files.os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        files.swap_dir(new, dst, "pack")
    assert (dst / "data.txt").read_text() == "new"


def test_exchange_swaps_both_names(tmp_path):
    dst = marked_dir(tmp_path / "out", "trace", "old")
    new = marked_dir(tmp_path / "out.tmp-1", "trace", "new")
    stages = []
    files.swap_dir(new, dst, "trace", stall=stages.append)
    assert (dst / "data.txt").read_text() == "new" and stages == ["swap", "swapped"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old one went


def test_fresh_dir_cleans_only_dead_writers_leftovers(tmp_path):
    dead = marked_dir(tmp_path / "out.tmp-999999999", "random", "2 GB of a killed run")
    dead_old = marked_dir(tmp_path / "out.old-999999998", "random", "a killed swap")
    live = marked_dir(tmp_path / f"out.tmp-{os.getppid()}", "random", "a running writer")
    users = tmp_path / "out.tmp-999999997"  # a user's folder with our name pattern, unmarked
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    other_kind = marked_dir(tmp_path / "out.tmp-999999996", "pack", "another kind's")
    tmp = files.fresh_dir(tmp_path / "out", "random")
    assert tmp.name == f"out.tmp-{os.getpid()}" and files.owner(tmp) == "random"
    assert not dead.exists() and not dead_old.exists()
    assert live.exists() and (users / "notes.txt").exists() and other_kind.exists()


def test_probe_writes_only_into_its_own_or_a_new_folder(tmp_path):
    from specdec.probes.report import write_report

    def fig():
        import matplotlib.pyplot as plt

        return plt.subplots()[0]

    out = tmp_path / "probes"
    write_report(out, "eviction", [{"a": 1}], "# t\n", fig())
    write_report(out, "eviction", [{"a": 2}], "# t\n", fig())  # its own folder: replaced
    assert json.loads((out / "eviction.json").read_text()) == [{"a": 2}]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "eviction.md").write_text("my notes")
    with pytest.raises(SpecdecError, match="holds files `specdec probe` did not write"):
        write_report(mine, "eviction", [{"a": 1}], "# t\n", fig())
    assert (mine / "eviction.md").read_text() == "my notes"
    write_report(mine, "gates", [{"a": 1}], "# t\n", fig())  # new files beside the user's
    assert (mine / "gates.json").exists() and (mine / "eviction.md").read_text() == "my notes"


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*UNSHARE, "true"], env=NO_PRELOAD, capture_output=True).returncode == 0


# every (argv, expected one-line error) runs in one interpreter under the namespace
CLI_CASES = """
import sys
from specdec.cli import main
for argv in {cases!r}:
    print("rc", main(argv), flush=True)
"""


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare --user (a user namespace)")
def test_unreadable_inputs_and_read_only_outputs_are_one_line_errors(tmp_path_factory, tmp_path):
    """As a user whom the modes bind: an unreadable config.json or model folder (pack and
    generate), a read-only parent of OUT (pack, make-random, trace synth)."""
    src = random_checkpoint(tmp_path_factory.getbasetemp(), "qwen3_moe", 4)
    ok, model, shut = (Path(shutil.copytree(src, tmp_path / n)) for n in ("ok", "m", "shut"))
    (model / "config.json").chmod(0)
    shut.chmod(0)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    cases = [
        ["pack", str(model), str(tmp_path / "p")],
        ["generate", "--model", str(model), "--max-tokens", "1"],
        ["pack", str(shut), str(tmp_path / "p")],
        ["generate", "--model", str(shut), "--max-tokens", "1"],
        ["pack", str(ok), str(ro / "p")],
        ["make-random", "qwen3_moe", str(ro / "r")],
        ["trace", "synth", str(ro / "t"), "--like", "minimax-m2.5", "--positions", "10"],
    ]
    env = {**NO_PRELOAD, "PYTHONPATH": str(ROOT), "SPECDEC_CACHE": str(tmp_path / "cache")}
    code = CLI_CASES.format(cases=cases)
    proc = subprocess.run(
        [*UNSHARE, sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    shut.chmod(0o755)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.split() == ["rc", "2"] * len(cases), proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("specdec: error:")]
    denied = "cannot read (Permission denied); make it readable (chmod u+rX) or run as its owner"
    assert errors[:4] == [
        f"specdec: error: {model}/config.json: {denied}",
        f"specdec: error: {model}/config.json: {denied}",
        f"specdec: error: {shut}: {denied}",
        f"specdec: error: {shut}: {denied}",
    ]
    unwritable = "cannot write (Permission denied); check the path and permissions"
    assert errors[4:] == [
        f"specdec: error: {ro}: {unwritable}",
        f"specdec: error: {ro / 'r'}: {unwritable}",
        f"specdec: error: {ro / 't'}: {unwritable}",
    ]
    assert sorted(p.name for p in ro.iterdir()) == [] and ok.exists()
