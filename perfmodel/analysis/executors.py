"""Where a study's independent jobs run (the per-point searches of a replanned sweep): in this
process, on a local process pool, on a Ray cluster, or on a concurrent.futures.Executor the user
made. Results come back in the order of the jobs, so a table does not depend on where they ran.

    run(fn, jobs, executor=None, workers=None, ray_address=None) -> [fn(*job) for job in jobs]

executor: None or "process" (a pool of `workers` processes, by default $PERFMODEL_WORKERS, else the
cores; one worker runs the jobs in this process; spawned, not forked, because JAX runs threads),
"serial" (this process), "ray" (tasks on the cluster at `ray_address`: "host:port" of a running
head node, "local" to start one here for the call with `workers` CPUs, by default $PERFMODEL_WORKERS,
else the cores; None to use the Ray instance this process has already started, else ray.init()'s
default), or an Executor. Spawned workers import the main module: a script that uses the pool
starts its work under `if __name__ == "__main__":`. Every worker enables the persistent compile
cache (the folder this process uses), so only the first worker on a machine compiles. `fn` and the
jobs must pickle.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import socket

from .. import interrupt
from ..cache import cache_folder
from ..config import ConfigError
from ..report import announced_bar

KINDS = ("serial", "process", "ray")
CONNECT_TIMEOUT_S = 5.0      # a Ray head that does not answer a TCP connect in this long is unreachable


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:       # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def default_workers() -> int:
    """The pool's size when a call gives none: $PERFMODEL_WORKERS (a machine shared with other jobs,
    or a process that already runs beside others on its cores), else the cores this process may use."""
    env = os.environ.get("PERFMODEL_WORKERS", "").strip()
    if not env:
        return cores()
    try:
        n = int(env)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError("environment", "PERFMODEL_WORKERS", f"must be an integer >= 1 (processes), got {env!r}")
    return n


def check_workers(workers, field: str = "workers") -> int | None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError("", field, f"must be an integer >= 1 (processes), got {workers!r}")
    return workers


def check_executor(executor) -> None:
    if executor is None or isinstance(executor, cf.Executor) or executor in KINDS:
        return
    raise ConfigError("", "executor", f"is {executor!r}; allowed: {', '.join(KINDS)} or a concurrent.futures.Executor")


def check_address(address: str, field: str = "ray_address") -> None:
    """ConfigError naming `field` and the address unless it is 'local' or a host:port that accepts
    a TCP connection within CONNECT_TIMEOUT_S (ray.init would otherwise wait for minutes)."""
    if address == "local":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("", field, f"{address!r} is not host:port (e.g. 10.0.0.5:6379, ray://head:10001) or 'local'")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except UnicodeError:                  # IDNA refuses the host: an empty label (..) or one over 63 characters
        raise ConfigError("", field, f"{address!r}: {host!r} is not a host name (each dot-separated part 1 to 63 "
                          "characters)") from None
    except OSError as err:
        raise ConfigError("", field, f"cannot reach a Ray cluster at {address!r} ({err.strerror or err}); start "
                          "one with `ray start --head`, or give 'local' to start one here") from None


def _init_worker(folder: str | None) -> None:
    from ..cache import enable_compile_cache
    enable_compile_cache(folder)


def _in_worker(folder, fn, job):
    _init_worker(folder)
    return fn(*job)


def _bar(progress: str | None, total: int, where: str):
    """The bar counting finished jobs, announced as "progress: N jobs where"."""
    line = None if progress is None else f"{progress}: {total} job{'s' if total != 1 else ''} {where}"
    return announced_bar(line, total, "job")


def run(fn, jobs: list[tuple], executor=None, workers: int | None = None, ray_address: str | None = None,
        progress: str | None = None) -> list:
    """[fn(*job) for job in jobs], on `executor` (see the module doc), in the order of `jobs`.
    progress: a description of the jobs; given, stderr says up front how many run where and a bar
    counts them as they finish (in any order; the results keep the jobs' order)."""
    check_executor(executor)
    check_workers(workers)
    if ray_address is not None:
        if executor not in (None, "ray"):
            raise ConfigError("", "ray_address", f"applies to executor='ray', not {executor!r}")
        executor = "ray"
    jobs = list(jobs)
    if executor in (None, "process") and workers is None:
        workers = default_workers()
    if executor == "serial" or (executor in (None, "process") and (len(jobs) <= 1 or workers == 1)):
        with _bar(progress, len(jobs), "in this process") as bar:
            out = []
            for job in jobs:
                out.append(fn(*job))
                bar.update()
            return out
    folder = cache_folder()
    if not isinstance(executor, cf.ThreadPoolExecutor):
        try:
            pickle.dumps(jobs[0])
        except Exception as err:                  # noqa: BLE001 - any pickling failure means the same
            raise ConfigError("", "executor", f"the jobs cannot be sent to other processes ({err}); give a "
                              "module-level function as the plan, or executor='serial'") from None
    if isinstance(executor, cf.Executor):
        with _bar(progress, len(jobs), f"on {type(executor).__name__}") as bar:
            return _in_order([executor.submit(_in_worker, folder, fn, job) for job in jobs], bar)
    if executor == "ray":
        return _run_ray(fn, jobs, folder, workers, ray_address, progress)
    n = min(workers, len(jobs))
    try:
        with cf.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                                    initargs=(folder,)) as pool, _bar(progress, len(jobs), f"on {n} worker processes") as bar:
            try:
                with interrupt.starting_workers():      # the pool starts its workers as jobs are submitted
                    futures = [pool.submit(fn, *job) for job in jobs]
                return _in_order(futures, bar)
            except KeyboardInterrupt:
                _stop(pool)
                raise
    except cf.process.BrokenProcessPool as err:
        raise ConfigError("", "executor", f"a worker process stopped ({err}); a script that uses the process pool "
                          "must start its work under `if __name__ == '__main__':` (spawned workers import it), "
                          "or pass executor='serial'") from None


def _in_order(futures: list, bar) -> list:
    """The futures' results in their order, the bar advanced as each finishes (a failure raises at once)."""
    for f in cf.as_completed(futures):
        f.result()
        bar.update()
    return [f.result() for f in futures]


def _stop(pool: cf.ProcessPoolExecutor) -> None:
    """Ctrl-C: end the workers now. Leaving the pool's `with` waits for the jobs that run (minutes of
    search), and the workers ignore Ctrl-C (perfmodel/interrupt.py), so they are terminated."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)


def _run_ray(fn, jobs, folder, workers, address, progress=None):
    try:
        import ray
    except ImportError:
        raise ConfigError("", "executor", "'ray' needs Ray: pip install 'perfmodel[distributed]'") from None
    started = False
    if not ray.is_initialized():
        import logging
        import warnings
        quiet_start = dict(log_to_driver=False, logging_level=logging.ERROR)     # Ray's start-up notices are not ours
        with warnings.catch_warnings():
            # Ray starts its daemons by fork + exec, which Python warns about in a process running JAX's
            # threads; the child execs at once, so the deadlock it warns of cannot happen
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
            if address == "local":
                ray.init(num_cpus=workers or default_workers(), include_dashboard=False, **quiet_start)
            else:
                if address is not None:
                    check_address(address)
                ray.init(address=address, **quiet_start)
        started = True
    try:
        task = ray.remote(_in_worker)
        refs = [task.remote(folder, fn, job) for job in jobs]
        with _bar(progress, len(refs), "on the Ray cluster" + (f" at {address}" if address else "")) as bar:
            waiting = list(refs)
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=1)
                ray.get(done)
                bar.update(len(done))
        return ray.get(refs)
    finally:
        if started:
            ray.shutdown()
