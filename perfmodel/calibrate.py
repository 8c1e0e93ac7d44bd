"""Calibration: time microbenchmarks and whole reference steps on the local JAX device, fit the chip's
efficiency parameters through the model's own cost functions, and save the fitted chip as a preset.

Measurements (each timed after a compile and a warm-up call, with block_until_ready, over calls
repeated until ~`min_s` of work and at least MIN_REPS calls have been timed; the whole grid is
measured `rounds` times, one pass after another, so that a burst of load from other processes
hits one round of a benchmark, not all of its calls). On a CPU shared with other processes a
call can only be slowed down, so a benchmark's time is the minimum over all its calls of every
round (the usual way to time on a loaded machine, as Python's timeit advises); on an accelerator
it is the median of its calls (one round). The 1-minute load average at the time of each
benchmark's fastest round is kept with it (`load_1min` in the CSV).

  stream     y = 2 x + 1 over a large fp32 array: the device's streaming memory bandwidth
  matmul     one jitted GEMM [M, K] x [K, N] per shape, in the calibration dtype
  embedding  one table's pooled lookups (gather + segment sum) at batch B, and the same plus the
             fused row-wise Adagrad update, over rows, dims and pooling factors
  step       whole single-device reference training steps (perfmodel.reference.make_step) of small
             DLRMs: batch, tables, dims, pooling, MLP widths, dot or DCNv2 interaction

Predictions are the model's: compute.memory_time for a stream, compute.gemm_times for a GEMM,
cost.embedding.embedding_costs for a table (lookups; the update's gradient scatter, index sort and
row updates), evaluate(...).step_s for a step on a one-chip system. The fitted parameters are
  peak (effective; on a device with no published peak) or matmul_efficiency_max (on one with),
  matmul_half_efficiency, hbm_efficiency (relative to the measured or published bandwidth),
  gather_efficiency_max, gather_half_efficiency_row_bytes and launch_overhead;
on a device with no published figures (a CPU: peaks "measured") also the last-level cache's
effective bandwidth, with its size from sysfs and one compute unit (the measurement process is
pinned to one core). They are found by Adam (optax) on a Huber loss of the log error over the
training half of every kind (KIND_WEIGHTS). The other half is held out; the report gives its
median and 90th-percentile relative error per kind. `python -m perfmodel.calibrate refit --csv F`
refits the current model to recorded measurements without timing anything.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import reference as ref
from .config import ConfigError, preset_path, read_file
from .cost.compute import gemm_times, memory_time
from .cost.embedding import embedding_costs
from .evaluate import _evaluate
from .hardware import System, load_system
from .plan import Plan, TablePlan, to_arrays
from .schema import CHIP
from .workload import Dense, parse_model

KINDS = ("memory", "matmul", "embedding", "step")
KIND_WEIGHTS = (0.1, 0.1, 0.1, 0.7)    # whole steps are what the model predicts; kernels pin its parts
DTYPE_NAMES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}

# ------------------------------------------------------------------------------------- grids
# matmul: (M, K, N); embedding: (rows, dim, pooling, batch); step: see _step_config
GRIDS = {
    "default": {
        "memory": [1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22],    # 64 KiB .. 16 MiB: a step's working sets
        "matmul": [(64, 64, 64), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (1024, 64, 256),
                   (2048, 256, 64), (4096, 128, 128), (128, 2048, 128), (1024, 256, 1024), (4096, 13, 256)],
        "embedding": [(10_000, 16, 4, 1024), (100_000, 32, 8, 2048), (100_000, 128, 2, 2048),
                      (1_000_000, 64, 4, 1024), (30_000, 128, 16, 512), (3_000, 64, 32, 1024)],
        "step": [  # (tables, dim, pooling, batch, bottom widths, top widths, interaction, rows): 2 structures
            (2, 16, 2, 256, (64,), (64,), "dot", 10_000), (2, 32, 8, 512, (128,), (128,), "dot", 50_000),
            (2, 64, 4, 2048, (64,), (256,), "dot", 100_000), (2, 16, 16, 1024, (32,), (64,), "dot", 5_000),
            (2, 64, 1, 512, (64,), (128,), "dot", 30_000),
            (3, 32, 8, 512, (64,), (64,), "dcnv2", 20_000), (3, 64, 2, 1024, (256,), (256,), "dcnv2", 50_000),
            (3, 16, 4, 256, (128,), (512,), "dcnv2", 10_000),
        ],
        "iterations": 400, "min_s": 0.1, "rounds": 3,
    },
    "quick": {
        "memory": [1 << 14, 1 << 18, 1 << 22],
        "matmul": [(64, 64, 64), (256, 256, 256), (1024, 1024, 1024), (2048, 256, 64), (512, 1024, 256),
                   (4096, 13, 256), (128, 2048, 128), (1024, 256, 1024)],
        "embedding": [(10_000, 16, 4, 1024), (100_000, 128, 2, 2048), (1_000_000, 64, 4, 1024), (3_000, 64, 32, 1024)],
        "step": [(2, 16, 2, 256, (64,), (64,), "dot", 10_000), (2, 32, 8, 512, (64,), (64,), "dot", 20_000),
                 (2, 64, 4, 1024, (128,), (128,), "dot", 50_000), (2, 16, 4, 2048, (64,), (128,), "dot", 20_000)],
        "iterations": 300, "min_s": 0.05, "rounds": 2,
    },
    "gpu": {   # accelerator-sized: GEMMs to 8k, tables to 10 M rows, steps to batch 32k (not run in CI)
        "memory": [1 << 20, 1 << 24, 1 << 26, 1 << 28],
        "matmul": [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                   (16384, 512, 256), (32768, 1024, 1024), (8192, 13, 512), (65536, 256, 64), (4096, 3456, 1024),
                   (32768, 3456, 512), (1024, 8192, 1024)],
        "embedding": [(1_000_000, 64, 4, 16384), (10_000_000, 128, 8, 16384), (100_000, 32, 32, 32768),
                      (10_000_000, 16, 1, 65536), (3_000_000, 128, 20, 8192), (300_000, 256, 2, 32768),
                      (30_000, 64, 64, 16384), (10_000_000, 64, 16, 4096)],
        "step": [
            (2, 64, 8, 4096, (512,), (512,), "dot", 1_000_000), (2, 128, 4, 16384, (256,), (1024,), "dot", 3_000_000),
            (2, 64, 16, 32768, (512,), (256,), "dot", 100_000), (2, 128, 2, 8192, (1024,), (1024,), "dot", 10_000_000),
            (2, 32, 32, 16384, (128,), (512,), "dot", 300_000), (2, 64, 1, 32768, (256,), (2048,), "dot", 1_000_000),
            (3, 128, 8, 8192, (512,), (1024,), "dcnv2", 1_000_000), (3, 64, 4, 32768, (256,), (512,), "dcnv2", 3_000_000),
            (3, 128, 2, 4096, (1024,), (2048,), "dcnv2", 300_000), (3, 64, 16, 16384, (512,), (256,), "dcnv2", 100_000),
        ],
        "iterations": 400, "min_s": 0.2, "rounds": 1,
    },
    "tiny": {  # a smoke test of the whole procedure (the test suite's), not a calibration
        "memory": [1 << 14, 1 << 20],
        "matmul": [(64, 64, 64), (256, 256, 256), (512, 128, 256), (1024, 64, 128)],
        "embedding": [(10_000, 16, 4, 512), (100_000, 32, 2, 1024)],
        "step": [(2, 16, 2, 256, (32,), (32,), "dot", 5_000), (2, 16, 4, 512, (64,), (64,), "dot", 10_000)],
        "iterations": 150, "min_s": 0.01, "rounds": 1,
    },
}


@dataclass
class Measurement:
    kind: str
    name: str
    params: dict
    seconds: float
    reps: int
    train: bool = True
    predicted: float = float("nan")
    load_1min: float = float("nan")    # the machine's 1-minute load average when it was timed


# ----------------------------------------------------------------------------------- timing

MIN_REPS = 5


def time_call(fn, *args, min_s: float = 0.05, max_reps: int = 200, state_arg: int | None = None) -> tuple[float, int]:
    """Seconds of fn(*args) after a compile and one warm-up call, over enough calls to time about
    min_s (at least MIN_REPS): the fastest call on a CPU, the median on an accelerator. With
    state_arg, the call's first output feeds that argument back (a training step whose state is
    donated)."""
    args = list(args)
    clock = _clock()

    def call():
        out = fn(*args)
        if state_arg is not None:
            args[state_arg] = out[0]
        jax.block_until_ready(out)
    call()                                    # compile
    call()                                    # warm-up
    times = []
    t_start = clock()
    while len(times) < MIN_REPS or (clock() - t_start < min_s and len(times) < max_reps):
        t0 = clock()
        call()
        times.append(clock() - t0)
    # a CPU shared with other processes only ever slows a call down: the fastest call is the
    # device's time; an accelerator's calls vary both ways: their median
    est = np.min(times) if jax.devices()[0].platform == "cpu" else np.median(times)
    return float(est), len(times)


def _clock():
    """Wall time (perf_counter), on every device. Not the process's CPU time on a CPU: XLA:CPU
    runs a program on its own runtime threads, and the CPU time of another running thread is only
    accounted at the scheduler's next tick, so a short call could read several times too fast
    (a 0.2 ms GEMM timed at 0.045 ms) and the minimum picks exactly those; CPU time also counts
    the runtime threads' spin-waiting. Other processes only ever lengthen a call's wall time,
    which the minimum over many calls in several rounds removes."""
    return time.perf_counter


# set before JAX starts its CPU backend (the CLI does): one core is the calibrated "device"
CPU_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def device_name() -> str:
    d = jax.devices()[0]
    kind = getattr(d, "device_kind", d.platform)
    if d.platform == "cpu":
        cpu = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"cpu ({cpu}, {jax.local_device_count()} JAX device(s), {_cores()} cores)"
    return f"{d.platform} ({kind})"


def _cores() -> int:
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ----------------------------------------------------------------------------------- benches

def _load() -> float:
    import os
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return float("nan")


def bench_memory(sizes, min_s: float) -> list[Measurement]:
    """Streaming y = max(2 x + 1, 0) over n fp32 values: 8 n bytes read and written."""
    f = jax.jit(lambda x: jnp.maximum(x * 2.0 + 1.0, 0.0))
    out = []
    for n in sizes:
        x = jnp.ones((n,), jnp.float32)
        s, reps = time_call(f, x, min_s=min_s)
        out.append(Measurement("memory", f"stream {4 * n / 2**20:g} MiB", {"bytes": 8.0 * n}, s, reps, load_1min=_load()))
    return out


def bench_matmuls(shapes, dtype: str, min_s: float) -> list[Measurement]:
    dt = DTYPE_NAMES[dtype]
    f = jax.jit(lambda a, b: a @ b)
    out = []
    for i, (M, K, N) in enumerate(shapes):
        k1, k2 = jax.random.split(jax.random.PRNGKey(i))
        a = jax.random.normal(k1, (M, K), jnp.float32).astype(dt)
        b = jax.random.normal(k2, (K, N), jnp.float32).astype(dt)
        s, reps = time_call(f, a, b, min_s=min_s)
        out.append(Measurement("matmul", f"matmul {M}x{K}x{N}", {"M": M, "K": K, "N": N}, s, reps, load_1min=_load()))
    return out


def _emb_spec(rows: int, dim: int, pooling: int, batch: int) -> ref.Spec:
    return ref.spec_from_dict(_step_dict(1, dim, pooling, batch, (dim,), (dim,), "dot", rows, "fp32"))


def bench_embeddings(configs, min_s: float) -> list[Measurement]:
    out = []
    for i, (R, d, P, B) in enumerate(configs):
        spec = _emb_spec(R, d, P, B)
        table = ref.init_tables(spec, jax.random.PRNGKey(i))[0]
        state = ref.init_emb_state(spec, R, d)
        idx = jax.random.randint(jax.random.PRNGKey(100 + i), (B, P), 0, R, ref.INDEX_DTYPE)
        g = jax.random.normal(jax.random.PRNGKey(200 + i), (B, d), jnp.float32) * 1e-3
        fwd = jax.jit(ref.embedding_bag)

        def update(ts, idx, g):
            g_rows = jnp.repeat(g, P, axis=0, total_repeat_length=B * P)
            return ref.sparse_update(spec, *ts, idx.reshape(-1), g_rows)
        update = jax.jit(update, donate_argnums=0)

        def train(ts, idx, g):       # two programs: see reference.make_timed_step
            pooled = fwd(ts[0], idx)
            return update(ts, idx, g), pooled
        p = {"rows": R, "dim": d, "pooling": P, "batch": B}
        s, reps = time_call(fwd, table, idx, min_s=min_s)
        out.append(Measurement("embedding", f"lookup R={R} d={d} P={P} B={B}", {**p, "update": 0}, s, reps, load_1min=_load()))
        s, reps = time_call(train, (table, state), idx, g, min_s=min_s, state_arg=0)
        out.append(Measurement("embedding", f"lookup+update R={R} d={d} P={P} B={B}", {**p, "update": 1}, s, reps, load_1min=_load()))
    return out


def _step_dict(T, d, pooling, batch, bottom, top, inter, rows, dtype) -> dict:
    layers = [dict(kind="mlp", name="bottom_mlp", stage="bottom", input=13, widths=[*bottom, d])]
    F = T + 1
    if inter == "dot":
        layers.append(dict(kind="dot", name="interaction", stage="top", features=F, dim=d))
        width = F * (F - 1) // 2 + d
    else:
        layers.append(dict(kind="dcnv2", name="interaction", stage="top", width=F * d, layers=2, low_rank=max(8, d // 2)))
        width = F * d
    layers.append(dict(kind="mlp", name="top_mlp", stage="top", input=width, widths=[*top, 1]))
    nbytes = 4 if dtype == "fp32" else 2
    return dict(name=f"cal-T{T}-d{d}-P{pooling}-B{batch}-{inter}", global_batch=batch, dense_dtype=dtype,
                param_bytes=4, activation_bytes=nbytes, dense_optimizer="adagrad",
                embeddings=dict(dim=d, bytes_per_element=4, optimizer="rowwise_adagrad", index_bytes=ref.INDEX_BYTES,
                                names=[f"t{i}" for i in range(T)], rows=[rows] * T, pooling=[pooling] * T),
                dense=dict(layers=layers))


def bench_steps(configs, dtype: str, min_s: float) -> list[Measurement]:
    out = []
    for i, c in enumerate(configs):
        T, d, P, B, bottom, top, inter, rows = c
        data = _step_dict(T, d, P, B, bottom, top, inter, rows, dtype)
        spec = ref.spec_from_dict(data)
        state = ref.init_state(spec, jax.random.PRNGKey(i))
        batch = ref.make_batch(spec, jax.random.PRNGKey(50 + i))
        step = ref.make_timed_step(spec)
        s, reps = time_call(step, state, batch, min_s=min_s, state_arg=0)
        grid = {"tables": T, "dim": d, "pooling": P, "batch": B, "bottom": list(bottom), "top": list(top),
                "interaction": inter, "rows": rows}    # what _step_dict rebuilds the config from
        out.append(Measurement("step", data["name"], {"config": data, **grid}, s, reps, load_1min=_load()))
    return out


def measure_in_subprocess(grid: str, dtype: str, log=print) -> list[Measurement]:
    """`measure` in a fresh interpreter: on a CPU with XLA asked for one thread (XLA_FLAGS must be
    set before JAX starts its backend, which the calling process has usually done already) and the
    process pinned to one core (XLA:CPU still runs some GEMMs on two threads without it, at twice
    the FLOP/s whenever the other core happens to be idle: one core is the calibrated device)."""
    import os
    import subprocess
    import tempfile
    env = dict(os.environ)
    plat = jax.devices()[0].platform
    if plat == "cpu":
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {CPU_FLAGS}"
        env["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "measurements.json"
        # pinned before the interpreter imports JAX: every thread the runtime starts inherits it
        core = max(os.sched_getaffinity(0)) if plat == "cpu" and hasattr(os, "sched_setaffinity") else -1
        entry = ("import os, sys; core = int(sys.argv[1]); core < 0 or os.sched_setaffinity(0, {core}); "
                 "from perfmodel.calibrate import _measure_main; sys.exit(_measure_main(sys.argv[2:]))")
        proc = subprocess.Popen([sys.executable, "-c", entry, str(core), "measure", "--grid", grid,
                                 "--dtype", dtype, "--out", str(path)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            log(line.rstrip("\n"))
        if proc.wait() != 0:
            raise RuntimeError("the measurement process failed:\n" + "".join(lines[-30:]))
        data = json.loads(path.read_text())
    return [Measurement(**m) for m in data["measurements"]]


def _measure_main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m perfmodel.calibrate measure")
    ap.add_argument("what", choices=("measure", "refit"))
    ap.add_argument("--grid", default="default", choices=tuple(GRIDS))
    ap.add_argument("--dtype", default="fp32", choices=tuple(DTYPE_NAMES))
    ap.add_argument("--out", help="measure: the JSON to write")
    ap.add_argument("--csv", help="refit: measurements written by `perfmodel calibrate --measurements`")
    ap.add_argument("--base", default="mtia300", help="refit: the base chip preset")
    ap.add_argument("--peaks", default="measured", choices=("measured", "base"), help="refit: as calibrate's")
    a = ap.parse_args(argv)
    if a.what == "refit":
        if not a.csv:
            ap.error("refit needs --csv")
        chip, ms = refit(a.csv, base=a.base, dtype=a.dtype, peaks=a.peaks)
        fields = ("peak_fp32_flops", "peak_bf16_flops", "matmul_eff_max", "matmul_half_flop", "hbm_Bps", "hbm_eff",
                  "llc_bytes", "llc_Bps", "gather_eff_max", "gather_half_row_bytes", "launch_s")
        print(format_report({"out": "(not written: refit)", "device": a.csv, "date": "recorded", "dtype": a.dtype,
                             "seconds": 0.0, "stream_GBps": float("nan"), "errors": errors(ms),
                             "fitted": {k: float(np.asarray(getattr(chip, k))) for k in fields}}))
        for m in ms:
            print(f"  {m.kind:<9} {m.name:<44} {'train' if m.train else 'held':<5} measured {m.seconds * 1e3:9.4f} ms"
                  f"  predicted {m.predicted * 1e3:9.4f} ms  {100 * (m.predicted / m.seconds - 1):+6.1f} %")
        return 0
    if not a.out:
        ap.error("measure needs --out")
    from .cache import enable_compile_cache
    enable_compile_cache()                 # a second calibration skips the compiles
    ms = measure(GRIDS[a.grid], a.dtype, log=lambda m: print(m, flush=True))
    Path(a.out).write_text(json.dumps({"device": device_name(), "measurements": [dataclasses.asdict(m) for m in ms]}))
    return 0


def measure(grid: dict, dtype: str, log=print) -> list[Measurement]:
    """Every benchmark of the grid, `rounds` passes over the whole grid combined per benchmark:
    the minimum on a CPU (calls are only ever slowed by other load), the median otherwise."""
    rounds = [_measure_once(grid, dtype, log, r, grid.get("rounds", 1)) for r in range(grid.get("rounds", 1))]
    cpu = jax.devices()[0].platform == "cpu"
    out = []
    for runs in zip(*rounds):
        secs = [m.seconds for m in runs]
        best = runs[int(np.argmin(secs))] if cpu else runs[int(np.argsort(secs)[len(secs) // 2])]
        out.append(dataclasses.replace(best, reps=sum(m.reps for m in runs)))
    return out


def _measure_once(grid: dict, dtype: str, log, r: int, n: int) -> list[Measurement]:
    t0 = time.perf_counter()
    tag = f"  [round {r + 1}/{n}, load {_load():.2f}]" if n > 1 else ""
    ms = bench_memory(grid["memory"], grid["min_s"])
    big = ms[-1]
    log(f"  streaming        {len(ms):3d} sizes, {big.params['bytes'] / big.seconds / 1e9:.2f} GB/s at "
        f"{big.params['bytes'] / 2**21:.0f} MiB   ({time.perf_counter() - t0:.1f} s){tag}")
    ms += bench_matmuls(grid["matmul"], dtype, grid["min_s"])
    log(f"  matmuls          {len(grid['matmul']):3d} shapes          ({time.perf_counter() - t0:.1f} s)")
    ms += bench_embeddings(grid["embedding"], grid["min_s"])
    log(f"  embedding bags   {2 * len(grid['embedding']):3d} kernels         ({time.perf_counter() - t0:.1f} s)")
    ms += bench_steps(grid["step"], dtype, grid["min_s"])
    log(f"  reference steps  {len(grid['step']):3d} configurations  ({time.perf_counter() - t0:.1f} s)")
    return ms


# ------------------------------------------------------------------------- model predictions

def _matmul_model(shapes, dtype: str):
    """A RankingModel whose dense part is the benchmark GEMMs (local batch 1, m = M rows)."""
    data = _step_dict(1, 8, 1, 1, (8,), (8,), "dot", 10, dtype)
    model = parse_model(data, "calibration")
    s = np.asarray(shapes, np.float32)
    f = lambda x: jnp.asarray(x, jnp.float32)
    G = len(shapes)
    dense = Dense(m=f(s[:, 0]), n=f(s[:, 2]), k=f(s[:, 1]), weighted=f(np.ones(G)), bias=f(np.zeros(G)),
                  elementwise=f(np.zeros(G)), bottom=(True,) * G, layer=tuple(f"mm{i}" for i in range(G)))
    return dataclasses.replace(model, dense=dense)


def predictor(ms: list[Measurement], system: System, dtype: str):
    """(f, order): f(chip) -> the model's seconds for every measurement in `order` (differentiable)."""
    mem = [m for m in ms if m.kind == "memory"]
    mem_bytes = jnp.asarray([m.params["bytes"] for m in mem], jnp.float32)
    mm = [m for m in ms if m.kind == "matmul"]
    em = [m for m in ms if m.kind == "embedding"]
    st = [m for m in ms if m.kind == "step"]
    mm_model = _matmul_model([(m.params["M"], m.params["K"], m.params["N"]) for m in mm], dtype) if mm else None
    # embedding: one single-table model per benchmark, stacked for vmap
    emb_models = [parse_model(_step_dict(1, m.params["dim"], m.params["pooling"], m.params["batch"], (m.params["dim"],),
                                         (m.params["dim"],), "dot", m.params["rows"], "fp32"), "calibration") for m in em]
    if emb_models:
        names = emb_models[0].tables.names
        emb_models = [dataclasses.replace(x, name="emb", tables=dataclasses.replace(x.tables, names=names))
                      for x in emb_models]
        emb_stack = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *emb_models)
        upd = jnp.asarray([m.params["update"] for m in em], jnp.float32)
        pa1 = to_arrays(Plan(tables={names[0]: TablePlan("table_wise", [0])}), system, emb_models[0])
    # whole steps: evaluate on a one-chip system, every table on it; configurations of one structure
    # (same tables and layers, different sizes) are stacked and evaluated in one vmap
    groups: dict = {}
    for i, m in enumerate(st):
        mod = dataclasses.replace(parse_model(m.params["config"], m.name), name="calibration step")
        groups.setdefault(jax.tree_util.tree_structure(mod), []).append((i, mod))
    step_groups = []
    for members in groups.values():
        mods = [mod for _, mod in members]
        pa = to_arrays(Plan(tables={n: TablePlan("table_wise", [0]) for n in mods[0].tables.names}), system, mods[0])
        step_groups.append(([i for i, _ in members], jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *mods), pa))
    back = np.argsort(np.concatenate([idx for idx, _, _ in step_groups])) if step_groups else None

    def predict(chip):
        sys_ = system.replace(chip=chip)
        out = []
        if mem:
            out.append(memory_time(chip, mem_bytes, mem_bytes) + chip.launch_s)
        if mm:
            fwd, _ = gemm_times(chip, mm_model, 1.0)
            out.append(fwd)
        if em:
            def one(model):
                e = embedding_costs(sys_, model, pa1, 4.0, 4.0)
                return e.fwd_s[0], e.bwd_s[0]
            f, b = jax.vmap(one)(emb_stack)
            out.append(f + upd * b)
        if step_groups:
            steps = jnp.concatenate([jax.vmap(lambda mod: _evaluate(sys_, mod, pa, 0.0).step_s)(stack)
                                     for _, stack, pa in step_groups])
            out.append(steps[back])
        return jnp.concatenate(out)
    return predict, mem + mm + em + st


# ------------------------------------------------------------------------------------- fitting

FITTED = ("peak", "matmul_eff_max", "matmul_half_flop", "hbm_eff", "gather_eff_max", "gather_half_row_bytes", "launch_s",
          "llc_Bps")


def _logit(p):
    p = min(max(float(p), 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def fit(ms: list[Measurement], system: System, dtype: str, *, peaks: str, stream_Bps: float,
        iterations: int, lr: float = 0.05):
    """Fit the chip's efficiency parameters on the training measurements; returns (chip, history)."""
    predict, order = predictor(ms, system, dtype)
    y = jnp.asarray([m.seconds for m in order], jnp.float32)
    train = jnp.asarray([m.train for m in order], jnp.float32)
    kind_ids = np.asarray([KINDS.index(m.kind) for m in order])
    wk = np.zeros(len(order), np.float32)
    for k, kw in enumerate(KIND_WEIGHTS):    # per kind, whatever its count
        sel = (kind_ids == k) & np.asarray([m.train for m in order])
        if sel.any():
            wk[sel] = kw / sel.sum()
    w = jnp.asarray(wk / max(wk.sum(), 1e-12))
    chip0 = system.chip
    pk = {"fp32": "peak_fp32_flops", "bf16": "peak_bf16_flops"}[dtype]
    mm = [m for m in order if m.kind == "matmul"]
    best = max((2.0 * m.params["M"] * m.params["K"] * m.params["N"] / m.seconds for m in mm), default=float(getattr(chip0, pk)))
    measured = peaks == "measured"
    # no published peak or bandwidth (a CPU): the fitted effective peak and bandwidth stand in for
    # them (efficiency maxima 1 by definition); otherwise the published ones stay and the
    # efficiencies are fitted
    theta = {
        "peak": jnp.float32(math.log(best * 1.2) if measured else _logit(float(chip0.matmul_eff_max))),
        "half": jnp.float32(math.log(1e6 if measured else float(chip0.matmul_half_flop))),
        "hbm": jnp.float32(math.log(stream_Bps) if measured else _logit(float(chip0.hbm_eff))),
        "gmax": jnp.float32(_logit(0.5 if measured else float(chip0.gather_eff_max))),
        "ghalf": jnp.float32(math.log(float(chip0.gather_half_row_bytes))),
        "launch": jnp.float32(math.log(10e-6 if measured else float(chip0.launch_s))),
    }
    if measured:     # no published cache bandwidth either: fitted, from twice the streaming one
        theta["llc"] = jnp.float32(math.log(2.0 * stream_Bps))

    def chip_of(th):
        if measured:
            c = dataclasses.replace(chip0, **{pk: jnp.exp(th["peak"])}, matmul_eff_max=jnp.float32(1.0),
                                    hbm_Bps=jnp.exp(th["hbm"]), hbm_eff=jnp.float32(1.0), llc_Bps=jnp.exp(th["llc"]))
        else:
            c = dataclasses.replace(chip0, matmul_eff_max=jax.nn.sigmoid(th["peak"]), hbm_eff=jax.nn.sigmoid(th["hbm"]))
        return dataclasses.replace(c, matmul_half_flop=jnp.exp(th["half"]), gather_eff_max=jax.nn.sigmoid(th["gmax"]),
                                   gather_half_row_bytes=jnp.exp(th["ghalf"]), launch_s=jnp.exp(th["launch"]))

    def loss(th):    # Huber on the log ratio: a few odd kernels do not dominate the fit
        r = jnp.log(predict(chip_of(th))) - jnp.log(y)
        return jnp.sum(w * train * optax.huber_loss(r, delta=0.3))

    opt = optax.adam(lr)
    state = opt.init(theta)

    @jax.jit
    def update(th, st):
        l, g = jax.value_and_grad(loss)(th)
        u, st = opt.update(g, st, th)
        return optax.apply_updates(th, u), st, l
    hist = []
    for _ in range(iterations):
        theta, state, l = update(theta, state)
        hist.append(float(l))
    chip = chip_of(theta)
    pred = np.asarray(jax.jit(predict)(chip))
    for m, p in zip(order, pred):
        m.predicted = float(p)
    return chip, hist


def split(ms: list[Measurement]) -> None:
    """Hold out every other measurement of each group (a kind; per step structure and per lookup /
    lookup+update), ordered by time, so that both halves span every group's range."""
    groups: dict = {}
    for m in ms:
        groups.setdefault((m.kind, _group(m)), []).append(m)
    for sel in groups.values():
        for i, m in enumerate(sorted(sel, key=lambda m: m.seconds)):
            m.train = i % 2 == 0


def _group(m: Measurement):
    if m.kind == "step":
        return (len(m.params["config"]["embeddings"]["rows"]),
                tuple(l["kind"] for l in m.params["config"]["dense"]["layers"]))
    return m.params.get("update", 0)


def errors(ms: list[Measurement]) -> dict:
    """Per kind and split: count, median and 90th-percentile relative error |pred / meas - 1|."""
    out = {}
    for kind in KINDS:
        for part, flag in (("train", True), ("held_out", False)):
            e = np.asarray([abs(m.predicted / m.seconds - 1.0) for m in ms if m.kind == kind and m.train == flag])
            if e.size:
                out[f"{kind}/{part}"] = {"n": int(e.size), "median": float(np.median(e)),
                                         "p90": float(np.percentile(e, 90))}
    return out


# ------------------------------------------------------------------------------------ writing

def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, int):
        return str(v)
    return f"{float(v):.6g}"


def _base_comments(path) -> dict:
    """(section, key) -> the '# source: ...' / '# assumed: ...' comment of each line of a preset."""
    out, sec = {}, ""
    for line in Path(path).read_text().splitlines():
        st = line.strip()
        if st.startswith("[") and not st.startswith("[["):
            sec = st.strip("[]")
        elif "=" in st and not st.startswith("#") and "#" in st:
            key = st.split("=", 1)[0].strip()
            out[(sec, key)] = st[st.index("#") + 1:].strip()
    return out


def chip_toml(name: str, chip, base: str, device: str, date: str, command: str, fitted: dict[str, str],
              stats: dict, same_chip: bool = False) -> str:
    """The text of a chip preset: the base preset's fields, the fitted/measured ones replaced, every
    number with its source: calibrated; or, copied from the base preset, the base's own source when
    the device is that chip (same_chip), "assumed" otherwise."""
    raw = read_file(preset_path("chips", base))
    base_comment = _base_comments(preset_path("chips", base))
    where = f"on {device} {date} by `{command}`"
    lines = [f"# Chip calibrated {where}.",
             f"# Fitted through perfmodel's own cost functions on {stats['n_train']} measurements; held out "
             f"{stats['n_held_out']}:",
             *(f"#   {k:<20} median {100 * v['median']:.1f} %, p90 {100 * v['p90']:.1f} % (n={v['n']})"
               for k, v in stats["errors"].items() if k.endswith("held_out")),
             f"# Numbers not measured here are copied from the {base} preset (their lines say so; a tag such as",
             f"# [ref] on them is one of the sources listed at the top of data/chips/{base}.toml).",
             "", f"name = {_fmt(name)}",
             f"description = {_fmt(f'Calibrated on {device} {date} (base: {base})')}"]
    for sec, body in raw.items():
        if not isinstance(body, dict):
            continue
        lines += ["", f"[{sec}]"]
        for key, val in body.items():
            spec = CHIP.get(f"{sec}.{key}")
            leaf = spec.leaf.split(".", 1)[1] if spec and spec.leaf and spec.leaf.startswith("chip.") else None
            comment = ""
            if leaf in fitted:
                val = float(np.asarray(getattr(chip, leaf))) / spec.scale
                comment = f"# source: {fitted[leaf]} {where}"
                if not spec.lo <= val <= spec.hi:       # a fit past what the model takes: the file must load
                    val = min(max(val, spec.lo), spec.hi)
                    comment += f" (fit clipped to the model's bound: {spec.allowed()})"
            elif isinstance(val, (int, float)) and not isinstance(val, bool):
                orig = base_comment.get((sec, key), "")
                if same_chip and ":" in orig:
                    kind, why = orig.split(":", 1)
                    comment = f"# {kind.strip()}: ({base} preset) {why.strip()}"
                else:
                    comment = f"# assumed: copied from the {base} preset (not measured by this calibration)"
            text = f"{key} = {_fmt(val)}"
            lines.append(f"{text:<40} {comment}".rstrip())
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- driver

def calibrate(out: str | Path, *, device: str = "local", base: str = "mtia300", grid: str = "default",
              dtype: str | None = None, peaks: str | None = None, command: str | None = None,
              measurements_out: str | Path | None = None, log=print) -> dict:
    """Measure, fit, report and write the chip preset to `out` (never overwrites). Returns the report."""
    out = Path(out)
    if device != "local":
        raise ConfigError("", "device", f"is {device!r}; only 'local' is supported (run this on the machine to calibrate)")
    if out.exists():
        raise ConfigError(str(out), "", "exists already; choose another name or remove it first")
    if not out.parent.is_dir():
        raise ConfigError(str(out), "", "cannot be written: its folder does not exist")
    for p in [measurements_out] if measurements_out else []:
        if Path(p).exists():
            raise ConfigError(str(p), "", "exists already; choose another name or remove it first")
    if grid not in GRIDS:
        raise ConfigError("", "grid", f"is {grid!r}; allowed: {', '.join(GRIDS)}")
    plat = jax.devices()[0].platform
    dtype = dtype or ("fp32" if plat == "cpu" else "bf16")
    if dtype not in DTYPE_NAMES:
        raise ConfigError("", "dtype", f"is {dtype!r}; allowed: {', '.join(DTYPE_NAMES)}")
    peaks = peaks or ("measured" if plat == "cpu" else "base")
    if peaks not in ("measured", "base"):
        raise ConfigError("", "peaks", f"is {peaks!r}; allowed: measured, base")
    family = Path(base).stem
    if family not in _families():
        raise ConfigError("", "base", f"is {base!r}; give a chip preset with a system family: {', '.join(_families())}")
    system = _local_system(family, peaks, None)
    g = GRIDS[grid]
    name = device_name()
    date = _dt.date.today().isoformat()
    command = command or f"perfmodel.calibrate.calibrate({str(out)!r}, base={family!r}, grid={grid!r})"
    t0 = time.perf_counter()
    log(f"calibrating on {name}, dtype {dtype}, grid {grid!r}")
    # a CPU is measured in a fresh process pinned to one thread; an accelerator right here
    fit_ms = measure_in_subprocess(grid, dtype, log) if plat == "cpu" else measure(g, dtype, log)
    stream = max((m for m in fit_ms if m.kind == "memory"), key=lambda m: m.params["bytes"])
    stream_Bps = stream.params["bytes"] / stream.seconds
    split(fit_ms)
    t1 = time.perf_counter()
    chip, hist = fit(fit_ms, system, dtype, peaks=peaks, stream_Bps=stream_Bps, iterations=g["iterations"])
    log(f"  fit              {g['iterations']} Adam steps, loss {hist[0]:.3g} -> {hist[-1]:.3g} ({time.perf_counter() - t1:.1f} s)")
    errs = errors(fit_ms)
    pk = {"fp32": "peak_fp32_flops", "bf16": "peak_bf16_flops"}[dtype]
    fitted = {k: "calibrated" for k in ("matmul_half_flop", "hbm_eff", "gather_eff_max", "gather_half_row_bytes", "launch_s")}
    if peaks == "measured":
        fitted[pk] = "calibrated (effective peak: no published peak for this device)"
        fitted["matmul_eff_max"] = "calibrated (1 by definition: the peak above is the fitted effective one)"
        fitted["hbm_Bps"] = (f"calibrated (effective memory bandwidth; streaming y = max(2x + 1, 0) over "
                             f"{stream.params['bytes'] / 2**21:.0f} MiB measured {stream_Bps / 1e9:.3g} GB/s)")
        fitted["hbm_eff"] = "calibrated (1 by definition: the bandwidth above is the fitted effective one)"
        fitted["llc_Bps"] = "calibrated (effective bandwidth of working sets that fit the cache below)"
        fitted["compute_units"] = "measured (one core: the measurements run pinned to it)"
        if local_llc_bytes():
            fitted["llc_bytes"] = "measured (the largest CPU cache in /sys/devices/system/cpu/cpu0/cache)"
        for other in ("peak_bf16_flops", "peak_fp8_flops", "peak_fp32_flops"):
            if other != pk:
                chip = dataclasses.replace(chip, **{other: getattr(chip, pk)})
                fitted[other] = f"calibrated ({dtype} peak; other dtypes not measured, set equal)"
    else:
        fitted["matmul_eff_max"] = "calibrated"
    stats = {"n_train": sum(m.train for m in fit_ms), "n_held_out": sum(not m.train for m in fit_ms), "errors": errs}
    text = chip_toml(out.stem, chip, family, name, date, command, fitted, stats, same_chip=peaks == "base")
    out.write_text(text)
    from .hardware import load_chip
    load_chip(out)                           # the file is a valid chip preset
    report = {"device": name, "date": date, "dtype": dtype, "grid": grid, "base": family, "out": str(out),
              "stream_GBps": stream_Bps / 1e9, "seconds": time.perf_counter() - t0, "errors": errs,
              "fitted": {k: float(np.asarray(getattr(chip, k))) for k in
                         ("peak_fp32_flops", "peak_bf16_flops", "matmul_eff_max", "matmul_half_flop", "hbm_Bps",
                          "hbm_eff", "llc_bytes", "llc_Bps", "gather_eff_max", "gather_half_row_bytes", "launch_s")},
              "loss": hist[-1],
              "measurements": [{"kind": m.kind, "name": m.name, "measured_s": m.seconds, "predicted_s": m.predicted,
                                "reps": m.reps, "split": "train" if m.train else "held_out"} for m in fit_ms]}
    if measurements_out:
        write_measurements(measurements_out, fit_ms, name, date)
    return report


def _families() -> list[str]:
    from .config import preset_names
    return preset_names("systems")


def write_measurements(path, ms: list[Measurement], device: str, date: str) -> None:
    import csv
    with open(path, "x", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "name", "measured_s", "predicted_s", "reps", "split", "device", "date", "params",
                    "load_1min"])
        for m in ms:
            params = {k: v for k, v in m.params.items() if k != "config"}
            w.writerow([m.kind, m.name, f"{m.seconds:.6g}", "" if math.isnan(m.predicted) else f"{m.predicted:.6g}",
                        m.reps, "train" if m.train else "held_out", device, date, json.dumps(params),
                        "" if math.isnan(m.load_1min) else f"{m.load_1min:.2f}"])


def read_measurements(path, dtype: str = "fp32") -> list[Measurement]:
    """The measurements of a CSV written by write_measurements, split as recorded, ready to refit.
    A step row's configuration is rebuilt from its params (or, in files written before they held
    it, from the grid entry of the same name)."""
    import csv
    by_name = {}
    for g in GRIDS.values():
        for c in g["step"]:
            by_name.setdefault(_step_dict(*c, dtype)["name"], c)
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            p = json.loads(r["params"] or "{}")
            if r["kind"] == "step":
                if "tables" in p:
                    c = (p["tables"], p["dim"], p["pooling"], p["batch"], tuple(p["bottom"]), tuple(p["top"]),
                         p["interaction"], p["rows"])
                elif r["name"] in by_name:
                    c = by_name[r["name"]]
                else:
                    raise ConfigError(str(path), f"step {r['name']}", "has no configuration in its params")
                p = {"config": _step_dict(*c, dtype), **p}
            load = r.get("load_1min") or "nan"
            out.append(Measurement(r["kind"], r["name"], p, float(r["measured_s"]), int(r["reps"]),
                                   r["split"] == "train", load_1min=float(load)))
    return out


def refit(path, *, base: str = "mtia300", dtype: str = "fp32", peaks: str = "measured",
          llc_bytes: float | None = None, iterations: int | None = None) -> tuple[object, list[Measurement]]:
    """Fit the current cost model to recorded measurements (a CSV of write_measurements), timing
    nothing: (fitted chip, measurements with their new predictions). The split is the recorded one.
    llc_bytes: the measured device's last-level cache (default: this machine's, on a CPU)."""
    ms = read_measurements(path, dtype)
    system = _local_system(Path(base).stem, peaks, llc_bytes)
    stream = max((m for m in ms if m.kind == "memory"), key=lambda m: m.params["bytes"])
    chip, _ = fit(ms, system, dtype, peaks=peaks, stream_Bps=stream.params["bytes"] / stream.seconds,
                  iterations=iterations or GRIDS["default"]["iterations"])
    return chip, ms


def local_llc_bytes() -> float | None:
    """The size of this machine's largest CPU cache (sysfs; the L3 on most x86 machines), or None."""
    best = None
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, size = int((d / "level").read_text()), (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:].upper(), 1)
        try:
            nbytes = float(size.rstrip("KkMmGg")) * unit
        except ValueError:
            continue
        if best is None or level > best[0]:
            best = (level, nbytes)
    return best[1] if best else None


def _local_system(family: str, peaks: str, llc_bytes: float | None) -> System:
    """The one-chip system the fit starts from; a device with no published figures (peaks
    'measured', a CPU) gets this machine's last-level cache size in place of the base chip's, and
    one compute unit (the measurement process is pinned to one core)."""
    system = load_system(f"{family}-1")
    if peaks == "measured":
        chip = dataclasses.replace(system.chip, compute_units=jnp.float32(1.0))
        llc = llc_bytes if llc_bytes is not None else local_llc_bytes()
        if llc:
            chip = dataclasses.replace(chip, llc_bytes=jnp.float32(llc))
        system = system.replace(chip=chip)
    return system


def format_report(r: dict) -> str:
    lines = [f"calibrated {r['out']} on {r['device']} ({r['date']}, {r['dtype']}, {r['seconds']:.0f} s)",
             f"  streaming bandwidth {r['stream_GBps']:.2f} GB/s",
             "  fitted: " + ", ".join([f"peak {r['fitted']['peak_fp32_flops' if r['dtype'] == 'fp32' else 'peak_bf16_flops'] / 1e12:.3g} TFLOP/s",
                                       f"matmul eff max {r['fitted']['matmul_eff_max']:.3f}",
                                       f"half at {r['fitted']['matmul_half_flop'] / 1e6:.3g} MFLOP",
                                       f"hbm eff {r['fitted']['hbm_eff']:.3f}",
                                       f"llc {r['fitted'].get('llc_bytes', float('nan')) / 2**20:.3g} MiB at "
                                       f"{r['fitted'].get('llc_Bps', float('nan')) / 1e9:.3g} GB/s",
                                       f"gather eff max {r['fitted']['gather_eff_max']:.3f}",
                                       f"gather half {r['fitted']['gather_half_row_bytes']:.3g} B",
                                       f"launch {r['fitted']['launch_s'] * 1e6:.3g} us"]),
             f"  {'relative error':<22} {'n':>3} {'median':>8} {'p90':>8}"]
    for k, v in r["errors"].items():
        lines.append(f"  {k:<22} {v['n']:>3} {100 * v['median']:>7.1f}% {100 * v['p90']:>7.1f}%")
    st = r["errors"].get("step/held_out")
    if st:
        ok = st["median"] <= 0.15 and st["p90"] <= 0.30
        lines.append(f"  held-out whole steps: median {100 * st['median']:.1f} % (target <= 15 %), "
                     f"p90 {100 * st['p90']:.1f} % (target <= 30 %): {'met' if ok else 'MISSED'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(_measure_main())
