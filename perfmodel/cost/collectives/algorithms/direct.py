"""Direct: every chip talks to every peer at once. The bytes to peers at level l go at B_l, links in
parallel; latency alpha (1 + (n-1)/m) with m messages in flight (offload engines raise m).
All-reduce: reduce-scatter + all-gather (two-shot); NVLS where the scale-up switch reduces.
"""

from __future__ import annotations

import math

from ..network import KINDS, LINKS
from .base import Algorithm, Comp, blank, feature, nodes


def direct_c(shape, lo: int, hi: int, scale: float, reduce: bool) -> Comp:
    """Every chip sends scale x S / n to every peer of the group at once (links in parallel);
    latency alpha_max (1 + (n-1)/m)."""
    fanout, size, link, kind, _ = shape
    K = len(fanout)
    n, inner = math.prod(fanout[lo:hi + 1]), math.prod(fanout[:lo])
    C, H, steps = blank(K)
    below = 1
    for l in range(lo, hi + 1):
        peers = size[l] // inner - below                 # peers first reached at level l
        below = size[l] // inner
        C[LINKS.index(link[l]), l] += scale * peers / n
    H[:, feature(K, lo, hi)] = (1.0, n - 1.0)
    steps[:, KINDS.index(kind[hi])] = (1.0, n - 1.0)
    return Comp(C, H, C, H, steps, (n - 1) / n * scale if reduce else 0.0, (n - 1) / n * scale, scale, 0,
                nodes(fanout, lo, hi))


def _crowding(through, direct, whole: bool):
    """A direct transfer over the whole system is crowded as network.partial_crowding's `direct`
    says; one over some levels keeps the full shape's bytes."""
    own = direct if whole else tuple(1.0 for _ in direct)
    return own, own


ALGORITHM = Algorithm(
    "direct",
    all_reduce=lambda shape, lo, hi, scale: (ALGORITHM.components(shape, "reduce_scatter", lo, hi, scale)
                                             + ALGORITHM.components(shape, "all_gather", lo, hi, scale)),
    rs_or_ag=lambda shape, lo, hi, reduce, scale: [direct_c(shape, lo, hi, scale, reduce)],
    crowding=_crowding,
    nvls="nvls",
)
