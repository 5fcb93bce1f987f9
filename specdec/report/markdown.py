"""The report as markdown: tables to paste into an issue tracker, with the figures linked.

`render(root, report)` is called by `specdec.report.build_report`; numbers keep four
significant digits (no exponents; thousands separated), missing values print as an em dash.
Columns the glossary (COLUMNS) knows get a plain-English header and a definition under their
table.
"""

from __future__ import annotations

import os
from pathlib import Path

SPEEDUP_BYTES = (
    "speed-up vs γ=1 (bytes)",
    "bytes per token of the γ = 1 jobs / this job's: the speed-up while streaming experts bounds "
    "decoding",
)
# key -> (header, definition); a key `name/PROFILE` is looked up as `name/`
COLUMNS: dict[str, tuple[str, str]] = {
    "gamma": ("γ", "positions per verify pass; γ = 1 is plain decoding"),
    "passes": ("passes", "verify passes (forward passes of the target model)"),
    "committed": ("tokens", "tokens committed after the prefill's first"),
    "acceptance": (
        "acceptance α",
        "accepted / (accepted + rejected), the α of E = (1 − α^γ)/(1 − α); a pass rejects at "
        "most one draft and the drafts after it are never judged",
    ),
    "accepted_per_drafted": (
        "accepted / drafted",
        "accepted over every drafted token, never-judged ones included: below α whenever a "
        "pass rejects",
    ),
    "mean_accepted_length": ("accepted per pass", "drafts accepted per verify pass"),
    "tokens_per_pass": ("tokens per pass", "committed tokens per verify pass"),
    "mean_union": (
        "union (experts)",
        "distinct routed experts per MoE layer per verify pass, rejected drafts included",
    ),
    "bytes_per_token": (
        "bytes per token",
        "expert bytes read from disk per committed token, the drafts' reads included",
    ),
    "hit_rate": ("hit rate", "expert cache hits / accesses"),
    "tokens_per_s": (
        "tok/s measured",
        "decode tokens per second on this machine, prefill excluded",
    ),
    "modeled_tokens_per_s/": ("tok/s modeled", "tokens per second the device model gives"),
    "speedup_vs_plain": SPEEDUP_BYTES,
    "speedup_bytes": SPEEDUP_BYTES,  # the speculation table's name for the same column
    "model_speedup": (
        "union model speed-up",
        "E(α, γ) / (U(γ)/U(1)): what the unions alone predict, every selected expert a read",
    ),
    "residual": (
        "measured − model",
        "negative where cache misses, not unions, cost the difference: a wider pass evicts "
        "experts the next tokens need again",
    ),
    "speedup_modeled/": ("speed-up vs γ=1, modeled", "modeled tok/s / the γ = 1 jobs' modeled"),
    "verify_union": ("verify union", "union of a real verify pass (rejected drafts included)"),
    "trace_union": ("trace union", "union of γ consecutive committed tokens' experts"),
    "ratio": ("verify / trace", "verify union / trace union"),
    "layer_min": ("fewest (layer)", "the smallest mean union of one MoE layer"),
    "layer_max": ("most (layer)", "the largest mean union of one MoE layer"),
    "rmse": ("rmse (experts)", "root-mean-square of measured − fit over the γ measured"),
    "cost": ("cost", "U(γ)/U(1): a verify pass's expert reads in plain passes"),
    "ceiling (α=1)": ("ceiling (α=1)", "the speed-up if every draft were accepted: γ / cost"),
    "break-even α": ("break-even α", "the acceptance below which this γ is slower than γ = 1"),
}


def fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4g}" if v == 0 or abs(v) >= 1e-3 else f"{v:.2e}"
    return str(v)


def _column(key: str) -> tuple[str, str] | None:
    name, slash, profile = key.partition("/")
    known = COLUMNS.get(f"{name}/" if slash else key)
    if known and slash:
        return f"{known[0]} ({profile})", f"{known[1]} on profile {profile}"
    return known


def table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "_(no rows)_\n"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    named = {c: _column(c) for c in columns}
    head = "| " + " | ".join(named[c][0] if named[c] else c for c in columns) + " |"
    rule = "|" + "|".join("---:" if _numeric(rows, c) else "---" for c in columns) + "|"
    body = ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    terms = [f"**{n[0]}**: {n[1]}" for n in dict.fromkeys(v for v in named.values() if v)]
    notes = ["", *[f"- {t}" for t in terms]] if terms else []
    return "\n".join([head, rule, *body, *notes]) + "\n"


def _numeric(rows: list[dict], c: str) -> bool:
    return all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows)


def _image(path: Path, out_dir: Path, caption: str) -> str:
    return f"![{caption}]({path.relative_to(out_dir)})\n"


def render(root: Path, report) -> str:
    jobs = [j for st in report.settings for j in st.jobs] + report.others
    meta = jobs[0].meta
    v = meta.get("versions", {})
    parts = [
        f"# specdec report: `{root}`\n",
        f"{len(jobs)} finished jobs. Measured on {meta.get('host')} ({meta.get('platform')}), "
        f"BLAS {meta.get('blas')}, specdec {v.get('specdec')}, mlx {v.get('mlx')}, "
        f"mlx-lm {v.get('mlx-lm')}, git {str(meta.get('git_commit'))[:10]}. "
        "Union: distinct routed experts per MoE layer per pass (rejected drafts included); "
        "acceptance α = accepted / (accepted + rejected).\n",
    ]
    for st in report.settings:
        parts.append(_setting(st, report.out_dir))
    if report.others:
        parts.append("## Other tasks\n")
    for j in report.others:
        parts.append(f"### {j.task}: `{j.dir.name}`\n")
        for name, rows in j.tables.items():
            parts.append(f"{name}:\n\n" + table(rows))
        for plot in j.plots:
            parts.append(f"![{plot.stem}]({os.path.relpath(plot, report.out_dir)})\n")
    return "\n".join(parts)


def _setting(st, out: Path) -> str:
    p = [
        f"## Setting: {st.label}\n",
        f"k = {st.k} experts per token, N = {st.n_experts} routed experts per layer.\n",
        "### Jobs\n",
        table(st.job_rows()),
    ]
    p.append("### (a) Union vs γ, with fits\n")
    p.append(
        "Fits by least squares on the mean union: the question's linear model "
        "k·(1 + s·(γ − 1)), a power law k·γ^p, and the one-step overlap model with ρ fitted and "
        + (
            f"at ρ = {st.rho:.3f}, the measured mean share of a token's top-k that the next "
            "token on the committed trace also selects.\n"
            if st.rho is not None
            else "(no trace measured, so no measured ρ).\n"
        )
    )
    if not st.sources:
        p.append("_No γ > 1 measured: nothing to fit._\n")
    for src in st.sources:
        p.append(f"#### {src.name}\n")
        p.append(table(src.rows()))
        if src.model:
            p.append("\nResiduals (measured − fit, experts):\n\n" + table(src.fit_rows()))
        if f"union:{src.name}" in st.figures:
            p.append(_image(st.figures[f"union:{src.name}"], out, f"union vs γ, {src.name}"))
    p.append("### (b) Speedup vs acceptance\n")
    if st.cost_model is None:
        p.append("_Needs γ = 1 jobs and drafting jobs in the same setting._\n")
    else:
        p.append(
            "Measured speedup = bytes read per token at γ = 1 / bytes read per token of the job "
            "(streaming-bound, draft reads included); the modeled column uses the device "
            "model's tokens/s on the profile (docs/device-model.md). Model: E(α, γ)/cost(γ), cost = U(γ)/U(1) "
            "from the mean verify union at each γ of this setting.\n\n"
        )
        p.append(table(st.speedup_rows))
        p.append("\nBreak-even acceptance per γ (below it γ loses to plain decoding):\n\n")
        p.append(
            table(
                [
                    {
                        "γ": r.gamma,
                        "union": r.union,
                        "cost": r.cost,
                        "ceiling (α=1)": r.ceiling,
                        "break-even α": r.break_even,
                    }
                    for r in st.cost_model.gammas
                ]
            )
        )
        p.append("\nBest γ per acceptance:\n\n")
        p.append(
            table(
                [
                    {
                        "α": r.alpha,
                        "best γ": r.best_gamma,
                        "speedup": r.speedup,
                        **{f"γ={g}": s for g, s in r.speedup_by_gamma.items()},
                    }
                    for r in st.cost_model.alphas
                ]
            )
        )
        p.append(_image(st.figures["speedup"], out, "speedup vs acceptance"))
    p.append("### (c) Real verify batches vs the union along the committed trace\n")
    if not st.trace_rows:
        p.append("_Needs a γ = 1 union_cost job (it measures the trace) and γ > 1 jobs._\n")
    else:
        p.append(table(st.trace_rows))
        p.append(_image(st.figures["verify_vs_trace"], out, "verify vs trace"))
    return "\n".join(p)
