"""Compilation: a persistent XLA compile cache, so that a new process skips the compiles an earlier
one made, and the XLA options perfmodel's programs are compiled with (`jit`).

    import perfmodel as pm
    pm.enable_compile_cache()          # before the first search / evaluate of the process

The first search of a problem shape costs mostly compilation (about 5 s on 2 CPU cores for MLPerf's 26
tables); with the cache, a later process loads the programs instead. Results do not change.
"""

from __future__ import annotations

import functools
import hashlib
import os


# Programs compiled in at least this long are kept on disk: all of them. jax's default (1 s) kept only
# the batched scorer and the relaxed step of a search; 0.2 s added the single-plan scorer (0.5-0.6 s)
# and the mixed-move batch (0.25-0.35 s), but a new process still compiled 15 small programs (moves,
# swaps, padding) at its start, beside the others on 2 cores. Kept as well (19 entries, 528 kB for
# MLPerf / h100-16, against 4 and 459 kB), a new process with a 2-s budget held its first plan at
# 1.12 s instead of 1.38 (medians of 5) and reached 2.730 ms in 5 runs of 5, against 3.44-6.13 ms
# (benchmarks/bench_coldstart.py: new processes, pm.search("h100-16", "dlrm-dcnv2-mlperf", budget_s=2)).
MIN_CACHED_COMPILE_S = 0.0


def enable_compile_cache(folder: str | None = None) -> str | None:
    """Keep compiled XLA programs on disk between runs, in `folder`, else $PERFMODEL_CACHE_DIR, else
    ~/.cache/perfmodel/jax (an empty PERFMODEL_CACHE_DIR turns it off). Returns the folder used.
    Every program is kept (MIN_CACHED_COMPILE_S)."""
    import jax

    if folder is None:
        folder = os.environ.get("PERFMODEL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "perfmodel", "jax"))
    if folder:
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_CACHED_COMPILE_S)
    return folder or None


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """A digest of perfmodel's own source files: a program compiled by other code (an upgrade, a
    local edit; a change of the relaxed step's outputs, say) is not the one a mark speaks of."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(folder, f), "rb") as fh:
                    h.update(f.encode() + b"\0" + fh.read())
    return h.hexdigest()[:16]


def _kept_path(name: str) -> str | None:
    import jax

    folder = jax.config.jax_compilation_cache_dir
    if not folder:
        return None
    digest = hashlib.sha256(f"{jax.__version__}|{_source_digest()}|{name}".encode()).hexdigest()[:32]
    return os.path.join(folder, f"perfmodel-kept-{digest}")


def mark_kept(name: str) -> None:
    """Note in the persistent cache's folder (when the cache is on) that the program `name` (a
    description of its function and problem shape) was compiled there, so that a later process
    knows it will load it: is_kept(name). jax's own cache can only be asked with the lowered
    program, which costs most of what the answer is for (the relaxed step: 1.1 s of tracing)."""
    path = _kept_path(name)
    if path is not None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w"):
                pass
        except OSError:        # a read-only cache folder: the next process estimates a compile
            pass


def is_kept(name: str) -> bool:
    """Whether mark_kept(name) was called with this cache folder, this jax version and this source of
    perfmodel."""
    path = _kept_path(name)
    return path is not None and os.path.exists(path)


# XLA options for the programs that evaluate the model. On the CPU, XLA's newer "fusion emitters"
# code generation compiles perfmodel's programs 1.3-2x slower, and they run as fast without it
# (benchmarks/bench_compile.py measures both, in the same run, on the search's programs).
CPU_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# For programs whose run time is small beside their compile (one call per search round, or a few
# hundred steps on a small instance): LLVM's optimization passes off as well. The single-plan scorer
# compiles in 0.5-0.6 s instead of 1.0-1.3 s and runs 1.0-1.6x slower (under 2 ms a call); the relaxed
# gradient step of a small instance in 2.3-2.4 s instead of 6.0 s, 1.4-2x slower to run
# (benchmarks/bench_compile.py; search.gradient.step_for decides per problem size)
QUICK_COMPILE_OPTIONS = {**CPU_COMPILE_OPTIONS, "xla_backend_optimization_level": 0}


def jit(fun=None, *, quick: bool = False, **kwargs):
    """jax.jit with CPU_COMPILE_OPTIONS (quick: QUICK_COMPILE_OPTIONS) when JAX runs on the CPU
    (other backends: jax.jit as is). Use it as @jit, @jit(static_argnums=...) or jit(f, ...)."""
    import jax

    if fun is None:
        return functools.partial(jit, quick=quick, **kwargs)
    return jax.jit(fun, compiler_options=compile_options(quick), **kwargs)


def compile_options(quick: bool = False) -> dict | None:
    """The options cache.jit compiles with on this backend (None: the backend's defaults)."""
    import jax

    if jax.default_backend() != "cpu":
        return None
    return QUICK_COMPILE_OPTIONS if quick else CPU_COMPILE_OPTIONS


def traced(tree) -> bool:
    """Whether any leaf of `tree` is a tracer: the value is under a jit, vmap or grad (where jax
    allows no compile options, and where values computed now must not outlive the trace)."""
    import jax

    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))
