"""`specdec generate`: text from a model whose routed experts stream from disk.

    specdec generate --model tiny --prompt "def fib(n):" --max-tokens 64 --budget 25% --json
    specdec generate --drafter mtp --gamma 3 --records steps.jsonl --profile m4-24gb
    specdec generate --drafter self --gamma auto --records steps.jsonl   # γ chosen per pass

`--model` takes a bundled name, an mlx-lm model directory (packed into the cache on first use),
a packed directory, or a Hugging Face repo id fetched as mlx-lm fetches it (`--revision`; the hub
cache, HF_HUB_OFFLINE). mlx-lm's flags work as aliases: -p, -m (max tokens), --draft-model PATH
(--drafter draft:PATH), --num-draft-tokens N (--gamma N+1), --ignore-chat-template; the chat
template is applied by default when the tokenizer has one, as mlx-lm applies it. The text streams to stdout as each verify pass commits tokens (as
mlx-lm's generate); the summary follows on stderr (specdec/cli/generate_summary.py: drafter, γ
or auto's passes per γ and why, acceptance, bytes per token, hit rate, modeled tok/s per
--profile). With --json nothing streams, and the last stdout line is one JSON object:
{"tokens", "text", "stats": {bytes_read, hits, misses, hit_rate, blocked_s, tokens_per_s,
acceptance, accepted_per_drafted, mean_union, draft_bytes_read, verify_bytes_read,
cache_slots, holds_all_experts, peak_rss_bytes, per_token_ms {compute, blocked_on_reads,
reads_overlapped}, miss_gb_per_s, arena_huge_pages and staging_huge_pages (measured shares
of 2 MiB pages; staging: null where no block is staged), cache_counters (prefill included),
...}} where tokens_per_s is decode speed (prefill excluded).
With --gamma auto, stats also hold gamma "auto", gamma_chosen_hist (passes per γ) and
gamma_why (passes per reason, a block's held passes under its first's), and each
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
import sys
from pathlib import Path

from specdec.cache.spec import PolicySpec, policy_list
from specdec.checkpoint.bundled import DEFAULT_MODEL, DEFAULT_PROMPT
from specdec.cli import output_path, settings
from specdec.cli.generate_summary import summary_lines
from specdec.clock.profiles import BUILTIN_NAMES, get_profile
from specdec.core.errors import SpecdecError
from specdec.core.progress import progress
from specdec.core.units import DEFAULT_BUDGET
from specdec.decode.drafters import DrafterSpec, drafter_forms, drafting_usage
from specdec.decode.loop import DecodeConfig
from specdec.decode.verify_form import FORMS
from specdec.gamma.spec import Gamma
from specdec.store.reader import IO_MODES
from specdec.stream.config import StreamConfig

STREAM, DECODE = StreamConfig(), DecodeConfig()  # the library's defaults are the options'


def check_text(option: str, text: str) -> None:
    """Command-line text must be UTF-8 (a non-UTF-8 argv arrives with surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecdecError(f"{option} is not valid UTF-8 text: pass the prompt in UTF-8") from None


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a streamed model."""
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="bundled name, mlx-lm dir, packed dir, or a Hugging Face repo id (ORG/NAME: the hub "
        "cache as mlx-lm uses it; HF_HUB_OFFLINE, HF_HUB_CACHE honoured)",
    )
    p.add_argument("--revision", help="of a Hugging Face repo id: branch, tag or commit")
    p.add_argument(
        "--budget",
        default=DEFAULT_BUDGET,
        help="expert cache: 512MiB, 2GB, 96slots or N%% of experts",
    )
    p.add_argument(
        "--policy",
        default=str(PolicySpec()),
        help=f"{policy_list()}; +demote, +protect, +scratch: speculation-aware options "
        "(lru+demote+protect)",
    )
    p.add_argument(
        "--hotlist", type=Path, help="a ds4 hotlist: seeds hotness, pins for static (required)"
    )
    p.add_argument(
        "--io",
        default=STREAM.io,
        choices=list(IO_MODES),
        help="how expert blocks are read: direct bypasses the page cache (O_DIRECT), "
        "buffered goes through it, pinned reads O_DIRECT into page-locked memory and copies "
        "to the GPU (CUDA); default: pinned on MLX's CUDA backend, direct elsewhere",
    )
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
    p.add_argument("--prompt", "-p", default=DEFAULT_PROMPT, help="prompt text")
    # the chat template as mlx-lm applies it: by default when the tokenizer has one
    chat = p.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        action="store_const",
        const=True,
        dest="chat",
        help="apply the tokenizer's chat template, an error if it has none (default: applied "
        "when it has one, as mlx-lm does)",
    )
    chat.add_argument(
        "--ignore-chat-template",
        "--no-chat",
        action="store_const",
        const=False,
        dest="chat",
        help="the raw prompt, without the chat template (mlx-lm's flag)",
    )
    p.add_argument(
        "--max-tokens", "-m", type=int, default=DECODE.max_tokens, help="tokens to generate at most"
    )
    p.add_argument("--drafter", default=str(DrafterSpec()), help=", ".join(drafter_forms("listed")))
    p.add_argument(
        "--draft-model", metavar="PATH", help="mlx-lm's flag: the same as --drafter draft:PATH"
    )
    p.add_argument(
        "--gamma",
        default=str(DECODE.gamma),
        help="positions per verify pass (1 = plain), or auto: chosen before each pass",
    )
    p.add_argument(
        "--num-draft-tokens",
        type=int,
        metavar="N",
        help="mlx-lm's flag: N drafted tokens per pass, the same as --gamma N+1",
    )
    p.add_argument(
        "--verify-form",
        default=DECODE.verify_form,
        choices=list(FORMS),
        help="decode: verify computes each position as one-token decoding does (greedy output "
        "equals plain greedy's); native: the family's multi-token form",
    )
    p.add_argument("--temp", type=float, default=DECODE.temp, help="0 = greedy")
    p.add_argument(
        "--seed", type=int, default=DECODE.seed, help="sampling (--temp > 0) and drafters' seed"
    )
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
    p.add_argument("--records", type=output_path, help="write one JSON line per verify pass here")
    p.add_argument("--append", action="store_true", help="add to an existing --records file")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")


def drafter_and_gamma(args: argparse.Namespace) -> tuple[DrafterSpec, Gamma]:
    """--drafter and --gamma, or mlx-lm's spellings of them (--draft-model, --num-draft-tokens)."""
    drafter = DrafterSpec.parse(args.drafter)
    if args.draft_model is not None:
        if args.drafter != str(DrafterSpec()):
            raise SpecdecError("give --drafter or --draft-model (mlx-lm's spelling), not both")
        drafter = DrafterSpec.from_fields({"name": "draft", "path": args.draft_model})
    if args.num_draft_tokens is None:
        gamma, flag = Gamma.parse(args.gamma), f"--gamma {args.gamma}"
    elif args.gamma != str(DECODE.gamma):
        raise SpecdecError("give --gamma or --num-draft-tokens (mlx-lm's spelling), not both")
    elif args.num_draft_tokens < 0:
        raise SpecdecError(f"--num-draft-tokens {args.num_draft_tokens}: give 0 or more")
    else:
        gamma, flag = (
            Gamma(args.num_draft_tokens + 1),
            f"--num-draft-tokens {args.num_draft_tokens}",
        )
    if drafter.name == "none" and gamma != Gamma(1):
        raise SpecdecError(
            f"{flag} with no drafter: nothing would draft, every pass plain; add --drafter "
            f"({drafting_usage()}) or drop {flag.split()[0]}"
        )
    return drafter, gamma


def chat_prompt(tok, text: str, path) -> list[int]:
    """The prompt's ids through the tokenizer's chat template; a template that does not
    compile or that raises (jinja2's raise_exception) is the checkpoint's, not a bug here."""
    from jinja2.exceptions import TemplateError

    try:
        return tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )
    except TemplateError as e:
        raise SpecdecError(
            f"the chat template of {path} (tokenizer_config.json or chat_template.jinja) "
            f"fails: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; fix the "
            "template or pass --ignore-chat-template"
        ) from None


def run(args: argparse.Namespace) -> int:
    check_text("--prompt", args.prompt)
    profiles = tuple(get_profile(n) for n in args.profile)
    drafter, gamma = drafter_and_gamma(args)
    routing = settings.routing(args.routing)
    from specdec.decode.run import generate  # here: these import mlx-lm (seconds; --help)
    from specdec.stream.loader import load

    sm = load(args.model, stream_config(args), with_mtp=drafter.needs_mtp, revision=args.revision)
    try:
        tok = sm.tokenizer
        has_template = bool(getattr(tok, "chat_template", None))
        if args.chat and not has_template:
            raise SpecdecError(f"--chat: {sm.path}'s tokenizer has no chat template; drop --chat")
        if has_template and args.chat is not False:
            prompt = chat_prompt(tok, args.prompt, sm.path)
        else:
            prompt = sm.encode(args.prompt)
        cfg = DecodeConfig(
            gamma=gamma,
            max_tokens=args.max_tokens,
            temp=args.temp,
            seed=args.seed,
            verify_form=args.verify_form,
        )
        # text streams to stdout; with --json a bar on stderr counts the tokens instead
        stream = None if args.json else TextStream(tok, args.prompt)
        bar = progress(total=args.max_tokens, desc="generate", unit="tok") if args.json else None
        res = generate(
            sm, list(prompt), drafter, cfg, profiles, args.records, append=args.append,
            routing=routing, on_tokens=stream.write if stream else lambda t: bar.update(len(t)),
        )  # fmt: skip
        (stream or bar).close()
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
    else:  # the text went to stdout as it came; the summary to stderr, as mlx-lm's stats
        print("=" * 10, *summary_lines(s), sep="\n", file=sys.stderr)
    return 0


class TextStream:
    """Committed tokens to stdout as each verify pass commits them, through mlx-lm's streaming
    detokenizer (a multi-byte character waits for its last token), after the prompt. The prompt
    goes out with the first tokens, not before: an error found while the run starts (a records
    file, a draft model, a trace) is then the only line, not glued to the echoed prompt."""

    def __init__(self, tokenizer, prompt: str):
        self.detok = tokenizer.detokenizer
        self.detok.reset()
        self.prompt: str | None = prompt  # not written yet

    def write(self, tokens: list[int]) -> None:
        for t in tokens:
            self.detok.add_token(t)
        self._out(self.detok.last_segment)

    def close(self) -> None:
        self.detok.finalize()
        self._out(self.detok.last_segment + "\n")

    def _out(self, text: str) -> None:
        if self.prompt is not None:
            text, self.prompt = self.prompt + text, None
        sys.stdout.write(text)
        sys.stdout.flush()
