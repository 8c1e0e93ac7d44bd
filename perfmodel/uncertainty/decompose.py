"""What to measure next: the share of an answer's spread each uncertain input accounts for.

    rows = pm.uncertainty_sources("h100-64", "dlrm-dcnv2-mlperf", plan)
    rows[0]     # Source(name="h100:memory.gather_efficiency_max", first=0.41, total=0.43, ...)

A variance decomposition of the log of the figure (Sobol' indices, scipy.stats.sobol_indices,
Saltelli's estimator): `first` is the share of the variance an input explains on its own (what
measuring it exactly would remove, on average), `total` its share with every interaction it takes
part in. The model's own error is one more source (its share: what a better model would remove).
n base draws cost n x (d + 2) evaluations, one vectorized call per chunk (propagate.evaluate_draws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import ConfigError
from ..evaluate import resolve
from ..hardware import architecture
from .inputs import inputs_of
from .propagate import ModelError, plan_arrays_of, check_seed, evaluate_draws, model_error_of, values_of

MODEL_ERROR_NAME = "model's own error"
DEFAULT_BASE = 256
MAX_BASE = 8192
FIGURES = ("step_s", "samples_per_s", "usd_per_million_samples", "joules_per_sample")


@dataclass(frozen=True)
class Source:
    """One input's share of the figure's variance (of its log)."""

    name: str
    label: str
    provenance: str
    unit: str
    value: float
    lo: float
    hi: float
    first: float           # first-order Sobol' index
    total: float           # total-order Sobol' index

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def check_base(n, field: str = "draws") -> int:
    ok = isinstance(n, (int, np.integer)) and not isinstance(n, bool)
    n = int(n) if ok else 0
    if not ok or n < 16 or n > MAX_BASE or n & (n - 1):
        raise ConfigError("", field, f"must be a power of two from 16 to {MAX_BASE:,} (base draws of the "
                          f"decomposition; it evaluates n x (inputs + 2) points)")
    return n


def sources(system, model, plan, figure: str = "step_s", n: int = DEFAULT_BASE, seed: int = 0,
            model_error: bool | ModelError = True, progress: str | None = None) -> list[Source]:
    """Every uncertain input's share of the variance of log(figure) at `plan`, the largest first
    (module docstring)."""
    from scipy.stats import sobol_indices, uniform
    if figure not in FIGURES:
        raise ConfigError("", "figure", f"must be one of {', '.join(FIGURES)}, got {figure!r}")
    n, seed = check_base(n), check_seed(seed)
    system, model, plan = resolve(system, model, plan, plan_required=True)
    pa, _ = plan_arrays_of(system, model, plan)
    me = model_error_of(model_error)
    ins = inputs_of(system, model)
    family = architecture(system)
    err_mean, within, between = me.spread(family)
    err_sd = math.hypot(within, between)
    with_err = err_sd > 0
    d = len(ins) + with_err
    if d == 0:
        raise ConfigError("", "system", f"{system.name} has no uncertain input (a system built in code has no files)")
    sign = -1.0 if figure == "samples_per_s" else 1.0

    def f(u):                                  # u: [d, m] uniform quantiles -> [m] log figure
        u = np.clip(u.T, 1e-12, 1 - 1e-12)
        figs = evaluate_draws(system, model, pa, ins, values_of(ins, u[:, :len(ins)]), progress=None)
        y = np.log(figs[figure])
        if with_err:
            y = y + sign * me.eps(u[:, -1], family)
        return y

    total_points = n * (d + 2)
    if progress:
        import sys

        from ..config import quiet
        if not quiet():
            print(f"{progress}: {total_points:,} evaluations ({n} base draws x ({d} sources + 2)) in vectorized calls",
                  file=sys.stderr, flush=True)
    res = sobol_indices(func=f, n=n, dists=[uniform(0, 1)] * d, rng=np.random.default_rng(seed))
    first, total = np.asarray(res.first_order).ravel(), np.asarray(res.total_order).ravel()
    out = [Source(i.name, i.label, i.provenance, i.unit, i.value, i.lo, i.hi, float(first[k]), float(total[k]))
           for k, i in enumerate(ins)]
    if with_err:
        how = "" if me.fitted(family) else f", {family} outside the fitted families"
        out.append(Source(MODEL_ERROR_NAME, f"ln(measured / modelled) ~ Normal({err_mean:.3f}, {err_sd:.3f}), "
                          f"from {me.rows} runs{how}", "validation", "", 0.0, err_mean - err_sd, err_mean + err_sd,
                          float(first[-1]), float(total[-1])))
    return sorted(out, key=lambda s: -s.total)


def format_sources(rows: list[Source], title: str, top: int | None = 15) -> str:
    shown = rows if top is None else rows[:top]
    w = max(len("input"), *(len(r.name) for r in shown))
    lines = [title, "=" * len(title),
             f"{'input':<{w}}  {'alone %':>7}  {'total %':>7}  {'range':<24} provenance"]
    for r in shown:
        rng = (f"{r.lo:.4g} .. {r.hi:.4g} {r.unit}".strip() if r.name != MODEL_ERROR_NAME
               else f"sigma {(r.hi - r.lo) / 2:.3f} (log)")
        lines.append(f"{r.name:<{w}}  {100 * max(r.first, 0.0):>7.1f}  {100 * max(r.total, 0.0):>7.1f}  {rng:<24} "
                     f"{r.provenance}")
    if top is not None and len(rows) > top:
        lines.append(f"... {len(rows) - top} more (--top 0 lists all)")
    lines.append("alone: the share of the variance of log(figure) the input explains by itself (first-order Sobol' "
                 "index); total: with its interactions. Estimates: shares under ~1 % are noise.")
    return "\n".join(lines)
