import dataclasses

import jax

import perfmodel as pm
from perfmodel.hardware import _pytree, static


@_pytree
@dataclasses.dataclass(frozen=True)
class Box:
    """A pytree with an array, a Python float and a static field (an exported program's in and out)."""
    w: object
    scale: float
    tag: str = static(default="a")


def test_compile_cache_folder_and_off_switch(tmp_path, monkeypatch):
    """The folder given wins; PERFMODEL_CACHE_DIR names the default one, and empty turns it off."""
    before = jax.config.jax_compilation_cache_dir
    try:
        assert pm.enable_compile_cache(str(tmp_path)) == str(tmp_path)
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", "")
        assert pm.enable_compile_cache() is None
        assert jax.config.jax_compilation_cache_dir is None
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "env"))
        assert pm.enable_compile_cache() == str(tmp_path / "env")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_kept_marks_live_in_the_cache_folder_per_program(tmp_path, monkeypatch):
    """mark_kept notes a program in the cache folder: is_kept finds it there, not under another
    name, not in another folder, not for another source of perfmodel (the program it compiles
    differs), and nowhere with the cache off (nothing is written then)."""
    from perfmodel import cache
    from perfmodel.cache import is_kept, mark_kept

    assert len(cache._source_digest()) == 16 and cache._source_digest() == cache._source_digest()

    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "a"))
        assert not is_kept("relaxed step X")
        mark_kept("relaxed step X")
        assert is_kept("relaxed step X") and not is_kept("relaxed step Y")
        with monkeypatch.context() as m:
            m.setattr(cache, "_source_digest", lambda: "edited-source")
            assert not is_kept("relaxed step X")
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "b"))
        assert not is_kept("relaxed step X")
        jax.config.update("jax_compilation_cache_dir", None)
        mark_kept("relaxed step X")
        assert not is_kept("relaxed step X") and not (tmp_path / "b").exists()
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_an_exported_program_is_loaded_by_a_new_process_instead_of_traced(tmp_path, monkeypatch):
    """cache.jit(export=True): with the persistent cache on, the first call traces the function and
    keeps the exported program in the cache folder; a new process (a new Exported, nothing in memory)
    loads it without running the Python function, and gives the same numbers, pytrees and all. Other
    shapes are another program; under a trace, or with the cache off, it is the plain jitted function;
    an unreadable file is traced again; another source of perfmodel does not reuse the file."""
    import jax.numpy as jnp
    import numpy as np
    from jax._src import compilation_cache

    from perfmodel import cache

    traces = []

    def f(box, x):
        traces.append(1)                       # runs only while tracing
        return {"y": jnp.tanh(x * box.w) * box.scale, "n": jnp.sum(x)}, Box(w=box.w * 2, scale=box.scale, tag=box.tag)

    box, x = Box(w=np.arange(3, dtype=np.float32), scale=1.5), np.linspace(0, 1, 3).astype(np.float32)
    plain = jax.jit(f)(box, x)
    files = lambda: sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("perfmodel-export-"))
    before = jax.config.jax_compilation_cache_dir
    try:
        compilation_cache.reset_cache()
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        traces.clear()
        first = cache.jit(f, export=True)(box, x)
        assert len(traces) >= 1 and len(files()) == 1
        traces.clear()
        again = cache.jit(f, export=True)                  # a new process: nothing in memory
        second = again(box, x)
        assert traces == [], "the exported program was traced again instead of loaded"
        for got in (first, second):
            assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(plain)
            for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(plain)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert second[1].tag == "a"
        again(Box(w=np.arange(4, dtype=np.float32), scale=1.5), np.zeros(4, np.float32))     # other shapes
        again(dataclasses.replace(box, tag="b"), x)                                         # another static field
        assert len(files()) == 3
        jax.vmap(lambda xs: again(box, xs)[0]["n"])(np.ones((2, 3), np.float32))            # traced: plain jit
        assert len(files()) == 3
        for name in files():
            (tmp_path / name).write_bytes(b"cut short")
        traces.clear()
        out = cache.jit(f, export=True)(box, x)                # unreadable: traced and written again
        assert len(traces) >= 1
        np.testing.assert_array_equal(np.asarray(out[0]["y"]), np.asarray(plain[0]["y"]))
        traces.clear()
        cache.jit(f, export=True)(box, x)
        assert traces == []
        monkeypatch.setattr(cache, "_source_digest", lambda: "edited-source")
        cache.jit(f, export=True)(box, x)
        assert len(traces) >= 1 and len(files()) == 4
        jax.config.update("jax_compilation_cache_dir", None)
        off = cache.jit(f, export=True)(box, x)                # cache off: plain jit, nothing written
        assert len(files()) == 4 and float(off[0]["n"]) == float(plain[0]["n"])
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        compilation_cache.reset_cache()
