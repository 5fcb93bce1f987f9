"""What `specdec generate` prints after the text: the run's summary in a few plain lines.

    for line in summary_lines(result.summary):   # specdec.decode.records.summarize's dict
        print(line, file=sys.stderr)

Drafter and γ (for `--gamma auto`: passes per γ chosen, and why, with a sentence when the run
stayed plain), acceptance, passes, bytes per token, hit rate, measured and modeled tokens per
second per `--profile`. The same numbers are in `--json`'s stats; this is their reading.
"""

from __future__ import annotations

from specdec.core.units import format_bytes
from specdec.gamma.chooser import RULE

# why a block of `--gamma auto` passes ran plain (specdec.gamma.chooser.Choice.why)
PLAIN_WHY = {
    "warmup": "the first block is plain, to measure plain decoding's reads",
    "best": "plain decoding was modeled fastest at the acceptance seen so far",
    "bytes": f"drafting was modeled faster but would read more than {1 + RULE:.2f}x plain's "
    "bytes per token (each draft's experts miss the cache; a larger --budget or a drafter "
    "that shares experts helps)",
    "guard": "the run had spent its allowance over plain decoding's bytes or seconds",
    "last": "one token was left",
}
# why the self-draft ended a draft (specdec.gamma.draft_stop)
DRAFT_ENDS = {
    "cap": "reached the chosen γ",
    "rate": "one more position was modeled to lower tokens per second",
    "bytes": "one more position was predicted to read more bytes per token than plain",
}


def _ratio(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def gamma_line(s: dict) -> str:
    """γ as run: a fixed value, or auto's passes per γ and per reason."""
    if s.get("gamma") != "auto":
        g = s.get("gamma", 1)
        return f"γ {g} ({'plain decoding' if g == 1 else f'{g - 1} drafts per verify pass'})"
    hist = s.get("gamma_chosen_hist", [])
    per_gamma = ", ".join(f"γ={g}: {n:,}" for g, n in enumerate(hist) if n)
    why = ", ".join(f"{k} {n:,}" for k, n in s.get("gamma_why", {}).items())
    line = f"γ auto, passes per γ: {per_gamma}; chosen because: {why}"
    if sum(hist[2:]) == 0:  # every pass plain: say why in words
        top = next(iter(s.get("gamma_why", {})), "")
        line += f"\n  stayed plain: mostly {top!r}: {PLAIN_WHY.get(top, top)}"
    return line


def _cache_size(s: dict) -> str:
    """The slots the budget gave (a share of experts is a different count in each command:
    docs/commands.md), or that the cache holds every expert."""
    if "cache_slots" not in s:
        return ""
    if s.get("holds_all_experts"):
        return f", cache holds all {s['cache_slots']:,} experts"
    return f", cache {s['cache_slots']:,} slots"


def summary_lines(s: dict) -> list[str]:
    """The summary of one run, one fact per line (s: specdec.decode.records.summarize's dict)."""
    if not s.get("passes"):
        return ["no tokens decoded (0 passes)"]
    committed, passes = s["committed"], s["passes"]
    lines = [
        f"drafter {s.get('drafter', 'none')}, {gamma_line(s)}",
        f"{committed:,} tokens after the prefill's first, in {passes:,} verify passes "
        f"({committed / passes:.2f} tokens per pass); {s['drafted']:,} drafted, "
        f"{s['accepted']:,} accepted"
        + (
            f": acceptance α {_ratio(s.get('acceptance'))} (accepted / judged), "
            f"accepted / drafted {_ratio(s.get('accepted_per_drafted'))}"
            if s["drafted"]
            else ""
        ),
    ]
    ends = s.get("draft_ends")
    if ends:
        lines.append(
            "drafts ended: " + ", ".join(f"{n:,} {DRAFT_ENDS.get(k, k)}" for k, n in ends.items())
        )
    lines.append(
        f"read {format_bytes(s['bytes_read'])} of experts ({format_bytes(s['bytes_per_token'])} "
        f"per token; drafts {format_bytes(s['draft_bytes_read'])}), cache hit rate "
        f"{_ratio(s.get('hit_rate'), 3)}" + _cache_size(s)
    )
    speed = f"decode {_ratio(s.get('tokens_per_s'), 1)} tok/s measured (prefill excluded)"
    modeled = [
        f"{k.split('/', 1)[1]} {_ratio(v, 1)} tok/s"
        for k, v in s.items()
        if k.startswith("modeled_tokens_per_s/")
    ]
    lines.append(speed + (f"; modeled: {', '.join(modeled)}" if modeled else ""))
    tail = f"peak RSS {s['peak_rss_bytes'] / 2**30:.2f} GiB"
    if s.get("arena_huge_pages") is not None:
        tail += f", arena huge pages {s['arena_huge_pages']:.0%}"
    if s.get("staging_huge_pages") is not None:
        tail += f", staging huge pages {s['staging_huge_pages']:.0%}"
    lines.append(tail)
    return lines
