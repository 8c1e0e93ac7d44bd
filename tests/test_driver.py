"""The search driver, its budget and the progress it draws: rounds counted, the clock read in one
place, a cut said to be one; the race of descents in rounds; first-order move estimates."""

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.search import driver
from perfmodel.search import race as rc
from perfmodel.search.progress import Progress

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Count:
    n: int = 0
    done: bool = False


class Countdown:
    """A method that takes `rounds` rounds, each lowering its score: 10, 9, ... (a plan: the round)."""

    name = "countdown"

    def __init__(self, rounds: int):
        self.rounds = rounds

    def init(self, p, seed, budget):
        return Count()

    def step(self, p, s, budget):
        return replace(s, n=s.n + 1, done=s.n + 1 >= self.rounds)

    def best(self, s):
        return s.n, 10.0 - s.n

    def phase(self, s):
        return "first" if s.n < 3 else "second"

    def notes(self, s):
        return {"n": s.n}


class Clock:
    """A fake clock: each reading advances it by `tick` seconds."""

    def __init__(self, tick: float):
        self.t, self.tick = 0.0, tick

    def __call__(self):
        self.t += self.tick
        return self.t


def test_the_driver_runs_a_method_until_it_is_done_and_counts_its_rounds():
    out = driver.run(Countdown(5), None, 0, driver.Budget())
    assert (out.plan, out.score, out.stopped, out.iterations, out.notes) == (5, 5.0, "done", 5, {"n": 5})
    assert [s for _, s in out.progress] == [10.0, 9.0, 8.0, 7.0, 6.0, 5.0]       # every better plan, once
    assert [(ph.name, ph.rounds) for ph in out.phases] == [("start", 0), ("first", 3), ("second", 2)]


def test_iterations_stop_a_method_and_the_clock_never_decides_what_it_does():
    """An iteration budget stops the search after that many rounds, whatever the clock says; a
    wall-clock budget stops it between rounds, and the outcome says which."""
    slow, fast = driver.Budget(iterations=4, clock=Clock(100.0)), driver.Budget(iterations=4, clock=Clock(1e-6))
    a, b = (driver.run(Countdown(50), None, 0, budget) for budget in (slow, fast))
    assert a.stopped == b.stopped == "iterations" and a.iterations == b.iterations == 4 and a.plan == b.plan == 4
    cut = driver.run(Countdown(50), None, 0, driver.Budget(seconds=3.5, clock=Clock(1.0)))
    assert cut.stopped == "budget_s" and 0 < cut.iterations < 50
    assert driver.run(Countdown(3), None, 0, driver.Budget(iterations=3)).stopped == "done"


def test_a_search_cut_by_its_wall_clock_budget_says_so(small_setup):
    """A budget too small for the search: it stops between rounds (not converged, stopped
    "budget_s"), its plan is feasible and no worse than greedy's."""
    system, model = small_setup
    r = pm.search(system, model, "gradient", seed=0, iterations=None, budget_s=0.05)
    assert r.stopped == "budget_s" and not r.converged and r.feasible
    assert r.step_s <= float(pm.evaluate(system, model, pm.greedy_plan(system, model)).step_s) * (1 + 1e-6)


@pytest.fixture(scope="module")
def small_setup():
    from perfmodel.search.instances import small_instance
    return small_instance(0)


@dataclass(frozen=True)
class Stub:
    """A descent that lowers its score along a list, one value a round, then stops."""

    plan: str
    left: tuple
    kept_score: float
    rounds: int = 0
    done: bool = False

    @property
    def best(self):
        return self.plan, self.kept_score


AFTER = {"a": (9.0, 5.0, 5.0, 5.0), "b": (8.0, 3.0, 3.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0), "c": (4.0,), "d": (7.0, 6.0, 6.0)}


def stub_start(p, plan, rank=False):
    return Stub(plan, AFTER[plan], float("inf"))


def stub_descend(p, d):
    return replace(d, left=d.left[1:], kept_score=d.left[0], rounds=d.rounds + 1, done=len(d.left) == 1)


def test_race_halves_the_field_and_gives_the_winner_the_rest():
    """Successive halving in rounds with stub descents: four plans, 24 rounds: two stages and the
    winner alone, each a third of the rounds left, shared in turn by the entries still running."""
    r = rc.start(["a", "b", "c", "d"], allowance=24)
    taken = []
    while not r.done:
        taken.append(r.stage[0])
        r = rc.step(None, r, begin=stub_start, advance=stub_descend)
    # stage 1, 24 // 3 = 8 rounds, 2 each in turn: a 2, b 2, c 1 (it stops: its unused round goes to
    # d), d 3 (stops); the better half: b (3.0) and c (4.0), which stopped, so b runs alone with
    # (24 - 8) // 2 = 8 rounds and stops after 7 (its list ends): 15 rounds in all
    assert taken == [0, 0, 1, 1, 2, 3, 3, 3] + [1] * 7 and r.used == 15
    plan, score, origin = r.best
    assert (plan, score, origin) == ("b", 1.0, 1)
    # no allowance: every descent runs until it stops, and the best wins
    r = rc.start(["a", "c"], allowance=None)
    while not r.done:
        r = rc.step(None, r, begin=stub_start, advance=stub_descend)
    assert r.best == ("c", 4.0, 1) and r.used == 4 + 1


def test_a_race_of_known_plans_holds_the_lowest_from_the_start():
    """With the plans' scores known, the race holds the lowest before any descent and runs it first;
    with no rounds at all it returns that plan as it is."""
    r = rc.start(["a", "b"], [6.0, 3.0], allowance=0)
    assert r.done and r.best == ("b", 3.0, 1)
    r = rc.start(["a", "b"], [6.0, 3.0], allowance=10)
    assert r.stage[0] == 1


def test_a_race_runs_the_plan_named_first_before_the_lower_ones_and_halves_by_score():
    """first= puts one plan's descent ahead of the lower-scored ones in the first stage (a small
    instance's population plan); the plan held and the halving after the stage stay by score."""
    r = rc.start(["a", "b", "c", "d"], [6.0, 3.0, 5.0, 9.0], allowance=24, first=3)
    assert r.stage == (3, 1, 2, 0) and r.best == ("b", 3.0, 1)
    taken = []
    while not r.done:
        taken.append(r.stage[0])
        r = rc.step(None, r, begin=stub_start, advance=stub_descend)
    # stage 1 as in the race above but d first: d 2, b 2, c 1 (stops), a 3; then b (3.0) and c
    # (4.0) go on, b alone, until its list ends (7 rounds)
    assert taken == [3, 3, 1, 1, 2, 0, 0, 0] + [1] * 7 and r.best == ("b", 1.0, 1)


def test_progress_draws_from_the_rounds_a_line_per_phase_off_a_terminal():
    """Off a terminal (a log, CI) the progress is one line at the start and one per new phase,
    however many rounds each phase takes, never a redraw."""
    out = io.StringIO()
    budget = driver.Budget(iterations=10, clock=Clock(0.5))
    with Progress(True, 30.0, 10, "search gradient", stream=out) as bar:
        for phase in ("start", "start", "relaxed", "relaxed", "kicks", "start"):
            budget.spend()
            bar.update(phase, budget)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 4
    assert lines[0] == "search gradient: 10 iterations, budget 30 s"
    assert [line.split(":")[1].split(" at ")[0].strip() for line in lines[1:]] == ["start", "relaxed", "kicks"]
    assert lines[2].endswith("round 3")


def test_first_order_estimates_are_the_gradient_times_each_moves_change():
    """firstorder.table_estimates: a table-wise move of a table-wise table from device a to b is
    estimated g_place[t, b] - g_place[t, a]; a type change to row-wise over every device
    g_type[t, RW] - g_type[t, TW] (its placement no longer counts); every table-wise table gets one move per other device. And
    the estimates rank the moves: their correlation with the moves' exact score changes is positive."""
    from scipy.stats import spearmanr

    from perfmodel.plan import RW, TW
    from perfmodel.search import firstorder as fo
    from perfmodel.search import moves as mv
    from perfmodel.search.problem import Problem
    from perfmodel.plan import make_masks
    from perfmodel.search.instances import synthetic_model

    # the large instance of tests/test_search.py and tests/reproduce.py: the search's programs for it,
    # its first-order gradient among them, compile once for all three
    system, model = pm.load_system("h100-16"), synthetic_model(seed=1, num_tables=300, total_params=2e9)
    p = Problem(system, model, make_masks(system, model))
    assert not p.exhaustive
    plan = pm.greedy_plan(system, model)
    pa = p.arrays(plan)
    tie, _, memory, cap, loads, _ = p.details_of(pa)
    g = fo.as_numpy(fo.gradient(system, model, pa))
    c, est, _ = fo.table_estimates(p, plan, pa, g, memory, loads, False)
    names = model.tables.names
    tw = [t for t, n in enumerate(names) if plan.tables[n].sharding_type == "table_wise"]
    assert tw
    for t in tw:
        a = plan.tables[names[t]].ranks[0]
        rows = np.flatnonzero((c["t"] == t) & (c["st"] == TW))
        assert sorted(c["devs"][rows, 0].tolist()) == [d for d in range(p.D) if d != a]
        for i in rows[:3]:
            b = int(c["devs"][i, 0])
            assert est[i] == pytest.approx(g.placement[t, b] - g.placement[t, a], rel=1e-9, abs=1e-15)
        rw = np.flatnonzero((c["t"] == t) & (c["st"] == RW) & (c["k"] == mv.WHOLE))     # over every device
        assert len(rw) == 1 and est[rw[0]] == pytest.approx(g.shard_type[t, RW] - g.shard_type[t, TW], rel=1e-9, abs=1e-15)
    exact = mv.score_moves(p, pa, c) - float(tie)
    assert spearmanr(est, exact).correlation > 0.2


def test_the_same_problem_seed_and_iterations_give_the_same_plan_in_any_process(tmp_path):
    """Reproducible by construction: a search bounded by iterations gives the same plan and step in a
    fresh process with an empty compile cache, and in another with that cache now warm after it has
    searched another problem with another seed. A small instance (every phase, the relaxed one too)
    and a large one (first-order-ranked moves)."""
    script = ROOT / "tests" / "reproduce.py"
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "PERFMODEL_CACHE_DIR"}
    runs = []
    for extra in ([], ["--after-another"]):        # the empty cache; then warm, after another search
        done = subprocess.run([sys.executable, str(script), str(cache), *extra], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        assert any(cache.iterdir())
    assert set(runs[0]) == {"small", "large"}
    for name in runs[0]:
        assert runs[0][name] == runs[1][name], name
