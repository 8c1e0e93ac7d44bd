"""Plans as users read and write them: Plan (per table its sharding type, ranks and cache ratio;
the dense parallelism, the collectives' algorithms and precisions, the overlap settings), loaded
from a file or a dict and checked against a system and a model (validate_plan) with the plan
space's rules.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..config import ConfigError, read_file
from ..files import write_new
from ..hardware import System, replication_problem, sharding_group, sync_every_problem
from ..schema import GROUP_LAYOUTS, PLAN
from ..workload import RankingModel
from .limits import check_plan
from .space import (ALLOWED_ALGORITHMS, COLLECTIVES, DENSE_MODES, PRECISIONS, SHARDING_TYPES, compute_kernel,
                    domain_ranks, splits_evenly, table_row_wise_problem)


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
    # 2D sparse parallelism (hardware.Replication): the chips are `replicas` sharding groups, each
    # holding every table as `tables` says (ranks are a group's, 0..D / replicas - 1); 1: one group
    replicas: int = 1
    group_layout: str = "strided"
    sync_every: int = 1

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        d = asdict(self)
        d["tables"] = {k: asdict(v) for k, v in self.tables.items()}
        if self.replicas == 1 and self.sync_every == 1 and self.group_layout == "strided":
            for key in ("replicas", "group_layout", "sync_every"):     # a 1D plan's file, as before 2D plans
                del d[key]
        return d

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON. Refuses to overwrite an existing file (nothing a user wrote is lost),
        and a name the OS refuses, in one ConfigError."""
        write_new(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def torchrec(self) -> dict[str, dict]:
        """Per-table {sharding_type, ranks, compute_kernel} as TorchRec's ParameterSharding wants."""
        return {name: {"sharding_type": t.sharding_type, "ranks": list(t.ranks),
                       "compute_kernel": compute_kernel(t.sharding_type, t.cache_ratio)}
                for name, t in self.tables.items()}


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
    `constraints` (anything constraints.as_constraints takes; None: none). A 2D plan's tables are
    checked against one sharding group (plans.group_problem)."""
    if system.replication is None:
        why = replication_problem(system, plan.replicas, plan.group_layout)
        if why is not None:
            raise ConfigError(src, "group_layout" if plan.group_layout not in GROUP_LAYOUTS else "replicas", why)
        why = sync_every_problem(plan.sync_every)
        if why is not None:
            raise ConfigError(src, "sync_every", why)
        if plan.replicas > 1:
            system, model = group_problem(system, model, plan)
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
        if st == "column_wise" and not splits_evenly(int(dims[i]), k):
            raise ConfigError(src, f + ".ranks", f"column_wise over {k} ranks must divide dim {int(dims[i])} (TorchRec "
                              f"splits the columns into equal shards; uneven ones it does not shard at all)")
        if st == "table_row_wise":
            why = table_row_wise_problem(bool(model.tables.sequence[i]))
            if why:
                raise ConfigError(src, f + ".sharding_type", why)
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
        check_plan(plan, constraints, system, model, src)


def group_problem(system: System, model: RankingModel, plan) -> tuple[System, RankingModel]:
    """(system, model) of one sharding group of `plan` (a Plan, or PlanArrays: their replicas,
    group_layout and sync_every): the group's System (hardware.sharding_group) and the model at the
    group's share of the global batch. A 1D plan, or a system that already is a group: as given."""
    if plan.replicas == 1 or system.replication is not None:
        return system, model
    return sharding_problem(system, model, plan.replicas, plan.group_layout, plan.sync_every)


def sharding_problem(system: System, model: RankingModel, replicas: int, layout: str = "strided",
                     sync_every: int = 1) -> tuple[System, RankingModel]:
    """(the System of one of `replicas` sharding groups in `layout`, the model at its share of the
    global batch): the problem a 2D plan's tables are planned and priced on."""
    group = sharding_group(system, replicas, layout, sync_every)
    return group, dataclasses.replace(model, global_batch=model.global_batch / replicas)


def _choice(src, key, value, allowed):
    if value not in allowed:
        raise ConfigError(src, key, f"is {value!r}; allowed: {', '.join(allowed)}")


def stand_in(system: System, model: RankingModel) -> Plan:
    """A plan of the problem's shape, to compile programs with before a real plan exists: table i
    table-wise on device i mod D (not checked: it may not fit)."""
    D = system.num_chips
    return Plan(tables={n: TablePlan("table_wise", [i % D], 1.0) for i, n in enumerate(model.tables.names)})
