"""specdec.costmodel: union-cost fits, streaming-bound speedup, break-even acceptance.

Pure math (numpy, scipy); no models or files. `specdec union-model --help` is the command;
`build_union_model` is the library entry point the sweep reports call. Plots live in
`specdec.costmodel.plots` (imported on demand: matplotlib is slow to load).
"""

from specdec.costmodel.model import AlphaRow, GammaRow, UnionModel, build_union_model, format_text
from specdec.costmodel.speedup import (
    best_gamma,
    break_even,
    ceiling,
    expected_tokens,
    pass_cost,
    solve_acceptance,
    speedup,
)
from specdec.costmodel.union import (
    LinearFit,
    OverlapFit,
    PowerFit,
    UnionFit,
    fit_linear,
    fit_overlap,
    fit_power,
    overlap_union,
)

__all__ = [
    "AlphaRow",
    "GammaRow",
    "LinearFit",
    "OverlapFit",
    "PowerFit",
    "UnionFit",
    "UnionModel",
    "best_gamma",
    "break_even",
    "build_union_model",
    "ceiling",
    "expected_tokens",
    "fit_linear",
    "fit_overlap",
    "fit_power",
    "format_text",
    "overlap_union",
    "pass_cost",
    "solve_acceptance",
    "speedup",
]
