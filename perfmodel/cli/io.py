"""Every result file the command line writes: tables, figures, traces, plans, model files, the
configuration reference.

A command declares each output flag with `add_output(parser, flag, KIND, ...)`. Before the command
runs, main() checks every output given (`check_outputs`): a new file (results never overwrite one;
the configuration reference replaces only a file it wrote), in a folder that exists, with a name the
OS takes and the suffix of its kind, no two outputs the same file. So a long search or study never
ends on a file it cannot write; the error is one line naming the file. The command then writes
through the savers here, each an exclusive create (perfmodel/files.py).

`calibrate --out/--measurements` are checked by perfmodel.calibrate.calibrate itself (called from
Python too), before it measures, and written there; `import-tables --out` is written by
perfmodel.interop.import_tables, which checks it again for its Python callers.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config import ConfigError
from ..files import check_output, check_place

OUTPUTS = "_outputs"       # the parser default that lists a command's output flags: [(dest, kind)]


class Kind(NamedTuple):
    """A kind of result file: its name in errors, the suffixes it may end in (none: any; None: the
    figure formats matplotlib writes), and whether it must be new (else: only a folder is refused)."""
    what: str
    formats: tuple[str, ...] | None = ()
    new: bool = True
    example: str = ""


TABLE = Kind("table", (".csv", ".json"))
FIGURE = Kind("figure", None)
TRACE = Kind("trace")
PLAN = Kind("plan JSON", (".json",))
MODEL = Kind("model TOML", (".toml",))
REFERENCE = Kind("markdown file", new=False, example="docs/configuration.md")


def add_output(p, flag: str, kind: Kind, **kwargs) -> None:
    """Add the output flag `flag` (argparse's keywords in `kwargs`), a file of `kind` that
    check_outputs checks before the command runs."""
    action = p.add_argument(flag, **kwargs)
    p.set_defaults(**{OUTPUTS: [*(p.get_default(OUTPUTS) or []), (action.dest, kind)]})


def check_outputs(args) -> None:
    """ConfigError naming the first output of the command `args` runs that cannot be written."""
    seen = set()
    for dest, kind in getattr(args, OUTPUTS, None) or []:
        path = getattr(args, dest, None)
        if path is None:
            continue
        if path in seen:
            raise ConfigError(path, "", "is given twice as an output")
        seen.add(path)
        if not kind.new:
            check_place(path, new=False, what=kind.what, example=kind.example)
        elif kind.formats is None:
            from ..plots import check_figure_path
            headless()
            check_figure_path(path)
        else:
            check_output(path, kind.formats, kind.what)


def headless() -> None:
    """Figures drawn without a display (matplotlib's Agg), set before pyplot is imported."""
    import matplotlib
    matplotlib.use("Agg")


# ------------------------------------------------------------------------------------------ the savers

def save_table(table, path) -> None:
    """CSV, or JSON records where the name ends in .json."""
    from ..analysis.table import save_table as save
    save(table, path)


def save_figure(ax_or_fig, path) -> None:
    from ..plots import save_figure as save
    save(ax_or_fig, path)


def save_trace(trace: dict, path) -> None:
    from ..trace import save_trace as save
    save(trace, path)


def save_plan(plan, path) -> None:
    """perfmodel's plan JSON, which `--plan` reads back."""
    plan.save(path)


def save_torchrec_plan(data: dict, path) -> None:
    """TorchRec's sharding plan as JSON (pm.load_torchrec_plan reads it)."""
    from ..interop.torchrec_plan import save_torchrec_plan as save
    save(data, path)


def save_reference(path) -> int:
    """The configuration reference as markdown, replacing only a file that `perfmodel schema` wrote."""
    from .configdoc import write
    return write(path)
