"""Successive halving of descents, counted in rounds: which start leads to the lowest plan shows
only after a long descent, so several starts share the rounds and the better half goes on.

Each stage gives every descent still in the race an equal share of the stage's rounds (a descent
that stops on its own hands the rest to the next one), then the better half goes on; the last one
descends until its allowance is spent. ceil(log2 n) stages and the final descent split the
allowance equally. With no allowance (None) every descent runs until it stops and the best wins.
Plans whose scores are known are held from the start (the lowest first), so a race cut before a
plan descended still returns it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..plan import Plan
from . import descent as ds
from .problem import Problem


@dataclass(frozen=True)
class Entry:
    plan: Plan                      # its start (or its best so far)
    score: float                    # its best score (inf: not known yet)
    origin: int                     # which of the race's plans it started from
    descent: object = None          # its descent.Descent, from its first round on
    stopped: bool = False           # its descent stopped on its own


@dataclass(frozen=True)
class Race:
    field: tuple                    # the entries still in the race, lowest score first
    allowance: int | None           # rounds the race may take (None: until every descent stops)
    used: int = 0
    stage: tuple = ()               # origins of the entries this stage still has to run, in turn
    share: int = 0                  # rounds the running entry may take in this stage
    stage_left: int = 0             # rounds left in this stage
    spent: int = 0                  # rounds the running entry has taken in this stage
    rank: bool = False              # the descents rank their moves to first order (descent.py)
    done: bool = False

    @property
    def best(self) -> tuple[Plan, float, int]:
        """The best plan held, its score and its origin."""
        e = min(self.field, key=lambda e: e.score)
        return e.plan, e.score, e.origin


def start(plans: list[Plan], scores: list[float] | None = None, allowance: int | None = None,
          rank: bool = False, first: int | None = None) -> Race:
    """A race of `plans` (their hard scores, when known: `scores`) over `allowance` rounds. The
    first stage runs the descents lowest score first, or plans[first]'s before the others: the order
    decides only which basin a search cut by the wall clock has descended."""
    known = list(scores or [])[:len(plans)]
    known += [float("inf")] * (len(plans) - len(known))
    entries = sorted((Entry(p, s, i) for i, (p, s) in enumerate(zip(plans, known))),
                     key=lambda e: (e.origin != first, e.score))
    return _next_stage(Race(field=tuple(entries), allowance=allowance, rank=rank))


def _left(r: Race) -> float:
    return float("inf") if r.allowance is None else r.allowance - r.used


def _next_stage(r: Race) -> Race:
    """Halve the field (after a stage) and set up the next stage, or finish."""
    running = [e for e in r.field if not e.stopped]
    if not running or _left(r) <= 0:
        return dataclasses.replace(r, done=True, stage=())
    stages = int(np.ceil(np.log2(len(r.field))))
    left = _left(r)
    rounds = left if left == float("inf") else max(int(left // (stages + 1)), 1)
    stage = tuple(e.origin for e in running)
    return dataclasses.replace(r, stage=stage, stage_left=rounds, share=_share(rounds, len(stage)), spent=0)


def _share(rounds, entries: int):
    return rounds if rounds == float("inf") else max(int(rounds // entries), 1)


def step(p: Problem, r: Race, begin=ds.start, advance=ds.descend) -> Race:
    """One round of the entry running now; the race's state after it. begin(p, plan, rank) and
    advance(p, descent): the descent's start and round (descent.py)."""
    if r.done:
        return r
    origin = r.stage[0]
    e = next(e for e in r.field if e.origin == origin)
    d = advance(p, e.descent or begin(p, e.plan, rank=r.rank))
    plan, score = d.best
    e = dataclasses.replace(e, descent=d, plan=plan, score=score, stopped=d.done)
    field = tuple(e if x.origin == origin else x for x in r.field)
    r = dataclasses.replace(r, field=field, used=r.used + 1, spent=r.spent + 1, stage_left=r.stage_left - 1)
    if not (d.done or r.spent >= r.share or _left(r) <= 0):
        return r
    rest = r.stage[1:]
    if rest and _left(r) > 0:
        return dataclasses.replace(r, stage=rest, spent=0, share=_share(max(r.stage_left, 1), len(rest)))
    ordered = sorted(r.field, key=lambda x: x.score)
    return _next_stage(dataclasses.replace(r, field=tuple(ordered[: (len(ordered) + 1) // 2])))
