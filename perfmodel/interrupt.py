"""Ctrl-C in the command line: one line `perfmodel: interrupted` and exit code 130, at any moment.

Python turns SIGINT into a KeyboardInterrupt at the main thread's next bytecode, wherever that is:
inside `import jax` (before main() can catch it: a traceback), or inside one of JAX's callbacks
(its garbage-collection hook), where Python prints "Exception ignored" and the command goes on to
finish and write its results. So the command line's entry point (perfmodel.cli.main, with no argv)
installs its own handler before jax is imported (importing perfmodel imports no jax, and installs
nothing):

- while main() runs a command (`armed`), the handler raises KeyboardInterrupt, so the command
  unwinds (a pool's workers are stopped, a file being written is removed) and main() prints the line;
- before and after that (imports, parsing, shutdown), nothing is half-done: it prints the line and
  exits at once;
- a sentinel thread reads the signal from a wakeup pipe, which the C-level handler writes even while
  the main thread is inside a long XLA call: GRACE_S after the first Ctrl-C (the exception was
  swallowed, or the unwinding hangs) and at once on a second one, it ends the process itself.

A swallowed interrupt must not let a result out: `check()` raises KeyboardInterrupt once an interrupt
is recorded, and the writers call it before they create a file; `writing(path)` removes a file that
an interrupt leaves half-written. In a worker process of the command's pool, Ctrl-C (sent by the
terminal to every process of the group) is ignored: the command stops its workers itself, so no
worker prints a traceback (`starting_workers`). A Python program that imports perfmodel keeps
Python's own Ctrl-C, and so do its pools' workers.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path

GRACE_S = 1.0
MESSAGE = "perfmodel: interrupted"

_state = {"installed": False, "armed": False, "pressed": False, "reported": False}
_lock = threading.Lock()
_exiting = threading.Lock()
_writing: set[Path] = set()


def install() -> None:
    """Install the handler, the wakeup pipe's sentinel and the quiet hook for a swallowed interrupt."""
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    _state["installed"] = True
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=_sentinel, args=(r,), name="perfmodel-interrupt", daemon=True).start()
    except (OSError, ValueError):        # no pipe: the handler alone, when the main thread runs
        pass
    previous = sys.unraisablehook

    def quiet(unraisable):
        # A KeyboardInterrupt a callback swallowed: the sentinel ends the process, the message would
        # be a traceback on the user's terminal.
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _state["pressed"] = True
            return
        previous(unraisable)
    sys.unraisablehook = quiet


@contextlib.contextmanager
def starting_workers():
    """Around the start of worker processes: with the handler installed, SIGINT is blocked in this
    thread while they start, and a started process keeps the blocked signal through exec, so a
    worker never sees the terminal's Ctrl-C from its first instruction on. This process still gets it:
    a thread that does not block it (the sentinel) takes it, or it waits until the block ends."""
    if not _state["installed"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextlib.contextmanager
def armed():
    """The span of main() in which Ctrl-C raises KeyboardInterrupt (it catches it)."""
    _state["armed"] = True
    try:
        yield
    finally:
        _state["armed"] = False


def interrupted() -> bool:
    return _state["pressed"]


def check() -> None:
    """Raise KeyboardInterrupt where Ctrl-C was pressed and swallowed (a safe point: before a result
    is written, before main() returns success)."""
    if _state["pressed"]:
        raise KeyboardInterrupt


def report() -> None:
    """Print the one line, once, whoever ends the process."""
    with _lock:                          # a second caller waits until the line is out
        if _state["reported"]:
            return
        _state["reported"] = True
        try:
            print(MESSAGE, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


@contextlib.contextmanager
def writing(path: str | Path):
    """Around the writing of a new file: the file is removed when the writing is interrupted (here,
    or by exit_now from the sentinel thread)."""
    p = Path(path)
    _writing.add(p)
    try:
        check()
        yield p
    except BaseException:
        with contextlib.suppress(OSError):
            p.unlink()
        raise
    finally:
        _writing.discard(p)


def exit_now() -> None:
    """The line, the half-written files removed, and exit code 130 now (no waiting for threads)."""
    _exiting.acquire()                   # one thread exits; another that gets here waits for it
    report()
    for p in list(_writing):
        with contextlib.suppress(OSError):
            p.unlink()
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        # a pool's semaphores, unlinked as at a normal exit (else multiprocessing's resource tracker
        # warns of "leaked" ones): in a thread of its own, as a finalizer may wait for a lock that the
        # main thread holds, and the exit must not wait
        def finalize():
            with contextlib.suppress(Exception):
                mp_util._run_finalizers(0)
        done = threading.Thread(target=finalize, daemon=True)
        done.start()
        done.join(0.5)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(130)


def _on_sigint(signum, frame):
    first = not _state["pressed"]
    _state["pressed"] = True
    if first and _state["armed"]:
        raise KeyboardInterrupt
    exit_now()


def _sentinel(fd: int) -> None:
    deadline = None
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            exit_now()                   # the grace is over
        data = os.read(fd, 64)
        if not data:
            return
        if signal.SIGINT in data:
            if deadline is not None:
                exit_now()               # a second Ctrl-C
            deadline = time.monotonic() + GRACE_S
