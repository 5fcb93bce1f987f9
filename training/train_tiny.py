"""Train the bundled `tiny` model: a DeepSeek-V3-style MoE with one MTP module, in MLX.

    python -m training.train_tiny                       # train (resumes runs/tiny if present)
    python -m training.train_tiny --time-limit-min 42   # wall-clock cap, summed over resumes
    python -m training.train_tiny --export-only         # quantize + write specdec/models/tiny

Architecture: mlx-lm's `deepseek_v3` (MLA attention, sigmoid routing with the `noaux_tc`
correction bias, one shared expert, dense first layer) plus `specdec.checkpoint.mtp.MTPModule`.
Loss = CE(main, t_{i+1}) + λ·CE(MTP, t_{i+2}) with λ = 0.3 (DeepSeek-V3's early value).
Balance: DeepSeek-V3's auxiliary-loss-free rule; after every step, per MoE layer (MTP's
included) `bias_e += u·sign(mean_load − load_e)`; the bias only changes which experts are
selected, never the gate values (mlx-lm's `group_expert_select` adds it after the sigmoid).

The first run builds the corpus and tokenizer into --out (training/tiny_corpus.py). The lr
follows a cosine over the used fraction of the wall-clock budget (or of --steps, if given).
Seeded (init and every batch derive from --seed and the step), resumable (checkpoint in
--out every --ckpt-every steps; with --steps, an interrupted and resumed run ends with
bitwise the same weights as an uninterrupted one, checked), progress bar, metrics to
<out>/metrics.jsonl and to wandb (offline). The routed MLP and the loss use the exact CPU fast
paths of training/tiny_ops.py. Export quantizes as `mlx_lm.convert -q` does (affine, 4 bits, group 64) and writes
config.json, model.safetensors, mtp.safetensors and the tokenizer into specdec/models/tiny.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from specdec.core.blas import active_blas, ensure_fast_blas

ensure_fast_blas()

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten, tree_unflatten  # noqa: E402
from mlx_lm.models.deepseek_v3 import Model, ModelArgs, MoEGate  # noqa: E402

from specdec.checkpoint.mtp import MTPModule, quantize_with_mtp, save_with_mtp  # noqa: E402
from training.tiny_corpus import VOCAB_SIZE, encode_files, stdlib_corpus, train_tokenizer  # noqa: E402
from training.tiny_ops import SortedSwitchGLU, cross_entropy  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHIP_DIR = REPO / "specdec" / "models" / "tiny"
MTP_WEIGHT = 0.3
HYPERPARAMETERS = ("seed", "batch", "seq", "lr", "warmup", "bias_rate", "time_limit_min")
QUANT = {"group_size": 64, "bits": 4, "mode": "affine"}

TINY_ARGS = ModelArgs(
    model_type="deepseek_v3",
    vocab_size=VOCAB_SIZE,
    hidden_size=192,
    intermediate_size=384,  # dense first layer
    moe_intermediate_size=128,
    num_hidden_layers=5,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=32,
    routed_scaling_factor=2.5,  # DeepSeek-V3's value
    kv_lora_rank=64,
    q_lora_rank=None,
    qk_rope_head_dim=16,
    v_head_dim=32,
    qk_nope_head_dim=32,
    topk_method="noaux_tc",
    scoring_func="sigmoid",
    norm_topk_prob=True,
    n_group=1,
    topk_group=1,
    num_experts_per_tok=4,
    moe_layer_freq=1,
    first_k_dense_replace=1,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
)


class CountingGate(MoEGate):
    """mlx-lm's MoEGate that also keeps its selection counts for the balance update."""

    def __call__(self, x):
        inds, scores = super().__call__(x)  # [B, T, k]
        n = self.n_routed_experts
        loads = (mx.stop_gradient(inds).reshape(-1, 1) == mx.arange(n)).sum(axis=0)  # [N]
        # A plain attribute: an array set the Module way would become a parameter.
        object.__setattr__(self, "loads", loads)
        return inds, scores


class TinyMTP(nn.Module):
    """The main model and its MTP module as one trainable tree."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.main = Model(args)
        self.mtp = MTPModule(args)
        for layer in [*self.main.model.layers, self.mtp.layer]:
            if isinstance(getattr(layer.mlp, "gate", None), MoEGate):
                gate = CountingGate(args)
                # Zero init makes every score 0.5; spread them so routing starts informative.
                gate.weight = mx.random.normal(gate.weight.shape) * args.hidden_size**-0.5
                layer.mlp.gate = gate
                fast = SortedSwitchGLU(
                    args.hidden_size, args.moe_intermediate_size, gate.n_routed_experts
                )
                fast.update(layer.mlp.switch_mlp.parameters())
                layer.mlp.switch_mlp = fast
        self.apply_to_modules(
            lambda _, m: (
                m.freeze(keys=["e_score_correction_bias"], strict=False)
                if isinstance(m, MoEGate)
                else None
            )
        )

    def gates(self) -> list[CountingGate]:
        return [m for _, m in self.named_modules() if isinstance(m, CountingGate)]

    def losses(self, tokens: mx.array) -> tuple[mx.array, mx.array]:
        x, y, z = tokens[:, :-2], tokens[:, 1:-1], tokens[:, 2:]  # [B, T] each
        hidden = self.main.model(x)  # [B, T, H] after the final norm
        main = cross_entropy(self.main.lm_head(hidden), y)
        logits2, _ = self.mtp(
            hidden, y, embed=self.main.model.embed_tokens, head=self.main.lm_head
        )  # [B, T, V]
        return main, cross_entropy(logits2, z)


def batch(data: np.ndarray, seed: int, step: int, bsz: int, seq: int) -> mx.array:
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - seq - 2, size=bsz)
    return mx.array(np.stack([data[s : s + seq + 2] for s in starts]))  # [B, T+2]


def lr_at(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warmup over steps, then cosine to 10% over `progress` in [0, 1].

    progress is the larger of step/--steps and elapsed/--time-limit-min, so a run capped by
    the wall clock still anneals fully, however fast the shared cores happen to be.
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(1.0, progress))))


def prepare_data(out: Path) -> tuple[np.ndarray, np.ndarray]:
    tok_dir = out / "tokenizer"
    if not (out / "train.npy").exists():
        corpus = stdlib_corpus()
        tok = train_tokenizer(corpus, tok_dir)
        np.save(out / "heldout.npy", encode_files(tok, corpus, corpus.heldout))
        np.save(out / "train.npy", encode_files(tok, corpus, corpus.train))
        (out / "corpus.json").write_text(json.dumps(corpus.describe(), indent=2) + "\n")
    return np.load(out / "train.npy"), np.load(out / "heldout.npy")


def save_ckpt(out: Path, model: TinyMTP, opt: optim.Optimizer, state: dict) -> None:
    tmp = out / "ckpt.tmp"
    tmp.mkdir(exist_ok=True)
    mx.save_safetensors(str(tmp / "model.safetensors"), dict(tree_flatten(model.parameters())))
    mx.save_safetensors(str(tmp / "opt.safetensors"), dict(tree_flatten(opt.state)))
    (tmp / "state.json").write_text(json.dumps(state))
    if (out / "ckpt").exists():
        shutil.rmtree(out / "ckpt")
    tmp.rename(out / "ckpt")


def load_ckpt(out: Path, model: TinyMTP, opt: optim.Optimizer) -> dict | None:
    ck = out / "ckpt"
    if not (ck / "state.json").exists():
        return None
    model.load_weights(str(ck / "model.safetensors"))
    opt.state = tree_unflatten(list(mx.load(str(ck / "opt.safetensors")).items()))
    return json.loads((ck / "state.json").read_text())


def train(a: argparse.Namespace) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train_data, _ = prepare_data(out)
    mx.random.seed(a.seed)
    model = TinyMTP(TINY_ARGS)
    opt = optim.AdamW(learning_rate=a.lr, betas=[0.9, 0.95], weight_decay=0.1)
    state = load_ckpt(out, model, opt) or {"step": 0, "elapsed_s": 0.0}
    limit_s = a.time_limit_min * 60
    gates = model.gates()

    def loss_fn(params_model, tokens):
        main, mtp = params_model.losses(tokens)
        return main + MTP_WEIGHT * mtp, (main, mtp, [g.loads for g in gates])

    value_grad = nn.value_and_grad(model, loss_fn)

    def step_fn(tokens, lr):
        (loss, (main, mtp, loads)), grads = value_grad(model, tokens)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        opt.learning_rate = lr
        opt.update(model, grads)
        for g, load in zip(gates, loads, strict=True):
            mean = load.sum() / load.size
            g.e_score_correction_bias = g.e_score_correction_bias + a.bias_rate * mx.sign(
                mean - load.astype(mx.float32)
            )
        return loss, main, mtp, mx.stack(loads)

    import wandb
    from tqdm import tqdm

    os.environ.setdefault("WANDB_MODE", "offline")
    run = wandb.init(project="specdec", dir=str(out), config={**vars(a), **asdict(TINY_ARGS)})
    log = (out / "metrics.jsonl").open("a")
    tokens_per_step = a.batch * a.seq
    try:
        bar = tqdm(initial=state["step"], total=a.steps or None, unit="step")
        t_last = time.perf_counter()
        while state["elapsed_s"] < limit_s and not (a.steps and state["step"] >= a.steps):
            step = state["step"]
            progress = max(step / a.steps if a.steps else 0.0, state["elapsed_s"] / limit_s)
            lr = lr_at(step, progress, a.lr, a.warmup)
            loss, main, mtp, loads = step_fn(batch(train_data, a.seed, step, a.batch, a.seq), lr)
            mx.eval(loss, main, mtp, loads, model.parameters(), opt.state)
            now = time.perf_counter()
            dt, t_last = now - t_last, now
            state["step"], state["elapsed_s"] = step + 1, state["elapsed_s"] + dt
            bar.update(1)
            if (step + 1) % a.log_every == 0 or step == 0:
                ld = np.array(loads)  # [layers, N]
                rec = {
                    "step": step + 1,
                    "tokens": (step + 1) * tokens_per_step,
                    "loss": loss.item(),
                    "main_loss": main.item(),
                    "mtp_loss": mtp.item(),
                    "lr": lr,
                    "tok_per_s": tokens_per_step / dt,
                    "elapsed_s": state["elapsed_s"],
                    "max_over_mean_load": (ld.max(1) / ld.mean(1)).round(3).tolist(),
                }
                log.write(json.dumps(rec) + "\n")
                log.flush()
                run.log({k: v for k, v in rec.items() if k != "max_over_mean_load"}, step=step + 1)
                bar.set_postfix(loss=f"{rec['main_loss']:.3f}", mtp=f"{rec['mtp_loss']:.3f}")
            if (step + 1) % a.ckpt_every == 0:
                save_ckpt(out, model, opt, state)
                t_last = time.perf_counter()  # checkpoint time is not training time
        save_ckpt(out, model, opt, state)
        bar.close()
    finally:
        log.close()
        wandb.finish()


def export(a: argparse.Namespace) -> None:
    """Quantize the trained checkpoint like `mlx_lm.convert -q` and write --ship-dir."""
    out, ship = Path(a.out), Path(a.ship_dir)
    model = TinyMTP(TINY_ARGS)
    model.load_weights(str(out / "ckpt" / "model.safetensors"))
    config = asdict(TINY_ARGS)  # None values too: q_lora_rank=None means "no q LoRA"
    config.update(architectures=["DeepseekV3ForCausalLM"], torch_dtype="float32")
    config.update(eos_token_id=0, bos_token_id=None, tie_word_embeddings=False)
    mtp = model.mtp
    main, config = quantize_with_mtp(model.main, mtp, config, QUANT["group_size"], QUANT["bits"])
    # Plain mlx-lm module classes in the saved names (CountingGate keeps MoEGate's keys).
    save_with_mtp(ship, main, mtp, config)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(out / "tokenizer" / name, ship / name)
    shutil.copyfile(out / "metrics.jsonl", ship / "train_log.jsonl")
    state = json.loads((out / "ckpt" / "state.json").read_text())
    summary = {
        **state,
        "tokens": state["step"] * a.batch * a.seq,
        "train_stream_tokens": int(np.load(out / "train.npy", mmap_mode="r").size),
        "command": "python -m training.train_tiny "
        f"--time-limit-min {a.time_limit_min:g} && python -m training.train_tiny --export-only",
        "hyperparameters": {k: getattr(a, k) for k in HYPERPARAMETERS},
        "mtp_loss_weight": MTP_WEIGHT,
        # What ensure_fast_blas preloaded; active_blas() can name numpy's own bundled copy.
        "blas": os.environ.get("LD_PRELOAD") or active_blas(),
    }
    (ship / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {ship} (blas: {summary['blas']})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "runs" / "tiny"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=0, help="step cap; 0: only the time cap")
    p.add_argument("--time-limit-min", type=float, default=42.0)
    p.add_argument("--bias-rate", type=float, default=2e-2, help="u of the balance update")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--ckpt-every", type=int, default=50)
    p.add_argument("--export-only", action="store_true")
    p.add_argument("--ship-dir", default=str(SHIP_DIR), help="where export writes the model")
    a = p.parse_args()
    if not a.export_only:
        train(a)
    export(a)


if __name__ == "__main__":
    main()
