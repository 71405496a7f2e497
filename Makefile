# The two commands of the README: `make demo` and `make test`. Both set up what they need first.
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: setup spank test unit cluster-test lint demo down clean

setup:
	@bash scripts/setup.sh

spank: setup
	$(MAKE) -C spank

test: setup spank lint
	$(PYTHON) -m pytest $(PYTEST_ARGS)

unit: setup
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

cluster-test: setup spank
	$(PYTHON) -m pytest tests/cluster $(PYTEST_ARGS)

lint: setup
	$(PYTHON) -m ruff check nvrx_hpc tests benchmarks examples

demo: setup spank
	@bash scripts/demo.sh

down:
	$(PYTHON) -m nvrx_hpc cluster down

clean:
	$(MAKE) -C spank clean
