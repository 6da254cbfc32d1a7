# The README's two commands: `make demo` and `make test`. Both install what is
# missing first (tools/setup.sh), then run under Bazel with the project
# virtualenv as Python.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo test clean

setup:
	@tools/setup.sh

demo: setup
	bazel run //experiments:demo

test: setup
	bazel test //...

clean:
	bazel clean
