"""perfmodel's TorchRec plans against TorchRec itself (issue 31, deliverable 3), in the environment of
benchmarks/torchrec_env.sh; not part of `make test`:

    make torchrec-test            # = .venv-torchrec/bin/python -m pytest -q tests_torchrec

For MLPerf DLRM-DCNv2 (26 tables on 64 H100: greedy's plan, and one placed by hand with
row-wise, table-row-wise, table-wise and cached tables) and a synthetic model using all five
sharding types, column-wise in 2 to 8 shards, uneven row-wise blocks and cached tables (16 H100):
  1. pm.to_torchrec_plan equals, shard for shard, what TorchRec's construct_module_sharding_plan
     builds from the same per-table choices (sharding type, ranks, kernel);
  2. TorchRec's EmbeddingShardingPlanner accepts the plan as a given plan (its PlanLoader path:
     the plan's shards merged into the planner's own enumerated options, then its validation of
     modules, ranks and kernels) and returns the same ShardingPlan.
And the README's TorchRec path runs as written, with torchrec's own EmbeddingBagConfig.
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec.distributed.planner")

import perfmodel as pm  # noqa: E402
from perfmodel import TablePlan  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.distributed import sharding_plan as sp  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology  # noqa: E402
from torchrec.distributed.planner.enumerators import EmbeddingEnumerator  # noqa: E402
from torchrec.distributed.planner.types import PlanLoader  # noqa: E402
from torchrec.distributed.types import CacheParams  # noqa: E402

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "torchrec.md"      # the TorchRec path's example lives there


def test_readme_torchrec_path_runs_as_written():
    snippet = GUIDE.read_text().split("<!-- torchrec-path -->")[1].split("```python")[1].split("```")[0]
    assert len(snippet.strip().splitlines()) < 15
    scope = {}
    exec(compile(snippet, str(GUIDE), "exec"), scope)
    plan = scope["sharding_plan"].plan["sparse_arch.embedding_bag_collection"]
    assert set(plan) == {"user", "item", "geo"}


# ------------------------------------------------------------------------------------------- cases

def configs_of(model):
    tb = model.tables
    feats = tb.feature_names if any(tb.feature_names) else tuple((f"f_{n}",) for n in tb.names)
    return [EmbeddingBagConfig(name=n, num_embeddings=int(float(r)), embedding_dim=int(float(d)),
                               feature_names=list(f or (f"f_{n}",)))
            for n, r, d, f in zip(tb.names, tb.rows, tb.dim, feats)]


def mlperf_case():
    system, model = pm.load_system("h100-64"), pm.load_model("dlrm-dcnv2-mlperf")
    return system, model, pm.default_plan(system, model)


def mlperf_mixed_case():
    """MLPerf's tables placed by hand on 64 H100 (8 hosts): the 40 M-row tables row-wise (uneven
    blocks of 625,000 / 625,000 ...), the 0.4-3 M-row ones table-row-wise on hosts 1-3, the rest
    table-wise on rank i, one of them cached."""
    system, model = pm.load_system("h100-64"), pm.load_model("dlrm-dcnv2-mlperf")
    tables = {}
    for i, (name, rows) in enumerate(zip(model.tables.names, model.tables.rows)):
        rows = int(float(rows))
        if rows >= 40_000_000:
            tables[name] = TablePlan("row_wise", list(range(64)), 0.5 if i == 0 else 1.0)
        elif rows >= 400_000:
            host = 1 + i % 3
            tables[name] = TablePlan("table_row_wise", list(range(8 * host, 8 * host + 8)))
        else:
            tables[name] = TablePlan("table_wise", [i], 0.5 if i == 1 else 1.0)
    return system, model, pm.Plan(tables=tables)


SYNTHETIC = [  # name, rows, dim, plan (sharding type, ranks, cache ratio) on 16 ranks, 8 per host
    ("dp", 1_000, 64, ("data_parallel", list(range(16)), 1.0)),
    ("tw", 2_000_003, 128, ("table_wise", [5], 1.0)),
    ("tw_cached", 30_000_001, 128, ("table_wise", [12], 0.2)),
    ("cw2", 1_000_001, 128, ("column_wise", [3, 11], 1.0)),
    ("cw3", 777_777, 96, ("column_wise", [0, 7, 15], 1.0)),
    ("cw4", 500_009, 128, ("column_wise", [9, 1, 4, 14], 0.5)),
    ("cw5", 123_457, 160, ("column_wise", [2, 3, 5, 8, 13], 1.0)),
    ("cw6", 99_991, 192, ("column_wise", list(range(6, 12)), 1.0)),
    ("cw7", 65_537, 224, ("column_wise", [1, 2, 3, 4, 10, 11, 12], 1.0)),
    ("cw8", 4_000_037, 256, ("column_wise", list(range(8, 16)), 1.0)),
    ("rw", 10_000_019, 64, ("row_wise", list(range(16)), 1.0)),      # 625,002 x 15 + 625,003 - ...: uneven
    ("rw_tiny", 5, 64, ("row_wise", list(range(16)), 1.0)),          # 5 ranks of one row, 11 of none
    ("rw_cached", 50_000_017, 128, ("row_wise", list(range(16)), 0.3)),
    ("twrw", 3_000_001, 128, ("table_row_wise", list(range(8, 16)), 1.0)),
    ("twrw_cached", 20_000_003, 64, ("table_row_wise", list(range(8)), 0.25)),
]


def synthetic_case():
    tables = [dict(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f"f_{n}"], pooling_factor=2)
              for n, r, d, _ in SYNTHETIC]
    model = pm.model_from_tables(tables, global_batch=16384, name="synthetic-io")
    plan = pm.Plan(tables={n: TablePlan(st, ranks, c) for n, _, _, (st, ranks, c) in SYNTHETIC})
    return pm.load_system("h100-16"), model, plan


CASES = {"mlperf": mlperf_case, "mlperf-mixed": mlperf_mixed_case, "synthetic": synthetic_case}


def generator(t: TablePlan, local: int):
    """TorchRec's own helper for one table's choice (torchrec/distributed/sharding_plan.py)."""
    kernel = pm.plan.compute_kernel(t.sharding_type, t.cache_ratio)
    return {"data_parallel": lambda: sp.data_parallel(),
            "table_wise": lambda: sp.table_wise(rank=t.ranks[0], compute_kernel=kernel),
            "column_wise": lambda: sp.column_wise(ranks=list(t.ranks), compute_kernel=kernel),
            "row_wise": lambda: sp.row_wise(compute_kernel=kernel),
            "table_row_wise": lambda: sp.table_row_wise(host_index=t.ranks[0] // local)}[t.sharding_type]()


def shards(ps):
    if ps.sharding_spec is None:
        return None
    return [(s.shard_offsets, s.shard_sizes, str(s.placement)) for s in ps.sharding_spec.shards]


def assert_same(ours, theirs, name):
    assert (ours.sharding_type, ours.compute_kernel, ours.ranks) == \
        (theirs.sharding_type, theirs.compute_kernel, theirs.ranks), name
    assert shards(ours) == shards(theirs), name
    assert ours.cache_params == theirs.cache_params, name
    assert ours == theirs, name                   # every other field too


@pytest.mark.parametrize("case", CASES)
def test_plan_equals_construct_module_sharding_plan(case):
    system, model, plan = CASES[case]()
    D, L = system.num_chips, system.domain_size
    ebc = EmbeddingBagCollection(tables=configs_of(model), device=torch.device("meta"))
    ours = pm.to_torchrec_plan(plan, system, model).plan["sparse_arch.embedding_bag_collection"]
    theirs = sp.construct_module_sharding_plan(
        ebc, {n: generator(plan.tables[n], L) for n in model.tables.names}, local_size=L, world_size=D,
        device_type="cuda")
    kinds = set()
    for name in model.tables.names:
        t = plan.tables[name]
        # TorchRec's helpers take no cache params, and table_row_wise no kernel either: those are the
        # per-table choices given to it here, as its planner sets them from ParameterConstraints
        if t.sharding_type == "table_row_wise":
            theirs[name].compute_kernel = pm.plan.compute_kernel(t.sharding_type, t.cache_ratio)
        if t.cache_ratio < 1:
            theirs[name].cache_params = CacheParams(load_factor=t.cache_ratio)
        assert_same(ours[name], theirs[name], name)
        kinds.add((t.sharding_type, len(t.ranks) if t.sharding_type == "column_wise" else 0))
    if case == "synthetic":
        assert {k for k, _ in kinds} == set(pm.SHARDING_TYPES)
        assert {n for k, n in kinds if k == "column_wise"} == set(range(2, 9))
        rw = [s[1][0] for s in shards(ours["rw"])]
        assert len(set(rw)) > 1 and sum(rw) == 10_000_019                    # uneven blocks
        assert [s[1][0] for s in shards(ours["rw_tiny"])] == [1] * 5 + [0] * 11


class GivenPlan(PlanLoader):
    """TorchRec's 'given plan' path: the plan's shards, keyed by the storage hash of the planner's
    own enumerated option for the same (table, sharding type, kernel, shard count)."""

    def __init__(self, options):
        self.options = {so.storage_hash(): so for so in options}

    def load(self):
        return self.options

    def plan_context_hash(self):
        return None

    def get_plan_id(self):
        return "perfmodel"


@pytest.mark.parametrize("case", CASES)
def test_planner_accepts_the_plan(case):
    system, model, plan = CASES[case]()
    D, L = system.num_chips, system.domain_size
    ebc = EmbeddingBagCollection(tables=configs_of(model), device=torch.device("meta"))
    sharders = [EmbeddingBagCollectionSharder()]
    topology = Topology(world_size=D, local_world_size=L, compute_device="cuda", hbm_cap=int(float(system.chip.hbm_bytes)))
    batch = int(float(model.global_batch)) // D
    pool = dict(zip(model.tables.names, (float(p) for p in model.tables.pooling)))
    constraints, want = {}, {}
    for i, name in enumerate(model.tables.names):
        t = plan.tables[name]
        kernel = pm.plan.compute_kernel(t.sharding_type, t.cache_ratio)
        dim = int(float(model.tables.dim[i]))
        constraints[name] = ParameterConstraints(
            sharding_types=[t.sharding_type], compute_kernels=[kernel], pooling_factors=[pool[name]],
            min_partition=dim // len(t.ranks) if t.sharding_type == "column_wise" else None,
            cache_params=CacheParams(load_factor=t.cache_ratio) if t.cache_ratio < 1 else None)
        want[name] = (t.sharding_type, kernel, len(t.ranks) if t.sharding_type == "column_wise" else None)
    enum = EmbeddingEnumerator(topology=topology, batch_size=batch, constraints=constraints)
    options = [so for so in enum.enumerate(ebc, sharders)
               if (so.sharding_type, so.compute_kernel) == want[so.name][:2]
               and want[so.name][2] in (None, len(so.shards))]
    assert sorted(so.name for so in options) == sorted(model.tables.names)
    ours = pm.torchrec_plan(plan, system, model, module_path="")["plan"][""]
    for so in options:
        for shard, rank in zip(so.shards, ours[so.name]["ranks"]):
            shard.rank = rank
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=batch, constraints=constraints,
                                       plan_loader=GivenPlan(options), debug=False)
    accepted = planner.plan(ebc, sharders).plan[""]
    mine = pm.to_torchrec_plan(plan, system, model, module_path="").plan[""]
    for name in model.tables.names:
        assert_same(mine[name], accepted[name], name)
