"""The README's figures cannot go stale: each PNG in docs/img has a JSON of the numbers it drew and the
searched plans it drew them with; re-evaluating those plans with today's model gives the same numbers
(a model change that moves a figure fails here until `make figures` redraws it). Evaluation only, no
search: one compile per system the figures use."""

import json
from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel.analysis.attribution import shapley
from perfmodel.figures import FIGURES, MODEL, SCHEMA, numbers, problem

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
RTOL = 1e-4


def _figures() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(IMG.glob("*.json"))}


def test_every_figure_has_its_numbers_and_the_readme_shows_it():
    assert {p.stem for p in IMG.glob("*.png")} == set(FIGURES) == set(_figures())
    readme = (ROOT / "README.md").read_text()
    for name, data in _figures().items():
        assert data["schema"] == SCHEMA and data["model"] == MODEL and data["figure"] == f"{name}.png"
        assert data["plan"] == pm.planner("search", iterations=data["iterations"], seed=data["seed"]).label
        if "plan_2d" in data:             # the scaling figure's 2D series
            assert data["plan_2d"] == pm.planner("search", iterations=data["iterations"], seed=data["seed"],
                                                 replicas="auto").label
        assert f"docs/img/{name}.png" in readme, name


def test_stored_plans_give_the_numbers_drawn():
    model = pm.load_model(MODEL)
    done, stale = {}, []
    for name, data in _figures().items():
        for pt in data["points"]:
            key = json.dumps([pt["system"], pt["knobs"], pt["global_batch"], pt["plan"]], sort_keys=True)
            if key not in done:
                s, m = problem(pt, model)
                assert s.num_chips == pt["chips"]
                done[key] = numbers(pm.evaluate(s, m, pm.plan_from_dict(pt["plan"], s, m)), s)
            got = done[key]
            for k, v in pt["values"].items():
                if got[k] != pytest.approx(v, rel=RTOL, abs=1e-10):
                    stale.append(f"{name}: {pt['system']} {pt['knobs'] or ''} {k} drawn {v:.6g}, now {got[k]:.6g}")
    assert not stale, "the figures are stale; redraw them with `make figures`:\n" + "\n".join(stale[:20])


def test_derived_numbers_follow_the_points():
    figs = _figures()
    a = figs["attribution"]
    steps = {frozenset(on): p["values"]["step_s"] for on, p in zip(a["combinations"], a["points"])}
    assert a["points"][-1]["system"] == a["reference"] and len(steps) == 2 ** len(a["factors"])
    shares = shapley({S: -t for S, t in steps.items()}, list(a["factors"]))
    assert shares == pytest.approx(a["shares_s"], rel=1e-12)
    ref = a["points"][-1]["values"]["step_s"]
    assert sum(shares.values()) + a["rest_s"] == pytest.approx(a["gap_s"]) == steps[frozenset()] - ref
    sc = figs["scaling"]
    for series in sc["series"].values():
        n0 = str(sc["chips"][0])
        for n, v in series.items():
            assert v["efficiency"] == pytest.approx(v["samples_per_s"] / series[n0]["samples_per_s"] / (int(n) / int(n0)))


def test_readme_quotes_the_figures():
    """The numbers the README states are the ones the figures drew (and `make figures` printed)."""
    text = " ".join((ROOT / "README.md").read_text().split())
    figs = _figures()
    ms = lambda s: f"{s * 1e3:.3f} ms"
    step = {p["system"]: p["values"]["step_s"] for p in figs["breakdown"]["points"]}
    for name, s in step.items():
        assert f"{name} {ms(s)}" in text, name
    a = figs["attribution"]
    shares = a["shares_s"]
    for quote in (f"MTIA 300 steps in {ms(step['mtia300-64'])} and the H100 system in {ms(step['h100-64'])}",
                  f"gains {ms(sum(shares.values()))} of that {ms(a['gap_s'])} gap",
                  f"the message engines {ms(shares['message engines'])}",
                  f"the bandwidth split {ms(shares['bandwidth split'])}",
                  f"the integrated NIC {ms(shares['integrated NIC'])}", f"the other {ms(a['rest_s'])}"):
        assert quote in text, quote
    u, v = a["uncertainty"]["shares_s"], figs["breakdown"]["uncertainty"]["versus"]["step_ratio"]
    span = lambda q: f"{q['p10'] * 1e3:.3f}-{q['p90'] * 1e3:.3f} ms"
    for quote in (f"step is {v['nominal']:.2f}x MTIA 300's, {v['p10']:.2f}-{v['p90']:.2f}x from p10 to p90",
                  f"MTIA 300 is the faster in {100 * v['prob_faster']:.0f} % of the draws",
                  f"the message engines {ms(shares['message engines'])} (p10-p90 {span(u['message engines'])})",
                  f"the integrated NIC {ms(shares['integrated NIC'])} ({span(u['integrated NIC'])})",
                  f"the bandwidth split {ms(shares['bandwidth split'])} ({span(u['bandwidth split'])}"):
        assert quote in text, quote
    for fam_mode, series in figs["scaling"]["series"].items():
        last = series[str(figs["scaling"]["chips"][-1])]
        assert f"{fam_mode} {100 * last['efficiency']:.0f} %" in text, fam_mode
    weak = [p for p in figs["scaling"]["points"]
            if p["chips"] == figs["scaling"]["chips"][-1] and p["global_batch"] and p.get("series") != "2D"]
    assert len(weak) == 2
    for p in weak:
        v = p["values"]
        assert f"{ms(v['exposed_comm_s'])} of its {ms(v['step_s'])}" in text, p["system"]
    for p in figs["pareto"]["points"]:
        v = p["values"]
        assert f"{p['system']} {v['samples_per_s'] / 1e6:.1f} M samples/s at {v['power_W'] / 1e3:.1f} kW" in text, p["system"]


def test_stored_intervals_are_the_models():
    """The error bars drawn (the headline's ratio, the breakdown's steps and the attribution's shares)
    are what today's inputs, model error and draws give at the stored plans: a change of a range or
    of the model's error that moves them fails here until `make figures` redraws them."""
    from perfmodel.figures import DRAW_SEED, DRAWS, _drawn, attribution_draws_of
    from perfmodel.analysis.attribution import combinations
    from perfmodel.uncertainty.report import interval, ratio
    model = pm.load_model(MODEL)
    figs = _figures()
    b = figs["breakdown"]
    assert (b["uncertainty"]["draws"], b["uncertainty"]["seed"]) == (DRAWS, DRAW_SEED)
    drawn = dict(zip((p["system"] for p in b["points"]), _drawn(b["points"], model)))
    for name, q in b["uncertainty"]["step_s"].items():
        assert interval(drawn[name].samples["step_s"]) == pytest.approx({k: q[k] for k in ("p10", "p50", "p90")}, rel=1e-5)
    v = b["uncertainty"]["versus"]
    got = ratio(drawn[v["other"]], drawn[v["system"]])
    assert got["p90"] == pytest.approx(v["step_ratio"]["p90"], rel=1e-5)
    assert 1.0 - got["prob_faster"] == pytest.approx(v["step_ratio"]["prob_faster"])
    a = figs["attribution"]
    combos = [(frozenset(on), None) for on in a["combinations"]]
    sd = attribution_draws_of(a["points"][:-1], a["points"][-1], combos, list(a["factors"]), model)
    for f, q in a["uncertainty"]["shares_s"].items():
        assert interval(sd.shares[f]) == pytest.approx(q, rel=1e-4, abs=1e-9), f
    assert len(combinations(a["factors"])) == len(combos)
