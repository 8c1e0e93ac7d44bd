"""The vectorized local search as explicit state: one round per call of `descend`.

A round builds a batch of single moves of the current plan (table moves, swaps, setting changes:
moves.py), scores them all in one vmapped call and takes the best by the tie-broken score; improving
table moves on disjoint tables and devices are then tried together; when no single move helps,
compound moves (compound.py). The descent keeps the visited plan of least score (the step time when
feasible), so its result is never worse than its start.

Which moves a round scores: on a small instance (score.EXHAUSTIVE), the moves off the hot devices
first and every move once those stall. On a large one, either the moves off the hot devices
(moves.table_moves), or, with first-order ranking (rank=True), the moves of lowest first-order
estimate among all of them (firstorder.py), a batch at a time and more batches once the first fails.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..plan import CW, RW, TW, Plan
from . import firstorder as fo
from . import moves as mv
from .compound import group_moves, pick_compound
from .problem import Problem
from .score import score_settings

SETTINGS_EVERY = 4     # rounds between setting changes while table moves still improve (large instances)
# A descent stops after this many rounds without a lower score (step time; or memory over capacity
# while infeasible): the tie-broken score can fall for hundreds of rounds on a plateau with no
# step-time gain, while descents of the suite's instances gain within a few rounds or not at all
PLATEAU_ROUNDS = 25
MAX_ROUNDS = 200
RANKED_BATCHES = 4     # batches of first-order-ranked moves a stalled round scores before compound moves
LOWER = 1 - 1e-9       # a score counts as lower below this fraction of another


@dataclass(frozen=True)
class Descent:
    """A descent's state: the current plan with its arrays and details, the best plan visited."""

    plan: Plan
    pa: object              # the current plan's numpy PlanArrays
    cur: float              # its tie-broken score
    memory: np.ndarray
    cap: float
    loads: np.ndarray
    kept: Plan              # the visited plan of least score ...
    kept_score: float       # ... and that score
    exhaustive: bool        # every move (True) or the moves off the hot devices
    widen: bool             # widen to every move when the moves off the hot devices stall
    rank: bool = False      # first-order ranked moves (large instances)
    rounds: int = 0
    gained: int = 0         # the last round that lowered the score
    max_rounds: int = MAX_ROUNDS
    done: bool = False

    @property
    def best(self) -> tuple[Plan, float]:
        return self.kept, self.kept_score


def start(p: Problem, plan: Plan, rank: bool = False, max_rounds: int = MAX_ROUNDS,
          exhaustive: bool | None = None) -> Descent:
    """A descent from `plan`. exhaustive: every move (True), the moves off the hot devices (False),
    or (None) the hot devices first and every move once they stall on a small instance."""
    pa = p.arrays(plan)
    cur, _, memory, cap, loads, hard = p.details_of(pa)
    return Descent(plan=plan, pa=pa, cur=float(cur), memory=memory, cap=float(cap), loads=loads, kept=plan,
                   kept_score=float(hard), exhaustive=bool(exhaustive), widen=exhaustive is None and p.exhaustive,
                   rank=rank and not p.exhaustive, max_rounds=max_rounds)


def descend(p: Problem, d: Descent) -> Descent:
    """One round of the descent (its state after it; done when no move helps, after PLATEAU_ROUNDS
    rounds without a lower score, or after max_rounds)."""
    if d.done:
        return d
    if d.rounds - d.gained > PLATEAU_ROUNDS or d.rounds >= d.max_rounds:
        return dataclasses.replace(d, done=True)
    best_plan, best, improving, c = _single_moves(p, d)
    # compound moves, many tables to one sharding type at once, when no single move helps: the one of
    # least step when that is below the best plan this descent held, else the least tie-broken one
    # when lower (pick_compound); the column-wise splits under the other dense parallelisms only when
    # those fail
    for other_dense in (False, True):
        if best_plan is not None:
            break
        (hard, tie), group = group_moves(p, d.plan, d.pa, other_dense=other_dense)
        k = pick_compound(hard, tie, d.kept_score * LOWER, best * LOWER)
        if k is not None:
            best, best_plan = float(tie[k]), group(k)
    if len(improving) > 1:              # several improving table moves on disjoint tables and devices
        combo = _combined(p, d.plan, c, improving)
        if combo is not None:
            score = p.score(p.arrays(combo))
            if score < best * LOWER:
                best, best_plan = score, combo
    rounds = d.rounds + 1
    if best_plan is None and d.widen:
        return dataclasses.replace(d, widen=False, exhaustive=True, rounds=rounds)
    if best_plan is None:
        return dataclasses.replace(d, done=True, rounds=rounds)
    pa = p.arrays(best_plan)
    cur, _, memory, cap, loads, hard = p.details_of(pa)
    kept, kept_score, gained = d.kept, d.kept_score, d.gained
    if float(hard) < kept_score:
        if float(hard) < kept_score * LOWER:
            gained = rounds
        kept, kept_score = best_plan, float(hard)
    return dataclasses.replace(d, plan=best_plan, pa=pa, cur=float(cur), memory=memory, cap=float(cap), loads=loads,
                               kept=kept, kept_score=kept_score, rounds=rounds, gained=gained)


def _single_moves(p: Problem, d: Descent):
    """The best single move of the round: (its plan or None, its tie-broken score or the current one,
    the improving table moves as (score, index) lowest first, the table moves' columns)."""
    plan, pa, cur = d.plan, d.pa, d.cur
    best_plan, best, set_scores = None, cur, None
    # a small instance's table moves, swaps and setting changes usually fit in one padded batch,
    # scored in one call (score_mixed) instead of three
    settings = mv.setting_changes(p, plan) if p.exhaustive else None
    if d.rank:
        c, scores, a, b, swap_scores = _ranked(p, d)
    else:
        c = mv.table_moves(p, plan, d.loads, d.memory, d.cap, d.exhaustive)
        a, b = mv.swaps(p, plan, d.loads, d.memory, d.cap, d.exhaustive)
        if settings is not None and len(settings) <= min(mv.MIXED_SETTINGS, p.max_batch - 1) \
                and 0 < len(c["t"]) + len(a) + len(settings):
            scores, swap_scores, set_scores = mv.score_mixed(p, plan, pa, c, a, b, settings)
        else:
            scores, swap_scores = mv.score_moves(p, pa, c), mv.score_swaps(p, pa, a, b)
    improving = sorted((float(scores[j]), int(j)) for j in np.flatnonzero(scores < cur * LOWER))
    if improving and improving[0][0] < best:
        best, best_plan = improving[0][0], mv.moved(p, plan, c, improving[0][1])
    if len(a):
        j = int(np.argmin(swap_scores))
        if swap_scores[j] < best * LOWER:
            best, best_plan = float(swap_scores[j]), mv.swapped(p, plan, int(a[j]), int(b[j]))
    # settings on a large instance: their ~20 plans cost a whole padded batch, so while table moves or
    # swaps improve, only every SETTINGS_EVERY-th round; always when those stall
    if set_scores is None:
        due = p.exhaustive or best_plan is None or d.rounds % SETTINGS_EVERY == 0
        settings = (settings if settings is not None else mv.setting_changes(p, plan)) if due else []
        if settings:
            set_scores = score_settings(p.system, p.model, settings, pa, tie=True, guard=p.guard, draws=p.draws,
                                        size=p.max_batch if p.draws is not None else None)
    if settings:
        j = int(np.argmin(set_scores))
        if set_scores[j] < best * LOWER:
            best, best_plan = float(set_scores[j]), settings[j]
    return best_plan, best, improving, c


def _ranked(p: Problem, d: Descent):
    """A large instance's round by first-order ranking: the table moves and swaps of lowest estimate,
    a batch of each; while none improves, the next batches, up to RANKED_BATCHES of each."""
    g = fo.as_numpy(fo.gradient(p.system, p.model, d.pa, p.guard, p.draws))
    c_all, est, tie = fo.table_estimates(p, d.plan, d.pa, g, d.memory, d.loads, bool((d.memory > d.cap).any()))
    a_all, b_all, swap_est = fo.swap_estimates(p, d.plan, g)
    order, swap_order = fo.ranked(est, tie), fo.ranked(swap_est)
    size = p.max_batch
    picked, scores, swaps_picked, swap_scores = [], [], [], []
    for i in range(RANKED_BATCHES):
        rows, srows = order[i * size:(i + 1) * size], swap_order[i * size:(i + 1) * size]
        if not len(rows) and not len(srows):
            break
        picked.append(rows), swaps_picked.append(srows)
        scores.append(mv.score_moves(p, d.pa, mv.take(c_all, rows)))
        swap_scores.append(mv.score_swaps(p, d.pa, a_all[srows], b_all[srows]))
        if (scores[-1] < d.cur * LOWER).any() or (swap_scores[-1] < d.cur * LOWER).any():
            break
    rows, srows = np.concatenate(picked or [np.zeros(0, int)]), np.concatenate(swaps_picked or [np.zeros(0, int)])
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)
    return mv.take(c_all, rows), cat(scores), a_all[srows], b_all[srows], cat(swap_scores)


def _combined(p: Problem, plan: Plan, c: dict, improving: list) -> Plan | None:
    """The best improving table moves (up to 64) on disjoint tables and devices, applied together;
    None when fewer than two are disjoint."""
    names = p.model.tables.names
    combo, used_t, used_d = plan, set(), set()
    for _, i in improving[:64]:
        t = int(c["t"][i])
        now = plan.tables[names[t]]
        # a row-wise subset (the move's, or the table's now) holds its devices as a placed table does
        subset = (mv.is_subset(c, i), now.sharding_type == "row_wise" and len(now.ranks) < p.D)
        devs = set(mv.move_ranks(p, c, i)) if c["st"][i] in (TW, CW) or subset[0] else set()
        old = set(now.ranks) if c["st"][i] in (TW, CW) or any(subset) else set()
        if t in used_t or (devs | old) & used_d:
            continue
        combo = mv.moved(p, combo, c, i)
        used_t.add(t)
        used_d |= devs | old
    return combo if len(used_t) > 1 else None


def run(p: Problem, plan: Plan, max_rounds: int = MAX_ROUNDS, rank: bool = False,
        exhaustive: bool | None = None) -> tuple[Plan, float]:
    """Descend from `plan` until it stops (no round budget): the best plan and its score."""
    d = start(p, plan, rank=rank, max_rounds=max_rounds, exhaustive=exhaustive)
    while not d.done:
        d = descend(p, d)
    return d.best
