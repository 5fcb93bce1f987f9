"""A profile that brackets runs: the mean of one machine's profiles measured before and after them.

    from specdec.clock.bracket import bracket
    mid = bracket([before, after])          # DeviceProfiles of one machine, in the order measured
    mid.name                                # "before+after"

A profile is one moment of its machine. The lent GPU machines' virtual disk drifts by a quarter
within minutes: the thirty-eighth CUDA session's profile read 2.12 GB/s before its runs, the runs
1.75-1.79, a second profile right after them 1.46-1.61 (docs/results/cuda.md). Priced on either
moment alone the model missed the runs' time per token by −17% and +25%; what the runs met lies
between. So, as a speculative run is measured against plain runs on either side of it, a
session's runs can be modeled on profiles on either side of them: every number the two measured
(bandwidths, per-call costs, each read and landing curve at every point either has, interpolated
as the model reads a curve) their mean; what describes the machine rather than measures it (its
compute kind, block size, reads in flight, whether reads overlap, the verify's pricing) must be
the same in all, or they are not one machine's. `read_latency_s` is kept below what one read of
the mean curve takes (`capped_latency`). A bracket assumes the disk moved evenly between the two:
it is a measurement's protocol, not a fit (nothing in it is taken from the runs). Tested on runs
it was not built on (the thirty-ninth session), it held at 10% (−2.4% median) and failed at 9 GB
(−25%), where the disk read slower between the two profiles than at either.

Used by `python -m analysis.cuda` (a session's profile "A+B"). Tests: `pytest
tests/clock/test_bracket.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from specdec.clock.profiles import DeviceProfile, capped_latency, interpolate
from specdec.core.errors import SpecdecError

# what describes the machine and its runtime: one machine's profiles agree on these
ALIKE = ("compute", "read_block_bytes", "reads_in_flight", "overlap_reads", "batched_verify")
CURVES = ("read_curve", "land_curve")
SKIP = ("name", "description", "sources", *ALIKE, *CURVES)


def bracket(profiles: Sequence[DeviceProfile]) -> DeviceProfile:
    """The mean of `profiles` (module doc), named by theirs joined with "+"."""
    if len(profiles) < 2:
        raise SpecdecError("a bracket needs two or more profiles of one machine")
    first = profiles[0]
    name = "+".join(p.name for p in profiles)
    for f in ALIKE:
        seen = {getattr(p, f) for p in profiles}
        if len(seen) > 1:
            raise SpecdecError(
                f"profiles {name} differ in {f} ({sorted(map(str, seen))}): they are not one "
                "machine's; bracket profiles measured on the same machine and runtime"
            )
    means: dict = {}
    for f in fields(DeviceProfile):
        if f.name in SKIP:
            continue
        values = [getattr(p, f.name) for p in profiles]
        # land_gbps may be None (no landing measured): a mean only where every profile has one
        means[f.name] = None if None in values else sum(values) / len(values)
    for f in CURVES:
        curves = [getattr(p, f) for p in profiles]
        if not any(curves):  # no landing curve: land_gbps stands for it in every profile
            means[f] = ()
            continue
        if not all(curves):
            raise SpecdecError(
                f"profiles {name}: some have a {f} and some none; bracket profiles measured alike"
            )
        points = sorted({n for c in curves for n, _ in c})
        means[f] = tuple((n, sum(interpolate(c, n) for c in curves) / len(curves)) for n in points)
    means["read_latency_s"] = capped_latency(
        means["read_latency_s"], means["read_curve"], first.read_block_bytes
    )
    names = " and ".join(p.name for p in profiles)
    sources = {f: f"the mean of {names}'s (a bracket: specdec.clock.bracket)" for f in means}
    return replace(
        first,
        name=name,
        description=f"{name}: the mean of {names}, measured on one machine around its runs",
        sources=sources,
        **means,
    )
