"""How answers with error bars print: a table line per figure (p10 / p50 / p90 beside the nominal
value) and the JSON every command's --json carries (keys p10, p50, p90; compare's prob_faster)."""

from __future__ import annotations

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
    err = (f"the model's own error from {me.rows} measured runs at their plans: bias {100 * math.expm1(me.mean):+.1f} %, "
           f"spread {100 * me.sigma:.1f} % beyond the inputs'" if me.rows else "the inputs' spread alone (no model error)")
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
