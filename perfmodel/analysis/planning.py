"""The plan a study evaluates at each hardware point: one notion shared by sweep, sensitivity,
scaling, compare and every plot.

    make = planner("search", iterations=300, seed=0)      # the default of every study
    plan = make(system, model)                            # a Plan for this hardware
    make.label                                            # "search (300 rounds, seed 0)", for tables and titles

`plan` may be:
  "search"   pm.search's gradient method, re-run for each system it is asked about, with a fixed
             number of rounds and no wall-clock limit, so the same point and seed give the same
             plan in any process (the plan each machine wants);
  "greedy"   the TorchRec-style greedy plan (fast, but often 2-3x slower steps than searched);
  a Plan, PlanArrays or search result: that plan, fixed (it must fit every system it is asked about);
  a path to a plan JSON: that plan, loaded for each system (it must fit);
  a callable (system, model) -> Plan (or a search result): called per system.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config import ConfigError, exists
from ..hardware import System
from ..plan import Plan, PlanArrays, from_arrays, load_plan, validate_plan
from ..workload import RankingModel

# Rounds of the per-point search in studies: enough for the relaxed phase to reach the basins that
# decide a study's answer, fewer than pm.search's own default (2,400 rounds on dlrm-dcnv2-mlperf at
# 64 chips) because a study searches many points. On the eight h100-64 variants of the MTIA 300
# attribution, three seeds at 300 rounds agree within 1.4 % at every point; at 150 rounds one point
# spreads 1.40-1.66 ms over the seeds (benchmarks/RESULTS.md). A user who wants more gives iterations=.
STUDY_ITERATIONS = 300
KINDS = ("search", "greedy")


@dataclass(frozen=True)
class Planner:
    """A callable (system, model) -> Plan with a label naming the plan in tables, titles and JSON.

    The planners `planner` makes pickle (a sweep sends them to worker processes or a Ray cluster);
    one made from a user's callable pickles if the callable does."""
    make: Callable
    label: str
    kind: str                  # "search", "greedy", "fixed", "file" or "callable"
    iterations: int | None = None
    seed: int = 0

    def __call__(self, system: System, model: RankingModel, start: Plan | None = None) -> Plan:
        out = self.make(system, model, start) if self.kind == "search" else self.make(system, model)
        out = getattr(out, "plan", out)                # a search result carries its plan
        if isinstance(out, PlanArrays):
            out = from_arrays(out, system, model)
        if not isinstance(out, Plan):
            raise ConfigError("", "plan", f"{self.label} returned {type(out).__name__}, not a Plan")
        return out

    @property
    def per_point(self) -> bool:
        """Whether the plan depends on the hardware it is asked about (else a sweep fixes it once)."""
        return self.kind in ("search", "greedy", "callable")


@dataclass(frozen=True)
class _Search:
    """pm.search's gradient method for a fixed number of rounds, no wall-clock limit; replicas: its
    replica counts (1: 1D plans; "auto": 2D plans searched too)."""
    iterations: int
    seed: int
    replicas: object = 1
    sync_every: int = 1

    def __call__(self, system, model, start=None, progress: bool = False):
        from ..search.api import search
        return search(system, model, seed=self.seed, iterations=self.iterations, budget_s=None, start=start,
                      progress=progress, replicas=self.replicas, sync_every=self.sync_every)


@dataclass(frozen=True)
class _Greedy:
    """The greedy plan; replicas other than 1: pm.search's greedy method over those replica counts."""
    replicas: object = 1
    sync_every: int = 1

    def __call__(self, system, model):
        if self.replicas != 1:
            from ..search.api import search
            return search(system, model, "greedy", replicas=self.replicas, sync_every=self.sync_every)
        from ..search.greedy import greedy_plan
        return greedy_plan(system, model)


@dataclass(frozen=True)
class _Given:
    """A fixed plan; it must fit every system it is asked about."""
    plan: object

    def __call__(self, system, model):
        p = from_arrays(self.plan, system, model) if isinstance(self.plan, PlanArrays) else self.plan
        try:
            validate_plan(p, system, model)
        except ConfigError as err:
            raise ConfigError(err.source, err.field, f"the given plan does not fit {system.name}: {err.message}") \
                from None
        return p


@dataclass(frozen=True)
class _File:
    path: Path

    def __call__(self, system, model):
        try:
            return load_plan(self.path, system, model)
        except ConfigError as err:
            raise ConfigError(err.source, err.field, f"does not fit {system.name}: {err.message}") from None


def planner(plan="search", *, iterations: int | None = None, seed: int = 0, replicas=1,
            sync_every: int = 1) -> Planner:
    """The Planner for `plan` (see the module doc); iterations and seed apply to "search", replicas
    (pm.search's: 1, a count, a list or "auto") and sync_every (the most steps between the replicas'
    syncs) to "search" and "greedy"."""
    if isinstance(plan, Planner):
        return plan
    count = lambda x: isinstance(x, int) and not isinstance(x, bool)
    if iterations is not None and not (count(iterations) and iterations >= 1):
        raise ConfigError("", "iterations", f"must be an integer >= 1 (search rounds per point), got {iterations!r}")
    if not (count(seed) and seed >= 0):
        raise ConfigError("", "seed", f"must be an integer >= 0, got {seed!r}")
    if plan is None or plan == "search":
        n = iterations or STUDY_ITERATIONS
        return Planner(_Search(n, seed, replicas, sync_every),
                       f"search ({n} rounds, seed {seed}{_replicas_label(replicas, ', ', sync_every)})", "search", n, seed)
    if plan == "greedy":
        return Planner(_Greedy(replicas, sync_every), "greedy" + _replicas_label(replicas, sync_every=sync_every),
                       "greedy")
    fixed = getattr(plan, "plan", plan)
    if isinstance(fixed, (Plan, PlanArrays)):
        return Planner(_Given(fixed), "given plan", "fixed")
    if isinstance(plan, Path) or (isinstance(plan, str) and (plan.endswith(".json") or exists(plan))):
        path = Path(plan)
        try:
            found = path.is_file()
        except OSError as err:            # a name the OS refuses (too long)
            raise ConfigError(str(path), "plan", f"cannot be read: {err.strerror or err}") from None
        if not found:
            raise ConfigError(str(path), "plan", "does not exist; give 'search', 'greedy' or a plan JSON path")
        return Planner(_File(path), f"plan file {path.name}", "file")
    if callable(plan):
        return Planner(plan, getattr(plan, "__name__", type(plan).__name__), "callable")
    raise ConfigError("", "plan", f"is {plan!r}; allowed: 'search', 'greedy', a Plan, a plan JSON path or a "
                      "callable (system, model) -> Plan")


def _replicas_label(replicas, sep: str = " ", sync_every: int = 1) -> str:
    """How a planner's label names its replica counts and sync period ("" for 1D plans)."""
    if replicas == 1:
        return ""
    text = str(replicas) if isinstance(replicas, (int, str)) else ",".join(map(str, replicas))
    text += "" if sync_every == 1 else f", sync every <= {sync_every}"
    return f"{sep}(replicas {text})" if sep == " " else f"{sep}replicas {text}"


def _plan_job(make: Planner, system: System, model: RankingModel) -> Plan:
    """make(system, model): a module-level function, so worker processes and Ray tasks can run it."""
    return make(system, model)


def plans(make: Planner, problems, executor=None, workers: int | None = None, ray_address: str | None = None) -> list[Plan]:
    """[make(system, model) for system, model in problems], each problem planned on `executor`
    (executors.run: a local process pool by default, "serial", "ray" or an Executor), in order. A
    planner that depends on the hardware runs once per problem; a fixed plan is checked here."""
    from . import executors
    problems = list(problems)
    if not make.per_point:
        return [make(s, m) for s, m in problems]
    return executors.run(_plan_job, [(make, s, m) for s, m in problems], executor, workers, ray_address,
                         progress=progress_text(make))


def progress_text(make: Planner) -> str | None:
    """What a study's per-point planning says on stderr before it starts (None: too quick to say)."""
    if make.kind != "search":
        return None
    return f"searching a plan per point ({make.iterations} rounds each, seed {make.seed})"


def plan_for(system: System, model: RankingModel, plan="search", *, iterations: int | None = None,
             seed: int = 0) -> tuple[Plan, str]:
    """(the plan for this system and model, its label)."""
    make = planner(plan, iterations=iterations, seed=seed)
    return make(system, model), make.label


def searched_plan(make: Planner, system: System, model: RankingModel, progress: bool = False) -> tuple[Plan, bool]:
    """(the plan `make`, a planner("search", ...), makes for this problem, whether it came from disk).

    The same problem, rounds and seed give the same plan in any process, so the plan is kept in the
    compile cache's folder (when one is enabled: the CLI's default) under a digest of the System, the
    model, the rounds, the seed and this version of perfmodel: `evaluate` then answers with the searched
    plan at once after the first time, and `perfmodel cache --prune` clears plans of other versions.
    A file that does not parse is searched again; progress: the search's own bar on stderr."""
    import json
    import os

    from ..plan import plan_from_dict
    if make.kind != "search":
        raise ConfigError("", "plan", f"searched_plan keeps searched plans; {make.label} is not one")
    n, seed = make.iterations, make.seed
    path = _plan_file(system, model, n, seed)
    if path is not None and path.is_file():
        try:
            return plan_from_dict(json.loads(path.read_text()), system, model, str(path)), True
        except (ConfigError, ValueError, OSError):
            pass                                   # damaged or cut short: search again, write it anew
    from ..config import quiet
    if progress and not quiet():
        import sys
        print(f"searching a plan for {system.name} ({n} rounds, seed {seed}; kept for the next call; --plan greedy "
              "answers at once)", file=sys.stderr, flush=True)
    plan = make.make(system, model, None, progress).plan
    if path is not None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:                                       # whole or not at all: another process may read it
            tmp.write_text(json.dumps(plan.to_dict()))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
    return plan, False


def _plan_file(system: System, model: RankingModel, iterations: int, seed: int) -> Path | None:
    """Where searched_plan keeps this problem's plan (None: no compile cache folder is enabled)."""
    import hashlib

    import jax
    import numpy as np

    from ..cache import cache_folder, plan_file_name
    folder = cache_folder()
    if not folder or not Path(folder).is_dir():
        return None
    h = hashlib.sha256(f"{iterations}|{seed}".encode())     # (evaluate's default plan: 1D, replicas 1)
    for tree in (system, model):
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        h.update(str(treedef).encode())
        for leaf in leaves:
            a = np.asarray(leaf)
            h.update(f"{a.dtype}{a.shape}".encode() + a.tobytes())
    return Path(folder) / plan_file_name(h.hexdigest()[:32])
