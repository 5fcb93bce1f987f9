"""`--records FILE --append` appends only to a record file (specdec.decode.records.RecordWriter).

Run: `pytest tests/decode/test_records.py`. Appending cuts a torn final line first, so pointed at
any other file it once broke it: `--records PACKED/config.json --append` left invalid JSON,
`--records PACKED/experts.bin --append` a block failing its checksum. Those are refused and
left byte for byte; a record file (even one whose only line is torn) still takes appends.
Torn lines themselves: tests/e2e/test_interrupt.py.
"""

from __future__ import annotations

import json
import os

import pytest

from specdec.core.errors import SpecdecError
from specdec.decode.records import RecordWriter, read_records


@pytest.mark.parametrize(
    "content",
    [
        b'{"model_type": "deepseek_v3",\n "hidden_size": 64}',  # a config.json
        os.urandom(4096),  # an experts.bin block
        b"",  # (empty: a record file of no passes, appended to)
    ],
    ids=["config.json", "experts.bin", "empty"],
)
def test_append_only_to_a_record_file(tmp_path, content):
    path = tmp_path / "file"
    path.write_bytes(content)
    if content:
        with pytest.raises(SpecdecError, match="--append only touches its own output"):
            RecordWriter(path, append=True)
        assert path.read_bytes() == content
    else:
        with RecordWriter(path, append=True) as w:
            w.write({"pass_idx": 0})
        assert read_records(path) == [{"pass_idx": 0}]


def test_append_through_a_symlink_is_refused(tmp_path):
    target = tmp_path / "records.jsonl"
    target.write_text(json.dumps({"pass_idx": 0}) + "\n")
    (tmp_path / "link.jsonl").symlink_to(target.name)
    with pytest.raises(SpecdecError, match="is a symbolic link"):
        RecordWriter(tmp_path / "link.jsonl", append=True)


def test_a_record_file_torn_in_its_first_line_still_appends(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_text('{"pass_idx": 0, "tok')  # the writer died inside its first record
    with RecordWriter(path, append=True) as w:
        w.write({"pass_idx": 0})
    assert read_records(path) == [{"pass_idx": 0}]
    assert "cut a torn final line" in capsys.readouterr().err


@pytest.mark.parametrize("value", [-7, float("nan"), 1.5, True, "3"])
def test_a_record_whose_counts_are_not_counts_is_refused_by_name(value):
    """`"accepted": NaN` or -7 in a records.jsonl once reached the report's np.bincount as a
    traceback; a record read back is checked where it is read."""
    from dataclasses import asdict

    from specdec.decode.records import PassRecord

    rec = PassRecord.build(0, 2, drafted=1, accepted=1, tokens=[5, 6], draft_steps=[],
                           verify_steps=[], wall_s=0.1, blocked_s=0.0, reads=0, modeled={})  # fmt: skip
    row = asdict(rec)
    assert PassRecord.from_row(row, "r.jsonl:1") == rec
    with pytest.raises(
        SpecdecError, match=r"^r.jsonl:1: a record's accepted is .*the file is damaged"
    ):
        PassRecord.from_row({**row, "accepted": value}, "r.jsonl:1")
    with pytest.raises(SpecdecError, match=r"a record's resync_reads is .*the file is damaged"):
        PassRecord.from_row({**row, "resync_reads": value}, "r.jsonl:1")
    older = {k: v for k, v in row.items() if not k.startswith("resync_")}  # before re-sync
    assert PassRecord.from_row(older, "r.jsonl:1") == rec
