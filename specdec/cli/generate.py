"""`specdec generate`: text from a model whose routed experts stream from disk.

    specdec generate --model tiny --prompt "def fib(n):" --max-tokens 64 --budget 25% --json
    specdec generate --drafter mtp --gamma 3 --records steps.jsonl --profile m4-24gb
    specdec generate --drafter self --gamma auto --records steps.jsonl   # γ chosen per pass

`--model` takes a bundled name, an mlx-lm model directory (packed into the cache on first use)
or a packed directory. With --json the last stdout line is one JSON object:
{"tokens", "text", "stats": {bytes_read, hits, misses, hit_rate, blocked_s, tokens_per_s,
acceptance, accepted_per_drafted, mean_union, draft_bytes_read, verify_bytes_read,
cache_slots, holds_all_experts, peak_rss_bytes, per_token_ms {compute, blocked_on_reads,
reads_overlapped}, miss_gb_per_s, arena_huge_pages (measured share of 2 MiB pages),
cache_counters (prefill included), ...}} where tokens_per_s is decode speed (prefill excluded).
With --gamma auto, stats also hold gamma "auto" and gamma_chosen_hist (passes per γ), and each
--records line its gamma_choice (γ, why, and at a block's first pass every candidate's expected
tokens, modeled seconds and bytes; auto costs passes on the first roofline --profile, else
the default profile, noted on stderr when --profile gave another; stats' gamma_auto_profile names
it). With the self drafter, auto drafts one position at a time and may stop short of its γ
(specdec/gamma/draft_stop.py): stats hold draft_ends (passes per reason a draft ended: cap,
rate, bytes) and each --records line its draft_routing (predicted beside actual reads).
A verify pass computes each position as one-token decoding does (`--verify-form decode`, the
default: greedy output equals plain greedy's); `--verify-form native` runs the family's own
multi-token form (specdec/decode/verify_form.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specdec.cache.spec import PolicySpec, policy_list
from specdec.checkpoint.bundled import DEFAULT_MODEL, DEFAULT_PROMPT
from specdec.cli import settings
from specdec.clock.profiles import BUILTIN_NAMES, get_profile
from specdec.core.errors import SpecdecError
from specdec.core.units import DEFAULT_BUDGET
from specdec.decode.drafters import DrafterSpec, drafter_forms
from specdec.decode.loop import DecodeConfig
from specdec.decode.run import generate
from specdec.decode.verify_form import FORMS
from specdec.gamma.spec import Gamma
from specdec.store.reader import IO_MODES
from specdec.stream.config import StreamConfig
from specdec.stream.loader import load

STREAM, DECODE = StreamConfig(), DecodeConfig()  # the library's defaults are the options'


def check_text(option: str, text: str) -> None:
    """Command-line text must be UTF-8 (a non-UTF-8 argv arrives with surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecdecError(f"{option} is not valid UTF-8 text: pass the prompt in UTF-8") from None


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a streamed model."""
    p.add_argument("--model", default=DEFAULT_MODEL, help="bundled name, mlx-lm dir or packed dir")
    p.add_argument(
        "--budget",
        default=DEFAULT_BUDGET,
        help="expert cache: 512MiB, 2GB, 96slots or N%% of experts",
    )
    p.add_argument(
        "--policy",
        default=str(PolicySpec()),
        help=f"{policy_list()}; +demote, +protect: speculation-aware options (lru+demote+protect)",
    )
    p.add_argument(
        "--hotlist", type=Path, help="a ds4 hotlist: seeds hotness, pins for static (required)"
    )
    p.add_argument("--io", default=STREAM.io, choices=list(IO_MODES))
    p.add_argument("--threads", type=int, default=STREAM.threads, help="reader threads")
    p.add_argument("--verify-checksums", action="store_true", help="crc32 every block read")
    p.add_argument("--lookahead", type=int, default=0, help="router lookahead distance d (0 = off)")
    p.add_argument(
        "--warm", action="store_true", help="read every expert at load (budget must hold all)"
    )


def stream_config(args: argparse.Namespace) -> StreamConfig:
    """The options of add_model_arguments as the loader's one typed value."""
    return settings.stream_config(
        args.budget,
        args.policy,
        args.hotlist,
        args.io,
        args.threads,
        args.verify_checksums,
        args.lookahead,
        args.warm,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt text")
    p.add_argument("--chat", action="store_true", help="apply the tokenizer's chat template")
    p.add_argument("--max-tokens", type=int, default=DECODE.max_tokens)
    p.add_argument("--drafter", default=str(DrafterSpec()), help=", ".join(drafter_forms("listed")))
    p.add_argument(
        "--gamma",
        default=str(DECODE.gamma),
        help="positions per verify pass (1 = plain), or auto: chosen before each pass",
    )
    p.add_argument(
        "--verify-form",
        default=DECODE.verify_form,
        choices=list(FORMS),
        help="decode: verify computes each position as one-token decoding does (greedy output "
        "equals plain greedy's); native: the family's multi-token form",
    )
    p.add_argument("--temp", type=float, default=DECODE.temp, help="0 = greedy")
    p.add_argument("--seed", type=int, default=DECODE.seed)
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        help=f"device profile(s) for modeled time: {', '.join(BUILTIN_NAMES)} or a .yaml/.json file",
    )
    p.add_argument(
        "--routing",
        default="model",
        help="model: the router's experts; trace:DIR: every MoE layer uses a trace's experts "
        "(a calibrated trace's statistics driving the real forward; times, not text)",
    )
    p.add_argument("--records", type=Path, help="write one JSON line per verify pass here")
    p.add_argument("--append", action="store_true", help="add to an existing --records file")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")


def run(args: argparse.Namespace) -> int:
    check_text("--prompt", args.prompt)
    profiles = tuple(get_profile(n) for n in args.profile)
    drafter = DrafterSpec.parse(args.drafter)
    gamma = Gamma.parse(args.gamma)
    routing = settings.routing(args.routing)
    sm = load(args.model, stream_config(args), with_mtp=drafter.needs_mtp)
    try:
        tok = sm.tokenizer
        if args.chat:
            if not getattr(tok, "chat_template", None):
                raise SpecdecError(
                    f"--chat: {sm.path}'s tokenizer has no chat template; drop --chat"
                )
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": args.prompt}], add_generation_prompt=True
            )
        else:
            prompt = sm.encode(args.prompt)
        cfg = DecodeConfig(
            gamma=gamma,
            max_tokens=args.max_tokens,
            temp=args.temp,
            seed=args.seed,
            verify_form=args.verify_form,
        )
        res = generate(
            sm, list(prompt), drafter, cfg, profiles, args.records, append=args.append,
            routing=routing,
        )  # fmt: skip
    finally:
        sm.close()
    s = res.summary
    stats = {
        "bytes_read": s.get("bytes_read", 0),
        "hits": s.get("hits", 0),
        "misses": s.get("misses", 0),
        "hit_rate": s.get("hit_rate"),
        "blocked_s": s.get("blocked_s", 0.0),
        "tokens_per_s": s.get("tokens_per_s"),
        **{k: v for k, v in s.items() if k not in ("hits", "misses")},
    }
    if args.json:
        print(json.dumps({"tokens": res.tokens, "text": res.text, "stats": stats}))
    else:
        print(args.prompt + res.text)
        print(
            f"\n[{len(res.tokens)} tokens, {s.get('tokens_per_s') or 0:.1f} tok/s decode, "
            f"hit rate {s.get('hit_rate') or 0:.3f}, {s.get('bytes_read', 0) / 2**20:.1f} MiB read"
            + (
                f", cache holds all {s['cache_slots']} experts"
                if s.get("holds_all_experts")
                else ""
            )
            + (
                f", arena huge pages {s['arena_huge_pages']:.0%}"
                if s.get("arena_huge_pages") is not None
                else ""
            )
            + f", peak RSS {s['peak_rss_bytes'] / 2**30:.2f} GiB]"
        )
    return 0
