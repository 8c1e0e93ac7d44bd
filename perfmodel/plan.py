"""Plans: the discrete Plan a user reads and writes, and PlanArrays, its (relaxable) array form.

A Plan says, per embedding table, its sharding type (TorchRec's names), the ranks holding it and
where it lives (HBM, or host DRAM with an HBM cache ratio); the dense parallelism; the algorithm
and precision of each collective; and the overlap settings. `to_arrays` turns it into one-hot
PlanArrays; the cost model only ever sees PlanArrays, so a relaxed plan (softmax probabilities,
fractional placements) runs through the very same code, and at one-hot values equals the hard
result by construction.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .config import ConfigError, read_file
from .hardware import System, _pytree
from .schema import (ALGORITHMS, ALLOWED_ALGORITHMS, COLLECTIVES, COMPUTE_KERNELS, DENSE_MODES, PLAN,  # noqa: F401
                     PRECISIONS, SHARDING_TYPES)
from .workload import RankingModel

DP, TW, CW, RW, TWRW = range(5)      # indices into SHARDING_TYPES
MIN_CW_DIM = 32       # assumed: narrower column shards gather inefficiently (TorchRec's own default is 128)
PRECISION_BYTES = (4.0, 2.0, 1.0)
MAX_PLAN_ENTRIES = 2 ** 28    # random_plans' n x tables x devices: its placements stay within 1 GB of float32


@_pytree
@dataclass(frozen=True)
class PlanArrays:
    """A plan as arrays (T tables, D devices, H = D / scale-up-domain domains).

    Discrete plans are one-hot; relaxed plans hold probabilities and fractions.
      shard_type [T, 5]   probabilities over SHARDING_TYPES
      placement  [T, D]   share of the table on each device under table_wise / column_wise (rows sum to 1)
      domain_placement [T, H]  share on each scale-up domain under table_row_wise (rows sum to 1)
      cw_shards  [T]      column-wise shard count k (the shard's row is dim / k wide)
      cache_ratio [T]     fraction of the table's shard kept in HBM; the rest lives in host DRAM
      dense_mode [3]      probabilities over DENSE_MODES
      algorithm  [4, 4]   per collective kind (COLLECTIVES), probabilities over ALGORITHMS
      a2a_precision, grad_precision [3]  probabilities over PRECISIONS
      offload, pipeline   in [0, 1]: collectives on the offload engines; sparse-dist pipelining
      grad_buckets, overlap_chunks  >= 1
      row_shards [T]      None, or per row_wise table over a subset of the devices (its placement
                          row holds 1 / its ranks on each) the partial sums per sample it sends each
                          device (row_partials; D: every device, reduce-scattered): None means
                          row_wise spans every device, as plans the search makes do. A framework's
                          planner (HugeCTR's) splits a table over a subset of the devices, which the
                          cost model then prices as its own case.
    """

    shard_type: jax.Array
    placement: jax.Array
    domain_placement: jax.Array
    cw_shards: jax.Array
    cache_ratio: jax.Array
    dense_mode: jax.Array
    algorithm: jax.Array
    a2a_precision: jax.Array
    grad_precision: jax.Array
    offload: jax.Array
    pipeline: jax.Array
    grad_buckets: jax.Array
    overlap_chunks: jax.Array
    row_shards: jax.Array | None = None


@dataclass
class TablePlan:
    sharding_type: str
    ranks: list[int]
    cache_ratio: float = 1.0          # 1.0: all in HBM; < 1: host DRAM with this HBM cache ratio


@dataclass
class Plan:
    """A discrete plan. `tables` maps each table name (in model order) to its TablePlan."""

    tables: dict[str, TablePlan]
    dense: str = "replicated"
    algorithms: dict[str, str] = field(default_factory=lambda: {
        "all_to_all": "direct", "all_reduce": "ring", "reduce_scatter": "ring", "all_gather": "ring"})
    a2a_precision: str = "fp32"
    grad_precision: str = "fp32"
    offload: bool = True
    pipeline: bool = True
    grad_buckets: int = 4
    overlap_chunks: int = 1

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        d = asdict(self)
        d["tables"] = {k: asdict(v) for k, v in self.tables.items()}
        return d

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON. Refuses to overwrite an existing file (nothing a user wrote is lost),
        and a name the OS refuses, in one ConfigError."""
        from .files import write_new
        write_new(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def torchrec(self) -> dict[str, dict]:
        """Per-table {sharding_type, ranks, compute_kernel} as TorchRec's ParameterSharding wants."""
        return {name: {"sharding_type": t.sharding_type, "ranks": list(t.ranks),
                       "compute_kernel": compute_kernel(t.sharding_type, t.cache_ratio)}
                for name, t in self.tables.items()}


def compute_kernel(sharding_type: str, cache_ratio: float) -> str:
    """TorchRec's compute kernel of a table's plan (COMPUTE_KERNELS)."""
    if sharding_type == "data_parallel":
        return "dense"
    return "fused" if cache_ratio >= 1.0 else "fused_uvm_caching"


def load_plan(path: str | Path, system: System, model: RankingModel) -> Plan:
    """Read a plan JSON and check it against the system and model."""
    data = read_file(path)
    return plan_from_dict(data, system, model, str(path))


def plan_from_dict(data: dict, system: System, model: RankingModel, src: str = "plan") -> Plan:
    if isinstance(data, dict) and "plan" in data and "tables" not in data:     # a TorchRec plan's JSON
        if not isinstance(data.get("perfmodel_plan"), dict):
            raise ConfigError(src, "plan", "is a TorchRec sharding plan without perfmodel's own plan (the dense mode, "
                              "collective algorithms, buckets and chunks a step needs beside the shards); perfmodel "
                              "reads the TorchRec plans `perfmodel search --format torchrec` writes, which carry it "
                              "as perfmodel_plan")
        return plan_from_dict(data["perfmodel_plan"], system, model, f"{src}: perfmodel_plan")
    known = {o.key for o in PLAN.values() if not o.section}
    for k in data:
        if k not in known:
            raise ConfigError(src, k, f"is not a plan field (known: {', '.join(sorted(known))})")
    if "tables" not in data or not isinstance(data["tables"], dict):
        raise ConfigError(src, "tables", "is missing or not an object of table name -> sharding")
    tables = {}
    for name, t in data["tables"].items():
        if not isinstance(t, dict):
            raise ConfigError(src, f"tables.{name}", "must be an object with sharding_type and ranks")
        extra = set(t) - {o.key for o in PLAN.values() if o.section == "tables.<table>"}
        if extra:
            raise ConfigError(src, f"tables.{name}.{sorted(extra)[0]}", "is not a table-plan field "
                              "(known: sharding_type, ranks, cache_ratio)")
        tables[name] = TablePlan(t.get("sharding_type"), t.get("ranks"), t.get("cache_ratio", 1.0))
    plan = Plan(tables=tables, **{k: v for k, v in data.items() if k != "tables"})
    validate_plan(plan, system, model, src)
    return plan


def validate_plan(plan: Plan, system: System, model: RankingModel, src: str = "plan", constraints=None) -> None:
    """Raise ConfigError naming the field if the plan does not fit this system and model, or breaks
    `constraints` (anything constraints.as_constraints takes; None: none)."""
    names = model.tables.names
    D, L = system.num_chips, system.domain_size
    sizes = system.domain_sizes
    missing = [n for n in names if n not in plan.tables]
    if missing:
        raise ConfigError(src, f"tables.{missing[0]}", f"is missing: the plan must place all {len(names)} tables")
    unknown = [n for n in plan.tables if n not in names]
    if unknown:
        raise ConfigError(src, f"tables.{unknown[0]}", f"is not a table of model {model.name!r}")
    dims = np.asarray(model.tables.dim)
    for i, name in enumerate(names):
        t, f = plan.tables[name], f"tables.{name}"
        if t.sharding_type not in SHARDING_TYPES:
            raise ConfigError(src, f + ".sharding_type", f"is {t.sharding_type!r}; allowed: {', '.join(SHARDING_TYPES)}")
        if not isinstance(t.ranks, list) or not t.ranks or not all(isinstance(r, int) and not isinstance(r, bool) for r in t.ranks):
            raise ConfigError(src, f + ".ranks", "must be a non-empty list of integer ranks")
        bad = [r for r in t.ranks if not 0 <= r < D]
        if bad:
            raise ConfigError(src, f + ".ranks", f"rank {bad[0]} does not exist: system {system.name} has ranks 0..{D - 1}")
        if len(set(t.ranks)) != len(t.ranks):
            raise ConfigError(src, f + ".ranks", "lists a rank twice")
        st, k = t.sharding_type, len(t.ranks)
        if st == "table_wise" and k != 1:
            raise ConfigError(src, f + ".ranks", f"table_wise takes exactly one rank, got {k}")
        if st == "data_parallel" and sorted(t.ranks) != list(range(D)):
            raise ConfigError(src, f + ".ranks", f"{st} spans every rank: list 0..{D - 1}")
        if st == "row_wise" and k < D:
            if k < 2:
                raise ConfigError(src, f + ".ranks", f"row_wise spans at least two ranks (every rank, 0..{D - 1}, or a "
                                  f"subset as HugeCTR's planner splits a table); one rank is table_wise")
            if model.tables.sequence[i]:
                raise ConfigError(src, f + ".ranks", f"row_wise over a subset of the ranks is modelled for pooled "
                                  f"tables; a sequence table spans every rank: list 0..{D - 1}")
        if st == "column_wise" and dims[i] % k:
            raise ConfigError(src, f + ".ranks", f"column_wise over {k} ranks must divide dim {int(dims[i])} (TorchRec "
                              f"splits the columns into equal shards; uneven ones it does not shard at all)")
        if st == "table_row_wise":
            dom = t.ranks[0] // L
            if sorted(t.ranks) != domain_ranks(dom, D, L):
                raise ConfigError(src, f + ".ranks", f"table_row_wise spans one whole scale-up domain of {sizes[dom]} "
                                  f"ranks, e.g. {dom * L}..{dom * L + sizes[dom] - 1}")
        if isinstance(t.cache_ratio, bool) or not isinstance(t.cache_ratio, (int, float)) or not 0 < t.cache_ratio <= 1:
            raise ConfigError(src, f + ".cache_ratio", f"must be a number in (0, 1], got {t.cache_ratio!r}")
        if st == "data_parallel" and t.cache_ratio < 1:
            raise ConfigError(src, f + ".cache_ratio", "data_parallel tables live in HBM (cache_ratio 1)")
    _choice(src, "dense", plan.dense, DENSE_MODES)
    if plan.dense == "hybrid" and system.uneven_domains:
        raise ConfigError(src, "dense", f"hybrid shards the dense part inside each scale-up domain and replicates it "
                          f"across equal domains; {system.name}'s scale-up domains are {len(sizes) - 1} x {L} chips "
                          f"and one of {sizes[-1]}: use replicated or fully_sharded")
    _choice(src, "a2a_precision", plan.a2a_precision, PRECISIONS)
    _choice(src, "grad_precision", plan.grad_precision, PRECISIONS)
    if not isinstance(plan.algorithms, dict):
        raise ConfigError(src, "algorithms", "must be an object of collective -> algorithm")
    for kind, algo in plan.algorithms.items():
        if kind not in ALLOWED_ALGORITHMS:
            raise ConfigError(src, f"algorithms.{kind}", f"is not a collective; allowed: {', '.join(COLLECTIVES)}")
        _choice(src, f"algorithms.{kind}", algo, ALLOWED_ALGORITHMS[kind])
    for key in ("offload", "pipeline"):
        if not isinstance(getattr(plan, key), bool):
            raise ConfigError(src, key, f"must be true or false, got {getattr(plan, key)!r}")
    for key in ("grad_buckets", "overlap_chunks"):
        v = getattr(plan, key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1024:
            raise ConfigError(src, key, f"must be an integer from 1 to 1024, got {v!r}")
    if constraints is not None:
        from .constraints import check_plan
        check_plan(plan, constraints, system, model, src)


def domain_ranks(domain: int, D: int, L: int) -> list[int]:
    """The ranks of scale-up domain `domain` (domains of L ranks; the last one holds what is left of D)."""
    return list(range(domain * L, min(domain * L + L, D)))


def _choice(src, key, value, allowed):
    if value not in allowed:
        raise ConfigError(src, key, f"is {value!r}; allowed: {', '.join(allowed)}")


def to_arrays(plan: Plan, system: System, model: RankingModel) -> PlanArrays:
    """One-hot PlanArrays of a (validated) discrete plan."""
    return jax.tree_util.tree_map(jnp.asarray, plan_arrays(plan, system, model))


def plan_arrays(plan: Plan, system: System, model: RankingModel, tables: PlanArrays | None = None) -> PlanArrays:
    """to_arrays with numpy float32 leaves: what a search builds by the thousand (a jitted function
    takes them as they are; thirteen device transfers per plan cost more than the plan's scoring).
    tables: the arrays of a plan with the same tables (a variant of `plan`'s settings), whose table
    leaves are reused: only the settings are built (a search scores hundreds of such variants)."""
    settings = settings_arrays(plan)
    if tables is not None:
        return replace(tables, **settings)
    names = model.tables.names
    T, D, L = len(names), system.num_chips, system.domain_size
    H = system.num_domains
    st = np.zeros((T, 5), np.float32)
    pl = np.zeros((T, D), np.float32)
    dp = np.zeros((T, H), np.float32)
    cw = np.ones(T, np.float32)
    cache = np.ones(T, np.float32)
    rows = np.full(T, float(D), np.float32)
    for i, name in enumerate(names):
        t = plan.tables[name]
        j = SHARDING_TYPES.index(t.sharding_type)
        st[i, j] = 1.0
        if j in (TW, CW) or (j == RW and len(t.ranks) < D):
            pl[i, t.ranks] = 1.0 / len(t.ranks)
            cw[i] = len(t.ranks) if j == CW else 1.0
            rows[i] = row_partials(t.ranks, system) if j == RW else D
        else:
            pl[i, :] = 1.0 / D     # unused by these types; kept a valid distribution
        if j == TWRW:
            dp[i, t.ranks[0] // L] = 1.0
        else:
            dp[i, :] = 1.0 / H
        cache[i] = t.cache_ratio
    subset = bool(np.any(rows < D))     # only then the arrays carry row_shards (module docstring of PlanArrays)
    return PlanArrays(shard_type=st, placement=pl, domain_placement=dp, cw_shards=cw, cache_ratio=cache,
                      row_shards=rows if subset else None, **settings)


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


def settings_arrays(plan: Plan) -> dict:
    """The PlanArrays leaves of a plan's settings (dense parallelism, algorithms, precisions,
    offload, pipelining, buckets, chunks), numpy float32."""
    algo = np.zeros((4, 4), np.float32)
    defaults = Plan(tables={}).algorithms
    for c, kind in enumerate(COLLECTIVES):
        algo[c, ALGORITHMS.index(plan.algorithms.get(kind, defaults[kind]))] = 1.0
    onehot = lambda v, opts: np.eye(len(opts), dtype=np.float32)[opts.index(v)]
    f = lambda x: np.asarray(x, np.float32)
    return dict(dense_mode=onehot(plan.dense, DENSE_MODES), algorithm=algo,
                a2a_precision=onehot(plan.a2a_precision, PRECISIONS), grad_precision=onehot(plan.grad_precision, PRECISIONS),
                offload=f(1.0 if plan.offload else 0.0), pipeline=f(1.0 if plan.pipeline else 0.0),
                grad_buckets=f(plan.grad_buckets), overlap_chunks=f(plan.overlap_chunks))


def stand_in(system: System, model: RankingModel) -> Plan:
    """A plan of the problem's shape, to compile programs with before a real plan exists: table i
    table-wise on device i mod D (not checked: it may not fit)."""
    D = system.num_chips
    return Plan(tables={n: TablePlan("table_wise", [i % D], 1.0) for i, n in enumerate(model.tables.names)})


def stack(plans: list[PlanArrays]) -> PlanArrays:
    """Stack PlanArrays along a new leading axis, for jax.vmap (numpy leaves stay numpy)."""
    return jax.tree_util.tree_map(
        lambda *xs: np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs) else jnp.stack(xs), *plans)


# PlanArrays fields that hold probabilities or fractions (in [0, 1]), and those that count (>= 1)
_UNIT_FIELDS = ("shard_type", "placement", "domain_placement", "cache_ratio", "dense_mode", "algorithm",
                "a2a_precision", "grad_precision", "offload", "pipeline")
_COUNT_FIELDS = ("cw_shards", "grad_buckets", "overlap_chunks")


def check_arrays(pa: PlanArrays, system: System, model: RankingModel) -> None:
    """Raise ConfigError naming the field where concrete PlanArrays cannot be priced: a NaN or
    infinite entry, a probability or fraction outside [0, 1], a count below 1, or a shape that is not
    this model's tables on this system's devices (the model would return a NaN step or a shape error
    from inside jax). Traced plans (under jit, vmap or grad) are not checked."""
    T, D, H = model.tables.count, system.num_chips, system.num_domains
    last = {"shard_type": (T, 5), "placement": (T, D), "domain_placement": (T, H), "cw_shards": (T,),
            "cache_ratio": (T,)}
    arrays = {f: np.asarray(x, np.float64) for f in _UNIT_FIELDS + _COUNT_FIELDS + ("row_shards",)
              if (x := getattr(pa, f)) is not None}
    # every single-plan evaluate() runs this: one pass over all entries when the plan is sound (the
    # usual case), the field-by-field search below only to name what is wrong
    flat = lambda fields: np.concatenate([arrays[f].ravel() for f in fields])
    unit, counts = flat(_UNIT_FIELDS), flat(_COUNT_FIELDS)
    if (all(arrays[f].shape[arrays[f].ndim - len(w):] == w for f, w in last.items())
            and np.isfinite(flat(arrays)).all() and unit.min(initial=0.0) >= -1e-6
            and unit.max(initial=0.0) <= 1.0 + 1e-6 and counts.min(initial=1.0) >= 1.0 - 1e-6):
        return
    for f, a in arrays.items():
        want = last.get(f)
        if want is not None and a.shape[a.ndim - len(want):] != want:
            raise ConfigError("", f"plan.{f}", f"has shape {a.shape}; this model and system need (..., "
                              f"{', '.join(map(str, want))}) ({T} tables, {D} devices, {H} scale-up domains)")
        if not np.all(np.isfinite(a)):
            raise ConfigError("", f"plan.{f}", "holds NaN or infinite entries; every entry must be a finite number")
        if f in _UNIT_FIELDS and (a.min(initial=0.0) < -1e-6 or a.max(initial=0.0) > 1.0 + 1e-6):
            raise ConfigError("", f"plan.{f}", f"holds {a.min():g} to {a.max():g}; it is a probability or a "
                              "fraction, from 0 to 1")
        if f in _COUNT_FIELDS and a.min(initial=1.0) < 1.0 - 1e-6:
            raise ConfigError("", f"plan.{f}", f"holds {a.min():g}; it counts shards, buckets or chunks, at least 1")


def _check_key(key) -> None:
    """A jax PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)), or one error naming it."""
    ok = isinstance(key, jax.Array) and (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                                         or (key.dtype == jnp.uint32 and key.shape == (2,)))
    if not ok:
        raise ConfigError("", "key", f"must be a jax random key (jax.random.key(seed)), got {type(key).__name__} "
                          f"{key!r:.60}")


def random_plans(key, system: System, model: RankingModel, n: int) -> PlanArrays:
    """`n` random one-hot plans (stacked PlanArrays), drawn in one vectorized call.

    Each table gets a uniform sharding type; table_wise a uniform rank; column_wise two shards on
    two distinct uniform ranks; table_row_wise a uniform domain. Dense mode, algorithms, precisions,
    offload, pipelining, buckets (1..16) and chunks (1..4) are uniform too (where the
    scale-up domains are unequal, hybrid draws are fully sharded). Not memory-checked.
    """
    T, D, L = model.tables.count, system.num_chips, system.domain_size
    H = system.num_domains
    most = max(1, MAX_PLAN_ENTRIES // (T * D))
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or not 1 <= n <= most:
        raise ConfigError("", "n", f"must be an integer from 1 to {most:,} (plans of {T} tables on {D} devices: "
                          f"at most {MAX_PLAN_ENTRIES:,} placement entries), got {n!r}")
    _check_key(key)
    ks = jax.random.split(key, 12)
    dims = np.asarray(model.tables.dim)
    can_cw = jnp.asarray(dims % 2 == 0)
    st = jax.random.randint(ks[0], (n, T), 0, 5)
    st = jnp.where((st == CW) & ~can_cw, TW, st)
    if D == 1:
        st = jnp.where(st == CW, TW, st)
    r1 = jax.random.randint(ks[1], (n, T), 0, D)
    r2 = (r1 + 1 + jax.random.randint(ks[2], (n, T), 0, max(D - 1, 1))) % D
    cw = (st == CW).astype(jnp.float32)
    placement = (jax.nn.one_hot(r1, D) * (1.0 - 0.5 * cw[..., None]) + jax.nn.one_hot(r2, D) * 0.5 * cw[..., None])
    dom = jax.random.randint(ks[3], (n, T), 0, H)
    algo_choice = []
    for c, kind in enumerate(COLLECTIVES):
        allowed = jnp.asarray([ALGORITHMS.index(a) for a in ALLOWED_ALGORITHMS[kind]])
        pick = allowed[jax.random.randint(ks[4 + c], (n,), 0, len(allowed))]
        algo_choice.append(jax.nn.one_hot(pick, 4))
    cat = lambda k, m: jax.nn.one_hot(jax.random.randint(k, (n,), 0, m), m)
    dense = cat(ks[8], 3)
    if system.uneven_domains:          # no hybrid on unequal domains (validate_plan): fully sharded
        hyb, fsdp = DENSE_MODES.index("hybrid"), DENSE_MODES.index("fully_sharded")
        dense = dense.at[:, fsdp].add(dense[:, hyb]).at[:, hyb].set(0.0)
    return PlanArrays(
        shard_type=jax.nn.one_hot(st, 5), placement=placement, domain_placement=jax.nn.one_hot(dom, H),
        cw_shards=1.0 + cw, cache_ratio=jnp.ones((n, T)), dense_mode=dense,
        algorithm=jnp.stack(algo_choice, axis=1), a2a_precision=cat(ks[9], 3), grad_precision=cat(ks[10], 3),
        offload=jax.random.bernoulli(ks[11], 0.5, (n,)).astype(jnp.float32),
        pipeline=jax.random.bernoulli(ks[0], 0.5, (n,)).astype(jnp.float32),
        grad_buckets=jax.random.randint(ks[1], (n,), 1, 17).astype(jnp.float32),
        overlap_chunks=jax.random.randint(ks[2], (n,), 1, 5).astype(jnp.float32),
    )


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


def from_arrays(pa: PlanArrays, system: System, model: RankingModel) -> Plan:
    """The discrete Plan of one-hot PlanArrays (the inverse of to_arrays); relaxed arrays are
    rounded to their largest entries."""
    D, L = system.num_chips, system.domain_size
    st = np.argmax(np.asarray(pa.shard_type), axis=1)
    place = np.asarray(pa.placement)
    dom = np.argmax(np.asarray(pa.domain_placement), axis=1)
    k = np.rint(np.asarray(pa.cw_shards)).astype(int)
    k_rw = np.full(len(k), D) if pa.row_shards is None else np.rint(np.asarray(pa.row_shards)).astype(int)
    cache = np.asarray(pa.cache_ratio)
    tables = {}
    for t, name in enumerate(model.tables.names):
        j = int(st[t])
        ranks = table_ranks(j, place[t], int(dom[t]), max(int(k[t]), 1), D, L)
        if j == RW and k_rw[t] < D:           # a subset: the ranks its placement holds
            ranks = [int(r) for r in np.flatnonzero(place[t] > 0)]
        tables[name] = TablePlan(SHARDING_TYPES[j], ranks, 1.0 if j == DP else round(float(cache[t]), 6))
    algo = np.argmax(np.asarray(pa.algorithm), axis=1)
    pick = lambda v, opts: opts[int(np.argmax(np.asarray(v)))]
    return Plan(
        tables=tables, dense=pick(pa.dense_mode, DENSE_MODES),
        algorithms={kind: ALGORITHMS[int(algo[c])] for c, kind in enumerate(COLLECTIVES)},
        a2a_precision=pick(pa.a2a_precision, PRECISIONS), grad_precision=pick(pa.grad_precision, PRECISIONS),
        offload=bool(float(pa.offload) > 0.5), pipeline=bool(float(pa.pipeline) > 0.5),
        grad_buckets=int(np.rint(float(pa.grad_buckets))), overlap_chunks=int(np.rint(float(pa.overlap_chunks))),
    )
