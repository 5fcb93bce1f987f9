"""Standard output that fails: `specdec ... > /dev/full` and `specdec ... | head -c 10`.

Run: `pytest tests/cli/test_stdout.py`. Through the real entry point (`specdec.cli.main`, in
process) with sys.stdout on /dev/full (every write fails with ENOSPC) or on a pipe whose reader
has gone (EPIPE: Python ignores SIGPIPE, so the write raises BrokenPipeError): a full device is
one line and status 2; a closed pipe ends quietly with 141 (128 + SIGPIPE), as a unix tool
killed by SIGPIPE would; neither prints a traceback.
"""

from __future__ import annotations

import os
import signal

import pytest

from specdec.cli import main

# a command with a long JSON answer and no model: the write fails while it prints
ARGV = ["union-model", "--union", "1:8,2:13,4:20,8:30", "--alpha", "0.5,0.9", "--json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_stdout_on_a_full_device_is_one_line(monkeypatch, capsys):
    with open("/dev/full", "w") as full:
        monkeypatch.setattr("sys.stdout", full)
        assert main(ARGV) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "specdec: error: cannot write to standard output (No space left on device); send it "
        "to a file or device with space"
    ]


def test_stdout_on_a_closed_pipe_ends_quietly(monkeypatch, capsys):
    read, write = os.pipe()
    os.close(read)  # `head -c 10` has read its bytes and exited
    with os.fdopen(write, "w") as pipe:
        monkeypatch.setattr("sys.stdout", pipe)
        assert main(ARGV) == 128 + signal.SIGPIPE
    assert capsys.readouterr().err == ""
