# The two commands of the README: `make demo` and `make test`. Both set up what they need first.
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: setup spank test unit cluster-test lint docs wheel demo down clean

setup:
	@bash scripts/setup.sh

spank: setup
	$(MAKE) -C spank

test: setup spank lint docs
	$(PYTHON) -m pytest $(PYTEST_ARGS)

unit: setup
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

cluster-test: setup spank
	$(PYTHON) -m pytest tests/cluster $(PYTEST_ARGS)

lint: setup
	$(PYTHON) -m ruff check nvrx_hpc tests benchmarks examples
	$(PYTHON) -c 'import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))'

# The docs as a site: --strict fails on a broken link, a missing anchor or a page left out of the nav.
# No --quiet: it hides the very warnings that --strict counts.
docs: setup
	$(PYTHON) -m mkdocs build --strict --site-dir site

# What a site installs: the wheel, with its package data (templates, the SPANK sources), in dist/.
wheel: setup
	$(PYTHON) -m pip wheel --no-deps --no-build-isolation --wheel-dir dist .

demo: setup spank
	@bash scripts/demo.sh

down:
	$(PYTHON) -m nvrx_hpc cluster down

clean:
	$(MAKE) -C spank clean
	rm -rf site dist build
