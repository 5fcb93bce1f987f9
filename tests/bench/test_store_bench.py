"""`specdec bench read` runs end to end on a small file and writes the documented JSON shape.

Run: `pytest tests/bench/test_store_bench.py`. No speed is asserted here (speed targets live in
benchmarks/results/read.json, written by benchmarks/bench_read.py).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from specdec.bench.read import available_paths, bench_read
from tests.store.test_store_errors import specdec


def test_bench_read_small(tmp_path):
    result = bench_read(
        tmp_path, block_bytes=65536, file_bytes=40 * 65536, threads=(1, 2), rounds=1
    )
    assert result["block_bytes"] == 65536
    names = {(p["name"], p["threads"]) for p in result["paths"]}
    assert names == {(n, t) for n in available_paths() for t in (1, 2)}
    for p in result["paths"]:
        assert p["gbps"] > 0 and len(p["runs_gbps"]) == 1
        assert p["page_cache"] == (
            p["name"] in {"pread_heap_mxarray", "preadv_buffered_arena", "mmap_copy"}
        )
    if shutil.which("fio"):
        mems = ("malloc", "shmhuge") if result["hugepages_short_for_fio"] == 0 else ("malloc",)
        assert {(f["engine"], f["mem"], f["threads"]) for f in result["fio"]} == {
            (e, m, t) for e in ("psync", "libaio", "io_uring") for m in mems for t in (1, 2)
        }
        best = result["checks"]["best"]
        fastest = max(result["fio"], key=lambda f: f["gbps"])
        assert best["fio_gbps"] == fastest["gbps"]
        assert best["ours_over_fio_best"] == best["ours_gbps"] / fastest["gbps"]
    else:
        assert result["fio"] is None
    assert set(result["checks"]) - {"best"} == {"threads_1", "threads_2"}
    assert result["machine"]["cores"] >= 1
    assert not list(tmp_path.iterdir())  # the test file is removed


@pytest.mark.slow
def test_bench_cli_json(tmp_path):
    proc = specdec(
        "bench",
        "read",
        "--json",
        "--dir",
        tmp_path,
        "--block-bytes",
        "8192",
        "--file-bytes",
        "163840",
        "--rounds",
        "1",
        "--threads",
        "1",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [p["threads"] for p in result["paths"]] == [1] * len(available_paths())


def test_bench_paths_subset_and_huge_page_warning(tmp_path, monkeypatch):
    """--paths runs only those paths; an arena short of huge pages says so in the table (mocked
    shortfall: smaps reports none), never a silent 4 KiB-page figure under the arena's name."""
    from specdec.bench import read as readbench
    from specdec.bench.read import format_table
    from specdec.store import arena as arena_mod

    monkeypatch.setattr(arena_mod, "huge_page_bytes", lambda start, length: 0)
    monkeypatch.setattr(readbench, "COMPACT_MEMORY", tmp_path / "absent")  # no real compaction
    result = bench_read(
        tmp_path,
        block_bytes=1 << 20,
        file_bytes=20 << 20,
        threads=(2,),
        rounds=1,
        paths=("preadv_direct_arena",),
    )
    assert [(p["name"], p["threads"]) for p in result["paths"]] == [("preadv_direct_arena", 2)]
    if result["arena_huge_pages"] is None:  # not Linux: no huge pages asked for
        return
    assert result["arena_huge_pages"] == 0.0
    assert "WARNING: the arena got 2 MiB pages for only 0%" in format_table(result)


def test_bench_read_refuses_a_file_larger_than_the_free_space(tmp_path, capsys):
    """--file-bytes 2^62 was a MemoryError traceback (a 28 TiB block table) before any write."""
    from specdec.cli import main

    assert main(["bench", "read", "--dir", str(tmp_path), "--file-bytes", str(2**62)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"specdec: error: --file-bytes {2**62}: more than")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_bench_read_without_dir_checks_the_space_where_it_writes(tmp_path, monkeypatch, capsys):
    """No --dir (the documented `python benchmarks/bench_read.py` form) was a TypeError
    traceback: the free-space check took the missing --dir for a path."""
    from specdec.cli import main

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert main(["bench", "read", "--file-bytes", str(2**62)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"specdec: error: --file-bytes {2**62}: more than")
    assert list(tmp_path.iterdir()) == []


def test_fio_reads_the_runs_own_order(tmp_path):
    """Our paths read a fresh random order each run; fio's default repeats one order every run
    (the same blocks each round, which a virtual disk's host cache can serve): the run's seed
    goes to fio too."""
    from specdec.bench import fio as fiobench

    f = tmp_path / "blocks"
    f.write_bytes(bytes(8192 * 8))
    cfg = fiobench.FioConfig("psync", 1, "shmhuge")
    a, b = (fiobench.command(f, 8192, cfg, 4, seed) for seed in (7, 8))
    assert "--randseed=7" in a and "--randseed=8" in b


def test_the_pinned_path_runs_only_on_the_cuda_backend():
    """The read bench's default paths are the ones this backend can run: the pinned path needs
    CUDA's copy engine, so elsewhere it is listed but left out by default."""
    from specdec.bench.read import CUDA_PATHS, PATHS
    from specdec.core.accelerator import on_cuda

    assert set(CUDA_PATHS) <= set(PATHS)
    cuda = set(CUDA_PATHS) & set(available_paths())
    assert cuda == (set(CUDA_PATHS) if on_cuda() else set())


def test_bench_read_reads_a_pack_in_place(tmp_path, monkeypatch):
    """`--pack DIR` reads the packed model's own expert blocks, from every layer, where they lie
    in its experts.bin (each read compared with the file's bytes there), and leaves the pack as
    it was; a window keeps a run within the file's first bytes."""
    from specdec.bench import read as readbench
    from specdec.checkpoint.random_models import make_random
    from specdec.pack.pack import pack
    from specdec.store.layout import EXPERTS_BIN, ExpertIndex
    from specdec.store.reader import ExpertReader

    out = pack(make_random("minimax", tmp_path / "model", bits=8, seed=5), tmp_path / "packed")
    index = ExpertIndex.load(out)
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.iterdir())
    read: list[tuple[int, int]] = []
    real = ExpertReader.read

    def checked(self, requests):  # what a run asks for, then what landed in each slot
        real(self, requests)
        for lid, e, slot in requests:
            ly = index.layers[lid]
            n = ly.block_size(e)
            want = np.fromfile(out / EXPERTS_BIN, np.uint8, n, offset=int(ly.offsets[e]))
            got = self.arena.slot_np(slot)[:n]
            assert np.array_equal(got, want), (lid, e)
            read.append((lid, e))

    monkeypatch.setattr(ExpertReader, "read", checked)
    result = bench_read(
        pack=out, threads=(2,), rounds=1, run_bytes=1 << 30, paths=("preadv_direct_arena",)
    )
    every = [(lid, e) for lid in index.layer_ids for e in range(index.layers[lid].n_experts)]
    assert sorted(read) == every  # run_bytes above the pack's: each block once, all layers
    assert (result["block_bytes"], result["file_bytes"]) == (index.slot_bytes, index.file_bytes)
    mib = index.file_bytes >> 20
    assert result["source"] == f"pack {out}: {len(every)} blocks ({mib} MiB), read in place"
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.iterdir()) == before

    whole = readbench.open_bench_pack(out)
    window = whole.block(len(every) // 2)[0]
    part = readbench.open_bench_pack(out, window)
    assert 0 < len(part.keys) < len(every)
    assert all(sum(part.block(i)) <= window for i in range(len(part.keys)))
