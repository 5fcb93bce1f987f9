"""Device profiles: the numbers the device model (`specdec.clock.roofline`) charges time with.

A profile is one machine running one runtime. Every field is documented below and every
built-in value carries its source in `DeviceProfile.sources` (printed by
`specdec clock show NAME`). Built-ins (`BUILTIN_NAMES`):

    m4-24gb        the seed question's 24 GB M4, running a Python runtime like this harness
    m5-24gb        ds4 issue #627's 24 GB M5, running ds4 (C, Metal)
    this-machine   this machine: its measured compute, reads from the store's read bench
                   (benchmarks/results/read.json), anchors.md's fio figure without it

A user profile is a YAML or JSON file with the same fields (`load_profile`), accepted wherever a
profile name is (`--profile mac.yaml`, `device=file device.profile=mac.yaml`).

    from specdec.clock.profiles import get_profile
    get_profile("m4-24gb").read_gbps(in_flight=8)

Reads: `read_curve` lists (reads in flight, GB/s) measured at `read_block_bytes`; throughput
between points is interpolated linearly, clamped at the ends. `read_latency_s` splits a
measured rate into bandwidth and a per-read cost, so reads of other sizes cost what they would
(a batch of m reads of b bytes with n in flight: m·b / bandwidth(n) + ceil(m / n) · latency,
which reproduces the curve at its block size). The read bench's results feed the curve through
`this_machine` (one point per thread count of its fastest page-cache-bypassing path).
Tests: `pytest tests/clock/test_clock.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from specdec.core.errors import SpecdecError

READ_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "read.json"
ASSUMED_LATENCY_S = 100e-6  # NVMe random read at queue depth 1, the usual order; no Mac figure
PYTHON_ROUTER_SYNC_S = 0.6e-3  # seed question §2: one router call in Python on its M4
# This machine's read bench (benchmarks/results/read.json, preadv_direct_arena): 1.565 GB/s with
# 1 thread, 1.995 with 8, at 1.18 MB blocks. Borrowed as the M4's gain from 1 to 8 in flight.
BORROWED_8_OVER_1 = 1.995 / 1.565


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    # Compute: "roofline" charges the device model; "measured" charges this machine's own
    # compute seconds unchanged (this-machine only: no device to model).
    compute: str = "roofline"
    mem_gbps: float = 100.0  # weight bytes/s the device's matmul kernels reach, 1e9 B/s
    peak_tflops: float = 4.0  # dense 16-bit matmul peak, 1e12 FLOP/s
    router_sync_s: float = PYTHON_ROUTER_SYNC_S  # fixed cost per MoE layer per forward
    read_curve: tuple[tuple[float, float], ...] = ((1.0, 2.0),)  # (in flight, GB/s) at the block
    read_block_bytes: float = 2**20  # block size the curve was measured at
    read_latency_s: float = ASSUMED_LATENCY_S  # per read, on top of bytes / bandwidth
    reads_in_flight: int = 8  # most reads the runtime keeps in flight (its reader threads)
    overlap_reads: bool = False  # a layer's resident experts compute while its misses land
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "read_curve", tuple(sorted((float(n), float(g)) for n, g in self.read_curve))
        )
        positive = ("mem_gbps", "peak_tflops", "read_block_bytes", "reads_in_flight")
        for name in positive:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise SpecdecError(f"profile {self.name!r}: {name} must be > 0, got {v}")
        for name in ("router_sync_s", "read_latency_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise SpecdecError(f"profile {self.name!r}: {name} must be ≥ 0, got {v}")
        if self.compute not in ("roofline", "measured"):
            raise SpecdecError(
                f"profile {self.name!r}: compute must be 'roofline' or 'measured', got "
                f"{self.compute!r}"
            )
        if not self.read_curve or any(n < 1 or not g > 0 for n, g in self.read_curve):
            raise SpecdecError(
                f"profile {self.name!r}: read_curve needs points [in_flight ≥ 1, GB/s > 0], "
                f"got {list(self.read_curve)}"
            )
        for n, g in self.read_curve:
            if not self.read_block_bytes / (g * 1e9) > self.read_latency_s / n:
                raise SpecdecError(
                    f"profile {self.name!r}: read_latency_s {self.read_latency_s * 1e6:.0f} µs "
                    f"exceeds what one {self.read_block_bytes:.0f}-byte read took at {g} GB/s "
                    f"with {n:g} in flight: lower it"
                )

    def read_gbps(self, in_flight: float) -> float:
        """Throughput at the curve's block size with `in_flight` reads outstanding."""
        pts = self.read_curve
        if in_flight <= pts[0][0]:
            return pts[0][1]
        for (n0, g0), (n1, g1) in zip(pts[:-1], pts[1:], strict=True):
            if in_flight <= n1:
                return g0 + (g1 - g0) * (in_flight - n0) / (n1 - n0)
        return pts[-1][1]

    def read_time(self, reads: int, block_bytes: float) -> float:
        """Seconds for `reads` reads of `block_bytes`, up to `reads_in_flight` at a time."""
        if reads <= 0:
            return 0.0
        n = min(reads, self.reads_in_flight)
        b = self.read_block_bytes
        bandwidth = b / (b / (self.read_gbps(n) * 1e9) - self.read_latency_s / n)
        return reads * block_bytes / bandwidth + math.ceil(reads / n) * self.read_latency_s


def _m4() -> DeviceProfile:
    return DeviceProfile(
        "m4-24gb",
        mem_gbps=100.0,
        peak_tflops=4.0,
        router_sync_s=PYTHON_ROUTER_SYNC_S,
        read_curve=((1, 2.62), (8, round(2.62 * BORROWED_8_OVER_1, 2))),
        read_block_bytes=1.18e6,
        reads_in_flight=8,
        overlap_reads=False,
        description="24 GB M4 of the seed question running a Python runtime like this harness",
        sources={
            "mem_gbps": "assumed: 83% of the M4's 120 GB/s LPDDR5X (Apple spec), the share "
            "bandwidth-bound kernels usually reach",
            "peak_tflops": "assumed: M4 10-core GPU, 10 × 128 ALUs × 2 FLOP × ~1.58 GHz ≈ 4.0 "
            "TFLOP/s, 16-bit at the 32-bit rate",
            "router_sync_s": "measured by the seed question (§2): ~0.6 ms per router call in "
            "Python on its M4 (matmul, argsort, .tolist() GPU sync)",
            "read_curve": "(1, 2.62): seed question §5, preadv + F_NOCACHE into a preallocated "
            "slot, 1.18 MB blocks, taken as one read in flight; (8, 3.34): assumed, the 1 → 8 "
            "gain this machine's read bench measured (1.565 → 1.995 GB/s, ×1.27)",
            "read_latency_s": "assumed: 100 µs, NVMe random read at queue depth 1",
            "reads_in_flight": "this harness's ExpertReader: 8 threads",
            "overlap_reads": "this harness: a layer's reads complete before its experts compute",
        },
    )


def _m5() -> DeviceProfile:
    block = 4.61 * 2**30 / 700  # #627: 700 cached experts take 4.61 GiB -> ~7.07 MB per expert
    return DeviceProfile(
        "m5-24gb",
        mem_gbps=127.0,
        peak_tflops=4.4,
        router_sync_s=PYTHON_ROUTER_SYNC_S / 30,
        read_curve=((1, round(4.4 / BORROWED_8_OVER_1, 2)), (9, 4.4)),
        read_block_bytes=block,
        reads_in_flight=9,
        overlap_reads=True,
        description="24 GB M5 of ds4 issue #627 running ds4 (C, Metal)",
        sources={
            "mem_gbps": "assumed: 83% of the M5's 153 GB/s (Apple spec)",
            "peak_tflops": "assumed: M5 10-core GPU at ~1.1x the M4's clock-for-clock rate; "
            "its neural accelerators are not counted",
            "router_sync_s": "assumed: the seed question's 0.6 ms / 30 (it says its per-layer "
            "overhead is ~30x ds4's)",
            "read_curve": "(9, 4.4): ds4 #627, ~4.4 GB/s through ds4's pread pool (9 threads) at "
            "~7.07 MB experts; (1, 3.45): assumed, the same 1 → 8 gain as this machine's bench",
            "read_latency_s": "assumed: 100 µs",
            "reads_in_flight": "ds4: 9 read threads by default (anchors.md)",
            "overlap_reads": "ds4 starts misses when the router's ids are known and computes the "
            "shared and resident experts meanwhile (anchors.md)",
        },
    )


def this_machine(read_json: Path = READ_JSON) -> DeviceProfile:
    """This machine: measured compute, reads from the read bench's curve (or anchors.md's fio).

    From read.json: the curve is the fastest page-cache-bypassing path at each thread count it
    was run with (threads = reads in flight; a run's `in_flight` field wins when the bench writes
    one); latency is assumed, as for the Macs.
    """
    common = dict(compute="measured", router_sync_s=0.0, reads_in_flight=8)
    src = {
        "compute": "measured on this machine (wall minus time blocked on reads), per pass",
        "router_sync_s": "0: already inside the measured compute",
        "reads_in_flight": "this harness's ExpertReader: 8 threads",
    }
    if not read_json.exists():
        return DeviceProfile(
            "this-machine",
            read_curve=((1, 2.0),),
            read_block_bytes=2**20,
            description=f"fallback (no {read_json.name}): run `python benchmarks/bench_read.py`",
            sources=src | {"read_curve": "anchors.md: fio 2.0 GB/s, 1 MiB O_DIRECT random reads"},
            **common,
        )
    try:
        bench = json.loads(read_json.read_text())
        block = float(bench["block_bytes"])
        paths = [p for p in bench["paths"] if not p["page_cache"]]
        arena = [p for p in paths if "arena" in p["name"]] or paths
        best = max(arena, key=lambda p: p["gbps"])["name"]
        curve = {
            float(p.get("in_flight", p["threads"])): float(p["gbps"])
            for p in arena
            if p["name"] == best
        }
    except (ValueError, KeyError, TypeError) as e:
        raise SpecdecError(
            f"{read_json} is not a read bench result ({e}): rerun the read bench"
        ) from e
    return DeviceProfile(
        "this-machine",
        read_curve=tuple(curve.items()),
        read_block_bytes=block,
        description=f"this machine; reads from {read_json.name}, path {best!r}",
        sources=src
        | {
            "read_curve": f"{read_json.name}: {best}, GB/s per thread count, {block:.0f}-byte blocks"
        },
        **common,
    )


_BUILTINS = {"m4-24gb": _m4, "m5-24gb": _m5, "this-machine": this_machine}
BUILTIN_NAMES = tuple(_BUILTINS)


def load_profile(path: str | Path) -> DeviceProfile:
    """A profile from a YAML or JSON mapping of DeviceProfile's fields (name defaults to the stem)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecdecError(f"cannot read device profile {path}: {e.strerror}") from e
    import yaml  # hydra-core's dependency; YAML is a superset of JSON, one parser reads both

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecdecError(
            f"device profile {path} is not valid YAML/JSON: {e}".replace("\n", " ")
        ) from e
    if not isinstance(data, dict):
        raise SpecdecError(f"device profile {path} must be a mapping of fields to values")
    if "compute_scale" in data or "read_gbps" in data:
        raise SpecdecError(
            f"device profile {path} uses the old fields read_gbps/compute_scale: give mem_gbps, "
            "peak_tflops and read_curve (docs/device-model.md)"
        )
    allowed = {f.name for f in fields(DeviceProfile)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SpecdecError(
            f"device profile {path}: unknown fields {unknown}; allowed {sorted(allowed)}"
        )
    data.setdefault("name", path.stem)
    try:
        return DeviceProfile(**data)
    except (TypeError, ValueError) as e:
        raise SpecdecError(f"device profile {path}: {e}") from e


def get_profile(name: str) -> DeviceProfile:
    """A built-in profile by name, or a user profile from a .yaml/.yml/.json path."""
    if name in _BUILTINS:
        return _BUILTINS[name]()
    if Path(name).suffix in (".yaml", ".yml", ".json"):
        return load_profile(name)
    raise SpecdecError(
        f"unknown device profile {name!r}: use one of {', '.join(BUILTIN_NAMES)} "
        "or a .yaml/.json profile file"
    )
