"""`perfmodel validate` and `calibrate`: the model's error against published measurements, and a chip
fitted to this machine's JAX device."""

from __future__ import annotations

import json
import sys

from .args import add_json


def register(sub) -> None:
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
    add_json(v)
    v.set_defaults(func=_cmd_validate)

    c = sub.add_parser("calibrate", help="fit a chip's efficiency parameters to this machine's JAX device, or the "
                                         "presets to your cluster's measured steps (--steps)",
                       description="Time microbenchmarks (streaming, GEMMs, embedding bags) and whole reference "
                                   "DLRM steps on the local JAX device, fit the chip's efficiency parameters through "
                                   "the model (optax), report held-out median / p90 relative errors, and write the "
                                   "fitted chip as a preset TOML (every number with its source). Use it with "
                                   "`perfmodel evaluate --chip OUT.toml`. Times in seconds. "
                                   "With --steps CSV: fit the step validation's shared parameters (gemm, gather, "
                                   "latency) on your own measured steps, each at its run's plan, and write the "
                                   "calibrated chip and system presets into the folder --out (docs/calibration.md).")
    c.add_argument("--device", default="local", help="the device to calibrate: local (the default JAX device)")
    c.add_argument("--out", required=True, metavar="PATH", help="chip TOML to write (never overwrites); with --steps, "
                   "the folder to write the calibrated presets in (new, or without files of the same names)")
    c.add_argument("--steps", metavar="CSV", help="measured steps of your cluster in the step validation's format "
                   "(data/measurements/steps/*.csv; each row its planner in plan_settings or a plan_file column)")
    c.add_argument("--draws", type=int, default=1000, metavar="N",
                   help="with --steps: draws of the 80 %% interval before and after, per row (default 1000; 0: none)")
    c.add_argument("--base", help="chip preset whose unmeasured fields (NIC, offload, power, ...) "
                                  "the calibrated chip copies (default mtia300)")
    c.add_argument("--grid", default="default", choices=("default", "quick", "gpu", "tiny"),
                   help="benchmark grid (default and quick: CPU-sized; gpu: accelerator-sized; tiny: a smoke test)")
    c.add_argument("--dtype", choices=("fp32", "bf16"), help="GEMM / dense dtype (default: fp32 on a CPU, bf16 otherwise)")
    c.add_argument("--peaks", choices=("measured", "base"),
                   help="measured: fit the peak and bandwidth (a device with no published figures, the CPU default); "
                        "base: keep the base preset's and fit the efficiencies (the accelerator default)")
    c.add_argument("--measurements", metavar="CSV", help="also write every measurement and prediction to this CSV")
    add_json(c)
    c.set_defaults(func=_cmd_calibrate)


def _cmd_validate(args) -> int:
    from ..validate import format_all, run, summary
    kinds = args.kind
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if not (args.json or args.quiet) else (lambda m: None)
    rep = run(kinds, args.data, args.dataset, loso=not args.blind_only, log=log)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print(summary(rep) if args.summary else format_all(rep))
    return 0


def _cmd_calibrate(args) -> int:
    if args.steps is not None:
        return _cmd_calibrate_steps(args)
    from ..calibrate import calibrate, format_report
    args.base = args.base or "mtia300"
    opts = [f"--{k} {getattr(args, k)}" for k in ("dtype", "peaks", "measurements") if getattr(args, k)]
    command = " ".join([f"perfmodel calibrate --device {args.device} --out {args.out} --base {args.base} "
                        f"--grid {args.grid}", *opts])
    rep = calibrate(args.out, device=args.device, base=args.base, grid=args.grid, dtype=args.dtype,
                    peaks=args.peaks, measurements_out=args.measurements, command=command,
                    log=(lambda m: None) if args.quiet else
                    (lambda m: print(m, file=sys.stderr if args.json else sys.stdout, flush=True)))
    print(json.dumps(rep, indent=1) if args.json else format_report(rep))
    return 0


def _cmd_calibrate_steps(args) -> int:
    from ..calibrate.steps import calibrate_steps, format_report
    from ..config import ConfigError
    device_only = [f"--{k}" for k, v in (("base", args.base), ("dtype", args.dtype), ("peaks", args.peaks),
                                         ("measurements", args.measurements)) if v is not None]
    device_only += ["--grid"] * (args.grid != "default") + ["--device"] * (args.device != "local")
    if device_only:
        raise ConfigError("", device_only[0], "calibrates a chip on this machine's device; --steps fits the presets "
                          "of measured steps and takes --out and --draws only")
    if args.draws < 0:
        raise ConfigError("", "--draws", f"must be 0 (no interval) or a number of draws from 2, got {args.draws}")
    command = f"perfmodel calibrate --steps {args.steps} --out {args.out}"
    rep = calibrate_steps(args.steps, args.out, draws=args.draws, command=command,
                          log=(lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)))
    print(json.dumps(rep, indent=1) if args.json else format_report(rep))
    return 0
