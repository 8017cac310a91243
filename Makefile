# The two set-up commands (see README):
#   make run   start the gateway with the demo config on embedded defaults (SQLite + in-process Rego)
#   make test  install everything the tests need and run them
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 50051
OPA_VERSION := v1.22.0
OPA_CACHE ?= $(HOME)/.cache/toolgate/opa-$(OPA_VERSION)

.PHONY: run test venv dev-venv opa postgres-install proto bench clean

$(BIN)/toolgate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.dev: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/toolgate

dev-venv: $(VENV)/.dev

# git keeps no file modes but the exec bit: a fresh clone has the demo keys 0644, which the
# approver's CLI refuses (key_file_readable), so make them private before the demo.
run: $(BIN)/toolgate
	chmod 600 examples/keys/*.pem
	$(BIN)/toolgate serve --config examples/toolgate.yaml --port $(PORT)

# OPA built from its official Go module, pinned, cached between runs.
opa: $(OPA_CACHE)/opa

$(OPA_CACHE)/opa:
	@command -v go >/dev/null || { echo "go is needed to build OPA"; exit 1; }
	mkdir -p $(OPA_CACHE)
	GOBIN=$(OPA_CACHE) go install github.com/open-policy-agent/opa@$(OPA_VERSION)

# PostgreSQL server binaries from Debian's packages (the tests start a private server).
postgres-install:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
	  || echo "could not install postgresql; its tests will fail under CI"; }

test: dev-venv opa postgres-install
	TOOLGATE_OPA=$(OPA_CACHE)/opa $(BIN)/python -m pytest -q

proto: dev-venv
	$(BIN)/python proto/generate.py

bench: dev-venv opa
	TOOLGATE_OPA=$(OPA_CACHE)/opa $(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
