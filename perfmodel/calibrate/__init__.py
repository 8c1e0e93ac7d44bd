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

Measured steps of your own cluster (`perfmodel calibrate --steps CSV --out DIR`) are a second way in:
calibrate.steps fits the step validation's shared parameters on them and writes calibrated chip and
system presets (docs/calibration.md).
"""

from .timing import KINDS, KIND_WEIGHTS, DTYPE_NAMES, GRIDS, Measurement, MIN_REPS, time_call, CPU_FLAGS, device_name, bench_memory, bench_matmuls, bench_embeddings, step_dict, bench_steps, measure_in_subprocess, measure  # noqa: F401
from .fit import predictor, FITTED, fit, split, errors  # noqa: F401
from .io import chip_toml  # noqa: F401
from .run import calibrate, write_measurements, read_measurements, refit, local_llc_bytes, format_report, measure_main  # noqa: F401
