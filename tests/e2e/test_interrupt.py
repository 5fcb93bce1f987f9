"""Interrupted work loses nothing: killed packs, killed record writers.

Run: `pytest tests/e2e/test_interrupt.py`.

Pack: the real CLI (`python -m specdec pack`) runs in a subprocess with
SPECDEC_TEST_PACK_STALL=<stage>; it announces the stage on stderr and waits there, and the test
kills it with SIGKILL. Stages: resident weights written, after the first / a middle / the last
expert block, experts.bin complete without its index, index written in the temporary directory,
and (re-packing over an existing pack with --force) just before the directory swap and after it.
After each kill, every directory next to OUT_DIR that loads as a packed directory must pass a
full `verify` (nothing partial passes as valid), and OUT_DIR must be either absent or a complete
pack (during a re-pack: the old one or the new one, also after Ctrl-C). Rerunning the same command must succeed, leave OUT_DIR a
verified pack of the requested model and remove the dead pack's leftovers.

Records: a writer process killed mid-run (records of 0.1 to 40 KB) leaves only whole lines
(RecordWriter writes each record with one write(2)); a torn final line (a full disk, a power
loss) is skipped by read_records with a note, and cut off before a rerun appends; a bad line
anywhere else is a SpecdecError naming the line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.checkpoint.random_models import make_random
from specdec.core.errors import SpecdecError, StoreError
from specdec.decode.records import RecordWriter, read_records
from specdec.pack.pack import pack, source_fingerprint
from specdec.pack.verify import verify
from specdec.store.layout import ExpertIndex

ROOT = Path(__file__).resolve().parents[2]
N_BLOCKS = 48  # qwen3_moe random: 3 MoE layers x 16 experts


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("interrupt")
    a = make_random("qwen3_moe", root / "a", bits=4, seed=0)
    b = make_random("qwen3_moe", root / "b", bits=4, seed=1)
    return a, b


def killed_pack(model: Path, out: Path, stage: str, force: bool, sig: int = signal.SIGKILL) -> None:
    """Run `specdec pack` until it reaches `stage`, then send it `sig` (SIGKILL: dies at once;
    SIGINT: Ctrl-C, exit status 130)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECDEC_TEST_PACK_STALL": stage}
    cmd = [sys.executable, "-m", "specdec", "pack", str(model), str(out)]
    proc = subprocess.Popen(
        cmd + (["--force"] if force else []), cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stderr.readline()
        assert f"pack stalled at {stage}" in line, line + proc.stderr.read()
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == (-sig if sig == signal.SIGKILL else 130)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def valid_packs(parent: Path) -> list[Path]:
    """Directories under `parent` that load as packed directories; each must verify fully."""
    out = []
    for d in sorted(p for p in parent.iterdir() if p.is_dir()):
        try:
            ExpertIndex.load(d)
        except StoreError:
            continue
        verify(d, io="buffered")  # raises if a directory passes as packed but is not whole
        out.append(d)
    return out


STAGES = ["resident", "block:0", f"block:{N_BLOCKS // 2}", f"block:{N_BLOCKS - 1}", "experts"]


@pytest.mark.parametrize("stage", [*STAGES, "index"])
def test_killed_pack_leaves_nothing_valid_and_rerun_succeeds(models, tmp_path, stage):
    model, _ = models
    parent = tmp_path / "packs"
    parent.mkdir()
    out = parent / "out"
    killed_pack(model, out, stage, force=False)
    assert not out.exists(), "a killed first pack must not create OUT_DIR"
    survivors = valid_packs(parent)
    # only a temporary directory whose index was already written (complete) may load
    assert all(stage == "index" and ".tmp-" in d.name for d in survivors), survivors
    pack(model, out)
    assert [d.name for d in valid_packs(parent)] == ["out"], "leftovers of the killed pack remain"
    assert ExpertIndex.load(out).n_blocks == N_BLOCKS


@pytest.mark.parametrize("stage", [*STAGES, "index", "swap", "swapped"])
def test_killed_repack_over_another_pack(models, tmp_path, stage):
    a, b = models
    parent = tmp_path / "packs"
    parent.mkdir()
    out = pack(b, parent / "out")
    killed_pack(a, out, stage, force=True)
    valid_packs(parent)  # whatever loads is whole
    want = a if stage == "swapped" else b  # OUT_DIR is never without a pack (files.swap_dir)
    assert ExpertIndex.load(out).source == source_fingerprint(want)
    pack(a, out, force=True)
    assert [d.name for d in valid_packs(parent)] == ["out"], "leftovers of the killed pack remain"
    assert ExpertIndex.load(out).source == source_fingerprint(a)


def test_ctrl_c_before_the_swap_keeps_the_old_pack(models, tmp_path):
    """Ctrl-C while the finished new pack waits to be swapped in: OUT_DIR is still the old
    pack (before, the old one had been moved aside and nothing was at OUT_DIR)."""
    a, b = models
    out = pack(b, tmp_path / "out")
    killed_pack(a, out, "swap", force=True, sig=signal.SIGINT)
    assert ExpertIndex.load(out).source == source_fingerprint(b)
    verify(out, io="buffered")


WRITER = """
import sys
from specdec.decode.records import RecordWriter
with RecordWriter(sys.argv[1]) as w:
    for i in range(10**9):
        w.write({"pass_idx": i, "tokens": list(range(i * 97 % 5000))})  # 2 B to 40 KB a line
        if i == 200:
            print("written", flush=True)
"""


def test_killed_record_writer_leaves_whole_lines(tmp_path):
    path = tmp_path / "records.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], env=env, cwd=ROOT, stdout=subprocess.PIPE
    )
    assert proc.stdout.readline().strip() == b"written"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    # One os.write per line, but Linux may still cut a write short between pages when a fatal
    # signal arrives (seen once under load): the contract is that every line before the last is
    # whole and a torn last line is skipped by the reader, never a half record read back.
    lines = path.read_text().split("\n")
    assert all(line.startswith("{") and line.endswith("}") for line in lines[:-1])
    rows = read_records(path)
    assert [r["pass_idx"] for r in rows] == list(range(len(rows))) and len(rows) > 200
    assert len(rows) == len(lines) - 1, "every whole line is read back"
    assert max(len(r["tokens"]) for r in rows) > 4000  # lines longer than an io buffer


def test_torn_final_line_is_skipped_and_cut_before_appending(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    with RecordWriter(path) as w:
        for i in range(3):
            w.write({"pass_idx": i})
    with open(path, "a") as f:
        f.write('{"pass_idx": 3, "tok')  # the writer died inside this line
    assert [r["pass_idx"] for r in read_records(path)] == [0, 1, 2]
    assert "skipped a torn final line" in capsys.readouterr().err
    with RecordWriter(path, append=True) as w:  # a rerun appending to the same file
        w.write({"pass_idx": 3, "tokens": [1, 2]})
    assert "cut a torn final line" in capsys.readouterr().err
    assert [r["pass_idx"] for r in read_records(path)] == [0, 1, 2, 3]
    assert capsys.readouterr().err == ""


def test_corrupt_middle_line_is_a_clear_error(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"pass_idx": 0}\n{"pass_idx": 1, "tok\n{"pass_idx": 2}\n')
    with pytest.raises(SpecdecError, match="line 2 is not a JSON record"):
        read_records(path)
