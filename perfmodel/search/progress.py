"""A search's progress on stderr, drawn from the driver's rounds (driver.run's on_round): no thread.

On a terminal one line, redrawn at most every REDRAW_S: the phase, the rounds and seconds against
their budgets. Elsewhere (a log, a pipe, CI), where redraws would pile up on one line, a line the
first time each phase is seen.
"""

from __future__ import annotations

import sys
import time

REDRAW_S = 0.2


class Progress:
    def __init__(self, enabled: bool, budget_s: float | None, iterations: int | None, desc: str, stream=None):
        from ..config import quiet
        enabled = enabled and not quiet()          # --quiet on any command
        self.enabled, self.budget_s, self.iterations, self.desc = enabled, budget_s, iterations, desc
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.seen: set = set()
        self.drawn = 0.0

    def __enter__(self):
        if self.enabled and not self.tty:
            limits = [f"{self.iterations} iterations" if self.iterations is not None else None,
                      f"budget {self.budget_s:g} s" if self.budget_s is not None else None]
            limits = [x for x in limits if x]
            self._write(f"{self.desc}: {', '.join(limits) or 'until it converges'}\n")
        return self

    def update(self, phase: str, budget) -> None:
        if not self.enabled:
            return
        if not self.tty:
            if phase not in self.seen:
                self.seen.add(phase)
                self._write(f"{self.desc}: {phase} at {budget.elapsed():.1f} s, round {budget.used}\n")
            return
        now = time.perf_counter()
        if now - self.drawn < REDRAW_S:
            return
        self.drawn = now
        rounds = f"round {budget.used}" + (f"/{self.iterations}" if self.iterations is not None else "")
        seconds = f"{budget.elapsed():.0f}" + (f"/{self.budget_s:g}" if self.budget_s is not None else "") + " s"
        self._write(f"\r{self.desc} ({phase}): {rounds}, {seconds}\033[K")

    def __exit__(self, *exc):
        if self.enabled and self.tty and self.drawn:
            self._write("\r\033[K")
        return False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
