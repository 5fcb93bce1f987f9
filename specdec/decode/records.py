"""Step records: one JSON line per verify pass, and the run summary computed from them.

The words used here (and in docs/results): acceptance α = accepted / (accepted + rejected), where a pass
rejects at most one draft and drafts after a rejection are never judged; union = distinct
experts selected by the γ positions of one verify pass, per MoE layer (rejected drafts
included); bytes read = bytes actually read from experts.bin for misses.

`routing` carries the verify forward's experts, per MoE layer id, one row of k experts per
position in pass order: the last committed token, then the drafts; rows past 1 + accepted are
rejected drafts (docs/trace-format.md). `records_trace` turns a record file into a routing trace
whose rejected.npy holds them, so `specdec simulate --alpha` replays recorded rejections.

Record files are written a line at a time, one write(2) each, so a killed run leaves whole lines;
`read_records` skips a torn final line and says so (tests/e2e/test_interrupt.py).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specdec.core.errors import SpecdecError
from specdec.core.files import check_output_file, write_error
from specdec.gamma.spec import AUTO

if TYPE_CHECKING:  # reading records (specdec report) must not pay for importing MLX models
    from specdec.clock.roofline import ModeledTime
    from specdec.stream.steplog import LayerStep

MODELED_VERSION = 2  # see PassRecord.modeled_version
# a record's counts, whole and >= 0, checked when a file is read back
COUNTS = ("pass_idx", "gamma", "drafted", "accepted", "committed", "draft_bytes_read",
          "verify_bytes_read", "draft_misses", "verify_misses", "accesses", "hits", "reads",
          "resync_reads", "resync_bytes_read")  # fmt: skip


@dataclass
class PassRecord:
    pass_idx: int
    gamma: int
    drafted: int
    accepted: int
    committed: int
    tokens: list[int]
    union: dict[str, int]  # verify phase, per MoE layer id (JSON keys are strings)
    misses: dict[str, int]  # verify phase, per MoE layer id
    draft_union: dict[str, int]
    draft_bytes_read: int
    verify_bytes_read: int
    draft_misses: int
    verify_misses: int
    accesses: int
    hits: int
    reads: int
    blocked_s: float
    compute_s: float
    wall_s: float
    modeled_s: dict[str, float] = field(default_factory=dict)  # profile -> seconds, total
    # profile -> {compute_s, sync_s, read_s}: roofline compute, router syncs, reads not hidden
    modeled_parts: dict[str, dict[str, float]] = field(default_factory=dict)
    # 1: compute × compute_scale + serial reads (records before the device model; no parts);
    # 2: specdec.clock's device model (docs/device-model.md)
    modeled_version: int = 1
    read_s: float = 0.0  # wall time with a read in flight (overlapped with compute or blocked)
    # the pass's reads split in thread-seconds (store.reader.ReadStats): io_s, land_s, wake_s;
    # {} in records written before it was kept
    read_split: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int = 0  # the process's peak resident set size at the end of the pass
    routing: dict[str, list[list[int]]] = field(default_factory=dict)  # verify: [γ][k] per layer
    # positions fed again after a rejection where a layer's state cannot be trimmed
    # (decode/rollback.py: Qwen3-Next's gated delta-net), and what that forward read
    refed: int = 0
    refeed_bytes_read: int = 0
    # --gamma auto: blocks read before the pass to re-sync the cache to plain decoding's shadow
    # (specdec.gamma.chooser), and their bytes (in bytes_read; steps["resync"] has them)
    resync_reads: int = 0
    resync_bytes_read: int = 0
    # --gamma auto: the γ chosen and why, with every candidate's expected tokens, modeled
    # seconds and bytes (specdec.gamma.chooser.Choice.record); {} for a fixed γ
    gamma_choice: dict = field(default_factory=dict)
    # a drafter that routes its drafts (self; decode/draft_stop.py): the reads its routing
    # predicted beside what verify selected, and why drafting ended; {} otherwise
    draft_routing: dict = field(default_factory=dict)
    # what the device model needs to model the pass again on another profile
    # (specdec.clock.passes.remodel): tokens in the KV cache when the pass began, the draft
    # forwards it ran, and its cache steps per phase [[layer, union, misses, bytes, prefetched,
    # synced], ...] in the order the streamer took them
    context: int = 0
    draft_forwards: int | None = None
    steps: dict[str, list[list[int]]] = field(default_factory=dict)
    # --gamma auto: host seconds its bookkeeping took after the pass (AutoGamma.observe: the
    # shadows, the guard's books), in wall_s and compute_s (a plain run has none to pay)
    books_s: float = 0.0
    # --gamma auto: host seconds choosing the pass's γ before it (AutoGamma.choose: a block's
    # candidates priced, the guard), already in wall_s and compute_s (the pass's clock starts
    # before it); 0 in records written before it was kept
    choose_s: float = 0.0
    # lockstep (specdec.bench.lockstep): whether another side's pass ran just before this one
    # (False: this side's own pass did, or none); None outside lockstep and before it was kept
    follows: bool | None = None

    def add_books(self, seconds: float) -> None:
        """Count `seconds` of auto's bookkeeping after the pass as the pass's own time."""
        self.books_s += seconds
        self.wall_s += seconds
        self.compute_s += seconds

    @classmethod
    def build(
        cls,
        pass_idx: int,
        gamma: int,
        *,
        drafted: int,
        accepted: int,
        tokens: list[int],
        draft_steps: list[LayerStep],
        verify_steps: list[LayerStep],
        wall_s: float,
        blocked_s: float,
        reads: int,
        modeled: dict[str, ModeledTime],
        read_s: float = 0.0,
        read_split: dict[str, float] | None = None,
        peak_rss_bytes: int = 0,
        refeed: tuple[int, list[LayerStep]] = (0, []),
        context: int = 0,
        draft_forwards: int | None = None,
        resync_steps: list[LayerStep] = (),
    ) -> PassRecord:
        refed, refeed_steps = refeed
        draft, verify = _Phase(draft_steps), _Phase(verify_steps)
        refeed_phase, resync = _Phase(refeed_steps), _Phase(resync_steps)
        misses = draft.misses + verify.misses + refeed_phase.misses
        accesses = draft.unions + verify.unions + refeed_phase.unions
        steps = {"draft": draft.rows, "verify": verify.rows, "refeed": refeed_phase.rows}
        if resync.rows:  # the rare phase only where it read
            steps["resync"] = resync.rows
        return cls(
            pass_idx=pass_idx,
            gamma=gamma,
            drafted=drafted,
            accepted=accepted,
            committed=len(tokens),
            tokens=tokens,
            union=verify.union,
            misses=verify.layer_misses,
            draft_union=draft.union,
            draft_bytes_read=draft.bytes_read,
            verify_bytes_read=verify.bytes_read,
            draft_misses=draft.misses,
            verify_misses=verify.misses,
            accesses=accesses,
            hits=accesses - misses,
            reads=reads,
            blocked_s=blocked_s,
            compute_s=wall_s - blocked_s,
            wall_s=wall_s,
            modeled_s={name: m.total_s for name, m in modeled.items()},
            modeled_parts={
                name: {"compute_s": m.compute_s, "sync_s": m.sync_s, "read_s": m.read_s}
                for name, m in modeled.items()
            },
            modeled_version=MODELED_VERSION,
            read_s=read_s,
            read_split=read_split or {},
            peak_rss_bytes=peak_rss_bytes,
            refed=refed,
            refeed_bytes_read=refeed_phase.bytes_read,
            resync_reads=resync.misses,
            resync_bytes_read=resync.bytes_read,
            context=context,
            draft_forwards=draft_forwards,
            steps=steps,
        )

    @property
    def bytes_read(self) -> int:
        return (
            self.draft_bytes_read
            + self.verify_bytes_read
            + self.refeed_bytes_read
            + self.resync_bytes_read
        )

    @classmethod
    def from_row(cls, row: dict, where: str) -> PassRecord:
        """A record read back from JSON: fields this version does not know (a newer writer) are
        ignored; a missing field (an older writer) is a SpecdecError naming it."""
        known = {f.name: f for f in fields(cls)}
        if not isinstance(row, dict):
            raise SpecdecError(f"{where}: a record is not a JSON object; rerun the job")
        missing = [
            name
            for name, f in known.items()
            if name not in row and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            raise SpecdecError(
                f"{where}: records lack {', '.join(missing)} (written by an older specdec); "
                "rerun the job to record them"
            )
        for name in COUNTS:  # what the summary adds up and indexes by: a damaged file's values
            v = row.get(name, 0)  # absent: a field with a default, written before it existed
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SpecdecError(
                    f"{where}: a record's {name} is {v!r}, not a whole number >= 0: the file is "
                    "damaged; rerun the job"
                )
        return cls(**{k: v for k, v in row.items() if k in known})


class _Phase:
    """One phase's steps summed in one walk (a record is built every pass, every token of a
    plain decode: on a GPU host-bound at full budget its µs are the token's): bytes, misses and
    unions in all, union and misses per layer (a chunked wide call logs several steps for one
    layer; JSON keys are strings) and the steps as rows."""

    __slots__ = ("bytes_read", "misses", "unions", "union", "layer_misses", "rows")

    def __init__(self, steps: list[LayerStep]):
        self.bytes_read = self.misses = self.unions = 0
        self.union: dict[str, int] = {}
        self.layer_misses: dict[str, int] = {}
        self.rows: list[list[int]] = []
        for s in steps:
            key = str(s.layer)
            self.bytes_read += s.bytes_read
            self.misses += s.misses
            self.unions += s.union
            self.union[key] = self.union.get(key, 0) + s.union
            self.layer_misses[key] = self.layer_misses.get(key, 0) + s.misses
            self.rows.append(
                [s.layer, s.union, s.misses, s.bytes_read, s.prefetched, int(s.synced)]
            )


def summarize(records: list[PassRecord], profiles: list[str] = ()) -> dict:
    """Run summary: acceptance, union, bytes per committed token, tokens/s measured and modeled."""
    if not records:
        return {"passes": 0}
    drafted = sum(r.drafted for r in records)
    accepted = sum(r.accepted for r in records)
    rejected = sum(1 for r in records if r.accepted < r.drafted)
    committed = sum(r.committed for r in records)
    wall = sum(r.wall_s for r in records)
    unions = [u for r in records for u in r.union.values()]
    total_bytes = sum(r.bytes_read for r in records)
    accesses = sum(r.accesses for r in records)
    out = {
        "passes": len(records),
        "gamma": records[0].gamma,
        "committed": committed,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": accepted / (accepted + rejected) if accepted + rejected else None,
        "accepted_per_drafted": accepted / drafted if drafted else None,
        "mean_accepted_length": accepted / len(records),
        "accepted_length_hist": np.bincount(
            [r.accepted for r in records], minlength=records[0].gamma
        ).tolist(),
        "mean_union": float(np.mean(unions)) if unions else 0.0,
        "draft_bytes_read": sum(r.draft_bytes_read for r in records),
        "verify_bytes_read": sum(r.verify_bytes_read for r in records),
        "bytes_read": total_bytes,
        "bytes_per_token": total_bytes / committed,
        "hits": sum(r.hits for r in records),
        "misses": accesses - sum(r.hits for r in records),
        "hit_rate": sum(r.hits for r in records) / accesses if accesses else None,
        "blocked_s": sum(r.blocked_s for r in records),
        "compute_s": sum(r.compute_s for r in records),
        "wall_s": wall,
        "tokens_per_s": committed / wall if wall > 0 else None,
        **_time_split(records, committed, total_bytes),
    }
    if any(r.gamma_choice for r in records):  # --gamma auto: how often each γ was chosen
        out["gamma"] = AUTO.label
        out["gamma_chosen_hist"] = np.bincount([r.drafted + 1 for r in records]).tolist()
        out["gamma_why"] = gamma_why(records)
        out["books_s"] = sum(r.books_s for r in records)  # in wall_s (PassRecord.books_s)
        out["choose_s"] = sum(r.choose_s for r in records)  # in wall_s too
        resyncs = [r.resync_reads for r in records if r.resync_reads]
        if resyncs:  # re-syncs to plain decoding's shadow (in bytes_read)
            out["resyncs"], out["resync_reads"] = len(resyncs), sum(resyncs)
    ends = [r.draft_routing["why"] for r in records if r.draft_routing]
    if ends:  # a drafter that routes its drafts (self): why each draft ended (draft_stop.py)
        out["draft_ends"] = {why: ends.count(why) for why in sorted(set(ends))}
    for name in profiles:
        t = sum(r.modeled_s[name] for r in records)
        out[f"modeled_tokens_per_s/{name}"] = committed / t if t > 0 else None
        for part in ("compute_s", "sync_s", "read_s"):
            if all(name in r.modeled_parts for r in records):
                out[f"modeled_{part}/{name}"] = sum(r.modeled_parts[name][part] for r in records)
    return out


def gamma_why(records: list[PassRecord]) -> dict[str, int]:
    """--gamma auto: passes per reason their γ was chosen (specdec.gamma.chooser.Choice.why),
    a block's later passes ("hold") counted under its first pass's reason, so the counts say why
    the run drafted or stayed plain."""
    out: dict[str, int] = {}
    block = "hold"  # a hold before any block opened (not expected) stays a hold
    for r in records:
        why = r.gamma_choice.get("why", "fixed")
        if why != "hold":
            block = why
        out[block] = out.get(block, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _time_split(records: list[PassRecord], committed: int, total_bytes: int) -> dict:
    """Where decode time goes, per committed token: compute (everything but waiting on reads),
    blocked on reads, and reads that ran while the host computed (in flight, not waited on);
    the misses' effective read rate is their bytes over the time reads were in flight."""
    blocked = sum(r.blocked_s for r in records)
    in_flight = sum(r.read_s for r in records)
    return {
        "read_s": in_flight,
        "overlapped_s": max(0.0, in_flight - blocked),
        "per_token_ms": {
            "compute": 1e3 * sum(r.compute_s for r in records) / committed,
            "blocked_on_reads": 1e3 * blocked / committed,
            "reads_overlapped": 1e3 * max(0.0, in_flight - blocked) / committed,
        },
        "miss_gb_per_s": total_bytes / in_flight / 1e9 if in_flight > 0 else None,
        "peak_rss_bytes": max(r.peak_rss_bytes for r in records),
    }


def records_trace(rows: list[dict], n_experts: int, expert_bytes: int | list[int], model=""):
    """A routing trace from records with `routing`: committed positions (each pass's first
    1 + accepted rows) in experts.npy, each pass's rejected rows at their positions in
    rejected.npy (-1 where no pass rejected a draft there; the first pass wins)."""
    from specdec.trace.format import Trace

    rows = [r for r in rows if r.get("routing")]
    if not rows:
        raise SpecdecError(
            "records carry no routing: rerun `specdec generate --records` with this version"
        )
    layers = sorted(rows[0]["routing"], key=int)
    passes = [np.array([r["routing"][lid] for lid in layers]) for r in rows]  # [L, γ, k] each
    keep = [1 + r["accepted"] for r in rows]
    experts = np.concatenate(
        [p[:, :n].transpose(1, 0, 2) for p, n in zip(passes, keep, strict=True)]
    )
    rejected = np.full((len(experts) + max(p.shape[1] for p in passes),) + experts.shape[1:], -1)
    t = 0
    for p, n in zip(passes, keep, strict=True):
        rej = p[:, n:].transpose(1, 0, 2)  # [γ - n, L, k]
        free = (rejected[t + n : t + n + len(rej)] < 0).all(axis=(1, 2))
        rejected[t + n : t + n + len(rej)][free] = rej[free]
        t += n
    return Trace(
        experts=experts.astype(np.int32),
        n_experts=n_experts,
        expert_bytes=[expert_bytes] * len(layers)
        if isinstance(expert_bytes, int)
        else expert_bytes,
        model=model,
        source=f"specdec records (gamma {rows[0]['gamma']})",
        layer_ids=[int(lid) for lid in layers],
        rejected=rejected[: len(experts)].astype(np.int32),
    )


class RecordWriter:
    """Appends one JSON line per record, each with a single write(2) on an O_APPEND descriptor:
    a killed writer leaves only whole lines, whatever the record's size, without relying on how
    the io stack splits a buffered write.

    A file whose last line is torn (its writer died inside a write: disk full, power loss) has
    that line cut off when opened, with a note, so appended records start on a line of their own.
    """

    def __init__(self, path: Path, append: bool = False):
        self.path = Path(path)
        self._fd = -1
        if self.path.is_dir():
            raise SpecdecError(f"records file {path} is a directory: give a file path")
        if self.path.exists() and not append:
            raise SpecdecError(
                f"records file {path} exists (an earlier run's records): choose another file, "
                "delete it, or pass --append to add this run's passes to it"
            )
        # appending (and cutting a torn tail) only to a record file: never a model's files
        check_output_file(self.path, "a specdec run (records)", True, "--append", is_records)
        self.created = not self.path.exists()  # a run that fails before its first record
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise write_error(path, e) from None
        _cut_torn_tail(self.path, self._fd)

    def write(self, record: PassRecord | dict) -> None:
        row = asdict(record) if isinstance(record, PassRecord) else record
        data = memoryview((json.dumps(row) + "\n").encode())
        try:
            while data:  # a regular file takes it in one call unless the disk fills up
                data = data[os.write(self._fd, data) :]
        except OSError as e:
            raise write_error(self.path, e) from None

    def close(self, failed: bool = False) -> None:
        """`failed`: the run stopped on an error; a file it created and wrote nothing to is
        removed, so it neither stays behind empty nor blocks the same command run again."""
        if self._fd >= 0:
            empty = os.fstat(self._fd).st_size == 0
            os.close(self._fd)
            self._fd = -1
            if failed and self.created and empty:
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)


def is_records(path: Path) -> bool:
    """Whether `path` is a record file: empty, or its first line a JSON record (`pass_idx`)."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return False
    if not first or (not first.endswith(b"\n") and first.startswith(b'{"pass_idx": ')):
        return True  # empty, or one record torn by its writer's death
    try:
        row = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(row, dict) and "pass_idx" in row


def _cut_torn_tail(path: Path, fd: int) -> None:
    """Truncate `fd` after its last newline, if anything follows it."""
    size = os.fstat(fd).st_size
    end = size
    with open(path, "rb") as f:
        while end > 0:
            start = max(0, end - (1 << 16))
            f.seek(start)
            nl = f.read(end - start).rfind(b"\n")
            if nl >= 0:
                end = start + nl + 1
                break
            end = start
    if end < size:
        os.ftruncate(fd, end)
        print(f"specdec: note: cut a torn final line off {path} before appending", file=sys.stderr)


def read_records(path: Path) -> list[dict]:
    """All whole lines of a record file; a torn last line (killed writer) is skipped, with a note.
    A bad line anywhere else is corruption: SpecdecError naming the line."""
    rows = []
    lines = Path(path).read_text().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # no newline after it: the writer died inside this line
                print(f"specdec: note: skipped a torn final line in {path}", file=sys.stderr)
                break
            raise SpecdecError(
                f"{path}: line {i + 1} is not a JSON record (the file is corrupt, not just "
                "cut short); delete the file and rerun the run that wrote it"
            ) from None
    return rows
