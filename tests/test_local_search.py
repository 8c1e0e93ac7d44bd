"""Local search and multi-resource packing: plateaus of the max, moves and compound moves scored
as the plans they stand for, the packer's balance."""

import dataclasses

import jax
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.plan import CW, DENSE_MODES, TablePlan, to_arrays
from perfmodel.search import compound as cp
from perfmodel.search import descent as ds
from perfmodel.search import moves as mv
from perfmodel.search.pack import rebalance
from perfmodel.search.problem import Problem
from perfmodel.plan import make_masks
from perfmodel.search.score import TIE, TIE_TAU, score_plans
from perfmodel.workload import parse_model

T = 8


@pytest.fixture(scope="module")
def twins():
    """Eight identical tables on 4 MTIA 300s: the best table-wise placement is two per device."""
    data = {
        "name": "eight-twins", "global_batch": 16384, "dense_dtype": "bf16", "param_bytes": 4,
        "activation_bytes": 2, "dense_optimizer": "adagrad",
        "embeddings": {"dim": 64, "bytes_per_element": 4, "optimizer": "rowwise_adagrad", "index_bytes": 8,
                       "names": [f"t{i}" for i in range(T)], "rows": [2_000_000] * T, "pooling": [20] * T},
        "dense": {"layers": [
            {"kind": "mlp", "name": "bottom_mlp", "stage": "bottom", "input": 13, "widths": [64]},
            {"kind": "mlp", "name": "top_mlp", "stage": "top", "input": 576, "widths": [64, 1]},
        ]},
    }
    system = pm.load_system("mtia300-4")
    model = parse_model(data, "eight identical tables")
    return system, model


def placed(system, model, devices):
    """The greedy plan's settings with table i table-wise on devices[i]."""
    base = pm.greedy_plan(system, model)
    tables = {n: TablePlan("table_wise", [int(d)]) for n, d in zip(model.tables.names, devices)}
    return dataclasses.replace(base, tables=tables)


def counts(plan, D):
    return np.bincount([tp.ranks[0] for tp in plan.tables.values()], minlength=D)


def test_a_plateau_of_the_max_is_crossed(twins):
    system, model = twins
    start = placed(system, model, [0, 0, 0, 1, 1, 1, 2, 3])          # two devices share the max
    moved = placed(system, model, [0, 0, 2, 1, 1, 1, 2, 3])          # relieve one of them
    hard = [float(pm.evaluate(system, model, p).step_s) for p in (start, moved)]
    assert hard[1] == pytest.approx(hard[0], rel=1e-6)               # the hard step cannot see it
    tie = score_plans(system, model, pm.plan.stack([to_arrays(p, system, model) for p in (start, moved)]), tie=True)
    assert tie[1] < tie[0] * (1 - 1e-6)                              # the tie-broken score can
    p = Problem(system, model, make_masks(system, model, sharding_types=("table_wise",)), freeze_settings=True)
    loads = p.details(start).loads.astype(np.float64)
    loads = loads[loads.mean(1) > 0]                 # resources no device uses add nothing
    norm = loads / loads.mean(1, keepdims=True)
    spread = np.sum(TIE_TAU * np.log(np.sum(np.exp(norm / TIE_TAU), axis=1)))
    assert tie[0] == pytest.approx(hard[0] * (1 + TIE * spread), rel=1e-5)
    plan, _ = ds.run(p, start)
    assert counts(plan, 4).tolist() == [2, 2, 2, 2]
    assert float(pm.evaluate(system, model, plan).step_s) < hard[0] * 0.95


def test_mixed_batch_scores_each_candidate_as_its_own_batch_does(twins):
    """A small instance's round scores table moves, swaps and setting changes in one padded batch
    (moves.score_mixed); each must score as in a batch of its own kind."""
    system, model = twins
    p = Problem(system, model, make_masks(system, model))
    plan = placed(system, model, [0, 0, 0, 1, 1, 1, 2, 3])
    pa = p.arrays(plan)
    _, _, memory, cap, loads, _ = p.details(plan)
    c = mv.table_moves(p, plan, loads, memory, float(cap), True)
    a, b = mv.swaps(p, plan, loads, memory, float(cap), True)
    settings = mv.setting_changes(p, plan)
    n, size = len(c["t"]), p.max_batch
    assert n and len(a) and settings and n + len(a) + len(settings) <= size
    moves, swaps, sets = mv.score_mixed(p, plan, pa, c, a, b, settings)
    np.testing.assert_array_equal(moves, mv.score_moves(p, pa, c))
    np.testing.assert_array_equal(swaps, mv.score_swaps(p, pa, a, b))
    np.testing.assert_array_equal(sets, p.scores_of(settings))
    assert len(set(moves.round(9))) > 1 and len(set(sets.round(9))) > 1      # the candidates differ
    # more than a batch (a round widened to every move on a larger instance): the settings and the
    # first moves in one batch, the rest a batch at a time, by the same program; the same scores
    small = Problem(system, model, make_masks(system, model), max_batch=32)
    assert len(settings) < 32 < n + len(a) + len(settings)
    chunked = mv.score_mixed(small, plan, pa, c, a, b, settings)
    for got, want in zip(chunked, (moves, swaps, sets)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_table_moves_score_as_their_plans_column_wise_in_any_shard_count(twins):
    """Every table move (moves.table_moves, every table on every device) scored in its batch equals
    the score of the Plan it stands for (_moved_plan): column-wise ones in 2 and 4 shards (dim 128
    on 4 devices), and the cache-ratio moves an over-capacity plan gets (cap 0 here), which keep a
    4-way column-wise table's four devices."""
    system, model = twins
    tables = dataclasses.replace(model.tables, dim=np.full(T, 128.0, np.float32))
    model = dataclasses.replace(model, tables=tables)
    p = Problem(system, model, make_masks(system, model))
    plan = placed(system, model, [0, 0, 1, 1, 2, 2, 3, 3])
    plan.tables["t1"] = TablePlan("column_wise", [0, 1, 2, 3])
    _, _, memory, _, loads, _ = p.details(plan)
    for cap in (float("inf"), 0.0):
        c = mv.table_moves(p, plan, loads, memory, cap, True)
        n = len(c["t"])
        moved = [mv.moved(p, plan, c, i) for i in range(n)]
        np.testing.assert_allclose(mv.score_moves(p, p.arrays(plan), c), p.scores_of(moved), rtol=1e-6)
        split = [len(p.tables[f"t{c['t'][i]}"].ranks) for i, p in enumerate(moved) if c["st"][i] == CW]
        assert sorted(set(split)) == [2, 4]
    kept = [p.tables["t1"] for i, p in enumerate(moved) if c["t"][i] == 1 and c["cache"][i] < 1]
    assert [tp.cache_ratio for tp in kept] == [0.5, 0.2, 0.05] and all(tp.ranks == [0, 1, 2, 3] for tp in kept)


def test_rebalance_spreads_stacked_tables_and_keeps_every_choice(twins):
    system, model = twins
    start = placed(system, model, [0] * T)
    out = rebalance(system, model, start, np.asarray(pm.evaluate(system, model, start).memory_bytes))
    assert counts(out, 4).tolist() == [2, 2, 2, 2]
    assert {n: tp.sharding_type for n, tp in out.tables.items()} == {n: "table_wise" for n in model.tables.names}
    assert (out.dense, out.algorithms, out.grad_buckets, out.overlap_chunks) == \
        (start.dense, start.algorithms, start.grad_buckets, start.overlap_chunks)
    assert pm.evaluate(system, model, out).step_s < pm.evaluate(system, model, start).step_s


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_rebalance_keeps_shard_counts_and_memory(seed):
    """On the seeded small instances: every table keeps its type and number of shards, column
    shards stay on distinct devices, and the packed plan fits in memory."""
    from perfmodel.search.instances import small_instance
    system, model = small_instance(seed)
    greedy = pm.greedy_plan(system, model)
    out = rebalance(system, model, greedy, np.asarray(pm.evaluate(system, model, greedy).memory_bytes))
    for n, tp in out.tables.items():
        assert tp.sharding_type == greedy.tables[n].sharding_type
        assert len(set(tp.ranks)) == len(tp.ranks) == len(greedy.tables[n].ranks)
    assert bool(pm.evaluate(system, model, out).feasible)


def test_compound_moves_switch_growing_prefixes_of_tables(twins):
    """Group k turns the k first tables (smallest for data-parallel, heaviest for row-wise and
    column-wise) to one type at once, every other table as it was; split k makes the k smallest
    data-parallel and every other table row-wise; table-row-wise needs more than one domain. A
    column-wise group keeps each table's half on its device and puts the other half on the device
    then least loaded (by hand, loads in halves of a table, 4 on each device to begin with: t0 and
    t1 leave device 0 for 1 and 2; t2, t3 leave 1 for 0 and 0; t4, t5 leave 2 for 1 and 0; t6, t7
    leave 3 for 2 and 1: halves per device 5, 5, 4, 2)."""
    system, model = twins
    start = placed(system, model, [0, 0, 1, 1, 2, 2, 3, 3])
    p = Problem(system, model, make_masks(system, model))
    groups = cp.group_candidates(p, start)
    # data-parallel, row-wise, column-wise, splits k = 0..T; no TWRW; then column-wise splits k = 0..T-1
    # in two shards (dim 64: no more); those again under the other dense parallelism allowed apart
    others = cp.group_candidates(p, start, other_dense=True)
    modes = [m for i, m in enumerate(DENSE_MODES) if m != start.dense and p.masks.dense[i] > -1]
    assert len(groups) == 5 * T + 1 and len(modes) >= 1 and len(others) == len(modes) * T
    assert [g.dense for g in others] == [m for m in modes for _ in range(T)]
    for k, g in enumerate(groups[2 * T:3 * T], start=1):
        split = [n for n, tp in g.tables.items() if tp.sharding_type == "column_wise"]
        assert len(split) == k and all(g.tables[n] == start.tables[n] for n in g.tables if n not in split)
        assert all(start.tables[n].ranks[0] in g.tables[n].ranks and len(set(g.tables[n].ranks)) == 2 for n in split)
    halves = np.bincount([d for tp in groups[3 * T - 1].tables.values() for d in tp.ranks], minlength=4)
    assert halves.tolist() == [5, 5, 4, 2]
    for k, g in enumerate(groups[3 * T:4 * T + 1]):
        types = [g.tables[f"t{i}"].sharding_type for i in range(T)]     # identical sizes: stable order
        assert types == ["data_parallel"] * k + ["row_wise"] * (T - k)
    for i, g in enumerate(groups[4 * T + 1:] + others):     # the k smallest replicated, the others in pairs by turns
        k = i % T
        assert [g.tables[f"t{j}"].ranks for j in range(k, T)] == [[[0, 1], [2, 3]][j % 2] for j in range(T - k)] and \
            all(g.tables[f"t{j}"].sharding_type == "data_parallel" for j in range(k))
        assert (g.dense == start.dense) == (i < T)
        assert g.tables == others[k].tables
    for k, g in enumerate(groups[:T], start=1):
        types = [tp.sharding_type for tp in g.tables.values()]
        assert types.count("data_parallel") == k and types.count("table_wise") == T - k
    for k, g in enumerate(groups[T:2 * T], start=1):
        changed = [n for n, tp in g.tables.items() if tp.sharding_type == "row_wise"]
        assert len(changed) == k and all(g.tables[n].ranks == list(range(4)) for n in changed)
        assert all(g.tables[n] == start.tables[n] for n in g.tables if n not in changed)


@pytest.mark.parametrize("in_program", [False, True])
def test_compound_moves_built_from_their_types_score_as_their_plans(twins, in_program):
    """group_moves builds each batch from the moves' sharding types (in numpy, or in the compiled
    program a large instance uses: asked for here); its scores must be those of the moves' Plans
    built one by one (plan_arrays), on a start of every sharding type and on two domains
    (table-row-wise moves), column-wise splits among them. Setting changes scored with the tables
    broadcast (score_settings) likewise."""
    from perfmodel.plan import plan_arrays, stack
    from perfmodel.search.score import in_program as builds_in_program, score_settings
    _, model = twins
    system = pm.load_system("h100-16")                # two scale-up domains of 8
    assert not builds_in_program(system, model)
    p = Problem(system, model, make_masks(system, model))
    if in_program:
        object.__setattr__(p, "in_program", True)
    rng = np.random.default_rng(0)
    start = mv.kick(p, pm.greedy_plan(system, model), rng)
    assert len({tp.sharding_type for tp in start.tables.values()}) >= 3
    groups = cp.group_candidates(p, start)
    assert any(tp.sharding_type == "column_wise" != start.tables[n].sharding_type         # split in two
               for g in groups for n, tp in g.tables.items())
    (_, scores), group = cp.group_moves(p, start, plan_arrays(start, system, model))
    np.testing.assert_array_equal(scores, p.scores_of(groups))
    assert group(7) == groups[7]
    settings = mv.setting_changes(p, start)
    np.testing.assert_array_equal(score_settings(system, model, settings, plan_arrays(start, system, model)),
                                  score_plans(system, model, stack([plan_arrays(q, system, model) for q in settings])))


def test_table_row_wise_moves_fill_the_least_loaded_domain_first(twins):
    """Eight identical tables, all table-wise, on two domains: the k-th table a compound move makes
    table-row-wise goes to domain (k - 1) mod 2 (ties to the first), spanning its 8 devices."""
    _, model = twins
    system = pm.load_system("h100-16")
    start = pm.Plan(tables={f"t{i}": TablePlan("table_wise", [i]) for i in range(T)})
    p = Problem(system, model, make_masks(system, model))
    twrw = [g for g in cp.group_candidates(p, start)
            if {tp.sharding_type for tp in g.tables.values()} <= {"table_wise", "table_row_wise"}][:T]
    assert len(twrw) == T
    for k, g in enumerate(twrw, start=1):
        ranks = [tp.ranks for tp in g.tables.values() if tp.sharding_type == "table_row_wise"]
        assert len(ranks) == k
        assert ranks[-1] == list(range(8 * ((k - 1) % 2), 8 * ((k - 1) % 2) + 8))


def test_column_wise_splits_tile_aligned_blocks_around_table_row_wise_tables(twins):
    """A column-wise split on two domains of 8 (h100-16): the k smallest tables data-parallel, the n
    heaviest of the others table-row-wise, the rest column-wise in pairs on aligned blocks of two
    devices, least loaded first with a domain's table-row-wise load shared by its 4 blocks. By hand,
    k = 2, n = 1 (identical tables: both orders are t0, t1, ...): t0, t1 replicated; t2 on domain 0;
    t3 ... t6 on blocks 4 ... 7 (devices 8 ... 15, unloaded), then t7 on block 0 (a quarter of t2
    each on blocks 0 ... 3, a whole table on 4 ... 7)."""
    from perfmodel.search.problem import SPLIT_TWRW
    _, model = twins
    system = pm.load_system("h100-16")
    start = pm.Plan(tables={f"t{i}": TablePlan("table_wise", [i]) for i in range(T)})
    p = Problem(system, model, make_masks(system, model))
    splits = [g for g in cp.group_candidates(p, start) if g.dense == start.dense
              and any(tp.sharding_type == "column_wise" and len(tp.ranks) > 1 and tp.ranks[1] == tp.ranks[0] + 1
                      and tp.ranks[0] % 2 == 0 for tp in g.tables.values())]
    want = {"t0": [*range(16)], "t1": [*range(16)], "t2": [*range(8)], "t3": [8, 9], "t4": [10, 11],
            "t5": [12, 13], "t6": [14, 15], "t7": [0, 1]}
    hits = [g for g in splits if {n: tp.ranks for n, tp in g.tables.items()} == want]
    assert len(hits) == 1
    assert [hits[0].tables[f"t{i}"].sharding_type for i in (0, 2, 3)] == ["data_parallel", "table_row_wise", "column_wise"]
    # every split: k = 0 ... 7 (8 replicates every table: no column-wise table) and n = 0 ... SPLIT_TWRW
    # while tables are left for both, no two alike
    assert len(splits) == len({repr(g.tables) for g in splits}) == \
        sum(1 for k in range(T) for n in range(SPLIT_TWRW + 1) if n < T - k)


@pytest.mark.parametrize("hard, tie, expect", [
    ([5.0, 3.0, 4.0], [5.0, 9.0, 4.5], 1),      # the least step, below 6.0, whatever its tie-broken score
    ([7.0, 6.5, 8.0], [7.0, 5.5, 8.0], 1),      # no step below: the least tie-broken, when below 6.0
    ([7.0, 6.5, 8.0], [7.0, 6.5, 4.0], 2),      # ... which need not be the least step
    ([7.0, 6.5, 8.0], [7.0, 6.5, 8.0], None),   # neither lower: no compound move
    ([], [], None),
])
def test_a_compound_move_that_lowers_the_step_is_taken_though_its_tie_broken_score_is_higher(hard, tie, expect):
    """pick_compound, as a descent and a small instance's start take compound moves: the one of
    least step time when below the step to beat (a whole-plan move trades the step for its resource
    spread), else the least tie-broken one when below the tie-broken score to beat."""
    assert cp.pick_compound(np.asarray(hard), np.asarray(tie), 6.0, 6.0) == expect


def test_a_descent_is_a_state_advanced_a_round_at_a_time(twins):
    """Eight tables all table-wise on one device, settings frozen: each call of descend is one round
    (its count goes up by one), the first moves a table off device 0, the best plan held never rises,
    and the descent stops (done) by itself, two tables per device, well below its start."""
    system, model = twins
    p = Problem(system, model, make_masks(system, model, sharding_types=("table_wise", "data_parallel")),
                freeze_settings=True)
    start = placed(system, model, [0] * T)
    d = ds.start(p, start)
    scores = [d.kept_score]
    while not d.done:
        before = d.rounds
        d = ds.descend(p, d)
        assert d.rounds in (before, before + 1) and d.kept_score <= scores[-1]
        scores.append(d.kept_score)
    assert counts(d.kept, 4).tolist() == [2, 2, 2, 2]
    assert d.kept_score < 0.6 * float(pm.evaluate(system, model, start).step_s) and d.rounds <= ds.MAX_ROUNDS


def test_large_instances_split_at_growing_replica_counts():
    """On a large instance (tables x devices > EXHAUSTIVE) compound moves switch at most GROUP_MAX
    tables one by one, but the splits (the k smallest data-parallel, every other table row-wise)
    go on past GROUP_MAX in steps of half, up to every table replicated."""
    from perfmodel.search.problem import GROUP_MAX
    from perfmodel.search.score import EXHAUSTIVE
    n = 300
    data = {
        "name": "many", "global_batch": 16384, "dense_dtype": "bf16", "param_bytes": 4,
        "activation_bytes": 2, "dense_optimizer": "adagrad",
        "embeddings": {"dim": 64, "bytes_per_element": 4, "optimizer": "rowwise_adagrad", "index_bytes": 8,
                       "names": [f"t{i}" for i in range(n)], "rows": [10_000 + i for i in range(n)],
                       "pooling": [4] * n},
        "dense": {"layers": [{"kind": "mlp", "name": "top_mlp", "stage": "top", "input": 64 * n, "widths": [1]}]},
    }
    system, model = pm.load_system("mtia300-16"), parse_model(data, "300 small tables")
    assert n * system.num_chips > EXHAUSTIVE and system.num_chips == system.domain_size
    start = pm.Plan(tables={f"t{i}": TablePlan("table_wise", [i % 16]) for i in range(n)})
    p = Problem(system, model, make_masks(system, model))
    groups = cp.group_candidates(p, start)
    splits = [g for g in groups if all(tp.sharding_type in ("data_parallel", "row_wise") for tp in g.tables.values())]
    replicated = [sum(tp.sharding_type == "data_parallel" for tp in g.tables.values()) for g in splits]
    assert replicated == list(range(GROUP_MAX + 1)) + [48, 72, 108, 162, 243, 300]
    for g, k in zip(splits, replicated):       # the smallest tables (fewest rows) are the replicated ones
        assert all((g.tables[f"t{i}"].sharding_type == "data_parallel") == (i < k) for i in range(n))


def test_roundings_include_each_restart_repacked(twins):
    """Two relaxed restarts whose placements all lean to device 0: argmax rounding stacks the eight
    tables there; the repacked rounding of each keeps their sharding types and spreads them two per
    device, and scores lower."""
    from perfmodel.search.adam import warm_start
    from perfmodel.search.pipeline import roundings
    system, model = twins
    start = placed(system, model, [0] * T)
    one = warm_start(start, system, model)
    params = jax.tree_util.tree_map(lambda x: np.stack([np.asarray(x)] * 2), one)
    p = Problem(system, model, make_masks(system, model))
    plans = roundings(params, p, start)
    assert len(plans) == 4
    for p in plans[:2]:
        assert list(counts(p, 4)) == [T, 0, 0, 0]
    for p in plans[2:]:
        assert list(counts(p, 4)) == [2, 2, 2, 2]
        assert all(tp.sharding_type == "table_wise" for tp in p.tables.values())
    scores = score_plans(system, model, pm.plan.stack([pm.plan.plan_arrays(p, system, model) for p in plans]))
    assert scores[2] < scores[0]


@pytest.mark.parametrize("lead, taken", [(0.10, True), (0.031, True), (0.029, False), (-0.05, False)])
def test_compound_start_only_when_it_leads_by_3_percent(lead, taken):
    """A large instance's descent starts from the best compound move of its start only when that
    scores COMPOUND_LEAD (3 %) below the start; a smaller gain is left to the descent."""
    from perfmodel.search.pipeline import COMPOUND_LEAD, leading
    base = 7.0
    ties = base * (1.0 + 0.5 * np.arange(1, 9))          # all worse ...
    ties[3] = base * (1.0 - lead)                         # ... but one
    assert COMPOUND_LEAD == 0.03
    assert leading(ties, base) == (3 if taken else None)
    assert leading(np.zeros(0), base) is None


def test_the_scorers_of_mlperf_have_no_matrix_product():
    # a matrix product in a scorer makes XLA:CPU call oneDNN, which builds its GEMM kernels at the
    # program's first call (embedding._over_tables, collectives)
    from perfmodel.plan import plan_arrays, stand_in
    from perfmodel.search import score

    system, model = pm.load_system("h100-16"), pm.load_model("dlrm-dcnv2-mlperf")
    pa = plan_arrays(stand_in(system, model), system, model)
    batch = jax.tree_util.tree_map(lambda x: np.repeat(np.asarray(x)[None], 4, 0), pa)
    for text in (score.details.lower(system, model, pa).as_text(),
                 score._score_batch.lower(system, model, batch, None).as_text()):
        assert "stablehlo.add" in text and "dot_general" not in text
