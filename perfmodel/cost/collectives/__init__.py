"""Collectives over a hierarchical network, each algorithm a latency term plus bytes / bandwidth,
driven by offload engines or by the cores with NCCL's protocols (NCCL's own model: nccl.py).

  network.py     the Net: per-level bandwidths and latencies of one evaluation
  algorithms/    the registry of algorithms (ring, direct, tree, hierarchical, in-network inside the
                 last), one module each, as static coefficients of the network's shape
  nccl.py        NCCL's constants: protocols, LL's cap, channels by size, NVLS, CollNet
  timing.py      the times: all_reduce, reduce_scatter, all_gather, all_to_all, NCCL's choice
"""

from .algorithms import DIRECT, HIER, REGISTRY, RING, TREE
from .network import KINDS, LINKS, Net, make_net
from .nccl import PROTOCOLS
from .timing import (Parts, all_gather, all_reduce, all_to_all, all_to_all_fixed, has_nvls, nccl_all_reduce,
                     nvls_all_reduce, protocol_times, reduce_scatter, ring_parts)

__all__ = ["DIRECT", "HIER", "REGISTRY", "RING", "TREE", "KINDS", "LINKS", "Net", "make_net", "PROTOCOLS", "Parts", "all_gather",
           "all_reduce", "all_to_all", "all_to_all_fixed", "has_nvls", "nccl_all_reduce", "nvls_all_reduce",
           "protocol_times", "reduce_scatter", "ring_parts"]
