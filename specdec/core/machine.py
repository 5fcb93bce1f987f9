"""What a result was measured on: machine, package versions, BLAS, load. Stored beside results.

from specdec.core.machine import machine_info; machine_info()
"""

from __future__ import annotations

import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from specdec.core import accelerator
from specdec.core.blas import active_blas
from specdec.core.files import write_atomic

PACKAGES = ("specdec", "mlx", "mlx-lm", "numpy", "scipy", "hydra-core", "wandb")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def physical_memory() -> int:
    """Bytes of RAM this machine has (0 where the OS does not say)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0


def numa(sys_root: Path = Path("/sys")) -> dict[str, Any] | None:
    """The NUMA nodes' CPUs and each NVIDIA GPU's node (Linux's /sys; None elsewhere): where a
    reader's page-locked buffers land relative to the GPU can set a DMA's speed, and two
    nodes' CPUs make "16 cores" two machines' worth."""
    root = sys_root / "devices/system/node"
    nodes = sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    if not nodes:
        return None
    gpus = {}  # PCI address -> its NUMA node (-1: the firmware names none)
    for dev in (sys_root / "bus/pci/devices").glob("*"):
        try:
            vendor, cls = (dev / "vendor").read_text().strip(), (dev / "class").read_text()
            if vendor == "0x10de" and cls.startswith("0x03"):  # NVIDIA, a display controller
                gpus[dev.name] = int((dev / "numa_node").read_text())
        except (OSError, ValueError):
            continue
    cpus = {n.name: (n / "cpulist").read_text().strip() for n in nodes}
    return {"cpus": cpus, "gpus": dict(sorted(gpus.items()))}


def thp_mode() -> str | None:
    """Linux's transparent huge page mode (always, madvise, never; None elsewhere): whether an
    O_DIRECT buffer that asks for 2 MiB pages can get them."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


def machine_info() -> dict[str, Any]:
    mem = physical_memory()
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "numa": numa(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "blas": active_blas(),
        "thp": thp_mode(),
        **accelerator.describe(),  # the MLX device and backend (cpu, metal, cuda) it ran on
        # other work on the machine shares its disk and cores: read the numbers with this
        "loadavg_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


# a home directory at the start of a path: root's or a user's on Linux or macOS (a lent machine's
# results name its own, which need not be this machine's), not one inside another path
HOMES = r"/(?:root|home/[^/\s\"']+|Users/[^/\s\"']+)/"


def home_as_tilde(text: str) -> str:
    """`text` with home directories written "~" at the start of a path (this machine's, and
    root's or a user's): what is written for other machines to read (results, device profiles)
    names no one's home."""
    mine = re.escape(str(Path.home()).rstrip("/") + "/")
    return re.sub(rf"(?<![\w.~/-])(?:{mine}|{HOMES})", "~/", text)


def write_result(
    path: str | os.PathLike, result: Any, places: dict[str, Any] | None = None
) -> None:
    """Write a benchmark's JSON result without this machine's paths: each of `places`
    ({path: placeholder}, e.g. a scratch dir -> "DIR") becomes its placeholder, the repository
    root becomes relative, the home directory "~". Results are read on other machines."""
    text = json.dumps(result, indent=1) + "\n"
    repo = Path(__file__).resolve().parents[2]
    subs = {**{str(p): name for p, name in (places or {}).items()}, f"{repo}/": "", str(repo): "."}
    subs |= {str(Path(p).resolve()): name for p, name in (places or {}).items()}
    for path_text, name in sorted(subs.items(), key=lambda kv: -len(kv[0])):  # longest first
        text = text.replace(path_text, name)
    write_atomic(path, home_as_tilde(text))
