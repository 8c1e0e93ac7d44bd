"""Plan search: the greedy TorchRec-style planner (also the default plan); gradient search and the
other baselines build on the same evaluation."""
