# The two commands of the quickstart: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?= -n 2
# Browser tests drive Debian's Chromium; `make test` installs it when missing (needs root and apt).
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver

.PHONY: run test lint pytest fuzz browser-deps services bench clean

$(INSTALLED): requirements.txt requirements-dev.txt
	@test -x "$(BIN)/python" || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $(INSTALLED)

## run: install, migrate, create an admin, start every role (and simulated runtimes;
##      `make run UP_ARGS=--no-demo` without them)
run: $(INSTALLED)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py ensureadmin
	$(BIN)/python manage.py pki bootstrap
	$(BIN)/python manage.py up $(UP_ARGS)

## test: lint and the whole test suite
test: lint pytest

lint: $(INSTALLED)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

pytest: $(INSTALLED) browser-deps
	@if [ -x "$(CHROMIUM)" ] && [ -x "$(CHROMEDRIVER)" ]; then \
		echo "$(BIN)/python -m pytest $(PYTEST_ARGS)"; \
		CHROMIUM="$(CHROMIUM)" CHROMEDRIVER="$(CHROMEDRIVER)" $(BIN)/python -m pytest $(PYTEST_ARGS); \
	else \
		echo "*** Browser tests NOT run: $(CHROMIUM) or $(CHROMEDRIVER) is missing (see above) ***"; \
		$(BIN)/python -m pytest $(PYTEST_ARGS) -m "not browser"; \
	fi

## fuzz: the fuzz suite's long run (`make test` runs it short): every door, FUZZ_EXAMPLES cases per
##      test (default 300), a new seed each run; ends with the cases and failures per door
fuzz: $(INSTALLED)
	FUZZ_PROFILE=long $(BIN)/python -m pytest tests/fuzz -p no:xdist -p no:randomly -q $(FUZZ_ARGS)

## browser-deps: Debian's chromium and chromium-driver for the browser tests, when missing
browser-deps:
	@if [ ! -x "$(CHROMIUM)" ] || [ ! -x "$(CHROMEDRIVER)" ]; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then SUDO=""; \
		elif command -v apt-get >/dev/null && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
		else echo "Chromium is missing and cannot be installed here (needs apt-get and root)."; exit 0; fi; \
		echo "Installing Debian's chromium and chromium-driver for the browser tests..."; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null \
			|| echo "Installing Chromium failed: the browser tests will not run."; \
	fi

## services: PostgreSQL on 127.0.0.1:5432 and Redis on :6379 (installed from Debian when missing),
##      for `make test` against them: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test
##      CELERY_BROKER_URL=redis://127.0.0.1:6379/0 make test (what CI runs first)
services:
	.ci/services

clean:
	rm -rf .state test-artifacts
