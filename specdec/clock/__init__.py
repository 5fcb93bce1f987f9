"""specdec.clock: device profiles and the device model of modeled time.

    profiles.py  DeviceProfile: memory bandwidth, FLOP peak, router sync, read curve (built-ins)
    shapes.py    ModelShape: weight bytes and FLOPs per layer from config.json
    roofline.py  modeled seconds of one forward: roofline parts, router syncs, reads on a timeline
    passes.py    PassClock: the forwards of one verify pass (draft phase by drafter + verify)
    check.py     `specdec clock check`: the seed question's M4 measurement reproduced

docs/device-model.md states the model and every assumption.
"""

from specdec.clock.passes import PassClock
from specdec.clock.profiles import (
    BUILTIN_NAMES,
    DeviceProfile,
    get_profile,
    load_profile,
    this_machine,
)
from specdec.clock.roofline import Forward, ModeledTime, ReadStep, forward_time
from specdec.clock.shapes import Cost, ModelShape

__all__ = [
    "BUILTIN_NAMES",
    "Cost",
    "DeviceProfile",
    "Forward",
    "ModelShape",
    "ModeledTime",
    "PassClock",
    "ReadStep",
    "forward_time",
    "get_profile",
    "load_profile",
    "this_machine",
]
