"""Row-wise over a subset of whole blocks (HugeCTR's hier_auto shape) in the search's plan space: its
arrays, the moves that make it, their prices against the plans they stand for, a descent that
reaches it where it pays, a hier_auto plan through the search's arrays, and its TorchRec export."""

import dataclasses

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.config import ConfigError
from perfmodel.interop.hugectr import hugectr_plan
from perfmodel.plan import RW, TablePlan, from_arrays, make_masks, plan_arrays, row_partials, validate_plan
from perfmodel.search import descent as ds
from perfmodel.search import moves as mv
from perfmodel.search.baselines import children
from perfmodel.search.problem import Problem, row_subsets
from perfmodel.workload import parse_model

T = 5
SYSTEM = "h100ib-32"          # four scale-up domains (nodes) of 8 H100s


def one_huge(rows0: float = 1.5e9, pool0: float = 40.0):
    """One hot table of rows0 rows (dim 128, fp32, row-wise Adagrad: 516 bytes a row) and four small ones."""
    data = {
        "name": "one-huge", "global_batch": 65536, "dense_dtype": "bf16", "param_bytes": 4,
        "activation_bytes": 2, "dense_optimizer": "adagrad",
        "embeddings": {"dim": 128, "bytes_per_element": 4, "optimizer": "rowwise_adagrad", "index_bytes": 8,
                       "names": [f"t{i}" for i in range(T)], "rows": [rows0] + [1_000_000] * (T - 1),
                       "pooling": [pool0] + [4] * (T - 1)},
        "dense": {"layers": [
            {"kind": "mlp", "name": "bottom_mlp", "stage": "bottom", "input": 13, "widths": [128]},
            {"kind": "mlp", "name": "top_mlp", "stage": "top", "input": 768, "widths": [64, 1]},
        ]},
    }
    return parse_model(data, "one huge table")


@pytest.fixture(scope="module")
def huge():
    system, model = pm.load_system(SYSTEM), one_huge()
    return system, model, Problem(system, model, make_masks(system, model))


def with_table(plan, name, tp):
    return dataclasses.replace(plan, tables=dict(plan.tables, **{name: tp}))


def test_subsets_the_moves_make():
    # single devices, 2 or 4 but fewer than a domain holds (HugeCTR's auto inside a node); whole
    # domains, two or more (one domain is table_row_wise), fewer than all devices; whole hosts where a
    # host is not a domain; none where the last domain is partial
    assert row_subsets(pm.load_system("h100ib-8")) == ((1, 2), (1, 4))
    assert row_subsets(pm.load_system("h100ib-32")) == ((1, 2), (1, 4), (8, 2))
    assert row_subsets(pm.load_system("h100ib-128")) == ((1, 2), (1, 4), (8, 2), (8, 4), (8, 8))
    assert row_subsets(pm.load_system("h100pcie-32")) == ((1, 2), (4, 2), (4, 4), (8, 1), (8, 2))
    assert row_subsets(pm.load_system("mtia300-40")) == ()


def test_search_arrays_carry_row_shards_and_price_as_the_plan(huge):
    """The search's arrays hold row_shards for every plan (D: row-wise over every device) and price
    every plan as its own arrays do: with no subset, as arrays without row_shards; with one, as
    plan_arrays' (the subset's partial sums, row_partials)."""
    system, model, p = huge
    base = pm.greedy_plan(system, model)
    full = with_table(base, "t0", TablePlan("row_wise", list(range(32))))
    two = with_table(base, "t0", TablePlan("row_wise", list(range(8)) + list(range(16, 24))))
    assert plan_arrays(full, system, model).row_shards is None
    pa = p.arrays(full)
    assert pa.row_shards.tolist() == [32.0] * T
    sub = p.arrays(two)
    assert sub.row_shards.tolist() == [2.0] + [32.0] * (T - 1) == [float(row_partials(
        two.tables[n].ranks, system)) if n == "t0" else 32.0 for n in model.tables.names]
    for plan in (full, two):
        want = float(pm.evaluate(system, model, plan).step_s)
        assert p.details(plan).score_s == pytest.approx(want, rel=1e-6)
        assert p.details(plan, eager=True).score_s == pytest.approx(want, rel=1e-6)
    assert float(p.details(two).score_s) != pytest.approx(float(p.details(full).score_s), rel=1e-3)   # the shape is priced
    # the way back: the arrays' plan is the plan
    for plan in (full, two):
        assert from_arrays(p.arrays(plan), system, model).tables == plan.tables


def test_subset_moves_score_as_the_plans_they_stand_for(huge):
    """Every table move of a plan (every table on every device; row-wise over every device and over
    each pair of domains and over 2 or 4 single devices), scored in its compiled batch, equals the score
    of the Plan it stands for (moves.moved); the batch's arrays are the Plan's arrays; the subsets are
    whole domains, or single devices each sending its own partial sums."""
    system, model, p = huge
    plan = with_table(pm.greedy_plan(system, model), "t0", TablePlan("row_wise", list(range(8, 24))))
    _, _, memory, cap, loads, _ = p.details(plan)
    c = mv.table_moves(p, plan, loads, memory, cap, True)
    sub = np.flatnonzero((c["st"] == RW) & (c["k"] >= 2))
    assert len(sub) >= T * 2                         # the least-loaded pair and the aligned pairs, per table
    moved = [mv.moved(p, plan, c, i) for i in range(len(c["t"]))]
    np.testing.assert_allclose(mv.score_moves(p, p.arrays(plan), c), p.scores_of(moved), rtol=1e-6)
    batch = mv._table_batch(p.arrays(plan), *(mv.host(c[k]) for k in mv.COLUMNS[:5]), mv.host(c["cache"], np.float32))
    for i in sub:
        tp = moved[i].tables[model.tables.names[int(c["t"][i])]]
        doms = sorted({r // 8 for r in tp.ranks})
        assert tp.sharding_type == "row_wise" and len(doms) == 2 and tp.ranks == [r for d in doms for r in range(d * 8, d * 8 + 8)]
        validate_plan(moved[i], system, model)
        one = type(batch)(**{f.name: (getattr(batch, f.name)[i] if f.name not in ("replicas", "group_layout", "sync_every")
                                      else getattr(batch, f.name)) for f in dataclasses.fields(batch)})
        assert float(one.row_shards[int(c["t"][i])]) == 2.0
        assert from_arrays(one, system, model).tables == moved[i].tables
    single = np.flatnonzero((c["st"] == RW) & (c["k"] == 1))
    assert len(single) >= T * 2                      # 2 and 4 devices, per table
    for i in single:
        tp = moved[i].tables[model.tables.names[int(c["t"][i])]]
        assert tp.sharding_type == "row_wise" and len(tp.ranks) in (2, 4)
        assert float(p.arrays(moved[i]).row_shards[int(c["t"][i])]) == len(tp.ranks) == row_partials(tp.ranks, system)


def test_a_descent_reaches_rows_over_two_domains_where_they_pay(huge):
    """One table too large for a domain (1.5e9 rows x 516 B = 774 GB; a domain has 8 x 80 GB), hot:
    row-wise over every device reduce-scatters its partial sums over all 32 GPUs. A descent from
    that plan splits its rows over two whole domains instead, the other tables on the other two,
    and that shape is what pays: with the table over every device again the plan is slower."""
    system, model, p = huge
    base = pm.greedy_plan(system, model)
    start = with_table(base, "t0", TablePlan("row_wise", list(range(32))))
    assert not bool(pm.evaluate(system, model, with_table(base, "t0", TablePlan("table_row_wise", list(range(8))))).feasible)
    best, score = ds.run(p, start)
    t0 = best.tables["t0"]
    doms = sorted({r // 8 for r in t0.ranks})
    assert t0.sharding_type == "row_wise" and len(doms) == 2 and len(t0.ranks) == 16
    assert score < float(pm.evaluate(system, model, start).step_s)
    assert score == pytest.approx(float(pm.evaluate(system, model, best).step_s), rel=1e-6)
    everywhere = with_table(best, "t0", TablePlan("row_wise", list(range(32)), t0.cache_ratio))
    assert float(pm.evaluate(system, model, everywhere).step_s) > score


def test_kicks_make_the_subsets_the_moves_make():
    system, model = pm.load_system(SYSTEM), one_huge()
    p = Problem(system, model, make_masks(system, model))
    plan, seen = pm.greedy_plan(system, model), 0
    for seed in range(40):
        kicked = mv.kick(p, plan, np.random.default_rng(seed))
        validate_plan(kicked, system, model)
        for tp in kicked.tables.values():
            if tp.sharding_type == "row_wise" and len(tp.ranks) < 32:      # two whole domains, or 2 or 4 devices
                seen += 1
                whole = len(tp.ranks) == 16 and row_partials(tp.ranks, system) == 2
                assert whole or row_partials(tp.ranks, system) == len(tp.ranks) in (2, 4), tp.ranks
    assert seen > 0


def test_a_population_crosses_row_shards_with_their_table_rows(huge):
    """The evolutionary phase's children take each table's row_shards with its placement, from the
    same parent, and a mutated table is row-wise over every device if row-wise."""
    system, model, p = huge
    base = pm.greedy_plan(system, model)
    two = with_table(base, "t0", TablePlan("row_wise", list(range(16, 32))))
    full = with_table(base, "t0", TablePlan("row_wise", list(range(32))))
    pop = pm.stack([p.arrays(two), p.arrays(full)])
    kids = children(np.random.default_rng(0), p, pop, np.zeros(2), 64, 0.0)
    for i in range(64):
        rows, place = float(kids.row_shards[i, 0]), kids.placement[i, 0]
        assert (rows, bool(place[0] > 0)) in ((2.0, False), (32.0, True))
    assert {float(x) for x in kids.row_shards[:, 0]} == {2.0, 32.0}


def test_hier_auto_round_trips_through_the_search_and_a_descent_keeps_it():
    """hier_auto's plan of MLPerf DLRM-DCNv2 on 64 H100s (the 64-GPU submissions' recipe, ratio 67,
    threshold 0.0125) has tables over several whole nodes; through the search's arrays it comes back
    unchanged, the search prices it as evaluate does, and a descent from it ends no worse."""
    system, model = pm.load_system("h100ib-64"), pm.load_model("dlrm-dcnv2-mlperf")
    plan = hugectr_plan(system, model, "hier_auto", 67, 0.0125)
    subsets = [n for n, t in plan.tables.items() if t.sharding_type == "row_wise" and len(t.ranks) < 64]
    assert subsets and all(row_partials(plan.tables[n].ranks, system) >= 2 for n in subsets)
    p = Problem(system, model, make_masks(system, model))
    pa = p.arrays(plan)
    assert from_arrays(pa, system, model) == plan
    step = float(pm.evaluate(system, model, plan).step_s)
    assert float(p.details(plan).score_s) == pytest.approx(step, rel=1e-6)
    best, score = ds.run(p, plan, max_rounds=2)
    assert score <= step * (1 + 1e-6)
    assert score == pytest.approx(float(pm.evaluate(system, model, best).step_s), rel=1e-6)


def test_torchrec_export_of_row_wise_subsets():
    """Row-wise over one whole domain exports as TorchRec's table_row_wise (rows in TorchRec's blocks
    over that host's ranks); over two whole domains it has no TorchRec form and is refused, saying why."""
    system, model = pm.load_system(SYSTEM), one_huge(rows0=1e8)
    base = pm.greedy_plan(system, model)
    one = with_table(base, "t0", TablePlan("row_wise", list(range(8, 16))))
    out = pm.torchrec_plan(one, system, model)["plan"]["sparse_arch.embedding_bag_collection"]["t0"]
    assert out["sharding_type"] == "table_row_wise" and out["ranks"] == list(range(8, 16))
    assert [s["shard_sizes"][0] for s in out["shards"]] == [12_500_000] * 8
    two = with_table(base, "t0", TablePlan("row_wise", list(range(16))))
    with pytest.raises(ConfigError, match=r"tables\.t0\.ranks.*row_wise over 16 of 32 ranks \(2 whole scale-up "
                                          r"domains of 8\) has no TorchRec form"):
        pm.torchrec_plan(two, system, model)
    flat = with_table(base, "t0", TablePlan("row_wise", [0, 1]))
    with pytest.raises(ConfigError, match="no TorchRec form"):
        pm.torchrec_plan(flat, system, model)


def test_a_search_for_torchrec_makes_only_the_shapes_torchrec_runs():
    """shapes="torchrec" (the CLI's --format torchrec): no row-wise subset among the moves or kicks,
    HugeCTR's plans with one are no start, a start with one is refused naming it, and the plan found
    exports; an unknown value is refused naming `shapes`."""
    from perfmodel.interop.torchrec_plan import without_torchrec_form
    from perfmodel.search.starts import allowed
    system, model = pm.load_system(SYSTEM), one_huge(rows0=1e8)
    p = Problem(system, model, make_masks(system, model), shapes="torchrec")
    assert p.row_subsets == () and Problem(system, model, make_masks(system, model)).row_subsets
    base = pm.greedy_plan(system, model)
    for seed in range(20):
        kicked = mv.kick(p, base, np.random.default_rng(seed))
        assert without_torchrec_form(kicked, system) is None
    h64, mlperf = pm.load_system("h100ib-64"), pm.load_model("dlrm-dcnv2-mlperf")
    hier = hugectr_plan(h64, mlperf, "hier_auto", 67, 0.0125)
    assert without_torchrec_form(hier, h64) is not None
    assert allowed(Problem(h64, mlperf, make_masks(h64, mlperf)), hier)
    assert not allowed(Problem(h64, mlperf, make_masks(h64, mlperf), shapes="torchrec"), hier)
    flat = with_table(base, "t0", TablePlan("row_wise", [0, 1]))
    with pytest.raises(ConfigError, match=r"start: field 'tables\.t0\.ranks'.*no TorchRec form.*shapes='torchrec'"):
        pm.search(system, model, start=flat, shapes="torchrec", iterations=1)
    with pytest.raises(ConfigError, match=r"field 'shapes': is 'hugectr'; allowed: all, torchrec"):
        pm.search(system, model, shapes="hugectr")
    r = pm.search(system, model, seed=0, iterations=20, budget_s=None, shapes="torchrec")
    assert without_torchrec_form(r.plan, system) is None
    pm.torchrec_plan(r.plan, system, model)
