"""What a collective algorithm is made of: static coefficients of the network's shape (numpy, built
once per shape). Each algorithm is a sum of transfers ("components": a hierarchical all-reduce is a ring
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

A group of n chips moves a buffer of S bytes per chip (nccl-tests' algbw / busbw conventions). Each
algorithm (an Algorithm, one module of this package) gives its components for an all-reduce and for
a reduce-scatter or all-gather, and says how the rest of the model treats it: whether its stages run
at once, which all-to-all form it runs as, how a partial system crowds its links, and NCCL's own
adjustments of its core-driven all-reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..network import KINDS, spans


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


def feature(K: int, lo: int, hi: int) -> int:
    """Index of the largest alpha over levels lo..hi among the alpha features."""
    return lo if lo == hi else K + spans(K).index((lo, hi))


def blank(K: int):
    return np.zeros((max(K, 2), K)), np.zeros((2, K + len(spans(K)))), np.zeros((2, len(KINDS)))


def nodes(fanout, lo: int, hi: int) -> int:
    """Scale-up domains a group over levels lo..hi spans (NCCL's nodes)."""
    return math.prod(fanout[max(lo, 1):hi + 1]) if hi >= 1 else 1


def group_size(shape, lo: int, hi: int) -> int:
    """Chips in a group over levels lo..hi."""
    return math.prod(shape[0][lo:hi + 1])


def crowded_through(through, direct, whole: bool):
    """A partial system's byte factors per level for an algorithm whose transfers leave a domain
    through one chip at a time, on the cores and on the engines alike (network.partial_crowding)."""
    return through, through


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm: its components and how the rest of the model treats it."""

    name: str                          # its name in plans (schema.ALGORITHMS)
    all_reduce: Callable               # (shape, lo, hi, scale) -> [Comp], a group of several chips
    rs_or_ag: Callable                 # (shape, lo, hi, reduce, scale) -> [Comp]: reduce-scatter or all-gather
    pipelined: bool = False            # its components run at once, chunk by chunk: their link loads add
    all_to_all: str = "direct"         # the all-to-all form it runs as: "direct" or "hierarchical"
    crowding: Callable = crowded_through   # (through, direct, whole) -> (cores', engines' byte factors) per level
    # the core-driven all-reduce's bus bandwidth under each protocol over the ring's: nodes [C] -> [C, P]
    core_share: Callable | None = None
    # ... and its Simple protocol's share of that at S bytes: (xp, S) -> (0, 1]
    simple_share: Callable | None = None
    nvls: str | None = None            # the NVLS form NCCL swaps in where a scale-up switch reduces (timing.NVLS)

    def components(self, shape, op: str, lo: int, hi: int, scale: float = 1.0) -> list:
        """The components of `op` over levels lo..hi on scale x S bytes; none for a single chip."""
        if group_size(shape, lo, hi) == 1:
            return []
        if op == "all_reduce":
            return self.all_reduce(shape, lo, hi, scale)
        return self.rs_or_ag(shape, lo, hi, op == "reduce_scatter", scale)


def a2a_c(shape, hier: bool) -> Comp:
    """The all-to-all's latency and steps (its transfer is the devices' volumes, not a coefficient):
    alpha_l (1 + (peers_l - 1) / m) at each level; hierarchical: one aggregated message per remote
    domain, peers_l / fanout_0 beyond the first level."""
    fanout, size, _, kind, _ = shape
    C, H, steps = blank(len(fanout))
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
