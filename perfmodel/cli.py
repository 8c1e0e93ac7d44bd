"""The `perfmodel` command line: evaluate, list and cache here; search, sweep, sensitivity, compare, trace,
plot, validate and calibrate in the modules it registers.

A user's mistake ends in one line, `perfmodel: error: <file or argument>: field '<x>': <what is
allowed>`, and exit code 2; Ctrl-C in one line and exit code 130. Any other exception is
perfmodel's own fault and shows its traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import interrupt
from .cache import enable_compile_cache
from .config import QUIET, ConfigError, read_file


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")


CHIPS_HELP = ("the system at N chips (its last scale-up domain may be partial: 40 = racks of 16, 16 and 8), in place "
              "of the size in a preset's name or a TOML's first size, e.g. --chips 32")


def add_chips(p: argparse.ArgumentParser, help: str = CHIPS_HELP) -> None:
    """--chips N beside --system: the system's family at N chips."""
    p.add_argument("--chips", metavar="N", help=help)


def chip_count(text) -> int | None:
    """--chips as a whole number of chips (None when absent); ConfigError naming --chips otherwise."""
    from .schema import MAX_CHIPS
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
    from .hardware import load_system
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


def check_plan_output(path) -> None:
    """A plan is written as JSON, which `--plan` reads back: a new .json file where one can be written."""
    if path is not None:
        from .files import check_output
        check_output(path, (".json",), "plan JSON")


def _cmd_evaluate(args) -> int:
    from . import evaluate, load_model
    from .report import format_breakdown, to_dict

    check_plan_output(args.save_plan)
    system = load_system_arg(args)
    model = load_model(args.model)
    guard = None
    if args.guard is not None:
        from .search.guard import load_shard_costs
        guard = load_shard_costs(args.guard, system, model)
    plan, src = _evaluated_plan(args, system, model)
    from .constraints import for_command, plan_violations
    broken = plan_violations(plan, for_command(args.model, args.constraints), system, model)
    bd = evaluate(system, model, plan)
    if args.save_plan is not None:
        plan.save(args.save_plan)
    value = guard.value(plan, system, model) if guard is not None else None
    met = guard is not None and guard.within(value)
    if args.json:
        out = {"system": system.name, "model": model.name, "plan": plan.to_dict(), **to_dict(bd, args.per_device)}
        if guard is not None:
            out["guard"] = {"name": guard.name, "value_s": value, "cap_s": float(guard.cap), "met": met}
        out["constraint_violations"] = [{"field": f, "message": m} for f, m in broken]
        print(json.dumps(out, indent=2))
    else:
        print(format_breakdown(bd, f"{model.name} on {system.name} ({system.num_chips} x {system.chip.name}), plan: {src}"))
        if guard is not None:
            from .cli_search import guard_line
            print(guard_line(guard.name, args.guard, value, float(guard.cap), met))
        for f, m in broken:
            print(f"constraint broken: {f} {m}")
    return 0


def _evaluated_plan(args, system, model):
    """(plan, its label) of evaluate's --plan: "search" (the default: the plan every study searches for
    this hardware, kept on disk after the first time), "greedy", or a plan JSON."""
    from . import default_plan, load_plan
    if args.plan == "greedy":
        return default_plan(system, model), "greedy"
    if args.plan not in (None, "search"):
        return load_plan(args.plan, system, model), args.plan
    from .analysis.planning import planner, searched_plan
    make = planner("search", iterations=args.iterations, seed=args.seed)      # checks both
    plan, kept = searched_plan(make, system, model, progress=not args.json)
    return plan, make.label + (", kept from an earlier call" if kept else "")


def _cmd_list(args) -> int:
    from .config import preset_names, preset_path
    from .hardware import system_families

    chips = [(n, read_file(preset_path("chips", n)).get("description", "")) for n in preset_names("chips")]
    models = [(n, read_file(preset_path("models", n)).get("description", "")) for n in preset_names("models")]
    systems = system_families()
    if args.json:
        print(json.dumps({
            "systems": [{"family": f, "sizes": s, "names": [f"{f}-{n}" for n in s], "description": d} for f, s, d in systems],
            "chips": [{"name": n, "description": d} for n, d in chips],
            "models": [{"name": n, "description": d} for n, d in models],
        }, indent=2))
        return 0
    print("systems (use <family>-<chips>, e.g. mtia300-64):")
    for f, s, d in systems:
        print(f"  {f + '-{' + ','.join(map(str, s)) + '}':<28} {d}")
    print("chips:")
    for n, d in chips:
        print(f"  {n:<28} {d}")
    print("models:")
    for n, d in models:
        print(f"  {n:<28} {d}")
    return 0


def _cmd_cache(args) -> int:
    import jax

    from .cache import CACHE_KINDS, cache_files, remove_cache_files

    folder = jax.config.jax_compilation_cache_dir
    if not folder:
        print("the compile cache is off (PERFMODEL_CACHE_DIR is empty)")
        return 0

    def listed():
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise ConfigError(folder, "", "is not a folder (the compile cache's: PERFMODEL_CACHE_DIR)")
        try:
            return cache_files(folder) if os.path.isdir(folder) else []
        except OSError as err:
            raise ConfigError(folder, "", f"the compile cache's folder cannot be read: {err.strerror}") from None

    files = listed()
    removed = None
    if args.prune or args.clear:
        try:
            removed = remove_cache_files([f for f in files if args.clear or f["stale"]])
        except OSError as err:
            raise ConfigError(folder, "", f"a cache file cannot be removed: {err.strerror}: {err.filename}") from None
        files = listed()
    rows = {k: {"files": 0, "bytes": 0, "stale_files": 0, "stale_bytes": 0} for k in CACHE_KINDS}
    for f in files:
        r = rows[f["kind"]]
        r["files"], r["bytes"] = r["files"] + 1, r["bytes"] + f["bytes"]
        if f["stale"]:
            r["stale_files"], r["stale_bytes"] = r["stale_files"] + 1, r["stale_bytes"] + f["bytes"]
    if args.json:
        out = {"folder": folder, "kinds": rows, "bytes": sum(r["bytes"] for r in rows.values())}
        if removed is not None:
            out["removed"] = {"files": removed[0], "bytes": removed[1]}
        print(json.dumps(out, indent=2))
        return 0
    mb = lambda b: f"{b / 1e6:8.2f} MB"
    if removed is not None:
        print(f"removed {removed[0]} files, {mb(removed[1]).strip()} ({'all cache files' if args.clear else 'other versions'})")
    print(f"compile cache: {folder}")
    for k, label in CACHE_KINDS.items():
        r = rows[k]
        stale = f"   {r['stale_files']} of other versions, {mb(r['stale_bytes']).strip()}" if r["stale_files"] else ""
        print(f"  {label:<34} {r['files']:6d} {mb(r['bytes'])}{stale}")
    print(f"  {'total':<34} {len(files):6d} {mb(sum(f['bytes'] for f in files))}")
    if any(f["stale"] for f in files):
        print("`perfmodel cache --prune` removes the files of other versions of perfmodel or jax; --clear, all of them")
    return 0


def _cmd_schema(args) -> int:
    """schema --markdown PATH, the path checked first: a folder, a name the OS refuses or a missing
    folder is one line, as for every output."""
    from pathlib import Path

    from .schema import write
    path = Path(args.markdown)
    try:
        folder, parent = path.is_dir(), path.parent.is_dir()
    except OSError as err:
        raise ConfigError(str(path), "", f"cannot be written: {err.strerror or err}") from None
    if folder:
        raise ConfigError(str(path), "", "is a folder; give the markdown file's path (e.g. docs/configuration.md)")
    if not parent:
        raise ConfigError(str(path), "", f"its folder {str(path.parent)!r} does not exist")
    return write(path)


def _register_analysis(sub) -> None:
    """sweep, scaling, trace and plot (perfmodel/cli_analysis.py); sensitivity and compare (perfmodel/cli_studies.py)."""
    from .cli_analysis import register
    register(sub)
    from .cli_studies import register as register_studies
    register_studies(sub)


def _register_search(sub) -> None:
    """search (perfmodel/cli_search.py)."""
    from .cli_search import register
    register(sub)


def _register_tables(sub) -> None:
    """import-tables (perfmodel/cli_tables.py)."""
    from .cli_tables import register
    register(sub)


def _register_fidelity(sub) -> None:
    """validate (published collective measurements) and calibrate (the local JAX device)."""
    def cmd_validate(args) -> int:
        from .validate import format_all, run, summary
        kinds = args.kind
        log = (lambda m: print(m, file=sys.stderr, flush=True)) if not (args.json or args.quiet) else (lambda m: None)
        rep = run(kinds, args.data, args.dataset, loso=not args.blind_only, log=log)
        if args.json:
            print(json.dumps(rep, indent=1))
        else:
            print(summary(rep) if args.summary else format_all(rep))
        return 0

    def cmd_calibrate(args) -> int:
        from .calibrate import calibrate, format_report
        opts = [f"--{k} {getattr(args, k)}" for k in ("dtype", "peaks", "measurements") if getattr(args, k)]
        command = " ".join([f"perfmodel calibrate --device {args.device} --out {args.out} --base {args.base} "
                            f"--grid {args.grid}", *opts])
        rep = calibrate(args.out, device=args.device, base=args.base, grid=args.grid, dtype=args.dtype,
                        peaks=args.peaks, measurements_out=args.measurements, command=command,
                        log=(lambda m: None) if args.quiet else
                        (lambda m: print(m, file=sys.stderr if args.json else sys.stdout, flush=True)))
        print(json.dumps(rep, indent=1) if args.json else format_report(rep))
        return 0

    v = sub.add_parser("validate", help="the model's error against published measurements",
                       description="Every dataset in data/measurements: whole training steps (steps/: the model's "
                                   "best plan for each run, searched to its end, blind and leave-one-system-out "
                                   "calibrated; several minutes), compute slowed by concurrent collectives "
                                   "(contention/) and collective curves (collectives/: blind, and with the network's "
                                   "latency and bandwidth scales fitted on half of the message sizes, on the other "
                                   "half). Errors are of the time.")
    v.add_argument("--kind", action="append", choices=("collectives", "contention", "steps"),
                   help="only this kind of measurement; repeatable (default: all)")
    v.add_argument("--data", metavar="DIR", help="folder holding collectives/, contention/, steps/, or a folder of CSVs of one --kind "
                   "(default: data/measurements)")
    v.add_argument("--dataset", action="append", metavar="NAME", help="only this dataset (file stem); repeatable")
    v.add_argument("--summary", action="store_true", help="one line per dataset, no per-row table")
    v.add_argument("--blind-only", action="store_true", help="steps: skip the leave-one-system-out calibration")
    _add_common(v)
    v.set_defaults(func=cmd_validate)

    c = sub.add_parser("calibrate", help="fit a chip's efficiency parameters to this machine's JAX device",
                       description="Time microbenchmarks (streaming, GEMMs, embedding bags) and whole reference "
                                   "DLRM steps on the local JAX device, fit the chip's efficiency parameters through "
                                   "the model (optax), report held-out median / p90 relative errors, and write the "
                                   "fitted chip as a preset TOML (every number with its source). Use it with "
                                   "`perfmodel evaluate --chip OUT.toml`. Times in seconds.")
    c.add_argument("--device", default="local", help="the device to calibrate: local (the default JAX device)")
    c.add_argument("--out", required=True, metavar="PATH", help="chip TOML to write (never overwrites)")
    c.add_argument("--base", default="mtia300", help="chip preset whose unmeasured fields (NIC, offload, power, ...) "
                                                     "the calibrated chip copies (default mtia300)")
    c.add_argument("--grid", default="default", choices=("default", "quick", "gpu", "tiny"),
                   help="benchmark grid (default and quick: CPU-sized; gpu: accelerator-sized; tiny: a smoke test)")
    c.add_argument("--dtype", choices=("fp32", "bf16"), help="GEMM / dense dtype (default: fp32 on a CPU, bf16 otherwise)")
    c.add_argument("--peaks", choices=("measured", "base"),
                   help="measured: fit the peak and bandwidth (a device with no published figures, the CPU default); "
                        "base: keep the base preset's and fit the efficiencies (the accelerator default)")
    c.add_argument("--measurements", metavar="CSV", help="also write every measurement and prediction to this CSV")
    _add_common(c)
    c.set_defaults(func=cmd_calibrate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfmodel",
        description="Differentiable performance model of distributed training for ranking models. "
                    "Tables print times in ms or us, sizes in GB and bandwidths in GB/s, the unit in each "
                    "column's name or beside each number; --json gives SI units (s, bytes, bytes/s, samples/s).")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("evaluate", help="step time, breakdown, memory and cost of one plan",
                        description="Evaluate one training step of MODEL on SYSTEM under a plan "
                                    "(the searched one unless --plan says greedy or a file). Inputs are TOML "
                                    "(systems, chips, models) and JSON (plans). Results: times in seconds "
                                    "(the table prints ms / us), sizes in bytes, throughput in samples/s; "
                                    "every --json key carries its unit (step_s, memory_max_bytes).")
    ev.add_argument("--system", required=True, help="system preset <family>-<chips> (e.g. mtia300-64) or a system TOML path")
    add_chips(ev)
    ev.add_argument("--model", required=True, help="model preset (e.g. dlrm-dcnv2-mlperf) or a model TOML path")
    ev.add_argument("--plan", help="search (the default: the plan searched for this system, as every study uses; "
                    "kept on disk for the next call), greedy, or a plan JSON (per-table sharding_type + ranks, "
                    "TorchRec names)")
    ev.add_argument("--iterations", type=int, help="with --plan search: rounds (default "
                    "perfmodel.analysis.STUDY_ITERATIONS, 300)")
    ev.add_argument("--seed", type=int, default=0, help="with --plan search: seed (default 0)")
    ev.add_argument("--chip", help="replace the system's chip by this chip preset or chip TOML (e.g. a calibrated one)")
    ev.add_argument("--constraints", metavar="FILE", help="per-table constraints to check the plan against (TOML/JSON; "
                    "the model file's [constraints.<table>] are checked too); each one the plan breaks is reported")
    ev.add_argument("--save-plan", metavar="PATH", help="write the evaluated plan as JSON (never overwrites)")
    ev.add_argument("--per-device", action="store_true", help="with --json: include per-device arrays")
    ev.add_argument("--guard", metavar="FILE", help="also give the plan's value in a second cost model (per-shard "
                    "costs summed per device, as `search --guard` reads them, e.g. TorchRec's estimate) and its cap")
    _add_common(ev)
    ev.set_defaults(func=_cmd_evaluate)

    ls = sub.add_parser("list", help="the bundled systems, chips and models, one line each")
    _add_common(ls)
    ls.set_defaults(func=_cmd_list)

    ca = sub.add_parser("cache", help="the compile cache's folder and what it holds; prune or clear it",
                        description="The persistent compile cache (~/.cache/perfmodel/jax, or $PERFMODEL_CACHE_DIR; "
                                    "empty turns it off): XLA's compiled programs, and perfmodel's traced programs, "
                                    "executables and marks, with the share left by other versions of perfmodel or jax. "
                                    "Other files in the folder are neither counted nor removed.")
    act = ca.add_mutually_exclusive_group()
    act.add_argument("--prune", action="store_true",
                     help="remove perfmodel's files of other versions (and the XLA programs compiled for them)")
    act.add_argument("--clear", action="store_true", help="remove every cache file: the next search compiles again")
    _add_common(ca)
    ca.set_defaults(func=_cmd_cache)
    sc = sub.add_parser("schema", help="write the configuration reference (every field of every file) as markdown")
    sc.add_argument("--markdown", required=True, metavar="PATH", help="the file to write (docs/configuration.md); "
                    "only a file this command wrote is replaced")
    sc.set_defaults(func=_cmd_schema)
    _register_analysis(sub)
    _register_search(sub)
    _register_tables(sub)
    _register_fidelity(sub)
    for p in sub.choices.values():
        if not any("--quiet" in a.option_strings for a in p._actions):
            p.add_argument("--quiet", action="store_true", help="no progress on stderr (errors still print)")
    return parser


# arguments that name a file, a preset or a list: an empty one is a mistake, never "not given"
_NOT_EMPTY = ("system", "model", "chip", "plan", "save_plan", "guard", "constraints", "markdown", "out", "plot", "data",
              "measurements", "base", "systems", "chips", "devices", "vary", "dataset", "precisions", "co_design", "x", "y",
              "csv", "dense", "name", "torchrec_module")


def _refuse_empty(args) -> None:
    for dest in _NOT_EMPTY:
        value = getattr(args, dest, None)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and not v.strip():
                raise ConfigError("", f"--{dest.replace('_', '-')}", "is empty; give a value (or leave the flag out)")


def _interrupted(whole_process: bool) -> int:
    """Ctrl-C: one line and exit code 130 (128 + SIGINT). Results are written only at the end, so
    nothing is left half-written. Work still running in other threads (an XLA compile cannot be
    stopped) would hold the process until it ends, or crash it at the interpreter's shutdown: when
    main() is the whole process (no argv: the console script, python -m perfmodel), the process ends now."""
    if whole_process:
        interrupt.exit_now()
    print(interrupt.MESSAGE, file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    if argv is None:               # the whole process is the command: Ctrl-C at any moment (perfmodel/interrupt.py)
        interrupt.install()
    args = build_parser().parse_args(argv)
    enable_compile_cache()
    quiet_before = os.environ.get(QUIET)
    if getattr(args, "quiet", False):      # read by every progress line, in this process and its workers
        os.environ[QUIET] = "1"
    try:
        with interrupt.armed():
            _refuse_empty(args)
            rc = args.func(args)
            interrupt.check()      # a Ctrl-C that a callback swallowed is still an interrupt
            sys.stdout.flush()     # inside the try: a reader gone shows here, not at exit
        return rc
    except ConfigError as err:
        print(f"perfmodel: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(whole_process=argv is None)
    except BrokenPipeError:        # the reader went away (`perfmodel search ... | head`): stop quietly
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())    # no second error at exit's flush
        except (OSError, ValueError, AttributeError):    # a stdout with no file descriptor (captured)
            pass
        return 141
    finally:                   # main() called from Python (a test, a notebook) leaves the environment as it was
        if quiet_before is None:
            os.environ.pop(QUIET, None)
        else:
            os.environ[QUIET] = quiet_before


if __name__ == "__main__":
    sys.exit(main())
