"""Plans that stay fast when the model's inputs are off: a search objective that is a quantile of
the step over a fixed set of draws of the uncertain inputs, and the check of the plan it finds.

    r = pm.search("h100-64", "dlrm-dcnv2-mlperf", objective="p90", draws=64, uncertainty_seed=0)
    r.notes["objective"]["robust"]["p90"], r.notes["objective"]["nominal_best"]["p90"]

The objective. Every candidate plan is priced at the same K draws of the system's and the model's
uncertain inputs (inputs.py: a seeded Latin hypercube, common random numbers), and its score is the
quantile q of its K steps. The draws are a pytree leaf of the search's scorer, so a batch of plans
is priced at every draw in one compiled call (vmap over the draws inside the vmap over the plans);
what a plan's arrays alone decide is computed once per plan, since vmap batches only what depends
on a draw. Feasibility stays the nominal one (the plan fits memory at the files' values), so the
objective ranks plans by their step and not by a memory share that a draw moved.

The model's own error (propagate.py) is left out of the objective: it is a factor exp(eps) on the
step of every plan of a system alike, one eps per draw, so it moves every candidate's steps by the
same factor draw by draw and cannot reorder plans; the inputs' draws do (a plan heavy on the network
suffers more in a draw where the NIC is slower).

The quantile of K samples is piecewise linear in the order statistics (jnp.quantile's "linear"
method, numpy's default, which the check uses too); its derivative exists almost everywhere (the
sort is a permutation of the draws' steps), so the gradient method's first-order move ranking takes
the gradient of the objective itself, through the smooth evaluation of each draw, rather than of a
surrogate that would rank moves for another objective than the one the hard scores decide by.

The check. The plan found is compared with the nominal-best plan (the ordinary search with the same
seed and settings) at CHECK_DRAWS other draws (the next seed), out of sample: their p50 and p90
over the inputs' spread alone (the model's error, a common factor, left out as above).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from ..hardware import System
from ..pytree import pytree, static
from ..workload import RankingModel
from .inputs import as_applied, inputs_of, leaf_spec
from .propagate import NO_MODEL_ERROR, set_leaves, check_seed, design, propagate, quantiles, values_of

NOMINAL = "nominal"
DEFAULT_OBJECTIVE_DRAWS = 64     # draws each candidate is priced at: p90's sample quantile to a few % of the spread
MAX_OBJECTIVE_DRAWS = 4096       # a candidate costs about K / 2 nominal evaluations: more would stall a search
CHECK_DRAWS = 1000               # the out-of-sample comparison of the robust and the nominal-best plans
# plans x draws per scoring call: a batch of this many (plan, draw) evaluations runs faster per
# evaluation on the CPU than a larger one (the working set stays in cache)
EVALUATIONS_PER_CALL = 1024
_OBJECTIVE = re.compile(r"p([0-9]{1,2})")
ALLOWED = "nominal, p50, p90, ... (pNN, 1-99)"


def parse_objective(objective, field_name: str = "objective") -> float | None:
    """The quantile (0.01 ... 0.99) an objective string names, None for "nominal"; ConfigError
    naming `field_name` and what is allowed otherwise."""
    if isinstance(objective, str):
        if objective == NOMINAL:
            return None
        m = _OBJECTIVE.fullmatch(objective)
        if m and 1 <= int(m.group(1)) <= 99 and not (len(m.group(1)) == 2 and m.group(1)[0] == "0"):
            return int(m.group(1)) / 100
    raise ConfigError("", field_name, f"is {objective!r}; allowed: {ALLOWED}")


def objective_name(q: float | None) -> str:
    return NOMINAL if q is None else f"p{round(q * 100)}"


def check_objective_draws(draws, field_name: str = "draws") -> int:
    """`draws` as an int in [2, MAX_OBJECTIVE_DRAWS]; ConfigError naming `field_name` otherwise."""
    ok = isinstance(draws, (int, np.integer)) and not isinstance(draws, bool)
    if not ok or not 2 <= int(draws) <= MAX_OBJECTIVE_DRAWS:
        raise ConfigError("", field_name, f"must be a number of draws from 2 to {MAX_OBJECTIVE_DRAWS:,}, got {draws!r}")
    return int(draws)


@pytree
@dataclass(frozen=True)
class Draws:
    """The objective's draws, as the search's scorers take them: the values [K, d] as
    inputs.leaf_spec applies them to the flattened (system, model), and the quantile."""

    values: jax.Array                 # [K, d] float32 (inputs.as_applied)
    q: jax.Array                      # the quantile the objective takes (0.9: p90), a leaf: one program for every q
    spec: tuple = static()            # inputs.leaf_spec: (leaf index, multiply?) per column

    @property
    def count(self) -> int:
        return int(np.shape(self.values)[0])

    @property
    def name(self) -> str:
        return objective_name(float(self.q))

    def steps(self, system, model, pa, tau=0.0):
        """The step of one plan's arrays at every draw [K] (traced: inside the scorer's vmap over plans)."""
        from ..evaluate import step_model
        flat, tree = jax.tree_util.tree_flatten((system, model))

        def one(v):
            s, m = jax.tree_util.tree_unflatten(tree, set_leaves(flat, self.spec, v))
            return step_model(s, m, pa, tau)[0].step_s
        return jax.vmap(one)(self.values)

    def step(self, system, model, pa, tau=0.0):
        """The objective: the quantile q of the plan's steps over the draws (module docstring)."""
        return jnp.quantile(self.steps(system, model, pa, tau), self.q)


def make_draws(system: System, model: RankingModel, q: float, draws: int = DEFAULT_OBJECTIVE_DRAWS,
               seed: int = 0) -> Draws:
    """The objective's K draws of the uncertain inputs of `system` and `model` (inputs.inputs_of),
    from `seed`. ConfigError where they have none: every draw would be the nominal plan's step."""
    draws, seed = check_objective_draws(draws), check_seed(seed, "uncertainty_seed")
    ins = inputs_of(system, model)
    if not ins:
        raise ConfigError("", "objective", f"is {objective_name(q)}, but {system.name} and {model.name} have no "
                          "uncertain inputs (a system built in code has none): use objective 'nominal'")
    u = design(draws, len(ins), seed)
    values = np.asarray(as_applied(ins, values_of(ins, u)), np.float32)
    return Draws(jnp.asarray(values), jnp.float32(q), leaf_spec(ins, system, model))


def plans_per_call(draws: Draws, nominal_batch: int) -> int:
    """Plans per scoring call when each is priced at every draw: EVALUATIONS_PER_CALL (plan, draw)
    evaluations, a power of two from 2 to the nominal batch."""
    n = EVALUATIONS_PER_CALL / max(draws.count, 1)
    return int(np.clip(2 ** int(np.floor(np.log2(max(n, 1)))), 2, max(nominal_batch, 2)))


def check_seed_of(seed: int) -> int:
    """The seed of the out-of-sample check: the next one, so the check's draws are not the objective's."""
    return int(seed) + 1


def compare(system: System, model: RankingModel, robust_plan, nominal_plan, q: float,
            draws: int = CHECK_DRAWS, seed: int = 1, progress: str | None = None) -> dict:
    """The robust and the nominal-best plans at the same `draws` draws (the inputs' spread alone):
    {"draws", "seed", "robust": {...}, "nominal_best": {...}, "p90_gap_s", "p90_gap_pct",
    "objective_gap_s", "objective_gap_pct"}, each plan's dict its nominal step and its p10, p50,
    p90 and objective quantile (s); a gap > 0: the robust plan's quantile is the lower."""
    same = robust_plan == nominal_plan
    plans = [robust_plan] if same else [robust_plan, nominal_plan]
    res = propagate([system] * len(plans), [model] * len(plans), plans, draws, seed, NO_MODEL_ERROR,
                    progress=progress)
    key = objective_name(q)

    def figures(r) -> dict:
        x = r.samples["step_s"]
        out = {"step_s": r.nominal["step_s"], **quantiles(x)}
        finite = x[np.isfinite(x)]
        out[key] = float(np.quantile(finite, q)) if finite.size else float("nan")
        return out

    rob = figures(res[0])
    nom = figures(res[-1])
    gap = lambda k: (nom[k] - rob[k], 100.0 * (nom[k] / rob[k] - 1.0) if rob[k] else float("nan"))
    p90_gap, p90_pct = gap("p90")
    obj_gap, obj_pct = gap(key)
    return {"draws": int(draws), "seed": int(seed), "same_plan": bool(same), "robust": rob, "nominal_best": nom,
            "p90_gap_s": p90_gap, "p90_gap_pct": p90_pct, "objective_gap_s": obj_gap, "objective_gap_pct": obj_pct}


def lines(info: dict) -> list[str]:
    """The few lines `perfmodel search --objective pNN` prints after the search: both plans'
    objective at its draws, their p50 and p90 at the check's draws, and the gap."""
    key, ck = info["objective"], info["check"]
    rob, nom = ck["robust"], ck["nominal_best"]
    cols = ["p50", "p90"] + ([key] if key not in ("p50", "p90") else [])
    ms = lambda v: f"{1e3 * v:>9.3f}"
    rounds = "no round limit" if info["iterations"] is None else f"{info['iterations']} rounds"
    kept = ("" if info["kept"] == "search" else
            f"; no candidate had a lower {key} than the nominal-best plan, which is kept")
    out = [f"objective {key}: the step's {key} over {info['draws']} draws of {info['inputs']} uncertain inputs (seed "
           f"{info['seed']}, the same draws for every candidate; the model's own error, a factor common to every "
           f"plan, left out), searched from the nominal-best plan in {rounds}",
           f"  at those draws: robust {ms(info['found_s']).strip()} ms, nominal-best "
           f"{ms(info['nominal_best_s']).strip()} ms{kept}",
           f"checked at {ck['draws']:,} other draws (seed {ck['seed']}), the inputs' spread alone, ms:",
           f"  {'plan':<30}{'nominal':>9}" + "".join(f" {c:>9}" for c in cols)]
    for label, row in ((f"robust ({key} search)", rob), ("nominal-best (nominal search)", nom)):
        out.append(f"  {label:<30}{ms(row['step_s'])}" + "".join(f" {ms(row[c])}" for c in cols))
    gap = f"  p90 gap (nominal-best - robust): {1e3 * ck['p90_gap_s']:+.3f} ms ({ck['p90_gap_pct']:+.2f} %)"
    if key != "p90":
        gap += f"; {key} gap {1e3 * ck['objective_gap_s']:+.3f} ms ({ck['objective_gap_pct']:+.2f} %)"
    if ck["same_plan"]:
        gap += " (the same plan)"
    return out + [gap]
