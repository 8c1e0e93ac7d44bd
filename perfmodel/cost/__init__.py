"""The cost model: pure array functions of (System, RankingModel, PlanArrays) pieces, traced by jax
(jit, vmap, grad) or run on numpy arrays for a batch of plans with nothing to compile (arrays.py).

compute      roofline times of dense GEMMs and embedding lookups/updates
collectives  all-to-all, all-reduce, reduce-scatter, all-gather per algorithm over network levels
memory       bytes per device and feasibility
traffic      the bytes each collective and memory stream of a plan's step moves, and each collective's time
schedule     the step as tasks on compute and communication streams, with overlap and interference
"""
