"""What a search returns: SearchResult, when its anytime profile first held a plan, and where its
gain over its best start comes from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..evaluate import Breakdown
from ..hardware import System
from ..plan import Plan



@dataclass
class SearchResult:
    method: str
    plan: Plan
    breakdown: Breakdown
    step_s: float
    samples_per_s: float
    feasible: bool                     # fits in memory (and within the guard's cap, when searched with one)
    wall_s: float                      # wall time, compile included
    seed: int
    converged: bool = True             # not cut by budget_s: the same problem, seed and iterations give this plan again
    evaluations: int = 0               # hard plans priced: the starts and a sampler's draws
    notes: dict = field(default_factory=dict)   # "progress": [[s, step_s], ...]; "phases"; the method's own
    system: System | None = None
    iterations: int = 0                # rounds taken
    stopped: str = "done"              # "done" (the method finished), "iterations" or "budget_s"
    nominal: SearchResult | None = None    # with an objective other than "nominal": the nominal-best plan's search

    @property
    def memory_headroom(self) -> float:
        """Free fraction of usable HBM on the fullest device."""
        mem = float(np.max(np.asarray(self.breakdown.memory_bytes)))
        return 1.0 - mem / float(self.breakdown.capacity_bytes)

    def first_at(self, step_s: float) -> float | None:
        """Seconds (since the call, compilation included) at which the search first held a plan of step
        <= step_s, from its anytime profile; None: never (or no profile)."""
        return first_at(self.notes.get("progress", []), step_s)


def first_at(progress, step_s: float) -> float | None:
    """When an anytime profile ([[seconds, step_s], ...], notes["progress"]) first held a plan of step
    <= step_s (to a relative 1e-9); None: never."""
    return next((t for t, s in progress if s <= step_s * (1 + 1e-9)), None)


# The step's parts a plan moves, by the phases that make them (busy time of the busiest device)
GAIN_PARTS = (("compute", ("bottom_fwd", "bottom_bwd", "top_fwd", "top_bwd", "optimizer")),
              ("embedding", ("emb_fwd", "emb_bwd")),
              ("all-to-all", ("input_dist", "output_dist", "grad_dist")),
              ("dense sync", ("dense_sync",)))


def parts(bd: Breakdown) -> dict:
    """Seconds of each GAIN_PARTS part (each phase's busiest device, summed) and the exposed
    communication."""
    out = {name: sum(_f(np.max(np.asarray(bd.phase_s[p]))) for p in phases if p in bd.phase_s)
           for name, phases in GAIN_PARTS}
    out["exposed communication"] = _f(bd.exposed_comm_s)
    return out


def gain_account(before: Breakdown, after: Breakdown) -> dict:
    """Where a plan's gain over another comes from: the step and each part's seconds before and
    after (parts), and the change of each (positive: the part shrank)."""
    b, a = parts(before), parts(after)
    return {"step_s": [_f(before.step_s), _f(after.step_s)],
            "parts_s": {k: [b[k], a[k]] for k in b}, "saved_s": {k: b[k] - a[k] for k in b}}


def _ms(s: float) -> str:
    return f"{float(s) * 1e3:.3f} ms"


def format_gain(name: str, account: dict) -> str:
    """One line: the search's gain over the best start `name`, and the parts that moved most."""
    s0, s1 = account["step_s"]
    moved = sorted(account["saved_s"].items(), key=lambda kv: -abs(kv[1]))
    shares = ", ".join(f"{k} {'-' if v >= 0 else '+'}{_ms(abs(v))}" for k, v in moved if abs(v) > 1e-3 * s0)
    return (f"best start: {name} {_ms(s0)}; the search {100 * (1 - s1 / s0):.1f} % faster ({_ms(s1)})"
            + (f": {shares}" if shares else ""))


def _f(x) -> float:
    return float(np.max(np.asarray(x)))
