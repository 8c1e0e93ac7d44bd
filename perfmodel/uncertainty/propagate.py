"""Propagation: N draws of the uncertain inputs (a Latin hypercube, seeded), evaluated in one
vectorized call at the plan each point uses, and the model's own error from validation on top.

    res = pm.uncertainty("mtia300-64", "dlrm-dcnv2-mlperf", plan, draws=1000)
    res.p10, res.p50, res.p90          # step in seconds
    res.samples                        # the N steps, inputs and model error drawn

The model's own error. Validation (validate/steps.py) scores the model at each measured run's own
plan (modelerror.py): at those rows the inputs are drawn as here, and the log errors of the measured
steps against the drawn steps' centre are fitted by chip family (hardware.architecture: ampere,
hopper, ...): each fitted family's mean (its bias), the spread within a family beyond the inputs'
own (sigma^2 = the errors' variance about their family's mean - the mean variance the inputs give at
the same rows), and the spread of carrying the fit to another family (transfer_sigma, from leave-one-
generation-out: each family's rows predicted by the parameters fitted on the others). A machine of a
fitted family draws eps ~ Normal(its family's mean, sigma); a machine of any other family (MTIA 300,
Gaudi 3, Blackwell) draws eps ~ Normal(0, transfer_sigma): the sign of a new generation's error is not
known, so a bias learned on the fitted families is no shift there, only spread (model_error.json,
written by `perfmodel uncertainty --fit-model-error --out FILE`; a test recomputes it). A draw's step
is the modelled step x exp(eps), one eps per machine type: the runs of one machine at several sizes
and batches err alike, so two machines' errors are drawn apart, and one machine's sizes, plans and
variants (the systems built from the same files) share theirs; two machine types of one unfitted
family share the part of their error between families. The error applies to the figures that scale
with the step (step, samples/s, cost and energy per sample); memory and its feasibility carry the
inputs' spread only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..config import DATA_DIR, ConfigError
from ..evaluate import evaluate, resolve
from ..hardware import CALIBRATED, System, architecture
from ..plan import Plan, PlanArrays, to_arrays, validate_plan
from ..workload import RankingModel
from .inputs import Input, as_applied, file_values, inputs_of, leaf_spec

from . import DEFAULT_DRAWS, MAX_DRAWS

QUANTILES = (0.1, 0.5, 0.9)
MODEL_ERROR_FILE = DATA_DIR / "measurements" / "steps" / "model_error.json"
# the figures a draw gives (report.summarize's keys, SI)
FIGURES = ("step_s", "samples_per_s", "usd_per_million_samples", "joules_per_sample", "exposed_comm_s",
           "memory_max_bytes", "feasible")
# figures the model's error scales: step-like (x exp(eps)) and rate-like (/ exp(eps))
STEP_LIKE = ("step_s", "usd_per_million_samples", "joules_per_sample", "exposed_comm_s")
RATE_LIKE = ("samples_per_s",)


def check_draws(draws, field_name: str = "uncertainty") -> int:
    """`draws` as an int in [2, MAX_DRAWS]; ConfigError naming `field_name` otherwise."""
    ok = isinstance(draws, (int, np.integer)) and not isinstance(draws, bool)
    if not ok or not 2 <= int(draws) <= MAX_DRAWS:
        raise ConfigError("", field_name, f"must be a number of draws from 2 to {MAX_DRAWS:,}, got {draws!r}")
    return int(draws)


def check_seed(seed, field_name: str = "seed") -> int:
    ok = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and 0 <= int(seed) < 2**63
    if not ok:
        raise ConfigError("", field_name, f"must be an integer >= 0, got {seed!r}")
    return int(seed)


# ------------------------------------------------------------------------------- the model's error

@dataclass(frozen=True)
class ModelError:
    """The model's own error at the runs' plans, on the log scale: ln(measured / modelled), fitted by
    chip family (module docstring). With no families (a ModelError built by hand) every machine
    draws Normal(mean, sigma)."""

    mean: float              # the bias over every fitted row: > 0 where the model runs fast
    sigma: float             # the spread within a family beyond the inputs' (what a draw adds)
    residual_sigma: float    # the spread of the validation's log errors about their family's mean
    input_sigma: float       # the inputs' spread at the same rows (rms over rows)
    rows: int
    families: tuple[tuple[str, float, int], ...] = ()    # (family, its mean error, its rows)
    transfer_sigma: float = 0.0   # a family outside `families`: the spread beyond the inputs', about 0

    def spread(self, family: str | None = None) -> tuple[float, float, float]:
        """(the mean, the spread within the family, the spread between families) a machine of
        `family` draws its error from; the last is 0 for a fitted family (fitted)."""
        if not self.fitted(family):
            return 0.0, self.sigma, math.sqrt(max(self.transfer_sigma ** 2 - self.sigma ** 2, 0.0))
        if self.families and family.endswith(CALIBRATED):     # its bias was fitted away with its numbers
            return 0.0, self.sigma, 0.0
        return next((mean for name, mean, _ in self.families if name == family), self.mean), self.sigma, 0.0

    def fitted(self, family: str | None) -> bool:
        """Whether `family` draws no spread between families: every family when the error is not
        fitted by family, a fitted family, or a calibrated chip."""
        return not self.families or (family is not None and family.endswith(CALIBRATED)) or \
            any(name == family for name, _, _ in self.families)

    def eps(self, u: np.ndarray, family: str | None = None, u_between: np.ndarray | None = None) -> np.ndarray:
        """Log errors of a machine of `family` at uniform quantiles `u` (0 < u < 1); `u_between`: the
        quantiles of the part between families (shared by the machines of one family), else one
        normal of both parts' spread."""
        from scipy.stats import norm
        mean, within, between = self.spread(family)
        if between == 0.0 or u_between is None:
            return mean + math.hypot(within, between) * norm.ppf(u)
        return mean + within * norm.ppf(u) + between * norm.ppf(u_between)

    def as_dict(self) -> dict:
        return {"mean": self.mean, "sigma": self.sigma, "residual_sigma": self.residual_sigma,
                "input_sigma": self.input_sigma, "rows": self.rows, "transfer_sigma": self.transfer_sigma,
                "families": [{"family": f, "mean": m, "rows": n} for f, m, n in self.families]}


NO_MODEL_ERROR = ModelError(0.0, 0.0, 0.0, 0.0, 0)


def model_error_of(model_error) -> ModelError:
    """The ModelError a `model_error=` argument names: True or None the stored one (load_model_error),
    False none, a ModelError itself; ConfigError for anything else."""
    if model_error is True or model_error is None:
        return load_model_error()
    if model_error is False:
        return NO_MODEL_ERROR
    if isinstance(model_error, ModelError):
        return model_error
    raise ConfigError("", "model_error", f"must be True, False or a ModelError, got {model_error!r}")


def _number(d: dict, key: str, where: str, src: str, *, signed: bool = False, count: bool = False) -> float:
    """d[key] checked: a finite number, >= 0 unless `signed`, a whole number if `count`; one
    ConfigError naming the file and the field otherwise."""
    what = "a whole number >= 0" if count else "a finite number" + ("" if signed else " >= 0")
    if key not in d:
        raise ConfigError(src, f"{where}{key}", f"is missing; it must be {what}")
    x = d[key]
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and (signed or x >= 0) \
        and (not count or float(x).is_integer())
    if not ok:
        raise ConfigError(src, f"{where}{key}", f"is {x!r}; it must be {what}")
    return float(x)


def load_model_error(path: str | Path | None = None) -> ModelError:
    """The stored model error (MODEL_ERROR_FILE), checked: every number finite, spreads and counts
    >= 0 (one ConfigError naming the file and the field)."""
    p = Path(path) if path is not None else MODEL_ERROR_FILE
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(str(p), "", f"is not a model-error file ({err}); `perfmodel uncertainty "
                          "--fit-model-error --out FILE` writes one") from None
    if not isinstance(d, dict):
        raise ConfigError(str(p), "", "is not a model-error file (a JSON object of mean, sigma, ...)")
    mean = _number(d, "mean", "", str(p), signed=True)
    sig = [_number(d, k, "", str(p)) for k in ("sigma", "residual_sigma", "input_sigma")]
    rows = int(_number(d, "rows", "", str(p), count=True))
    transfer = _number(d, "transfer_sigma", "", str(p)) if "transfer_sigma" in d else 0.0
    fams = d.get("families", [])
    if not isinstance(fams, list):
        raise ConfigError(str(p), "families", "must be a list of {family, mean, rows}")
    families = []
    for k, f in enumerate(fams):
        where = f"families[{k}]."
        if not isinstance(f, dict) or not isinstance(f.get("family"), str) or not f.get("family"):
            raise ConfigError(str(p), f"families[{k}]", "must be {family: a name, mean, rows}")
        families.append((f["family"], _number(f, "mean", where, str(p), signed=True),
                         int(_number(f, "rows", where, str(p), count=True))))
    return ModelError(mean, *sig, rows, tuple(families), transfer)


# --------------------------------------------------------------------------------------- the design

def design(n: int, d: int, seed: int) -> np.ndarray:
    """n points of a scrambled Latin hypercube in [0, 1)^d (scipy.stats.qmc), from `seed`: each
    input's n draws cover its range in n equal strata, whatever the other inputs do."""
    from scipy.stats import qmc
    if d == 0:
        return np.zeros((n, 0))
    return qmc.LatinHypercube(d=d, rng=np.random.default_rng(seed)).random(n)


def values_of(inputs: list[Input], u: np.ndarray) -> np.ndarray:
    """Uniform quantiles [N, d] -> the inputs' values in SI (a factor for a list field)."""
    lo = np.asarray([i.si_bounds[0] for i in inputs], np.float64)
    hi = np.asarray([i.si_bounds[1] for i in inputs], np.float64)
    return lo + u * (hi - lo)


# ------------------------------------------------------------------------------------- evaluation

def set_leaves(flat: list, spec, v):
    leaves = list(flat)
    for j, (k, factor) in enumerate(spec):
        x = leaves[k]
        leaves[k] = x * v[j] if factor else jnp.broadcast_to(v[j], jnp.shape(x)).astype(jnp.result_type(x))
    return leaves


def _program(system, model, plan, values, spec):
    from ..report import summarize
    flat, tree = jax.tree_util.tree_flatten((system, model))

    def one(v):
        s, m = jax.tree_util.tree_unflatten(tree, set_leaves(flat, spec, v))
        figs = summarize(evaluate(s, m, plan), s)
        return {k: figs[k] for k in FIGURES}           # only what an answer reads: XLA drops the rest
    return jax.vmap(one)(values)


_run = jit(_program, static_argnames=("spec",))
CHUNK = 1024        # draws per vectorized call: one compile serves every N (padded to a chunk)


def evaluate_draws(system: System, model: RankingModel, plan: PlanArrays, inputs: list[Input],
                   values: np.ndarray, progress: str | None = None) -> dict[str, np.ndarray]:
    """The FIGURES (report.summarize's, SI) at each row of `values` [N, d]."""
    spec = leaf_spec(inputs, system, model)
    applied = as_applied(inputs, values)
    N = values.shape[0]
    size = min(CHUNK, max(16, 1 << max(N - 1, 0).bit_length()))    # few distinct shapes: few compiles
    outs = []
    from ..report import announced_bar
    chunks = -(-N // size)
    line = (f"{progress}: {N:,} draws in {chunks} vectorized call{'s' * (chunks > 1)} of {size:,} (the first compiles)"
            if progress else None)
    with announced_bar(line, N, "draw", unit_scale=True) as bar:
        for lo in range(0, N, size):
            hi = min(lo + size, N)
            idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), hi - 1)])
            out = _run(system, model, plan, jnp.asarray(applied[idx], jnp.float32), spec)
            outs.append({k: np.asarray(x, np.float64)[: hi - lo] for k, x in out.items()})
            bar.update(hi - lo)
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def with_model_error(figures: dict[str, np.ndarray], eps: np.ndarray) -> dict[str, np.ndarray]:
    """The figures with the model's log error `eps` [N] applied (module docstring)."""
    out = dict(figures)
    for k in STEP_LIKE:
        if k in out:
            out[k] = out[k] * np.exp(eps)
    for k in RATE_LIKE:
        if k in out:
            out[k] = out[k] / np.exp(eps)
    return out


# ------------------------------------------------------------------------------------- the result

def quantiles(x: np.ndarray) -> dict[str, float]:
    """{"p10", "p50", "p90"} of the finite values of x (NaN where none is)."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return {f"p{round(q * 100)}": math.nan for q in QUANTILES}
    return {f"p{round(q * 100)}": float(v) for q, v in zip(QUANTILES, np.quantile(x, QUANTILES))}


@dataclass
class Uncertain:
    """One answer with its spread: the nominal figures (the files' values, no model error) and the
    N drawn ones (inputs drawn, the model's error applied), in SI."""

    nominal: dict[str, float]
    samples: dict[str, np.ndarray]          # figure -> [N]
    inputs: list[Input]
    model_error: ModelError
    u: np.ndarray                           # [N, d] the design's quantiles of the inputs
    eps: np.ndarray                         # [N] the model's drawn log error
    seed: int = 0
    plan: Plan | None = None
    family: str | None = None               # the chip family its model error is drawn for

    @property
    def draws(self) -> int:
        return len(self.eps)

    def quantiles(self, figure: str = "step_s") -> dict[str, float]:
        return quantiles(self.samples[figure])

    @property
    def p10(self) -> float:
        return self.quantiles()["p10"]

    @property
    def p50(self) -> float:
        return self.quantiles()["p50"]

    @property
    def p90(self) -> float:
        return self.quantiles()["p90"]

    def feasible_share(self) -> float:
        f = self.samples.get("feasible")
        return float(np.mean(f > 0.5)) if f is not None else math.nan


def plan_arrays_of(system, model, plan) -> tuple[PlanArrays, Plan | None]:
    if isinstance(plan, Plan):
        validate_plan(plan, system, model)
        return to_arrays(plan, system, model), plan
    return plan, None


def columns_for(inputs_per_system: list[list[Input]]) -> tuple[list[Input], list[list[int]]]:
    """The union of several systems' inputs, by name (shared files share draws), and each system's
    columns in it."""
    union: dict[str, int] = {}
    allin: list[Input] = []
    cols = []
    for ins in inputs_per_system:
        c = []
        for i in ins:
            if i.name not in union:
                union[i.name] = len(allin)
                allin.append(i)
            c.append(union[i.name])
        cols.append(c)
    return allin, cols


def error_draws(me: ModelError, family: list[str | None], u: np.ndarray) -> np.ndarray:
    """The model's log error [N, groups] of error groups of the given families, from uniform
    quantiles u [N, groups + the number of distinct unfitted families]: a column per group (its own
    part), then one per family the error was not fitted on, in first-seen order (the part between
    families, shared by that family's groups)."""
    groups = len(family)
    unfitted = list(dict.fromkeys(f for f in family if not me.fitted(f)))
    out = np.zeros((u.shape[0], groups))
    for g in range(groups):
        shared = u[:, groups + unfitted.index(family[g])] if family[g] in unfitted else None
        out[:, g] = me.eps(u[:, g], family[g], shared)
    return out


def propagate(systems: list[System], models: list[RankingModel], plans: list, draws: int = DEFAULT_DRAWS,
              seed: int = 0, model_error: bool | ModelError | None = None, error_groups: list[int] | None = None,
              progress: str | None = None) -> list[Uncertain]:
    """Each (system, model, plan) evaluated at the same N draws: the inputs of every file drawn once
    (shared by name), the model's error drawn once per error group (default: one per machine type,
    the systems built from the same system and chip files, whatever their size), so the answers can
    be compared draw by draw. model_error: model_error_of's (None: the stored one)."""
    draws, seed = check_draws(draws), check_seed(seed)
    me = model_error_of(model_error)
    per = [inputs_of(s, m) for s, m in zip(systems, models)]
    allin, cols = columns_for(per)
    if error_groups is None:             # one machine type, one error: systems built from the same files
        names: dict = {}
        error_groups = [names.setdefault(s.files or s.name, len(names)) for s in systems]
    groups = max(error_groups) + 1 if error_groups else 0
    family = [None] * groups
    for s, g in zip(systems, error_groups):
        family[g] = architecture(s)
    unfitted = list(dict.fromkeys(f for f in family if not me.fitted(f)))
    u = design(draws, len(allin) + groups + len(unfitted), seed)
    u_in = u[:, :len(allin)]
    eps_all = error_draws(me, family, u[:, len(allin):])
    vals = values_of(allin, u_in)
    out = []
    for k, (s, m, p) in enumerate(zip(systems, models, plans)):
        pa, plan = plan_arrays_of(s, m, p)
        ins = [allin[c] for c in cols[k]]
        # the files' own values ride along as one more row: the nominal figures from the same program
        figs = evaluate_draws(s, m, pa, ins, np.vstack([vals[:, cols[k]], file_values(ins)]), progress=progress)
        nom = {key: float(v[-1]) for key, v in figs.items()}
        figs = {key: v[:-1] for key, v in figs.items()}
        eps = eps_all[:, error_groups[k]]
        out.append(Uncertain(nom, with_model_error(figs, eps), ins, me, u_in[:, cols[k]], eps, seed, plan,
                             family[error_groups[k]]))
    return out


def uncertainty(system, model, plan, draws: int = DEFAULT_DRAWS, seed: int = 0,
                model_error: bool | ModelError = True, progress: str | None = None) -> Uncertain:
    """The step (and every summary figure) of `plan` on `system` for `model`, drawn `draws` times
    over the files' uncertain inputs, with the model's own error (model_error=False: the inputs'
    spread alone). `system`, `model`: objects, preset names or paths; `plan`: a Plan, PlanArrays or
    a plan file."""
    system, model, plan = resolve(system, model, plan, plan_required=True)
    return propagate([system], [model], [plan], draws, seed, model_error, progress=progress)[0]
