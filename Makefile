# The README's two commands: `make demo` and `make test`. Both install what is
# missing first (tools/setup.sh), then run under Bazel with the project
# virtualenv as Python.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo lint test full_test benchmarks clean

setup:
	@tools/setup.sh

demo: setup
	bazel run //experiments:demo

# Ruff's linter and formatter, configured in pyproject.toml (seconds); `make
# test` runs it first. `ruff format .` rewrites the tree to the format.
lint: setup
	ruff check .
	ruff format --check .

test: lint
	bazel test //...

# The suite plus the slow cases that repeat a covered code path (tests call
# test_utils.skip_unless_full_suite; `make test` reports them as skipped).
full_test: lint
	bazel test --test_env=TFF_AGGREGATORS_FULL_SUITE=1 //...

# Every table of benchmarks/README.md (about 1 hour on 2 cores).
benchmarks: setup
	bazel run //benchmarks:collect_benchmark -- --benchmark_output_dir=$(CURDIR)/benchmarks/results
	bazel run //benchmarks:round_benchmark -- --benchmark_output_dir=$(CURDIR)/benchmarks/results
	bazel run //benchmarks:server_step_benchmark -- --benchmark_output_dir=$(CURDIR)/benchmarks/results
	bazel run //benchmarks:client_state_benchmark -- --benchmark_output_dir=$(CURDIR)/benchmarks/results

clean:
	bazel clean
