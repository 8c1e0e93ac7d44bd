"""The System's leaves as a study reads them: each leaf's name, unit and knob (leaf_info, from the
schema's field table and the knobs' registry), and the
gradient of a metric's log with respect to all of them in one reverse pass (log_gradient) — what the
sensitivity table and the sweep's binding resource are computed from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..cache import jit
from ..evaluate import evaluate
from ..hardware import System
from ..schema import SYSTEM_LEAVES
from .. import knobs as K

# the one System leaf no numeric config field sets (nic.attach, a word, sets it): its name, unit, scale
DERIVED = {"nic.pcie": ("NIC behind PCIe (0 integrated, 1 PCIe)", "", 1.0)}


def _knobs_by_leaf() -> dict[str, str]:
    """System leaf -> the knob that sweeps it (the first that lists it)."""
    out = {}
    for kn in K.KNOBS.values():
        for leaf in kn.leaves:
            out.setdefault(leaf, kn.name)
    return out


def leaf_info(system: System) -> list[tuple[str, str, str, float, str]]:
    """(path, name, unit, SI per unit, knob) for every System leaf, in tree_leaves order: the name, unit
    and scale of the config field that sets the leaf (schema), the knob that lists it (perfmodel.knobs)."""
    paths, _ = jax.tree_util.tree_flatten_with_path(system)
    knob_of = _knobs_by_leaf()
    out = []
    for path, _ in paths:
        keys = []
        for p in path:
            keys.append(str(p.name) if hasattr(p, "name") else f"[{p.idx}]" if hasattr(p, "idx") else str(p))
        dotted = ".".join(keys).replace(".[", "[")
        if dotted.startswith("levels["):
            lv = system.levels[int(dotted[len("levels["):dotted.index("]")])]
            attr = dotted.split(".")[-1]
            f = SYSTEM_LEAVES.get(f"levels[].{attr}")
            name, unit, scale = (f.label or f.meaning, f.unit, f.scale) if f else (attr, "", 1.0)
            out.append((dotted, f"{lv.name} level ({lv.link}) {name}", unit, scale,
                        knob_of.get(f"levels[{lv.link}].{attr}", "")))
        elif dotted in DERIVED:
            out.append((dotted, *DERIVED[dotted], knob_of.get(dotted, "")))
        else:
            f = SYSTEM_LEAVES.get(dotted)
            out.append((dotted, f.label or f.meaning or f.name, f.unit, f.scale, knob_of.get(dotted, "")) if f
                       else (dotted, dotted, "", 1.0, ""))
    return out


# quick: one call per table, so its compile is most of its cost (cache.QUICK_COMPILE_OPTIONS, as for
# pm.evaluate's program)
@jit(static_argnames=("metric",), quick=True)
def log_gradient(system, model, plan, metric):
    """The metric and the gradient of its log w.r.t. the System (one reverse pass; a compile per metric)."""
    def f(s):
        return jnp.log(getattr(evaluate(s, model, plan), metric))
    value, grad = jax.value_and_grad(f)(system)
    return jnp.exp(value), grad


def elasticities(system: System, model, plan, metric: str) -> tuple[float, list[tuple]]:
    """The metric at this plan and, per System leaf (leaf_info's order), (path, name, unit, scale, knob,
    value x in SI, d metric / d x, elasticity d log metric / d log x), from one reverse pass."""
    value, grad = log_gradient(system, model, plan, metric)
    m = float(value)
    xs = [float(x) for x in jax.tree_util.tree_leaves(system)]
    gs = [float(g) for g in jax.tree_util.tree_leaves(grad)]
    return m, [(*info, x, g * m, g * x) for info, x, g in zip(leaf_info(system), xs, gs)]

