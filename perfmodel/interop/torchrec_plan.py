"""A full TorchRec plan out: per table a ParameterSharding with the shards TorchRec's planner emits.

    plan_json = pm.torchrec_plan(plan, system, model)        # plain dicts, no torchrec needed
    sharding_plan = pm.to_torchrec_plan(plan, system, model) # torchrec.distributed.types.ShardingPlan

The shards mirror TorchRec 1.8's own helpers (torchrec/distributed/sharding_plan.py, the ones
`construct_module_sharding_plan` calls), so that the plan equals, shard for shard, what TorchRec
builds from the same per-table choices:
  - table_wise: one shard [rows, dim] at [0, 0] on the table's rank;
  - column_wise over k ranks: shard j of [rows, dim / k] at [0, j dim / k] on ranks[j], in the
    plan's rank order (`column_wise(ranks=...)`); TorchRec widens a shard to the next divisor of dim
    that is a multiple of 4 (`_find_base_dim`), so a plan whose dim / k is not one is refused;
  - row_wise over all D ranks and table_row_wise over the local_size ranks of one host: blocks of
    ceil(rows / n) rows, the last ranks holding the remainder or nothing
    (`_calculate_rw_shard_sizes_and_offsets`: 10 rows on 4 ranks are 3, 3, 3, 1);
  - row_wise over a subset of the ranks (HugeCTR's planners, and the search where they are best):
    over exactly one scale-up domain it is TorchRec's table_row_wise (its rows in the same blocks
    over the same ranks); any other subset, such as hier_auto's rows over several whole nodes, has
    no TorchRec form (row_wise spans every rank, table_row_wise one host, grid_shard splits columns
    across hosts and rows only within one) and is refused, saying so;
  - data_parallel: no sharding spec, every rank, the "dense" kernel.
A placement is "rank:N/cuda:(N mod local_size)" ("rank:N/cpu" for device_type "cpu"), as
TorchRec's `placement`. The compute kernel is "fused" for a table all in HBM and
"fused_uvm_caching" for one in host DRAM with an HBM cache, whose cache_params.load_factor is the
plan's cache_ratio. TorchRec's table-row-wise spans one host of local_size ranks; perfmodel's spans
one scale-up domain, so local_size is the system's scale-up domain size, the local world size to
run TorchRec with. On a system whose last domain is partial (mtia300-40: 16, 16 and 8) the dict
form also lists local_sizes, each domain's; TorchRec's local world size is one number, and its
table-row-wise sharding builds world_size // local_size intra-host groups of local_size ranks
(torchrec/distributed/comm.py, intra_and_cross_node_pg), which leave the partial domain's ranks
out: a plan with a table_row_wise table on such a system is refused.

The dict form is TorchRec's own serialization (`ShardingPlan._serialize()`: {"plan": {module path:
{table: {sharding_type, compute_kernel, ranks, shards: [{shard_offsets, shard_sizes, placement}]}}}})
with each cached table's cache_params added, and world_size, local_size and device_type beside it,
and perfmodel's whole plan as `perfmodel_plan` (what TorchRec's plan has no place for: the dense
mode, the collective algorithms and precisions, buckets and chunks), which `load_plan` reads back.

A 2D plan (Plan.replicas > 1) is what TorchRec's DMPCollection takes: the plan of one sharding group
(its ranks 0..G-1, planned as for Topology(world_size=G), local_size the group's scale-up domain),
with world_size the whole system's chips, sharding_group_size G and use_inter_host_allreduce for
contiguous groups (DMPCollection's layouts: strided groups, a shard's replicas on neighbouring
ranks, by default); dmp_collection_args gives them as DMPCollection's arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config import ConfigError, read_file, shown
from ..hardware import sync_every_problem
from ..plan import Plan, PlanArrays, compute_kernel, from_arrays, group_problem, validate_plan

DEFAULT_MODULE = "sparse_arch.embedding_bag_collection"      # TorchRec's DLRM: model.sparse_arch.embedding_bag_collection
DEVICE_TYPES = ("cuda", "mtia", "cpu")
_INSTALL = ("needs torchrec (pip install torchrec, or `bash benchmarks/torchrec_env.sh` for a CPU build); without it, "
            "pm.torchrec_plan(plan, system, model) gives the same plan as plain dicts, and `perfmodel search ... "
            "--out plan.json --format torchrec` writes it as JSON (pm.load_torchrec_plan reads it where torchrec is)")


def row_blocks(rows: int, n: int) -> list[int]:
    """Rows per rank of a table split over n ranks as TorchRec splits it: ceil(rows / n) each, the
    rank after the last full block the remainder, the rest none."""
    block = -(-rows // n)
    full = rows // block
    return [block if r < full else rows - block * full if r == full else 0 for r in range(n)]


def column_block(dim: int, k: int) -> int:
    """The column shard width TorchRec makes of dim / k (sharding_plan._find_base_dim): the smallest
    divisor of dim from dim / k up that is a multiple of 4, else dim."""
    return next((i for i in range(dim // k, dim) if dim % i == 0 and i % 4 == 0), dim)


def placement(rank: int, device_type: str, local_size: int) -> str:
    """TorchRec's placement string of a shard on `rank` (sharding_plan.placement)."""
    return f"rank:{rank}/{device_type}:{rank % local_size}" if device_type in ("cuda", "mtia") else f"rank:{rank}/{device_type}"


def _as_plan(plan: Any, system, model) -> tuple:
    from ..evaluate import resolve
    plan = getattr(plan, "plan", plan)             # a SearchResult
    system, model, plan = resolve(system, model, plan, plan_required=True)
    if isinstance(plan, PlanArrays):
        plan = from_arrays(plan, system, model)
    validate_plan(plan, system, model)
    return plan, system, model


def torchrec_plan(plan: Plan | PlanArrays | str | Path, system, model, *, module_path: str = DEFAULT_MODULE,
                  device_type: str = "cuda") -> dict:
    """The TorchRec sharding plan of `plan` as plain dicts (module docstring); no torchrec needed.
    plan: a Plan, PlanArrays, a plan JSON path or a SearchResult; system, model: objects or presets."""
    if not isinstance(module_path, str):
        raise ConfigError("", "module_path", f"must be the module's path in the model (e.g. {DEFAULT_MODULE!r}), "
                          f"got {module_path!r}")
    if device_type not in DEVICE_TYPES:
        raise ConfigError("", "device_type", f"is {device_type!r}; allowed: {', '.join(DEVICE_TYPES)}")
    plan, system, model = _as_plan(plan, system, model)
    whole = system
    system, model = group_problem(system, model, plan)      # a 2D plan: one sharding group's shards
    D, L = system.num_chips, system.domain_size
    twrw = [n for n, t in plan.tables.items() if t.sharding_type == "table_row_wise"]
    if system.uneven_domains and twrw:
        raise ConfigError("plan", f"tables.{twrw[0]}.sharding_type", f"table_row_wise has no TorchRec form on "
                          f"{system.name}: TorchRec groups ranks by one local world size ({L}), and the last domain "
                          f"holds {system.domain_sizes[-1]}; use row_wise, or a system of whole domains")
    tb = model.tables
    tables = {}
    for i, name in enumerate(tb.names):
        t = plan.tables[name]
        rows, dim = int(float(tb.rows[i])), int(float(tb.dim[i]))
        st, ranks = t.sharding_type, list(t.ranks)
        where = lambda r: placement(r, device_type, L)
        if st == "table_wise":
            shards = [([0, 0], [rows, dim], ranks[0])]
        elif st == "column_wise":
            k = len(ranks)
            width = dim // k
            if column_block(dim, k) != width:
                block = column_block(dim, k)
                raise ConfigError("plan", f"tables.{name}.ranks", f"column_wise over {k} ranks makes shards of {width} "
                                  f"columns; TorchRec's are a multiple of 4 columns wide and it would make {dim // block} "
                                  f"shard(s) of {block} instead: choose a shard count whose dim / k is a multiple of 4")
            shards = [([0, j * width], [rows, width], r) for j, r in enumerate(ranks)]
        elif st in ("row_wise", "table_row_wise"):
            if st == "row_wise" and len(ranks) < D:
                st = _row_wise_subset(name, sorted(ranks), system)
            group = list(range(D)) if st == "row_wise" else list(range(ranks[0] // L * L, ranks[0] // L * L + L))
            blocks = row_blocks(rows, len(group))
            starts = [sum(blocks[:j]) for j in range(len(blocks))]
            shards = [([s, 0], [b, dim], r) for s, b, r in zip(starts, blocks, group)]
            ranks = group
        else:
            shards, ranks = None, list(range(D))
        kernel = compute_kernel(st, t.cache_ratio)
        entry = {"sharding_type": st, "compute_kernel": kernel, "ranks": [s[2] for s in shards] if shards else ranks}
        if shards is not None:
            entry["shards"] = [{"shard_offsets": o, "shard_sizes": s, "placement": where(r)} for o, s, r in shards]
        if kernel == "fused_uvm_caching":
            entry["cache_params"] = {"load_factor": float(t.cache_ratio)}
        tables[name] = entry
    # TorchRec's plan holds the tables' shards only; the settings the predicted step also assumes (dense
    # mode, collective algorithms, precisions, buckets, chunks) ride along, so `evaluate --plan` reads
    # the file back as the plan it was
    out = {"plan": {module_path: tables}, "world_size": D, "local_size": L, "device_type": device_type,
           "source": f"perfmodel: model {model.name}, system {whole.name}", "perfmodel_plan": plan.to_dict()}
    if plan.replicas > 1:         # what DMPCollection takes beside the group's plan
        out.update(world_size=whole.num_chips, sharding_group_size=D,
                   use_inter_host_allreduce=plan.group_layout == "contiguous", sync_every=plan.sync_every)
    if system.uneven_domains:
        out["local_sizes"] = list(system.domain_sizes)
    return out


def without_torchrec_form(plan, system) -> ConfigError | None:
    """The error torchrec_plan would raise for the first table of `plan` that is row_wise over a
    subset of the ranks TorchRec has no form for (_row_wise_subset), or None: what a search limited
    to TorchRec's shapes (search(shapes="torchrec")) leaves out."""
    for name, t in plan.tables.items():
        if t.sharding_type == "row_wise" and len(t.ranks) < system.num_chips:
            try:
                _row_wise_subset(name, sorted(t.ranks), system)
            except ConfigError as e:
                return e
    return None


def _row_wise_subset(name: str, ranks: list[int], system) -> str:
    """TorchRec's sharding type of a row_wise table over a subset of the ranks (HugeCTR's planners
    make them): table_row_wise where the ranks are one whole scale-up domain (TorchRec's host of
    local_size ranks, its rows split in blocks over them as TorchRec splits them); else a ConfigError
    saying why TorchRec has no form for it."""
    D, L = system.num_chips, system.domain_size
    dom = ranks[0] // L
    if not system.uneven_domains and ranks == list(range(dom * L, dom * L + L)):
        return "table_row_wise"
    doms = sorted({r // L for r in ranks})
    where = (f"{len(doms)} whole scale-up domains of {L}" if len(ranks) == len(doms) * L
             else f"{len(ranks)} of the {len(doms) * L} ranks of {len(doms)} scale-up domain(s)")
    raise ConfigError("plan", f"tables.{name}.ranks", f"row_wise over {len(ranks)} of {D} ranks ({where}) has no "
                      f"TorchRec form: its row_wise spans every rank, table_row_wise one host, and grid_shard splits "
                      f"columns across hosts, never rows; use row_wise over every rank, or table_row_wise")


def dmp_collection_args(data: dict | str | Path, src: str = "plan") -> dict:
    """The arguments TorchRec's DMPCollection takes for a 2D plan's dict form (torchrec_plan's, or its
    JSON read back), beside the module and device: world_size, sharding_group_size,
    use_inter_host_allreduce and the group's ShardingPlan (`plan`); sync_every says how often to
    call its sync(). A 1D plan's dict is one sharding group of every rank. `data` may be the JSON's path."""
    if isinstance(data, (str, Path)):
        data, src = read_file(data), str(data)
    _check_dict(data, src)
    world = data.get("world_size")
    group = data.get("sharding_group_size", world)
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1
    if not whole(world):
        raise ConfigError(src, "world_size", f"must be an integer >= 1 (the ranks of every sharding group), "
                          f"got {shown(world)}")
    if not (whole(group) and world % group == 0):
        raise ConfigError(src, "sharding_group_size", f"must be an integer >= 1 that divides world_size "
                          f"({world}), got {shown(group)}")
    inter = data.get("use_inter_host_allreduce", False)
    if not isinstance(inter, bool):      # bool("no") is True: only JSON's true / false say it
        raise ConfigError(src, "use_inter_host_allreduce", f"must be true (contiguous groups) or false (strided), "
                          f"got {shown(inter)}")
    sync_every = data.get("sync_every", 1)
    why = sync_every_problem(sync_every)
    if why:
        raise ConfigError(src, "sync_every", why)
    return {"world_size": world, "sharding_group_size": group, "use_inter_host_allreduce": inter,
            "sync_every": int(sync_every), "plan": sharding_plan(data, src)}


def _torchrec_types():
    try:
        from torchrec.distributed.types import (CacheParams, EmbeddingModuleShardingPlan, EnumerableShardingSpec,
                                                ParameterSharding, ShardingPlan, ShardMetadata)
    except Exception as err:          # ImportError, or a torch / fbgemm library that fails to load
        raise ImportError(f"to_torchrec_plan {_INSTALL} ({type(err).__name__}: {err})") from None
    return CacheParams, EmbeddingModuleShardingPlan, EnumerableShardingSpec, ParameterSharding, ShardingPlan, ShardMetadata


def sharding_plan(data: dict, src: str = "plan"):
    """TorchRec's ShardingPlan of the dict form (torchrec_plan's, or its JSON read back)."""
    CacheParams, ModulePlan, Spec, ParameterSharding, ShardingPlan, ShardMetadata = _torchrec_types()
    _check_dict(data, src)
    out = {}
    for module, tables in data["plan"].items():
        mp = ModulePlan()
        for name, t in tables.items():
            shards = t.get("shards")
            cache = t.get("cache_params")
            mp[name] = ParameterSharding(
                sharding_type=t["sharding_type"], compute_kernel=t["compute_kernel"], ranks=list(t["ranks"]),
                sharding_spec=None if shards is None else Spec([
                    ShardMetadata(shard_offsets=list(s["shard_offsets"]), shard_sizes=list(s["shard_sizes"]),
                                  placement=s["placement"]) for s in shards]),
                cache_params=None if cache is None else CacheParams(load_factor=float(cache["load_factor"])))
        out[module] = mp
    return ShardingPlan(plan=out)


def _check_dict(data: Any, src: str) -> None:
    """One clear error for a dict form that is not one (a hand-edited JSON)."""
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict) or not data["plan"]:
        raise ConfigError(src, "plan", "must be an object of module path -> tables (perfmodel search --format torchrec)")
    for module, tables in data["plan"].items():
        if not isinstance(tables, dict):
            raise ConfigError(src, f"plan.{module}", "must be an object of table name -> sharding")
        for name, t in tables.items():
            f = f"plan.{module}.{name}"
            if not isinstance(t, dict):
                raise ConfigError(src, f, "must be an object with sharding_type, compute_kernel, ranks")
            for key, kind in (("sharding_type", str), ("compute_kernel", str), ("ranks", list)):
                if not isinstance(t.get(key), kind):
                    raise ConfigError(src, f"{f}.{key}", f"is missing or not a {kind.__name__}")
            shards = t.get("shards")
            if shards is not None and not (isinstance(shards, list) and shards and all(
                    isinstance(s, dict) and isinstance(s.get("placement"), str)
                    and all(isinstance(s.get(k), list) and len(s[k]) == 2 and all(isinstance(x, int) and x >= 0 for x in s[k])
                            for k in ("shard_offsets", "shard_sizes")) for s in shards)):
                raise ConfigError(src, f"{f}.shards", "must be a list of {shard_offsets: [row, col], shard_sizes: "
                                  "[rows, cols], placement: 'rank:N/cuda:M'} (non-negative integers)")
            cache = t.get("cache_params")
            if cache is not None and not (isinstance(cache, dict) and isinstance(cache.get("load_factor"), (int, float))
                                          and 0 < cache["load_factor"] <= 1):
                raise ConfigError(src, f"{f}.cache_params", "must be {load_factor: a number in (0, 1]}")


def to_torchrec_plan(plan: Plan | PlanArrays | str | Path, system, model, *, module_path: str = DEFAULT_MODULE,
                     device_type: str = "cuda"):
    """TorchRec's ShardingPlan of `plan` (torchrec_plan's dicts as TorchRec objects): hand it to
    DistributedModelParallel(..., plan=...). Needs torchrec; an ImportError says what to do without."""
    _torchrec_types()                # before any work: the error a user without torchrec needs first
    return sharding_plan(torchrec_plan(plan, system, model, module_path=module_path, device_type=device_type))


def load_torchrec_plan(path: str | Path):
    """TorchRec's ShardingPlan of a JSON written by `perfmodel search --format torchrec`."""
    data = read_file(path)
    _check_dict(data, str(path))          # a bad file is a ConfigError whether or not torchrec is here
    return sharding_plan(data, str(path))


def save_torchrec_plan(data: dict, path: str | Path) -> None:
    """Write the dict form as JSON to a new file (never overwrites)."""
    from ..files import write_new
    write_new(path, json.dumps(data, indent=1) + "\n")
