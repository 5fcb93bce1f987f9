"""A recorded pass modeled again from its record equals what the run modeled (clock.remodel):
the device model can be checked afterwards, on a profile measured after the run.

    pytest tests/clock/test_remodel.py
"""

from __future__ import annotations

import json

import pytest

from specdec.clock.passes import PassClock
from specdec.clock.profiles import get_profile
from specdec.decode.drafters import DrafterSpec
from specdec.decode.loop import DecodeConfig
from specdec.decode.records import PassRecord
from specdec.decode.run import generate
from specdec.stream.loader import load


@pytest.fixture(scope="module")
def tiny():
    sm = load("tiny", budget="10%", io="buffered")
    yield sm
    sm.close()


@pytest.mark.parametrize(
    "drafter, gamma", [("none", 1), ("mtp", 3), ("self", 4), ("lookup", 4), ("self", "auto")]
)
def test_remodel_equals_the_runs_own_modeled_time(tiny, tmp_path, drafter, gamma):
    # this-machine: measured compute (a pass's own time not blocked on reads), which auto's
    # bookkeeping after the pass (books_s, in the record's compute_s) is not part of
    m4, m5, mine = get_profile("m4-24gb"), get_profile("m5-24gb"), get_profile("this-machine")
    assert mine.compute != "roofline"
    tiny.reset_cache()
    path = tmp_path / "r.jsonl"
    res = generate(tiny, tiny.encode("def f(x):"), drafter, DecodeConfig(gamma, 16), (m4, m5, mine),
                   records_path=path)  # fmt: skip
    clock = PassClock.for_decode(tiny, DrafterSpec.parse(drafter).build(tiny, res.tokens))
    rows = [PassRecord.from_row(json.loads(line), "r") for line in path.read_text().splitlines()]
    assert len(rows) == len(res.records) and rows[0].steps["verify"]
    assert gamma != "auto" or all(r.books_s > 0 for r in rows if r.gamma_choice)
    for rec in rows:  # read back from JSON, as an analysis would
        for p in (m4, m5, mine):
            assert clock.remodel(p, rec).total_s == pytest.approx(rec.modeled_s[p.name], rel=1e-12)
