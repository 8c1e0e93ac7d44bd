"""The collective algorithms as static coefficients of the network's shape (numpy, built once per
shape): each algorithm is a sum of transfers ("components": a hierarchical all-reduce is a ring
reduce-scatter inside the domain, an all-reduce one level out on S / fanout and a ring all-gather),
each linear in S, on the engines and on the cores:

  bytes    S max_j sum_l C[j, l] / B_l    j: the links, which run at once (or, for the engines' tree,
                                             the levels: the slowest sets the pace)
  latency  sum_f (H[0, f] + H[1, f] / m) a_f    a: each level's alpha, then the largest alpha of
                                             each span of levels; m: messages in flight
  steps    per link kind, the same way (the core-driven protocols' extra latency per step)
  reduced  the share of S reduced per chip (engines: at their throughput; cores: at HBM speed)
  bus      the nccl-tests bus bytes per chip over S (LL's cap applies to them)
  scale    the component's buffer over S (NCCL sizes its channels by it), ranks (a ring's LL
           threshold grows with them), nodes (LL's cap on several nodes), innet (an in-network
           reduction: Simple only, its own latency)

For a group of n chips and a buffer of S bytes per chip (nccl-tests' algbw / busbw conventions):

  ring      all-reduce 2(n-1)/n S / B + 2(n-1) alpha;  reduce-scatter, all-gather half of it.
            Over several levels, NCCL's rings: one ring per channel, laid out domain by domain, each
            crossing a domain boundary through a different chip's link, so a chip sends the share
            e_l / n of its 2(n-1)/n S on level l, where e_l = n/s_(l-1) - n/s_l ring edges first
            cross level l (s: domain sizes in group members); the links run at once (max over
            links). A chunk makes n-1 hops per pass, e_l of them (one fewer at the top level) at
            level l's latency (NCCL tuning.cc: 2(nNodes-1) inter-node steps of an all-reduce).
  tree      all-reduce 2 S / B_min + latency. On engines: 2 log2(n) alpha_max (double binary tree,
            pipelined). Core-driven (NCCL): a chain inside the innermost domain of m chips and a
            double binary tree across the n/m domains, 2 ((m-1) alpha_inner + log2(n/m) alpha_outer)
            (tuning.cc's tree latency); one tree per channel, each leaving the domain through a
            different chip's link, so a chip carries 2 S inside and 2 S / m across domains.
  direct    every chip talks to every peer at once: the bytes to peers at level l go at B_l, links in
            parallel; latency alpha (1 + (n-1)/m) with m messages in flight (offload engines raise m).
            All-reduce: reduce-scatter + all-gather (two-shot).
  hierarchical  reduce-scatter inside the innermost level, the rest on S / fanout one level out,
            all-gather back, the stages pipelined (their link loads add, the busiest sets the pace).
            Where the outer level's switches reduce (SHARP), its all-reduce runs in the network
            (NCCL's CollNet); where the inner level's switch reduces, NVLS can run the inner stages
            (NCCL's NVLSTree).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from .network import KINDS, LINKS, _spans

RING, DIRECT, TREE, HIER = range(4)


class Comp(NamedTuple):
    """One transfer's static coefficients (module docstring); J = max(K, 2) rows, F alpha features."""

    eng_bytes: np.ndarray      # [J, K]
    eng_lat: np.ndarray        # [2, F]
    core_bytes: np.ndarray     # [J, K]
    core_lat: np.ndarray       # [2, F]
    steps: np.ndarray          # [2, len(KINDS)]: steps, steps per message in flight
    reduced: float
    bus: float = 0.0
    scale: float = 1.0
    ranks: int = 0
    nodes: int = 1
    innet: float = 0.0


def _feature(K: int, lo: int, hi: int) -> int:
    """Index of the largest alpha over levels lo..hi among the alpha features."""
    return lo if lo == hi else K + _spans(K).index((lo, hi))


def _blank(K: int):
    return np.zeros((max(K, 2), K)), np.zeros((2, K + len(_spans(K)))), np.zeros((2, len(KINDS)))


def _nodes(fanout, lo: int, hi: int) -> int:
    """Scale-up domains a group over levels lo..hi spans (NCCL's nodes)."""
    return math.prod(fanout[max(lo, 1):hi + 1]) if hi >= 1 else 1


def _ring_c(shape, lo: int, hi: int, passes: int, scale: float, reduce: bool) -> Comp:
    """`passes` ring passes (2: all-reduce, 1: reduce-scatter / all-gather) of scale x S over
    levels lo..hi (module docstring). One level: passes ((n-1)/n S / B + (n-1) alpha)."""
    fanout, size, link, kind, _ = shape
    n, inner = math.prod(fanout[lo:hi + 1]), math.prod(fanout[:lo])
    C, H, steps = _blank(len(fanout))
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
                n, _nodes(fanout, lo, hi))


def _direct_c(shape, lo: int, hi: int, scale: float, reduce: bool) -> Comp:
    """Every chip sends scale x S / n to every peer of the group at once (links in parallel);
    latency alpha_max (1 + (n-1)/m)."""
    fanout, size, link, kind, _ = shape
    K = len(fanout)
    n, inner = math.prod(fanout[lo:hi + 1]), math.prod(fanout[:lo])
    C, H, steps = _blank(K)
    below = 1
    for l in range(lo, hi + 1):
        peers = size[l] // inner - below                 # peers first reached at level l
        below = size[l] // inner
        C[LINKS.index(link[l]), l] += scale * peers / n
    H[:, _feature(K, lo, hi)] = (1.0, n - 1.0)
    steps[:, KINDS.index(kind[hi])] = (1.0, n - 1.0)
    return Comp(C, H, C, H, steps, (n - 1) / n * scale if reduce else 0.0, (n - 1) / n * scale, scale, 0,
                _nodes(fanout, lo, hi))


def _tree_c(shape, lo: int, hi: int, scale: float) -> Comp:
    """The tree all-reduce (module docstring): engines 2 S / B_min + 2 log2(n) alpha_max; cores a
    chain in the innermost domain of m chips and a double binary tree across domains."""
    fanout, _, link, kind, _ = shape
    K = len(fanout)
    n, m = math.prod(fanout[lo:hi + 1]), fanout[lo]
    outer = n // m
    Ce, He, _ = _blank(K)
    for l in range(lo, hi + 1):
        Ce[l, l] = 2.0 * scale                           # the slowest level's 2 S / B_l
    He[0, _feature(K, lo, hi)] = 2 * math.ceil(math.log2(n))
    # NCCL runs one tree per channel, each leaving the domain through a different chip's link: the
    # 2 S a domain sends up and down the inter-domain tree is spread over the domain's members.
    # Between two domains the double binary tree's two trees run opposite ways (each domain is the
    # root of one and the leaf of the other), so each direction of the link carries S, not 2 S
    # (sjeaugey, nccl-tests#196: "on two nodes ... tree can go beyond the network bottleneck")
    Cc, Hc, steps = _blank(K)
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
        Hc[0, _feature(K, lo + 1, hi)] += k
        steps[0, KINDS.index(kind[hi])] += k
    return Comp(Ce, He, Cc, Hc, steps, (n - 1) / n * scale, 2.0 * (n - 1) / n * scale, scale, 0, _nodes(fanout, lo, hi))


def _innet_c(shape, l: int, scale: float) -> Comp:
    """An all-reduce across level l in its switches (SHARP): each chip sends scale x S up once and
    receives the reduced scale x S once, at half its link's rate (NCCL's CollNet model: algbw =
    busBw x 0.5, busBw = the node's NICs; CoreWeave's 8-node SHARP run measures 196 GB/s of the
    8 x 48.5 GB/s NICs); the engines' form is the same transfer at two of the level's steps."""
    fanout, _, link, _, _ = shape
    K = len(fanout)
    C, H, steps = _blank(K)
    C[LINKS.index(link[l]), l] = 2.0 * scale
    H[0, l] = 2.0
    n = fanout[l]
    return Comp(C, H, C, np.zeros_like(H), steps, 0.0, 2.0 * (n - 1) / n * scale, scale, 0, _nodes(fanout, l, l), 1.0)


def _rs_or_ag_c(shape, lo: int, hi: int, algo: int, reduce: bool, scale: float = 1.0) -> list:
    """Components of a reduce-scatter (reduce=True) or all-gather. Tree has no reduce-scatter /
    all-gather form: it runs the ring."""
    if math.prod(shape[0][lo:hi + 1]) == 1:
        return []
    if algo == HIER and hi > lo:
        return (_rs_or_ag_c(shape, lo, lo, RING, reduce, scale)
                + _rs_or_ag_c(shape, lo + 1, hi, HIER, reduce, scale / shape[0][lo]))
    if algo == DIRECT:
        return [_direct_c(shape, lo, hi, scale, reduce)]
    return [_ring_c(shape, lo, hi, 1, scale, reduce)]


def _all_reduce_c(shape, lo: int, hi: int, algo: int, scale: float = 1.0) -> list:
    fanout, reduces = shape[0], shape[4]
    if math.prod(fanout[lo:hi + 1]) == 1:
        return []
    if algo == HIER and lo == hi and lo > 0 and reduces[lo]:
        return [_innet_c(shape, lo, scale)]
    if algo == RING or (algo == HIER and hi == lo):
        return [_ring_c(shape, lo, hi, 2, scale, True)]
    if algo == TREE:
        return [_tree_c(shape, lo, hi, scale)]
    if algo == DIRECT:        # two-shot: reduce-scatter + all-gather (NVLS where the switch reduces)
        return _rs_or_ag_c(shape, lo, hi, DIRECT, True, scale) + _rs_or_ag_c(shape, lo, hi, DIRECT, False, scale)
    return (_rs_or_ag_c(shape, lo, lo, RING, True, scale)
            + _all_reduce_c(shape, lo + 1, hi, HIER, scale / fanout[lo])
            + _rs_or_ag_c(shape, lo, lo, RING, False, scale))


@functools.cache
def table(shape, op: str, lo: int, hi: int):
    """Every algorithm's components, padded to one count: arrays [ALGORITHMS, C, ...] and `live`
    [ALGORITHMS, C] (1 for a real component: it pays the protocol's base latency); None when the
    group is a single chip."""
    if math.prod(shape[0][lo:hi + 1]) == 1:
        return None
    comps = [_all_reduce_c(shape, lo, hi, a) if op == "all_reduce" else
             _rs_or_ag_c(shape, lo, hi, a, op == "reduce_scatter") for a in range(4)]
    width = max(len(c) for c in comps)
    empty = Comp(*(np.zeros_like(x) for x in comps[0][0][:5]), 0.0, 0.0, 0.0, 0, 1, 0.0)
    rows = [c + [empty] * (width - len(c)) for c in comps]
    fields = {f: np.asarray([[getattr(c, f) for c in row] for row in rows], np.float32) for f in Comp._fields}
    fields["live"] = np.asarray([[1.0] * len(c) + [0.0] * (width - len(c)) for c in comps], np.float32)
    # the hierarchical forms run their stages at once, chunk by chunk (NCCL's NVLSTree and CollNet
    # pipelines; a topology-aware engine library alike): their links' loads add and the busiest
    # sets the pace, one protocol for the whole; the other algorithms' components run in turn
    fields["pipelined"] = np.asarray([float(a == HIER and len(c) > 1) for a, c in enumerate(comps)], np.float32)
    # components inside the innermost level alone (a hierarchical form's reduce-scatter and
    # all-gather there: NVLS can take them over where the scale-up switch reduces)
    fields["inner"] = np.asarray([[float(c.core_bytes[:, :1].any() and not c.core_bytes[:, 1:].any()) for c in row]
                                  for row in rows], np.float32)
    return fields


def a2a_c(shape, hier: bool) -> Comp:
    """The all-to-all's latency and steps (its transfer is the devices' volumes, not a coefficient):
    alpha_l (1 + (peers_l - 1) / m) at each level; hierarchical: one aggregated message per remote
    domain, peers_l / fanout_0 beyond the first level."""
    fanout, size, _, kind, _ = shape
    C, H, steps = _blank(len(fanout))
    below = 1
    for l in range(len(fanout)):
        peers = size[l] - below
        below = size[l]
        if peers <= 0:
            continue
        if hier and l > 0:
            peers = max(peers // fanout[0], 1)
        H[:, l] += (1.0, peers - 1.0)
        steps[:, KINDS.index(kind[l])] += (1.0, peers - 1.0)
    return Comp(C, H, C, H, steps, 0.0)
