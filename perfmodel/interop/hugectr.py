"""HugeCTR's embedding sharding planner, as the MLPerf Training DLRM-DCNv2 submissions ran it.

Every MLPerf DLRM-DCNv2 submission from v3.0 to v5.1 trains with NVIDIA HugeCTR's embedding
collection, whose tables are placed by the planner in the submission's `sharding/planner.py`
(the same file in every round; `generate_plan.py` calls it with the submission's `config_*.sh`
settings: SHARDING_PLAN, MEM_COMM_BW_RATIO, DP_SHARDING_THRESHOLD). The validation prices each
measured run at this plan (the run's physics) and beside it at perfmodel's own best plan.

The planner reads only the tables' row counts (capped at 40 M) and their lookups per sample
("hotness"); no data statistics. Plan types:

  round_robin   table i whole on GPU i mod G (the threshold is ignored)
  uniform       every table split by rows over all G GPUs
  auto          a greedy planner over G buckets, one per GPU (below)
  hier_auto     the same planner over one bucket per node (60 GB x GPUs per node of memory); each of
                a node's shards is then spread by rows over every GPU of that node

auto, as the planner's source does it:
  - data-parallel (replicated on every GPU) iff rows x 1.024e-6 GB < DP_SHARDING_THRESHOLD (GB of
    1e9 bytes at 1,024 bytes a row: 128 fp32 weights and their Adagrad accumulator);
  - a bucket's cost is the sum over its shards of (the table's lookups per sample / its split)
    + MEM_COMM_BW_RATIO / 4 per shard; a candidate plan's score is its costliest bucket's;
  - memory per shard rows / split x 1.024e-6 GB, within 60 GB per GPU less the replicated tables;
  - a round: the shards, hottest first, each to the first bucket in the order of the buckets'
    current costs that holds no shard of its table and has the memory; if every shard is placed the
    candidate is kept and the hottest table whose split can double (split x 2 <= G; the first such
    in the list's order) doubles it; if a
    shard finds no bucket its table's split doubles, or the search ends; at most 20 rounds; the
    lowest score wins (the earlier of equals). Splits are powers of two, by rows.

Order among equals, which decides plans (three tables of 3 lookups): the source orders with numpy's
default argsort of float64 arrays, ascending and then reversed (`np.argsort(h)[::-1]`), which is not
a stable descending sort. The containers of those rounds ran numpy <= 1.24, whose default argsort is
an introsort (`numpy124_argsort` ports it). The shard list starts as the model-parallel tables in
table order, sorted that way; a round places the shards in the list's order; a split removes the
table's shards from the list, appends its new ones at the end and sorts the whole list again.
Buckets are tried in the argsort order of their costs. This order reproduces both published plans
shard for shard (tests/test_hugectr.py); numpy >= 1.25 on AVX-512 CPUs sorts with yet another tie
order, so a run's plan depends on its container's numpy.

MEM_COMM_BW_RATIO is HBM bandwidth over the all-to-all link's (7 = 3.35 TB/s / 450 GB/s on H100
NVLink; the submissions set 7 on H100, 11 on H200, 9 on B200 and GB200, 67 on multi-node H100).

A split table becomes a row_wise table over its k GPUs (PlanArrays.row_shards when k < G), a
whole one table_wise; under hier_auto a node's whole table is table_row_wise on that node when
the node is one scale-up domain, else row_wise over the node's GPUs.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from ..config import ConfigError
from ..hardware import System
from ..plan import ALLOWED_ALGORITHMS, PRECISIONS, Plan, TablePlan, validate_plan
from ..workload import RankingModel

PLAN_TYPES = ("auto", "hier_auto", "round_robin", "uniform")
GB_PER_ROW = 1.024e-6          # planner.py: 1,024 bytes a row, GB of 1e9 bytes
GPU_CAP_GB = 60.0              # planner.py: the memory each GPU offers the embedding shards
ROW_CAP = 40_000_000           # MLPerf's DLRM-DCNv2 caps every table at 40 M rows
ROUNDS = 20                    # planner.py: candidate plans tried at most


@dataclass(frozen=True)
class Recipe:
    """A HugeCTR planner setting: SHARDING_PLAN, MEM_COMM_BW_RATIO, DP_SHARDING_THRESHOLD (GB; 0: no
    data-parallel tables, as v3.0's generate_plan.py passes none)."""

    plan: str = "auto"
    mem_comm_bw_ratio: float = 7.0
    dp_threshold_gb: float = 0.008

    def __str__(self) -> str:
        return f"hugectr:{self.plan}:{self.mem_comm_bw_ratio:g}:{self.dp_threshold_gb:g}"


def parse_recipe(text: str, where: str = "", field: str = "planner") -> Recipe:
    """'hugectr:auto:7:0.008' (plan type, ratio, threshold in GB; the last two optional: 7 and 0.008)
    as a Recipe, or one ConfigError naming `where`, `field` and what is allowed."""
    parts = [p.strip() for p in str(text).split(":")]
    if parts[0] != "hugectr" or not 2 <= len(parts) <= 4 or parts[1] not in PLAN_TYPES:
        raise ConfigError(where, field, f"is {text!r}; allowed: {RECIPE_SYNTAX} (e.g. hugectr:auto:7:0.008)")
    nums = []
    for value in parts[2:]:
        try:
            nums.append(float(value))
        except ValueError:
            nums.append(value)        # check_recipe refuses it, naming the text
    return check_recipe(parts[1], *nums, where=where, field=field, text=str(text))


RECIPE_SYNTAX = "hugectr:PLAN[:RATIO[:THRESHOLD_GB]], PLAN one of " + ", ".join(PLAN_TYPES)


def check_recipe(plan, ratio=7.0, threshold_gb=0.008, where: str = "", field: str | None = None,
                 text: str | None = None) -> Recipe:
    """The Recipe of a plan type, a MEM_COMM_BW_RATIO (a positive number) and a DP_SHARDING_THRESHOLD
    (GB, a non-negative number), or one ConfigError naming `where`, the field (`field`, else the
    argument's name) and what is allowed: the one check that both a recipe's text (parse_recipe) and
    hugectr_plan's arguments pass."""
    def refuse(arg: str, what: str):
        if text is None:
            raise ConfigError(where, field or arg, f"{what}; allowed: plan one of {', '.join(PLAN_TYPES)}, "
                              "mem_comm_bw_ratio a positive number, dp_threshold_gb a non-negative number (GB)")
        raise ConfigError(where, field or arg, f"{what} in {text!r}; allowed: {RECIPE_SYNTAX}")
    if not isinstance(plan, str) or plan not in PLAN_TYPES:
        refuse("plan", f"plan type {plan!r} is not one")
    nums = []
    for name, arg, value, positive in (("ratio", "mem_comm_bw_ratio", ratio, True),
                                       ("threshold", "dp_threshold_gb", threshold_gb, False)):
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        x = float(value) if ok else float("nan")
        if not (np.isfinite(x) and (x > 0 if positive else x >= 0)):
            refuse(arg, f"{name} {value!r} must be a {'positive' if positive else 'non-negative'} number")
        nums.append(x)
    return Recipe(plan, *nums)


def as_recipe(recipe) -> Recipe:
    return recipe if isinstance(recipe, Recipe) else parse_recipe(recipe if ":" in str(recipe) else f"hugectr:{recipe}")


def _less(a: float, b: float) -> bool:
    """numpy's float comparison for sorting: NaN after every number."""
    return a < b or (b != b and a == a)


def numpy124_argsort(values) -> list[int]:
    """numpy 1.24's default `np.argsort` of a float64 array (npysort/quicksort.cpp, `aquicksort_`):
    an introsort. Ranges of more than 16 elements are partitioned around the median of their first,
    middle and last element (which moves equal values across each other); ranges of at most 16 are
    insertion sorted (stable); past a depth of 2 floor(log2 n) partitions a heapsort takes the range.
    Ported rather than called because the order among equals is what matters and the installed numpy
    may sort otherwise."""
    v = [float(x) for x in values]
    a = list(range(len(v)))
    if len(a) < 2:
        return a
    lo, hi, depth = 0, len(a) - 1, (len(a).bit_length() - 1) * 2
    stack: list[tuple[int, int, int]] = []
    while True:
        if depth < 0:
            _heapsort_range(v, a, lo, hi - lo + 1)
        else:
            while hi - lo > 15:
                mid = lo + ((hi - lo) >> 1)
                if _less(v[a[mid]], v[a[lo]]):
                    a[mid], a[lo] = a[lo], a[mid]
                if _less(v[a[hi]], v[a[mid]]):
                    a[hi], a[mid] = a[mid], a[hi]
                if _less(v[a[mid]], v[a[lo]]):
                    a[mid], a[lo] = a[lo], a[mid]
                pivot = v[a[mid]]
                i, j = lo, hi - 1
                a[mid], a[j] = a[j], a[mid]
                while True:
                    i += 1
                    while _less(v[a[i]], pivot):
                        i += 1
                    j -= 1
                    while _less(pivot, v[a[j]]):
                        j -= 1
                    if i >= j:
                        break
                    a[i], a[j] = a[j], a[i]
                a[i], a[hi - 1] = a[hi - 1], a[i]
                depth -= 1
                if i - lo < hi - i:            # the larger part waits on the stack
                    stack.append((i + 1, hi, depth))
                    hi = i - 1
                else:
                    stack.append((lo, i - 1, depth))
                    lo = i + 1
            for i in range(lo + 1, hi + 1):
                x, j = a[i], i
                while j > lo and _less(v[x], v[a[j - 1]]):
                    a[j] = a[j - 1]
                    j -= 1
                a[j] = x
        if not stack:
            return a
        lo, hi, depth = stack.pop()


def _heapsort_range(v: list[float], a: list[int], lo: int, n: int) -> None:
    """numpy 1.24's `aheapsort_` of a[lo:lo + n] in place (1-based heap as in the source)."""
    def sift(i: int, n: int, x: int) -> None:
        j = 2 * i
        while j <= n:
            if j < n and _less(v[a[lo + j - 1]], v[a[lo + j]]):
                j += 1
            if not _less(v[x], v[a[lo + j - 1]]):
                break
            a[lo + i - 1] = a[lo + j - 1]
            i, j = j, 2 * j
        a[lo + i - 1] = x
    for k in range(n >> 1, 0, -1):
        sift(k, n, a[lo + k - 1])
    while n > 1:
        x = a[lo + n - 1]
        a[lo + n - 1] = a[lo]
        n -= 1
        sift(1, n, x)


def _hottest_first(shards: list[int], split: dict[int, int], hot) -> list[int]:
    """The shard list (table indices) ordered as the source orders it: `np.argsort(h)[::-1]`."""
    return [shards[i] for i in reversed(numpy124_argsort([hot[t] / split[t] for t in shards]))]


def place(rows, hotness, buckets: int, ratio: float, threshold_gb: float, cap_gb) -> tuple[list[int], list[list[int]], float]:
    """The auto planner (module docstring) over `buckets` buckets of `cap_gb` GB each: (the
    data-parallel tables, each bucket's shards as table indices in placement order, the score)."""
    rows = np.minimum(np.asarray(rows, np.float64), ROW_CAP)
    hot = np.asarray(hotness, np.float64)
    T = len(rows)
    dp = [t for t in range(T) if rows[t] * GB_PER_ROW < threshold_gb]
    mp = [t for t in range(T) if t not in dp]
    room = cap_gb - sum(rows[t] * GB_PER_ROW for t in dp)
    split = {t: 1 for t in mp}
    shards = _hottest_first(mp, split, hot)      # one entry per shard, kept sorted as the source keeps it

    def double(t: int) -> list[int]:
        split[t] *= 2
        return _hottest_first([s for s in shards if s != t] + [t] * split[t], split, hot)

    best = None
    for _ in range(ROUNDS):
        cost, mem = np.zeros(buckets), np.zeros(buckets)
        held = [[] for _ in range(buckets)]
        failed = None
        for t in shards:
            lookups, need = hot[t] / split[t], rows[t] / split[t] * GB_PER_ROW
            g = next((b for b in numpy124_argsort(cost) if t not in held[b] and mem[b] + need <= room), None)
            if g is None:
                failed = t
                break
            cost[g] += lookups + ratio / 4.0
            mem[g] += need
            held[g].append(t)
        if failed is None:
            score = float(cost.max())
            if best is None or score < best[2]:
                best = (dp, held, score)
            can = [t for t in shards if split[t] * 2 <= buckets]
            if not can:
                break
            shards = double(can[0])
        elif split[failed] * 2 <= buckets:
            shards = double(failed)
        else:
            break
    if best is None:
        raise ConfigError("", "planner", f"HugeCTR's planner places no plan: the tables need more than {buckets} "
                          f"buckets of {cap_gb:g} GB")
    return best


def hugectr_plan(system: System, model: RankingModel, plan: str = "auto", mem_comm_bw_ratio: float = 7.0,
                 dp_threshold_gb: float = 0.008) -> Plan:
    """The tables' placement HugeCTR's planner gives (module docstring), as a perfmodel Plan; the
    plan's other settings are Plan's defaults (with_run_settings chooses them as a run does).
    `system` and `model` may be objects or preset names or paths."""
    from ..evaluate import as_model, as_system
    system, model = as_system(system), as_model(model)
    recipe = check_recipe(plan, mem_comm_bw_ratio, dp_threshold_gb)
    names = model.tables.names
    rows = np.asarray(model.tables.rows, np.float64)
    hot = np.asarray(model.tables.pooling, np.float64)
    D, per_node = system.num_chips, system.chips_per_host
    every = list(range(D))
    if plan == "round_robin":
        tables = {n: TablePlan("table_wise", [i % D]) for i, n in enumerate(names)}
    elif plan == "uniform":
        tables = {n: TablePlan("row_wise" if D > 1 else "table_wise", every) for n in names}
    elif plan == "auto":
        dp, held, _ = place(rows, hot, D, recipe.mem_comm_bw_ratio, recipe.dp_threshold_gb, GPU_CAP_GB)
        tables = _tables(names, dp, [[g] for g in range(D)], held, system, whole_node=False)
    else:
        if D % per_node:
            raise ConfigError("", "plan", f"hier_auto plans whole nodes; {system.name} has {D} chips in nodes of {per_node}")
        nodes = [list(range(h * per_node, (h + 1) * per_node)) for h in range(D // per_node)]
        dp, held, _ = place(rows, hot, len(nodes), recipe.mem_comm_bw_ratio, recipe.dp_threshold_gb,
                            GPU_CAP_GB * per_node)
        tables = _tables(names, dp, nodes, held, system, whole_node=True)
    out = Plan(tables={n: tables[n] for n in names})
    validate_plan(out, system, model, src=str(recipe))
    return out


def _tables(names, dp, groups, held, system: System, whole_node: bool) -> dict[str, TablePlan]:
    """TablePlans of a bucket placement: `groups[b]` the ranks of bucket b."""
    D, L = system.num_chips, system.domain_size
    where: dict[int, list[int]] = {}
    for b, shards in enumerate(held):
        for t in shards:
            where.setdefault(t, []).extend(groups[b])
    out = {names[t]: TablePlan("data_parallel", list(range(D))) for t in dp}
    for t, ranks in where.items():
        ranks = sorted(ranks)
        if len(ranks) == 1:
            out[names[t]] = TablePlan("table_wise", ranks)
        elif whole_node and len(ranks) == len(groups[0]) and not system.uneven_domains and len(ranks) == L \
                and ranks[0] % L == 0:
            out[names[t]] = TablePlan("table_row_wise", ranks)
        else:
            out[names[t]] = TablePlan("row_wise", ranks)
    return out


def with_run_settings(system: System, model: RankingModel, plan: Plan, fixed: dict | None = None,
                      precisions: tuple[str, ...] = ("fp32",)) -> Plan:
    """`plan`'s tables with the settings a run picks for itself: the ones the run's software fixes
    (`fixed`: dense, overlap_chunks, ...) as they are, and of the rest the fastest feasible combination
    of the collective algorithms (NCCL picks its own), the all-to-all and gradient precisions among
    `precisions`, and the gradient buckets; every candidate evaluated, the first of equals kept."""
    from ..evaluate import evaluate
    fixed = dict(fixed or {})
    base = dataclasses.replace(plan, offload=bool(float(system.offload.engines) > 0), **fixed)
    precs = [p for p in PRECISIONS if p in precisions] or ["fp32"]
    tiers = ["ring", "direct", "hierarchical"]
    choices = itertools.product(ALLOWED_ALGORITHMS["all_to_all"], ALLOWED_ALGORITHMS["all_reduce"], tiers, precs, precs,
                                (1, 4, 16) if "grad_buckets" not in fixed else (base.grad_buckets,))
    best, best_s = base, float("inf")
    for a2a, ar, tier, ap, gp, buckets in choices:
        algos = {"all_to_all": a2a, "all_reduce": ar, "reduce_scatter": tier, "all_gather": tier}
        cand = dataclasses.replace(base, algorithms=algos, a2a_precision=ap, grad_precision=gp, grad_buckets=buckets)
        bd = evaluate(system, model, cand)
        if bool(bd.feasible) and float(bd.step_s) < best_s:
            best, best_s = cand, float(bd.step_s)
    return best
