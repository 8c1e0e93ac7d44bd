"""Systems whose last domain is partial (mtia300-40: racks of 16, 16 and 8; h100-12: nodes of 8 and
4): the traffic and shares by hand, what a plan may do there, and how throughput scales. Every cost
here is the numpy evaluation (cost.arrays): nothing is compiled."""

import jax
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.config import ConfigError
from perfmodel.cost.arrays import as_numpy
from perfmodel.cost.collectives.network import partial_crowding
from perfmodel.cost.embedding import embedding_costs
from perfmodel.evaluate import step_model
from perfmodel.plan import DENSE_MODES, Plan, TablePlan, plan_arrays, stack


@pytest.fixture(scope="module")
def h100_12():
    return pm.load_system("h100-12")


@pytest.fixture(scope="module")
def random_12(h100_12, small):
    """3 random one-hot plans of dlrm-small on h100-12 (numpy leaves)."""
    return as_numpy(pm.random_plans(jax.random.PRNGKey(5), h100_12, small, 3))


def emb(system, model, plan):
    """The embedding costs of one plan at fp32, numpy, the batch axis dropped."""
    four = np.asarray([4.0], np.float32)
    out = embedding_costs(as_numpy(system), as_numpy(model), stack([plan_arrays(plan, system, model)]), four, four)
    return {k: np.asarray(getattr(out, k))[0] for k in ("out_send", "out_recv", "hbm_bytes", "tr_bytes", "fwd_s")}


def on(system, model, **placed):
    """dlrm-small with every table table-wise on rank 0 but those given (name=TablePlan)."""
    tables = {n: placed.get(n, TablePlan("table_wise", [0])) for n in model.tables.names}
    return Plan(tables=tables)


def test_crowding_of_the_partial_domain_by_hand():
    # mtia300-40 on the shape of mtia300-48: a ring or tree leaves the rack of 8 over 8 links where
    # a full rack has 16 (2x the bytes a chip); a direct transfer sends S / 40 to each peer, not
    # S / 48: the busiest chip, of the rack of 8, has 7 rack peers and 32 beyond against 15 and 32
    # of 48 on the full shape
    through, direct = partial_crowding(pm.load_system("mtia300-40"))
    assert through == (1.0, 2.0)
    assert direct == pytest.approx(((15 / 40) / (15 / 48), (32 / 40) / (32 / 48)))
    assert pm.load_system("mtia300-48").partial is False


def test_all_to_all_volumes_on_a_partial_node_by_hand(h100_12, small):
    # every table on rank 0: it sends each of the 11 others its b samples' pooled rows, 7 in its node
    # and 4 beyond; a device of the node of 4 receives them all from beyond, one of node 0 from inside
    e = float(np.sum(np.asarray(small.tables.output_per_sample()) * np.asarray(small.tables.dim))) * 4.0
    b = float(small.global_batch) / 12
    v = emb(h100_12, small, on(h100_12, small))
    np.testing.assert_allclose(v["out_send"][0], [7 * b * e, 4 * b * e], rtol=1e-6)
    np.testing.assert_allclose(v["out_recv"][3], [b * e, 0.0], rtol=1e-6)
    np.testing.assert_allclose(v["out_recv"][11], [0.0, b * e], rtol=1e-6)
    assert v["out_send"][1:].sum() == 0.0


def test_table_row_wise_on_the_partial_node_holds_twice_a_full_nodes_share(h100_12, small):
    names = small.tables.names
    full = float(np.asarray(small.tables.rows)[6] * np.asarray(small.tables.bytes_per_row())[6])
    in_full = emb(h100_12, small, on(h100_12, small, c6=TablePlan("table_row_wise", list(range(8)))))
    in_part = emb(h100_12, small, on(h100_12, small, c6=TablePlan("table_row_wise", [8, 9, 10, 11])))
    assert names[6] == "c6"
    assert in_full["hbm_bytes"][3] - in_part["hbm_bytes"][3] == pytest.approx(full / 8, rel=1e-6)
    assert in_part["hbm_bytes"][9] - in_full["hbm_bytes"][9] == pytest.approx(full / 4, rel=1e-6)
    # each of the 4 reduce-scatters partial sums of all B samples, then sends its B / 4 samples' sums
    # to their owners: the 8 devices beyond its node own 8 / 12 of them
    e6 = 64 * 4.0
    B = float(small.global_batch)
    assert in_part["tr_bytes"][9] == pytest.approx(e6 * B, rel=1e-6)
    np.testing.assert_allclose(in_part["out_send"][9], [0.0, e6 * B / 4 * 8 / 12], rtol=1e-6)


def test_a_plan_on_a_partial_system_is_checked_against_its_domains(h100_12, small):
    ok = on(h100_12, small, c6=TablePlan("table_row_wise", [8, 9, 10, 11]))
    pm.validate_plan(ok, h100_12, small)
    cases = [
        (on(h100_12, small, c6=TablePlan("table_row_wise", list(range(8, 16)))), "tables.c6.ranks",
         "rank 12 does not exist: system h100-12 has ranks 0..11"),
        (on(h100_12, small, c6=TablePlan("table_row_wise", [8, 9, 10])), "tables.c6.ranks",
         "table_row_wise spans one whole scale-up domain of 4 ranks, e.g. 8..11"),
        (Plan(tables=ok.tables, dense="hybrid"), "dense", "h100-12's scale-up domains are 1 x 8 chips and one of 4: use replicated"),
    ]
    for plan, field, piece in cases:
        with pytest.raises(ConfigError) as info:
            pm.validate_plan(plan, h100_12, small)
        assert info.value.field == field and piece in str(info.value), str(info.value)
    # hybrid needs equal scale-up domains only: h100pcie-12's sockets of 4 are (its second server is partial)
    pcie = pm.load_system("h100pcie-12")
    assert pcie.partial and not pcie.uneven_domains
    pm.validate_plan(Plan(tables=on(pcie, small).tables, dense="hybrid"), pcie, small)


def test_a_partial_rack_scales_between_its_neighbours(mlperf):
    """At MLPerf's global batch and one sensible plan (the big tables row-wise, the rest table-wise
    round-robin, dense fully sharded, hierarchical collectives), mtia300-40's step lies between
    mtia300-32's and -48's: per-chip throughput falls as chips are added, total throughput rises.
    (Not so for every system and plan: a ring's crossings crowd a partial node's fewer NICs, and
    h100-20 on ring collectives is slower than h100-16.)"""
    family, sizes = "mtia300", (32, 40, 48)
    rows = np.asarray(mlperf.tables.rows)
    total, per_chip = [], []
    for n in sizes:
        s = pm.load_system(family, chips=n)
        tables = {name: TablePlan("row_wise", list(range(n))) if rows[i] > 1e6 else TablePlan("table_wise", [i % n])
                  for i, name in enumerate(mlperf.tables.names)}
        plan = Plan(tables=tables, dense="fully_sharded", algorithms=dict.fromkeys(
            ("all_to_all", "all_reduce", "reduce_scatter", "all_gather"), "hierarchical"))
        pm.validate_plan(plan, s, mlperf)
        bd, _ = step_model(as_numpy(s), as_numpy(mlperf), stack([plan_arrays(plan, s, mlperf)]), 0.0)
        assert bool(bd.feasible[0])
        total.append(float(bd.samples_per_s[0]))
        per_chip.append(total[-1] / n)
    assert total[0] < total[1] < total[2], total
    assert per_chip[0] > per_chip[1] > per_chip[2], per_chip


def test_torchrec_export_of_a_partial_system(h100_12, small):
    plan = on(h100_12, small, c7=TablePlan("row_wise", list(range(12))))
    out = pm.torchrec_plan(plan, h100_12, small)
    assert (out["world_size"], out["local_size"], out["local_sizes"]) == (12, 8, [8, 4])
    assert out["plan"]["sparse_arch.embedding_bag_collection"]["c7"]["shards"][11]["placement"] == "rank:11/cuda:3"
    with pytest.raises(ConfigError, match=r"tables\.c6\.sharding_type.*no TorchRec form on h100-12.*holds 4"):
        pm.torchrec_plan(on(h100_12, small, c6=TablePlan("table_row_wise", list(range(8)))), h100_12, small)


def test_traces_of_a_partial_system_are_valid_and_add_up(h100_12, small, random_12):
    """Random plans on h100-12 (the numpy evaluation, a batch of 3): each plan's trace passes the
    checks every trace does (test_plots_trace.check_trace), a device of the node of 4 among them."""
    from perfmodel.trace import chrome_trace
    from test_plots_trace import check_trace
    N, plans = 3, random_12
    assert not np.asarray(plans.dense_mode)[:, DENSE_MODES.index("hybrid")].any()
    bds, _ = step_model(as_numpy(h100_12), as_numpy(small), plans, 0.0)
    for i in range(N):
        bd = jax.tree_util.tree_map(lambda x: np.asarray(x)[i] if np.ndim(x) and np.shape(x)[0] == N else x, bds)
        tr = chrome_trace(bd, small, devices=[0, 9, 11])
        check_trace(tr, bd, h100_12)


def test_a_partial_systems_collectives_are_the_full_shapes_crowded():
    """mtia300-40's collectives have mtia300-48's shape (the same latencies) with the crowding of
    test_crowding_of_the_partial_domain_by_hand on their bytes: a direct all-gather on the engines
    (no reduction) takes 1.2 x the full shape's bytes time at every level; a ring's rack level stays
    as it is and its scale-out level doubles; the engines' tree keeps its 2 S at every level."""
    from perfmodel.cost import collectives as coll
    from perfmodel.cost.collectives.algorithms import DIRECT, RING, TREE, table
    from perfmodel.cost.collectives.network import shape
    from perfmodel.cost.collectives.timing import _crowded
    part, full = (as_numpy(pm.load_system(n)) for n in ("mtia300-40", "mtia300-48"))
    nets = [coll.make_net(s, np.float32(1.0)) for s in (part, full)]
    assert shape(nets[0]) == shape(nets[1]) and nets[1].crowding is None
    direct = np.eye(len(pm.ALGORITHMS), dtype=np.float32)[DIRECT]
    t = [[float(coll.all_gather(net, np.float32(S), 0, 1, direct)) for S in (0.0, 64e6)] for net in nets]
    assert t[0][0] == pytest.approx(t[1][0], rel=1e-6)                          # the same latency
    assert t[0][1] - t[0][0] == pytest.approx(1.2 * (t[1][1] - t[1][0]), rel=1e-4)
    tab = table(shape(nets[1]), "all_reduce", 0, 1)
    crowded = _crowded(nets[0], tab, 0, 1)
    np.testing.assert_allclose(crowded["core_bytes"][RING], tab["core_bytes"][RING] * [1.0, 2.0])
    np.testing.assert_allclose(crowded["eng_bytes"][TREE], tab["eng_bytes"][TREE])
    np.testing.assert_allclose(crowded["core_bytes"][TREE], tab["core_bytes"][TREE] * [1.0, 2.0])


def test_numpy_and_traced_evaluations_agree_on_a_partial_system(h100_12, small, random_12):
    """The cost model's two array libraries (cost.arrays) give one step on h100-12's random plans."""
    plans = random_12
    batch, _ = step_model(as_numpy(h100_12), as_numpy(small), plans, 0.0)
    for i in range(3):
        traced = pm.evaluate(h100_12, small, jax.tree_util.tree_map(lambda x: x[i], plans))
        assert float(traced.step_s) == pytest.approx(float(batch.step_s[i]), rel=1e-5)
        np.testing.assert_allclose(np.asarray(traced.memory_bytes), np.asarray(batch.memory_bytes)[i], rtol=1e-5)
