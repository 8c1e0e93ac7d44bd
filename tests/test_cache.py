import dataclasses
import pathlib

import jax

import perfmodel as pm
from perfmodel.pytree import pytree, static


@pytree
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


def test_an_exported_program_is_loaded_by_a_new_process_instead_of_traced(tmp_path, monkeypatch):
    """cache.jit(export=True): with the persistent cache on, the first call traces the function, keeps
    the exported program and the executable compiled from it in the cache folder; a new process (a new
    Exported, nothing in memory) loads the executable without running the Python function (or, without
    it, the exported program), and gives the same numbers, pytrees and all. Other shapes are another
    program; under a trace it is the plain jitted function; with the cache off the same exported program
    runs, kept in memory only (the plain function's compile may differ in the last bit, and a search
    would then find other plans with the cache off); unreadable files are made again; another source
    of perfmodel does not reuse them; an executable XLA's cache handed back is not kept (its copy
    would not run)."""
    import jax.numpy as jnp
    import numpy as np
    from jax._src import compilation_cache

    from perfmodel import cache

    assert len(cache._source_digest()) == 16 and cache._source_digest() == cache._source_digest()
    traces, loads = [], []

    def f(box, x):
        traces.append(1)                       # runs only while tracing
        return {"y": jnp.tanh(x * box.w) * box.scale, "n": jnp.sum(x)}, Box(w=box.w * 2, scale=box.scale, tag=box.tag)

    def same(got, want):
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    box, x = Box(w=np.arange(3, dtype=np.float32), scale=1.5), np.linspace(0, 1, 3).astype(np.float32)
    plain = jax.jit(f)(box, x)
    kept = lambda kind: sorted(p for p in tmp_path.iterdir() if p.name.startswith(f"perfmodel-{kind}-"))
    jax.monitoring.register_event_listener(lambda event, **_: loads.append(1) if event == cache.EXECUTABLE_LOADED else None)
    before = jax.config.jax_compilation_cache_dir
    # the cache as enable_compile_cache sets it (XLA keeps every program, however fast its compile),
    # whatever this process ran before
    min_before = jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        compilation_cache.reset_cache()
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", cache.MIN_CACHED_COMPILE_S)
        traces.clear()
        same(cache.jit(f, export=True)(box, x), plain)
        assert len(traces) >= 1 and len(kept("export")) == 1 and len(kept("exec")) == 1 and loads == []
        traces.clear()
        again = cache.jit(f, export=True)                  # a new process: nothing in memory
        second = again(box, x)
        assert traces == [] and loads == [1], "the kept executable was not loaded"
        same(second, plain)
        assert second[1].tag == "a"
        kept("export")[0].unlink()                         # the executable alone suffices
        same(cache.jit(f, export=True)(box, x), plain)
        assert traces == [] and loads == [1, 1] and kept("export") == []
        again(Box(w=np.arange(4, dtype=np.float32), scale=1.5), np.zeros(4, np.float32))     # other shapes
        again(dataclasses.replace(box, tag="b"), x)                                         # another static field
        assert len(kept("export")) == 2 and len(kept("exec")) == 3
        jax.vmap(lambda xs: again(box, xs)[0]["n"])(np.ones((2, 3), np.float32))            # traced: plain jit
        assert len(kept("export")) == 2 and len(kept("exec")) == 3
        for path in kept("export") + kept("exec"):
            path.write_bytes(b"cut short")
        traces.clear()
        n = len(loads)
        same(cache.jit(f, export=True)(box, x), plain)     # unreadable: traced and exported again
        # and compiled, but XLA's cache had that executable (from the first call), so it is not kept:
        # a copy of an executable XLA loaded fails when called ("Function ... not found")
        assert len(traces) >= 1 and len(loads) == n and all(p.read_bytes() == b"cut short" for p in kept("exec"))
        traces.clear()
        same(cache.jit(f, export=True)(box, x), plain)     # the exported program again, not traced
        assert traces == [] and len(loads) == n
        monkeypatch.setattr(cache, "_source_digest", lambda: "edited-source")
        cache.jit(f, export=True)(box, x)
        assert len(traces) >= 1 and len(kept("export")) == 4 and len(kept("exec")) == 4    # a fresh compile: kept
        jax.config.update("jax_compilation_cache_dir", None)
        fn_off = cache.jit(f, export=True)
        traces.clear()
        off = fn_off(box, x)                                   # cache off: exported in memory, nothing written
        assert len(kept("export")) == 4 and len(kept("exec")) == 4 and float(off[0]["n"]) == float(plain[0]["n"])
        assert len(traces) >= 1 and [c is not None for c, _ in fn_off.calls.values()] == [True]
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_before)
        compilation_cache.reset_cache()


def test_cache_command_counts_prunes_and_clears_only_cache_files(tmp_path, monkeypatch, capsys):
    """`perfmodel cache`: counts XLA's entries and perfmodel's files per kind, with those of other
    versions (another version tag, none, a write cut short, or an earlier version's marks) as stale; --prune removes exactly those
    (and XLA programs compiled for another version), --clear every cache file; a file of the user's in
    the folder, and a subfolder, are never touched."""
    import json

    from perfmodel import cache, cli

    tag, h32, h64 = cache._version_tag(), "a" * 32, "b" * 64
    names = {
        f"perfmodel-export-{tag}-{h32}": False, f"perfmodel-exec-{tag}-{h32}": False,
        f"perfmodel-export-deadbeef-{h32}": True, f"perfmodel-exec-{h32}": True,      # another version; before tags
        f"perfmodel-kept-{tag}-{h32}.123.tmp": True,                                  # a write cut short
        f"jit_perfmodel_{tag}_{'c' * 12}-{h64}-cache": False,
        f"jit_perfmodel_deadbeef_{'c' * 12}-{h64}-cache": True, f"jit_perfmodel_deadbeef_{'c' * 12}-{h64}-atime": True,
        f"jit_score-{h64}-cache": None,                                               # any program's
    }
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(b"x" * (i + 1))
    (tmp_path / "my-notes.txt").write_text("mine")
    (tmp_path / "sub").mkdir()
    found = {pathlib.Path(f["path"]).name: f["stale"] for f in cache.cache_files(str(tmp_path))}
    assert found == names
    before = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path))
    try:
        assert cli.main(["cache", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["kinds"]["xla"] == {"files": 4, "bytes": 6 + 7 + 8 + 9, "stale_files": 2, "stale_bytes": 7 + 8}
        assert out["kinds"]["export"]["stale_files"] == 1 and out["kinds"]["kept"]["files"] == 1
        assert cli.main(["cache", "--prune"]) == 0
        assert "removed 5 files" in capsys.readouterr().out
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted([n for n, stale in names.items() if not stale] + ["my-notes.txt", "sub"])
        assert cli.main(["cache", "--clear", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["removed"]["files"] == 4
        assert sorted(p.name for p in tmp_path.iterdir()) == ["my-notes.txt", "sub"]
        monkeypatch.setenv("PERFMODEL_CACHE_DIR", "")
        jax.config.update("jax_compilation_cache_dir", None)          # a new process's setting
        assert cli.main(["cache"]) == 0 and "off" in capsys.readouterr().out
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_threads_that_call_an_exported_program_at_once_make_it_once(monkeypatch):
    """Threads calling a cache.jit(export=True) function with the same shapes at once (a user's
    thread-pool executor running two searches) wait for one compile: the program is made once and
    both get its result."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import jax.numpy as jnp
    import numpy as np

    from perfmodel import cache

    made = []
    fn = cache.jit(lambda x: jnp.tanh(x) * 2.0, export=True)

    def making(folder, tree, shapes, leaves):       # stands in for trace, export and compile
        made.append(threading.get_ident())
        time.sleep(0.2)                              # the other thread has asked by now
        return (lambda *xs: [jnp.tanh(xs[0]) * 2.0]), jax.tree_util.tree_structure(0.0)

    monkeypatch.setattr(cache, "exporting", lambda: True)
    monkeypatch.setattr(fn, "_made", making)
    x = np.linspace(0, 1, 5, dtype=np.float32)
    both = threading.Barrier(2)

    def call(_):
        both.wait()
        return np.asarray(fn(x))

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(call, range(2))
    assert len(made) == 1, made
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, np.tanh(x) * 2.0, rtol=1e-6)


def test_threads_that_ask_for_programs_of_different_shapes_make_them_side_by_side(monkeypatch):
    """Two shapes of one cache.jit(export=True) function are two programs: a thread making one does
    not hold up a thread making the other. Each maker here waits for the other to have started, so
    one lock for the whole function would leave the first waiting until its timeout."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import jax.numpy as jnp
    import numpy as np

    from perfmodel import cache

    fn = cache.jit(lambda x: x + 1.0, export=True)
    started = threading.Barrier(2, timeout=10)
    overlapped = []

    def making(folder, tree, shapes, leaves):       # stands in for trace, export and compile
        try:
            started.wait()
            overlapped.append(True)
        except threading.BrokenBarrierError:
            overlapped.append(False)
        return (lambda *xs: [xs[0] + 1.0]), jax.tree_util.tree_structure(0.0)

    monkeypatch.setattr(cache, "exporting", lambda: True)
    monkeypatch.setattr(fn, "_made", making)
    xs = [np.zeros(3, np.float32), np.zeros(4, np.float32)]
    with ThreadPoolExecutor(2) as pool:
        out = list(pool.map(lambda x: np.asarray(fn(x)), xs))
    assert overlapped == [True, True]
    for x, y in zip(xs, out):
        np.testing.assert_array_equal(y, x + 1.0)
