"""The `perfmodel` command line: main() parses the command and runs it; each family of commands is a
module here, registered in FAMILIES below (their order is `perfmodel --help`'s).

  evaluate.py      evaluate: one plan of one problem
  housekeeping.py  list, cache, schema: the presets, the compile cache, the configuration reference
  analysis.py      sweep, scaling, trace, plot: the model over a grid of knobs or a family's sizes, one
                   step as a trace, and the figures of these
  studies.py       sensitivity, compare, uncertainty: studies that answer with the plan each machine
                   wants, and what each uncertain input does to an answer
  search.py        search: find a plan, compare methods, co-design a hardware knob
  tables.py        import-tables: a model file from a CSV of TorchRec-style tables
  fidelity.py      validate, calibrate: the model against measurements
  args.py          the arguments several commands share (--system, --chips, --plan, --workers, ...)
  io.py            every result file a command writes, checked before the command runs
  configdoc.py     docs/configuration.md, generated from schema.py's tables (`perfmodel schema`)

A new study goes in studies.py (or analysis.py where it evaluates a grid or draws a figure); a new
family of commands is a module with `register(subparsers)`, added to FAMILIES. A family module
imports args and io, never another family. Its output flags are declared with io.add_output.

A user's mistake ends in one line, `perfmodel: error: <file or argument>: field '<x>': <what is
allowed>`, and exit code 2, and so does an output that cannot be written (a full disk under stdout:
`perfmodel: error: stdout: cannot be written: ...`); Ctrl-C in one line and exit code 130. Any other
exception is perfmodel's own fault and shows its traceback.

main() with no argv is the whole process (the console script, python -m perfmodel): it installs the
Ctrl-C handling (perfmodel/interrupt.py) before the command families, and with them jax, are imported;
importing perfmodel or this module installs nothing."""

from __future__ import annotations

import importlib
import os
import sys

from .. import interrupt
from ..config import QUIET, ConfigError
from . import io
from .args import Parser, refuse_empty

# the command families, in `perfmodel --help`'s order; imported when the parser is built (search's imports
# jax), so that main() installs the Ctrl-C handling first
FAMILIES = ("evaluate", "housekeeping", "analysis", "studies", "search", "tables", "fidelity")


def build_parser() -> Parser:
    parser = Parser(
        prog="perfmodel",
        description="Differentiable performance model of distributed training for ranking models. "
                    "Tables print times in ms or us, sizes in GB and bandwidths in GB/s, the unit in each "
                    "column's name or beside each number; --json gives SI units (s, bytes, bytes/s, samples/s).")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        importlib.import_module(f"{__name__}.{family}").register(sub)
    for p in sub.choices.values():
        if not any("--quiet" in a.option_strings for a in p._actions):
            p.add_argument("--quiet", action="store_true", help="no progress on stderr (errors still print)")
    return parser


def _interrupted(whole_process: bool) -> int:
    """Ctrl-C: one line and exit code 130 (128 + SIGINT). Results are written only at the end, so
    nothing is left half-written. Work still running in other threads (an XLA compile cannot be
    stopped) would hold the process until it ends, or crash it at the interpreter's shutdown: when
    main() is the whole process (no argv: the console script, python -m perfmodel), the process ends now."""
    if whole_process:
        interrupt.exit_now()
    print(interrupt.MESSAGE, file=sys.stderr)
    return 130


class _Stdout:
    """sys.stdout while a command runs: an OSError writing to it (a full disk, an I/O error) is one
    ConfigError naming stdout, wherever the command printed; a reader gone (BrokenPipeError) stays
    itself, for main() to end quietly."""

    def __init__(self, stream):
        self._stream = stream

    def _failed(self, err: OSError) -> ConfigError:
        _discard(self._stream)
        return ConfigError("stdout", "", f"cannot be written: {err.strerror or err}")

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._failed(err) from None

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._failed(err) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _discard(stream) -> None:
    """Send what `stream` (stdout) still holds to /dev/null: it cannot be written, and Python's flush
    at exit would print a second error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):    # a stdout with no file descriptor (captured)
        pass


def main(argv: list[str] | None = None) -> int:
    if argv is None:               # the whole process is the command: Ctrl-C at any moment (perfmodel/interrupt.py)
        interrupt.install()
    from ..cache import enable_compile_cache
    args = build_parser().parse_args(argv)
    enable_compile_cache()
    quiet_before = os.environ.get(QUIET)
    if getattr(args, "quiet", False):      # read by every progress line, in this process and its workers
        os.environ[QUIET] = "1"
    stdout = sys.stdout
    try:
        with interrupt.armed():
            refuse_empty(args)
            io.check_outputs(args)     # before the command's work: it may run for minutes
            if stdout is not None:
                sys.stdout = _Stdout(stdout)
            rc = args.func(args)
            interrupt.check()      # a Ctrl-C that a callback swallowed is still an interrupt
            if sys.stdout is not None:     # None: started with stdout closed (`>&-`), Python prints nothing
                sys.stdout.flush()     # inside the try: a reader gone or a full disk shows here, not at exit
        return rc
    except ConfigError as err:
        print(f"perfmodel: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(whole_process=argv is None)
    except BrokenPipeError:        # the reader went away (`perfmodel search ... | head`): stop quietly
        _discard(sys.stdout)
        return 141
    finally:                   # main() called from Python (a test, a notebook) leaves the process as it was
        if isinstance(sys.stdout, _Stdout):
            sys.stdout = stdout
        if quiet_before is None:
            os.environ.pop(QUIET, None)
        else:
            os.environ[QUIET] = quiet_before
