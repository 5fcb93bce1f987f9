"""specdec.clock: device profiles and modeled time (compute scaled, disk bytes and reads charged).

Knows nothing of models, caches or files beyond the read bench's result; see
`specdec.clock.profiles` for the formula and the built-in profiles.
"""

from specdec.clock.profiles import (
    BUILTIN_NAMES,
    DeviceProfile,
    ModeledTime,
    breakdown,
    get_profile,
    load_profile,
    modeled_time,
    this_machine,
)

__all__ = [
    "BUILTIN_NAMES",
    "DeviceProfile",
    "ModeledTime",
    "breakdown",
    "get_profile",
    "load_profile",
    "modeled_time",
    "this_machine",
]
