"""Timing on the local JAX device: the benchmark grids, the timers and the four kinds of benchmark
(stream, GEMM, embedding bag, whole reference steps), measured in a pinned subprocess."""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import reference as ref

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
    return ref.spec_from_dict(step_dict(1, dim, pooling, batch, (dim,), (dim,), "dot", rows, "fp32"))


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


def step_dict(T, d, pooling, batch, bottom, top, inter, rows, dtype) -> dict:
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
        data = step_dict(T, d, P, B, bottom, top, inter, rows, dtype)
        spec = ref.spec_from_dict(data)
        state = ref.init_state(spec, jax.random.PRNGKey(i))
        batch = ref.make_batch(spec, jax.random.PRNGKey(50 + i))
        step = ref.make_timed_step(spec)
        s, reps = time_call(step, state, batch, min_s=min_s, state_arg=0)
        grid = {"tables": T, "dim": d, "pooling": P, "batch": B, "bottom": list(bottom), "top": list(top),
                "interaction": inter, "rows": rows}    # what step_dict rebuilds the config from
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
                 "from perfmodel.calibrate import measure_main; sys.exit(measure_main(sys.argv[2:]))")
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


