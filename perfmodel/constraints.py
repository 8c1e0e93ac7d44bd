"""Per-table constraints on a plan, in TorchRec's vocabulary (its planner's ParameterConstraints).

    pm.search(system, model, constraints={"t0": {"sharding_types": ["table_wise"], "ranks": [3]},
                                          "t7": {"compute_kernels": ["fused_uvm_caching"],
                                                 "cache_load_factor": 0.3}})

Per table (every key optional):
  sharding_types      the sharding types the table may take (schema.SHARDING_TYPES)
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

And for the whole plan (2D sparse parallelism, hardware.Replication), keys beside the tables:
  replicas            the replica counts a plan may take (a list; [1]: 1D plans only)
  sync_every          the most steps between the replicas' synchronizations
  hold                plan settings the framework fixes, held by every search from its first round
                      (a table: dense = "replicated", overlap_chunks = 1, ...; Hold below)

A constraint set is given as a dict (Python, or a TOML/JSON file of [<table>] sections; a model file's
[constraints.<table>] sections), as TableConstraint values, or as TorchRec ParameterConstraints
objects (read by attribute: torchrec need not be installed). This module parses and checks a
constraint set on its own (a model file holds one); plan.limits.resolve checks it against a system
and a model and returns the arrays every search method reads (Limits); a request no plan can
satisfy is refused there, naming the table and the constraint.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import ConfigError, read_file
from .hardware import sync_every_problem
from .schema import (ALLOWED_ALGORITHMS, COLLECTIVES, COMPUTE_KERNELS, CONSTRAINT, DENSE_MODES, PRECISIONS,
                     SHARDING_TYPES)

KEYS = tuple(o.key for o in CONSTRAINT.values() if o.section == "<table>")
PLAN_KEYS = tuple(o.key for o in CONSTRAINT.values() if not o.section)     # replicas, sync_every
TORCHREC_CACHE_LOAD_FACTOR = 0.2     # TorchRec's planner constants.UVM_CACHING_RATIO (torchrec 1.8)
NOT_MODELLED_KERNELS = {"fused_uvm": "every row in host memory with no HBM cache is not modelled: use "
                                     "fused_uvm_caching with a small cache_load_factor"}
# ParameterConstraints fields that change nothing perfmodel models (the model file holds the
# workload: pooling, features, dtypes), read and set aside
TORCHREC_IGNORED = ("pooling_factors", "num_poolings", "batch_sizes", "is_weighted", "enforce_hbm",
                    "stochastic_rounding", "bounds_check_mode", "feature_names", "output_dtype", "use_virtual_table")


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
    replicas: tuple[int, ...] | None = None      # the replica counts a plan may take (None: any)
    sync_every: int | None = None                # the most steps between the replicas' syncs (None: any)
    hold: dict | None = None                     # plan settings held (plan.hold's keys; None: none)

    def __bool__(self) -> bool:
        return bool(self.tables) or self.replicas is not None or self.sync_every is not None or bool(self.hold)

    def merged(self, other: "Constraints") -> "Constraints":
        """These constraints with `other`'s tables (and plan-wide keys) replacing theirs."""
        src = " + ".join(s for s in (self.source, other.source) if s)
        return Constraints({**self.tables, **other.tables}, src, self.ignored + other.ignored,
                           other.replicas if other.replicas is not None else self.replicas,
                           other.sync_every if other.sync_every is not None else self.sync_every,
                           {**(self.hold or {}), **(other.hold or {})} or None)

    def to_dict(self) -> dict:
        out = {name: c.to_dict() for name, c in self.tables.items()}
        out.update({k: list(v) if isinstance(v, tuple) else v for k in PLAN_KEYS if (v := getattr(self, k)) is not None})
        return out


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
                           data.ignored, *_plan_wide(data.to_dict(), data.source, ""))
    if not isinstance(data, dict):
        raise ConfigError(src, prefix.rstrip("."), "must map table names to their constraints")
    wide = _plan_wide(data, src, prefix)
    data = {k: v for k, v in data.items() if not (k in PLAN_KEYS and (k == "hold" or not isinstance(v, dict)))}
    if any(not isinstance(v, (dict, TableConstraint)) and hasattr(v, "sharding_types") for v in data.values()):
        return dataclasses.replace(from_torchrec(data, src), replicas=wide[0], sync_every=wide[1], hold=wide[2])
    return Constraints({str(name): table_constraint(c, src, f"{prefix}{name}") for name, c in data.items()}, src, (),
                       *wide)


def _plan_wide(data: dict, src: str, prefix: str) -> tuple:
    """(replicas, sync_every, hold) of a constraint set: keys beside the tables whose values are not a
    table's (a table may be named "replicas": its value is then a table of constraints; `hold` is
    always the plan's)."""
    hold = data.get("hold")
    hold = parse_hold(hold, src, f"{prefix}hold").as_dict() or None if hold is not None else None
    r, k = data.get("replicas"), data.get("sync_every")
    r = None if isinstance(r, dict) else r
    k = None if isinstance(k, dict) else k
    if r is not None:
        r = [r] if isinstance(r, int) and not isinstance(r, bool) else r
        if not isinstance(r, (list, tuple)) or not r or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in r):
            raise ConfigError(src, f"{prefix}replicas", f"must be a non-empty list of replica counts (integers >= 1), "
                              f"got {data.get('replicas')!r}")
        r = tuple(sorted(set(r)))
    if k is not None:
        why = sync_every_problem(k)
        if why is not None:
            raise ConfigError(src, f"{prefix}sync_every", why)
    return r, k, hold


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


def model_constraints(name_or_path) -> Constraints:
    """The [constraints.<table>] sections of a model file (a preset name or a path); none: empty."""
    from .presets import locate
    path = locate("models", name_or_path)
    data = read_file(path)
    return parse_constraints(data.get("constraints", {}), str(path), "constraints.")


def for_command(model_arg: str, path: str | None) -> Constraints:
    """The constraints a command applies: the model file's [constraints.<table>], then the file
    given by --constraints (its tables replace the model file's)."""
    c = model_constraints(model_arg)
    return c.merged(load_constraints(path)) if path else c

# ----------------------------------------------------------------------------- held settings
# The plan-wide settings a user's framework fixes, which a search keeps from its first round
# (plan/hold.py carries them to the search's masks and scored arrays). Keys (each optional): dense,
# a2a_precision and grad_precision, offload and pipeline (on / off), grad_buckets and
# overlap_chunks (1 to 1,024), and one algorithm per collective by its name (all_to_all,
# all_reduce, reduce_scatter, all_gather).
HOLD_BOOLS = {"on": True, "yes": True, "true": True, "off": False, "no": False, "false": False}
HOLD_MAX_COUNT = 1024          # the most gradient buckets or overlap chunks a held setting may name
HOLD_SCALARS = ("dense", "a2a_precision", "grad_precision", "offload", "pipeline", "grad_buckets", "overlap_chunks")
HOLD_KEYS = HOLD_SCALARS + COLLECTIVES
HOLD_ALLOWED = {"dense": ", ".join(DENSE_MODES), "a2a_precision": ", ".join(PRECISIONS),
                "grad_precision": ", ".join(PRECISIONS), "offload": "on or off", "pipeline": "on or off",
                "grad_buckets": f"an integer from 1 to {HOLD_MAX_COUNT:,}",
                "overlap_chunks": f"an integer from 1 to {HOLD_MAX_COUNT:,}",
                **{kind: ", ".join(ALLOWED_ALGORITHMS[kind]) for kind in COLLECTIVES}}



@dataclass(frozen=True)
class Hold:
    """Settings held at fixed values: (key, value) pairs in HOLD_KEYS order (module docstring)."""

    items: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def as_dict(self) -> dict:
        return dict(self.items)

    def __contains__(self, key: str) -> bool:
        return key in self.as_dict()

    def __str__(self) -> str:
        word = lambda v: ("on" if v else "off") if isinstance(v, bool) else str(v)
        return ",".join(f"{k}={word(v)}" for k, v in self.items)

    @property
    def plan_fields(self) -> set[str]:
        """The Plan fields it holds (a collective's algorithm: "algorithms")."""
        return {"algorithms" if k in COLLECTIVES else k for k, _ in self.items}

    def apply(self, plan):
        """`plan` with the held settings."""
        if not self.items:
            return plan
        d = self.as_dict()
        algos = {k: v for k, v in d.items() if k in COLLECTIVES}
        scalars = {k: v for k, v in d.items() if k in HOLD_SCALARS}
        if algos:
            scalars["algorithms"] = dict(plan.algorithms, **algos)
        return dataclasses.replace(plan, **scalars)

    def keeps(self, plan) -> bool:
        """Whether `plan` has every held setting."""
        return all((plan.algorithms.get(k) if k in COLLECTIVES else getattr(plan, k)) == v for k, v in self.items)


def hold_all(plan) -> Hold:
    """Every setting of `plan` held."""
    d = {k: getattr(plan, k) for k in HOLD_SCALARS}
    d.update({kind: plan.algorithms[kind] for kind in COLLECTIVES if kind in plan.algorithms})
    return Hold(tuple((k, d[k]) for k in HOLD_KEYS if k in d))


def parse_hold(data, src: str = "", field: str = "hold") -> Hold:
    """A Hold from "key=value,key=value", a dict or a Hold; one ConfigError naming `src`, the field
    (field.key) and what is allowed otherwise."""
    if data is None:
        return Hold()
    if isinstance(data, Hold):
        return data
    if isinstance(data, str):
        pairs = {}
        for item in (x.strip() for x in data.replace(";", ",").split(",")):
            if not item:
                continue
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ConfigError(src, field, f"item {item!r} is not key=value (e.g. dense=replicated,overlap_chunks=1)")
            if key.strip() in pairs:
                raise ConfigError(src, f"{field}.{key.strip()}", "is given twice")
            pairs[key.strip()] = value.strip()
        data = pairs
    if not isinstance(data, dict):
        raise ConfigError(src, field, f"must be key=value pairs or a table of them, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        if key not in HOLD_KEYS:
            raise ConfigError(src, f"{field}.{key}", f"is not a setting a plan may hold; allowed: {', '.join(HOLD_KEYS)}")
        out[key] = _value(key, value, src, f"{field}.{key}")
    return Hold(tuple((k, out[k]) for k in HOLD_KEYS if k in out))


def _value(key: str, value, src: str, where: str):
    bad = lambda: ConfigError(src, where, f"is {value!r}; allowed: {HOLD_ALLOWED[key]}")
    if key in ("offload", "pipeline"):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in HOLD_BOOLS:
            return HOLD_BOOLS[value.strip().lower()]
        raise bad()
    if key in ("grad_buckets", "overlap_chunks"):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= HOLD_MAX_COUNT:
            raise bad()
        return int(value)
    allowed = {"dense": DENSE_MODES, "a2a_precision": PRECISIONS, "grad_precision": PRECISIONS}.get(key) \
        or ALLOWED_ALGORITHMS[key]
    if not isinstance(value, str) or value.strip() not in allowed:
        raise bad()
    return value.strip()
