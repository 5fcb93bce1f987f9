"""Device profiles: the numbers the device model (`specdec.clock.roofline`) charges time with.

A profile is one machine running one runtime, written as one YAML file of DeviceProfile's fields
(documented below) with each value's source in `sources` (printed by `specdec clock show NAME`).
The built-ins are the files shipped beside this module, one per profile (`BUILTIN_NAMES` is the
list of files found; adding a profile is adding a file, plus its conf/device/NAME.yaml for
specdec-exp):

    m4-24gb.yaml       the seed question's 24 GB M4, running a Python runtime like this harness
    m5-24gb.yaml       ds4 issue #627's 24 GB M5, running ds4 (C, Metal)
    this-machine.yaml  this machine before its read bench ran: measured compute, anchors.md's fio

`this-machine` is made by this machine's read bench: `specdec bench read` (and
benchmarks/bench_read.py) writes `$SPECDEC_CACHE/profiles/this-machine.yaml`
(`measured_profile_path()`; SPECDEC_CACHE defaults to ~/.cache/specdec) from its measured curve,
and that file, when present, is `this-machine`; without it the shipped fallback is. The library
reads no file of the checkout.

A user profile is a file of the same form, loaded by the same `load_profile`, accepted wherever
a profile name is (`--profile mac.yaml`, `device=file device.profile=mac.yaml`).

    from specdec.clock.profiles import get_profile
    get_profile("m4-24gb").read_gbps(in_flight=8)

Reads: `read_curve` lists (reads in flight, GB/s) measured at `read_block_bytes`; throughput
between points is interpolated linearly, clamped at the ends. `read_latency_s` splits a
measured rate into bandwidth and a per-read cost, so reads of other sizes cost what they would
(a batch of m reads of b bytes with n in flight: m·b / bandwidth(n) + ceil(m / n) · latency,
which reproduces the curve at its block size). `DEFAULT_PROFILE` is the one profile every
default names (`--profile`, specdec-exp's `device`, what `--gamma auto` prices passes on when
no roofline profile is given: `auto_profile`).
Tests: `pytest tests/clock/test_clock.py`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from specdec.core.errors import SpecdecError
from specdec.core.files import cache_root
from specdec.core.inputs import check_input_file

BUILTIN_DIR = Path(__file__).resolve().parent  # package data: one NAME.yaml per built-in


def builtin_names() -> tuple[str, ...]:
    """The built-in profiles: one per NAME.yaml in BUILTIN_DIR, sorted."""
    return tuple(sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")))


BUILTIN_NAMES = builtin_names()
DEFAULT_PROFILE = "m4-24gb"
MEASURED_PROFILE = "this-machine"  # the built-in this machine's read bench replaces
ASSUMED_LATENCY_S = 100e-6  # NVMe random read at queue depth 1, the usual order; no Mac figure
PYTHON_ROUTER_SYNC_S = 0.6e-3  # seed question §2: one router call in Python on its M4
# what a profile file must give: the numbers the device model charges every pass
REQUIRED_FIELDS = ("mem_gbps", "peak_tflops", "router_sync_s", "read_curve", "read_block_bytes")


def interpolate(points: tuple[tuple[float, float], ...], x: float) -> float:
    """y at x on sorted (x, y) points: linear between them, clamped at the ends. Not np.interp:
    the device model prices every layer's reads with it (and `--gamma auto` every candidate γ
    per pass), where numpy's call costs ~10x this loop on a curve of a few points."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:], strict=True):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def non_decreasing(curve: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    """A read curve [(reads in flight, GB/s)] with no point below one at fewer reads in flight:
    adjacent points that do are pooled into their mean (pool-adjacent-violators, each point
    weighted alike). A read bench's medians swing ±10% point to point on a drifting disk (the
    H100s' and H200s' virtual disks), and a point that reads slower with more reads in flight
    priced a speculative pass's larger batches slower per byte than plain decoding's; runs in
    lockstep (specdec.bench.lockstep) read at the same GB/s with 2 and 9 misses a layer
    (docs/results/cuda.md, the thirty-second session)."""
    pools: list[tuple[float, list[float]]] = []  # (GB/s, the points' reads in flight)
    for n, g in curve:
        pools.append((g, [n]))
        while len(pools) > 1 and pools[-2][0] > pools[-1][0]:
            (gb, nb), (ga, na) = pools.pop(), pools.pop()
            pools.append(((ga * len(na) + gb * len(nb)) / (len(na) + len(nb)), na + nb))
    return tuple((n, g) for g, ns in pools for n in ns)


def capped_latency(latency_s: float, curve, block_bytes: float) -> float:
    """`latency_s`, lowered below 90% of a block's time at every curve point: a profile's latency
    cannot exceed what one read took (DeviceProfile checks it), and on a fast or noisy small-block
    curve a measured or assumed figure can."""
    return min(latency_s, 0.9 * min(block_bytes / (g * 1e9) * n for n, g in curve))


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    # Compute: "roofline" charges the device model; "measured" charges this machine's own
    # compute seconds unchanged (this-machine only: no device to model).
    compute: str = "roofline"
    mem_gbps: float = 100.0  # weight bytes/s the device's matmul kernels reach, 1e9 B/s
    peak_tflops: float = 4.0  # dense 16-bit matmul peak, 1e12 FLOP/s
    router_sync_s: float = PYTHON_ROUTER_SYNC_S  # fixed cost per MoE layer per forward
    # fixed cost per MoE layer of each position past the first in a decode-form verify forward
    # (specdec.decode.verify_form: every position's calls are one-token calls of their own, each
    # with its launches and host work); 0 where not measured (`specdec bench device` measures it)
    position_s: float = 0.0
    # fixed cost of a MoE layer call that reads, beyond the time blocked on its reads and its
    # landing: issuing the reads, the cache's slot bookkeeping, the wake-up after them; 0 where
    # not measured (`specdec bench device` measures it)
    miss_call_s: float = 0.0
    # the runtime verifies a pass's positions in one batched forward (ds4), whatever form this
    # harness computed them in: its verify is priced batched (specdec.clock.roofline); false: as
    # the run computed them (this harness's decode form, T one-position forwards)
    batched_verify: bool = False
    read_curve: tuple[tuple[float, float], ...] = ((1.0, 2.0),)  # (in flight, GB/s) at the block
    read_block_bytes: float = 2**20  # block size the curve was measured at
    read_latency_s: float = ASSUMED_LATENCY_S  # per read, on top of bytes / bandwidth
    reads_in_flight: int = 8  # most reads the runtime keeps in flight (its reader threads)
    overlap_reads: bool = False  # a layer's resident experts compute while its misses land
    # GB/s at which the accelerator takes a block just read into host memory before it can compute
    # on it: CUDA managed memory migrates on first touch (specdec.store.arena); None where the
    # accelerator reads that memory where it lies (a CPU; Apple's unified memory)
    land_gbps: float | None = None
    # (blocks one layer call lands, GB/s), where landing's rate depends on how many blocks a call
    # lands (on the H200, 1.1 ms for one 8 MB block, 17-20 ms for 32: 7 against 13-15 GB/s);
    # between points interpolated, clamped at the ends. Empty: land_gbps at every count
    land_curve: tuple[tuple[float, float], ...] = ()
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        # (x ≥ 1, GB/s > 0) points, sorted; the read curve needs one, the landing curve may be empty
        for curve, x, needed in (
            ("read_curve", "in_flight", True),
            ("land_curve", "blocks", False),
        ):
            pts = tuple(sorted((float(n), float(g)) for n, g in getattr(self, curve)))
            if (needed and not pts) or any(n < 1 or not g > 0 for n, g in pts):
                raise SpecdecError(
                    f"profile {self.name!r}: {curve} needs points [{x} ≥ 1, GB/s > 0], got "
                    f"{list(pts)}"
                )
            object.__setattr__(self, curve, pts)
        positive = ("mem_gbps", "peak_tflops", "read_block_bytes", "reads_in_flight")
        for name in positive:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise SpecdecError(f"profile {self.name!r}: {name} must be > 0, got {v}")
        for name in ("router_sync_s", "position_s", "miss_call_s", "read_latency_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise SpecdecError(f"profile {self.name!r}: {name} must be ≥ 0, got {v}")
        for name in ("overlap_reads", "batched_verify"):
            if not isinstance(getattr(self, name), bool):
                raise SpecdecError(
                    f"profile {self.name!r}: {name} must be true or false, got "
                    f"{getattr(self, name)!r}"
                )
        land = self.land_gbps
        if land is not None and not (isinstance(land, (int, float)) and land > 0):
            raise SpecdecError(f"profile {self.name!r}: land_gbps must be > 0 or null, got {land}")
        if self.compute not in ("roofline", "measured"):
            raise SpecdecError(
                f"profile {self.name!r}: compute must be 'roofline' or 'measured', got "
                f"{self.compute!r}"
            )
        for n, g in self.read_curve:
            if not self.read_block_bytes / (g * 1e9) > self.read_latency_s / n:
                raise SpecdecError(
                    f"profile {self.name!r}: read_latency_s {self.read_latency_s * 1e6:.0f} µs "
                    f"exceeds what one {self.read_block_bytes:.0f}-byte read took at {g} GB/s "
                    f"with {n:g} in flight: lower it"
                )

    def diskless(self) -> DeviceProfile:
        """This profile with reads that cost nothing: a run's modeled time apart from its disk,
        where the time the run was blocked on reads is measured instead."""
        return replace(self, read_curve=((1.0, 1e9),), read_latency_s=0.0)

    def read_gbps(self, in_flight: float) -> float:
        """Throughput at the curve's block size with `in_flight` reads outstanding."""
        return interpolate(self.read_curve, in_flight)

    def land_time(self, nbytes: float, blocks: float) -> float:
        """Seconds the accelerator spends taking `nbytes` just read, `blocks` blocks landed by
        one layer call, before computing on them."""
        if self.land_curve and nbytes:
            return nbytes / (interpolate(self.land_curve, blocks) * 1e9)
        return nbytes / (self.land_gbps * 1e9) if self.land_gbps else 0.0

    def read_time(self, reads: int, block_bytes: float) -> float:
        """Seconds for `reads` reads of `block_bytes`, up to `reads_in_flight` at a time."""
        if reads <= 0:
            return 0.0
        n = min(reads, self.reads_in_flight)
        b = self.read_block_bytes
        bandwidth = b / (b / (self.read_gbps(n) * 1e9) - self.read_latency_s / n)
        return reads * block_bytes / bandwidth + math.ceil(reads / n) * self.read_latency_s


def measured_profile_path() -> Path:
    """Where this machine's read bench writes `this-machine`: $SPECDEC_CACHE/profiles/."""
    return cache_root() / "profiles" / f"{MEASURED_PROFILE}.yaml"


def profile_yaml(profile: DeviceProfile, header: str = "") -> str:
    """`profile` as the YAML `load_profile` reads back into an equal profile: every field, then
    its sources; `header` becomes comment lines at the top."""
    import yaml

    data = {"name": profile.name, "description": profile.description}
    data |= {f.name: getattr(profile, f.name) for f in fields(DeviceProfile) if f.name not in data}
    data["read_curve"] = [list(pt) for pt in profile.read_curve]
    del data["sources"]
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    style = dict(sort_keys=False, allow_unicode=True, width=100)
    fields_ = yaml.safe_dump(data, default_flow_style=None, **style)  # a curve point per line
    sources = yaml.safe_dump({"sources": dict(profile.sources)}, **style)
    return comment + fields_ + sources


def load_profile(path: str | Path) -> DeviceProfile:
    """A profile from a YAML or JSON mapping of DeviceProfile's fields (name defaults to the stem)."""
    path = Path(path)
    try:
        check_input_file(path, "device profile")
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
    missing = [f for f in REQUIRED_FIELDS if f not in data]
    if missing:  # a default would price passes on numbers of no machine, silently
        raise SpecdecError(
            f"device profile {path}: missing {', '.join(missing)}; give every number the device "
            "model charges (`specdec clock show m4-24gb` prints a complete profile)"
        )
    sources = data.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise SpecdecError(f"device profile {path}: sources must map field names to text")
    if set(sources) - allowed:
        raise SpecdecError(
            f"device profile {path}: sources of unknown fields {sorted(set(sources) - allowed)}"
        )
    data.setdefault("name", path.stem)
    try:
        return DeviceProfile(**data)
    except (TypeError, ValueError) as e:
        raise SpecdecError(f"device profile {path}: {e}") from e


def get_profile(name: str) -> DeviceProfile:
    """A built-in profile by name, or a user profile from a .yaml/.yml/.json path.

    `this-machine` is the read bench's measured file when it has run (`measured_profile_path`),
    else its shipped fallback."""
    if name == MEASURED_PROFILE and measured_profile_path().exists():
        return load_profile(measured_profile_path())
    if name in BUILTIN_NAMES:
        return load_profile(BUILTIN_DIR / f"{name}.yaml")
    if Path(name).suffix in (".yaml", ".yml", ".json"):
        return load_profile(name)
    raise SpecdecError(
        f"unknown device profile {name!r}: use one of {', '.join(BUILTIN_NAMES)} "
        "or a .yaml/.json profile file"
    )


def auto_profile(given: Sequence[DeviceProfile]) -> tuple[DeviceProfile, str | None]:
    """The profile `--gamma auto` prices passes on, and a one-line note when it is none of
    `given`: the first roofline profile given, else DEFAULT_PROFILE (a measured profile times
    passes that ran, it has no compute for a pass not yet run)."""
    chosen = next((p for p in given if p.compute == "roofline"), None)
    if chosen is not None:
        return chosen, None
    chosen = get_profile(DEFAULT_PROFILE)
    if not given:
        return chosen, None
    names = ", ".join(p.name for p in given)
    return chosen, (
        f"--gamma auto prices passes on {chosen.name}: the profile given ({names}) has measured "
        "compute, none for a pass not yet run; give a roofline --profile to choose another"
    )
