"""The arguments that several commands share, and how every argument is read.

Every text argument (one without a `type`) refuses an empty value: `--plan ""` is a mistake, never
"not given", and `perfmodel: error: field '--plan': is empty` says so before the command works. An
argument whose empty value means something declares `type=maybe_empty` where it is defined.
"""

from __future__ import annotations

import argparse

from ..config import ConfigError


class _Empty(str):
    """The value of a text argument given empty (only refuse_empty sees one)."""


def _text(value: str) -> str:
    return _Empty(value) if not value.strip() else value


def maybe_empty(value: str) -> str:
    """The type of a text argument whose empty value means something (e.g. `--compare ""`: none)."""
    return value


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose text arguments refuse an empty value (refuse_empty); its subparsers
    are Parsers too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", None, _text)      # the type of every argument declared without one


def refuse_empty(args) -> None:
    """ConfigError naming the first text argument given empty."""
    for dest, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, _Empty):
                raise ConfigError("", f"--{dest.replace('_', '-')}", "is empty; give a value (or leave the flag out)")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")


def add_uncertainty(p: argparse.ArgumentParser, what: str = "the figures") -> None:
    """--uncertainty [N], --uncertainty-seed, --no-model-error: answers with error bars."""
    from ..uncertainty import DEFAULT_DRAWS, MAX_DRAWS
    p.add_argument("--uncertainty", type=int, nargs="?", const=DEFAULT_DRAWS, metavar="N",
                   help=f"also give {what} as p10 / p50 / p90 over N draws (default {DEFAULT_DRAWS:,}, at most "
                        f"{MAX_DRAWS:,}) of every uncertain input of the files (each number's stated range, else one "
                        "by its provenance: docs/configuration.md) and the model's own error from validation")
    p.add_argument("--uncertainty-seed", type=int, default=0, metavar="S", help="seed of the draws (default 0)")
    p.add_argument("--no-model-error", action="store_true",
                   help="with --uncertainty: the inputs' spread alone, without the model's own error")


def uncertainty_of(args) -> dict | None:
    """propagate's keyword arguments from --uncertainty (None without it); a bad N or seed is a
    ConfigError naming the flag."""
    if getattr(args, "uncertainty", None) is None:
        if getattr(args, "no_model_error", False):
            raise ConfigError("", "--no-model-error", "takes --uncertainty [N]: without it the answer is the nominal "
                              "figures, with no spread to leave the model's error out of")
        return None
    from ..uncertainty.propagate import NO_MODEL_ERROR, check_draws, check_seed
    return {"draws": check_draws(args.uncertainty, "--uncertainty"),
            "seed": check_seed(args.uncertainty_seed, "--uncertainty-seed"),
            "model_error": NO_MODEL_ERROR if args.no_model_error else None}


# ------------------------------------------------------------------------------------------ the system

CHIPS_HELP = ("the system at N chips (its last scale-up domain may be partial: 40 = racks of 16, 16 and 8), in place "
              "of the size in a preset's name or a TOML's first size, e.g. --chips 32")


def add_chips(p: argparse.ArgumentParser, help: str = CHIPS_HELP) -> None:
    """--chips N beside --system: the system's family at N chips."""
    p.add_argument("--chips", metavar="N", help=help)


def chip_count(text) -> int | None:
    """--chips as a whole number of chips (None when absent); ConfigError naming --chips otherwise."""
    from ..schema import MAX_CHIPS
    if text is None:
        return None
    try:
        n = int(str(text).strip())
    except ValueError:
        n = None
    if n is None or not 1 <= n <= MAX_CHIPS:
        raise ConfigError("", "--chips", f"must be one whole number of chips from 1 to {MAX_CHIPS:,}, got {text!r}")
    return n


def load_system_arg(args, attr: str = "system"):
    """The System that --system (or `attr`), --chips and --chip name; a size the family cannot have
    is an error of --chips where --chips gave it."""
    from ..hardware import load_system
    chips = chip_count(getattr(args, "chips", None))
    try:
        return load_system(getattr(args, attr), chips=chips, chip=getattr(args, "chip", None))
    except ConfigError as err:
        if chips is not None and err.source == "" and err.field == "chips":
            raise ConfigError("", "--chips", err.message) from None
        raise


def system_flags(args, attr: str = "system") -> str:
    """The system's flags as the user gave them (`--system X --chips N --chip C`), for a command to print."""
    flags = [f"--system {getattr(args, attr)}"]
    flags += [f"--{k} {getattr(args, k)}" for k in ("chips", "chip") if getattr(args, k, None) is not None]
    return " ".join(flags)


# ------------------------------------------------------------------------------------------ the problem and its plan

def add_planning(p, executors: bool = False) -> None:
    """--plan, --iterations, --seed (and --workers, --ray where points are searched in parallel)."""
    p.add_argument("--plan", help="search (default: a search per system or point), greedy, or a plan JSON (fixed; "
                                  "it must fit every system)")
    p.add_argument("--iterations", type=int, help="search rounds per system or point (default "
                                                  "perfmodel.analysis.STUDY_ITERATIONS, 300)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--replicas", default="1", help="2D sparse parallelism in the searches: 1 (default, every table "
                   "over every chip), a count, a comma-separated list, or auto (every count the system allows)")
    p.add_argument("--sync-every", type=int, default=1, help="with --replicas: the most steps between the "
                   "replicas' synchronizations (default 1, every step)")
    if executors:
        p.add_argument("--workers", type=int,
                       help="processes searching points in parallel (default: $PERFMODEL_WORKERS, else the cores)")
        p.add_argument("--ray", metavar="ADDRESS", help="search points on the Ray cluster at ADDRESS (host:port), or "
                                                        "'local' to start one here with as many CPUs as --workers "
                                                        "would give the pool (pip install 'perfmodel[distributed]')")


def add_problem(p, executors: bool = False, required: bool = True) -> None:
    """The arguments that name one problem and its plan: --system (and --chips), --model, --chip,
    then add_planning's (with --workers and --ray where `executors`). required=False: the command
    checks --system and --model itself (a mode of it needs neither)."""
    p.add_argument("--system", required=required, help="system preset or TOML path")
    add_chips(p)
    p.add_argument("--model", required=required, help="model preset or TOML path")
    p.add_argument("--chip", help="replace the system's chip by this chip preset or TOML")
    add_planning(p, executors)


def planner_of(args):
    """The Planner of --plan, --iterations, --seed and --replicas."""
    from ..analysis.planning import planner
    return planner(args.plan or "search", iterations=args.iterations, seed=args.seed,
                   replicas=replica_arg(getattr(args, "replicas", "1")), sync_every=sync_every_arg(args) or 1)


def sync_every_arg(args) -> int | None:
    """--sync-every checked (one error naming the flag), or None where it is not given."""
    from ..hardware import sync_every_problem
    k = getattr(args, "sync_every", None)
    why = None if k is None else sync_every_problem(k)
    if why is not None:
        raise ConfigError("", "--sync-every", why)
    return k


def replica_arg(text: str, flag: str = "--replicas"):
    """--replicas as pm.search's replicas: 'auto', a count, or a list of counts."""
    if text.strip() == "auto":
        return "auto"
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ConfigError("", flag, f"is {text!r}; give 1, a count (e.g. 4), a list (e.g. 1,2,4) or auto")
    return counts[0] if len(counts) == 1 else counts


def executors_of(args) -> dict:
    """executor, workers and ray_address of --workers and --ray, checked before any work."""
    from ..analysis import executors
    executors.check_workers(args.workers, "--workers")
    if args.ray:
        executors.check_address(args.ray, "--ray")
    return dict(executor="ray" if args.ray else None, workers=args.workers, ray_address=args.ray)
