# Two commands do all the set-up: `make demo` and `make test` (each creates .venv if missing).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Every installed package at the exact version CI passed with (a release of an unpinned dependency such as numpy
# or scikit-learn moves the vectors, so the datasets): `make venv CONSTRAINTS=` resolves afresh instead, and
# `make lock` writes the venv's versions back into the file.
CONSTRAINTS ?= .ci/constraints.txt
# The stamp is keyed on the dependency list and the constraints: editing either re-installs, otherwise setup costs
# seconds.
STAMP := $(VENV)/.stamp-$(shell cat pyproject.toml $(CONSTRAINTS) | sha256sum | cut -c1-16)
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1

.PHONY: venv lock demo reading-benchmark test test-slow lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS))
	@rm -f $(VENV)/.stamp-*
	@touch $@

# After `make venv CONSTRAINTS=` (a fresh resolve) and a green `make test test-slow`: pin what was installed.
lock: venv
	@{ echo "# Every package of .venv at the exact version CI passed with: make venv installs these (Makefile, CONSTRAINTS)."; \
	   echo "# Written by make lock (pip freeze); the project itself is left out."; \
	   $(BIN)/python -m pip freeze --exclude-editable | grep -iv '^meta[-_]recipeqa'; } > .ci/constraints.txt.new
	@mv .ci/constraints.txt.new .ci/constraints.txt && echo "wrote .ci/constraints.txt"

demo: venv
	$(BIN)/mrqa demo $(DEMO_ARGS)

# The demo with every dataset beyond the paper that needs reading on the sample kitchen: splits drawn by author,
# the visual cloze distractors drawn again in each question's kitchen, and the foreign photo from the author's own
# kitchen; its reading benchmark holds visual cloze, visual coherence and textual cloze (README, "The whole
# reading benchmark"). About 2.1-2.3 times the demo's CPU time: 36:07 timed alone in a fast phase.
# DEMO_ARGS="--adversary-size paper": those pooled steps and the train stage's check with the paper-size model
# (a GPU host's work; on CPU far longer: README, "The whole reading benchmark").
reading-benchmark: venv
	$(BIN)/mrqa demo --split-by author --redrawn --author-coherence $(DEMO_ARGS)

# Tests run in pytest-xdist worker processes, one per core and at most 4 (`make test TEST_WORKERS=0`: all
# in one process, in file order). Each worker has its own Prefect and MRQA homes (tests/conftest.py).
TEST_WORKERS ?= auto
test: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .

test-slow: venv
	$(BIN)/python -m pytest -q -m slow -n $(TEST_WORKERS) --maxprocesses 4 $(PYTEST_ARGS)

# Every benchmark prints its figure and a ratio against the obvious alternative (docs/results.md, "Measured figures").
BENCHES ?= parse import sample crawl clean decode embed encoder-train ann knn generate
bench: venv
	@for b in $(BENCHES); do echo "== mrqa bench $$b"; $(BIN)/mrqa bench $$b || exit 1; done

clean:
	rm -rf $(VENV) data
