"""Device profiles and modeled time: what a measured run would cost on another machine's SSD.

    modeled time = measured compute × compute_scale + bytes read / bandwidth + reads × latency

Reads are modeled as issued one after another: `read_gbps` is the bandwidth the device
delivers, `read_latency_s` the fixed cost each read adds. A throughput measured at one block
size B is an *effective* figure g = B / (B/bandwidth + latency); `DeviceProfile.from_effective`
splits it with an assumed latency so that the profile reproduces g at B exactly and charges
smaller reads more. Built-ins (`specdec.clock.profiles.BUILTIN_NAMES`):

    m4-24gb        the seed question's 24 GB M4: 2.62 GB/s at 1.18 MB blocks (preadv, F_NOCACHE,
                   preallocated GPU-visible slot, its best path)
    m5-24gb        ds4 issue #627's 24 GB M5: 4.4 GB/s through ds4's pread path
    this-machine   benchmarks/results/read.json (the store's read bench) when present, else
                   anchors.md's fio figure, 2.0 GB/s for 1 MiB O_DIRECT random reads

    from specdec.clock.profiles import get_profile, modeled_time
    modeled_time(get_profile("m4-24gb"), compute_s=0.2, bytes_read=1.7e9, reads=1440)

A user profile is a YAML or JSON file (`load_profile`), also accepted by `get_profile(path)`.
Tests: `pytest tests/test_clock.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

from specdec.errors import SpecdecError

# No Mac measurement of per-read latency is available to us; ~100 µs is the usual order of an
# NVMe random read at queue depth 1, so it is an assumption, stated in each description.
ASSUMED_LATENCY_S = 100e-6
READ_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "read.json"


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    read_gbps: float  # bandwidth, 1e9 bytes/s
    read_latency_s: float  # fixed cost per read request, seconds
    compute_scale: float = 1.0  # this machine's compute seconds -> the device's
    description: str = ""

    def __post_init__(self) -> None:
        if not (self.read_gbps > 0 and math.isfinite(self.read_gbps)):
            raise SpecdecError(
                f"profile {self.name!r}: read_gbps must be > 0, got {self.read_gbps}"
            )
        if not (self.read_latency_s >= 0 and math.isfinite(self.read_latency_s)):
            raise SpecdecError(
                f"profile {self.name!r}: read_latency_s must be ≥ 0, got {self.read_latency_s}"
            )
        if not (self.compute_scale > 0 and math.isfinite(self.compute_scale)):
            raise SpecdecError(
                f"profile {self.name!r}: compute_scale must be > 0, got {self.compute_scale}"
            )

    @classmethod
    def from_effective(
        cls,
        name: str,
        effective_gbps: float,
        block_bytes: float,
        read_latency_s: float,
        compute_scale: float = 1.0,
        description: str = "",
    ) -> DeviceProfile:
        """The profile whose effective throughput at `block_bytes` is `effective_gbps`."""
        per_read = block_bytes / (effective_gbps * 1e9)
        if not per_read > read_latency_s:
            raise SpecdecError(
                f"profile {name!r}: latency {read_latency_s * 1e6:.0f} µs exceeds the measured "
                f"time of one {block_bytes:.0f}-byte read ({per_read * 1e6:.0f} µs): lower it"
            )
        gbps = block_bytes / (per_read - read_latency_s) / 1e9
        return cls(name, gbps, read_latency_s, compute_scale, description)

    def effective_gbps(self, block_bytes: float) -> float:
        """Throughput of back-to-back reads of `block_bytes`."""
        return block_bytes / (block_bytes / (self.read_gbps * 1e9) + self.read_latency_s) / 1e9


@dataclass(frozen=True)
class ModeledTime:
    compute_s: float
    transfer_s: float  # bytes / bandwidth
    latency_s: float  # reads × latency

    @property
    def total_s(self) -> float:
        return self.compute_s + self.transfer_s + self.latency_s


def breakdown(
    profile: DeviceProfile, compute_s: float, bytes_read: float, reads: int
) -> ModeledTime:
    """Modeled time by part; SpecdecError on negative inputs."""
    for what, v in (("compute_s", compute_s), ("bytes_read", bytes_read), ("reads", reads)):
        if not (v >= 0 and math.isfinite(v)):
            raise SpecdecError(f"{what} must be a finite number ≥ 0, got {v}")
    return ModeledTime(
        compute_s=compute_s * profile.compute_scale,
        transfer_s=bytes_read / (profile.read_gbps * 1e9),
        latency_s=reads * profile.read_latency_s,
    )


def modeled_time(profile: DeviceProfile, compute_s: float, bytes_read: float, reads: int) -> float:
    """Seconds on `profile`: compute × compute_scale + bytes/bandwidth + reads × latency."""
    return breakdown(profile, compute_s, bytes_read, reads).total_s


def _m4() -> DeviceProfile:
    return DeviceProfile.from_effective(
        "m4-24gb",
        effective_gbps=2.62,
        block_bytes=1.18e6,
        read_latency_s=ASSUMED_LATENCY_S,
        description="24 GB M4 of the seed question: 2.62 GB/s measured at 1.18 MB blocks "
        "(preadv, F_NOCACHE, preallocated GPU-visible slot); latency 100 µs assumed; "
        "compute_scale not calibrated",
    )


def _m5() -> DeviceProfile:
    # #627's table: 700 cached experts take 4.61 GiB, so one expert block is ~7.07 MB.
    return DeviceProfile.from_effective(
        "m5-24gb",
        effective_gbps=4.4,
        block_bytes=4.61 * 2**30 / 700,
        read_latency_s=ASSUMED_LATENCY_S,
        description="24 GB M5 of ds4 issue #627: ~4.4 GB/s through ds4's pread path, expert "
        "blocks ~7.07 MB (4.61 GiB / 700 experts); latency 100 µs assumed; "
        "compute_scale not calibrated",
    )


def this_machine(read_json: Path = READ_JSON) -> DeviceProfile:
    """This machine from the store's read bench, or anchors.md's fio figure without it.

    From read.json: bandwidth = the fastest page-cache-bypassing arena path; latency = what one
    read issued alone (threads = 1, same path) costs beyond bytes/bandwidth.
    """
    if not read_json.exists():
        return DeviceProfile.from_effective(
            "this-machine",
            effective_gbps=2.0,
            block_bytes=2**20,
            read_latency_s=ASSUMED_LATENCY_S,
            description=f"fallback (no {read_json}): anchors.md's fio 2.0 GB/s for 1 MiB "
            "O_DIRECT random reads; latency 100 µs assumed; run the read bench to measure",
        )
    try:
        bench = json.loads(read_json.read_text())
        block = float(bench["block_bytes"])
        paths = [p for p in bench["paths"] if not p["page_cache"]]
    except (ValueError, KeyError, TypeError) as e:
        raise SpecdecError(
            f"{read_json} is not a read bench result ({e}): rerun the read bench"
        ) from e
    arena = [p for p in paths if "arena" in p["name"]] or paths
    if not arena:
        raise SpecdecError(f"{read_json} has no page-cache-bypassing path: rerun the read bench")
    best = max(arena, key=lambda p: p["gbps"])
    serial = [p for p in arena if p["name"] == best["name"] and p["threads"] == 1]
    per_read_at_bandwidth = block / (best["gbps"] * 1e9)
    latency = max(0.0, block / (serial[0]["gbps"] * 1e9) - per_read_at_bandwidth) if serial else 0.0
    how = (
        f"latency from its 1-thread rate {serial[0]['gbps']:.2f} GB/s"
        if serial
        else "no 1-thread run of that path, latency folded into the bandwidth"
    )
    return DeviceProfile(
        "this-machine",
        read_gbps=float(best["gbps"]),
        read_latency_s=latency,
        description=f"{read_json.name}: path {best['name']!r}, {best['gbps']:.2f} GB/s with "
        f"{best['threads']} threads at {block:.0f}-byte blocks; {how}",
    )


_BUILTINS = {"m4-24gb": _m4, "m5-24gb": _m5, "this-machine": this_machine}
BUILTIN_NAMES = tuple(_BUILTINS)


def load_profile(path: str | Path) -> DeviceProfile:
    """A profile from YAML or JSON: name, read_gbps, read_latency_s[, compute_scale, description],
    or effective_gbps + block_bytes in place of read_gbps (see `DeviceProfile.from_effective`)."""
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
    allowed = {f.name for f in fields(DeviceProfile)} | {"effective_gbps", "block_bytes"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SpecdecError(
            f"device profile {path}: unknown fields {unknown}; allowed {sorted(allowed)}"
        )
    data.setdefault("name", path.stem)
    try:
        if "effective_gbps" in data:
            return DeviceProfile.from_effective(**data)
        return DeviceProfile(**data)
    except TypeError as e:
        raise SpecdecError(f"device profile {path}: {e}; give read_gbps and read_latency_s") from e


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
