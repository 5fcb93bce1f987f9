"""Measurements an engine author reruns on their own model, one module each, found by name.

    gates       gate mass by slot; block error of dropping experts          (gates.py)
    eviction    recency vs hotness vs static pinning, against the bounds    (eviction.py)
    lookahead   router lookahead recall; the prefetch replay                 (lookahead.py)
    basis       whether a layer's experts share a basis                      (basis.py)
    read_path   the read paths of `specdec bench read --json`                (read_path.py)

    from specdec.probes import PROBES, ProbeOptions, run_probe
    out = run_probe("eviction", ProbeOptions(model="tiny"))   # out.rows, out.files

Every module of this package but the shared ones (registry, record, capture, report) is
imported here, so a probe registers itself by being a file in it (registry.py says what the file
holds).
"""

from __future__ import annotations

from specdec.core.registry import import_package
from specdec.probes.registry import (
    PROBES,
    Probe,
    ProbeContext,
    ProbeOptions,
    ProbeOutput,
    get_probe,
    make_options,
    parse_budgets,
    probe_names,
    register,
    run_probe,
)

import_package(__name__, __path__, skip=("registry", "record", "capture", "report"))

__all__ = [
    "PROBES",
    "Probe",
    "ProbeContext",
    "ProbeOptions",
    "ProbeOutput",
    "get_probe",
    "make_options",
    "parse_budgets",
    "probe_names",
    "register",
    "run_probe",
]
