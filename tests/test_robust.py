"""Plans that stay fast when the model's inputs are off (perfmodel.uncertainty.robust, search's
objective): the objective's draws and scorer against an independent evaluation, the robust search
never worse than the nominal-best plan at the objective's draws, the nominal objective unchanged,
the same seed the same plan, and the bad objectives, draws and combinations refused."""

import dataclasses
import json
import re

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.config import ConfigError
from perfmodel.plan import SHARDING_TYPES, stack, to_arrays
from perfmodel.search.api import make_problem
from perfmodel.search.greedy import greedy_plan
from perfmodel.uncertainty import robust as rb
from perfmodel.uncertainty.inputs import inputs_of
from perfmodel.uncertainty.propagate import design, evaluate_draws, values_of

# one small problem for every search here (its programs compile once for the module), on which the
# objective's pass moves off the nominal-best plan: 30 rounds leave it room, and 32 draws of 34 inputs
# are few enough that the plan it finds is better in sample than out (the check says so)
SYSTEM, MODEL, ITERATIONS, K, SEED = "h100-8", "dlrm-dcnv2-mlperf", 30, 32, 0
SEARCH = dict(iterations=ITERATIONS, progress=False)


def _steps_at_objective_draws(system, model, plan, draws: int, seed: int) -> np.ndarray:
    """A plan's step at the objective's draws, by the propagation's evaluation (not the search's scorer)."""
    ins = inputs_of(system, model)
    values = values_of(ins, design(draws, len(ins), seed))
    return evaluate_draws(system, model, to_arrays(plan, system, model), ins, values)["step_s"]


@pytest.fixture(scope="module")
def problem():
    return pm.load_system(SYSTEM), pm.load_model(MODEL)


@pytest.fixture(scope="module")
def p90(problem):
    system, model = problem
    return pm.search(system, model, objective="p90", draws=K, uncertainty_seed=SEED, **SEARCH)


@pytest.mark.parametrize("text,q", [("nominal", None), ("p90", 0.9), ("p50", 0.5), ("p1", 0.01), ("p99", 0.99),
                                    ("p75", 0.75)])
def test_objective_strings(text, q):
    assert rb.parse_objective(text) == q
    assert rb.objective_name(q) == text


@pytest.mark.parametrize("bad", ["p0", "p100", "p09", "P90", "90", "p90.5", "p-5", "mean", "", " p90", None, 0.9])
def test_bad_objectives_are_config_errors(bad, problem):
    with pytest.raises(ConfigError, match=r"allowed: nominal, p50, p90, \.\.\. \(pNN, 1-99\)"):
        rb.parse_objective(bad)
    with pytest.raises(ConfigError, match="objective"):
        pm.search(*problem, objective=bad, **SEARCH)


@pytest.mark.parametrize("kw,match", [
    (dict(objective="p90", draws=1), "from 2 to 4,096"), (dict(objective="p90", draws=4097), "from 2 to 4,096"),
    (dict(objective="p90", draws=True), "from 2 to 4,096"), (dict(objective="p90", uncertainty_seed=-1), ">= 0"),
    (dict(draws=64), "is for an objective over draws"), (dict(uncertainty_seed=0), "is for an objective over draws"),
    (dict(objective="p90", method="greedy"), "greedy builds its plan by its own rule"),
    (dict(objective="p90", method="exact"), "exact builds its plan"),
    (dict(objective="p90", co_design="nic_split"), "co-design searches the nominal step only"),
    (dict(objective="p90", replicas=2), "2D plans"),
])
def test_what_an_objective_refuses(problem, kw, match):
    with pytest.raises(ConfigError, match=match):
        pm.search(*problem, **dict(SEARCH, **kw))


def test_a_system_without_uncertain_inputs_has_no_objective_over_draws():
    """A system built in code has no files, so no ranges: every draw would be the nominal step."""
    system, model = pm.load_system(SYSTEM), pm.load_model(MODEL)
    bare = dataclasses.replace(system, files=())
    assert inputs_of(bare, model) == []
    with pytest.raises(ConfigError, match="no uncertain inputs"):
        rb.make_draws(bare, model, 0.9)


@pytest.mark.parametrize("q", [0.9, 0.5])
def test_the_scorer_prices_a_plan_at_the_quantile_of_its_steps_over_the_draws(problem, p90, q):
    """The search's hard score with the objective's draws is np.quantile of the plan's steps at the
    same draws evaluated by the propagation, for several plans in one batch; the nominal scorer's is
    the nominal step (the draws are not the files' values)."""
    system, model = problem
    draws = rb.make_draws(system, model, q, K, seed=5)
    kw = dict(precisions=("fp32",), sharding_types=SHARDING_TYPES, freeze_settings=False)
    p, p0 = make_problem(system, model, draws=draws, **kw), make_problem(system, model, **kw)
    assert p.max_batch == rb.EVALUATIONS_PER_CALL // K and not p.eager
    greedy = greedy_plan(system, model, p.masks)
    plans = [greedy, dataclasses.replace(greedy, pipeline=not greedy.pipeline), p90.plan, p90.nominal.plan]
    scored = p.pairs(stack([p.arrays(x) for x in plans]))[0]      # the search's arrays: row subsets carried
    for plan, s in zip(plans, scored):
        assert bool(pm.evaluate(system, model, plan).feasible)
        steps = _steps_at_objective_draws(system, model, plan, K, 5)
        assert s == pytest.approx(np.quantile(steps, q), rel=2e-5)
        assert float(p.details(plan).score_s) == pytest.approx(s, rel=1e-6)
        nominal = float(p0.details(plan).score_s)
        assert nominal == pytest.approx(float(pm.evaluate(system, model, plan).step_s), rel=1e-5)
        assert abs(s / nominal - 1) > 1e-3


def test_the_robust_plan_is_no_worse_than_the_nominal_best_at_the_objectives_draws(problem, p90):
    """At the objective's own draws (recomputed here by the propagation), the returned plan's p90 is at
    most the nominal-best plan's; the values the search reports are those; the nominal-best plan is
    the ordinary search's with the same seed and iterations."""
    system, model = problem
    info = p90.notes["objective"]
    assert (info["objective"], info["q"], info["draws"], info["seed"]) == ("p90", 0.9, K, SEED)
    robust = np.quantile(_steps_at_objective_draws(system, model, p90.plan, K, SEED), 0.9)
    nominal = np.quantile(_steps_at_objective_draws(system, model, p90.nominal.plan, K, SEED), 0.9)
    assert robust <= nominal * (1 + 1e-6)
    assert info["found_s"] == pytest.approx(robust, rel=2e-5) and info["kept"] == "search"
    assert info["nominal_best_s"] == pytest.approx(nominal, rel=2e-5)
    # on this instance the pass moves: a plan of lower p90 at the draws than the nominal-best one (the
    # nominal search, started from the planners' plans, leaves it a small margin)
    assert p90.plan != p90.nominal.plan and robust < nominal
    plain = pm.search(system, model, **SEARCH)
    assert plain.plan == p90.nominal.plan and plain.step_s == p90.nominal.step_s
    # r.step_s and the breakdown are the returned plan's nominal figures
    assert p90.step_s == pytest.approx(float(pm.evaluate(system, model, p90.plan).step_s), rel=1e-5)


def test_the_check_is_out_of_sample_and_matches_the_propagation(problem, p90):
    """Both plans at CHECK_DRAWS draws of the next seed (the inputs' spread alone): the quantiles are
    those of pm.uncertainty without the model's error, and the gap their difference."""
    system, model = problem
    ck = p90.notes["objective"]["check"]
    assert (ck["draws"], ck["seed"]) == (rb.CHECK_DRAWS, SEED + 1)
    for key, plan in (("robust", p90.plan), ("nominal_best", p90.nominal.plan)):
        u = pm.uncertainty(system, model, plan, draws=rb.CHECK_DRAWS, seed=SEED + 1, model_error=False)
        assert ck[key]["p90"] == pytest.approx(u.p90, rel=1e-9) and ck[key]["p50"] == pytest.approx(u.p50, rel=1e-9)
    assert ck["p90_gap_s"] == pytest.approx(ck["nominal_best"]["p90"] - ck["robust"]["p90"], abs=1e-15)
    assert ck["same_plan"] == (p90.plan == p90.nominal.plan)


def test_the_same_seed_gives_the_same_plan(problem, p90):
    system, model = problem
    again = pm.search(system, model, objective="p90", draws=K, uncertainty_seed=SEED, **SEARCH)
    assert again.plan == p90.plan and again.notes["objective"]["found_s"] == p90.notes["objective"]["found_s"]


def test_the_nominal_objective_is_the_search_as_it_was(problem):
    system, model = problem
    a, b = pm.search(system, model, **SEARCH), pm.search(system, model, objective="nominal", **SEARCH)
    assert a.plan == b.plan and a.step_s == b.step_s and b.nominal is None and "objective" not in b.notes


@pytest.mark.parametrize("method", ["random", "evolutionary"])
def test_the_samplers_search_the_objective_too(problem, method):
    """The samplers' objective pass scores its candidates at the draws and never returns a plan of
    higher objective than the nominal-best one."""
    system, model = problem
    r = pm.search(system, model, method, objective="p75", draws=K, iterations=3, progress=False)
    info = r.notes["objective"]
    value = lambda plan: np.quantile(_steps_at_objective_draws(system, model, plan, K, 0), 0.75)
    assert value(r.plan) <= value(r.nominal.plan) * (1 + 1e-6)
    assert info["nominal_best_s"] == pytest.approx(value(r.nominal.plan), rel=2e-5)
    assert "p75" in info["check"]["robust"] and r.iterations == 6


def test_cli_prints_the_gap_and_json_carries_it(capsys):
    from perfmodel.cli import main
    args = ["search", "--system", SYSTEM, "--model", MODEL, "--iterations", str(ITERATIONS), "--objective", "p90",
            "--draws", str(K), "--uncertainty-seed", str(SEED), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"objective p90: the step's p90 over {K} draws" in out
    assert f"checked at 1,000 other draws (seed {SEED + 1})" in out
    rows = [line for line in out.splitlines() if line.startswith(("  robust (p90 search)", "  nominal-best"))]
    assert len(rows) == 2 and all(len(r.split()) >= 5 for r in rows)
    assert "p90 gap (nominal-best - robust):" in out
    assert main(args + ["--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["objective"] == "p90" and set(got["robust"]) >= {"p50", "p90", "step_s"}
    assert got["p90_gap_s"] == pytest.approx(got["nominal_best"]["p90"] - got["robust"]["p90"], abs=1e-15)
    assert got["objective_search"]["draws"] == K


@pytest.mark.parametrize("flags,match", [
    (["--objective", "p100"], r"'--objective': is 'p100'; allowed: nominal, p50, p90, \.\.\. \(pNN, 1-99\)"),
    (["--objective", "worst"], "allowed: nominal"),
    (["--objective", "p90", "--draws", "1"], "'--draws': must be a number of draws from 2 to 4,096"),
    (["--draws", "64"], "'--draws': is for --objective pNN"),
    (["--objective", "p90", "--method", "greedy"], "'--objective': p90 is for the methods that score"),
    (["--objective", "p90", "--compare", "random"], "'--compare': takes --objective nominal only"),
    (["--objective", "p90", "--replicas", "2"], "on 1D plans"),
])
def test_cli_refuses_in_one_line(flags, match, capsys):
    from perfmodel.cli import main
    assert main(["search", "--system", SYSTEM, "--model", MODEL, "--no-progress"] + flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(match, err), err
