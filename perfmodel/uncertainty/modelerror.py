"""The model's own error, from validation at the runs' own plans, and the check that the intervals
it gives are calibrated (the measured step inside the 80 % interval in about 80 % of the runs).

    perfmodel uncertainty --fit-model-error     # rewrites data/measurements/steps/model_error.json

Each validation row (data/measurements/steps/results.json, written by `perfmodel validate`) holds
the measured step and the run's own plan. At each row the inputs are drawn as every answer draws
them; the log error of a row is ln(measured) - the mean of the drawn ln(step) (the center of what the
model says before its own error, which a range that is not centered on the file's value moves). The
errors' mean is the model's bias; their variance, less the mean variance the inputs give at the
same rows, is the spread the model adds on its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from .propagate import MODEL_ERROR_FILE, NO_MODEL_ERROR, ModelError, propagate, quantiles

RESULTS = MODEL_ERROR_FILE.parent / "results.json"
FIT_DRAWS = 256       # draws per row: the inputs' variance at a row to a few percent


def validation_rows(results: str | Path | None = None) -> list[dict]:
    """The rows of the stored step validation that hold a step at the run's own plan."""
    p = Path(results) if results is not None else RESULTS
    try:
        data = json.loads(p.read_text())
        rows = [r for ds in data["steps"]["datasets"] for r in ds["rows"] if r.get("run_plan_ms") is not None]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(str(p), "steps", f"is not a step validation's results ({err}); `perfmodel validate "
                          "--kind steps` writes them") from None
    return rows


def row_problem(row: dict):
    """(system, model, run plan) of a results row: the presets, the run's batch and dense dtype."""
    from ..evaluate import as_model, as_system
    from ..plan import plan_from_dict
    system, model = as_system(row["system"]), as_model(row["model"])
    model = dataclasses.replace(model, global_batch=jnp.float32(row["global_batch"]), dense_dtype=row["dense_dtype"])
    return system, model, plan_from_dict(row["run_plan"], system, model, src="results")


def row_spreads(rows: list[dict], draws: int = FIT_DRAWS, seed: int = 0, log=lambda m: None) -> list[dict]:
    """Per row: the measured and modelled steps, the log error, and the inputs' log-step samples."""
    out = []
    for i, r in enumerate(rows):
        log(f"  row {i + 1}/{len(rows)}: {r['system']} at batch {r['global_batch']:,}")
        s, m, p = row_problem(r)
        res = propagate([s], [m], [p], draws, seed, NO_MODEL_ERROR)[0]
        logs = np.log(res.samples["step_s"])
        out.append({"system": r["system"], "global_batch": r["global_batch"], "measured_ms": r["measured_ms"],
                    "run_plan_ms": res.nominal["step_s"] * 1e3, "stored_run_plan_ms": r["run_plan_ms"],
                    "log_error": math.log(r["measured_ms"] / (res.nominal["step_s"] * 1e3)),
                    "centered_log_error": math.log(r["measured_ms"] * 1e-3) - float(np.mean(logs)),
                    "input_log_sd": float(np.std(logs, ddof=1)), "log_samples": logs})
    return out


def fit(spreads: list[dict]) -> ModelError:
    """The model error from row_spreads (module docstring)."""
    e = np.asarray([r["centered_log_error"] for r in spreads])
    s_in = np.asarray([r["input_log_sd"] for r in spreads])
    n = len(e)
    resid = float(np.std(e, ddof=1)) if n > 1 else 0.0
    input_sigma = float(np.sqrt(np.mean(s_in ** 2)))
    sigma = math.sqrt(max(resid ** 2 - input_sigma ** 2, 0.0))
    return ModelError(float(np.mean(e)), sigma, resid, input_sigma, n)


def coverage(spreads: list[dict], me: ModelError, seed: int = 0, level: float = 0.8) -> list[bool]:
    """Per row: whether the measured step lies inside the `level` interval the model gives at the
    run's plan (the row's input samples with the model's error drawn beside them)."""
    from .propagate import design
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    out = []
    for k, r in enumerate(spreads):
        u = design(len(r["log_samples"]), 1, seed + 1 + k)[:, 0]
        x = np.exp(r["log_samples"] + me.eps(u))
        lo, hi = np.quantile(x, [lo_q, hi_q])
        out.append(bool(lo <= r["measured_ms"] * 1e-3 <= hi))
    return out


def loso_coverage(spreads: list[dict], seed: int = 0, level: float = 0.8) -> list[bool]:
    """coverage() with each system's rows judged by the model error fitted on the other systems' rows
    (leave one system out): how the intervals fare on a machine the error was not fitted on."""
    out = [False] * len(spreads)
    for name in dict.fromkeys(r["system"] for r in spreads):
        held = [k for k, r in enumerate(spreads) if r["system"] == name]
        me = fit([r for r in spreads if r["system"] != name])
        for k, ok in zip(held, coverage([spreads[k] for k in held], me, seed, level)):
            out[k] = ok
    return out


def write(me: ModelError, spreads: list[dict], path: str | Path | None = None) -> Path:
    p = Path(path) if path is not None else MODEL_ERROR_FILE
    doc = {**me.as_dict(),
           "about": "The model's own error at the measured runs' own plans, ln(measured) - the mean ln(step) "
                    "over the inputs' draws: mean (bias), residual_sigma (spread), input_sigma (rms spread the "
                    "inputs' ranges give at the same rows), sigma = sqrt(residual_sigma^2 - input_sigma^2) (what "
                    "an answer adds). Written by `perfmodel uncertainty --fit-model-error` from results.json.",
           "per_row": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items() if k != "log_samples"}
                       for r in spreads]}
    p.write_text(json.dumps(doc, indent=1) + "\n")
    return p


def interval_text(x: np.ndarray, scale: float = 1.0, fmt: str = ".3f") -> str:
    q = quantiles(x)
    return f"{q['p50'] * scale:{fmt}} [{q['p10'] * scale:{fmt}}, {q['p90'] * scale:{fmt}}]"
