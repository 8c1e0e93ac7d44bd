"""Held settings in the search: the masks that allow only them and the scored arrays that carry
them (the settings and their parsing: constraints.Hold, parse_hold; module comment there).

A framework decides some of a plan's settings for its users: HugeCTR's MLPerf runs keep the dense
layers replicated and send the all-to-all in one piece. A search for such a user holds them from
its first round: every plan it scores carries them (held_arrays), its setting moves leave them
alone, its masks allow only them (held_masks), and the plan it returns has them (Hold.apply).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..constraints import HOLD_KEYS, Hold, hold_all, parse_hold  # noqa: F401 (the plan layer's names)
from .space import ALGORITHMS, COLLECTIVES, DENSE_MODES, NEG, PRECISIONS, Masks

# the PlanArrays leaf each scalar key sets, and how its value becomes that leaf
LEAF = {"dense": "dense_mode", "a2a_precision": "a2a_precision", "grad_precision": "grad_precision",
        "offload": "offload", "pipeline": "pipeline", "grad_buckets": "grad_buckets", "overlap_chunks": "overlap_chunks"}


def held_masks(hold: Hold, masks: Masks) -> Masks:
    """`masks` allowing only the held dense mode, precisions and algorithms (and no offload when
    it is held off): what the relaxed restarts, the samplers and the setting moves read."""
    if not hold.items:
        return masks
    d = hold.as_dict()
    only = lambda mask, allowed, v: np.where(np.asarray(allowed) == v, np.asarray(mask), NEG).astype(np.float32)
    out = {}
    if "dense" in d:
        out["dense"] = only(masks.dense, DENSE_MODES, d["dense"])
    for key, field in (("a2a_precision", "a2a"), ("grad_precision", "grad")):
        if key in d:
            out[field] = only(getattr(masks, field), PRECISIONS, d[key])
    if any(k in d for k in COLLECTIVES):
        algos = np.array(masks.algos, np.float32)
        for c, kind in enumerate(COLLECTIVES):
            if kind in d:
                algos[c] = np.where(np.asarray(ALGORITHMS) == d[kind], algos[c], NEG)
        out["algos"] = algos
    if d.get("offload") is False:
        out["engines"] = np.float32(0.0)
    return dataclasses.replace(masks, **out)


def held_arrays(hold: Hold, pa, batched: bool):
    """PlanArrays `pa` (a batch along a leading axis where `batched`) with the held settings'
    leaves: every plan a search scores is priced with them, whatever made it."""
    if not hold.items:
        return pa
    d = hold.as_dict()
    n = (np.shape(pa.offload)[0],) if batched else ()
    out = {}
    for key, leaf in LEAF.items():
        if key in d:
            out[leaf] = np.broadcast_to(_leaf(key, d[key]), n + np.shape(_leaf(key, d[key]))).copy()
    if any(k in d for k in COLLECTIVES):
        algo = np.array(pa.algorithm, np.float32)
        for c, kind in enumerate(COLLECTIVES):
            if kind in d:
                algo[..., c, :] = np.eye(len(ALGORITHMS), dtype=np.float32)[ALGORITHMS.index(d[kind])]
        out["algorithm"] = algo
    return dataclasses.replace(pa, **out)


def _leaf(key: str, value) -> np.ndarray:
    if key == "dense":
        return np.eye(len(DENSE_MODES), dtype=np.float32)[DENSE_MODES.index(value)]
    if key in ("a2a_precision", "grad_precision"):
        return np.eye(len(PRECISIONS), dtype=np.float32)[PRECISIONS.index(value)]
    return np.asarray(float(value), np.float32)
