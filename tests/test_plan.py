"""Plans: JSON round trip, TorchRec export, one ConfigError per invalid plan, one-hot PlanArrays,
and a default plan that is feasible and places every table."""

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel import (ALGORITHMS, COLLECTIVES, SHARDING_TYPES, ConfigError, TablePlan, default_plan,
                       evaluate, load_model, load_plan, load_system, plan_from_dict, to_arrays, validate_plan)

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def h64():
    """h100-64 (8 domains of 8) and dlrm-small (8 tables c0..c7, dim 64): no evaluation, only checks."""
    return load_system("h100-64"), load_model("dlrm-small")


def every_kind() -> dict:
    """A valid plan for dlrm-small on h100-64 using every sharding type and non-default settings."""
    return {
        "tables": {
            "c0": {"sharding_type": "data_parallel", "ranks": list(range(64)), "cache_ratio": 1.0},
            "c1": {"sharding_type": "table_wise", "ranks": [3], "cache_ratio": 1.0},
            "c2": {"sharding_type": "column_wise", "ranks": [16, 17, 18, 19], "cache_ratio": 1.0},
            "c3": {"sharding_type": "row_wise", "ranks": list(range(64)), "cache_ratio": 1.0},
            "c4": {"sharding_type": "table_row_wise", "ranks": list(range(8, 16)), "cache_ratio": 1.0},
            "c5": {"sharding_type": "table_wise", "ranks": [5], "cache_ratio": 0.5},
            "c6": {"sharding_type": "column_wise", "ranks": [20, 21], "cache_ratio": 1.0},
            "c7": {"sharding_type": "table_wise", "ranks": [63], "cache_ratio": 1.0},
        },
        "dense": "hybrid",
        "algorithms": {"all_to_all": "hierarchical", "all_reduce": "tree", "reduce_scatter": "direct",
                       "all_gather": "ring"},
        "a2a_precision": "bf16",
        "grad_precision": "fp8",
        "offload": False,
        "pipeline": False,
        "grad_buckets": 8,
        "overlap_chunks": 2,
    }


# ------------------------------------------------------------------------------------ round trips

def test_dict_round_trip_of_every_kind(h64):
    system, model = h64
    plan = plan_from_dict(every_kind(), system, model)
    assert plan.to_dict() == every_kind()
    assert plan_from_dict(plan.to_dict(), system, model) == plan
    assert plan.tables["c5"] == TablePlan("table_wise", [5], 0.5)


def test_save_then_load_is_equal(tmp_path, h64):
    system, model = h64
    plan = plan_from_dict(every_kind(), system, model)
    path = tmp_path / "plan.json"
    plan.save(path)
    assert json.loads(path.read_text()) == every_kind()
    assert load_plan(path, system, model) == plan


def test_default_plan_round_trips(tmp_path):
    system, model = load_system("h100-8"), load_model("dlrm-small")
    plan = default_plan(system, model)
    assert plan_from_dict(plan.to_dict(), system, model) == plan
    plan.save(tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json", system, model) == plan


def test_save_refuses_to_overwrite(tmp_path, h64):
    system, model = h64
    plan = plan_from_dict(every_kind(), system, model)
    path = tmp_path / "mine.json"
    path.write_text("my notes\n")
    with pytest.raises(ConfigError) as info:
        plan.save(path)
    assert str(info.value) == f"{path}: exists already; choose another name or remove it first"
    assert path.read_text() == "my notes\n"


def test_save_into_a_missing_folder_is_a_config_error(tmp_path, h64):
    system, model = h64
    path = tmp_path / "no" / "such" / "plan.json"
    with pytest.raises(ConfigError, match=r"plan\.json: its folder .* does not exist"):
        plan_from_dict(every_kind(), system, model).save(path)
    assert not path.exists()


def test_torchrec_export(h64):
    system, model = h64
    out = plan_from_dict(every_kind(), system, model).torchrec()
    assert list(out) == [f"c{i}" for i in range(8)]
    for name, t in every_kind()["tables"].items():
        assert out[name]["sharding_type"] == t["sharding_type"]
        assert out[name]["ranks"] == t["ranks"]
        assert set(out[name]) == {"sharding_type", "ranks", "compute_kernel"}
    # fully in HBM: the fused kernel; host DRAM with an HBM cache: TorchRec's UVM caching kernel
    assert out["c1"]["compute_kernel"] == "fused"
    assert out["c5"]["compute_kernel"] == "fused_uvm_caching"
    assert all(v in SHARDING_TYPES for v in (o["sharding_type"] for o in out.values()))


# --------------------------------------------------------------------------------- invalid plans

def _set(path, value):
    def change(d):
        *head, last = path
        for k in head:
            d = d[k]
        d[last] = value
    return change


def _delete(path):
    def change(d):
        *head, last = path
        for k in head:
            d = d[k]
        del d[last]
    return change


INVALID = [
    # id, change, field, pieces of the message
    ("rank-does-not-exist", _set(("tables", "c1", "ranks"), [70]), "tables.c1.ranks",
     ["rank 70 does not exist", "system h100-64 has ranks 0..63"]),
    ("negative-rank", _set(("tables", "c2", "ranks"), [16, -1]), "tables.c2.ranks", ["rank -1 does not exist"]),
    ("rank-not-integer", _set(("tables", "c1", "ranks"), [3.0]), "tables.c1.ranks",
     ["a non-empty list of integer ranks"]),
    ("no-ranks", _set(("tables", "c1", "ranks"), []), "tables.c1.ranks", ["a non-empty list of integer ranks"]),
    ("rank-twice", _set(("tables", "c6", "ranks"), [20, 20]), "tables.c6.ranks", ["lists a rank twice"]),
    ("missing-table", _delete(("tables", "c7")), "tables.c7", ["is missing", "all 8 tables"]),
    ("unknown-table", _set(("tables", "c9"), {"sharding_type": "table_wise", "ranks": [0]}), "tables.c9",
     ["is not a table of model 'dlrm-small'"]),
    ("unknown-table-field", _set(("tables", "c1", "rank"), [3]), "tables.c1.rank",
     ["is not a table-plan field", "sharding_type, ranks, cache_ratio"]),
    ("unknown-sharding-type", _set(("tables", "c1", "sharding_type"), "grid_shard"), "tables.c1.sharding_type",
     ["'grid_shard'", "allowed: data_parallel, table_wise, column_wise, row_wise, table_row_wise"]),
    ("table-wise-two-ranks", _set(("tables", "c1", "ranks"), [3, 4]), "tables.c1.ranks",
     ["table_wise takes exactly one rank, got 2"]),
    ("row-wise-one-rank", _set(("tables", "c3", "ranks"), [5]), "tables.c3.ranks",
     ["row_wise spans at least two ranks (every rank, 0..63, or a subset"]),
    ("data-parallel-not-all-ranks", _set(("tables", "c0", "ranks"), list(range(63))), "tables.c0.ranks",
     ["data_parallel spans every rank"]),
    ("column-wise-not-dividing-dim", _set(("tables", "c2", "ranks"), [16, 17, 18]), "tables.c2.ranks",
     ["column_wise over 3 ranks must divide dim 64"]),
    ("table-row-wise-two-domains", _set(("tables", "c4", "ranks"), list(range(4, 12))), "tables.c4.ranks",
     ["table_row_wise spans one whole scale-up domain of 8 ranks", "e.g. 0..7"]),
    ("table-row-wise-part-domain", _set(("tables", "c4", "ranks"), list(range(8, 12))), "tables.c4.ranks",
     ["one whole scale-up domain of 8 ranks", "e.g. 8..15"]),
    ("cache-ratio-0", _set(("tables", "c5", "cache_ratio"), 0), "tables.c5.cache_ratio",
     ["must be a number in (0, 1], got 0"]),
    ("cache-ratio-1.5", _set(("tables", "c5", "cache_ratio"), 1.5), "tables.c5.cache_ratio",
     ["must be a number in (0, 1], got 1.5"]),
    ("cache-ratio-nan", _set(("tables", "c5", "cache_ratio"), float("nan")), "tables.c5.cache_ratio",
     ["(0, 1]", "got nan"]),
    ("cache-ratio-string", _set(("tables", "c5", "cache_ratio"), "0.5"), "tables.c5.cache_ratio",
     ["(0, 1]", "got '0.5'"]),
    ("data-parallel-off-hbm", _set(("tables", "c0", "cache_ratio"), 0.5), "tables.c0.cache_ratio",
     ["data_parallel tables live in HBM"]),
    ("unknown-top-level-field", _set(("buckets",), 4), "buckets",
     ["is not a plan field", "grad_buckets", "overlap_chunks"]),
    ("no-tables", _delete(("tables",)), "tables", ["is missing or not an object"]),
    ("unknown-dense-mode", _set(("dense",), "zero3"), "dense",
     ["'zero3'", "allowed: replicated, fully_sharded, hybrid"]),
    ("bad-algorithm", _set(("algorithms", "all_to_all"), "tree"), "algorithms.all_to_all",
     ["'tree'", "allowed: direct, hierarchical"]),
    ("unknown-collective", _set(("algorithms", "broadcast"), "ring"), "algorithms.broadcast",
     ["is not a collective", "all_to_all, all_reduce, reduce_scatter, all_gather"]),
    ("bad-precision", _set(("a2a_precision",), "fp16"), "a2a_precision", ["'fp16'", "allowed: fp32, bf16, fp8"]),
    ("offload-not-bool", _set(("offload",), 1), "offload", ["must be true or false, got 1"]),
    ("grad-buckets-0", _set(("grad_buckets",), 0), "grad_buckets", ["an integer from 1 to 1024, got 0"]),
    ("grad-buckets-bool", _set(("grad_buckets",), True), "grad_buckets", ["an integer from 1 to 1024"]),
    ("overlap-chunks-float", _set(("overlap_chunks",), 2.5), "overlap_chunks", ["an integer from 1 to 1024, got 2.5"]),
]


@pytest.mark.parametrize("change,field,pieces", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_plan(h64, change, field, pieces):
    system, model = h64
    data = copy.deepcopy(every_kind())
    change(data)
    with pytest.raises(ConfigError) as info:
        plan_from_dict(data, system, model, "bad-plan.json")
    err = info.value
    assert err.field == field
    assert str(err).startswith(f"bad-plan.json: field '{field}': ")
    assert "\n" not in str(err)
    for piece in pieces:
        assert piece in str(err), f"{piece!r} not in {str(err)!r}"


def test_invalid_plan_file_names_the_file(tmp_path, h64):
    system, model = h64
    data = every_kind()
    data["tables"]["c1"]["ranks"] = [70]
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as info:
        load_plan(path, system, model)
    assert str(info.value).startswith(f"{path}: field 'tables.c1.ranks': rank 70 does not exist")


def test_a_valid_plan_for_one_system_is_checked_against_another(h64):
    _, model = h64
    plan = plan_from_dict(every_kind(), h64[0], model)
    with pytest.raises(ConfigError) as info:
        validate_plan(plan, load_system("h100-8"), model)
    assert str(info.value) == "plan: field 'tables.c0.ranks': rank 8 does not exist: system h100-8 has ranks 0..7"


def test_evaluate_checks_a_discrete_plan(h64):
    system, model = h64
    plan = plan_from_dict(every_kind(), system, model)
    plan.tables["c1"] = TablePlan("table_wise", [64])
    with pytest.raises(ConfigError, match=r"field 'tables\.c1\.ranks': rank 64 does not exist"):
        evaluate(system, model, plan)


# --------------------------------------------------------------------------------- plan arrays

def _assert_one_hot_rows(x):
    x = np.asarray(x)
    assert np.allclose(x.sum(axis=-1), 1.0)
    assert np.all((x == 0.0) | (x == 1.0))
    assert np.all((x == 1.0).sum(axis=-1) == 1)


def test_to_arrays_of_every_kind(h64):
    system, model = h64
    pa = to_arrays(plan_from_dict(every_kind(), system, model), system, model)
    T, D, H = 8, 64, 8
    st = np.asarray(pa.shard_type)
    assert st.shape == (T, 5)
    _assert_one_hot_rows(st)
    assert list(st.argmax(1)) == [0, 1, 2, 3, 4, 1, 2, 1]          # DP TW CW RW TWRW TW CW TW

    pl = np.asarray(pa.placement)
    assert pl.shape == (T, D)
    assert np.allclose(pl.sum(1), 1.0)
    assert pl[1, 3] == 1.0 and pl[1].sum() == 1.0                      # table_wise on rank 3
    assert pl[7, 63] == 1.0
    assert np.allclose(pl[2, 16:20], 0.25) and pl[2].sum() == pytest.approx(1.0)   # 4 column shards: 1/4 each
    assert np.allclose(pl[6, 20:22], 0.5) and np.count_nonzero(pl[6]) == 2
    assert np.count_nonzero(pl[2]) == 4

    dp = np.asarray(pa.domain_placement)
    assert dp.shape == (T, H)
    assert np.allclose(dp.sum(1), 1.0)
    assert dp[4, 1] == 1.0 and np.count_nonzero(dp[4]) == 1          # ranks 8..15: domain 1

    assert list(np.asarray(pa.cw_shards)) == [1, 1, 4, 1, 1, 1, 2, 1]
    assert list(np.asarray(pa.cache_ratio)) == [1, 1, 1, 1, 1, 0.5, 1, 1]
    assert list(np.asarray(pa.dense_mode)) == [0, 0, 1]
    algo = np.asarray(pa.algorithm)
    _assert_one_hot_rows(algo)
    chosen = [ALGORITHMS[j] for j in algo.argmax(1)]
    assert dict(zip(COLLECTIVES, chosen)) == every_kind()["algorithms"]
    assert list(np.asarray(pa.a2a_precision)) == [0, 1, 0]
    assert list(np.asarray(pa.grad_precision)) == [0, 0, 1]
    assert float(pa.offload) == 0.0 and float(pa.pipeline) == 0.0
    assert float(pa.grad_buckets) == 8.0 and float(pa.overlap_chunks) == 2.0


def test_settings_variants_reuse_the_table_arrays(h64):
    """plan_arrays(variant, tables=arrays of the plan): the variant's own arrays, leaf for leaf, with
    the plan's table leaves (what the searches build their settings candidates with)."""
    import dataclasses

    import jax

    from perfmodel.plan import plan_arrays
    system, model = h64
    plan = plan_from_dict(every_kind(), system, model)
    base = plan_arrays(plan, system, model)
    variants = [dataclasses.replace(plan, dense="replicated", grad_buckets=2),
                dataclasses.replace(plan, algorithms=dict(plan.algorithms, all_to_all="direct"), offload=True),
                dataclasses.replace(plan, a2a_precision="fp8", grad_precision="fp32", pipeline=True, overlap_chunks=4)]
    for v in variants:
        full, reused = plan_arrays(v, system, model), plan_arrays(v, system, model, base)
        assert any(not np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(full), jax.tree_util.tree_leaves(base)))
        for x, y in zip(jax.tree_util.tree_leaves(full), jax.tree_util.tree_leaves(reused)):
            assert x.dtype == y.dtype == np.float32 and np.array_equal(x, y)
    assert plan_arrays(variants[0], system, model, base).placement is base.placement


def test_to_arrays_fills_missing_algorithms_with_defaults(h64):
    system, model = h64
    data = every_kind()
    data["algorithms"] = {"all_reduce": "hierarchical"}
    pa = to_arrays(plan_from_dict(data, system, model), system, model)
    chosen = [ALGORITHMS[j] for j in np.asarray(pa.algorithm).argmax(1)]
    assert chosen == ["direct", "hierarchical", "ring", "ring"]


# ------------------------------------------------------------------------------ the default plan

@pytest.mark.parametrize("system_name,model_name", [("h100-8", "dlrm-small"), ("mtia300-64", "dlrm-dcnv2-mlperf"),
                                                    ("h100-64", "dlrm-dcnv2-mlperf")])
def test_default_plan_is_feasible_and_places_every_table(system_name, model_name):
    system, model = load_system(system_name), load_model(model_name)
    plan = default_plan(system, model)
    assert list(plan.tables) == list(model.tables.names)
    validate_plan(plan, system, model)
    pa = to_arrays(plan, system, model)
    _assert_one_hot_rows(pa.shard_type)
    assert np.allclose(np.asarray(pa.placement).sum(1), 1.0)
    assert np.allclose(np.asarray(pa.domain_placement).sum(1), 1.0)
    bd = evaluate(system, model, plan)
    assert bool(bd.feasible)
    assert np.all(np.asarray(bd.memory_bytes) <= float(bd.capacity_bytes))
    assert np.isfinite(float(bd.step_s)) and float(bd.step_s) > 0


HUGE_TABLE = """\
name = "huge"
global_batch = 4096
dense_dtype = "bf16"
param_bytes = 4
activation_bytes = 2
dense_optimizer = "adagrad"

[embeddings]
dim = 128
bytes_per_element = 4
optimizer = "rowwise_adagrad"
index_bytes = 8
rows = [1000000000000]
pooling = [1]

[[dense.layers]]
kind = "mlp"
stage = "bottom"
input = 13
widths = [128]
"""


def test_model_whose_dense_part_fits_nowhere(tmp_path):
    # top MLP 100 -> 100,000 -> 1,000,000 -> 1: ~1e11 params, 4 B each even fully sharded over 8 is 50 GB,
    # plus gradients and Adagrad state: over the 72 GB (0.9 x 80 GB) an H100 may use
    text = (DATA / "models" / "dlrm-small.toml").read_text()
    assert text.count("widths = [512, 256, 1]") == 1
    path = tmp_path / "fat.toml"
    path.write_text(text.replace("widths = [512, 256, 1]", "widths = [100000, 1000000, 1]"))
    system, model = load_system("h100-8"), load_model(path)
    with pytest.raises(ConfigError) as info:
        default_plan(system, model)
    assert info.value.field == "model" and info.value.source == "model dlrm-small on system h100-8"
    assert "fits on no plan" in str(info.value) and "of the 72 GB a device may use" in str(info.value)


def test_model_with_one_enormous_table_fits_no_plan(tmp_path):
    path = tmp_path / "huge.toml"
    path.write_text(HUGE_TABLE)
    model = load_model(path)                     # 1e12 rows (the most a table has) x 516 B = 5.2e14 B
    assert float(model.tables.rows[0]) == pytest.approx(1e12, rel=1e-6)
    with pytest.raises(ConfigError, match="fits on no plan"):
        default_plan(load_system("h100-8"), model)


def test_table_row_wise_on_a_sequence_table_is_refused_as_the_masks_refuse_it():
    """validate_plan accepted table_row_wise for a sequence table, which the search's masks rule out:
    both now read one rule (plan.space.table_row_wise_problem)."""
    from perfmodel.plan import TWRW, make_masks
    system, model = load_system("h100-16"), load_model("hstu-seq")
    seq = [n for n, s in zip(model.tables.names, model.tables.sequence) if s]
    masks = make_masks(system, model)
    allowed = {n: bool(masks.types[i, TWRW] > -1) for i, n in enumerate(model.tables.names)}
    assert allowed == {n: n not in seq for n in model.tables.names}     # pooled tables may be table_row_wise
    base = default_plan(system, model)
    pooled = next(n for n in model.tables.names if n not in seq)
    validate_plan(dataclasses.replace(base, tables={**base.tables, pooled: TablePlan("table_row_wise", list(range(8)))}),
                  system, model)
    bad = dataclasses.replace(base, tables={**base.tables, seq[0]: TablePlan("table_row_wise", list(range(8)))})
    with pytest.raises(ConfigError) as e:
        validate_plan(bad, system, model)
    assert e.value.field == f"tables.{seq[0]}.sharding_type" and "sequence table" in e.value.message
