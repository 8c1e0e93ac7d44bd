"""Validation against published measurements (data/measurements/): collective curves
(collectives.py), compute slowed by concurrent collectives (contention.py) and whole training steps
(steps.py). `perfmodel validate` runs them all (run, format_all, summary)."""

from __future__ import annotations

from pathlib import Path

from ..config import DATA_DIR, ConfigError
from .collectives import (COLUMNS, ERROR_MEASURE, METRICS, MEASUREMENTS, TARGET_BLIND, TARGET_CALIBRATED, Dataset, Row,
                          format_report, geomean_error, largest_error, load_datasets, measured_seconds, model_seconds,
                          size_text, split, validate, validate_dataset)

KINDS = ("collectives", "contention", "steps")


def run(kinds=None, data: str | Path | None = None, datasets: list[str] | None = None, loso: bool = True,
        log=lambda m: None) -> dict:
    """Every dataset of the `kinds` asked (default: all), from data/measurements or `data`: a folder
    with subfolders collectives/, contention/, steps/ (a kind without its subfolder is skipped unless
    asked for), or a folder of CSVs of one kind (the kind asked, collectives if none): the report of
    each kind's module, under its name."""
    from . import contention, steps
    asked = list(kinds) if kinds else []
    bad = [k for k in asked if k not in KINDS]
    if bad:
        raise ConfigError("", "kind", f"{bad[0]!r} is not a kind of measurement; allowed: {', '.join(KINDS)}")
    root = Path(data) if data else DATA_DIR / "measurements"
    try:
        found = root.is_dir()
    except OSError as err:                # a name the OS refuses (too long)
        raise ConfigError(str(root), "", f"cannot be read: {err.strerror or err}") from None
    if not found:
        raise ConfigError(str(root), "", "no such folder of measurements")
    folders = {k: root / k for k in KINDS}
    if data and not any(f.is_dir() for f in folders.values()) and any(root.glob("*.csv")):
        if len(asked) > 1:
            raise ConfigError(str(root), "kind", "a folder of CSVs holds one kind of measurement; ask for one --kind "
                              f"or give a folder with subfolders {', '.join(KINDS)}")
        one = asked[0] if asked else "collectives"
        folders, asked = {one: root}, [one]
    kinds = asked or [k for k in KINDS if folders.get(k) is not None and folders[k].is_dir()]
    if not kinds:
        raise ConfigError(str(root), "", f"holds no *.csv datasets and none of the subfolders {', '.join(KINDS)}")
    missing = [k for k in kinds if k not in folders]
    if missing:
        raise ConfigError(str(root), "kind", f"is a folder of {', '.join(folders)} measurements, not {missing[0]}")
    names = {"collectives": [d.name for d in load_datasets(folders["collectives"])] if "collectives" in kinds else [],
             "contention": ["interference"], "steps": [d.name for d in steps.load_step_datasets(folders["steps"])]
             if "steps" in kinds else []}
    if datasets:
        known = sorted(n for k in kinds for n in names[k])
        bad = [d for d in datasets if d not in known]
        if bad:
            raise ConfigError(str(root), "dataset", f"{bad[0]!r} is not a dataset; known: {', '.join(known)}")
        kinds = [k for k in kinds if any(d in names[k] for d in datasets)]
    out = {}
    if "collectives" in kinds:
        out["collectives"] = validate(folders["collectives"], [d for d in datasets if d in names["collectives"]]
                                      if datasets else None)
    if "contention" in kinds:
        out["contention"] = {"cases": contention.cases(folders["contention"]), "target": contention.TARGET}
    if "steps" in kinds:
        sets = steps.load_step_datasets(folders["steps"])
        if datasets:
            sets = [d for d in sets if d.name in datasets]
        out["steps"] = {"datasets": [steps.validate_steps(d, calibrated=loso, log=log) for d in sets],
                        "targets": {"blind_geomean": steps.TARGET_BLIND, "calibrated_geomean": steps.TARGET_CALIBRATED,
                                    "max": steps.TARGET_MAX}}
    return out


def format_all(rep: dict, rows: bool = True) -> str:
    from . import contention, steps
    parts = []
    if "steps" in rep:
        parts.extend(steps.format_steps(d, rows) for d in rep["steps"]["datasets"])
    if "contention" in rep:
        parts.append(contention.format_cases(rep["contention"]["cases"]))
    if "collectives" in rep:
        parts.append(format_report(rep["collectives"], rows))
    return "\n\n".join(parts)


def summary(rep: dict) -> str:
    """One line per dataset of every kind: rows, blind and calibrated errors, and whether each meets
    its target."""
    from . import contention, steps
    lines = [f"{'kind':<12} {'dataset':<36} {'rows':>4} {'blind':>8} {'calibrated':>11} {'blind >= 1 MiB':>15}   "
             "targets (blind / calibrated)"]
    ok = lambda x, t: f"{100 * x:>6.1f} %{'' if x <= t else ' !'}"
    for d in rep.get("steps", {}).get("datasets", []):
        # the runs' own plans (the physics) first, where the rows name them; then perfmodel's best plan
        for key, cal_key, what in (("run_plan", "run_plan_loso", "at the runs' plans"), ("blind", "calibrated", "at the best plan")):
            if f"{key}_geomean_err" not in d:
                continue
            cal = ok(d[f"{cal_key}_geomean_err"], steps.TARGET_CALIBRATED) if f"{cal_key}_geomean_err" in d else "   -"
            lines.append(f"{'steps':<12} {d['dataset'] + ' ' + what:<36} {len(d['rows']):>4} "
                         f"{ok(d[f'{key}_geomean_err'], steps.TARGET_BLIND):>8} {cal:>11} {'-':>15}   "
                         f"{100 * steps.TARGET_BLIND:.0f} % / {100 * steps.TARGET_CALIBRATED:.0f} % (leave one system out); "
                         f"largest {100 * largest_error(r[f'{key}_err'] for r in d['rows'] if f'{key}_err' in r):.0f} % "
                         f"(<= {100 * steps.TARGET_MAX:.0f} %)")
    if "contention" in rep:
        cs = rep["contention"]["cases"]
        worst = max(abs(c["err"]) for c in cs)
        lines.append(f"{'contention':<12} {'interference':<36} {len(cs):>4} {ok(worst, contention.TARGET):>8} {'-':>11} {'-':>15}   "
                     f"every case within {100 * contention.TARGET:.0f} % (the largest |predicted / measured - 1| shown)")
    for d in rep.get("collectives", {}).get("datasets", []):
        large = f"{100 * d['blind_large_geomean_err']:.1f} % ({d['n_large']})" if d["n_large"] else "-"
        lines.append(f"{'collectives':<12} {d['dataset']:<36} {len(d['rows']):>4} {ok(d['blind_geomean_err'], TARGET_BLIND):>8} "
                     f"{ok(d['calibrated_geomean_err'], TARGET_CALIBRATED):>11} {large:>15}   {100 * TARGET_BLIND:.0f} % / "
                     f"{100 * TARGET_CALIBRATED:.0f} % (held-out sizes)")
    lines.append(f"{ERROR_MEASURE}; ! misses its target")
    return "\n".join(lines)


__all__ = ["KINDS", "run", "format_all", "summary", "COLUMNS", "METRICS", "MEASUREMENTS", "TARGET_BLIND",
           "TARGET_CALIBRATED", "Dataset", "Row", "format_report", "geomean_error", "load_datasets", "measured_seconds",
           "model_seconds", "split", "validate", "validate_dataset"]
