"""Ring: all-reduce 2(n-1)/n S / B + 2(n-1) alpha; reduce-scatter, all-gather half of it.

Over several levels, NCCL's rings: one ring per channel, laid out domain by domain, each crossing a
domain boundary through a different chip's link, so a chip sends the share e_l / n of its
2(n-1)/n S on level l, where e_l = n/s_(l-1) - n/s_l ring edges first cross level l (s: domain
sizes in group members); the links run at once (max over links). A chunk makes n-1 hops per pass,
e_l of them (one fewer at the top level) at level l's latency (NCCL tuning.cc: 2(nNodes-1)
inter-node steps of an all-reduce).
"""

from __future__ import annotations

import math

from ..network import KINDS, LINKS
from .base import Algorithm, Comp, blank, nodes


def ring_c(shape, lo: int, hi: int, passes: int, scale: float, reduce: bool) -> Comp:
    """`passes` ring passes (2: all-reduce, 1: reduce-scatter / all-gather) of scale x S over
    levels lo..hi (module docstring). One level: passes ((n-1)/n S / B + (n-1) alpha)."""
    fanout, size, link, kind, _ = shape
    n, inner = math.prod(fanout[lo:hi + 1]), math.prod(fanout[:lo])
    C, H, steps = blank(len(fanout))
    below = 1                                            # group members per level-(l-1) domain
    for l in range(lo, hi + 1):
        members = n if l == hi else size[l] // inner
        edges = (n // below if n // below > 1 else 0) - (n // members if n // members > 1 else 0)
        hops = edges - 1 if l == hi else edges
        below = members
        C[LINKS.index(link[l]), l] += scale * passes * (n - 1) / n * edges / n
        H[0, l] += passes * hops
        steps[0, KINDS.index(kind[l])] += passes * hops
    return Comp(C, H, C, H, steps, (n - 1) / n * scale if reduce else 0.0, passes * (n - 1) / n * scale, scale,
                n, nodes(fanout, lo, hi))


ALGORITHM = Algorithm(
    "ring",
    all_reduce=lambda shape, lo, hi, scale: [ring_c(shape, lo, hi, 2, scale, True)],
    rs_or_ag=lambda shape, lo, hi, reduce, scale: [ring_c(shape, lo, hi, 1, scale, reduce)],
)
