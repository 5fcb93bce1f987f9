"""Read path: the question's section-5 table on this machine, from `specdec bench read --json`.

    rows = read_path_table(json.loads(Path("benchmarks/results/read.json").read_text()))
    write_read_path(rows, "runs/probes")          # read_path.{md,json,png}
    specdec probe read_path --read-json benchmarks/results/read.json --out runs/probes

One row per (path, threads) with its throughput and its share of the device limit, fio's O_DIRECT
random reads of the same block size and reads in flight, the best of its configurations (engine
psync / libaio / io_uring, 4 KiB-page `malloc` or huge-page `shmhuge` buffers), when fio was
installed (`fio` is then a list of {threads, gbps, engine, mem} or one such dict); fio's own
runs are rows too. Without fio the share column is left empty. Names of
the question's rows: pread -> heap -> GPU array (`pread_heap_mxarray`), preadv -> freshly
allocated GPU buffer (`preadv_fresh_buffer`), preadv with the page cache bypassed -> preallocated
slot (`preadv_direct_arena`, O_DIRECT here where macOS uses F_NOCACHE).
"""

from __future__ import annotations

import json
from pathlib import Path

from specdec.core.errors import SpecdecError
from specdec.probes.registry import Probe, ProbeOutput, register

DESCRIBE = {
    "pread_heap_mxarray": "pread -> heap -> MLX array",
    "preadv_fresh_buffer": "preadv -> freshly allocated MLX buffer",
    "preadv_direct_arena": "preadv, O_DIRECT -> preallocated arena slot",
    "preadv_direct_arena_one_by_one": "the same, one block per read (a lone miss)",
    "preadv_direct_arena_4k_pages": "the same, arena without huge pages",
    "preadv_direct_arena_reused_slots": "the same, a slot per thread in turn (as fio's buffers)",
    "preadv_buffered_arena": "preadv, page cache -> preallocated arena slot",
    "mmap_copy": "mmap -> copy into arena slot",
}


def load_read_json(path: str | Path) -> dict:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SpecdecError(
            f"{p}: cannot read the read benchmark ({type(err).__name__}): "
            "run `specdec bench read --json > benchmarks/results/read.json` first"
        ) from None
    if "paths" not in data or "block_bytes" not in data:
        raise SpecdecError(
            f"{p}: not `specdec bench read --json` output (needs paths, block_bytes)"
        )
    return data


def read_path_table(bench: dict) -> list[dict]:
    """Rows: path, description, threads, GB/s, page cache, fio GB/s at those threads, share."""
    fio = bench.get("fio")
    fio = [fio] if isinstance(fio, dict) else (fio or [])
    limit: dict[int, float] = {}  # the best fio engine at each thread count
    for f in fio:
        t = int(f["threads"])
        limit[t] = max(limit.get(t, 0.0), float(f["gbps"]))
    rows = [
        {
            "path": f"fio_{f.get('engine', 'psync')}_{f.get('mem', 'malloc')}",
            "description": f"fio {f.get('engine', 'psync')}, {f.get('mem', 'malloc')} buffers, "
            "O_DIRECT (device)",
            "threads": int(f["threads"]),
            "gbps": float(f["gbps"]),
            "page_cache": False,
            "fio_gbps": limit[int(f["threads"])],
            "share_of_device": float(f["gbps"]) / limit[int(f["threads"])],
            "block_bytes": int(bench["block_bytes"]),
        }
        for f in fio
    ]
    for p in sorted(bench["paths"], key=lambda p: (p["threads"], -p["gbps"])):
        device = limit.get(int(p["threads"]))
        rows.append(
            {
                "path": p["name"],
                "description": DESCRIBE.get(p["name"], p["name"]),
                "threads": int(p["threads"]),
                "gbps": float(p["gbps"]),
                "page_cache": bool(p["page_cache"]),
                "fio_gbps": device,
                "share_of_device": None if device is None else float(p["gbps"]) / device,
                "block_bytes": int(bench["block_bytes"]),
            }
        )
    return sorted(rows, key=lambda r: (r["threads"], -r["gbps"]))


def render_read_path(rows: list[dict], title: str = "") -> str:
    from specdec.probes.report import md_table

    block = rows[0]["block_bytes"] / 1e6 if rows else 0
    body = md_table(
        [
            "path",
            "threads",
            f"GB/s, {block:.2f} MB blocks",
            "page cache",
            "fio (device limit)",
            "of device",
        ],
        [
            [
                r["description"],
                r["threads"],
                f"{r['gbps']:.2f}",
                "yes" if r["page_cache"] else "bypassed",
                "not installed" if r["fio_gbps"] is None else f"{r['fio_gbps']:.2f}",
                "" if r["share_of_device"] is None else f"{r['share_of_device']:.0%}",
            ]
            for r in rows
        ],
    )
    return (f"{title}\n\n" if title else "") + body


def write_read_path(rows: list[dict], out_dir: str | Path, title: str = "") -> dict:
    import matplotlib.pyplot as plt

    from specdec.probes.report import write_report

    threads = sorted({r["threads"] for r in rows})
    names = list(dict.fromkeys(r["path"] for r in rows if not r["path"].startswith("fio_")))
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(names) + 1.5))
    height = 0.8 / max(len(threads), 1)
    for i, t in enumerate(threads):
        by = {r["path"]: r for r in rows if r["threads"] == t}
        ys = [j + i * height for j in range(len(names))]
        ax.barh(
            ys, [by[n]["gbps"] if n in by else 0 for n in names], height, label=f"{t} thread(s)"
        )
        fio = next((r["fio_gbps"] for r in rows if r["threads"] == t and r["fio_gbps"]), None)
        if fio:
            ax.axvline(fio, ls="--", color=f"C{i}", label=f"fio (best engine), {t} thread(s)")
    ax.set_yticks([j + height * (len(threads) - 1) / 2 for j in range(len(names))])
    ax.set_yticklabels([DESCRIBE.get(n, n) for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("throughput (GB/s), random reads of expert-size blocks")
    ax.set_title(title or "Read paths")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8, loc="lower right")
    return write_report(out_dir, "read_path", rows, render_read_path(rows, title), fig)


@register
class ReadPath(Probe):
    """The question's §5 read-path table on this machine, from `specdec bench read --json`.
    Headline: the fastest measured path's throughput in GB/s."""

    name = "read_path"
    listed = 50
    needs = ("read_json",)
    options = ("read_json",)
    headline_name = "best_gbps"

    @classmethod
    def headline(cls, rows: list[dict]) -> float:
        return max(r["gbps"] for r in rows if not r["path"].startswith("fio_"))

    @classmethod
    def run(cls, opts, ctx) -> ProbeOutput:
        rows = read_path_table(load_read_json(opts.read_json))
        title = f"Read paths ({opts.read_json})."
        return ProbeOutput(rows, write_read_path(rows, opts.out, title))
