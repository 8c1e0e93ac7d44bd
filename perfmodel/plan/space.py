"""The plan space: every rule of what a plan may be, in one place.

Sharding types and their indices, which column-wise splits a table may take, the ranks each
sharding type puts a table on, which collective algorithms and dense modes a system allows, and
the additive logit masks (Masks) that carry all of it to the searches. The discrete checks
(plans.validate_plan), the constraints' arrays (limits.resolve), the relaxed plans (search.relax)
and the search's moves read these rules rather than restating them.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from ..hardware import System, whole_system
from ..pytree import pytree
from ..schema import (ALGORITHMS, ALLOWED_ALGORITHMS, COLLECTIVES, COMPUTE_KERNELS, DENSE_MODES, PRECISIONS,  # noqa: F401 (the plan layer names them)
                      SHARDING_TYPES)
from ..workload import RankingModel

DP, TW, CW, RW, TWRW = range(5)      # indices into SHARDING_TYPES
MIN_CW_DIM = 32       # assumed: narrower column shards gather inefficiently (TorchRec's own default is 128)
PRECISION_BYTES = (4.0, 2.0, 1.0)
NEG = -1e9            # an additive logit mask's "not allowed"
TOL = 1e-6            # a cache ratio within this of a bound (or of 1) is on it


def splits_evenly(dim: int, k: int) -> bool:
    """Column-wise over k ranks splits a table of `dim` columns into k equal shards (TorchRec splits
    the columns evenly; an uneven split it does not make at all)."""
    return k >= 1 and dim % k == 0


def cw_options(dim: int, D: int, min_dim: int = MIN_CW_DIM, max_k: int | None = None) -> list[int]:
    """Column-wise shard counts k a table may take: 2 <= k <= D (and <= max_k), the k shards even
    (splits_evenly) and each at least min_dim columns wide."""
    hi = min(D, dim // max(int(min_dim), 1), D if max_k is None else max_k)
    return [k for k in range(2, hi + 1) if splits_evenly(dim, k)]


def compute_kernel(sharding_type: str, cache_ratio: float) -> str:
    """TorchRec's compute kernel of a table's plan (COMPUTE_KERNELS)."""
    if sharding_type == "data_parallel":
        return "dense"
    return "fused" if cache_ratio >= 1.0 else "fused_uvm_caching"


def domain_ranks(domain: int, D: int, L: int) -> list[int]:
    """The ranks of scale-up domain `domain` (domains of L ranks; the last one holds what is left of D)."""
    return list(range(domain * L, min(domain * L + L, D)))


def table_ranks(sharding: int, place_row, domain: int, k: int, D: int, L: int) -> list[int]:
    """The ranks of one table: table_wise the top device of its placement row, column_wise the top k
    (stable order), table_row_wise the whole scale-up domain, the others every rank."""
    if sharding == TW:
        return [int(np.argmax(place_row))]
    if sharding == CW:
        return sorted(int(r) for r in np.argsort(-np.asarray(place_row), kind="stable")[:k])
    if sharding == TWRW:
        return domain_ranks(domain, D, L)
    return list(range(D))


def row_partials(ranks: list[int], system: System) -> int:
    """The partial sums per sample a row_wise table over `ranks` sends each device: one per rank; one
    per scale-up domain where the ranks are two or more whole domains of equal ones (not every rank):
    such a table is reduced inside each domain first, over its fast links, as HugeCTR's hier_auto
    plans run (its node's shard spread over the node's GPUs, the reduction hierarchical)."""
    D, L = system.num_chips, system.domain_size
    doms = sorted({r // L for r in ranks})
    whole = not system.uneven_domains and len(ranks) == len(doms) * L and sorted(ranks) == [
        r for d in doms for r in domain_ranks(d, D, L)]
    return len(doms) if whole and 2 <= len(doms) and len(ranks) < D else len(ranks)


def has_hybrid(system: System) -> bool:
    """Hybrid dense parallelism shards the dense part inside each scale-up domain and replicates it
    across them: it needs two or more equal domains (with one it is fully sharded). A 2D plan's
    dense part spans the whole system (hardware.whole_system), so its domains decide."""
    system = whole_system(system)
    return len(system.levels) > 1 and not system.uneven_domains


def has_table_row_wise(system: System) -> bool:
    """table_row_wise spans one scale-up domain: with one domain (or domains of one chip) it is row_wise."""
    return len(system.levels) > 1 and system.domain_size > 1


def table_row_wise_problem(sequence: bool) -> str | None:
    """Why a table may not be table_row_wise, in words; None where it may. The one statement of the
    rule that both the search's masks and validate_plan read: table_row_wise sums a pooled table's
    rows inside the domain before they cross it, and a sequence table's rows are not summed, so all
    of them would leave the domain."""
    if sequence:
        return ("table_row_wise is modelled for pooled tables; a sequence table's rows are not summed inside the "
                "domain, so all of them would leave it: use row_wise, column_wise or table_wise")
    return None


def algorithm_mask() -> np.ndarray:
    """[collectives, algorithms]: 0 where the collective may run the algorithm, NEG where not."""
    algos = np.full((len(COLLECTIVES), len(ALGORITHMS)), NEG, np.float32)
    for c, kind in enumerate(COLLECTIVES):
        for a in ALLOWED_ALGORITHMS[kind]:
            algos[c, ALGORITHMS.index(a)] = 0.0
    return algos



@pytree
@dataclass(frozen=True)
class Limits:
    """Per-table constraints as arrays over T tables, D devices, H domains (1.0 allowed, 0.0 not):
    what limits.resolve makes of a constraint set, and every search method reads."""

    types: np.ndarray          # [T, 5]
    devices: np.ndarray        # [T, D] devices a table-wise / column-wise shard may be on
    domains: np.ndarray        # [T, H] domains a table_row_wise table may be on
    shards: np.ndarray         # [T, D + 1] column-wise shard counts k allowed (index k)
    fused: np.ndarray          # [T] a cache ratio of 1 (fused) allowed
    caching: np.ndarray        # [T] a cache ratio < 1 (fused_uvm_caching) allowed ...
    cache_lo: np.ndarray       # [T] ... within [cache_lo, cache_hi]
    cache_hi: np.ndarray
    min_dim: np.ndarray        # [T] the narrowest column-wise shard a search makes (min_partition, else MIN_CW_DIM)

    def target_cache(self) -> np.ndarray:
        """[T] the cache ratio a fresh placement takes: 1 where fused is allowed, else cache_hi."""
        xp = np if isinstance(self.fused, np.ndarray) else jax.numpy
        return xp.where(self.fused > 0, 1.0, self.cache_hi)

    def cache_allowed(self, cache, t=slice(None)):
        """1.0 where a table may keep the cache ratio `cache` (per table, or for the tables t): a ratio
        of 1 where fused is allowed, one below 1 where caching is and it is within the bounds."""
        xp = np if isinstance(cache, np.ndarray) and isinstance(self.fused, np.ndarray) else jax.numpy
        lo, hi = self.cache_lo[t], self.cache_hi[t]
        return xp.where(cache >= 1.0 - TOL, self.fused[t], self.caching[t] * ((cache >= lo - TOL) & (cache <= hi + TOL)))

    def cache_ok(self, t: int, ratio: float) -> bool:
        return bool(self.cache_allowed(np.asarray(ratio, np.float64), t) > 0)

    def clip_cache(self, t: int, ratio: float) -> float:
        """The allowed cache ratio nearest `ratio` (1 stays 1 where fused is allowed)."""
        if self.cache_ok(t, ratio):
            return float(ratio)
        if self.caching[t] > 0:
            return float(np.clip(ratio, self.cache_lo[t], self.cache_hi[t]))
        return 1.0


def unlimited(T: int, D: int, H: int) -> Limits:
    one = lambda *s: np.ones(s, np.float32)
    # the cache bounds in float64: a ratio the user wrote (0.3) comes back as written
    return Limits(one(T, 5), one(T, D), one(T, H), one(T, D + 1), one(T), one(T), np.zeros(T), np.ones(T),
                  np.full(T, MIN_CW_DIM, np.float32))


@pytree
@dataclass(frozen=True)
class Masks:
    """Which discrete choices are allowed (additive logit masks: 0 allowed, NEG not). A pytree of
    arrays, so jitted search steps take it as an argument and compile once per problem shape."""

    types: np.ndarray        # [T, 5]
    algos: np.ndarray        # [collectives, algorithms]
    a2a: np.ndarray          # [3]
    grad: np.ndarray         # [3]
    dense: np.ndarray        # [3]
    k_max: np.ndarray        # [T] largest column-wise shard count
    engines: np.ndarray      # 1.0 where the chip has offload engines
    shards: np.ndarray       # [T, D + 1] 1.0 where k column-wise shards are allowed (cw_options, constraints)
    limits: Limits           # the per-table constraints (all allowed when none)

    def cw(self, t: int) -> list[int]:
        """The column-wise shard counts table t may take."""
        return [int(k) for k in np.flatnonzero(np.asarray(self.shards[t]) > 0)]

    @property
    def has_engines(self) -> bool:
        return bool(np.asarray(self.engines) > 0)


def make_masks(system: System, model: RankingModel, precisions=("fp32",), sharding_types=SHARDING_TYPES,
               dense_modes=DENSE_MODES, limits: Limits | None = None) -> Masks:
    """The allowed choices: the model's and system's, the search's sharding types and precisions,
    and the per-table constraints (`limits`, limits.resolve)."""
    T, D = model.tables.count, system.num_chips
    limits = limits if limits is not None else unlimited(T, D, system.num_domains)
    dims = np.asarray(model.tables.dim).astype(int)
    seq = np.asarray(model.tables.sequence) > 0
    types = np.where(np.asarray(limits.types) > 0, 0.0, NEG).astype(np.float32)
    for j, name in enumerate(SHARDING_TYPES):
        if name not in sharding_types:
            types[:, j] = NEG
    k_max = np.ones(T, np.float32)
    shards = np.zeros((T, D + 1), np.float32)
    for t in range(T):
        opts = [k for k in cw_options(int(dims[t]), D, int(limits.min_dim[t])) if limits.shards[t, k] > 0]
        shards[t, opts] = 1.0
        if opts:
            k_max[t] = max(opts)
        else:
            types[t, CW] = NEG
        if D == 1:
            types[t, [CW, RW, TWRW, DP]] = NEG
        if types[t, CW] < -1:
            shards[t] = 0.0                    # a type ruled out has no shard counts
        if not has_table_row_wise(system) or table_row_wise_problem(bool(seq[t])):
            types[t, TWRW] = NEG
    prec = lambda allowed: np.asarray([0.0 if p in allowed else NEG for p in PRECISIONS], np.float32)
    dense = np.asarray([0.0 if m in dense_modes else NEG for m in DENSE_MODES], np.float32)
    if not has_hybrid(system):
        dense[DENSE_MODES.index("hybrid")] = NEG
    return Masks(types, algorithm_mask(), prec(precisions), prec(precisions), dense, k_max,
                 np.float32(1.0 if float(system.offload.engines) > 0 else 0.0), shards, limits)
