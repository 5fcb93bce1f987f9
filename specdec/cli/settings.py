"""Text from the edge (argv, Hydra's composed config) made into the library's typed values, once.

    stream = stream_config(budget="10%", policy="lru+protect", hotlist=None, io="direct")
    sm = load("tiny", stream)

`specdec generate` (specdec/cli/generate.py) and `specdec-exp` (experiments/tasks/_decode.py)
both build their StreamConfig here, from their own spellings of the same settings.
"""

from __future__ import annotations

from pathlib import Path

from specdec.cache.spec import PolicySpec
from specdec.core.errors import SpecdecError
from specdec.core.units import Budget
from specdec.stream.config import StreamConfig
from specdec.trace.format import Trace, load_trace, read_hotlist


def policy_options(policy: PolicySpec, hotlist: Path | None) -> dict:
    """The policy's options: the hotlist's (layer, expert) pairs, hottest first."""
    if hotlist is None:
        if policy.needs_hotlist:
            raise SpecdecError(
                f"--policy {policy} pins a hotlist: pass --hotlist FILE (a ds4 hotlist, e.g. "
                "from `specdec trace hotlist TRACE --out FILE`)"
            )
        return {}
    return {"hotlist": [(e.layer, e.expert) for e in read_hotlist(hotlist)]}


def stream_config(
    budget: str,
    policy: str,
    hotlist: str | Path | None = None,
    io: str | None = None,
    threads: int = 8,
    verify_checksums: bool = False,
    lookahead: int = 0,
    warm: bool = False,
) -> StreamConfig:
    """How the experts stream, from the settings' text (a budget and a policy are parsed here)."""
    spec = PolicySpec.parse(policy)
    return StreamConfig(
        budget=Budget.parse(budget),
        policy=spec,
        policy_options=policy_options(spec, Path(hotlist) if hotlist else None),
        io=io,
        threads=threads,
        verify_checksums=verify_checksums,
        lookahead=lookahead,
        warm=warm,
    )


def routing(text: str) -> Trace | None:
    """`model` (the router's own) or `trace:DIR` (specdec.decode.trace_routing)."""
    if text == "model":
        return None
    kind, _, path = text.partition(":")
    if kind != "trace" or not path:
        raise SpecdecError(
            f"--routing {text!r}: write model (the router's experts) or trace:DIR (a trace's)"
        )
    return load_trace(path)
