"""The plans a search starts from: the ones a user would otherwise take from a framework's planner.

A user who does not run perfmodel's search takes TorchRec's greedy plan, or HugeCTR's planner at
its standard recipes, or places tables round-robin; a user who has a plan of their own brings it.
Every search that picks the candidate of least score (methods.Spec.scores) starts from all of these
(`starts`), and returns none worse than the best of them in the objective it searches (one.py keeps
the best start where the search found nothing lower): a search never loses to a planner it knows.

Under a guard (guard.py) the planners' plans seldom fall within its cap, and a best start over
the cap says nothing of what the search had to beat: greedy's choices packed on the guard's costs
(guard.packed_start) join the starts, so a guarded search is never worse than that plan either.

Each framework plan is the planner's table placement with the settings the search's problem allows
chosen as greedy chooses its own (greedy.best_settings, every combination in one call), the held
settings kept; a plan the problem's masks, constraints or memory rule out is left out (a planner
that places a table row-wise where the search may use table-wise only, say).
"""

from __future__ import annotations

from ..config import ConfigError
from ..interop.hugectr import hugectr_plan
from ..interop.torchrec_plan import without_torchrec_form
from ..plan import SHARDING_TYPES, Plan
from .greedy import best_settings, greedy_plan
from .guard import packed_start
from .score import eager

# HugeCTR's planner at the recipes the MLPerf DLRM-DCNv2 submissions run most (interop/hugectr.py):
# auto with ratio 7 and threshold 0.008 GB on one node, hier_auto with 67 and 0.0125 on several;
# round_robin as its simplest plan type
RECIPES = (("hugectr:auto:7:0.008", "auto", 7.0, 0.008), ("hugectr:hier_auto:67:0.0125", "hier_auto", 67.0, 0.0125),
           ("round_robin", "round_robin", 7.0, 0.0))
# HugeCTR's planner walks shards x buckets in Python: past this many (tables x chips) its plans are
# left out (a start that costs more than the search's first rounds)
PLANNER_WORK = 200_000
PACKED = "packed on the guard's costs"


def starts(p, user: Plan | None = None) -> list[tuple[str, Plan]]:
    """[(name, plan), ...]: the user's plan first where given, then greedy's (TorchRec-like), then
    HugeCTR's at RECIPES and round_robin, each with the held settings (p.hold), and under a guard
    greedy's choices packed on its costs (PACKED); plans the problem does not allow are left out,
    and so is a plan equal to one before it."""
    out = []
    if user is not None:
        out.append(("your start", p.held(user)))
    greedy = greedy_plan(p.system, p.model, p.masks, hold=p.hold)
    out.append(("greedy", greedy))
    if p.guard is not None:
        out.append((PACKED, p.held(packed_start(p, greedy))))
    if p.T * p.D <= PLANNER_WORK and p.D > 1:
        for name, kind, ratio, threshold in RECIPES:
            if kind == "hier_auto" and p.system.num_chips <= p.system.chips_per_host:
                continue                  # one node: hier_auto's one bucket holds every table
            try:
                tables = hugectr_plan(p.system, p.model, kind, ratio, threshold)
            except ConfigError:           # a plan type this system cannot take (hier_auto over partial nodes)
                continue
            if allowed(p, tables):
                out.append((name, settled(p, tables)))
    seen, kept = set(), []
    for name, plan in out:
        key = str(plan.to_dict())
        if key not in seen:
            seen.add(key)
            kept.append((name, plan))
    return kept


def allowed(p, plan: Plan) -> bool:
    """Whether the problem allows every table's sharding type in `plan` (a plan that breaks the
    per-table constraints scores VIOLATED, and the search's choice of its best start passes it by),
    and under shapes="torchrec" every table's shape (HugeCTR's rows over a subset of the ranks has none)."""
    types = p.allowed
    return all(types[t, SHARDING_TYPES.index(plan.tables[name].sharding_type)]
               for t, name in enumerate(p.model.tables.names)) and (
        p.shapes == "all" or without_torchrec_form(plan, p.system) is None)


def settled(p, tables: Plan) -> Plan:
    """A planner's placement with the settings greedy would choose for it, the held ones kept."""
    system, model = (p.numpy_problem[0], p.numpy_problem[1]) if eager(p.system, p.model) else (p.system, p.model)
    return p.held(best_settings(system, model, p.held(tables), eager(p.system, p.model), p.hold))
