"""Hot/cold mixed precision against all-hot: bytes, hit rate at equal budget, and quality.

    python benchmarks/bench_mixed.py --model tiny                     # bundled model (has MTP)
    python benchmarks/bench_mixed.py --model DIR --name qwen3-2l      # e.g. make-random --like

1. Pack the model as it is (all-hot) and profile a hotlist on the shipped `profile` prompts
   (whole, or their first --profile-cut tokens):
   routing counts of greedy decoding (with the MTP drafter where the model has one, so its MTP
   layer's experts are counted too); hot = the `--hot-share` most used (layer, expert) pairs.
2. Pack it again with `--cold-bits` and that hotlist (store/requantize.py).
   A second mixed pack records the share of accesses the hotlist took in the profile
   (`--hot-access-share`), which splits a budget over the two block sizes by accesses x size
   instead of by bytes (store/pools.py).
3. On the `heldout` prompts (disjoint from `profile`), teacher-forced one token at a time as
   decode reads: for each budget, a share of the all-hot experts' bytes given to every pack as
   the same number of bytes, LRU, one cache warm across the prompts: bytes read per token and hit
   rate (a mixed pack splits its bytes over its two pools, store/pools.py). From the first
   budget's pass, which computes what any budget does (streamed == resident): held-out loss (mean
   NLL of the next prompt token) and top-1 agreement of mixed with all-hot.
4. MTP acceptance, greedy, γ = 2 and 4, on the held-out prompts (models with an MTP head).

Reads go through the page cache (--io buffered): bytes and hit rates do not depend on it, and
no speed is reported. Writes JSON to benchmarks/results/mixed-NAME.json (config, seed,
versions, machine). Packs go under --work (default: a temporary directory, removed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from specdec.core.machine import machine_info, write_result  # noqa: E402
from specdec.decode.drafters import DrafterSpec  # noqa: E402
from specdec.decode.loop import Decode, DecodeConfig  # noqa: E402
from specdec.decode.run import generate  # noqa: E402
from specdec.pack.pack import pack  # noqa: E402
from specdec.store.layout import ExpertIndex  # noqa: E402
from specdec.stream.loader import load, resolve  # noqa: E402
from specdec.trace.format import HotlistEntry, write_hotlist  # noqa: E402
from specdec.trace.prompts import load_prompts  # noqa: E402


def profile_hotlist(packed: Path, prompts: list[list[int]], share: float, tokens: int):
    """(layer, expert) pairs by routing count over greedy decodes of `prompts` (prefill,
    drafts and verify passes alike), the top `share` of all routed experts."""
    sm = load(packed, budget="100%", io="buffered")
    counts: Counter = Counter()

    def record(layer: int, idx: np.ndarray, phase: str) -> None:
        counts.update((layer, int(e)) for e in idx.reshape(-1).tolist())

    spec = DrafterSpec.parse("mtp" if sm.mtp is not None else "none")
    cfg = DecodeConfig(gamma=2, max_tokens=tokens)
    try:
        for text in prompts:  # Decode's own loop: generate() owns the recorder slot
            run = Decode(sm, text, spec.build(sm, None, 0), cfg, (), frozenset())
            sm.streamer.recorder = record
            for _ in run.passes():
                pass
            sm.streamer.recorder = None
        n_experts = sum(ly.n_experts for ly in sm.streamer.index.layers.values())
    finally:
        sm.close()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    top = ranked[: max(1, round(share * n_experts))]
    return [pair for pair, _ in top], sum(n for _, n in top) / sum(counts.values())


def teacher_forced(packed: Path, budget: str, prompts: list[list[int]], keep_logits: bool):
    """Bytes per token and hit rate, one token at a time; logits [T, V] per prompt if asked."""
    sm = load(packed, budget=budget, io="buffered", with_mtp=False)
    logits, n = [], 0
    try:
        for toks in prompts:
            cache, rows = make_prompt_cache(sm.model), []
            for t in toks[:-1]:
                out = sm.model(mx.array([[t]]), cache=cache)[0, -1].astype(mx.float32)  # [V]
                rows.append(out)
                n += 1
            if keep_logits:
                logits.append(np.array(mx.stack(rows)))
            else:
                mx.eval(rows)
        c, plan = sm.streamer.cache, sm.plan.stats()
        row = {
            "budget": budget,
            "tokens": n,
            "bytes_per_token": sm.streamer.reader.stats.bytes_read / n,
            "hit_rate": c.hits / c.accesses,
            **plan,
        }
        if hasattr(c, "hot"):
            row["hot_hit_rate"] = c.hot.hits / max(1, c.hot.accesses)
            row["cold_hit_rate"] = c.cold.hits / max(1, c.cold.accesses)
            row["cold_share_of_accesses"] = c.cold.accesses / c.accesses
    finally:
        sm.close()
    return row, logits


def quality(prompts: list[list[int]], hot: list[np.ndarray], mixed: list[np.ndarray]) -> dict:
    """Held-out loss of both, top-1 agreement and mean KL(all-hot || mixed) per position."""
    nll = {"all_hot": [], "mixed": []}
    agree, kl = [], []
    for toks, a, b in zip(prompts, hot, mixed, strict=True):
        target = np.array(toks[1:])
        for name, z in (("all_hot", a), ("mixed", b)):
            logp = z - np.logaddexp.reduce(z, axis=-1, keepdims=True)
            nll[name] += (-logp[np.arange(len(target)), target]).tolist()
        agree += (a.argmax(-1) == b.argmax(-1)).tolist()
        pa = a - np.logaddexp.reduce(a, axis=-1, keepdims=True)
        pb = b - np.logaddexp.reduce(b, axis=-1, keepdims=True)
        kl += (np.exp(pa) * (pa - pb)).sum(-1).tolist()
    return {
        "heldout_loss_all_hot": float(np.mean(nll["all_hot"])),
        "heldout_loss_mixed": float(np.mean(nll["mixed"])),
        "top1_agreement": float(np.mean(agree)),
        "kl_all_hot_to_mixed": float(np.mean(kl)),
        "positions": len(agree),
    }


def mtp_acceptance(packed: Path, prompts: list[list[int]], gamma: int, tokens: int) -> dict:
    sm = load(packed, budget="100%", io="buffered")
    try:
        if sm.mtp is None:
            return {}
        acc = rej = drafted = 0
        for toks in prompts:
            res = generate(sm, toks, "mtp", DecodeConfig(gamma=gamma, max_tokens=tokens))
            acc += sum(r.accepted for r in res.records)
            rej += sum(1 for r in res.records if r.accepted < r.drafted)
            drafted += sum(r.drafted for r in res.records)
    finally:
        sm.close()
    return {"acceptance": acc / max(1, acc + rej), "accepted_per_drafted": acc / max(1, drafted)}


def expert_bytes(packed: Path, layers: list[int]) -> int:
    index = ExpertIndex.load(packed)
    return sum(int(index.layers[lid].sizes().sum()) for lid in layers)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="bundled name or mlx-lm model directory")
    ap.add_argument("--name", default=None, help="results name (default: the model's)")
    ap.add_argument("--cold-bits", type=int, default=2)
    ap.add_argument("--hot-share", type=float, default=0.25, help="share of experts kept hot")
    ap.add_argument("--budgets", default="10,25,50,100", help="%% of all-hot expert bytes")
    ap.add_argument("--prompts", type=int, default=20, help="held-out (and profile) prompts")
    ap.add_argument("--positions", type=int, default=64, help="tokens per held-out prompt")
    ap.add_argument("--profile-tokens", type=int, default=32)
    ap.add_argument("--profile-cut", type=int, default=None, help="profile prompt tokens")
    ap.add_argument("--mtp-tokens", type=int, default=32)
    ap.add_argument(
        "--packs", default="all_hot,mixed,mixed_access_split", help="which packs to measure"
    )
    ap.add_argument("--work", type=Path, default=None, help="where the packs go (kept)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    src = resolve(args.model)
    name = args.name or src.name
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-mixed-"))
    t0 = time.perf_counter()
    try:
        all_hot = pack(src, work / "all-hot", force=True)
        sm = load(all_hot, budget="100%", io="buffered", with_mtp=False)
        cut = args.positions + 1
        heldout = [t for t in (sm.encode(x)[:cut] for x in load_prompts("heldout")) if len(t) > 1]
        # a long prefill costs like decoding it: --profile-cut shortens the profile's prompts
        profile = [sm.encode(x)[: args.profile_cut] for x in load_prompts("profile")]
        main_layers = sm.main_moe_layers
        sm.close()
        heldout, profile = heldout[: args.prompts], profile[: args.prompts]
        hot, access_share = profile_hotlist(all_hot, profile, args.hot_share, args.profile_tokens)
        write_hotlist([HotlistEntry(lay, e, 0, 0.0) for lay, e in hot], work / "hot.txt")
        mixed = pack(src, work / "mixed", True, cold_bits=args.cold_bits, hotlist=hot)
        # the same blocks, the budget split by the profiled access share (store/pools.py)
        split = pack(src, work / "mixed-split", True, None, args.cold_bits, hot, access_share)
        full = expert_bytes(all_hot, main_layers)
        rows, logits = [], {}
        budgets = [float(b) for b in args.budgets.split(",")]
        for pct in budgets:
            budget = str(int(full * pct / 100))  # bytes: the same for both packs
            packs = {"all_hot": all_hot, "mixed": mixed, "mixed_access_split": split}
            for kind in args.packs.split(","):
                packed = packs[kind]
                # every budget computes the same logits (streamed == resident): keep the first's
                row, z = teacher_forced(packed, budget, heldout, keep_logits=pct == budgets[0])
                rows.append({"kind": kind, "budget_pct": pct, **row})
                logits[kind] = z or logits.get(kind)
                print(json.dumps(rows[-1]), flush=True)
        mixed_kind = next(k for k in logits if k != "all_hot")  # the same blocks either split
        result = {
            "model": str(src),
            "name": name,
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "hot_experts": len(hot),
            "hot_access_share": access_share,
            "experts": sum(ly.n_experts for ly in ExpertIndex.load(all_hot).layers.values()),
            "expert_bytes_all_hot": full,
            "expert_bytes_mixed": expert_bytes(mixed, main_layers),
            "rows": rows,
            "quality": quality(heldout, logits["all_hot"], logits[mixed_kind]),
            "mtp": {
                kind: {g: mtp_acceptance(p, heldout, g, args.mtp_tokens) for g in (2, 4)}
                for kind, p in (("all_hot", all_hot), ("mixed", mixed))
            },
            "versions": {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__},
            "machine": machine_info(),
            "seconds": time.perf_counter() - t0,
        }
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    out = args.out or Path(__file__).parent / "results" / f"mixed-{name}.json"
    model_dir = {src: "MODEL_DIR"} if Path(args.model).is_dir() else {}  # not a bundled name
    write_result(out, result, {work: "WORK", **model_dir})
    print(json.dumps({k: result[k] for k in ("quality", "mtp")}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
