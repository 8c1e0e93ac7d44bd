"""Validation against measured whole training steps (data/measurements/steps/*.csv).

Every CSV is one dataset: rows of (system preset, model preset, global batch, what the run used:
dense compute dtype, the precisions its all-to-alls and gradient sync may use, in-network reduction;
measured ms per step, source). For each row:

  run plan     the step at the plan the run used (the model's physics): where the row names its
               framework's planner (plan_settings planner=hugectr:auto:7:0.008, from the submission's
               config_*.sh, cited in plan_source), that planner's placement of the tables
               (interop/hugectr.py), the run's fixed settings, and of the rest the fastest
               combination (the collective algorithms NCCL picks, the precisions the run may use,
               the gradient buckets); blind, and leave one system out: the shared parameters fitted
               on every other system's rows at their run plans
  blind        (the best plan) the step of the model's best plan for the run: what perfmodel
               recommends, its gain over the run plan the claim it makes: a search (seed 0, run to its end:
               budget_s=None) on the named system at the run's batch and precisions, the presets as
               they are; greedy's step beside it. Where the run's software fixes plan settings
               (plan_settings, e.g. dense=replicated: data-parallel MLPs; overlap_chunks=1: no
               chunked overlap of the all-to-alls with the dense layers), the search holds them
               from its first round (search's hold), and the run's own plan is one of its starts
  calibrated   leave one system out: the shared parameters below fitted (optax, mean absolute log
               error, the metric reported, plus a weak pull towards 1) on every other system's rows,
               with their blind plans held, then this system's plan searched again at the fitted
               parameters; its blind plan stays when that is the faster at them (a search is one
               path through the plans, and the blind plan is one the model can choose: so a row's
               prediction does not move by which basin one search happened to end in)

Shared parameters: properties of the libraries every measured system runs (all of them NVIDIA GPUs
with cuBLAS, NCCL and the embedding kernels of one framework), never of a system or a row:
  gemm     the dense GEMMs' efficiency (every chip's matmul_efficiency_max, scaled)
  gather   the embedding kernels' random-row efficiency (every chip's gather_efficiency_max, scaled)
  latency  the collectives' per-step and per-call latencies (every link's, scaled)

Leave one generation out (at the runs' own plans): the shared parameters fitted on the rows of
every other chip architecture (hardware.architecture: the chip file's `architecture`, e.g. ampere,
hopper), this architecture's rows evaluated at them: A100 rows predicted from the H100 rows' fit and
the reverse. Leaving a system out keeps its generation's other systems in the fit; leaving the
generation out is what a new chip is to the model.

Error of a row: predicted / measured step - 1; per dataset the geometric-mean error
exp(mean |ln(t_pred / t_meas)|) - 1 and the largest one; and the bias, the mean signed error
exp(mean ln(t_pred / t_meas)) - 1 (< 0: the model runs fast), for every set of predictions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..config import DATA_DIR, ConfigError
from ..hardware import architecture
from ..interop.hugectr import hugectr_plan, parse_recipe, with_run_settings
from ..plan import DENSE_MODES, PRECISIONS, Plan, plan_from_dict, to_arrays
from ..schema import MODEL
from .collectives import ERROR_MEASURE, largest_error
from .csvfile import read_rows, shown

STEPS = DATA_DIR / "measurements" / "steps"
COLUMNS = ("system", "model", "global_batch", "dense_dtype", "comm_precisions", "in_network_reduction",
           "plan_settings", "ms_per_step", "run", "source")
SETTINGS = {"overlap_chunks": int, "grad_buckets": int, "pipeline": bool, "offload": bool, "dense": str}
PLANNER = "planner"          # plan_settings' key naming the run's own planner (not a plan field)
DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}     # fp16 runs and moves as bf16 does
PARAMETERS = ("gemm", "gather", "latency")
TARGET_BLIND, TARGET_CALIBRATED, TARGET_MAX = 0.10, 0.12, 0.20
RIDGE = 1e-2                 # on the log scales: a 2x scale costs as much as a 0.5 % misfit per row
SMOOTH = 0.01                # the absolute log error is smoothed within 1 % of a perfect fit
FIT_STEPS = 200


@dataclass
class StepRow:
    system: str
    model: str
    global_batch: int
    dense_dtype: str
    precisions: tuple[str, ...]
    in_network: bool
    settings: dict
    ms_per_step: float
    run: str
    source: str
    where: str
    planner: object = None       # interop.hugectr.Recipe of the run's own planner, or None
    plan_source: str = ""


@dataclass
class StepDataset:
    name: str
    path: Path
    rows: list[StepRow] = field(default_factory=list)


# ------------------------------------------------------------------------------------- loading

def load_step_datasets(folder: str | Path | None = None) -> list[StepDataset]:
    """Every CSV of `folder` (default data/measurements/steps), checked: one clear error per problem."""
    folder = Path(folder) if folder else STEPS
    if not folder.is_dir():
        raise ConfigError(str(folder), "", "no such folder of step measurements")
    out = []
    for path in sorted(folder.glob("*.csv")):
        ds = StepDataset(path.stem, path)
        ds.rows = [_row(raw, where) for where, raw in read_rows(path, COLUMNS, "step dataset")]
        if not ds.rows:
            raise ConfigError(str(path), "", "holds no rows")
        out.append(ds)
    return out


def _row(raw: dict, where: str) -> StepRow:
    from ..evaluate import as_model, as_system

    def num(key, integer=False, hi=math.inf):
        try:
            v = float(raw[key])
        except (TypeError, ValueError):
            raise ConfigError(where, key, f"must be a number, got {raw[key]!r}") from None
        if not (v > 0 and math.isfinite(v)) or (integer and v != int(v)) or v > hi:
            at_most = f" of at most {hi:g}" if math.isfinite(hi) else ""
            raise ConfigError(where, key, f"must be a positive finite {'integer' if integer else 'number'}{at_most}, "
                              f"got {raw[key]!r}")
        return v
    dtype = raw["dense_dtype"].strip()
    if dtype not in DTYPES:
        raise ConfigError(where, "dense_dtype", f"is {dtype!r}; allowed: {', '.join(DTYPES)}")
    precisions = tuple(p.strip() for p in raw["comm_precisions"].split(",") if p.strip())
    bad = [p for p in precisions if p not in DTYPES]
    if not precisions or bad:
        raise ConfigError(where, "comm_precisions", f"must list precisions among {', '.join(DTYPES)}; got {raw['comm_precisions']!r}")
    innet = raw["in_network_reduction"].strip().lower()
    if innet not in ("yes", "no"):
        raise ConfigError(where, "in_network_reduction", f"must be yes or no, got {raw['in_network_reduction']!r}")
    if not (raw.get("source") or "").strip():
        raise ConfigError(where, "source", "is empty: every measurement names where it was published")
    settings, planner, seen = {}, None, set()
    for item in (x.strip() for x in (raw.get("plan_settings") or "").split(";")):
        if not item:
            continue
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key in seen:                # which of two values the run used is not for the reader to guess
            raise ConfigError(where, "plan_settings", f"sets {key!r} twice; each setting appears once")
        seen.add(key)
        if key == PLANNER:
            planner = parse_recipe(value, where, "plan_settings")
            continue
        if key not in SETTINGS:
            raise ConfigError(where, "plan_settings", f"{key!r} is not a plan setting a run can fix; allowed: "
                              f"{', '.join((*SETTINGS, PLANNER))}")
        settings[key] = _setting(key, value, where)
    plan_source = (raw.get("plan_source") or "").strip()
    if planner is not None and not plan_source:
        raise ConfigError(where, "plan_source", "is empty: a row that names its planner cites the file that sets it")
    try:
        system = as_system(raw["system"])
        as_model(raw["model"])
    except ConfigError as err:
        raise ConfigError(where, err.field or "system", err.message) from None
    if settings.get("dense") == "hybrid" and system.uneven_domains:
        raise ConfigError(where, "plan_settings", f"dense = hybrid needs equal scale-up domains; {raw['system']}'s "
                          "are not: use replicated or fully_sharded")
    top = system.levels[-1]
    if innet == "yes" and not (len(system.levels) > 1 and top.switch_reduction):
        raise ConfigError(where, "in_network_reduction", f"is yes but {raw['system']}'s {top.name} level does not reduce "
                          "in its switches (switch_reduction = true)")
    return StepRow(raw["system"], raw["model"], int(num("global_batch", True, MODEL["global_batch"].hi)), DTYPES[dtype],
                   tuple(dict.fromkeys(DTYPES[p] for p in precisions)), innet == "yes", settings, num("ms_per_step"),
                   raw.get("run", ""), raw["source"], where, planner, plan_source)


def _setting(key: str, value: str, where: str):
    """One `key=value` of a run's plan_settings, as a plan holds it (plan.validate_plan's rules), or
    one ConfigError naming the row, the field and what is allowed."""
    kind = SETTINGS[key]
    if kind is bool:
        word = value.lower()
        if word not in ("yes", "no", "true", "false"):
            raise ConfigError(where, "plan_settings", f"{key} = {value!r}: must be yes or no (true or false)")
        return word in ("yes", "true")
    if kind is int:
        if not (value.isdigit() and 1 <= int(value) <= 1024):
            raise ConfigError(where, "plan_settings", f"{key} = {value!r}: must be an integer from 1 to 1024")
        return int(value)
    if value not in DENSE_MODES:
        raise ConfigError(where, "plan_settings", f"{key} = {value!r}: allowed: {', '.join(DENSE_MODES)}")
    return value


def problem(row: StepRow):
    """(system, model) of a row: the presets, the model at the run's batch and dense dtype."""
    from ..evaluate import as_model, as_system
    system, model = as_system(row.system), as_model(row.model)
    model = dataclasses.replace(model, global_batch=jnp.float32(row.global_batch), dense_dtype=row.dense_dtype)
    return system, model


# ----------------------------------------------------------------------------- shared parameters

def scaled(system, theta):
    """The system with the shared parameters (log scales, PARAMETERS order) applied."""
    gemm, gather, lat = (jnp.exp(theta[i]) for i in range(len(PARAMETERS)))
    chip = dataclasses.replace(system.chip, matmul_eff_max=jnp.minimum(system.chip.matmul_eff_max * gemm, 1.0),
                               gather_eff_max=jnp.minimum(system.chip.gather_eff_max * gather, 1.0),
                               launch_s=system.chip.launch_s * lat, scale_up_latency_s=system.chip.scale_up_latency_s * lat,
                               core_call_s=system.chip.core_call_s * lat)
    nic = dataclasses.replace(system.nic, latency_s=system.nic.latency_s * lat, per_message_s=system.nic.per_message_s * lat,
                              pcie_latency_s=system.nic.pcie_latency_s * lat)
    levels = tuple(dataclasses.replace(lv, latency_s=lv.latency_s * lat) for lv in system.levels)
    return system.replace(chip=chip, nic=nic, levels=levels)


# ----------------------------------------------------------------------------------- the model

def best_plan(system, model, row: StepRow) -> Plan:
    """The model's best plan for the run (best_search's)."""
    return best_search(system, model, row).plan


def best_search(system, model, row: StepRow):
    """The search for the model's best plan for the run: run to its end (reproducible), seed 0,
    with the run's fixed settings held from its first round and the run's own plan among its starts
    (so it is never slower than the run's plan, in the model)."""
    from ..search.api import search
    precisions = tuple(p for p in PRECISIONS if p in row.precisions)
    return search(system, model, budget_s=None, seed=0, precisions=precisions, hold=row.settings,
                  start=run_plan(system, model, row))


def run_plan(system, model, row: StepRow) -> Plan | None:
    """The plan the run used (module docstring), or None where the row names no planner."""
    if row.planner is None:
        return None
    r = row.planner
    tables = hugectr_plan(system, model, r.plan, r.mem_comm_bw_ratio, r.dp_threshold_gb)
    return with_run_settings(system, model, tables, row.settings, tuple(p for p in PRECISIONS if p in row.precisions))


def _step_ms(system, model, plan) -> float:
    from ..evaluate import evaluate
    return float(evaluate(system, model, plan).step_s) * 1e3


def _log_step(theta, system, model, pa):
    from ..evaluate import evaluate_arrays
    return jnp.log(evaluate_arrays(scaled(system, theta), model, pa, 0.0).step_s)


_log_step_grad = jax.jit(jax.value_and_grad(_log_step))


def fit(rows: list[StepRow], plans: list[Plan], weights, iterations: int = FIT_STEPS) -> np.ndarray:
    """Shared log scales fitted on the rows of weight 1, their plans held: Adam on the mean absolute
    log error (smoothed within SMOOTH of 0: the geometric-mean error the report gives), plus RIDGE x
    |theta|^2; each row's step and gradient from one compiled program per problem shape (reused by
    every fold and step)."""
    probs = [problem(r) for r in rows]
    pas = [to_arrays(p, s, m) for p, (s, m) in zip(plans, probs)]
    y = np.log(np.asarray([r.ms_per_step * 1e-3 for r in rows]))
    w = np.asarray(weights, np.float64)
    opt = optax.adam(0.03)
    theta = jnp.zeros(len(PARAMETERS), jnp.float32)
    state = opt.init(theta)
    for _ in range(iterations):
        g = 2.0 * RIDGE * np.asarray(theta, np.float64)
        for (system, model), pa, yi, wi in zip(probs, pas, y, w):
            if wi == 0:
                continue
            value, grad = _log_step_grad(theta, system, model, pa)
            e = float(value) - yi
            g = g + wi * e / np.hypot(e, SMOOTH) * np.asarray(grad, np.float64) / w.sum()
        updates, state = opt.update(jnp.asarray(g, jnp.float32), state, theta)
        theta = optax.apply_updates(theta, updates)
    return np.asarray(theta)


def validate_steps(ds: StepDataset, calibrated: bool = True, log=lambda m: None) -> dict:
    """Blind and leave-one-system-out errors of one step dataset (module docstring)."""
    from ..search.greedy import greedy_plan
    rows = ds.rows
    plans, blind, greedy, runs, run_ms, starts = [], [], [], [], [], []
    for r in rows:
        system, model = problem(r)
        run = run_plan(system, model, r)
        runs.append(run)
        run_ms.append(_step_ms(system, model, run) if run is not None else None)
        log(f"searching {r.system} at batch {r.global_batch}")
        found = best_search(system, model, r)
        plan = found.plan
        plans.append(plan)
        starts.append(found.notes.get("starts", {}))
        blind.append(_step_ms(system, model, plan))
        greedy.append(_step_ms(system, model, greedy_plan(system, model)))
    meas = np.asarray([r.ms_per_step for r in rows])
    out_rows = [{"system": r.system, "generation": generation(r), "model": r.model, "global_batch": r.global_batch,
                 "dense_dtype": r.dense_dtype,
                 "precisions": list(r.precisions), "in_network_reduction": r.in_network, "run": r.run,
                 "measured_ms": float(m), "best_plan_ms": b, "best_plan_err": b / m - 1.0, "blind_ms": b,
                 "greedy_ms": g, "blind_err": b / m - 1.0, "greedy_err": g / m - 1.0, "plan": p.to_dict(),
                 "source": r.source}
                for r, m, b, g, p in zip(rows, meas, blind, greedy, plans)]
    for out, info in zip(out_rows, starts):     # what the search started from, and what beat what
        if info.get("best") is not None:
            out.update({"best_start": "the run's plan" if info["best"] == "your start" else info["best"],
                        "best_start_ms": 1e3 * info["best_s"], "search_kept": info["kept"],
                        "search_saved_ms": {k: 1e3 * v for k, v in info.get("gain", {}).get("saved_s", {}).items()}})
    for out, r, run, ms in zip(out_rows, rows, runs, run_ms):
        if run is not None:
            out.update({"planner": str(r.planner), "plan_source": r.plan_source, "run_plan_ms": ms,
                        "run_plan_err": ms / out["measured_ms"] - 1.0, "run_plan": run.to_dict(),
                        "claimed_gain": ms / out["best_plan_ms"] - 1.0})
    rep = {"dataset": ds.name, "file": shown(ds.path), "rows": out_rows,
           "blind_geomean_err": geomean(blind, meas), "blind_max_err": float(np.max(np.abs(np.asarray(blind) / meas - 1))),
           "blind_bias": bias(blind, meas)}
    rep["best_plan_geomean_err"], rep["best_plan_max_err"] = rep["blind_geomean_err"], rep["blind_max_err"]
    have = [i for i, ms in enumerate(run_ms) if ms is not None]
    if have:
        rm, mm = np.asarray([run_ms[i] for i in have]), meas[have]
        rep["run_plan_geomean_err"] = geomean(rm, mm)
        rep["run_plan_max_err"] = float(np.max(np.abs(rm / mm - 1)))
        rep["run_plan_bias"] = bias(rm, mm)
    if calibrated and have:
        _run_plan_folds(rows, runs, out_rows, rep, log)
        _run_plan_folds(rows, runs, out_rows, rep, log, by="generation")
    if calibrated:
        systems = sorted({r.system for r in rows})
        folds = {}
        for name in systems:
            w = [0.0 if r.system == name else 1.0 for r in rows]
            log(f"fitting without {name}")
            theta = fit(rows, plans, w)
            folds[name] = [float(x) for x in theta]
            for i, r in enumerate(rows):
                if r.system != name:
                    continue
                system, model = problem(r)
                system = scaled(system, jnp.asarray(theta))
                plan = min((best_plan(system, model, r), plans[i]), key=lambda q: _step_ms(system, model, q))
                out_rows[i]["calibrated_ms"] = _step_ms(system, model, plan)
                out_rows[i]["calibrated_err"] = out_rows[i]["calibrated_ms"] / out_rows[i]["measured_ms"] - 1.0
                out_rows[i]["calibrated_plan"] = plan.to_dict()
        cal = [r["calibrated_ms"] for r in out_rows]
        rep.update({"calibrated_geomean_err": geomean(cal, meas),
                    "calibrated_max_err": float(np.max(np.abs(np.asarray(cal) / meas - 1))),
                    "calibrated_bias": bias(cal, meas),
                    "folds": {k: dict(zip(PARAMETERS, v)) for k, v in folds.items()}})
    return rep


def generation(row: StepRow) -> str:
    """The row's chip architecture (hardware.architecture of its system)."""
    from ..evaluate import as_system
    return architecture(as_system(row.system))


def held_out_folds(groups: list[str]) -> dict[str, tuple[list[int], list[int]]]:
    """Per group (in first-seen order): (the rows a fit uses: every other group's, the rows it
    predicts: the group's own). A group with no other group's rows to fit on has no fold."""
    out = {}
    for g in dict.fromkeys(groups):
        held = [i for i, x in enumerate(groups) if x == g]
        train = [i for i, x in enumerate(groups) if x != g]
        if train:
            out[g] = (train, held)
    return out


def _run_plan_folds(rows, runs, out_rows, rep, log, by: str = "system") -> None:
    """Held out at the runs' own plans: the shared parameters fitted on every other system's rows
    (by="system": leave one system out, keys run_plan_loso_*) or every other chip architecture's
    (by="generation": leave one generation out, run_plan_logo_*), their run plans held; the held
    rows' run plans evaluated at them. No search: the plans are the runs'."""
    idx = [i for i, p in enumerate(runs) if p is not None]
    sub = [rows[i] for i in idx]
    key = "loso" if by == "system" else "logo"
    groups = [r.system if by == "system" else out_rows[i]["generation"] for r, i in zip(sub, idx)]
    folds = {}
    for name, (train, held) in held_out_folds(groups).items():
        log(f"fitting without {name}, at the runs' plans")
        theta = fit(sub, [runs[i] for i in idx], [1.0 if k in train else 0.0 for k in range(len(sub))])
        folds[name] = dict(zip(PARAMETERS, (float(x) for x in theta)))
        for k in held:
            i = idx[k]
            system, model = problem(rows[i])
            ms = _step_ms(scaled(system, jnp.asarray(theta)), model, runs[i])
            out_rows[i][f"run_plan_{key}_ms"] = ms
            out_rows[i][f"run_plan_{key}_err"] = ms / out_rows[i]["measured_ms"] - 1.0
    done = [i for i in idx if f"run_plan_{key}_ms" in out_rows[i]]
    if not done:
        return
    got = np.asarray([out_rows[i][f"run_plan_{key}_ms"] for i in done])
    mm = np.asarray([out_rows[i]["measured_ms"] for i in done])
    rep.update({f"run_plan_{key}_geomean_err": geomean(got, mm), f"run_plan_{key}_max_err": float(np.max(np.abs(got / mm - 1))),
                f"run_plan_{key}_bias": bias(got, mm), f"run_plan_{key}_rows": len(done),
                ("run_plan_folds" if key == "loso" else "run_plan_generation_folds"): folds})


def bias(pred, meas) -> float:
    """The mean signed error, exp(mean ln(pred / meas)) - 1: < 0 where the model runs fast."""
    r = np.log(np.asarray(pred, np.float64) / np.asarray(meas, np.float64))
    return float(np.expm1(r.mean())) if r.size else float("nan")


def geomean(pred, meas) -> float:
    r = np.abs(np.log(np.asarray(pred, np.float64) / np.asarray(meas, np.float64)))
    return float(np.exp(r.mean()) - 1.0) if r.size else float("nan")


def row_plan(row: dict, system, model) -> Plan:
    """The plan a results row holds, checked against its problem."""
    return plan_from_dict(row["plan"], system, model, src="results")


def format_steps(rep: dict, rows: bool = True) -> str:
    cal = "calibrated_geomean_err" in rep
    # the largest row's error in the mean's own measure (collectives.largest_error), from the rows
    largest = lambda key: largest_error(r[key.replace("_geomean", "")] for r in rep["rows"] if key.replace("_geomean", "") in r)
    pct = lambda key: f"{100 * rep[key]:.1f} % (max {100 * largest(key):.0f} %)"
    head = [f"{rep['dataset']}  ({rep['file']})"]
    if "run_plan_geomean_err" in rep:
        head.append(f"at the runs' own plans (the physics): blind {pct('run_plan_geomean_err')}"
                    + (f", leave-one-system-out {pct('run_plan_loso_geomean_err')}" if "run_plan_loso_geomean_err" in rep else ""))
    head.append(f"at perfmodel's best plan: blind {pct('blind_geomean_err')}"
                + (f", leave-one-system-out {pct('calibrated_geomean_err')}" if cal else ""))
    lines = [head[0] + ": " + head[1]] + [" " * 2 + h for h in head[2:]]
    lines += _generation_lines(rep, largest) + ["  " + ERROR_MEASURE]
    if rows:
        run = any("run_plan_ms" in r for r in rep["rows"])
        loso = any("run_plan_loso_ms" in r for r in rep["rows"])
        logo = any("run_plan_logo_ms" in r for r in rep["rows"])
        lines.append(f"  {'system':<12} {'batch':>7} {'measured':>9}" + (f" {'run plan':>9} {'err':>7}" if run else "")
                     + (f" {'LOSO':>8} {'err':>7}" if loso else "") + (f" {'LOGO':>8} {'err':>7}" if logo else "")
                     + f" {'best plan':>9} {'err':>7} {'claims':>7}"
                     + (f" {'LOSO':>8} {'err':>7}" if cal else "") + f" {'greedy':>8}   planner, run")
        ms = lambda r, k: f" {r[k]:>7.3f}ms {100 * r[k.replace('_ms', '_err')]:>6.1f}%" if k in r else f" {'-':>9} {'-':>7}"
        for r in rep["rows"]:
            gain = f" {-100 * r['claimed_gain'] / (1 + r['claimed_gain']):>6.1f}%" if "claimed_gain" in r else f" {'-':>7}"
            lines.append(f"  {r['system']:<12} {r['global_batch']:>7} {r['measured_ms']:>7.3f}ms"
                         + (ms(r, "run_plan_ms") if run else "") + (ms(r, "run_plan_loso_ms") if loso else "")
                         + (ms(r, "run_plan_logo_ms") if logo else "")
                         + ms(r, "blind_ms") + gain + (ms(r, "calibrated_ms") if cal else "")
                         + f" {r['greedy_ms']:>6.3f}ms   {r.get('planner', '-')}, {r['run']}")
        lines.append("  claims: how much faster perfmodel's best plan is than the run's own, by the model"
                     + ("; LOGO: the shared parameters fitted on the other chip generations' rows" if logo else ""))
        for r in rep["rows"]:
            if "best_start" in r:
                moved = sorted(r["search_saved_ms"].items(), key=lambda kv: -abs(kv[1]))[:3]
                lines.append(f"  {r['system']:<12} best start {r['best_start']} {r['best_start_ms']:.3f} ms; "
                             + (f"the search {100 * (1 - r['best_plan_ms'] / r['best_start_ms']):.1f} % faster ("
                                + ", ".join(f"{k} {'-' if v >= 0 else '+'}{abs(v):.3f} ms" for k, v in moved) + ")"
                                if r["search_kept"] == "search" else "the search found nothing faster"))
    return "\n".join(lines)


def _generation_lines(rep: dict, largest) -> list[str]:
    """Leave one generation out and the bias (mean signed error) of each set of predictions;
    largest(key): the largest row's error of the mean at `key`, in its measure (format_steps)."""
    out = []
    if "run_plan_logo_geomean_err" in rep:
        out.append(f"  at the runs' own plans, leave-one-generation-out (the shared parameters fitted on the other "
                   f"chip generation's rows, {rep['run_plan_logo_rows']} rows): {100 * rep['run_plan_logo_geomean_err']:.1f} % "
                   f"(max {100 * largest('run_plan_logo_geomean_err'):.0f} %)")
    parts = [(label, rep[k]) for label, k in (("run plan blind", "run_plan_bias"), ("LOSO", "run_plan_loso_bias"),
                                              ("LOGO", "run_plan_logo_bias"), ("best plan blind", "blind_bias"),
                                              ("best plan LOSO", "calibrated_bias")) if k in rep]
    if parts:
        out.append("  bias (mean signed error, < 0: too fast): " + ", ".join(f"{label} {100 * v:+.1f} %" for label, v in parts))
    return out


def load_step_file(path: str | Path) -> StepDataset:
    """One CSV of step measurements (a user's own, for `perfmodel calibrate --steps`), every row
    checked as load_step_datasets checks the bundled ones: one clear error per problem."""
    path = Path(path)
    ds = StepDataset(path.stem, path)
    ds.rows = [_row(raw, where) for where, raw in read_rows(path, COLUMNS, "step dataset")]
    if not ds.rows:
        raise ConfigError(str(path), "", "holds no rows")
    return ds
