"""A second cost model as a constraint on the plan search: per-shard costs, summed per device.

    guard = ShardCosts.from_dict(system, model, {"name": ..., "unit": "ms", "cap": 3.876, "tables": {...}})
    pm.search(system, model, guard=guard)      # the fastest plan (perfmodel's step) whose guard value <= cap

Many planners price a plan as the busiest device's sum of its shards' costs, each shard's cost
known before placement: TorchRec's planner does (`NoopPerfModel.rate`, the number its
`EmbeddingShardingPlanner` minimizes: max over ranks of the sum of its shards' `perf.total`, each
from `EmbeddingPerfEstimator`). A guard holds such costs per table and sharding type, and a cap; the
gradient search then treats a plan whose busiest device exceeds the cap as it treats one over its
memory: infeasible, ranked by how far over. With TorchRec's own plan's figure as the cap, the search
returns a plan at least as good as TorchRec's by TorchRec's estimate and as fast as it can find by
perfmodel's (benchmarks/vs_torchrec.py builds such a guard from TorchRec's estimator).

Costs per table (any subset of the sharding types; a type without costs is never used for the
table, a column-wise shard count without a cost neither):
  data_parallel    what each device bears for the replica (a number, or one per device)
  table_wise       the whole table on its device
  column_wise      {k: one shard's cost when the table is split in k} (k = 2, 3, ...)
  row_wise         the shard on each device (a number, or one per device: the i-th row block on device i)
  table_row_wise   the shard on each device of its scale-up domain (a number, or one per position in it)
A shard kept partly in host DRAM (cache ratio < 1) has no cost: a plan with one exceeds the cap.
Only the gradient search's hard scoring sees the guard; its relaxed restarts do not (their
roundings are scored and descended with it).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..cost.arrays import as_numpy, xp_of
from ..config import ConfigError, Num, check_number, read_file
from ..hardware import System
from ..pytree import pytree, static
from ..plan import CW, DP, RW, SHARDING_TYPES, TW, TWRW, Plan, TablePlan, cw_options, plan_arrays, stack
from ..workload import RankingModel
from .pack import rebalance
from ..schema import GUARD

UNPRICED = 1e9           # seconds: the cost of a shard the guard has no figure for (never under a cap)
MAX_S = 1e6              # seconds: the largest cost or cap a guard takes (assumed: no step costs 11 days)
MIN_CAP_S = 1e-9         # seconds: the smallest cap (a nanosecond; 1e-300 ms was 0 in float32, every plan over it)
TOLERANCE = 1e-5         # relative: float32 sums of a plan's shard costs meet a cap they equal
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@pytree
@dataclass(frozen=True)
class ShardCosts:
    """Per-shard costs of another cost model, seconds (T tables, D devices, L devices per scale-up
    domain, K the largest column-wise shard count priced), and the cap on the busiest device's sum.

      dp [T, D]  data-parallel replica, per device;   tw [T]  table-wise, on its device
      cw [T, K+1]  one column-wise shard when split in k (index k; UNPRICED where not given)
      rw [T, D]  row-wise shard on device d;   twrw [T, L]  table-row-wise shard at position i of its domain
    """

    dp: jax.Array
    tw: jax.Array
    cw: jax.Array
    rw: jax.Array
    twrw: jax.Array
    cap: jax.Array
    name: str = static(default="guard")

    @classmethod
    def from_dict(cls, system: System, model: RankingModel, data: dict, src: str = "guard") -> ShardCosts:
        """From {"name", "unit" ("s", "ms" or "us"; default "s"), "cap", "tables": {table: {sharding
        type: cost}}} (the module docstring); a bad entry is a ConfigError naming `src` and the field."""
        if not isinstance(data, dict):
            raise ConfigError(src, "", "must be an object with 'cap' and 'tables'")
        unknown = sorted(set(data) - set(GUARD))
        if unknown:
            raise ConfigError(src, unknown[0], f"unknown field; allowed: {', '.join(GUARD)}")
        unit = data.get("unit", "s")
        if not isinstance(unit, str) or unit not in UNITS:
            raise ConfigError(src, "unit", f"is {unit!r}; allowed: {', '.join(UNITS)}")
        scale = UNITS[unit]
        cap = _number(data.get("cap"), src, "cap", scale, least=MIN_CAP_S)
        tables = data.get("tables")
        names = list(model.tables.names)
        if not isinstance(tables, dict) or not tables:
            raise ConfigError(src, "tables", "must map table names to their costs per sharding type")
        extra = [n for n in tables if n not in names]
        if extra:
            raise ConfigError(src, f"tables.{extra[0]}", f"is not a table of model {model.name!r}")
        T, D, L = len(names), system.num_chips, system.domain_size
        kmax = max(2, min(D, int(np.max(np.asarray(model.tables.dim)))))
        dp, rw = np.full((T, D), UNPRICED), np.full((T, D), UNPRICED)
        tw, cw, twrw = np.full(T, UNPRICED), np.full((T, kmax + 1), UNPRICED), np.full((T, L), UNPRICED)
        for t, n in enumerate(names):
            costs = tables.get(n, {})
            where = f"tables.{n}"
            if not isinstance(costs, dict):
                raise ConfigError(src, where, "must map sharding types to costs")
            bad = [k for k in costs if k not in SHARDING_TYPES]
            if bad:
                raise ConfigError(src, f"{where}.{bad[0]}", f"unknown sharding type; allowed: {', '.join(SHARDING_TYPES)}")
            for key, arr, width in (("data_parallel", dp, D), ("row_wise", rw, D), ("table_row_wise", twrw, L)):
                if key in costs:
                    arr[t] = _per_device(costs[key], width, src, f"{where}.{key}", scale)
            if "table_wise" in costs:
                tw[t] = _number(costs["table_wise"], src, f"{where}.table_wise", scale)
            if "column_wise" in costs:
                split = costs["column_wise"]
                if not isinstance(split, dict):
                    raise ConfigError(src, f"{where}.column_wise", "must map shard counts k (2, 3, ...) to one shard's cost")
                for k, v in split.items():
                    if not (re.fullmatch(r"[0-9]{1,9}", str(k)) and 2 <= int(k) <= kmax):
                        raise ConfigError(src, f"{where}.column_wise.{k}", f"shard count must be an integer in 2..{kmax}")
                    cw[t, int(k)] = _number(v, src, f"{where}.column_wise.{k}", scale)
        f = lambda x: np.asarray(x, np.float32)
        return cls(dp=f(dp), tw=f(tw), cw=f(cw), rw=f(rw), twrw=f(twrw), cap=f(cap), name=str(data.get("name", "guard")))

    def with_cap(self, cap_s: float) -> ShardCosts:
        """The same costs under another cap (seconds)."""
        return dataclasses.replace(self, cap=np.float32(cap_s))

    def priced(self) -> np.ndarray:
        """[T, 5] whether each table has a cost for each sharding type (column-wise: for some k)."""
        ok = lambda x: np.asarray(x) < UNPRICED
        return np.stack([ok(self.dp).all(1), ok(self.tw), ok(self.cw).any(1), ok(self.rw).all(1),
                         ok(self.twrw).all(1)], axis=1)

    def loads(self, pa, domain_sizes: int | tuple[int, ...]):
        """[D] each device's sum of its shards' costs under the discrete plan arrays `pa`, on domains
        of `domain_sizes` devices (a number: all equal; System.domain_sizes). A partial last
        domain's devices hold L / L' times a full domain's table-row-wise share: their cost is the
        full domain's first L' devices' scaled by that much (assumed: the cost grows with the
        shard). In numpy, `pa` a batch [N, ...] (cost.arrays): [N, D]."""
        xp = xp_of(pa.shard_type)
        S = pa.shard_type
        D = pa.placement.shape[-1]
        if isinstance(domain_sizes, int):
            domain_sizes = (domain_sizes,) * (D // domain_sizes)
        T = self.tw.shape[0]
        k = xp.clip(xp.round(pa.cw_shards).astype(np.int32), 0, self.cw.shape[1] - 1)
        cw = xp.asarray(self.cw)[np.arange(T), k]                 # [..., T] one shard's cost
        held = pa.placement * pa.cw_shards[..., None]            # 1 on each device holding a table- or column-wise shard
        L, H = domain_sizes[0], len(domain_sizes)
        if all(s == L for s in domain_sizes):
            twrw = xp.repeat(pa.domain_placement, L, axis=-1) * xp.tile(self.twrw, (1, H))
        else:
            sizes = np.asarray(domain_sizes)
            grow = np.repeat(L / sizes, sizes).astype(np.float32)
            spread = (jnp.repeat(pa.domain_placement, sizes, axis=-1, total_repeat_length=D) if xp is jnp
                      else np.repeat(pa.domain_placement, sizes, axis=-1))
            twrw = spread * xp.tile(self.twrw, (1, H))[:, :D] * grow
        on = lambda j, x: xp.where(S[..., j:j + 1] > 0.5, x, 0.0)
        per = on(DP, self.dp) + on(RW, self.rw) + on(TW, self.tw[:, None] * held) + on(CW, cw[..., None] * held) \
            + on(TWRW, twrw)
        cached = xp.any((pa.cache_ratio < 1.0) & (S[..., DP] < 0.5), axis=-1)   # host DRAM shards: no cost known
        return xp.sum(per, axis=-2) + xp.where(cached, UNPRICED, 0.0)[..., None]

    def over(self, loads):
        """How far the busiest device is over the cap, as a fraction of it (0 when within it); [D]
        loads, or [N, D] in numpy."""
        xp = xp_of(loads)
        return xp.maximum(xp.max(loads, axis=-1) - self.cap * (1.0 + TOLERANCE), 0.0) / self.cap

    def within(self, value_s: float) -> bool:
        """Whether a plan of guard value `value_s` (seconds) meets the cap (to TOLERANCE)."""
        return bool(value_s <= float(self.cap) * (1.0 + TOLERANCE))

    def device_loads(self, plan: Plan, system: System, model: RankingModel) -> np.ndarray:
        """[D] each device's sum of its shards' costs under a discrete Plan, seconds (in numpy: no
        program to compile for one plan's sums)."""
        one = stack([plan_arrays(plan, system, model)])
        return np.asarray(as_numpy(self).loads(one, system.domain_sizes)[0], np.float64)

    def value(self, plan: Plan, system: System, model: RankingModel) -> float:
        """The plan's guard value: the busiest device's sum of its shards' costs, seconds."""
        return float(np.max(self.device_loads(plan, system, model)))


def packed_start(p, plan: Plan) -> Plan:
    """A start within the guard's cap where one is easy to find: every table the search may place
    table-wise made table-wise, or, when its cost exceeds the mean device's share of all tables'
    table-wise costs (a shard that alone would exceed it), column-wise in the fewest shards that
    each fit that share (the largest count otherwise); then packed on the guard's costs, heaviest
    shard first onto the device of least sum (pack.rebalance with the guard), memory permitting.
    Other choices are `plan`'s. Planners that price a plan this way reach their figure so (TorchRec's
    packs on its estimate); the descent then lowers the step within the cap. p: the search Problem.
    In numpy (the memory the packing keeps to too): a search holds it before any program is compiled."""
    guard, system, model, masks = p.guard, p.system, p.model, p.masks
    names, D = model.tables.names, system.num_chips
    tw, cw = np.asarray(guard.tw, np.float64), np.asarray(guard.cw, np.float64)
    dims = np.asarray(model.tables.dim)        # read once: a jax array indexed per table dispatches per index
    ok = np.asarray(masks.types) > -1
    share = float(np.sum(np.where(ok[:, TW], tw, 0.0))) / D
    tables = dict(plan.tables)
    for t, n in enumerate(names):
        ks = [k for k in cw_options(int(dims[t]), D) if k < cw.shape[1] and cw[t, k] < UNPRICED] if ok[t, CW] else []
        if ok[t, TW] and (tw[t] <= share or not ks):
            tables[n] = TablePlan("table_wise", [0])
        elif ks:
            fits = [k for k in ks if cw[t, k] <= share]
            k = fits[0] if fits else ks[int(np.argmin(cw[t, ks]))]
            tables[n] = TablePlan("column_wise", list(range(k)))
    typed = dataclasses.replace(plan, tables=tables)
    return rebalance(system, model, typed, p.details(typed, eager=True).memory_bytes, guard=guard)


def load_shard_costs(path, system: System, model: RankingModel) -> ShardCosts:
    """A guard from a JSON or TOML file (ShardCosts.from_dict's format)."""
    return ShardCosts.from_dict(system, model, read_file(path), src=str(path))


def guard_line(name: str, path: str, value_s: float, cap_s: float, met: bool) -> str:
    """One line on a plan's value under a guard (search --guard, evaluate --guard)."""
    return (f"guard {name} ({path}): the plan's busiest device {value_s * 1e3:.4g} ms, cap {cap_s * 1e3:.4g} ms: "
            f"{'met' if met else 'NOT met'}")


def _number(x, src: str, field: str, scale: float, least: float = 0.0) -> float:
    """A cost or the cap, in seconds (`scale`: the file's unit), checked by config.check_number: finite,
    at least `least` seconds (the cap: MIN_CAP_S, so that float32 holds it, not 0) and at most MAX_S,
    so that float32 sums stay finite (a cost of 1e50 ms overflowed to inf and the guard's sum was NaN)."""
    spec = Num(field, lo=least / scale, hi=MAX_S / scale, unit=next(u for u, f in UNITS.items() if f == scale))
    return check_number(x, spec, src, field) * scale


def _per_device(x, width: int, src: str, field: str, scale: float) -> np.ndarray:
    if isinstance(x, list):
        if len(x) != width:
            raise ConfigError(src, field, f"has {len(x)} entries; give one number, or {width} (one per device)")
        return np.asarray([_number(v, src, f"{field}[{i}]", scale) for i, v in enumerate(x)])
    return np.full(width, _number(x, src, field, scale))
