"""Compilation: a persistent XLA compile cache, so that a new process skips the compiles an earlier
one made, and the XLA options perfmodel's programs are compiled with (`jit`).

    import perfmodel as pm
    pm.enable_compile_cache()          # before the first search / evaluate of the process

The first search of a problem shape costs mostly compilation (5-20 s on 2 CPU cores for MLPerf's 26
tables); with the cache, a later process loads the programs instead. Results do not change.
"""

from __future__ import annotations

import os


def enable_compile_cache(folder: str | None = None) -> str | None:
    """Keep compiled XLA programs on disk between runs, in `folder`, else $PERFMODEL_CACHE_DIR, else
    ~/.cache/perfmodel/jax (an empty PERFMODEL_CACHE_DIR turns it off). Returns the folder used.
    Only programs that took >= 1 s to compile are kept."""
    import jax

    if folder is None:
        folder = os.environ.get("PERFMODEL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "perfmodel", "jax"))
    if folder:
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return folder or None


# XLA options for the programs that evaluate the model. On the CPU, XLA's newer "fusion emitters"
# code generation compiles perfmodel's programs (thousands of small scalar ops: one per network level,
# protocol and algorithm) 1.3-1.7x slower. Measured on 2 cores by benchmarks/bench_compile.py, default
# vs these options: the hard scorers (batched and single-plan) compile in 3.3-3.9 s vs 1.9-2.3 s, run
# as fast (0.94-1.12x) and give bitwise the same results. The relaxed gradient step keeps XLA's
# defaults: these options save it 2-3 s of compile (11-12 s vs 8.4-9.1 s) but make it run 1.4-1.6x
# slower, which a warm search with a small budget pays at every step (search/gradient.py).
CPU_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


def jit(fun=None, **kwargs):
    """jax.jit with CPU_COMPILE_OPTIONS when JAX runs on the CPU (other backends: jax.jit as is).
    Use it as @jit, @jit(static_argnums=...) or jit(f, ...)."""
    import functools

    import jax

    if fun is None:
        return functools.partial(jit, **kwargs)
    options = CPU_COMPILE_OPTIONS if jax.default_backend() == "cpu" else None
    return jax.jit(fun, compiler_options=options, **kwargs)
