"""Per-table constraints on a plan, in TorchRec's vocabulary (its planner's ParameterConstraints).

    pm.search(system, model, constraints={"t0": {"sharding_types": ["table_wise"], "ranks": [3]},
                                          "t7": {"compute_kernels": ["fused_uvm_caching"],
                                                 "cache_load_factor": 0.3}})

Per table (every key optional):
  sharding_types      the sharding types the table may take (plan.SHARDING_TYPES)
  compute_kernels     dense (data_parallel), fused (every row in HBM), fused_uvm_caching (rows in
                      host DRAM with an HBM cache: a cache ratio < 1); fused_uvm (no HBM cache) is
                      not modelled, and says so
  cache_load_factor   the HBM cache ratio of a fused_uvm_caching table: a number, or [lo, hi]; alone
                      it means compute_kernels = [fused_uvm_caching]. fused_uvm_caching without
                      one takes TorchRec's default, 0.2, when it is the only kernel allowed
  min_partition       TorchRec's: the narrowest column-wise shard, in columns (shards are dim / k
                      wide, k | dim: TorchRec splits columns evenly and otherwise keeps the table whole)
  max_cw_shards       the most column-wise shards
  ranks               the ranks its shards may live on: table_wise on one of them, column_wise on k
                      of them, table_row_wise on a scale-up domain all of whose ranks are listed;
                      row_wise and data_parallel span every rank, so a list of fewer ranks
                      disallows them

A constraint set is given as a dict (Python, or a TOML/JSON file of [<table>] sections; a model file's
[constraints.<table>] sections), as TableConstraint values, or as TorchRec ParameterConstraints
objects (read by attribute: torchrec need not be installed). `resolve` checks it against a system
and a model and returns the arrays every search method reads (Limits); a request no plan can
satisfy is refused there, naming the table and the constraint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .config import ConfigError, read_file
from .hardware import _pytree
from .schema import CONSTRAINT
from .plan import COMPUTE_KERNELS, CW, DP, MIN_CW_DIM, RW, SHARDING_TYPES, TW, TWRW, Plan, PlanArrays, compute_kernel

KEYS = tuple(o.key for o in CONSTRAINT.values())
TORCHREC_CACHE_LOAD_FACTOR = 0.2     # TorchRec's planner constants.UVM_CACHING_RATIO (torchrec 1.8)
NOT_MODELLED_KERNELS = {"fused_uvm": "every row in host memory with no HBM cache is not modelled: use "
                                     "fused_uvm_caching with a small cache_load_factor"}
# ParameterConstraints fields that change nothing perfmodel models (the model file holds the
# workload: pooling, features, dtypes), read and set aside
TORCHREC_IGNORED = ("pooling_factors", "num_poolings", "batch_sizes", "is_weighted", "enforce_hbm",
                    "stochastic_rounding", "bounds_check_mode", "feature_names", "output_dtype", "use_virtual_table")
TOL = 1e-6


@dataclass(frozen=True)
class TableConstraint:
    """One table's constraints (module docstring); None: unconstrained."""

    sharding_types: tuple[str, ...] | None = None
    compute_kernels: tuple[str, ...] | None = None
    cache_load_factor: float | tuple[float, float] | None = None
    min_partition: int | None = None
    max_cw_shards: int | None = None
    ranks: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, (tuple, list)) else v for k in KEYS if (v := getattr(self, k)) is not None}


@dataclass(frozen=True)
class Constraints:
    """Constraints per table name, and where they came from (for messages)."""

    tables: dict[str, TableConstraint] = field(default_factory=dict)
    source: str = "constraints"
    ignored: tuple[str, ...] = ()       # TorchRec fields read and set aside ("t0.pooling_factors")

    def __bool__(self) -> bool:
        return bool(self.tables)

    def merged(self, other: "Constraints") -> "Constraints":
        """These constraints with `other`'s tables replacing theirs."""
        src = " + ".join(s for s in (self.source, other.source) if s)
        return Constraints({**self.tables, **other.tables}, src, self.ignored + other.ignored)

    def to_dict(self) -> dict:
        return {name: c.to_dict() for name, c in self.tables.items()}


# ------------------------------------------------------------------------------------- parsing
def _strings(value, src, name, vocab, what) -> tuple[str, ...]:
    value = [getattr(v, "value", v) for v in value] if isinstance(value, (list, tuple)) else value
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(src, name, f"must be a non-empty list of {what}: {', '.join(vocab)}")
    for v in value:
        if v in NOT_MODELLED_KERNELS and vocab is COMPUTE_KERNELS:
            raise ConfigError(src, name, f"{v!r}: {NOT_MODELLED_KERNELS[v]}")
        if v not in vocab:
            raise ConfigError(src, name, f"{v!r} is not one perfmodel models; allowed: {', '.join(vocab)}")
    return tuple(dict.fromkeys(value))


def _count(value, src, name, lo, what) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(src, name, f"must be an integer >= {lo} ({what}), got {value!r}")
    return value


def _ratio(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v < 1


def table_constraint(data: Any, src: str, where: str) -> TableConstraint:
    """One table's constraints from a dict (a file's [<table>] section), checked field by field."""
    if isinstance(data, TableConstraint):           # checked as any other
        data = data.to_dict()
    if not isinstance(data, dict):
        raise ConfigError(src, where, f"must be a table of constraints ({', '.join(KEYS)})")
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise ConfigError(src, f"{where}.{unknown[0]}", f"is not a constraint; allowed: {', '.join(KEYS)}")
    n = lambda k: f"{where}.{k}"
    out = {}
    if "sharding_types" in data:
        out["sharding_types"] = _strings(data["sharding_types"], src, n("sharding_types"), SHARDING_TYPES,
                                         "sharding types")
    if "compute_kernels" in data:
        out["compute_kernels"] = _strings(data["compute_kernels"], src, n("compute_kernels"), COMPUTE_KERNELS,
                                          "compute kernels")
    if "cache_load_factor" in data:
        v = data["cache_load_factor"]
        if isinstance(v, (list, tuple)) and len(v) == 2 and all(map(_ratio, v)) and v[0] <= v[1]:
            out["cache_load_factor"] = (float(v[0]), float(v[1]))
        elif _ratio(v):
            out["cache_load_factor"] = float(v)
        else:
            raise ConfigError(src, n("cache_load_factor"), "must be the HBM cache ratio of a fused_uvm_caching "
                              f"table, a number in (0, 1), or [lo, hi] with 0 < lo <= hi < 1; got {v!r}")
        kernels = out.get("compute_kernels")
        if kernels is not None and "fused_uvm_caching" not in kernels:
            raise ConfigError(src, n("cache_load_factor"), "is for fused_uvm_caching tables, which compute_kernels "
                              f"{list(kernels)} does not allow")
    if "min_partition" in data:
        out["min_partition"] = _count(data["min_partition"], src, n("min_partition"), 1,
                                      "the narrowest column-wise shard, in columns")
    if "max_cw_shards" in data:
        out["max_cw_shards"] = _count(data["max_cw_shards"], src, n("max_cw_shards"), 1, "column-wise shards")
    if "ranks" in data:
        r = data["ranks"]
        if (not isinstance(r, (list, tuple)) or not r
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in r)):
            raise ConfigError(src, n("ranks"), f"must be a non-empty list of ranks (integers >= 0), got {r!r}")
        if len(set(r)) != len(r):
            raise ConfigError(src, n("ranks"), "lists a rank twice")
        out["ranks"] = tuple(sorted(r))
    return TableConstraint(**out)


def from_torchrec(constraints: dict, src: str = "constraints") -> Constraints:
    """Constraints from TorchRec ParameterConstraints objects ({table name: ParameterConstraints}),
    read by attribute: sharding_types, compute_kernels, min_partition and cache_params.load_factor
    become ours; device_group "cpu" and key_value_params (SSD / parameter-server storage) are
    refused (not modelled); the fields in TORCHREC_IGNORED are set aside (Constraints.ignored)."""
    if not isinstance(constraints, dict):
        raise ConfigError(src, "", "must map table names to ParameterConstraints")
    tables, ignored = {}, []
    for name, pc in constraints.items():
        where = str(name)
        if getattr(pc, "device_group", None) not in (None, "cuda"):
            raise ConfigError(src, f"{where}.device_group", f"is {pc.device_group!r}: perfmodel models tables on "
                              "accelerators only (device_group cuda or none)")
        if getattr(pc, "key_value_params", None) is not None:
            raise ConfigError(src, f"{where}.key_value_params", "SSD / parameter-server storage is not modelled")
        d = {}
        for key in ("sharding_types", "compute_kernels", "min_partition"):
            if getattr(pc, key, None) is not None:
                d[key] = list(getattr(pc, key)) if key != "min_partition" else getattr(pc, key)
        load = getattr(getattr(pc, "cache_params", None), "load_factor", None)
        if load is not None:
            d["cache_load_factor"] = load
            d.setdefault("compute_kernels", ["fused_uvm_caching"])
        ignored += [f"{where}.{k}" for k in TORCHREC_IGNORED if getattr(pc, k, None) not in (None, False, [], [1.0])]
        tables[where] = table_constraint(d, src, where)
    return Constraints(tables, src, tuple(ignored))


def parse_constraints(data: Any, src: str = "constraints", prefix: str = "") -> Constraints:
    """Constraints from {table name: dict | TableConstraint | ParameterConstraints}; prefix: the
    section they sit in, for messages ("constraints." in a model file)."""
    if isinstance(data, Constraints):               # built by hand: its entries checked too
        return Constraints({n: table_constraint(c, data.source, n) for n, c in data.tables.items()}, data.source,
                           data.ignored)
    if not isinstance(data, dict):
        raise ConfigError(src, prefix.rstrip("."), "must map table names to their constraints")
    if any(not isinstance(v, (dict, TableConstraint)) and hasattr(v, "sharding_types") for v in data.values()):
        return from_torchrec(data, src)
    return Constraints({str(name): table_constraint(c, src, f"{prefix}{name}") for name, c in data.items()}, src)


def load_constraints(path: str | Path) -> Constraints:
    """Constraints from a TOML/JSON file: [<table>] sections, or a model file's [constraints.<table>]."""
    data = read_file(path)
    if "embeddings" in data or "dense" in data:            # a model file
        return parse_constraints(data.get("constraints", {}), str(path), "constraints.")
    return parse_constraints(data, str(path))


def as_constraints(value, src: str = "constraints") -> Constraints:
    """None, Constraints, a dict or a path to a file -> Constraints."""
    if value is None:
        return Constraints(source=src)
    if isinstance(value, (str, Path)):
        return load_constraints(value)
    return parse_constraints(value, src)


def check_tables(c: Constraints, tables, prefix: str = "") -> None:
    """Refuse constraints on a table the model lacks, or a min_partition wider than its table."""
    names = tables.names
    dims = dict(zip(names, np.asarray(tables.dim).astype(int)))
    for name, tc in c.tables.items():
        if name not in dims:
            shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
            raise ConfigError(c.source, f"{prefix}{name}", f"is not a table of the model (its tables: {shown})")
        if tc.min_partition is not None and tc.min_partition > dims[name]:
            raise ConfigError(c.source, f"{prefix}{name}.min_partition", f"is {tc.min_partition}, wider than the "
                              f"table's dim {dims[name]}: no column-wise shard can be that wide (at most {dims[name]})")


# ------------------------------------------------------------------------ resolved: as arrays
@_pytree
@dataclass(frozen=True)
class Limits:
    """Constraints as arrays over T tables, D devices, H domains (1.0 allowed, 0.0 not)."""

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

    def cache_ok(self, t: int, ratio: float) -> bool:
        if ratio >= 1.0 - TOL:
            return bool(self.fused[t] > 0)
        return bool(self.caching[t] > 0 and self.cache_lo[t] - TOL <= ratio <= self.cache_hi[t] + TOL)

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


def resolve(constraints, system, model, src: str | None = None) -> Limits | None:
    """The Limits of `constraints` (anything as_constraints takes) on this system and model; None
    when there are none. Raises ConfigError naming the table and the constraint for an unknown
    table, a rank the system lacks, or a table no plan can satisfy."""
    from .cost.memory import capacity_bytes
    c = as_constraints(constraints, src or "constraints")
    if not c:
        return None
    src = src or c.source
    names = model.tables.names
    T, D, L = len(names), system.num_chips, system.domain_size
    H = system.num_domains
    index = {n: i for i, n in enumerate(names)}
    check_tables(c, model.tables)
    lim = unlimited(T, D, H)
    dims = np.asarray(model.tables.dim).astype(int)
    size = np.asarray(model.tables.rows, np.float64) * np.asarray(model.tables.bytes_per_row(), np.float64)
    cap = float(capacity_bytes(system))
    for name, tc in c.tables.items():
        t, why = index[name], {}
        err = lambda key, msg: ConfigError(src, f"{name}.{key}", msg)
        if tc.sharding_types is not None:
            for j, st in enumerate(SHARDING_TYPES):
                if st not in tc.sharding_types:
                    lim.types[t, j] = 0.0
                    why[j] = "sharding_types"
        kernels = tc.compute_kernels
        if kernels is None and tc.cache_load_factor is not None:
            kernels = ("fused_uvm_caching",)
        if kernels is not None:
            if "dense" not in kernels:
                lim.types[t, DP], why[DP] = 0.0, why.get(DP, "compute_kernels")
            if "fused" not in kernels and "fused_uvm_caching" not in kernels:
                for j in (TW, CW, RW, TWRW):
                    lim.types[t, j], why[j] = 0.0, why.get(j, "compute_kernels")
            lim.fused[t] = 1.0 if "fused" in kernels else 0.0
            lim.caching[t] = 1.0 if "fused_uvm_caching" in kernels else 0.0
            lf = tc.cache_load_factor
            if lf is None and "fused" not in kernels:
                lf = TORCHREC_CACHE_LOAD_FACTOR
            if lf is not None:
                lim.cache_lo[t], lim.cache_hi[t] = (lf, lf) if isinstance(lf, float) else lf
        lo = tc.min_partition or 1
        lim.min_dim[t] = tc.min_partition or MIN_CW_DIM
        hi = tc.max_cw_shards if tc.max_cw_shards is not None else D
        for k in range(2, D + 1):
            if k > hi or dims[t] % k or dims[t] // k < lo:
                lim.shards[t, k] = 0.0
        if tc.ranks is not None:
            bad = [r for r in tc.ranks if r >= D]
            if bad:
                raise err("ranks", f"rank {bad[0]} does not exist: system {system.name} has ranks 0..{D - 1}")
            lim.devices[t] = 0.0
            lim.devices[t, list(tc.ranks)] = 1.0
            whole = np.minimum.reduceat(lim.devices[t], np.arange(0, D, L))   # domains all of whose ranks it may use
            lim.domains[t] = whole
            if len(tc.ranks) < D:
                for j in (RW, DP):
                    lim.types[t, j], why[j] = 0.0, why.get(j, "ranks")
            if not whole.any():
                lim.types[t, TWRW], why[TWRW] = 0.0, why.get(TWRW, "ranks")
            lim.shards[t, len(tc.ranks) + 1:] = 0.0
        _check_table(lim, t, name, dims[t], size[t], cap, D, L, tc, why, src)
    from .search.relax import make_masks
    types = make_masks(system, model, limits=lim).types            # with what the model and system allow
    for name, tc in c.tables.items():
        t = index[name]
        if not (types[t] > -1).any():
            key = next(k for k in KEYS if getattr(tc, k) is not None)
            left = [st for j, st in enumerate(SHARDING_TYPES) if lim.types[t, j] > 0]
            raise ConfigError(src, f"{name}.{key}", f"leaves table {name!r} {', '.join(left)}, which it cannot take on "
                              f"system {system.name} (column_wise needs k | dim, 2 <= k, shards >= "
                              f"{int(lim.min_dim[t])} columns; table_row_wise two scale-up domains and a pooled "
                              "feature; one chip takes table_wise only)")
    return lim


def _check_table(lim, t, name, dim, size, cap, D, L, tc, why, src):
    """Refuse a table no plan can satisfy: no sharding type left, or none whose smallest shard fits
    the usable HBM of a device (cache ratio as the constraints allow)."""
    from .config import fmt_bytes
    ks = [k for k in range(2, D + 1) if lim.shards[t, k] > 0 and dim % k == 0 and dim // k >= lim.min_dim[t]]
    if not ks:
        lim.types[t, CW], why[CW] = 0.0, why.get(CW, "min_partition" if tc.min_partition else
                                                  "max_cw_shards" if tc.max_cw_shards else "ranks")
    if not lim.types[t].any():
        keys = sorted(set(why.values()))
        raise ConfigError(src, f"{name}.{keys[0]}", f"leaves table {name!r} no sharding type: " + "; ".join(
            f"{SHARDING_TYPES[j]} is ruled out by {k}" for j, k in sorted(why.items())))
    ratio = 1.0 if lim.fused[t] > 0 else float(lim.cache_lo[t])
    share = {TW: 1.0, CW: max(ks, default=1), RW: D, TWRW: L, DP: 1.0}
    per = {j: size * (ratio if j != DP else 1.0) / share[j] for j in range(5) if lim.types[t, j] > 0}
    j = min(per, key=per.get)
    if per[j] > cap:
        key = "ranks" if tc.ranks is not None else (tc.sharding_types and "sharding_types") or "compute_kernels"
        raise ConfigError(src, f"{name}.{key}", f"leaves table {name!r} ({fmt_bytes(size)}) no plan that fits: its "
                          f"smallest shard ({SHARDING_TYPES[j]}) needs {fmt_bytes(per[j])} of HBM, a device may use "
                          f"{fmt_bytes(cap)}")


# ---------------------------------------------------------------------------- checking a plan
def violations(pa: PlanArrays, lim: Limits):
    """How far one-hot plan arrays (a batch: leading axes) are from satisfying the limits: a sum over
    tables of the share of each that breaks one (0: satisfied). Numpy or jax arrays alike."""
    xp = np if isinstance(pa.shard_type, np.ndarray) else jax.numpy
    S = pa.shard_type
    placed = S[..., TW] + S[..., CW]
    bad = xp.sum(S * (1.0 - lim.types), axis=-1)
    bad = bad + placed * xp.sum(pa.placement * (1.0 - lim.devices), axis=-1)
    bad = bad + S[..., TWRW] * xp.sum(pa.domain_placement * (1.0 - lim.domains), axis=-1)
    D = lim.shards.shape[-1] - 1
    k = xp.clip(xp.rint(pa.cw_shards), 0, D).astype(np.int32)
    k_ok = xp.take_along_axis(xp.broadcast_to(lim.shards, k.shape + (D + 1,)), k[..., None], axis=-1)[..., 0]
    bad = bad + S[..., CW] * (1.0 - k_ok)
    c = pa.cache_ratio
    in_range = (c >= lim.cache_lo - TOL) & (c <= lim.cache_hi + TOL)
    cache_ok = xp.where(c >= 1.0 - TOL, lim.fused, lim.caching * in_range)
    bad = bad + (1.0 - S[..., DP]) * (1.0 - cache_ok)
    return xp.sum(bad, axis=-1)


def plan_violations(plan: Plan, constraints, system, model, src: str = "plan") -> list[tuple[str, str]]:
    """Each (field, message) by which a discrete plan breaks the constraints, in table order."""
    c = as_constraints(constraints)
    check_tables(c, model.tables)
    out = []
    dims = {n: int(d) for n, d in zip(model.tables.names, np.asarray(model.tables.dim))}
    for name, tc in c.tables.items():
        t = plan.tables.get(name)
        if t is None:
            continue
        f = f"tables.{name}"
        st, k = t.sharding_type, len(t.ranks)
        kernel = compute_kernel(st, t.cache_ratio)
        kernels = tc.compute_kernels or (("fused_uvm_caching",) if tc.cache_load_factor is not None else None)
        if tc.sharding_types is not None and st not in tc.sharding_types:
            out.append((f + ".sharding_type", f"is {st}; its constraint sharding_types allows "
                        f"{', '.join(tc.sharding_types)}"))
        if kernels is not None and kernel not in kernels:
            out.append((f + ".cache_ratio", f"is {t.cache_ratio:g}, compute kernel {kernel}; its constraint "
                        f"compute_kernels allows {', '.join(kernels)}"))
        lf = tc.cache_load_factor
        if kernel == "fused_uvm_caching" and lf is not None:
            lo, hi = (lf, lf) if isinstance(lf, float) else lf
            if not lo - TOL <= t.cache_ratio <= hi + TOL:
                out.append((f + ".cache_ratio", f"is {t.cache_ratio:g}; its constraint cache_load_factor is {lf}"))
        if st == "column_wise":
            if tc.max_cw_shards is not None and k > tc.max_cw_shards:
                out.append((f + ".ranks", f"splits the table in {k} column-wise shards; max_cw_shards is "
                            f"{tc.max_cw_shards}"))
            if tc.min_partition is not None and dims[name] // k < tc.min_partition:
                out.append((f + ".ranks", f"makes column-wise shards {dims[name] // k} columns wide; min_partition "
                            f"is {tc.min_partition}"))
        if tc.ranks is not None and not set(t.ranks) <= set(tc.ranks):
            out.append((f + ".ranks", f"are {t.ranks}; its constraint ranks allows {list(tc.ranks)}"
                        + (f" ({st} spans every rank)" if st in ("row_wise", "data_parallel") else "")))
    return out


def check_plan(plan: Plan, constraints, system, model, src: str = "plan") -> None:
    """Raise ConfigError on the first constraint the plan breaks."""
    bad = plan_violations(plan, constraints, system, model, src)
    if bad:
        raise ConfigError(src, bad[0][0], bad[0][1] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))


def model_constraints(name_or_path) -> Constraints:
    """The [constraints.<table>] sections of a model file (a preset name or a path); none: empty."""
    from .hardware import _resolve
    path = _resolve("models", name_or_path)
    data = read_file(path)
    return parse_constraints(data.get("constraints", {}), str(path), "constraints.")


def for_command(model_arg: str, path: str | None) -> Constraints:
    """The constraints a command applies: the model file's [constraints.<table>], then the file
    given by --constraints (its tables replace the model file's)."""
    c = model_constraints(model_arg)
    return c.merged(load_constraints(path)) if path else c
