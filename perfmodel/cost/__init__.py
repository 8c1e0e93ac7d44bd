"""The cost model: pure jnp functions of (System, RankingModel, PlanArrays) pieces.

compute      roofline times of dense GEMMs and embedding lookups/updates
collectives  all-to-all, all-reduce, reduce-scatter, all-gather per algorithm over network levels
memory       bytes per device and feasibility
schedule     the step as tasks on compute and communication streams, with overlap and interference
"""
