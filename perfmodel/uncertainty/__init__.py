"""Answers with error bars: the uncertain inputs of the files (inputs), their propagation with the
model's own error from validation to any figure (propagate), the model's error and the check that
its intervals are calibrated (modelerror), the share of an answer's spread each input accounts for
(decompose), and how the commands print them (report)."""

DEFAULT_DRAWS = 1000         # `--uncertainty` alone: p10 / p90 to about +- 1 % of the spread
MAX_DRAWS = 100_000          # 10^5 draws of MLPerf on 64 chips: seconds; more says nothing new at p10/p90
