# The two set-up commands of the README: `make run` and `make test`. Each installs what it needs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
KAFKA_VERSION ?= 4.4.0
# Older brokers lagwatch supports, each with a focused run in `make test-long` (CI runs it after `make test`), so
# that a change that breaks them fails CI: `check` equal to kafka-consumer-groups on every row, a poll of every
# group kind, __consumer_offsets decoded (and KIP-848 and share groups on 4.1). About 20-60 s each.
OLDER_KAFKA_TESTS := tests/test_collect_kafka.py tests/test_exact_clocks_kafka.py
OLDER_KAFKA := 4.1.2:tests/test_kip848_kafka.py:tests/test_share_groups_kafka.py 3.9.2:

.PHONY: run test lint system-deps test-deps bench clean

# Java 17 and Maven run the local Kafka broker; the tests scrape lagwatch with Debian's Prometheus.
# Installed from Debian's packages when missing.
SYSTEM_PACKAGES := $(if $(shell command -v java),,openjdk-17-jre-headless) $(if $(shell command -v mvn),,maven) \
  $(if $(shell python3 -c 'import ensurepip' 2>/dev/null && echo ok),,python3-venv) \
  $(if $(shell command -v gcc),,gcc) \
  $(if $(shell python3 -c 'import os, sysconfig; print(os.path.exists(sysconfig.get_paths()["include"] + "/Python.h") or "")'),,python3-dev)
# apt-get needs root: through sudo when `make` runs as another user.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# Headless Chromium opens the Spark report's HTML page in the tests, as a person would.
TEST_PACKAGES := $(if $(shell command -v prometheus),,prometheus) $(if $(shell command -v chromium),,chromium)

system-deps:
	@if [ -n "$(strip $(SYSTEM_PACKAGES))" ]; then \
	  echo "installing from Debian: $(SYSTEM_PACKAGES)"; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(SYSTEM_PACKAGES); fi

test-deps: system-deps
	@if [ -n "$(strip $(TEST_PACKAGES))" ]; then \
	  echo "installing from Debian: $(TEST_PACKAGES)"; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(TEST_PACKAGES); fi

$(VENV)/.installed: pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	touch $@

# The core compiled with mypyc (setup.py; gcc and Python's headers are among the system packages above). When a
# compiled module's source changed since the last build, lagwatch runs its pure source, slower (`lagwatch --version`
# says which core runs): this rebuilds it then, in about 45 s.
.PHONY: native
# Rebuilt when the compiled core no longer matches its source, or setup.py (its list of modules) is newer.
native: $(VENV)/.installed
	@{ [ ! setup.py -nt lagwatch/_native_build.json ] && env -u LAGWATCH_PURE_PYTHON $(VENV)/bin/lagwatch --version | grep -q 'core: compiled'; } \
	  || { echo "compiling the core with mypyc (about 45 s)"; $(PY) -m pip install -q --no-deps -e . 2>&1 | grep -v -i -E 'editable|precedence|^ *[*!]*$$|WheelFile|^ *\*+ *$$' || true; }

# Runs lagwatch: with CONFIG=file it monitors the configured clusters, without it a local Kafka with demo traffic.
run: system-deps $(VENV)/.installed native
	$(VENV)/bin/lagwatch run $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check lagwatch tests bench setup.py
	$(VENV)/bin/ruff format --check lagwatch tests bench setup.py
	$(VENV)/bin/mypy lagwatch

# Helm for the chart's tests: Debian has no package, so deploy/tools/install-helm.sh builds it with Go from the
# module proxy once (a few minutes on 2 cores) and caches it in ~/.cache/lagwatch/helm; later runs take no time.
.PHONY: helm lint-deploy
helm:
	@deploy/tools/install-helm.sh >/dev/null
test-deps: helm

# SeaweedFS, the S3-compatible server the lake's tests write to: no Debian package either, so
# deploy/tools/install-seaweedfs.sh builds it with Go from the module proxy once (6.5 min here with a warm module
# cache, about 9 on a fresh machine, 2 cores) into ~/.cache/lagwatch/seaweedfs; later runs take no time.
.PHONY: seaweedfs
seaweedfs:
	@deploy/tools/install-seaweedfs.sh >/dev/null
test-deps: seaweedfs

# The chart's schema and the dashboards are generated (a test checks them); their generators and the Dockerfile.
lint-deploy: $(VENV)/.installed
	$(VENV)/bin/ruff check grafana deploy
	$(VENV)/bin/ruff format --check grafana deploy
	$(VENV)/bin/hadolint deploy/Dockerfile
lint: lint-deploy

# The documentation site (docs/pages, MkDocs Material), strict: a broken link or anchor fails the build.
.PHONY: docs
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -f docs/mkdocs.yml
lint: docs

# Two workers, a test file whole on one (its module fixtures built once), the Spark files all on one worker while
# the other runs the broker scenarios that wait on real time (tests/conftest.py, pytest_xdist_make_scheduler).
# Each worker starts its own broker; PYTEST_WORKERS= runs everything in one process.
PYTEST_WORKERS ?= -n 2 --dist loadfile
test: test-deps $(VENV)/.installed native lint
	$(VENV)/bin/lagwatch dev-broker --fetch-only --kafka-version $(KAFKA_VERSION)
	@# The S3 and Delta Lake connectors the pipeline image bakes in, for the Spark tests (once, before the two
	@# workers could both fetch them): 16 s for the 686 MB AWS SDK bundle from Maven Central.
	$(PY) -c 'from tests.spark_jars import ensure_spark_jars; ensure_spark_jars()'
	$(VENV)/bin/pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

# What CI runs after `make test` (.ci/run), minutes of wall time each, kept out of the default run to keep it under
# 15 minutes: the older brokers' focused runs, the demo for ten minutes as a person runs it (`lagwatch run`),
# which must page only for what is wrong, spark-submit to a standalone Spark cluster, and the wheel as a user
# installs it (its build compiles the core).
.PHONY: test-long
test-long: system-deps $(VENV)/.installed native
	@for entry in $(OLDER_KAFKA); do \
	  version=$${entry%%:*}; extra=$${entry#*:}; \
	  extra=$${extra//:/ }; echo "== Kafka $$version: $(OLDER_KAFKA_TESTS) $$extra"; \
	  LAGWATCH_TEST_KAFKA_VERSION=$$version $(VENV)/bin/pytest -q -m kafka -p no:cacheprovider \
	    $(OLDER_KAFKA_TESTS) $$extra || exit 1; \
	done
	$(VENV)/bin/lagwatch dev-broker --fetch-only --kafka-version $(KAFKA_VERSION)
	$(VENV)/bin/pytest -q -m long -p no:cacheprovider tests/test_demo_long.py tests/test_spark_standalone.py \
	  tests/test_wheel_install.py

bench: system-deps $(VENV)/.installed native
	$(PY) bench/poll_bench.py $(BENCH_ARGS)
	$(PY) bench/metrics_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
