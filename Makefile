# The two set-up commands: `make run` and `make test`. Both create/refresh the virtualenv first.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

# every Cython source (a .pyx or .pxd edited alone rebuilds the extensions)
CYTHON_SOURCES := $(wildcard */*.pyx */*/*.pyx */*.pxd */*/*.pxd)

# the JVM columnar reader of topics (jobs/spark_source/jvm), compiled against the installed pyspark's jars
JVM_SOURCES := $(shell find jobs/spark_source/jvm/src -type f)
JAR := jobs/spark_source/jvm/mqindex-spark.jar

$(STAMP): pyproject.toml setup.py $(CYTHON_SOURCES)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

# a Java source edited rebuilds the jar alone, not the virtualenv
$(JAR): $(STAMP) $(JVM_SOURCES) jobs/spark_source/jvm/build.sh
	@command -v javac >/dev/null 2>&1 || { echo "installing Debian's JDK 17 (javac, jar) for jobs/spark_source/jvm"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; }
	jobs/spark_source/jvm/build.sh $(BIN)/python

run: $(STAMP)
	$(BIN)/mqindex serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# The web page tests drive Debian's Chromium through Playwright (no browser download, which fails here).
CHROMIUM ?= /usr/bin/chromium
$(CHROMIUM):
	@echo "installing Debian's chromium for the web page tests"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# The Kafka tests (tests/kafka) run Debian's kcat beside the Python clients.
KCAT ?= /usr/bin/kcat
$(KCAT):
	@echo "installing Debian's kcat for the Kafka protocol tests"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null

# The suite runs on two workers (pytest-xdist), each taking whole test files so a file's shared servers
# start once; most of a test's time is spent waiting on real servers, so two workers fit two cores (three ran
# it in 21 min instead of 26, but two timing-sensitive tests failed at that contention). The files holding
# the slowest tests are handed out first (tests/conftest.py orders them), not xdist's by-count order;
# tests/watchdog.py bounds a test that cannot be interrupted (loaded by name: `python -m pytest` runs from here).
TEST_WORKERS ?= 2

test: $(STAMP) $(JAR) $(CHROMIUM) $(KCAT)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -p tests.watchdog -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: $(STAMP) $(JAR)
	$(BIN)/mqindex bench all

clean:
	rm -rf $(VENV) .pytest_cache
