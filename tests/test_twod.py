"""2D sparse parallelism (hardware.Replication): sharding groups, their all-to-alls, the replicas'
sync, memory, the dense sync over every chip, plans and searches, against hand calculations."""

import json
import re

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.config import ConfigError
from perfmodel.cost import access
from perfmodel.cost.embedding import embedding_costs
from perfmodel.cost.traffic import plan_traffic
from perfmodel.hardware import replica_system, sharding_group
from perfmodel.plan import group_problem


def _plan(model, types, **kw):
    return pm.Plan({n: pm.TablePlan(st, ranks) for n, (st, ranks) in zip(model.tables.names, types)}, **kw)


def _levels(system):
    return [(lv.name, lv.size, lv.link) for lv in system.levels]


def test_group_and_replica_levels_by_layout(mtia64):
    # mtia300-64: racks of 16 (scale-up), a cluster of 64 (scale-out)
    g = sharding_group(mtia64, 4)                     # strided: each rack holds 4 chips of each group
    assert (g.num_chips, _levels(g)) == (16, [("rack", 4, "scale_up"), ("cluster", 16, "scale_out")])
    assert _levels(replica_system(g)) == [("rack", 4, "scale_up")]           # a shard's replicas: one rack
    g = sharding_group(mtia64, 32)                    # 32 replicas span two racks: the sync crosses the cluster
    assert _levels(g) == [("cluster", 2, "scale_out")]
    assert _levels(replica_system(g)) == [("rack", 16, "scale_up"), ("cluster", 32, "scale_out")]
    g = sharding_group(mtia64, 2, "contiguous")       # a group is two whole racks; replicas across the cluster
    assert _levels(g) == [("rack", 16, "scale_up"), ("cluster", 32, "scale_out")]
    assert _levels(replica_system(g)) == [("cluster", 2, "scale_out")]
    assert sharding_group(mtia64, 1) is mtia64


def test_all_to_all_shrinks_to_the_group(small, mtia64):
    # every table whole on group rank 3: it sends each other group chip its b = 4,096 / 64 samples
    b, e = 4096 / 64, 64 * 2.0                       # per-chip batch; bf16 output bytes per sample and table
    plan = _plan(small, [("table_wise", [3])] * 8, replicas=4)
    group, gmodel = group_problem(mtia64, small, plan)
    emb = embedding_costs(group, gmodel, pm.to_arrays(plan, mtia64, small), 2.0, 4.0)
    send = np.asarray(emb.out_send)
    assert send.shape == (16, 2)
    assert send[3, 0] == pytest.approx(8 * b * 3 * e, rel=1e-6)     # 3 group peers in its rack
    assert send[3, 1] == pytest.approx(8 * b * 12 * e, rel=1e-6)    # 12 in the other racks
    # one sharding group of all 64 chips (1D): 15 and 48 peers
    one = embedding_costs(mtia64, small, pm.to_arrays(_plan(small, [("table_wise", [3])] * 8), mtia64, small), 2.0, 4.0)
    assert np.asarray(one.out_send)[3, 1] == pytest.approx(8 * b * 48 * e, rel=1e-6)


@pytest.mark.parametrize("k", [1, 10])
def test_sync_volume_by_hand(small, mtia64, k):
    plan = _plan(small, [("table_wise", [3])] * 4 + [("row_wise", list(range(16)))] * 3
                 + [("data_parallel", list(range(16)))], replicas=4, sync_every=k)
    pa = pm.to_arrays(plan, mtia64, small)
    group, gmodel = group_problem(mtia64, small, plan)
    tr = plan_traffic(group, gmodel, pa)
    tb = small.tables
    rows, dim = np.asarray(tb.rows, np.float64), 64
    if k == 1:      # the gradients of the rows the whole batch (4,096) touched, fp32
        per_table = np.asarray(access.distinct_per_batch(tb, 4096), np.float64) * dim * 4
    else:           # weights and row-wise Adagrad state
        per_table = rows * (dim * 4 + 4)
    expect = np.full(16, per_table[4:7].sum() / 16)           # row-wise tables: 1/16 of each on every chip
    expect[3] += per_table[:4].sum()                          # the table-wise ones all on rank 3
    np.testing.assert_allclose(np.asarray(tr.replica, np.float64), expect, rtol=1e-5)
    # dense and data-parallel gradients all-reduced over all 64 chips; the replicas' sync over 4, every k steps
    dense = small.dense.params() * 4.0
    dp = rows[7] * dim * 4.0
    want = 2 * (dense + dp) * 63 / 64 + 2 * expect.max() * 3 / 4 / k
    assert float(tr.sent["dense_sync"]) == pytest.approx(want, rel=1e-5)


def test_embedding_memory_is_replicas_times(small, mtia64):
    rw = [("row_wise", list(range(64)))] * 8
    one = pm.evaluate(mtia64, small, _plan(small, rw))
    two = pm.evaluate(mtia64, small, _plan(small, [("row_wise", list(range(16)))] * 8, replicas=4))
    emb1, emb4 = (np.asarray(bd.memory_parts["embeddings"], np.float64) for bd in (one, two))
    assert emb4.shape == (16,)
    np.testing.assert_allclose(emb4, 4 * emb1[:16], rtol=1e-6)


def test_all_data_parallel_2d_plan_prices_the_dense_sync_over_every_chip(small, mtia64):
    # nothing to sync between replicas and no all-to-all: a 2D plan of data-parallel tables does the
    # work of the 1D one on every chip, and its gradients' all-reduce spans all 64 chips
    one = pm.evaluate(mtia64, small, _plan(small, [("data_parallel", list(range(64)))] * 8))
    two = pm.evaluate(mtia64, small, _plan(small, [("data_parallel", list(range(16)))] * 8, replicas=4))
    assert float(np.max(two.phase_s["dense_sync"])) == pytest.approx(float(np.max(one.phase_s["dense_sync"])), rel=1e-6)
    assert float(two.comm_bytes["dense_sync"]) == pytest.approx(float(one.comm_bytes["dense_sync"]), rel=1e-6)
    assert float(two.samples_per_s) == pytest.approx(4096 / float(two.step_s), rel=1e-6)
    assert float(two.usd_per_million_samples) == pytest.approx(
        float(one.usd_per_million_samples) * float(two.step_s) / float(one.step_s), rel=1e-5)


def test_sync_every_k_spreads_the_weights_sync(small, mtia64):
    tw = [("table_wise", [i % 16]) for i in range(8)]
    step = {k: float(pm.evaluate(mtia64, small, _plan(small, tw, replicas=4, sync_every=k)).step_s)
            for k in (2, 20, 200)}
    assert step[2] > step[20] > step[200]          # the weights' all-reduce, once every k steps


def test_bad_replicas_get_one_clear_error(small, mtia64):
    tw = [("table_wise", [0])] * 8
    with pytest.raises(ConfigError, match="replicas.*divide the 64 chips"):
        pm.evaluate(mtia64, small, _plan(small, tw, replicas=3))
    with pytest.raises(ConfigError, match="replicas.*at most 32"):
        pm.evaluate(mtia64, small, _plan(small, tw, replicas=64))
    h48 = pm.load_system("h100-48")             # nodes of 8: three replicas side by side would split one
    with pytest.raises(ConfigError, match="split a node domain of 8"):
        pm.evaluate(h48, small, _plan(small, tw, replicas=3))
    with pytest.raises(ConfigError, match="partial"):
        pm.evaluate(pm.load_system("mtia300-40"), small, _plan(small, tw, replicas=2))
    with pytest.raises(ConfigError, match="sync_every"):
        pm.evaluate(mtia64, small, _plan(small, tw, replicas=2, sync_every=0))
    with pytest.raises(ConfigError, match="group_layout"):
        pm.evaluate(mtia64, small, _plan(small, tw, replicas=2, group_layout="diagonal"))
    with pytest.raises(ConfigError, match="rank 20 does not exist.*0..15"):      # a group's ranks
        pm.evaluate(mtia64, small, _plan(small, [("table_wise", [20])] * 8, replicas=4))


def test_plan_file_and_arrays_round_trip(small, mtia64, tmp_path):
    plan = _plan(small, [("table_wise", [i]) for i in range(8)], replicas=4, group_layout="contiguous", sync_every=8)
    plan.save(tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    assert (data["replicas"], data["group_layout"], data["sync_every"]) == (4, "contiguous", 8)
    back = pm.load_plan(tmp_path / "p.json", mtia64, small)
    assert back == plan
    assert pm.from_arrays(pm.to_arrays(plan, mtia64, small), mtia64, small) == plan
    assert float(pm.evaluate(mtia64, small, back).step_s) == float(pm.evaluate(mtia64, small, plan).step_s)
    # a 1D plan's file is as it was before 2D plans
    assert "replicas" not in _plan(small, [("table_wise", [0])] * 8).to_dict()


def test_search_over_replica_counts(small, mtia64):
    r = pm.search(mtia64, small, "greedy", replicas=[1, 4])
    rows = {row["replicas"]: row for row in r.notes["replicas"]}
    assert set(rows) == {1, 4}
    assert r.step_s == min(row["step_s"] for row in rows.values())
    assert r.plan.replicas in (1, 4)
    assert float(pm.evaluate(mtia64, small, r.plan).step_s) == pytest.approx(r.step_s, rel=1e-6)
    four = pm.search(mtia64, small, "greedy", replicas=4)
    assert four.plan.replicas == 4 and max(max(t.ranks) for t in four.plan.tables.values()) < 16
    assert four.step_s == pytest.approx(rows[4]["step_s"], rel=1e-6)
    with pytest.raises(ConfigError, match="replicas"):
        pm.search(mtia64, small, "greedy", replicas=[1, 5])
    # sync_every asks for a 2D plan: refused on 1D plans, taken with a 2D start (its replica count is searched)
    with pytest.raises(ConfigError, match="sync_every.*is 4, but the plans searched have one replica"):
        pm.search(mtia64, small, "greedy", sync_every=4)
    two_d = pm.search(mtia64, small, "greedy", start=four.plan, sync_every=4)
    assert two_d.plan.replicas == 4 and two_d.plan.sync_every <= 4


def test_search_cli_prints_each_replica_count_and_writes_a_2d_plan(tmp_path):
    from test_cli_analysis import one_error_line, run
    out_file = tmp_path / "p.json"
    code, out, err = run(["search", "--system", "mtia300-64", "--model", "dlrm-small", "--method", "greedy",
                          "--replicas", "1,4", "--sync-every", "50", "--no-progress", "--out", str(out_file)])
    assert code == 0, err
    rows = {int(l.split()[0]): l.split() for l in out.splitlines() if re.match(r"\s+[14]\s+(64|16)\s", l)}
    assert set(rows) == {1, 4} and rows[4][1] == "16"
    plan = json.loads(out_file.read_text())
    chosen = [r for r, cells in rows.items() if cells[-1] == "chosen"]
    assert chosen == [plan.get("replicas", 1)]
    code, out, err = run(["evaluate", "--system", "mtia300-64", "--model", "dlrm-small", "--plan", str(out_file)])
    assert code == 0, err
    step = float(pm.evaluate(pm.load_system("mtia300-64"), pm.load_model("dlrm-small"),
                             pm.load_plan(out_file, pm.load_system("mtia300-64"), pm.load_model("dlrm-small"))).step_s)
    assert f"{step * 1e3:.3f}" == rows[chosen[0]][2]
    assert ("2D plan              4 replicas of sharding groups of 16 chips" in out) == (chosen == [4])
    code, out, err = run(["search", "--system", "mtia300-64", "--model", "dlrm-small", "--replicas", "3"])
    assert "replicas" in one_error_line(code, err) and "divide the 64 chips" in err
    for command in (["search"], ["scaling", "--chips", "64", "--plan", "greedy"]):
        code, out, err = run([*command, "--system", "mtia300-64", "--model", "dlrm-small", "--replicas", "2",
                              "--sync-every", "0"])
        assert "field '--sync-every': must be an integer from 1" in one_error_line(code, err)
    code, out, err = run(["search", "--system", "mtia300-64", "--model", "dlrm-small", "--sync-every", "4"])
    assert "field 'sync_every': is 4, but the plans searched have one replica" in one_error_line(code, err)


def test_a_bad_group_layout_is_blamed_on_the_layout(mtia64):
    with pytest.raises(ConfigError, match="group_layout.*has group layout 'bogus'; allowed: strided, contiguous"):
        sharding_group(mtia64, 4, layout="bogus")
    with pytest.raises(ConfigError, match="field 'replicas': is 3"):
        sharding_group(mtia64, 3)


def test_torchrec_export_is_what_dmp_collection_takes(small, mtia64, tmp_path):
    from perfmodel.interop.torchrec_plan import _check_dict
    plan = _plan(small, [("table_wise", [i % 16]) for i in range(6)] + [("row_wise", list(range(16)))]
                 + [("table_row_wise", [4, 5, 6, 7])], replicas=4, sync_every=10)
    data = pm.torchrec_plan(plan, mtia64, small)
    _check_dict(data, "x")
    # one group's plan: 16 ranks in groups' racks of 4; DMPCollection's world, group size and layout beside it
    assert (data["world_size"], data["sharding_group_size"], data["local_size"]) == (64, 16, 4)
    assert data["use_inter_host_allreduce"] is False and data["sync_every"] == 10
    tables = data["plan"]["sparse_arch.embedding_bag_collection"]
    assert tables["c6"]["ranks"] == list(range(16))                         # row-wise over the group
    assert [s["placement"] for s in tables["c7"]["shards"]] == [f"rank:{r}/cuda:{r % 4}" for r in (4, 5, 6, 7)]
    assert tables["c0"]["shards"][0]["shard_sizes"] == [1000, 64]            # a whole table on group rank 0
    # and back: the plan file reads as the 2D plan it was
    (tmp_path / "t.json").write_text(json.dumps(data))
    back = pm.load_plan(tmp_path / "t.json", mtia64, small)
    assert back == plan
    tw = _plan(small, [("table_wise", [i]) for i in range(8)], replicas=4, group_layout="contiguous")
    contiguous = pm.torchrec_plan(tw, mtia64, small)      # a group is one whole rack of 16
    assert contiguous["use_inter_host_allreduce"] is True and contiguous["local_size"] == 16


def test_replica_options_follow_the_domains(mtia64):
    from perfmodel.search.api import replica_options
    assert replica_options(mtia64) == [1, 2, 4, 8, 16, 32]
    # nodes of 8 in 48 chips: replicas side by side must fill or tile a node (3, 6 and 12 would split one)
    assert replica_options(pm.load_system("h100-48")) == [1, 2, 4, 8, 16, 24]
    # contiguous groups must hold whole nodes or tile one: groups of 3 or 6 chips would not
    assert replica_options(pm.load_system("h100-48"), "contiguous") == [1, 2, 3, 6, 12, 24]


def test_a_screened_search_keeps_r1_and_the_best_screened_count(small, mtia64):
    r = pm.search(mtia64, small, "greedy", replicas="auto", sync_every=10)
    rows = {row["replicas"]: row for row in r.notes["replicas"]}
    assert sorted(rows) == [1, 2, 4, 8, 16, 32]
    searched = [R for R, row in rows.items() if row["searched"]]
    screened = {R: row["step_s"] for R, row in rows.items() if not row["searched"] and R != 1}
    assert 1 in searched and len(searched) == 2
    other = [R for R in searched if R != 1][0]
    screened[other] = rows[other]["screened_step_s"]        # the count searched in full: the best screen
    assert other == min(screened, key=screened.get)
    assert r.step_s == min(rows[R]["step_s"] for R in searched)
    assert r.plan.replicas in searched and r.plan.sync_every in (1, 10)


def test_constraints_say_which_replica_counts_and_sync_period_a_plan_may_take(small, mtia64, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('replicas = [4]\nsync_every = 20\n[c0]\nsharding_types = ["table_wise"]\n')
    c = pm.load_constraints(path)
    assert (c.replicas, c.sync_every, list(c.tables)) == ((4,), 20, ["c0"])
    r = pm.search(mtia64, small, "greedy", constraints=path)           # the search takes them as its counts
    assert r.plan.replicas == 4 and r.plan.sync_every <= 20 and r.plan.tables["c0"].sharding_type == "table_wise"
    with pytest.raises(ConfigError, match="replicas.*allows \\[4\\]; the search was asked for 2"):
        pm.search(mtia64, small, "greedy", constraints=path, replicas=2)
    with pytest.raises(ConfigError, match="sync_every.*at most 20"):
        pm.search(mtia64, small, "greedy", constraints=path, sync_every=50)
    with pytest.raises(ConfigError, match="replicas.*is 1; the constraint replicas allows \\[4\\]"):
        pm.validate_plan(_plan(small, [("table_wise", [0])] * 8), mtia64, small, constraints=path)
    bad = tmp_path / "bad.toml"
    bad.write_text('replicas = [0]\n')
    with pytest.raises(ConfigError, match="replicas.*integers >= 1"):
        pm.load_constraints(bad)
    # a table may be named "replicas": its value is a table of constraints
    named = pm.constraints.parse_constraints({"replicas": {"sharding_types": ["row_wise"]}})
    assert named.replicas is None and list(named.tables) == ["replicas"]


def test_a_synchronous_step_applies_the_union_of_the_replicas_rows(small, mtia64):
    # k = 1: each replica updates every row the whole step touched, u(4 x 1,024) - u(1,024) more rows
    # than its own group's batch, each read and written with its state at HBM's gather rate
    from perfmodel.cost.compute import gather_efficiency
    types = [("table_wise", [3])] * 4 + [("row_wise", list(range(16)))] * 3 + [("data_parallel", list(range(16)))]
    chip, tb = mtia64.chip, small.tables
    row = np.asarray(tb.bytes_per_row(), np.float64)
    u = lambda b: np.asarray(access.distinct_per_batch(tb, b), np.float64)
    per_table = 2 * (u(4096) - u(1024)) * row / (float(chip.hbm_Bps * chip.hbm_eff)
                                                  * np.asarray(gather_efficiency(chip, row), np.float64))
    want = np.full(16, per_table[4:7].sum() / 16)
    want[3] += per_table[:4].sum()
    bwd = {}
    for k in (1, 10):
        plan = _plan(small, types, replicas=4, sync_every=k)
        group, gmodel = group_problem(mtia64, small, plan)
        pa = pm.to_arrays(plan, mtia64, small)
        bwd[k] = np.asarray(plan_traffic(group, gmodel, pa).emb.bwd_s, np.float64)
    np.testing.assert_allclose(bwd[1] - bwd[10], want, rtol=1e-4)
    assert want[3] > 0


def test_a_planner_of_a_replica_count_names_it():
    """planner(..., replicas=3) raised TypeError (an int joined to text) while it built its label,
    so `perfmodel uncertainty --replicas 3` (and every study given a replica count) was a traceback."""
    assert pm.planner("greedy", replicas=3).label == "greedy (replicas 3)"
    assert pm.planner("greedy", replicas=2, sync_every=4).label == "greedy (replicas 2, sync every <= 4)"
    assert pm.planner("search", iterations=5, replicas=2).label == "search (5 rounds, seed 0, replicas 2)"
    assert pm.planner("greedy", replicas=[1, 2]).label == "greedy (replicas 1,2)"
