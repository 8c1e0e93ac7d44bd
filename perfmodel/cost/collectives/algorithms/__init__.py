"""The collective algorithms: one module each (its components, base.py's coefficients), and the
ordered registry every algorithm axis of the model follows (a plan's PlanArrays.algorithm rows,
the collectives' [..., ALGORITHMS] times).

To add an algorithm: a module here whose ALGORITHM (a base.Algorithm) gives its components, its
entry in REGISTRY, and its name at the same position of schema.ALGORITHMS, the plans' vocabulary
(with the collectives it may serve in schema.ALLOWED_ALGORITHMS). The schema sits below the cost
model and keeps the names; the registry checks that they match.
"""

from __future__ import annotations

import functools

import numpy as np

from ....schema import ALGORITHMS
from . import direct, hierarchical, ring, tree
from .base import Algorithm, Comp, a2a_c, group_size

REGISTRY: tuple[Algorithm, ...] = (ring.ALGORITHM, direct.ALGORITHM, tree.ALGORITHM, hierarchical.ALGORITHM)
if tuple(a.name for a in REGISTRY) != ALGORITHMS:
    raise ImportError(f"the collective algorithms' registry {tuple(a.name for a in REGISTRY)} does not match "
                      f"schema.ALGORITHMS {ALGORITHMS}: an algorithm is registered in both, in the same order")

# the algorithms the rest of the cost model names (NCCL's own choice among them, the NVLS forms)
RING, DIRECT, TREE, HIER = (ALGORITHMS.index(n) for n in ("ring", "direct", "tree", "hierarchical"))


@functools.cache
def table(shape, op: str, lo: int, hi: int):
    """Every algorithm's components, padded to one count: arrays [ALGORITHMS, C, ...] and `live`
    [ALGORITHMS, C] (1 for a real component: it pays the protocol's base latency); None when the
    group is a single chip."""
    if group_size(shape, lo, hi) == 1:
        return None
    comps = [a.components(shape, op, lo, hi) for a in REGISTRY]
    width = max(len(c) for c in comps)
    empty = Comp(*(np.zeros_like(x) for x in comps[0][0][:5]), 0.0, 0.0, 0.0, 0, 1, 0.0)
    rows = [c + [empty] * (width - len(c)) for c in comps]
    fields = {f: np.asarray([[getattr(c, f) for c in row] for row in rows], np.float32) for f in Comp._fields}
    fields["live"] = np.asarray([[1.0] * len(c) + [0.0] * (width - len(c)) for c in comps], np.float32)
    # a pipelined algorithm runs its stages at once, chunk by chunk (NCCL's NVLSTree and CollNet
    # pipelines; a topology-aware engine library alike): their links' loads add and the busiest
    # sets the pace, one protocol for the whole; the other algorithms' components run in turn
    fields["pipelined"] = np.asarray([float(a.pipelined and len(c) > 1) for a, c in zip(REGISTRY, comps)], np.float32)
    # components inside the innermost level alone (a hierarchical form's reduce-scatter and
    # all-gather there: NVLS can take them over where the scale-up switch reduces)
    fields["inner"] = np.asarray([[float(c.core_bytes[:, :1].any() and not c.core_bytes[:, 1:].any()) for c in row]
                                  for row in rows], np.float32)
    return fields


__all__ = ["ALGORITHMS", "REGISTRY", "Algorithm", "Comp", "DIRECT", "HIER", "RING", "TREE", "a2a_c", "table"]
