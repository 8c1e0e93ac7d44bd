"""A persistent XLA compile cache, so that a new process skips the compiles an earlier one made.

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
