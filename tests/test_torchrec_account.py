"""The account of perfmodel's and TorchRec's disagreement about a plan (perfmodel.interop.torchrec_account):
Shapley shares over the six players by hand, and perfmodel's per-shard and per-term figures against
its own Breakdown. No torch: TorchRec's terms are numbers here."""

import itertools
import math

import numpy as np
import pytest

import perfmodel as pm
from perfmodel import Plan, TablePlan
from perfmodel.interop.torchrec_account import (PLAYERS, REST, TERMS, account, account_pair, disagrees, hybrid,
                                                perfmodel_terms, shard_seconds)
from perfmodel.search.instances import small_instance


def terms(*rows):
    """[D, 5] from rows of (fwd_compute, fwd_comms), the other terms 0."""
    return np.array([[a, b, 0.0, 0.0, 0.0] for a, b in rows])


def test_one_plan_by_hand():
    # rank 0 is the busiest in both: TorchRec 1 + 1 = 2 ms; perfmodel 1 + 3 = 4 ms, step 5 ms (REST 1)
    tr, pmt = terms((1, 1), (0.5, 0.5)), terms((1, 3), (0.5, 0.5))
    assert hybrid(tr, pmt, 1.0, frozenset()) == 2.0 and hybrid(tr, pmt, 1.0, frozenset(PLAYERS)) == 5.0
    acc = account(tr, pmt, 5.0)
    assert acc.torchrec == 2.0 and acc.perfmodel == 5.0 and acc.ratio == pytest.approx(0.4)
    # hybrids: {} 2, {comms} 4, {rest} 3, {comms, rest} 5; the other players change nothing (share 0)
    assert acc.ms["fwd_comms"] == pytest.approx(0.5 * ((2 - 4) + (3 - 5)))       # -2
    assert acc.ms[REST] == pytest.approx(0.5 * ((2 - 3) + (4 - 5)))              # -1
    assert all(acc.ms[t] == pytest.approx(0.0) for t in TERMS if t != "fwd_comms")
    assert acc.factor["fwd_comms"] == pytest.approx(math.sqrt(2 / 4 * 3 / 5))
    assert acc.factor[REST] == pytest.approx(math.sqrt(2 / 3 * 4 / 5))
    assert math.prod(acc.factor.values()) == pytest.approx(acc.ratio)
    assert [p for p, _ in acc.largest(2)] == ["fwd_comms", REST]
    assert disagrees(1 / acc.ratio) and disagrees(acc.ratio) and not disagrees(1.9) and not disagrees(0.6)


def test_the_busiest_rank_moves():
    # TorchRec's busiest rank is 0 (2 ms), perfmodel's is 1 (0 + ... 1 + 3 = 4 ms); step 4, REST 0.
    # hybrids: {} 2, {fwd_compute} max(1, 1) = 1, {fwd_comms} max(2, 4) = 4, {both} 4
    acc = account(terms((2, 0), (1, 0)), terms((1, 0), (1, 3)), 4.0)
    assert acc.ms["fwd_compute"] == pytest.approx(0.5 * ((2 - 1) + (4 - 4)))      # +0.5: TorchRec's compute is higher
    assert acc.ms["fwd_comms"] == pytest.approx(0.5 * ((2 - 4) + (1 - 4)))        # -2.5
    assert sum(acc.ms.values()) == pytest.approx(2 - 4) and acc.ms[REST] == pytest.approx(0.0)


def test_a_pair_against_a_plan_both_models_agree_on():
    a = (terms((1, 1), (0.5, 0.5)), terms((1, 3), (0.5, 0.5)), 5.0)
    b = (terms((1, 1)), terms((1, 1)), 2.0)              # every hybrid 2 ms: B's shares are all 1
    pair = account_pair(a, b)
    assert pair.torchrec == pytest.approx(1.0) and pair.perfmodel == pytest.approx(2.5)
    one = account(*a)
    assert all(pair.factor[p] == pytest.approx(one.factor[p]) for p in PLAYERS)
    assert pair.ms is None and math.prod(pair.factor.values()) == pytest.approx(pair.ratio)
    same = account_pair(a, a)
    assert same.ratio == pytest.approx(1.0) and all(f == pytest.approx(1.0) for f in same.factor.values())


def test_factors_need_positive_hybrids():
    # REST -5 (overlap hides more than the dense part costs): {REST} alone is 1 - 5 < 0, so no factors
    acc = account(terms((1, 0)), terms((6, 4)), 5.0)
    assert acc.factor is None and sum(acc.ms.values()) == pytest.approx(1 - 5)
    assert acc.largest(1)[0][0] in PLAYERS


def test_perfmodel_figures_add_up_to_its_breakdown():
    system, model = small_instance(1)          # 12 tables on 4 H100
    D, names = system.num_chips, list(model.tables.names)
    kinds = ["table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel"]
    tables = {}
    for i, n in enumerate(names):
        kind = kinds[i % len(kinds)]
        ranks = {"table_wise": [i % D], "column_wise": [0, 1], "table_row_wise": list(range(system.domain_size))}
        cache = 0.5 if kind == "table_wise" and i % 2 else 1.0
        tables[n] = TablePlan(kind, ranks.get(kind, list(range(D))), cache)
    plan = Plan(tables=tables)
    bd = pm.evaluate(system, model, plan)
    per = shard_seconds(system, model, plan)
    fwd, bwd = np.zeros(D), np.zeros(D)
    for n, tp in plan.tables.items():
        for r in set(tp.ranks):
            fwd[r] += per[n][0]
            bwd[r] += per[n][1]
    launch = float(system.chip.launch_s)
    np.testing.assert_allclose(fwd + launch, np.asarray(bd.phase_s["emb_fwd"]), rtol=2e-5)
    np.testing.assert_allclose(bwd + launch, np.asarray(bd.phase_s["emb_bwd"]), rtol=2e-5)
    t = perfmodel_terms(system, model, plan, bd)
    assert t.shape == (D, len(TERMS))
    np.testing.assert_allclose(t[:, 0], np.asarray(bd.phase_s["emb_fwd"]) * 1e3, rtol=1e-6)
    comms = (np.asarray(bd.phase_s["input_dist"]) + np.asarray(bd.phase_s["output_dist"])) * 1e3
    np.testing.assert_allclose(t[:, 1], comms, rtol=1e-6)
    # the data-parallel tables' gradients are a part of dense_sync's bytes: a share in (0, 1) of it
    sync = np.asarray(bd.phase_s["dense_sync"]) * 1e3
    extra = t[:, 3] - np.asarray(bd.phase_s["grad_dist"]) * 1e3
    assert np.all(extra > 0) and np.all(extra < sync) and np.all(t[:, 4] == 0)


def test_the_accounts_shapley_shares_by_hand():
    """v(S) = 9 - 2 |S| - 1.5 where x and y are both in S: each player's own -2, the pair's -1.5
    split evenly between x and y; the shares add up to v(all) - v(none)."""
    from perfmodel.interop.torchrec_account import shapley
    T3 = {frozenset(c): 9.0 - 2 * len(c) - (1.5 if {"x", "y"} <= set(c) else 0.0)
          for r in range(4) for c in itertools.combinations("xyz", r)}
    got = shapley(T3, "xyz")
    assert got == pytest.approx({"x": -2.75, "y": -2.75, "z": -2.0})
