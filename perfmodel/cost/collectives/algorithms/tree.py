"""Tree: all-reduce 2 S / B_min + latency. On engines: 2 log2(n) alpha_max (double binary tree,
pipelined). Core-driven (NCCL): a chain inside the innermost domain of m chips and a double binary
tree across the n/m domains, 2 ((m-1) alpha_inner + log2(n/m) alpha_outer) (tuning.cc's tree
latency); one tree per channel, each leaving the domain through a different chip's link, so a chip
carries 2 S inside and 2 S / m across domains. NCCL's tree has its own share of the bus bandwidth
under each protocol (nccl.TREE_PROTOCOL_SHARE over the ring's), and with Simple reaches only part
of it at mid sizes (nccl.tree_correction). It has no reduce-scatter or all-gather form: it runs
the ring's.
"""

from __future__ import annotations

import math

import numpy as np

from .. import nccl
from ..network import KINDS, LINKS
from . import ring
from .base import Algorithm, Comp, blank, feature, nodes


def tree_c(shape, lo: int, hi: int, scale: float) -> Comp:
    """The tree all-reduce (module docstring): engines 2 S / B_min + 2 log2(n) alpha_max; cores a
    chain in the innermost domain of m chips and a double binary tree across domains."""
    fanout, _, link, kind, _ = shape
    K = len(fanout)
    n, m = math.prod(fanout[lo:hi + 1]), fanout[lo]
    outer = n // m
    Ce, He, _ = blank(K)
    for l in range(lo, hi + 1):
        Ce[l, l] = 2.0 * scale                           # the slowest level's 2 S / B_l
    He[0, feature(K, lo, hi)] = 2 * math.ceil(math.log2(n))
    # NCCL runs one tree per channel, each leaving the domain through a different chip's link: the
    # 2 S a domain sends up and down the inter-domain tree is spread over the domain's members.
    # Between two domains the double binary tree's two trees run opposite ways (each domain is the
    # root of one and the leaf of the other), so each direction of the link carries S, not 2 S
    # (sjeaugey, nccl-tests#196: "on two nodes ... tree can go beyond the network bottleneck")
    Cc, Hc, steps = blank(K)
    Cc[LINKS.index(link[lo]), lo] += 2.0 * scale
    below = m
    per_dir = 1.0 if outer == 2 else 2.0
    for l in range(lo + 1, hi + 1):
        Cc[LINKS.index(link[l]), l] += per_dir * scale / below
        below *= fanout[l]
    Hc[0, lo] += 2 * (m - 1)
    steps[0, KINDS.index(kind[lo])] += 2 * (m - 1)
    if outer > 1:
        k = 2 * math.ceil(math.log2(outer))
        Hc[0, feature(K, lo + 1, hi)] += k
        steps[0, KINDS.index(kind[hi])] += k
    return Comp(Ce, He, Cc, Hc, steps, (n - 1) / n * scale, 2.0 * (n - 1) / n * scale, scale, 0, nodes(fanout, lo, hi))


def _core_share(nodes_):
    """[C, P]: the ring's bus bandwidth share under each protocol over the tree's, per component
    spanning nodes_ scale-up domains (LL128 has its own share on several nodes)."""
    tree = np.asarray(nccl.TREE_PROTOCOL_SHARE, np.float32)[None, :].repeat(len(nodes_), 0)
    tree[np.asarray(nodes_) > 1, 1] = nccl.TREE_LL128_SHARE_MULTINODE
    return np.asarray(nccl.PROTOCOL_SHARE, np.float32) / tree


def _crowding(through, direct, whole: bool):
    """The cores' trees leave a domain through one chip at a time; the engines' tree sends 2 S at
    every level from every chip, a partial domain or not."""
    return through, tuple(1.0 for _ in through)


ALGORITHM = Algorithm(
    "tree",
    all_reduce=lambda shape, lo, hi, scale: [tree_c(shape, lo, hi, scale)],
    rs_or_ag=ring.ALGORITHM.rs_or_ag,
    crowding=_crowding,
    core_share=_core_share,
    simple_share=nccl.tree_correction,
)
