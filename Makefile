# pyscrun: `make demo` and `make test` do all set-up on a fresh Debian 12 or 13 (as root).
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup lint test test-debian13 unit integration demo bench cluster-up cluster-down clean

setup:
	bash scripts/setup.sh

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

test: setup
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(PYTEST_ARGS) tests

# The whole suite again in a Debian 13 root (Slurm 24.11, podman 5.4) on this kernel.
test-debian13:
	bash scripts/debian13.sh make test PYTEST_ARGS="$(PYTEST_ARGS)"

unit: setup
	$(PY) -m pytest $(PYTEST_ARGS) tests/unit

integration: setup
	$(PY) -m pytest $(PYTEST_ARGS) tests/integration

demo: setup
	bash scripts/demo.sh

bench: setup
	$(PY) -m bench.run

cluster-up: setup
	bash scripts/cluster.sh up $(or $(NODES),1)

cluster-down:
	bash scripts/cluster.sh down

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
