"""The search driver: one loop over a method's steps, with the budget and the clock in one place.

A method is three functions over an explicit state (as optax's transformations are two):

    state = method.init(problem, seed, budget)       # the method's start (greedy's plan, a first population)
    state = method.step(problem, state, budget)      # one round: a descent's round, an Adam step, a generation
    plan, score = method.best(state)                 # the best plan held, and its hard score

and the state says `done` when the method has nothing left to do. `run` calls step until the method
is done, the iteration budget is spent or the wall clock passes the outer budget, checked between
rounds (TorchRec's planner checks its timeout the same way). A method reads only the iteration
budget (budget.left()), never the clock, so what it does is a function of the problem, the seed and
the iterations: the clock decides only when a search stops, and the result says whether it did.
The driver records the anytime profile (when each better plan was first held) and the rounds and
seconds of each phase the method names (method.phase(state)).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..plan import Plan
from .score import INFEASIBLE


class Method(Protocol):
    name: str

    def init(self, problem, seed: int, budget: Budget) -> Any: ...

    def step(self, problem, state, budget: Budget) -> Any: ...

    def best(self, state) -> tuple[Plan | None, float]: ...

    def phase(self, state) -> str: ...

    def notes(self, state) -> dict: ...


@dataclass
class Budget:
    """Iterations (rounds) and wall-clock seconds a search may take; None: no limit. The driver
    counts the rounds (spend) and is the only reader of the clock (expired, elapsed)."""

    iterations: int | None = None
    seconds: float | None = None
    clock: Callable[[], float] = time.perf_counter
    used: int = 0
    t0: float = field(default=0.0)

    def __post_init__(self):
        self.t0 = self.clock()

    def left(self) -> int | None:
        """Rounds left (None: no limit). What a method may plan with."""
        return None if self.iterations is None else max(self.iterations - self.used, 0)

    def spend(self, rounds: int = 1) -> None:
        self.used += rounds

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def expired(self) -> str | None:
        """Why the search must stop now: "iterations", "budget_s", or None."""
        if self.iterations is not None and self.used >= self.iterations:
            return "iterations"
        if self.seconds is not None and self.elapsed() >= self.seconds:
            return "budget_s"
        return None


@dataclass
class PhaseNote:
    name: str
    rounds: int = 0
    seconds: float = 0.0


@dataclass
class Outcome:
    plan: Plan | None
    score: float
    stopped: str                   # "done" (the method finished), "iterations" or "budget_s"
    iterations: int                # rounds taken
    progress: list                 # [[seconds since the start, step_s], ...]: each better feasible plan
    phases: list                   # [PhaseNote, ...] in the order the method ran them
    notes: dict                    # the method's own


def run(method: Method, problem, seed: int, budget: Budget,
        on_round: Callable[[str, Budget], None] | None = None) -> Outcome:
    """Run `method` on `problem` until it is done or the budget stops it (module docstring).
    on_round(phase, budget): called after the start and after every round (a progress bar)."""
    progress: list = []
    phases: list[PhaseNote] = []

    def record(state) -> None:
        plan, score = method.best(state)
        if plan is not None and score < INFEASIBLE and (not progress or score < progress[-1][1]):
            progress.append([round(budget.elapsed(), 4), float(score)])
        if on_round is not None:
            on_round(method.phase(state), budget)

    state = method.init(problem, seed, budget)
    phases.append(PhaseNote("start", 0, budget.elapsed()))
    record(state)
    stopped = "done"
    while not state.done:
        why = budget.expired()
        if why is not None:
            stopped = why
            break
        name, t = method.phase(state), budget.elapsed()
        state = method.step(problem, state, budget)
        budget.spend()
        if phases[-1].name != name:
            phases.append(PhaseNote(name))
        phases[-1].rounds += 1
        phases[-1].seconds += budget.elapsed() - t
        record(state)
    plan, score = method.best(state)
    return Outcome(plan=plan, score=float(score), stopped=stopped, iterations=budget.used, progress=progress,
                   phases=phases, notes=method.notes(state))
