"""Result files: every table, plan, trace, figure, model or chip file perfmodel writes is a new file.

A result never replaces a file (nothing a user wrote is lost), and a place that cannot take one is
found before the work that makes it: `check_output` before a long search or study, `write_new` (an
exclusive create, so no race either) when the result is ready. The command line declares its
outputs in perfmodel/cli/io.py, which builds on these; library modules use them directly.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from . import interrupt
from .config import ConfigError

EXISTS = "exists already; choose another name or remove it first"


def _refused(p: Path, err: OSError) -> ConfigError:
    """A name the OS refuses (too long, a bad byte), no permission, a read-only file system."""
    return ConfigError(str(p), "", f"cannot be written: {err.strerror or err}")


def check_place(path: str | Path, *, new: bool = True, what: str = "file", example: str = "") -> Path:
    """Raise ConfigError naming `path` unless a file can be written there: a name the OS takes, in a
    folder that exists, and no file there yet (results never overwrite a file) unless not `new`, where
    only a folder is refused (`what`, `example`: the file to give instead)."""
    if str(path) == "":
        raise ConfigError("", "path", "is empty; give a file name")
    p = Path(path)
    try:
        there = p.exists() or p.is_symlink()
        folder = there and p.is_dir()
        regular = there and p.is_file()
        parent = p.parent.is_dir()
    except OSError as err:
        raise _refused(p, err) from None
    if there and new:
        raise ConfigError(str(p), "", EXISTS)
    if folder:
        raise ConfigError(str(p), "", f"is a folder; give the {what}'s path" + (f" (e.g. {example})" if example else ""))
    if there and not regular:     # a file that may be replaced is read first: /dev/zero never ends, a FIFO waits
        raise ConfigError(str(p), "", f"is not a regular file (a device, a FIFO, a socket or a broken link); give "
                          f"the {what}'s path" + (f" (e.g. {example})" if example else ""))
    if not parent:
        raise ConfigError(str(p), "", f"its folder {str(p.parent)!r} does not exist")
    return p


def check_output(path: str | Path, formats: tuple[str, ...] = (), what: str = "file") -> Path:
    """Raise ConfigError naming `path` unless a result can be written there as a new file, before
    any work: it does not exist, its name ends in one of `formats` (when given: '.png', ...), its
    folder exists, and the folder takes a new file (tried: the file is created and removed at once,
    so no permission, a read-only file system or /proc fail here, not after a long search)."""
    p = check_place(path)
    if formats and p.suffix.lower() not in formats:
        raise ConfigError(str(p), "", f"is not a {what} name this command writes: give a name ending in "
                          f"{', '.join(formats)}")
    try:
        with p.open("x"):
            pass
        p.unlink()
    except OSError as err:
        raise _refused(p, err) from None
    return p


@contextlib.contextmanager
def open_new(path: str | Path, binary: bool = False, newline: str | None = None):
    """The open file of a result that must not exist yet (exclusive create: no race, no overwrite);
    an interrupted or failed writing leaves no file behind."""
    p = check_place(path)
    try:
        f = p.open("xb" if binary else "x", newline=None if binary else newline)
    except FileExistsError:
        raise ConfigError(str(p), "", EXISTS) from None
    except OSError as err:
        raise _refused(p, err) from None
    try:
        with f, interrupt.writing(p):     # no result after a Ctrl-C, none half-written
            yield f
    except OSError as err:                # a full disk: interrupt.writing has removed the part written
        raise _refused(p, err) from None


def write_new(path: str | Path, text: str) -> None:
    """Write `text` to a file that must not exist yet (see open_new)."""
    with open_new(path) as f:
        f.write(text)
