# Everything a fresh machine needs is installed here; nothing is assumed to be on the machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: demo test bench venv test-deps system-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(STAMP)

# Prometheus (for promtool and the live dashboard test) comes from Debian's packages.
system-deps:
	@if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then \
		echo "installing prometheus from Debian's packages"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		systemctl stop prometheus >/dev/null 2>&1 || true; \
		pkill -x prometheus >/dev/null 2>&1 || true; \
	fi

test-deps: $(TEST_STAMP) system-deps

demo: $(STAMP)
	$(BIN)/ctxprec demo

test: test-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache
