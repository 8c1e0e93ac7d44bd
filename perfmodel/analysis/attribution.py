"""Attribution of a step-time gap between two systems to named features, each point re-planned.

    a = pm.attribute("h100-64", "mtia300-64", "dlrm-dcnv2-mlperf")   # searched plan at every point
    a.shares        # {"integrated NIC": s, "message engines": s, "bandwidth split": s}, seconds saved
    print(a.format())

A factor is a set of knob values that gives `system` one feature of `reference`. With k factors the
2^k on/off combinations are each re-planned with the same planner (knobs.set_knobs moves the
system), so each combination runs the plan that hardware wants. The step time T(S) with the factors S switched
on is a cooperative game, and each factor's share is its Shapley value (Shapley 1953), its average
marginal effect over the k! orders of switching factors on:

    phi_f = sum over S not containing f of |S|! (k - |S| - 1)! / k! * (T(S) - T(S + {f}))

The shares add up exactly to T(none) - T(all) whatever the interactions (one factor's effect may
depend on another: a bigger NIC share is capped by PCIe until the NIC is integrated), which no
one-at-a-time or fixed-order attribution does. The rest of the gap, T(all) - T(reference), is what
the factors do not cover (compute, HBM, latencies, domain size, the plan the reference gets).

The default factors come from the two systems' own fields:
  integrated NIC    nic_attach_pcie set to the reference's (0: in the package, no PCIe cap or latency)
  message engines   offload_engines set to the reference's count (a chip without engines gets the
                    reference design's engines; see the knob)
  bandwidth split   the reference's share of per-chip bandwidth on scale-up, total kept: on a NIC
                    that also carries scale-up, nic_scale_up_fraction; with a dedicated scale-up link
                    (NVLink), scale-up and scale-out bandwidths set to total x f and total x (1 - f)
A factor whose values the system already has is left out.

attribution_draws(a, draws) gives every share at N draws of the files' uncertain inputs and the
model's own error (perfmodel.uncertainty), each combination at the plan it was given.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..config import ConfigError
from ..evaluate import as_model, as_system, evaluate
from ..hardware import System
from ..workload import RankingModel
from .. import knobs as K
from ..uncertainty import DEFAULT_DRAWS
from ..uncertainty.propagate import NO_MODEL_ERROR, ModelError, propagate
from ..shapley import shapley
from .planning import planner, plans


def _state(system: System, model: RankingModel) -> K.State:
    return K.State(system, model, None)


def default_factors(system: System, reference: System, model: RankingModel) -> dict[str, dict[str, float]]:
    """{factor: {knob: value}} giving `system` the reference's NIC attachment, engines and bandwidth split."""
    me, ref = _state(system, model), _state(reference, model)
    get = lambda name, st: float(f"{float(K.knob(name).get(st)):.6g}")     # float32 leaves, read back
    out: dict[str, dict[str, float]] = {}
    if get("nic_attach_pcie", me) != get("nic_attach_pcie", ref):
        out["integrated NIC" if get("nic_attach_pcie", ref) == 0 else "PCIe NIC"] = {
            "nic_attach_pcie": get("nic_attach_pcie", ref)}
    if get("offload_engines", me) != get("offload_engines", ref):
        out["message engines"] = {"offload_engines": int(get("offload_engines", ref))}
    up, down = (get(n, ref) for n in ("scale_up_bandwidth_GBps", "scale_out_bandwidth_GBps"))
    f = up / (up + down)
    if system.nic.serves_scale_up:
        if abs(get("nic_scale_up_fraction", me) - f) > 1e-9:
            out["bandwidth split"] = {"nic_scale_up_fraction": f}
    else:
        total = get("scale_up_bandwidth_GBps", me) + get("scale_out_bandwidth_GBps", me)
        if abs(get("scale_up_bandwidth_GBps", me) / total - f) > 1e-9:
            up_GBps = float(f"{total * f:.6g}")
            out["bandwidth split"] = {"scale_up_bandwidth_GBps": up_GBps, "scale_out_bandwidth_GBps": total - up_GBps}
    return out


def moved(system: System, model: RankingModel, knobs: Mapping[str, float]) -> tuple[System, RankingModel]:
    """(system, model) with the named knobs set (knobs.set_knobs; none: unchanged)."""
    if not knobs:
        return system, model
    from ..plan import stand_in, to_arrays
    st = K.set_knobs(system, model, to_arrays(stand_in(system, model), system, model), **knobs)
    return st.system, st.model


def combinations(factors: Mapping[str, Mapping[str, float]]) -> list[tuple[frozenset, dict]]:
    """(factors switched on, {knob: value}) of every on/off combination, fewest on first; a knob of a
    factor that is off is left at the system's own value (not in the dict)."""
    names = list(factors)
    out = []
    for r in range(len(names) + 1):
        for c in itertools.combinations(names, r):
            out.append((frozenset(c), {k: v for f in c for k, v in factors[f].items()}))
    return out


@dataclass(frozen=True)
class Attribution:
    """The result of `attribute`: step times of every combination, the shares and what is left."""
    system: str
    reference: str
    model: str
    plan: str                                   # the planner's label
    factors: dict                               # {factor: {knob: value}}
    base: dict                                  # {knob: the system's own value}
    steps_s: dict                               # {frozenset of factors switched on: step time}
    reference_step_s: float
    shares_s: dict = field(default_factory=dict)    # {factor: step time it saves (Shapley)}
    # what was evaluated, for a study that re-evaluates it (attribution_draws, below):
    # ((factors on, system, model, plan) of every combination, (reference, model, its plan))
    problems: tuple = field(default=(), compare=False, repr=False)
    uncertainty: "SharesDrawn | None" = field(default=None, compare=False, repr=False)   # attribute(uncertainty=N)

    @property
    def system_step_s(self) -> float:
        return self.steps_s[frozenset()]

    @property
    def gap_s(self) -> float:
        """The system's step time minus the reference's (each with its own plan)."""
        return self.system_step_s - self.reference_step_s

    @property
    def rest_s(self) -> float:
        """The part of the gap the factors do not cover: T(all on) - T(reference)."""
        return self.steps_s[frozenset(self.factors)] - self.reference_step_s

    def to_dict(self) -> dict:
        """Plain JSON-ready values (combinations as lists of factor names)."""
        return {"system": self.system, "reference": self.reference, "model": self.model, "plan": self.plan,
                "factors": self.factors, "base": self.base,
                "combinations": [{"on": sorted(S), "step_s": t} for S, t in
                                 sorted(self.steps_s.items(), key=lambda kv: (len(kv[0]), sorted(kv[0])))],
                "system_step_s": self.system_step_s, "reference_step_s": self.reference_step_s,
                "gap_s": self.gap_s, "shares_s": self.shares_s, "rest_s": self.rest_s,
                **({} if self.uncertainty is None else {"uncertainty": _shares_dict(self.uncertainty)})}

    def format(self) -> str:
        ms = lambda s: f"{s * 1e3:.3f}"
        title = (f"{self.model}: {self.system} ({ms(self.system_step_s)} ms) vs {self.reference} "
                 f"({ms(self.reference_step_s)} ms), plan at every point: {self.plan}")
        lines = [title, "=" * len(title)]
        for f, kv in self.factors.items():
            what = ", ".join(f"{k} {self.base[k]:g} -> {v:g}" for k, v in kv.items())
            lines.append(f"  {f:<18} {what}")
        order = sorted(self.steps_s.items(), key=lambda kv: (len(kv[0]), sorted(kv[0])))
        names = [" + ".join(f for f in self.factors if f in S) or f"none ({self.system})" for S, _ in order]
        width = max(len("factors on"), *map(len, names))
        lines.append(f"{'factors on':<{width}} {'step ms':>9}")
        for name, (_, t) in zip(names, order):
            lines.append(f"{name:<{width}} {ms(t):>9}")
        gap = self.gap_s
        pct = lambda s: f"{100 * s / gap:5.1f} % of the gap" if gap else ""
        lines.append(f"Shapley shares (average over every order of switching the factors on), of the "
                     f"{ms(gap)} ms gap:")
        for f, s in self.shares_s.items():
            lines.append(f"  {f:<18} {ms(s):>9} ms  {pct(s)}")
        lines.append(f"  {'everything else':<18} {ms(self.rest_s):>9} ms  {pct(self.rest_s)}")
        if self.uncertainty is not None:
            from ..uncertainty.report import shares_lines
            lines += shares_lines(self.uncertainty)
        return "\n".join(lines)


def attribute(system, reference, model, factors: Mapping[str, Mapping[str, float]] | None = None, *,
              plan="search", iterations: int | None = None, seed: int = 0, reference_plan=None,
              system_plan=None, executor=None, workers: int | None = None,
              ray_address: str | None = None, uncertainty: int | None = None, uncertainty_seed: int = 0,
              model_error=True) -> Attribution:
    """The step-time gap between `system` and `reference` split into factor shares (see the module doc).

    system, reference: Systems or preset names/paths (the factors move `system` towards `reference`);
    factors: {name: {knob: value}} (default: default_factors); plan, iterations, seed: the planner
    used at every combination (analysis.planning; searched by default); reference_plan: the
    reference's (default: the same planner; give one where `plan` is a plan fixed for `system`);
    system_plan: the plan `plan` gives `system` as built, where the caller already holds it (the
    combination with every factor off is then not planned again);
    executor, workers, ray_address: where the 2^k + 1 plans are made (planning.plans: a local process
    pool by default); the shares do not depend on where. uncertainty: a number of draws: the result's
    `uncertainty` holds every share at each draw (attribution_draws; seeded by uncertainty_seed, with
    the model's own error unless model_error=False).
    """
    system, reference, model = as_system(system), as_system(reference), as_model(model)
    make = planner(plan, iterations=iterations, seed=seed)
    if uncertainty is not None:                   # checked before any plan is made
        from ..uncertainty.propagate import check_draws, check_seed
        check_draws(uncertainty, "uncertainty"), check_seed(uncertainty_seed, "uncertainty_seed")
    factors = default_factors(system, reference, model) if factors is None else factors
    if not isinstance(factors, Mapping) or not factors or not all(isinstance(v, Mapping) and v for v in factors.values()):
        raise ConfigError("", "factors", "must map each factor's name to {knob: value}, at least one factor; "
                          f"got {factors!r}" + (" (the two systems share every default factor)" if not factors else ""))
    if len(factors) > 6:
        raise ConfigError("", "factors", f"has {len(factors)} factors: 2^k re-planned points; give at most 6")
    knobs = list(dict.fromkeys(k for kv in factors.values() for k in kv))
    owners = [[f for f, kv in factors.items() if k in kv] for k in knobs]
    twice = [k for k, o in zip(knobs, owners) if len(o) > 1]
    if twice:
        raise ConfigError("", "factors", f"knob {twice[0]!r} is set by more than one factor; each knob belongs to one")
    state = _state(system, model)
    K.check_applies(knobs, state)
    base = {k: K.knob(k).decode(K.knob(k).encode(K.knob(k).get(state))) for k in knobs}
    names = list(factors)
    combos = combinations(factors)
    points = [moved(system, model, kv) for _, kv in combos]       # each combination its own plan
    ref_make = make if reference_plan is None else planner(reference_plan, iterations=iterations, seed=seed)
    held = [] if system_plan is None else [planner(system_plan)(system, model)]   # combos[0]: every factor off
    todo = points[len(held):]
    if ref_make is make:                  # the reference's plan is made beside the combinations'
        *found, ref_plan = plans(make, todo + [(reference, model)], executor, workers, ray_address)
    else:
        found = plans(make, todo, executor, workers, ray_address)
        ref_plan = ref_make(reference, model)
    found = held + found
    steps_s = {S: float(evaluate(s, m, p).step_s) for (S, _), (s, m), p in zip(combos, points, found)}
    ref_step = float(evaluate(reference, model, ref_plan).step_s)
    worth = {S: -t for S, t in steps_s.items()}          # a factor's worth: the step time it saves
    shares = shapley(worth, names)
    problems = (tuple((S, s, m, p) for (S, _), (s, m), p in zip(combos, points, found)), (reference, model, ref_plan))
    att = Attribution(system.name, reference.name, model.name, make.label,
                      {f: {k: float(v) for k, v in kv.items()} for f, kv in factors.items()},
                      {k: float(v) for k, v in base.items()}, steps_s, ref_step, shares, problems)
    if uncertainty is None:
        return att
    return dataclasses.replace(att, uncertainty=attribution_draws(att, uncertainty, uncertainty_seed, model_error))


def _shares_dict(sd) -> dict:
    from ..uncertainty.report import shares_dict
    return shares_dict(sd)


# ------------------------------------------------------------------------------------ uncertainty

@dataclass
class SharesDrawn:
    """An attribution's figures at each draw (seconds, [N] each): every combination's step, the
    reference's, each factor's Shapley share and what the factors leave."""

    steps: dict                 # frozenset of factors on -> [N]
    reference: np.ndarray
    shares: dict                # factor -> [N]
    rest: np.ndarray
    gap: np.ndarray
    draws: int
    seed: int
    inputs: int
    model_error: ModelError = NO_MODEL_ERROR


def attribution_draws(att, draws: int = DEFAULT_DRAWS, seed: int = 0, model_error: bool | ModelError | None = None) -> SharesDrawn:
    """The Shapley shares of an Attribution (analysis.attribution.attribute) at each of N draws of
    the inputs, every combination at the plan it was given: the combinations are variants of the
    system, so they share its inputs (a moved leaf keeps its own value, moved by the draw's factor:
    inputs.leaf_spec), and the reference draws its own. The model's own error is one draw for the
    system and its variants (one machine type: every combination's step moves by the same factor, and
    so do the shares) and another for the reference."""
    if not att.problems:
        raise ConfigError("", "attribution", "holds no evaluated combinations (made by attribute())")
    return shares_draws(list(att.factors), *att.problems, draws=draws, seed=seed, model_error=model_error)


def shares_draws(factors: list[str], combos, reference, draws: int = DEFAULT_DRAWS, seed: int = 0,
                 model_error: bool | ModelError | None = None) -> SharesDrawn:
    """attribution_draws from the pieces: `combos` ((factors on, system, model, plan) of every
    combination), `reference` ((system, model, plan)); model_error: None for the stored one."""
    ref, ref_model, ref_plan = reference
    systems = [s for _, s, _, _ in combos] + [ref]
    models = [m for _, _, m, _ in combos] + [ref_model]
    given = [p for *_, p in combos] + [ref_plan]
    res = propagate(systems, models, given, draws, seed, model_error, error_groups=[0] * len(combos) + [1],
                    progress="uncertainty")
    steps = {S: r.samples["step_s"] for (S, *_), r in zip(combos, res[:-1])}
    shares = shapley({S: -t for S, t in steps.items()}, factors)
    ref_t = res[-1].samples["step_s"]
    everything = frozenset(factors)
    return SharesDrawn(steps, ref_t, shares, steps[everything] - ref_t, steps[frozenset()] - ref_t,
                       res[0].draws, seed, len({i.name for r in res for i in r.inputs}), res[0].model_error)
