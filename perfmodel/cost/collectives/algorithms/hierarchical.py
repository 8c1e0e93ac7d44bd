"""Hierarchical: reduce-scatter inside the innermost level, the rest on S / fanout one level out,
all-gather back, the stages pipelined (their link loads add, the busiest sets the pace). Where the
outer level's switches reduce (SHARP), its all-reduce runs in the network (NCCL's CollNet); where
the inner level's switch reduces, NVLS can run the inner stages (NCCL's NVLSTree). Its all-to-all
form sends one aggregated message per remote domain.
"""

from __future__ import annotations

import numpy as np

from ..network import LINKS
from . import ring
from .base import Algorithm, Comp, blank, nodes


def innet_c(shape, l: int, scale: float) -> Comp:
    """An all-reduce across level l in its switches (SHARP): each chip sends scale x S up once and
    receives the reduced scale x S once, at half its link's rate (NCCL's CollNet model: algbw =
    busBw x 0.5, busBw = the node's NICs; CoreWeave's 8-node SHARP run measures 196 GB/s of the
    8 x 48.5 GB/s NICs); the engines' form is the same transfer at two of the level's steps."""
    fanout, _, link, _, _ = shape
    K = len(fanout)
    C, H, steps = blank(K)
    C[LINKS.index(link[l]), l] = 2.0 * scale
    H[0, l] = 2.0
    n = fanout[l]
    return Comp(C, H, C, np.zeros_like(H), steps, 0.0, 2.0 * (n - 1) / n * scale, scale, 0, nodes(fanout, l, l), 1.0)


def _all_reduce(shape, lo: int, hi: int, scale: float) -> list:
    fanout, reduces = shape[0], shape[4]
    if lo == hi and lo > 0 and reduces[lo]:
        return [innet_c(shape, lo, scale)]
    if hi == lo:
        return ring.ALGORITHM.all_reduce(shape, lo, hi, scale)
    return (ring.ALGORITHM.components(shape, "reduce_scatter", lo, lo, scale)
            + ALGORITHM.components(shape, "all_reduce", lo + 1, hi, scale / fanout[lo])
            + ring.ALGORITHM.components(shape, "all_gather", lo, lo, scale))


def _rs_or_ag(shape, lo: int, hi: int, reduce: bool, scale: float) -> list:
    if hi == lo:
        return ring.ALGORITHM.rs_or_ag(shape, lo, hi, reduce, scale)
    op = "reduce_scatter" if reduce else "all_gather"
    return (ring.ALGORITHM.components(shape, op, lo, lo, scale)
            + ALGORITHM.components(shape, op, lo + 1, hi, scale / shape[0][lo]))


ALGORITHM = Algorithm(
    "hierarchical",
    all_reduce=_all_reduce,
    rs_or_ag=_rs_or_ag,
    pipelined=True,
    all_to_all="hierarchical",
    nvls="nvls_tree",
)
