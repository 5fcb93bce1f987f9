"""specdec.clock: device profiles and the device model of modeled time.

    profiles/    DeviceProfile and its loader; one YAML file per built-in profile (m4-24gb.yaml,
                 m5-24gb.yaml, this-machine.yaml), read by the loader a user's --profile uses
    shapes.py    ModelShape: weight bytes and FLOPs per layer from config.json
    roofline.py  modeled seconds of one forward: roofline parts, router syncs, reads on a timeline
    passes.py    PassClock: the forwards of one verify pass (draft phase by drafter + verify)
    check.py     `specdec clock check`: the seed question's M4 measurement reproduced

`this-machine` is made by this machine's read bench: `specdec bench read` (or
benchmarks/bench_read.py) writes $SPECDEC_CACHE/profiles/this-machine.yaml (default
~/.cache/specdec) from its measured read curve, each field with its source; without that file
`this-machine` is the shipped fallback (anchors.md's fio figure). `DEFAULT_PROFILE` is the
profile every default names. docs/device-model.md states the model and every assumption.
"""

from specdec.clock.passes import PassClock
from specdec.clock.profiles import (
    BUILTIN_NAMES,
    DEFAULT_PROFILE,
    DeviceProfile,
    auto_profile,
    get_profile,
    load_profile,
    measured_profile_path,
    profile_yaml,
)
from specdec.clock.roofline import Forward, ModeledTime, ReadStep, forward_time
from specdec.clock.shapes import Cost, ModelShape

__all__ = [
    "BUILTIN_NAMES",
    "DEFAULT_PROFILE",
    "Cost",
    "DeviceProfile",
    "Forward",
    "ModelShape",
    "ModeledTime",
    "PassClock",
    "ReadStep",
    "auto_profile",
    "forward_time",
    "get_profile",
    "load_profile",
    "measured_profile_path",
    "profile_yaml",
]
