"""How answers with error bars print: a table line per figure (p10 / p50 / p90 beside the nominal
value) and the JSON every command's --json carries (keys p10, p50, p90; compare's prob_faster)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .propagate import Uncertain, quantiles

# figure -> (label, scale to the unit shown, unit, format)
FIGURES = {
    "step_s": ("step", 1e3, "ms", "{:.3f}"),
    "samples_per_s": ("throughput", 1e-6, "M samples/s", "{:.3f}"),
    "usd_per_million_samples": ("cost", 1.0, "$ / M samples", "{:.4f}"),
    "joules_per_sample": ("energy", 1e3, "mJ / sample", "{:.3f}"),
    "memory_max_bytes": ("memory (max device)", 1e-9, "GB", "{:.2f}"),
}


def interval(x: np.ndarray, nominal: float | None = None) -> dict:
    """{"p10", "p50", "p90"[, "nominal"]} of a figure's draws (SI)."""
    out = quantiles(x)
    if nominal is not None:
        out["nominal"] = float(nominal)
    return out


def about(res: Uncertain) -> dict:
    """What the draws were: their count, seed, the inputs and the model's error."""
    by = {}
    for i in res.inputs:
        by[i.provenance] = by.get(i.provenance, 0) + 1
    return {"draws": res.draws, "seed": res.seed, "inputs": len(res.inputs), "inputs_by_provenance": by,
            "model_error": res.model_error.as_dict()}


def to_dict(res: Uncertain, figures=tuple(FIGURES)) -> dict:
    out = about(res)
    for f in figures:
        out[f] = interval(res.samples[f], res.nominal.get(f))
    out["feasible_share"] = res.feasible_share()
    return out


def header(res: Uncertain) -> str:
    me = res.model_error
    family = getattr(res, "family", None)
    mean, within, between = me.spread(family)
    if not me.rows:
        err = "the inputs' spread alone (no model error)"
    elif family is None and me.families:         # several machines: each draws its family's
        fams = ", ".join(f"{f} {100 * math.expm1(m):+.1f} %" for f, m, _ in me.families)
        err = (f"the model's own error from {me.rows} measured runs at their plans: bias by family {fams}, spread "
               f"{100 * me.sigma:.1f} % beyond the inputs'; any other family no bias, spread "
               f"{100 * max(me.transfer_sigma, me.sigma):.1f} %")
    elif me.fitted(family):
        err = (f"the model's own error from {me.rows} measured runs at their plans: bias {100 * math.expm1(mean):+.1f} %, "
               f"spread {100 * within:.1f} % beyond the inputs'")
    else:
        err = (f"the model's own error from {me.rows} measured runs at their plans, none of {family}'s family: no bias, "
               f"spread {100 * math.hypot(within, between):.1f} % beyond the inputs' (carrying the fit to another generation)")
    return (f"uncertainty: {res.draws:,} draws (seed {res.seed}) of {len(res.inputs)} uncertain inputs; {err}")


def lines(res: Uncertain, figures=("step_s", "samples_per_s", "usd_per_million_samples", "joules_per_sample")) -> list[str]:
    """The figures as `label  p10  p50  p90  (nominal)` rows."""
    out = [header(res), f"  {'':<22} {'p10':>10} {'p50':>10} {'p90':>10}   nominal"]
    for f in figures:
        label, scale, unit, fmt = FIGURES[f]
        q = quantiles(res.samples[f])
        cell = lambda v: f"{fmt.format(v * scale):>10}"
        out.append(f"  {label + ' ' + unit:<22} {cell(q['p10'])} {cell(q['p50'])} {cell(q['p90'])}   "
                   f"{fmt.format(res.nominal[f] * scale)}")
    share = res.feasible_share()
    if share < 1.0:
        out.append(f"  fits memory in {100 * share:.1f} % of the draws")
    return out


def ratio(a: Uncertain, b: Uncertain, figure: str = "step_s") -> dict:
    """a's figure over b's, draw by draw (the draws are shared: propagate), and the probability that
    a is faster (its step the smaller)."""
    r = a.samples[figure] / b.samples[figure]
    out = interval(r, a.nominal[figure] / b.nominal[figure])
    ok = np.isfinite(r)
    out["prob_faster"] = float(np.mean(r[ok] < 1.0)) if ok.any() else math.nan
    return out


def compare_dict(names: list[str], res: list[Uncertain]) -> dict:
    """compare's --uncertainty: each system's step interval, and the first system against each other:
    the other's step over the first's (interval) and the probability that the first is faster."""
    out = {**about(res[0]), "inputs": len({i.name for r in res for i in r.inputs}),
           "systems": {n: {f: interval(r.samples[f], r.nominal.get(f)) for f in ("step_s", "samples_per_s")}
                       for n, r in zip(names, res)},
           "versus": []}
    for n, r in zip(names[1:], res[1:]):
        q = ratio(r, res[0])
        prob = q.pop("prob_faster")
        out["versus"].append({"system": names[0], "other": n, "step_ratio": q, "prob_faster": 1.0 - prob
                              if math.isfinite(prob) else prob})
    return out


def compare_lines(names: list[str], res: list[Uncertain]) -> list[str]:
    d = compare_dict(names, res)
    width = max(len("system"), *map(len, names))
    families = {r.family for r in res}
    first = res[0] if len(families) == 1 else dataclasses.replace(res[0], family=None)   # each draws its family's
    out = [header(first).replace(f"of {len(res[0].inputs)} uncertain", f"of {d['inputs']} uncertain"),
           f"  {'system':<{width}} {'step ms p10':>12} {'p50':>8} {'p90':>8}"]
    for n in names:
        q = d["systems"][n]["step_s"]
        out.append(f"  {n:<{width}} {q['p10'] * 1e3:>12.3f} {q['p50'] * 1e3:>8.3f} {q['p90'] * 1e3:>8.3f}")
    for v in d["versus"]:
        q = v["step_ratio"]
        out.append(f"  {v['other']} / {v['system']} step: {q['p50']:.3f}x (p10 {q['p10']:.3f}x, p90 {q['p90']:.3f}x); "
                   f"probability {v['system']} is faster: {v['prob_faster']:.3f}")
    return out


def shares_dict(sd) -> dict:
    return {"draws": sd.draws, "seed": sd.seed, "inputs": sd.inputs, "model_error": sd.model_error.as_dict(),
            "gap_s": interval(sd.gap), "rest_s": interval(sd.rest),
            "shares_s": {f: interval(x) for f, x in sd.shares.items()},
            "share_of_gap": {f: interval(x / sd.gap) for f, x in sd.shares.items()}}


def shares_lines(sd) -> list[str]:
    d = shares_dict(sd)
    ms = lambda q: f"{q['p50'] * 1e3:.3f} ms [{q['p10'] * 1e3:.3f}, {q['p90'] * 1e3:.3f}]"
    pct = lambda q: f"{100 * q['p50']:.1f} % [{100 * q['p10']:.1f}, {100 * q['p90']:.1f}]"
    out = [f"uncertainty of the shares: {sd.draws:,} draws (seed {sd.seed}) of {sd.inputs} uncertain inputs and the "
           "model's own error (one draw for the system and its variants, one for the reference), each combination at "
           "its plan; p50 [p10, p90]:",
           f"  {'gap':<18} {ms(d['gap_s'])}"]
    for f in sd.shares:
        out.append(f"  {f:<18} {ms(d['shares_s'][f])}   {pct(d['share_of_gap'][f])} of the gap")
    out.append(f"  {'everything else':<18} {ms(d['rest_s'])}")
    return out
