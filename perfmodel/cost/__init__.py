"""The cost model: pure array functions of (System, RankingModel, PlanArrays) pieces, traced by jax
(jit, vmap, grad) or run on numpy arrays for a batch of plans with nothing to compile (arrays.py).

compute      roofline times of dense GEMMs and embedding lookups/updates
collectives  all-to-all, all-reduce, reduce-scatter, all-gather per algorithm over network levels
memory       bytes per device and feasibility
schedule     the step as tasks on compute and communication streams, with overlap and interference
"""
