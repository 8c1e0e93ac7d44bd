"""The calibration as a whole (calibrate), refitting recorded measurements (refit), the
measurements' CSV, the report, and the measuring subprocess's entry point (measure_main)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from ..files import check_output, open_new, write_new
from ..hardware import System, load_system
from .fit import errors, fit, split
from .io import chip_toml
from .timing import (
    DTYPE_NAMES,
    GRIDS,
    Measurement,
    step_dict,
    device_name,
    measure,
    measure_in_subprocess,
)

# ------------------------------------------------------------------------------------- driver

def calibrate(out: str | Path, *, device: str = "local", base: str = "mtia300", grid: str = "default",
              dtype: str | None = None, peaks: str | None = None, command: str | None = None,
              measurements_out: str | Path | None = None, log=print) -> dict:
    """Measure, fit, report and write the chip preset to `out` (never overwrites). Returns the report."""
    out = Path(out)
    if device != "local":
        raise ConfigError("", "device", f"is {device!r}; only 'local' is supported (run this on the machine to calibrate)")
    check_outputs(out, measurements_out)
    if grid not in GRIDS:
        raise ConfigError("", "grid", f"is {grid!r}; allowed: {', '.join(GRIDS)}")
    plat = jax.devices()[0].platform
    dtype = dtype or ("fp32" if plat == "cpu" else "bf16")
    if dtype not in DTYPE_NAMES:
        raise ConfigError("", "dtype", f"is {dtype!r}; allowed: {', '.join(DTYPE_NAMES)}")
    peaks = peaks or ("measured" if plat == "cpu" else "base")
    if peaks not in ("measured", "base"):
        raise ConfigError("", "peaks", f"is {peaks!r}; allowed: measured, base")
    family = Path(base).stem
    if family not in _families():
        raise ConfigError("", "base", f"is {base!r}; give a chip preset with a system family: {', '.join(_families())}")
    system = _local_system(family, peaks, None)
    g = GRIDS[grid]
    name = device_name()
    date = _dt.date.today().isoformat()
    command = command or f"perfmodel.calibrate.calibrate({str(out)!r}, base={family!r}, grid={grid!r})"
    t0 = time.perf_counter()
    log(f"calibrating on {name}, dtype {dtype}, grid {grid!r}")
    # a CPU is measured in a fresh process pinned to one thread; an accelerator right here
    fit_ms = measure_in_subprocess(grid, dtype, log) if plat == "cpu" else measure(g, dtype, log)
    stream = max((m for m in fit_ms if m.kind == "memory"), key=lambda m: m.params["bytes"])
    stream_Bps = stream.params["bytes"] / stream.seconds
    split(fit_ms)
    t1 = time.perf_counter()
    chip, hist = fit(fit_ms, system, dtype, peaks=peaks, stream_Bps=stream_Bps, iterations=g["iterations"])
    log(f"  fit              {g['iterations']} Adam steps, loss {hist[0]:.3g} -> {hist[-1]:.3g} ({time.perf_counter() - t1:.1f} s)")
    errs = errors(fit_ms)
    pk = {"fp32": "peak_fp32_flops", "bf16": "peak_bf16_flops"}[dtype]
    fitted = {k: "calibrated" for k in ("matmul_half_flop", "hbm_eff", "gather_eff_max", "gather_half_row_bytes", "launch_s")}
    if peaks == "measured":
        fitted[pk] = "calibrated (effective peak: no published peak for this device)"
        fitted["matmul_eff_max"] = "calibrated (1 by definition: the peak above is the fitted effective one)"
        fitted["hbm_Bps"] = (f"calibrated (effective memory bandwidth; streaming y = max(2x + 1, 0) over "
                             f"{stream.params['bytes'] / 2**21:.0f} MiB measured {stream_Bps / 1e9:.3g} GB/s)")
        fitted["hbm_eff"] = "calibrated (1 by definition: the bandwidth above is the fitted effective one)"
        fitted["llc_Bps"] = "calibrated (effective bandwidth of working sets that fit the cache below)"
        fitted["compute_units"] = "measured (one core: the measurements run pinned to it)"
        if local_llc_bytes():
            fitted["llc_bytes"] = "measured (the largest CPU cache in /sys/devices/system/cpu/cpu0/cache)"
        for other in ("peak_bf16_flops", "peak_fp8_flops", "peak_fp32_flops"):
            if other != pk:
                chip = dataclasses.replace(chip, **{other: getattr(chip, pk)})
                fitted[other] = f"calibrated ({dtype} peak; other dtypes not measured, set equal)"
    else:
        fitted["matmul_eff_max"] = "calibrated"
    stats = {"n_train": sum(m.train for m in fit_ms), "n_held_out": sum(not m.train for m in fit_ms), "errors": errs}
    text = chip_toml(out.stem, chip, family, name, date, command, fitted, stats, same_chip=peaks == "base")
    write_new(out, text)
    from ..hardware import load_chip
    load_chip(out)                           # the file is a valid chip preset
    report = {"device": name, "date": date, "dtype": dtype, "grid": grid, "base": family, "out": str(out),
              "stream_GBps": stream_Bps / 1e9, "seconds": time.perf_counter() - t0, "errors": errs,
              "fitted": {k: float(np.asarray(getattr(chip, k))) for k in
                         ("peak_fp32_flops", "peak_bf16_flops", "matmul_eff_max", "matmul_half_flop", "hbm_Bps",
                          "hbm_eff", "llc_bytes", "llc_Bps", "gather_eff_max", "gather_half_row_bytes", "launch_s")},
              "loss": hist[-1],
              "measurements": [{"kind": m.kind, "name": m.name, "measured_s": m.seconds, "predicted_s": m.predicted,
                                "reps": m.reps, "split": "train" if m.train else "held_out"} for m in fit_ms]}
    if measurements_out:
        write_measurements(measurements_out, fit_ms, name, date)
    return report


def _families() -> list[str]:
    from ..config import preset_names
    return preset_names("systems")


def check_outputs(out, measurements_out=None) -> None:
    """The chip TOML and the measurements' CSV, each a new file that can be written, checked before
    minutes of timing (files.check_output)."""
    outputs = [(out, (".toml",), "chip TOML")]
    if measurements_out:
        outputs.append((measurements_out, (".csv",), "measurements CSV"))
    for p, formats, what in outputs:
        try:                        # the missing folder in the words calibrate has always used
            missing = not Path(p).parent.is_dir()
        except OSError:             # a name the OS refuses: check_output names it
            missing = False
        if missing:
            raise ConfigError(str(p), "", "cannot be written: its folder does not exist")
        check_output(p, formats, what)


def write_measurements(path, ms: list[Measurement], device: str, date: str) -> None:
    import csv
    with open_new(path, newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "name", "measured_s", "predicted_s", "reps", "split", "device", "date", "params",
                    "load_1min"])
        for m in ms:
            params = {k: v for k, v in m.params.items() if k != "config"}
            w.writerow([m.kind, m.name, f"{m.seconds:.6g}", "" if math.isnan(m.predicted) else f"{m.predicted:.6g}",
                        m.reps, "train" if m.train else "held_out", device, date, json.dumps(params),
                        "" if math.isnan(m.load_1min) else f"{m.load_1min:.2f}"])


def read_measurements(path, dtype: str = "fp32") -> list[Measurement]:
    """The measurements of a CSV written by write_measurements, split as recorded, ready to refit.
    A step row's configuration is rebuilt from its params (or, in files written before they held
    it, from the grid entry of the same name)."""
    import csv
    by_name = {}
    for g in GRIDS.values():
        for c in g["step"]:
            by_name.setdefault(step_dict(*c, dtype)["name"], c)
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            p = json.loads(r["params"] or "{}")
            if r["kind"] == "step":
                if "tables" in p:
                    c = (p["tables"], p["dim"], p["pooling"], p["batch"], tuple(p["bottom"]), tuple(p["top"]),
                         p["interaction"], p["rows"])
                elif r["name"] in by_name:
                    c = by_name[r["name"]]
                else:
                    raise ConfigError(str(path), f"step {r['name']}", "has no configuration in its params")
                p = {"config": step_dict(*c, dtype), **p}
            load = r.get("load_1min") or "nan"
            out.append(Measurement(r["kind"], r["name"], p, float(r["measured_s"]), int(r["reps"]),
                                   r["split"] == "train", load_1min=float(load)))
    return out


def refit(path, *, base: str = "mtia300", dtype: str = "fp32", peaks: str = "measured",
          llc_bytes: float | None = None, iterations: int | None = None) -> tuple[object, list[Measurement]]:
    """Fit the current cost model to recorded measurements (a CSV of write_measurements), timing
    nothing: (fitted chip, measurements with their new predictions). The split is the recorded one.
    llc_bytes: the measured device's last-level cache (default: this machine's, on a CPU)."""
    ms = read_measurements(path, dtype)
    system = _local_system(Path(base).stem, peaks, llc_bytes)
    stream = max((m for m in ms if m.kind == "memory"), key=lambda m: m.params["bytes"])
    chip, _ = fit(ms, system, dtype, peaks=peaks, stream_Bps=stream.params["bytes"] / stream.seconds,
                  iterations=iterations or GRIDS["default"]["iterations"])
    return chip, ms


def local_llc_bytes() -> float | None:
    """The size of this machine's largest CPU cache (sysfs; the L3 on most x86 machines), or None."""
    best = None
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, size = int((d / "level").read_text()), (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:].upper(), 1)
        try:
            nbytes = float(size.rstrip("KkMmGg")) * unit
        except ValueError:
            continue
        if best is None or level > best[0]:
            best = (level, nbytes)
    return best[1] if best else None


def _local_system(family: str, peaks: str, llc_bytes: float | None) -> System:
    """The one-chip system the fit starts from; a device with no published figures (peaks
    'measured', a CPU) gets this machine's last-level cache size in place of the base chip's, and
    one compute unit (the measurement process is pinned to one core)."""
    system = load_system(f"{family}-1")
    if peaks == "measured":
        chip = dataclasses.replace(system.chip, compute_units=jnp.float32(1.0))
        llc = llc_bytes if llc_bytes is not None else local_llc_bytes()
        if llc:
            chip = dataclasses.replace(chip, llc_bytes=jnp.float32(llc))
        system = system.replace(chip=chip)
    return system


def format_report(r: dict) -> str:
    lines = [f"calibrated {r['out']} on {r['device']} ({r['date']}, {r['dtype']}, {r['seconds']:.0f} s)",
             f"  streaming bandwidth {r['stream_GBps']:.2f} GB/s",
             "  fitted: " + ", ".join([f"peak {r['fitted']['peak_fp32_flops' if r['dtype'] == 'fp32' else 'peak_bf16_flops'] / 1e12:.3g} TFLOP/s",
                                       f"matmul eff max {r['fitted']['matmul_eff_max']:.3f}",
                                       f"half at {r['fitted']['matmul_half_flop'] / 1e6:.3g} MFLOP",
                                       f"hbm eff {r['fitted']['hbm_eff']:.3f}",
                                       f"llc {r['fitted'].get('llc_bytes', float('nan')) / 2**20:.3g} MiB at "
                                       f"{r['fitted'].get('llc_Bps', float('nan')) / 1e9:.3g} GB/s",
                                       f"gather eff max {r['fitted']['gather_eff_max']:.3f}",
                                       f"gather half {r['fitted']['gather_half_row_bytes']:.3g} B",
                                       f"launch {r['fitted']['launch_s'] * 1e6:.3g} us"]),
             f"  {'relative error':<22} {'n':>3} {'median':>8} {'p90':>8}"]
    for k, v in r["errors"].items():
        lines.append(f"  {k:<22} {v['n']:>3} {100 * v['median']:>7.1f}% {100 * v['p90']:>7.1f}%")
    st = r["errors"].get("step/held_out")
    if st:
        ok = st["median"] <= 0.15 and st["p90"] <= 0.30
        lines.append(f"  held-out whole steps: median {100 * st['median']:.1f} % (target <= 15 %), "
                     f"p90 {100 * st['p90']:.1f} % (target <= 30 %): {'met' if ok else 'MISSED'}")
    return "\n".join(lines)


def measure_main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m perfmodel.calibrate measure")
    ap.add_argument("what", choices=("measure", "refit"))
    ap.add_argument("--grid", default="default", choices=tuple(GRIDS))
    ap.add_argument("--dtype", default="fp32", choices=tuple(DTYPE_NAMES))
    ap.add_argument("--out", help="measure: the JSON to write")
    ap.add_argument("--csv", help="refit: measurements written by `perfmodel calibrate --measurements`")
    ap.add_argument("--base", default="mtia300", help="refit: the base chip preset")
    ap.add_argument("--peaks", default="measured", choices=("measured", "base"), help="refit: as calibrate's")
    a = ap.parse_args(argv)
    if a.what == "refit":
        if not a.csv:
            ap.error("refit needs --csv")
        chip, ms = refit(a.csv, base=a.base, dtype=a.dtype, peaks=a.peaks)
        fields = ("peak_fp32_flops", "peak_bf16_flops", "matmul_eff_max", "matmul_half_flop", "hbm_Bps", "hbm_eff",
                  "llc_bytes", "llc_Bps", "gather_eff_max", "gather_half_row_bytes", "launch_s")
        print(format_report({"out": "(not written: refit)", "device": a.csv, "date": "recorded", "dtype": a.dtype,
                             "seconds": 0.0, "stream_GBps": float("nan"), "errors": errors(ms),
                             "fitted": {k: float(np.asarray(getattr(chip, k))) for k in fields}}))
        for m in ms:
            print(f"  {m.kind:<9} {m.name:<44} {'train' if m.train else 'held':<5} measured {m.seconds * 1e3:9.4f} ms"
                  f"  predicted {m.predicted * 1e3:9.4f} ms  {100 * (m.predicted / m.seconds - 1):+6.1f} %")
        return 0
    if not a.out:
        ap.error("measure needs --out")
    check_output(a.out, (".json",), "measurements JSON")    # a new file, found before minutes of timing
    from ..cache import enable_compile_cache
    enable_compile_cache()                 # a second calibration skips the compiles
    ms = measure(GRIDS[a.grid], a.dtype, log=lambda m: print(m, flush=True))
    write_new(a.out, json.dumps({"device": device_name(), "measurements": [dataclasses.asdict(m) for m in ms]}))
    return 0


