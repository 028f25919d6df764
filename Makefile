# The two set-up commands of the README: `make run` and `make test`. Each installs what it needs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
KAFKA_VERSION ?= 4.1.2

.PHONY: run test lint system-deps bench clean

# Java 17 and Maven run the local Kafka broker; install them from Debian when missing.
system-deps:
	@command -v java >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java and Maven from Debian packages"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless maven; }

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Runs lagwatch: with CONFIG=file it monitors the configured clusters, without it a local Kafka with demo traffic.
run: system-deps $(VENV)/.installed
	$(VENV)/bin/lagwatch run $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check lagwatch tests bench
	$(VENV)/bin/ruff format --check lagwatch tests bench
	$(VENV)/bin/mypy lagwatch

test: system-deps $(VENV)/.installed lint
	$(VENV)/bin/lagwatch dev-broker --fetch-only --kafka-version $(KAFKA_VERSION)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: system-deps $(VENV)/.installed
	$(PY) bench/poll_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
