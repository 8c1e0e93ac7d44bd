"""2D sparse parallelism: the System of one sharding group, of one shard's replicas, and whether
a replica count and a sync period fit a system (hardware.types.Replication)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import ConfigError
from ..schema import GROUP_LAYOUTS, MAX_SYNC_EVERY
from .types import Replication, System


def _cut(levels, block: int) -> tuple:
    """The levels of the first `block` chips: those inside a block, and the first one reaching it
    cut to the block."""
    out = []
    for lv in levels:
        out.append(lv if lv.size < block else dataclasses.replace(lv, size=block))
        if lv.size >= block:
            break
    return tuple(out)


def _above(levels, block: int) -> tuple:
    """The levels one chip of each `block` of consecutive chips reaches: those larger than a block,
    each holding size / block of them."""
    return tuple(dataclasses.replace(lv, size=lv.size // block) for lv in levels if lv.size > block)


def replication_problem(system: System, replicas, layout: str = "strided") -> str | None:
    """Why `replicas` sharding groups in `layout` do not fit `system`, in words; None if they do."""
    D = system.num_chips
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        return f"must be an integer >= 1 (1: one sharding group of all {D} chips), got {replicas!r}"
    if layout not in GROUP_LAYOUTS:
        return f"has group layout {layout!r}; allowed: {', '.join(GROUP_LAYOUTS)}"
    R = int(replicas)
    if R == 1:
        return None
    if D % R or D // R < 2:
        return (f"is {R}: it must divide the {D:,} chips of {system.name} into groups of 2 or more chips "
                f"(at most {D // 2:,} replicas)")
    if system.partial:
        return (f"is {R}, but {system.name}'s last domain is partial; sharding groups need whole domains "
                f"(use a chip count of whole {system.levels[-2].size if len(system.levels) > 1 else 1}-chip domains)")
    block, what = (R, f"a shard's {R} replicas (on neighbouring ranks, strided groups)") if layout == "strided" \
        else (D // R, f"a sharding group of {D // R} consecutive ranks (contiguous groups)")
    for lv in system.levels:
        if lv.size % block and block % lv.size:
            return (f"is {R}: {what} would split a {lv.name} domain of {lv.size} chips unevenly; the sync and "
                    f"the all-to-alls need whole domains (use a block of chips that divides or is a multiple of "
                    f"{lv.size})")
    return None


def sync_every_problem(sync_every) -> str | None:
    """Why `sync_every` is no sync period of a 2D plan, in words; None if it is one."""
    k = sync_every
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_SYNC_EVERY:
        return (f"must be an integer from 1 to {MAX_SYNC_EVERY:,} (steps between the replicas' "
                f"synchronizations), got {k!r}")
    return None


def sharding_group(system: System, replicas: int, layout: str = "strided", sync_every: int = 1) -> System:
    """The System of one sharding group of a 2D plan (Replication): its G = D / replicas chips with
    the levels they reach (strided: each level's domains hold 1 / replicas of their chips; contiguous:
    the levels inside a group's block), the same chips and links, and `replication` to price what
    ties the groups together. replicas = 1: `system` itself. ConfigError naming `replicas` where the
    groups do not fit (replication_problem)."""
    why = replication_problem(system, replicas, layout)
    if why is not None:
        raise ConfigError("", "group_layout" if layout not in GROUP_LAYOUTS else "replicas", why)
    why = sync_every_problem(sync_every)
    if why is not None:
        raise ConfigError("", "sync_every", why)
    R = int(replicas)
    if R == 1:
        return system
    G = system.num_chips // R
    levels = _above(system.levels, R) if layout == "strided" else _cut(system.levels, G)
    per_host = max(1, system.chips_per_host // R) if layout == "strided" else min(system.chips_per_host, G)
    return dataclasses.replace(system, levels=levels, num_chips=G, chips_per_host=per_host,
                               name=f"{system.name}/{R}x{G}",
                               replication=Replication(system, R, layout, int(sync_every)))


def whole_system(system: System) -> System:
    """The system whose chips all hold the dense part: a 2D plan's sharding group's whole system,
    or `system` itself."""
    return system if system.replication is None else system.replication.whole


def replica_system(group: System) -> System:
    """The System of one shard's replicas (one chip of each sharding group) and the levels they
    reach: strided, the first `replicas` chips; contiguous, one chip of each block of a group's size."""
    rep = group.replication
    whole, R = rep.whole, rep.replicas
    levels = _cut(whole.levels, R) if rep.layout == "strided" else _above(whole.levels, group.num_chips)
    return dataclasses.replace(whole, levels=levels, num_chips=R, chips_per_host=min(whole.chips_per_host, R),
                               name=f"{whole.name} replicas", replication=None)
