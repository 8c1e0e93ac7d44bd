"""Compilation: JAX's persistent compile cache, so that a new process skips the compiles an earlier
one made, the XLA options perfmodel's programs are compiled with (`jit`), and, for the programs a
search calls, their traced programs and executables kept beside it (`jit(export=True)`).

    import perfmodel as pm
    pm.enable_compile_cache()          # before the first search / evaluate of the process

The first search of a problem shape costs mostly compilation; with the cache, a later process loads
the programs instead. Results do not change: a loaded program is the one compiled.

JAX's cache keys a program by its lowered form, so a new process still traces the Python model and
lowers it before it can ask; for the search's programs that tracing is most of what is left. An
exported program (jax.export) is kept so that a new process skips the tracing, and the executable
compiled from it so that it skips the lowering and the cache lookup too (benchmarks/bench_coldstart.py
measures both against JAX's cache alone; benchmarks/RESULTS.md has the figures).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
import zlib

# Programs compiled in at least this long are kept on disk: all of them, since a search's small
# programs (moves, swaps, padding) add up in a new process (jax's default keeps only those over 1 s)
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


def cache_folder() -> str | None:
    """The compile cache's folder this process uses (None or "" when it is off)."""
    import jax
    return jax.config.jax_compilation_cache_dir


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


def _version_tag() -> str:
    """Eight hex digits for this jax version and this source of perfmodel, in the name of every file
    perfmodel keeps in the cache folder (and of the XLA programs compiled for them), so that
    `perfmodel cache --prune` can tell the files other versions left."""
    import jax

    return hashlib.sha256(f"{jax.__version__}|{_source_digest()}".encode()).hexdigest()[:8]


def _digest(name: str) -> str:
    """32 hex digits for `name` (a program and its problem shape) under this jax version and this source
    of perfmodel."""
    import jax

    return hashlib.sha256(f"{jax.__version__}|{_source_digest()}|{name}".encode()).hexdigest()[:32]


# What `perfmodel cache` counts, prunes and clears in the cache folder: perfmodel's files (kind, version
# tag or none, or a .tmp a write left; "kept" marks are an earlier version's, always stale), and XLA's
# entries (jax's LRU cache files; the module name says whether perfmodel compiled it for one of its
# kept programs, and for which version)
_OURS = re.compile(r"perfmodel-(export|exec|kept|plan)-(?:([0-9a-f]{8})-)?[0-9a-f]{32}(?:\.json)?(\.\d+\.tmp)?")
_XLA = re.compile(r"(.+)-[0-9a-f]{64}-(cache|atime)")
_XLA_OURS = re.compile(r"jit_perfmodel_([0-9a-f]{8})_[0-9a-f]+")
CACHE_KINDS = {"xla": "compiled programs (XLA's cache)", "export": "traced programs (jax.export)",
               "exec": "executables (this machine's)", "kept": "marks (an earlier version's)",
               "plan": "searched plans (evaluate)"}


def plan_file_name(digest: str) -> str:
    """The name a searched plan is kept under in the cache folder (analysis.planning.searched_plan):
    this version's tag, so `perfmodel cache --prune` knows the plans other versions searched."""
    return f"perfmodel-plan-{_version_tag()}-{digest}.json"


def cache_files(folder: str) -> list[dict]:
    """The files perfmodel and XLA's cache keep in `folder`: dicts of path, kind (CACHE_KINDS), bytes,
    and stale: True for perfmodel's files of another jax version or source of perfmodel (and XLA
    programs compiled for those; any file a write left cut short), False for this version's, None for
    XLA programs of anything else (they may be any version's). Other files are not listed."""
    tag, out = _version_tag(), []
    with os.scandir(folder) as entries:
        for e in entries:
            if not e.is_file(follow_symlinks=False):
                continue
            m, x = _OURS.fullmatch(e.name), _XLA.fullmatch(e.name)
            if m:
                kind = m.group(1)
                stale = m.group(2) != tag or m.group(3) is not None or kind == "kept"
            elif x:
                ours = _XLA_OURS.fullmatch(x.group(1))
                kind, stale = "xla", (ours.group(1) != tag) if ours else None
            else:
                continue
            out.append({"path": e.path, "kind": kind, "bytes": e.stat(follow_symlinks=False).st_size, "stale": stale})
    return sorted(out, key=lambda f: f["path"])


def remove_cache_files(files: list[dict]) -> tuple[int, int]:
    """Remove these files (cache_files' dicts); (files removed, their bytes). A file gone meanwhile (another
    process pruning) is skipped."""
    n = size = 0
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(f["path"])
            n, size = n + 1, size + f["bytes"]
    return n, size


# XLA options for the programs that evaluate the model. On the CPU, XLA's newer "fusion emitters"
# code generation compiles perfmodel's programs slower, and they run as fast without it. XLA's
# YNNPACK fusions (its default: reductions and elementwise ops handed to the YNN library) build their
# kernels at a program's first run, not at its compile, which a program called a few times pays
# more than it gains (benchmarks/bench_compile.py measures each set on the search's programs)
YNN_FUSIONS_OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}
CPU_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False, **YNN_FUSIONS_OFF}
# For programs whose run time is small beside their compile (one call per search round, or a few
# hundred steps on a small instance): LLVM's optimization passes off as well, which compiles them
# about twice as fast and runs them up to twice as slow (search.adam.step_for decides per problem size)
QUICK_COMPILE_OPTIONS = {**CPU_COMPILE_OPTIONS, "xla_backend_optimization_level": 0}


def jit(fun=None, *, quick: bool = False, export: bool = False, library_fusions: bool = False, **kwargs):
    """jax.jit with CPU_COMPILE_OPTIONS (quick: QUICK_COMPILE_OPTIONS) when JAX runs on the CPU
    (other backends: jax.jit as is). Use it as @jit, @jit(static_argnums=...) or jit(f, ...).
    library_fusions=True keeps XLA's YNNPACK fusions (compile_options): for a program that runs
    many times, where they run faster and the first call's kernel building does not count.
    export=True (functions of pytrees of arrays, no static arguments): the traced program is exported
    (Exported) and, with the persistent cache on, kept there too, so that a new process skips tracing
    the model."""
    import jax

    if fun is None:
        return functools.partial(jit, quick=quick, export=export, library_fusions=library_fusions, **kwargs)
    if export:
        if kwargs:
            raise TypeError("jit(export=True) takes no static arguments")
        return Exported(fun, quick, library_fusions)
    return jax.jit(fun, compiler_options=compile_options(quick, library_fusions), **kwargs)


# Whether cache.jit(export=True) keeps traced programs in the persistent cache's folder (False: JAX's
# cache alone; benchmarks/bench_coldstart.py measures both)
EXPORT = True


def exporting() -> bool:
    """Whether cache.jit(export=True) functions load and keep exported programs in the cache folder now
    (EXPORT, and the persistent cache on)."""
    import jax

    return EXPORT and bool(jax.config.jax_compilation_cache_dir)


class Exported:
    """A jitted function whose traced and lowered program is kept in the persistent cache's folder
    (jax.export, one file per argument structure and shapes, this jax version and this source of
    perfmodel), so that a new process loads it instead of tracing the Python model again. The
    program is compiled with the same options, and the executable kept beside it (_keep_executable,
    per machine), so that a new process on this machine loads that and neither lowers nor compiles.
    Without the cache (or with EXPORT off) the program is exported in memory all the same: XLA
    compiles an exported program otherwise than the plain jitted function (its float32 sums may
    differ in the last bit), and a search that breaks ties on them would find another plan with the
    cache on than off. Under a trace (vmap, grad, another jit) it is the plain jitted function: the
    enclosing program is compiled whole, the same way with the cache on or off."""

    def __init__(self, fun, quick: bool, library_fusions: bool = False):
        import jax

        self.fun, self.options = fun, compile_options(quick, library_fusions)
        self.plain = jax.jit(fun, compiler_options=self.options)
        self.calls: dict = {}         # (argument structure, shapes and dtypes) -> (callable on leaves, output structure)
        # threads that ask for one program at once (a user's thread-pool executor) wait for one compile,
        # not one each; a lock per program, so that programs of other shapes compile side by side
        self._making: dict = {}
        self._guard = threading.Lock()
        functools.update_wrapper(self, fun)

    def __call__(self, *args):
        import jax

        leaves, tree = jax.tree_util.tree_flatten(args)
        if traced(leaves):
            return self.plain(*args)
        key = (tree, tuple(_aval(x) for x in leaves))
        call, out_tree = self._entry(key, leaves)
        if call is not None:
            try:
                return jax.tree_util.tree_unflatten(out_tree, call(*leaves))
            except Exception:     # noqa: BLE001 -- arrays placed otherwise than it was compiled for (another device)
                self.calls[key] = (None, None)
        return self.plain(*args)

    def lower(self, *args):
        return self.plain.lower(*args)

    def _entry(self, key: tuple, leaves) -> tuple:
        """(callable on the leaves, output structure) for key = (argument structure, leaves' _aval),
        made once (_made); (None, None): a program jax cannot export (the plain one then)."""
        import jax

        entry = self.calls.get(key)
        if entry is None:
            with self._guard:
                making = self._making.setdefault(key, threading.Lock())
            with making:
                entry = self.calls.get(key)
                if entry is None:
                    try:
                        entry = self._made(jax.config.jax_compilation_cache_dir if exporting() else None, *key, leaves)
                    except Exception:     # noqa: BLE001 -- a program jax cannot export: the plain one
                        entry = (None, None)
                    self.calls[key] = entry
        return entry

    def _paths(self, folder: str, tree, shapes: tuple) -> tuple[str, str, str, str]:
        """(version tag, digest, exported program's path, executable's path) for these arguments."""
        import jax

        digest = _digest(f"{self.fun.__module__}.{self.fun.__qualname__}|{jax.default_backend()}|{tree}|{shapes}")
        tag = _version_tag()
        options = sorted(self.options.items()) if self.options else None
        machine = hashlib.sha256(f"{digest}|{options}|{_machine()}".encode()).hexdigest()[:32]
        return (tag, digest, os.path.join(folder, f"perfmodel-export-{tag}-{digest}"),
                os.path.join(folder, f"perfmodel-exec-{tag}-{machine}"))

    def _made(self, folder: str | None, tree, shapes: tuple, leaves):
        """Load the exported program from `folder`, or trace and export it there (None: in memory
        only); the callable on the flat leaves and the output structure. shapes: the leaves' _aval."""
        import pickle

        import jax

        tag, digest, path, exec_path = self._paths(folder or "", tree, shapes)
        loaded = _load_executable(exec_path) if folder else None
        if loaded is not None:
            return loaded
        exp = out_tree = None
        if folder and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    blob, out_tree = pickle.load(f)
                exp = jax.export.deserialize(bytearray(blob))
            except Exception:      # noqa: BLE001 -- unreadable (a write cut short): traced again below
                exp = None
        if exp is None:
            holder = {}

            def flat(*xs):
                out = self.fun(*jax.tree_util.tree_unflatten(tree, xs))
                flat_out, holder["tree"] = jax.tree_util.tree_flatten(out)
                return flat_out

            exp = jax.export.export(jax.jit(flat))(*leaves)
            out_tree = holder["tree"]
            # (pickle: the output structure names perfmodel's classes; the folder is the user's own, as
            # are the compiled programs XLA loads from it)
            if folder:
                _dump_whole(path, (bytes(exp.serialize()), out_tree))
        # compiled ahead for these leaves: one executable whether a call's arrays are numpy or already
        # on the device (a jitted exp.call would compile once for each). Named after the file: XLA's
        # cache keys it apart from every other source of perfmodel, so that the executable is compiled
        # here, not loaded from there (_keep_executable)
        def call(*xs):
            return exp.call(*xs)

        call.__name__ = call.__qualname__ = f"perfmodel_{tag}_{digest[:12]}"
        with _CacheHits() as hits:
            compiled = jax.jit(call, compiler_options=self.options).lower(*leaves).compile()
        if folder and hits.count == 0:         # compiled here, not handed back by XLA's cache
            _keep_executable(exec_path, compiled, out_tree)
        return compiled, out_tree


class _CacheHits:
    """How many programs a block loaded from the persistent cache (jax.monitoring's cache-hit events,
    which jax records in the thread that makes the program). An executable XLA loaded from its cache
    does not serialize whole (its copy fails when called), so Exported keeps only one compiled here."""

    EVENT = "/jax/compilation_cache/cache_hits"
    _counts = [0]                 # the events seen by the listener, registered once per process
    _listening = False

    @classmethod
    def _count(cls, event: str, **_):
        if event == cls.EVENT:
            cls._counts[0] += 1

    def __enter__(self):
        import jax

        if not _CacheHits._listening:
            jax.monitoring.register_event_listener(_CacheHits._count)
            _CacheHits._listening = True
        self.start = _CacheHits._counts[0]
        return self

    def __exit__(self, *exc):
        self.count = _CacheHits._counts[0] - self.start
        return False


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    """What a compiled executable is bound to beyond its program: the backend's platform and version, its
    devices and, on Linux, the CPU's model and instruction-set flags (XLA:CPU generates code for the
    host's features: a cache folder two machines share must not hand one the other's executables)."""
    import jax

    d = jax.devices()
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(("model name", "flags", "Features")):
                cpu += line.strip() + "|"
            elif not line.strip():         # the first processor's lines
                break
    return f"{d[0].client.platform}|{d[0].client.platform_version}|{len(d)}|{d[0].device_kind}|{cpu}"


def _load_executable(path: str):
    """The executable _keep_executable kept at `path`, loaded (the callable on an Exported call's leaves,
    the output structure); None when there is none, or it cannot be read or loaded here (then the
    program is made again). Records EXECUTABLE_LOAD and EXECUTABLE_LOADED (jax.monitoring), for
    whoever times the making of programs (benchmarks)."""
    import pickle
    import time

    import jax
    from jax.experimental import serialize_executable

    if not os.path.exists(path):
        return None
    t = time.perf_counter()
    try:
        with open(path, "rb") as f:
            blob, in_tree, out_flat, out_tree = pickle.load(f)
        compiled = serialize_executable.deserialize_and_load(zlib.decompress(blob), in_tree, out_flat)
    except Exception:      # noqa: BLE001 -- cut short, or an executable this jaxlib cannot load
        return None
    jax.monitoring.record_event_duration_secs(EXECUTABLE_LOAD, time.perf_counter() - t)
    jax.monitoring.record_event(EXECUTABLE_LOADED)
    return compiled, out_tree


# jax.monitoring events Exported records when it loads a kept executable (no jax event says so:
# nothing is traced, lowered or compiled)
EXECUTABLE_LOAD = "/perfmodel/cache/executable_load_duration"
EXECUTABLE_LOADED = "/perfmodel/cache/executable_loaded"


def _keep_executable(path: str, compiled, out_tree) -> None:
    """Keep a compiled executable at `path`, whole or not at all, so that a new process on this machine
    loads it (_load_executable) without tracing, lowering or asking XLA's cache, which lowers the
    program to find its key. Skipped where the backend cannot serialize it (constants in the program)
    or the folder is read-only."""
    from jax.experimental import serialize_executable

    try:
        blob, in_tree, out_flat = serialize_executable.serialize(compiled)
    except Exception:      # noqa: BLE001 -- not serializable on this backend
        return
    # compressed, as XLA's own cache compresses its entries: object code shrinks several times
    _dump_whole(path, (zlib.compress(blob, 1), in_tree, out_flat, out_tree))


def _dump_whole(path: str, obj) -> None:
    """Pickle `obj` to `path`, whole or not at all (a temporary file, then renamed). Skipped where the
    folder is read-only or pickle cannot name a type in `obj`: the program is made again next time."""
    import pickle

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(obj, f)
        os.replace(tmp, path)
    except (OSError, pickle.PicklingError, AttributeError, TypeError):
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _aval(x):
    """A leaf's shape and dtype (Python scalars: their type; jax takes them weakly typed). Per call of
    an Exported function, for every leaf: kept cheap."""
    try:
        return x.shape, x.dtype
    except AttributeError:
        return type(x).__name__


def compile_options(quick: bool = False, library_fusions: bool = False) -> dict | None:
    """The options cache.jit compiles with on this backend (None: the backend's defaults).
    library_fusions: XLA's YNNPACK fusions left on (CPU_COMPILE_OPTIONS turns them off)."""
    import jax

    if jax.default_backend() != "cpu":
        return None
    options = QUICK_COMPILE_OPTIONS if quick else CPU_COMPILE_OPTIONS
    return {k: v for k, v in options.items() if k not in YNN_FUSIONS_OFF} if library_fusions else options


def traced(tree) -> bool:
    """Whether any leaf of `tree` is a tracer: the value is under a jit, vmap or grad (where jax
    allows no compile options, and where values computed now must not outlive the trace)."""
    import jax

    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))
