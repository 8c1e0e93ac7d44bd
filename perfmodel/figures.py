"""The README's figures, from the presets in this repo, by one command:

    python -m perfmodel.figures docs/img                 # all (make figures); about 2 minutes on 2 cores
    python -m perfmodel.figures docs/img --only tradeoff

  breakdown.png  dlrm-dcnv2-mlperf on mtia300-64, h100-64, h200-64: where the step goes
  tradeoff.png   step time vs scale-out NIC bandwidth: integrated vs PCIe NIC, engines vs core-driven,
                 on an H100 host and on MTIA 300
  timeline.png   one step of dlrm-dcnv2-mlperf on mtia300-64 and on h100-64, per device and stream
  scaling.png    dlrm-dcnv2-mlperf on mtia300 and h100, 16 to 256 chips, strong and weak
  pareto.png     throughput vs power and vs cost per sample across the 64-chip systems

This command rewrites these files in the folder it is given (they are its output); the `perfmodel
plot` subcommands never overwrite.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

MODEL = "dlrm-dcnv2-mlperf"
SYSTEMS = ("mtia300-64", "h100-64", "h200-64")
PARETO_SYSTEMS = ("mtia300-64", "h100-64", "h200-64", "b200-64", "gaudi3-64", "h100cap-64")
TRADEOFF = {"scale_out_bandwidth_GBps": "12.5:400:12:log", "nic_attach_pcie": [0, 1], "offload_engines": [0, 16]}
MTIA_PCIE_GBPS = 630    # a PCIe-attached MTIA NIC as on a GPU host: one Gen5 x16 (~63 GB/s) per active 800G port


def _fig(nrows, ncols, size):
    import matplotlib.pyplot as plt
    return plt.subplots(nrows, ncols, figsize=size, layout="constrained", squeeze=False)


def breakdown(out: Path, model):
    from . import plots
    from .analysis.scaling import evaluate_systems
    ax = plots.breakdown(evaluate_systems(SYSTEMS, model),
                         title=f"{model.name} on 64 chips: where the step goes (slowest device)")
    plots.save_figure(ax, out / "breakdown.png", overwrite=True)


def tradeoff(out: Path, model):
    from . import load_system, plots
    from .analysis import sweep
    fig, axes = _fig(1, 2, (13, 4.8))
    h100 = load_system("h100-64")
    plots.tradeoff(sweep(h100, model, TRADEOFF), ax=axes[0, 0],
                   title="h100-64 (NVLink scale-up; one NIC per GPU)")
    mtia = load_system("mtia300-64")
    vary = dict(TRADEOFF, pcie_bandwidth_GBps=[MTIA_PCIE_GBPS])
    plots.tradeoff(sweep(mtia, model, vary), ax=axes[0, 1],
                   title=f"mtia300-64 (NICs carry scale-up too; PCIe case: {MTIA_PCIE_GBPS} GB/s of PCIe)")
    fig.suptitle(f"{model.name}: step time vs scale-out NIC bandwidth (plan fixed: each system's default)",
                 fontsize=11)
    plots.save_figure(fig, out / "tradeoff.png", overwrite=True)


def timeline(out: Path, model):
    from . import default_plan, evaluate, load_system, plots
    fig, axes = _fig(2, 1, (11, 7.5))
    for ax, name in zip(axes[:, 0], ("mtia300-64", "h100-64")):
        s = load_system(name)
        plots.timeline(evaluate(s, model, default_plan(s, model)), ax=ax, max_devices=2, model=model,
                       title=f"{model.name} on {name}: one step (slowest and fastest device)")
    plots.save_figure(fig, out / "timeline.png", overwrite=True)


def scaling(out: Path, model):
    import numpy as np
    from . import plots
    from .analysis.scaling import scaling as run
    from .analysis.table import columns, make_table
    fig, axes = _fig(1, 2, (13, 4.8))
    for ax, fam in zip(axes[0], ("mtia300-64", "h100-64")):
        tables = [columns(run(fam, model, (16, 64, 256), mode=m)) for m in ("strong", "weak")]
        table = make_table({k: np.concatenate([t[k] for t in tables]) for k in tables[0]})
        plots.scaling(table, ax=ax, title=f"{model.name} on {fam.rsplit('-', 1)[0]}")
    plots.save_figure(fig, out / "scaling.png", overwrite=True)


def pareto(out: Path, model):
    from . import plots
    from .analysis.scaling import compare
    table = compare(PARETO_SYSTEMS, model)
    fig, axes = _fig(1, 2, (13, 4.8))
    plots.pareto(table, x="power_W", ax=axes[0, 0], title="throughput vs power (all hosts)")
    plots.pareto(table, ax=axes[0, 1], title="throughput vs cost (equal placeholder prices per chip)")
    fig.suptitle(f"{model.name} on 64 chips of each system", fontsize=11)
    plots.save_figure(fig, out / "pareto.png", overwrite=True)


FIGURES = {"breakdown": breakdown, "tradeoff": tradeoff, "timeline": timeline, "scaling": scaling, "pareto": pareto}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="where to write the PNGs (created if missing)")
    ap.add_argument("--only", help="comma-separated subset of: " + ", ".join(FIGURES))
    args = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    from . import load_model
    names = [n.strip() for n in args.only.split(",")] if args.only else list(FIGURES)
    bad = [n for n in names if n not in FIGURES]
    if bad:
        print(f"perfmodel.figures: error: unknown figure {bad[0]!r}; known: {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    out = Path(args.folder)
    out.mkdir(parents=True, exist_ok=True)
    model = load_model(MODEL)
    for n in names:
        t = time.perf_counter()
        FIGURES[n](out, model)
        print(f"wrote {out / (n + '.png')} ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
