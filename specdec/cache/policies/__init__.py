"""Eviction policies of the expert cache, shared by the runtime and the trace simulator.

    from specdec.cache.policies import make_policy
    policy = make_policy("slru", n_slots=96)      # names: see POLICIES
    policy = make_policy("static", 96, hotlist=keys, scratch=8)   # options: the Options dataclass

Each policy is one module of this package: a `Policy` subclass decorated with `@register`, with
its `name`, an `Options` dataclass and a `build(n_slots, options)` classmethod (base.py); plus
its conf/cache/NAME.yaml for specdec-exp. Every module here is imported below, so adding a file
adds the policy.

A policy only orders keys; `ExpertCache` owns the slots and drives the policy once per step, in
batches (one call per step, not per access) because the simulator replays millions of accesses:

    select(keys, counts)   every key of the step, before anything else (only if uses_select)
    hit(keys)              the step's resident keys, ascending
    victims(n, exclude, in_step)
                           remove and return up to n resident keys not in `exclude`, best
                           first; in_step: `exclude` is the current step, whose resident keys
                           hit() has just touched (LRU relies on it to skip the checks)
    admit(keys)            the step's misses, ascending, now resident; returns the keys the
                           policy does not keep (static's scratch reads), freed before next step
    remove(keys)           resident keys the cache drops outside eviction (their read failed)
    tick(n_positions)      once per forward call, after its steps
    new_sequence()         a prefill from position 0 begins (hotness resets its counters)

Victims are chosen before the misses are admitted. That equals admitting misses one at a time
and evicting one victim before each: a just-admitted miss belongs to the step and may never be a
victim, and no policy changes its order of the non-step keys while admitting.
"""

from __future__ import annotations

from specdec.cache.policies.base import (
    REGISTRY,
    Policy,
    _pop_oldest,  # the cache's scratch eviction shares it
    make_policy,
    policy_names,
    register,
)
from specdec.core.registry import import_package

import_package(__name__, __path__, skip=("base",))

POLICIES = policy_names()  # the built-in policies; messages call policy_names() (plugins too)

__all__ = [
    "POLICIES",
    "REGISTRY",
    "Policy",
    "_pop_oldest",
    "make_policy",
    "policy_names",
    "register",
]
