"""The model's own error, from validation at the runs' own plans, and the check that the intervals
it gives are calibrated (the measured step inside the 80 % interval in about 80 % of the runs, also
on machines the fit did not see).

    perfmodel uncertainty --fit-model-error --out new_model_error.json

writes a new file; the package's data/measurements/steps/model_error.json changes only when a
developer copies a refitted file over it (data/measurements/README.md says when and how).

Each validation row (data/measurements/steps/results.json, written by `perfmodel validate`) holds
the measured step and the run's own plan, and the step there at the shared parameters fitted without
the row's system (leave one system out) and without its chip generation (leave one generation out).
At each row the inputs are drawn as every answer draws them; the log error of a row is ln(measured) -
the mean of the drawn ln(step) (the center of what the model says before its own error, which a range
that is not centered on the file's value moves). The error is fitted by chip family
(hardware.architecture), hierarchically:
  within a family   each family's mean error (its bias) and the spread of the errors about their
                    family's mean, less the mean variance the inputs give at the same rows (sigma);
  between families  the spread of the errors at the leave-one-generation-out predictions (each row
                    predicted by the parameters fitted on the other families' rows), about 0, less
                    the inputs' (transfer_sigma): what a machine of a family the fit never saw draws,
                    with no bias, because the sign of a new generation's error is not known.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from .propagate import MODEL_ERROR_FILE, NO_MODEL_ERROR, ModelError, propagate

RESULTS = MODEL_ERROR_FILE.parent / "results.json"
FIT_DRAWS = 256       # draws per row: the inputs' variance at a row to a few percent
SHIFTS = {"loso": "run_plan_loso_ms", "logo": "run_plan_logo_ms"}   # a fold's prediction, in the results rows


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
    """Per row: the measured and modelled steps, the log error, the inputs' log-step samples, the
    chip family, and where the results hold them the held-out folds' predictions as log shifts of
    the row's centre (`loso_shift`, `logo_shift`: ln(fold's step / the run plan's step))."""
    from ..evaluate import as_system
    from ..hardware import architecture
    out = []
    for i, r in enumerate(rows):
        log(f"  row {i + 1}/{len(rows)}: {r['system']} at batch {r['global_batch']:,}")
        s, m, p = row_problem(r)
        res = propagate([s], [m], [p], draws, seed, NO_MODEL_ERROR)[0]
        logs = np.log(res.samples["step_s"])
        row = {"system": r["system"], "family": architecture(as_system(r["system"])), "global_batch": r["global_batch"],
               "measured_ms": r["measured_ms"], "run_plan_ms": res.nominal["step_s"] * 1e3,
               "stored_run_plan_ms": r["run_plan_ms"],
               "log_error": math.log(r["measured_ms"] / (res.nominal["step_s"] * 1e3)),
               "centered_log_error": math.log(r["measured_ms"] * 1e-3) - float(np.mean(logs)),
               "input_log_sd": float(np.std(logs, ddof=1)), "log_samples": logs}
        for name, key in SHIFTS.items():
            if r.get(key) is not None:
                row[f"{name}_shift"] = math.log(r[key] / r["run_plan_ms"])
        out.append(row)
    return out


def fit(spreads: list[dict]) -> ModelError:
    """The model error from row_spreads, by family (module docstring). Rows: system, family,
    centered_log_error, input_log_sd and, where known, logo_shift."""
    e = np.asarray([r["centered_log_error"] for r in spreads], np.float64)
    s_in = np.asarray([r["input_log_sd"] for r in spreads], np.float64)
    fam = [r.get("family", "") for r in spreads]
    n = len(e)
    families = tuple((f, float(np.mean(e[[k for k in range(n) if fam[k] == f]])), fam.count(f)) for f in dict.fromkeys(fam))
    means = {f: m for f, m, _ in families}
    dof = n - len(families)
    about = e - np.asarray([means[f] for f in fam])
    resid = float(np.sqrt(np.sum(about ** 2) / dof)) if dof > 0 else 0.0
    input_sigma = float(np.sqrt(np.mean(s_in ** 2))) if n else 0.0
    sigma = math.sqrt(max(resid ** 2 - input_sigma ** 2, 0.0))
    moved = [k for k, r in enumerate(spreads) if "logo_shift" in r]
    if moved:           # the errors at the predictions of the other families' fit, about 0
        t = e[moved] - np.asarray([spreads[k]["logo_shift"] for k in moved])
        transfer = math.sqrt(max(float(np.mean(t ** 2) - np.mean(s_in[moved] ** 2)), 0.0))
    else:               # no such fold (one family): the fitted rows' errors about 0
        transfer = math.sqrt(max(float(np.mean(e ** 2)) - input_sigma ** 2, 0.0)) if n else 0.0
    return ModelError(float(np.mean(e)) if n else 0.0, sigma, resid, input_sigma, n, families, max(transfer, sigma))


def coverage(spreads: list[dict], me: ModelError, seed: int = 0, level: float = 0.8, shift: str | None = None) -> list[bool]:
    """Per row: whether the measured step lies inside the `level` interval the model gives at the
    run's plan (the row's input samples, moved to a fold's prediction by `shift` ("loso", "logo"),
    with the model's error for the row's family drawn beside them)."""
    from .propagate import design
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    out = []
    for k, r in enumerate(spreads):
        u = design(len(r["log_samples"]), 1, seed + 1 + k)[:, 0]
        moved = r[f"{shift}_shift"] if shift else 0.0
        x = np.exp(r["log_samples"] + moved + me.eps(u, r.get("family")))
        lo, hi = np.quantile(x, [lo_q, hi_q])
        out.append(bool(lo <= r["measured_ms"] * 1e-3 <= hi))
    return out


def held_out_coverage(spreads: list[dict], by: str = "system", seed: int = 0, level: float = 0.8) -> list[bool]:
    """coverage() with each system's rows (by="system": leave one system out) or each family's
    (by="family": leave one generation out) judged by the model error fitted on the other rows,
    at the prediction of the parameters fitted without them where the results hold it: how the
    intervals fare on a machine, or a generation, the fit did not see. A family held out is one the
    error was not fitted on, so its rows draw the spread between families, from the other families'
    rows. Rows with no fold to judge them (the only family; no fold's prediction) are left out."""
    shift = "loso" if by == "system" else "logo"
    out: list[bool | None] = [None] * len(spreads)
    for name in dict.fromkeys(r[by] for r in spreads):
        held = [k for k, r in enumerate(spreads) if r[by] == name]
        rest = [r for r in spreads if r[by] != name]
        if not rest:
            continue
        me = fit(rest)
        use = shift if all(f"{shift}_shift" in spreads[k] for k in held) else None
        if use is None and by == "family":
            continue
        for k, ok in zip(held, coverage([spreads[k] for k in held], me, seed, level, use)):
            out[k] = ok
    return [x for x in out if x is not None]


def loso_coverage(spreads: list[dict], seed: int = 0, level: float = 0.8) -> list[bool]:
    return held_out_coverage(spreads, "system", seed, level)


def logo_coverage(spreads: list[dict], seed: int = 0, level: float = 0.8) -> list[bool]:
    return held_out_coverage(spreads, "family", seed, level)


def write(me: ModelError, spreads: list[dict], path: str | Path) -> Path:
    """The fitted error as a new JSON file at `path` (files.write_new: never over a file)."""
    from ..files import write_new
    doc = {**me.as_dict(),
           "about": "The model's own error at the measured runs' own plans, ln(measured) - the mean ln(step) "
                    "over the inputs' draws, by chip family: families (each one's mean error, its bias), "
                    "residual_sigma (the spread about a family's mean), input_sigma (rms spread the inputs' ranges "
                    "give at the same rows), sigma = sqrt(residual_sigma^2 - input_sigma^2) (what an answer on a "
                    "fitted family adds), transfer_sigma (the errors at the leave-one-generation-out predictions, "
                    "about 0, less the inputs': what an answer on any other family adds, with no bias), mean (the "
                    "bias over every row, reported). Written by `perfmodel uncertainty --fit-model-error --out FILE` "
                    "from results.json.",
           "per_row": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items() if k != "log_samples"}
                       for r in spreads]}
    write_new(path, json.dumps(doc, indent=1) + "\n")
    return Path(path)
