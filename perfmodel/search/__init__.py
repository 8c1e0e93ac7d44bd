"""Plan search: a driver loop (driver.py) over methods that share one protocol (methods.py): the
gradient method (pipeline.py: greedy start, vectorized local search, kicks, relaxed restarts), the
greedy TorchRec-style planner (also the default plan), random, evolutionary and exact baselines, all
scored by the same hard model."""
