"""docs/extending.md's worked examples run: each registers and works, in a fresh process (a
registration lasts for the process: other tests must not see it).

    pytest tests/e2e/test_docs_examples.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
CHECK = r"""
import importlib.util, pathlib, re, sys
text = pathlib.Path(sys.argv[1]).read_text()
d = pathlib.Path(sys.argv[2])
for i, (kind, code) in enumerate(re.findall(r"```(python|yaml)\n(.*?)```", text, re.S)):
    if kind == "yaml":
        (d / "profile.yaml").write_text(code)
        continue
    f = d / f"example{i}.py"
    f.write_text(code)
    spec = importlib.util.spec_from_file_location(f.stem, f)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
from specdec.cache.spec import PolicySpec
from specdec.clock.profiles import load_profile
from specdec.decode.drafters import DrafterSpec
from specdec.probes.registry import ProbeOptions, parse_budgets, run_probe
assert PolicySpec.parse("fifo+protect").cache(8).n_slots == 8
assert str(DrafterSpec.parse("repeat")) == "repeat"
assert load_profile(d / "profile.yaml").name == "m3-max"
out = run_probe("hello", ProbeOptions(out=str(d / "out"), budgets=parse_budgets(["10%"], "x")))
assert out.rows == [{"budget": "10%"}] and out.files["png"].exists()
print("ok")
"""


def test_every_worked_example_registers_and_runs(tmp_path):
    cmd = [sys.executable, "-c", CHECK, str(DOC), str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
