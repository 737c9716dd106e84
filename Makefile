# The two commands of the quickstart: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# loadgroup: the kube tier's tests, the install tier's (one installed control plane) and the whole-stack tests of
# manage.py up each share one worker; others spread.
PYTEST_ARGS ?= -n 2 --dist loadgroup --durations=30
# INSTALL_TIER=0 leaves the install tier out on purpose (.ci/run's SQLite pass: the tier installs onto the
# machine's PostgreSQL and Redis whatever DATABASE_URL says, so one pass runs it).
INSTALL_TIER ?= 1
# REQUIRE_ALL_TIERS=1 (.ci/run sets it): where a tier (browser, kube, install, gobuild, sso) cannot run, fail instead of leaving it out.
# Browser tests drive Debian's Chromium; `make test` installs it when missing (needs root and apt).
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver

.PHONY: run test lint pytest fuzz browser-deps kube kube-deps services bench clean docs docs-serve
.PHONY: interop interop-deps sso sso-deps images

$(INSTALLED): requirements.txt requirements-dev.txt
	@test -x "$(BIN)/python" || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $(INSTALLED)

# The docs' Mermaid (checked at build time with Node, served to browsers from the site), pinned by
# its lockfile.
DOCS_NODE := tools/docs/mermaid
DOCS_NODE_INSTALLED := $(DOCS_NODE)/node_modules/.installed
DOCS_ADDR ?= 127.0.0.1:8010
$(DOCS_NODE_INSTALLED): $(DOCS_NODE)/package.json $(DOCS_NODE)/package-lock.json
	@command -v npm >/dev/null || { echo "make docs needs Node.js 18 or later and npm (Debian: apt-get install nodejs npm): the build parses every Mermaid diagram with it"; exit 1; }
	cd $(DOCS_NODE) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(DOCS_NODE_INSTALLED)

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

pytest: $(INSTALLED) browser-deps kube-deps interop-deps sso-deps
	@skip=""; \
	if [ ! -x "$(CHROMIUM)" ] || [ ! -x "$(CHROMEDRIVER)" ]; then \
		echo "*** Browser tests NOT run: $(CHROMIUM) or $(CHROMEDRIVER) is missing (see above) ***"; \
		skip="not browser"; \
	fi; \
	if ! envtest/build/build.sh --check >/dev/null 2>&1 || [ "$$(id -u)" != 0 ]; then \
		echo "*** kube tier NOT run: it needs the Kubernetes binaries (make kube, with Go) and root (pod addresses) ***"; \
		skip="$${skip:+$$skip and }not kube"; \
	fi; \
	if ! envtest/build/build.sh --check >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] \
		|| ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || [ "$$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" != PONG ]; then \
		echo "*** install tier NOT run: it needs the Kubernetes binaries (make kube), root (pod networks), and PostgreSQL and Redis on 127.0.0.1 (make services) ***"; \
		skip="$${skip:+$$skip and }not install"; \
	fi; \
	if ! $(INTEROP_BUILD) --check >/dev/null 2>&1; then \
		echo "*** gobuild tests NOT run: they need upstream's listener built from Go source (make interop, with Go) ***"; \
		skip="$${skip:+$$skip and }not gobuild"; \
	fi; \
	if ! $(SSO_BUILD) --check >/dev/null 2>&1; then \
		echo "*** sso tier NOT run: it needs ORY Hydra built from Go source (make sso, with Go and a C compiler) ***"; \
		skip="$${skip:+$$skip and }not sso"; \
	fi; \
	if [ -n "$$skip" ] && [ "$(REQUIRE_ALL_TIERS)" = 1 ]; then \
		echo "*** REQUIRE_ALL_TIERS=1 (as in CI): a tier would not run ($$skip); see above ***"; exit 2; \
	fi; \
	if [ "$(INSTALL_TIER)" = 0 ]; then \
		echo "*** install tier left out on purpose (INSTALL_TIER=0): it installs onto this machine's PostgreSQL and Redis whatever the suite's database, so CI runs it in its PostgreSQL pass only ***"; \
		case "$$skip" in *"not install"*) ;; *) skip="$${skip:+$$skip and }not install";; esac; \
	fi; \
	echo "$(BIN)/python -m pytest $(PYTEST_ARGS)$${skip:+ -m \"$$skip\"}"; \
	CHROMIUM="$(CHROMIUM)" CHROMEDRIVER="$(CHROMEDRIVER)" $(BIN)/python -m pytest $(PYTEST_ARGS) $${skip:+-m "$$skip"}

## docs: build the handbook (docs/, mkdocs.yml) into build/site in strict mode: a broken link, a
##      missing page, a setting, command or metric without a description or a diagram that does not
##      parse fails the build
# (NO_MKDOCS_2_WARNING: Material prints a banner about its end of life, May 2027, on every build.)
docs: $(INSTALLED) $(DOCS_NODE_INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

## docs-serve: serve the handbook at http://$(DOCS_ADDR)/ and rebuild it on every change (warnings
##      are shown, not fatal, while you edit; `make docs` is the strict check)
docs-serve: $(INSTALLED) $(DOCS_NODE_INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --dev-addr $(DOCS_ADDR)

## kube: build kube-apiserver, kube-controller-manager and etcd from the pinned sources
##      (envtest/build/go.mod) into a cache outside the repository; prints their paths
kube:
	envtest/build/build.sh

# The kube tier's binaries, built when Go is here (the first build takes minutes, then it is cached).
kube-deps:
	@if command -v go >/dev/null; then envtest/build/build.sh >/dev/null; \
	else echo "Go is missing: the kube tier will not run."; fi

## interop: build the interop tests' Go server (upstream's WatchEvent listener, pinned in
##      tests/interop/upstream-listener/go.mod) into a cache outside the repository; prints its path
INTEROP_BUILD := tests/interop/upstream-listener/build.sh
interop:
	$(INTEROP_BUILD)

# The gobuild tests' server, built when Go is here (minutes the first time, then cached).
interop-deps:
	@if command -v go >/dev/null; then $(INTEROP_BUILD) >/dev/null; \
	else echo "Go is missing: the gobuild tests will not run."; fi

## sso: build the sso tier's OpenID provider (ORY Hydra, pinned in tests/sso/provider/go.mod) into
##      a cache outside the repository; prints its path
SSO_BUILD := tests/sso/provider/build.sh
sso:
	$(SSO_BUILD)

# The sso tier's provider, built when Go is here (minutes the first time, then cached).
sso-deps:
	@if command -v go >/dev/null; then $(SSO_BUILD) >/dev/null || echo "Building ORY Hydra failed: the sso tier will not run."; \
	else echo "Go is missing: the sso tier will not run."; fi

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

## images: build the control plane's and the runtime watcher's images with Docker or Podman
##      (IMAGE_REGISTRY, IMAGE_TAG; push them yourself: docs/operators/images.md); where neither
##      can build (no engine), say so and do nothing
IMAGE_REGISTRY ?= ghcr.io/kyma-fleet
IMAGE_TAG ?= 0.1.0
images:
	@engine=""; \
	for candidate in docker podman; do \
		if command -v $$candidate >/dev/null && $$candidate info >/dev/null 2>&1; then engine=$$candidate; break; fi; \
	done; \
	if [ -z "$$engine" ]; then \
		echo "*** make images: no container engine to build with (docker or podman, with its daemon or service running); nothing built ***"; \
		exit 0; \
	fi; \
	set -e; \
	echo "$$engine build -f deploy/controlplane/Dockerfile -t $(IMAGE_REGISTRY)/controlplane:$(IMAGE_TAG) ."; \
	$$engine build -f deploy/controlplane/Dockerfile -t $(IMAGE_REGISTRY)/controlplane:$(IMAGE_TAG) .; \
	echo "$$engine build -f deploy/runtime-watcher/Dockerfile --build-arg WATCHER_VERSION=$(IMAGE_TAG) -t $(IMAGE_REGISTRY)/runtime-watcher:$(IMAGE_TAG) ."; \
	$$engine build -f deploy/runtime-watcher/Dockerfile --build-arg WATCHER_VERSION=$(IMAGE_TAG) -t $(IMAGE_REGISTRY)/runtime-watcher:$(IMAGE_TAG) .; \
	echo "built $(IMAGE_REGISTRY)/controlplane:$(IMAGE_TAG) and $(IMAGE_REGISTRY)/runtime-watcher:$(IMAGE_TAG) with $$engine"

## services: PostgreSQL on 127.0.0.1:5432 and Redis on :6379 (installed from Debian when missing),
##      for `make test` against them: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test
##      CELERY_BROKER_URL=redis://127.0.0.1:6379/0 make test (what CI runs first)
services:
	.ci/services

clean:
	rm -rf .state test-artifacts build/site
