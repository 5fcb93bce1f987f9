"""The analysis scripts regenerate the tables of README.md and docs/: each named there, each run
on real run directories (a specdec-exp sweep, probe rows from real traces, the read bench JSON).

    pytest tests/report/test_analysis.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import eviction, read_path, readme, scale, spec_cache, speculation, union_cost
from specdec.core.units import Budget
from specdec.probes.eviction import eviction_table
from specdec.trace.synthetic import synthetic_trace

ROOT = Path(__file__).resolve().parents[2]
# README.md and docs/**/*.md, where the tables and the commands that make them are written
README = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted(ROOT.glob("docs/**/*.md"))])


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]


def test_every_script_is_named_in_the_readme():
    scripts = sorted(p.stem for p in (ROOT / "analysis").glob("*.py") if not p.stem.startswith("_"))
    assert scripts and all(f"analysis.{s}" in README for s in scripts)


def test_union_cost_reproduces_the_readme_table(capsys):
    assert union_cost.main([]) == 0
    rows = _rows(capsys.readouterr().out)
    assert len(rows) == 4 and all(r in README for r in rows)


def test_readme_tables_whose_inputs_are_in_git_reproduce_byte_for_byte(capsys):
    """union_cost needs no input; scale and mixed_precision read benchmarks/results/, in git."""
    assert readme.main(["--check", "--only", "union_cost,scale,mixed_precision", "--strict"]) == 0
    assert capsys.readouterr().out.startswith("4 tables reproduce, 0 differ, 0 not checked")


def test_readme_check_finds_a_changed_table_and_write_mends_it(tmp_path, capsys):
    table = union_cost.table(union_cost.parse_union(union_cost.QUESTION), 8).rstrip("\n")
    good = f"# t\n<!-- table: python -m analysis.union_cost -->\n{table}\n<!-- /table -->\nend\n"
    doc = tmp_path / "README.md"
    doc.write_text(good.replace("1.83x", "1.84x"))
    assert readme.main(["--check", "--readme", str(doc)]) == 1
    assert "1 differ" in capsys.readouterr().out and "1.84x" in doc.read_text()
    assert readme.main(["--write", "--readme", str(doc)]) == 0
    assert doc.read_text() == good
    assert readme.main(["--check", "--readme", str(doc)]) == 0


def test_readme_check_says_which_inputs_are_missing(tmp_path, capsys):
    doc = tmp_path / "README.md"
    missing = tmp_path / "no-such-sweep"
    doc.write_text(
        f"<!-- table: python -m analysis.eviction {missing} -->\n| x |\n<!-- /table -->\n"
    )
    assert readme.main(["--check", "--readme", str(doc)]) == 0
    out = capsys.readouterr().out
    assert "1 not checked, 0 failed" in out
    assert "not checked (input missing): eviction (" in out and f"{missing} missing" in out
    assert readme.main(["--check", "--readme", str(doc), "--strict"]) == 1


def test_readme_check_fails_a_script_that_fails_on_inputs_it_has(tmp_path, capsys):
    doc = tmp_path / "README.md"  # tmp_path exists but holds no eviction table
    doc.write_text(
        f"<!-- table: python -m analysis.eviction {tmp_path} -->\n| x |\n<!-- /table -->\n"
    )
    assert readme.main(["--check", "--readme", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "0 not checked, 1 failed" in out and "failed: eviction (" in out


def test_readme_check_finds_every_file_with_tables(tmp_path, capsys):
    """Outside git every .md under --root is looked at; a table that differs in docs/ fails."""
    table = union_cost.table(union_cost.parse_union(union_cost.QUESTION), 8).rstrip("\n")
    block = f"<!-- table: python -m analysis.union_cost -->\n{table}\n<!-- /table -->\n"
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / ".venv").mkdir()
    (tmp_path / "README.md").write_text(f"# r\n{block}")
    deep = tmp_path / "docs" / "results" / "x.md"
    deep.write_text(f"# x\n{block.replace('1.83x', '1.84x')}")
    (tmp_path / "docs" / "plain.md").write_text("# no tables\n")
    (tmp_path / ".venv" / "skipped.md").write_text(block.replace("1.83x", "9.99x"))
    found = readme.with_tables(readme.markdown_files(tmp_path))
    assert found == [tmp_path / "README.md", deep]
    assert readme.main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("1 tables reproduce, 1 differ, 0 not checked, 0 failed (2 files)")
    assert f"differ: union_cost ({deep} line 2)" in out
    assert readme.main(["--write", "--root", str(tmp_path), "--only", "union_cost"]) == 0
    assert deep.read_text() == f"# x\n{block}"
    assert readme.main(["--check", "--root", str(tmp_path)]) == 0
    assert readme.main(["--check", "--root", str(tmp_path), "--only", "scale"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("0 tables reproduce, 0 differ")


def test_readme_check_covers_the_docs_of_this_checkout():
    """git's list of the checkout's files holds every doc with a table (a marker opens a line)."""
    found = readme.with_tables(readme.markdown_files(ROOT))
    docs = [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]
    marked = {p for p in docs if any(map(readme.BEGIN.match, p.read_text().splitlines()))}
    assert set(found) == marked and ROOT / "docs" / "results" / "caching.md" in found


def test_scale_table_marks_runs_that_differ(capsys):
    result = json.loads((ROOT / "benchmarks" / "results" / "scale.json").read_text())
    result["small"]["runs"][0]["equals_mlx_lm"] = False
    rows = _rows(scale.table(result))
    assert rows[1].endswith("| differ from mlx-lm |") and rows[2].endswith("| = mlx-lm |")


def test_eviction_table_from_a_probe_directory(tmp_path, capsys):
    evaluated, profile = (
        synthetic_trace(n_positions=60, n_layers=4, n_experts=32, top_k=4, seed=s) for s in (1, 2)
    )
    rows = eviction_table(evaluated, profile, [Budget.parse("10%"), Budget.parse("50%")])
    (tmp_path / "eviction.json").write_text(json.dumps(rows))
    assert eviction.main([str(tmp_path)]) == 0
    out = _rows(capsys.readouterr().out)
    assert out[0] == "| policy | 10% | 50% |"
    assert out[1].startswith("| lru | ") and any(r.startswith("| Belady (MIN) | ") for r in out)


def test_read_path_from_the_bench_json(capsys):
    assert read_path.main([str(ROOT / "benchmarks" / "results" / "read.json")]) == 0
    out = _rows(capsys.readouterr().out)
    assert len(out) > 2 and all(len(r.split("|")) == len(out[0].split("|")) for r in out)


@pytest.mark.slow  # runs a specdec-exp sweep
def test_speculation_table_from_a_sweep(tmp_path, capsys):
    env = {**os.environ, "SPECDEC_CACHE": str(tmp_path / "cache"), "WANDB_SILENT": "true"}
    sweep = tmp_path / "sweep"
    args = ["model=random_deepseek_v3", "gamma=1,2", "drafter=self,oracle", "max_tokens=12"]
    cmd = [sys.executable, "-m", "experiments.run", "-m", *args, "logger=disabled"]
    cmd += ["progress=false", f"hydra.sweep.dir={sweep}", "hydra.callbacks={}"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert speculation.main([str(sweep), "--drafters", "self,oracle:0.9"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [r.split(" | ")[0:2] for r in rows[1:]] == [
        ["| none", "1"],
        ["| self", "2"],
        ["| oracle:0.9", "2"],
    ]
    assert " 1.00x | 1.00x |" not in rows[2]  # γ = 2 is measured against the γ = 1 jobs


@pytest.mark.slow  # runs a specdec-exp sweep
def test_spec_cache_tables(tmp_path, capsys, monkeypatch):
    """Runtime jobs of two policies plus the replays of their passes; the trace table's bounds."""
    env = {**os.environ, "SPECDEC_CACHE": str(tmp_path / "cache"), "WANDB_SILENT": "true"}
    sweep = tmp_path / "sweep"
    args = ["gamma=1,2", "drafter=oracle", "cache.budget=25%", "cache.policy=lru,lru+protect"]
    cmd = [sys.executable, "-m", "experiments.run", "-m", *args, "max_tokens=12"]
    cmd += ["logger=disabled", "progress=false", f"hydra.sweep.dir={sweep}", "hydra.callbacks={}"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert spec_cache.main(["--runs", str(sweep), "--no-trace"]) == 0
    rows = _rows(capsys.readouterr().out)
    head = rows[0].split(" | ")
    assert [r.split(" | ")[1] for r in rows[1:]] == ["1", "2"]
    for r in rows[1:]:
        cells = dict(zip(head, r.split(" | "), strict=True))
        assert cells["lru+demote"] == "—" and cells["lru+protect"].strip("*") != "—"
        assert float(cells["opt_bypass (replay)"]) <= float(cells["belady (replay)"])
    trace = synthetic_trace(n_positions=80, n_layers=4, n_experts=32, top_k=4, seed=3)
    monkeypatch.setattr(spec_cache, "SHARES", (0.5,))
    cols, trows = spec_cache.trace_rows(trace, 0.7, 0)
    for r in trows:
        assert r["opt_bypass"] <= r["belady"] <= min(r[p] for p in spec_cache.POLICIES)


def test_gamma_auto_reproduces_the_readme_table(tmp_path, capsys):
    from analysis import gamma_auto

    assert gamma_auto.main(["--out", str(tmp_path / "gamma-auto.md")]) == 0
    rows = _rows(capsys.readouterr().out)
    assert len(rows) == 4 and all(r in README for r in rows)
    assert (tmp_path / "gamma-auto.md").read_text().count("\n| ") > 20


def test_mixed_precision_errors_in_one_line_through_fail(tmp_path, capsys):
    from analysis import mixed_precision

    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))  # JSON, not a bench result
    for path, says in (
        (tmp_path / "none.json", "run benchmarks/bench_mixed.py first"),
        (tmp_path / "other.json", "not a bench_mixed.py result (no 'quality')"),
    ):
        assert mixed_precision.main([str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}: ") and says in err and err.count("\n") == 1


def test_families_subset_footnote_names_only_requested_families_not_built(capsys):
    from analysis import families

    unbuilt = families.not_built()
    assert families.main(["--families", f"mixtral,{unbuilt[0]}"]) == 0
    table, note = capsys.readouterr().out.rstrip("\n").split("\n\n")
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == ["| `mixtral`"]
    assert note.endswith(f"(not checked): {unbuilt[0]}.")
    assert families.render([]).split("\n\n")[1] in README  # the full run's footnote, unchanged
    assert families.main(["--families", "mixtral,nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --families: nope is no MoE family") and err.count("\n") == 1
