"""The search never loses to a planner it knows, held settings hold from the first round, and the
search front reads a method's traits rather than its name."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.config import ConfigError
from perfmodel.constraints import Constraints, parse_constraints
from perfmodel.plan import Hold, hold_all, parse_hold
from perfmodel.search.api import make_problem
from perfmodel.search.replicas import TWO_D_AT, plan_wide
from perfmodel.search.starts import starts

ROOT = Path(__file__).resolve().parents[1] / "perfmodel"
HELD = "dense=replicated,overlap_chunks=1,pipeline=off"


@pytest.fixture(scope="module")
def small():
    return pm.load_model("dlrm-small")


def problem(system, model, hold=Hold()):
    return make_problem(system, model, precisions=("fp32",), sharding_types=pm.SHARDING_TYPES,
                        freeze_settings=False, hold=hold)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.integers(1_000, 20_000_000), min_size=8, max_size=8),
       pooling=st.lists(st.integers(1, 60), min_size=8, max_size=8),
       method=st.sampled_from(["random", "gradient"]), held=st.booleans())
def test_never_worse_than_the_best_start(small, rows, pooling, method, held):
    """On random tables (one shape: one compile), the plan a scoring method returns is no slower
    than any planner's plan it started from, each priced afresh by evaluate (not by the search)."""
    system = pm.load_system("h100-16")
    tables = dataclasses.replace(small.tables, rows=np.asarray(rows, np.float32), pooling=np.asarray(pooling, np.float32))
    model = dataclasses.replace(small, tables=tables)
    hold = parse_hold(HELD if held else None)
    r = pm.search(system, model, method, iterations=2, hold=hold)
    planners = starts(problem(system, model, hold))
    assert {n for n, _ in planners} >= {"greedy", "round_robin"}
    steps = [(float(bd.step_s), n) for n, plan in planners if bool((bd := pm.evaluate(system, model, plan)).feasible)]
    assert r.feasible and steps
    assert r.step_s <= min(steps)[0] * (1 + 1e-5), (r.step_s, steps)
    assert set(r.notes["starts"]["scores_s"]) == {n for n, _ in planners}
    assert hold.keeps(r.plan)


def test_a_users_start_is_a_start_and_never_lost(small):
    """A plan of one's own joins the starts under its own name; a search of one round returns no
    plan slower than it."""
    system = pm.load_system("h100-8")
    mine = pm.search(system, small, "random", iterations=40).plan
    r = pm.search(system, small, "gradient", iterations=1, start=mine)
    assert "your start" in r.notes["starts"]["scores_s"]
    assert r.step_s <= float(pm.evaluate(system, small, mine).step_s) * (1 + 1e-5)


def test_held_settings_price_every_candidate_and_stay(small):
    """A plan whose settings differ from the held ones scores as its held version (the scorer holds
    them), the setting moves leave them alone, and the plan returned has them."""
    from perfmodel.search import moves as mv
    system = pm.load_system("h100-8")
    hold = parse_hold(HELD + ",all_to_all=direct")
    p = problem(system, small, hold)
    plan = dataclasses.replace(pm.default_plan(system, small), dense="fully_sharded", overlap_chunks=4,
                               pipeline=True, algorithms=dict(pm.default_plan(system, small).algorithms,
                                                              all_to_all="hierarchical"))
    assert not hold.keeps(plan) and hold.keeps(hold.apply(plan))
    assert float(p.details(plan).score_s) == pytest.approx(float(pm.evaluate(system, small, hold.apply(plan)).step_s),
                                                      rel=1e-5)
    changes = mv.setting_changes(p, hold.apply(plan))
    assert changes and all(hold.keeps(c) for c in changes)
    assert np.asarray(p.masks.dense).tolist() == [0.0 if m == "replicated" else pytest.approx(-1e9)
                                                  for m in pm.DENSE_MODES]


def test_parse_hold_names_the_field_and_what_is_allowed():
    h = parse_hold("dense=replicated, pipeline=off ,overlap_chunks=1")
    assert h.as_dict() == {"dense": "replicated", "pipeline": False, "overlap_chunks": 1}
    assert str(parse_hold(str(h))) == str(h)
    assert parse_hold({"grad_buckets": 8, "all_reduce": "tree"}).as_dict() == {"grad_buckets": 8, "all_reduce": "tree"}
    for bad, field, allowed in (("dense=mixed", "--hold.dense", "replicated"), ("pipeline=maybe", "--hold.pipeline", "on or off"),
                                ("overlap_chunks=0", "--hold.overlap_chunks", "1 to 1,024"),
                                ("colour=red", "--hold.colour", "dense"), ("dense", "--hold", "key=value"),
                                ("all_to_all=ring", "--hold.all_to_all", "direct"),
                                ("dense=replicated,dense=hybrid", "--hold.dense", "twice")):
        with pytest.raises(ConfigError) as e:
            parse_hold(bad, "", "--hold")
        assert e.value.field == field and allowed in e.value.message, (bad, e.value)


def test_hold_all_holds_every_setting(small):
    plan = pm.default_plan("h100-8", small)
    h = hold_all(plan)
    other = dataclasses.replace(plan, dense="fully_sharded", grad_buckets=32, offload=not plan.offload)
    assert h.apply(other) == plan


def test_a_constraint_sets_hold_joins_the_search(small):
    c = parse_constraints({"hold": {"dense": "replicated", "overlap_chunks": 2}, "c0": {"sharding_types": ["table_wise"]}})
    assert c.hold == {"dense": "replicated", "overlap_chunks": 2} and "c0" in c.tables
    assert Constraints().merged(c).hold == c.hold
    with pytest.raises(ConfigError) as e:
        parse_constraints({"hold": {"dense": "mixed"}}, "my.toml")
    assert e.value.source == "my.toml" and e.value.field == "hold.dense"


def test_a_default_search_screens_2d_from_the_scale_production_uses_it():
    none = Constraints()
    assert plan_wide(none, None, None, TWO_D_AT) == ("auto", 1)
    assert plan_wide(none, None, None, TWO_D_AT // 2) == (1, 1)
    assert plan_wide(Constraints(replicas=(1,)), None, None, 4 * TWO_D_AT) == ([1], 1)


def test_no_code_tests_a_method_by_name_outside_the_registry():
    """A method's traits are attributes of its methods.Spec: the search's front and the CLI never
    compare a method's name with a literal."""
    pattern = re.compile(r"""method\s*(==|!=|in|not in)\s*[("']""")
    hits = [f"{path.relative_to(ROOT)}:{i}" for path in [*ROOT.glob("search/*.py"), *ROOT.glob("cli/*.py")]
            if path.name != "methods.py"
            for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_the_search_front_stays_small():
    assert len((ROOT / "search" / "api.py").read_text().splitlines()) < 300
