"""One extension = one file: a drafter and a cache policy added from a file outside the package.

The file registers both the way the package's own modules do (README "Extending"); naming it in
SPECDEC_PLUGINS is all it takes for the command line, its help text and its error messages to
know them. Decoding with them stays lossless (the policy only orders keys, the drafter only
proposes). Run: `pytest tests/e2e/test_extensions.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from specdec.core.blas import fast_blas_env

PLUGIN = textwrap.dedent(
    '''
    """A throwaway FIFO policy and a drafter that repeats the last token."""
    from specdec.cache.policies import register
    from specdec.cache.policies.lru import LRU
    from specdec.decode.drafters import Drafter, register as register_drafter


    @register
    class FIFOTest(LRU):
        """First in, first out: a hit changes nothing."""

        name = "fifo_test"

        def hit(self, keys):
            pass

        def victims(self, n, exclude, in_step=False):
            return LRU.victims(self, n, exclude, False)  # hits did not refresh the step's keys


    @register_drafter
    class RepeatTest(Drafter):
        """Proposes the last committed token again."""

        name = "repeat_test"
        listed = 50

        def propose(self, st, n):
            return [st.tokens[-1]] * n, None
    '''
)


def specdec(*args: str, plugins: str | None = None) -> subprocess.CompletedProcess:
    env = fast_blas_env()
    env.pop("SPECDEC_PLUGINS", None)
    if plugins:
        env["SPECDEC_PLUGINS"] = plugins
    cmd = [sys.executable, "-m", "specdec", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("plugin") / "my_extensions.py"
    path.write_text(PLUGIN)
    return str(path)


def test_without_the_file_neither_exists(plugin):
    r = specdec("generate", "--policy", "fifo_test", "--max-tokens", "2")
    assert r.returncode == 2 and "unknown cache policy 'fifo_test'" in r.stderr
    r = specdec("generate", "--drafter", "repeat_test", "--max-tokens", "2")
    assert r.returncode == 2 and "unknown drafter 'repeat_test'" in r.stderr


def test_a_drafter_and_a_policy_from_one_file(plugin):
    help_text = specdec("generate", "--help", plugins=plugin).stdout
    assert "repeat_test" in " ".join(help_text.split())
    assert "fifo_test" in " ".join(help_text.split())
    base = ["generate", "--model", "tiny", "--budget", "25%", "--max-tokens", "24", "--json"]
    plain = specdec(*base, plugins=plugin)
    assert plain.returncode == 0, plain.stderr
    spec = specdec(*base, "--policy", "fifo_test", "--drafter", "repeat_test", "--gamma", "3",
                   plugins=plugin)  # fmt: skip
    assert spec.returncode == 0, spec.stderr
    ours, ref = json.loads(spec.stdout.splitlines()[-1]), json.loads(plain.stdout.splitlines()[-1])
    assert ours["tokens"] == ref["tokens"], "a drafter and a policy must not change the text"
    assert ours["stats"]["drafter"] == "repeat_test" and ours["stats"]["drafted"] > 0
    r = specdec("generate", "--drafter", "telepathy", "--max-tokens", "2", plugins=plugin)
    assert "repeat_test" in r.stderr, "the unknown-drafter message lists the registry"


def test_a_missing_plugin_file_is_one_clear_error(tmp_path):
    r = specdec("models", plugins=str(tmp_path / "nope.py"))
    assert r.returncode in (1, 2)
    assert "SPECDEC_PLUGINS" in r.stderr and os.path.basename("nope.py") in r.stderr
