"""Benchmark results and device profiles name no machine's paths: specdec.core.machine.

pytest tests/core/test_results_portable.py
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from specdec.bench import device
from specdec.cli import main
from specdec.clock.profiles import get_profile
from specdec.core import machine
from specdec.core.machine import write_result
from tests.helpers import CI_HOME, LENT_HOME

ROOT = Path(__file__).resolve().parents[2]
# paths that hold a home's name below their start: no home, left as they are
NOT_HOMES = f"{Path('/srv', 'root', 'x')} {Path('/data', 'home', 'y', 'z')}"


def test_write_result_replaces_scratch_repo_and_home_paths(tmp_path):
    scratch = tmp_path / "scratch"
    result = {
        "model": str(scratch / "qwen3"),
        "command": f"bench --dir {scratch} --model {ROOT / 'specdec/models/tiny'}",
        "home": str(Path.home() / "models" / "x"),
        "repo": str(ROOT),
        "lent": f"pack {LENT_HOME}/runs/big.packed, profile {CI_HOME}/out/h200.yaml",
        "not a home": NOT_HOMES,
    }
    out = tmp_path / "r.json"
    write_result(out, result, {scratch: "DIR"})
    assert json.loads(out.read_text()) == {
        "model": "DIR/qwen3",
        "command": "bench --dir DIR --model specdec/models/tiny",
        "home": "~/models/x",
        "repo": ".",
        "lent": "pack ~/runs/big.packed, profile ~/out/h200.yaml",
        "not a home": NOT_HOMES,
    }


def test_no_tracked_result_names_a_machine_path():
    files = subprocess.run(
        ["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert files
    for f in files:
        text = (ROOT / f).read_text(errors="replace")
        assert str(ROOT) not in text and str(Path.home()) + "/" not in text, f


def test_bench_device_writes_its_profile_and_details_without_the_home_dir(tmp_path, monkeypatch):
    """The measurements are stood in for (a built-in profile whose read curve came from a pack
    in the home directory): what is under test is what `specdec bench device` writes."""
    pack = Path.home() / "runs" / "big.packed"
    measured = dataclasses.replace(
        get_profile("m4-24gb"), sources={"read_curve": f"read bench, pack {pack}: 10 blocks"}
    )
    monkeypatch.setattr(
        device, "device_profile", lambda *a: (measured, {"reads": {"source": f"pack {pack}"}})
    )
    out, details = tmp_path / "p.yaml", tmp_path / "d.json"
    assert main(["bench", "device", "--out", str(out), "--details", str(details)]) == 0
    for f in (out, details):
        assert str(Path.home()) + "/" not in f.read_text()
        assert "~/runs/big.packed" in f.read_text()


def test_machine_info_names_the_numa_nodes_and_each_nvidia_gpus(tmp_path):
    """Two nodes' CPUs and the node of each NVIDIA display controller (not another vendor's, not
    NVIDIA's audio function); no node directory: None (a Mac)."""
    for node, cpus in (("node0", "0-7"), ("node1", "8-15"), ("node10", "16-23")):
        (tmp_path / "devices/system/node" / node).mkdir(parents=True)
        (tmp_path / "devices/system/node" / node / "cpulist").write_text(cpus + "\n")
    pci = tmp_path / "bus/pci/devices"
    for addr, vendor, cls, node in (("0000:00:06.0", "0x10de", "0x030200", "1"),
                                    ("0000:00:06.1", "0x10de", "0x040300", "1"),
                                    ("0000:00:07.0", "0x8086", "0x030000", "0")):  # fmt: skip
        (pci / addr).mkdir(parents=True)
        for name, text in (("vendor", vendor), ("class", cls), ("numa_node", node)):
            (pci / addr / name).write_text(text + "\n")
    assert machine.numa(tmp_path) == {
        "cpus": {"node0": "0-7", "node1": "8-15", "node10": "16-23"},
        "gpus": {"0000:00:06.0": 1},
    }
    assert machine.numa(tmp_path / "nowhere") is None
