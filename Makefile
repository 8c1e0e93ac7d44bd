# make demo: set up a virtual environment from this repo's files and run the main job on built-in defaults.
# make test: set up the same environment (with test tools) and run the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/perfmodel search --system mtia300-64 --model dlrm-dcnv2-mlperf --budget-s 30 --compare greedy,evolutionary
	$(BIN)/perfmodel search --system h100-64 --model dlrm-dcnv2-mlperf --budget-s 30 --method greedy

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_evaluate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# make figures: regenerate the README's pictures (docs/img/*.png) from the presets, about 2 minutes.
.PHONY: figures
figures: $(STAMP)
	MPLBACKEND=Agg $(BIN)/python -m perfmodel.figures docs/img
