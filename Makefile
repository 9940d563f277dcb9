# swordfish — build, test and run.
#   make run                      build in release mode and serve examples/app.py on :8000
#   make test [PYTHON=python3.13] cargo test + pytest on one interpreter
#   make conformance              CPython's asyncio test suite on swordfish and on asyncio
#   make autobahn                 Autobahn|Testsuite against the WebSocket server, written to docs/autobahn.md
#   make autobahn-rsgi            the same over RSGI, written to docs/autobahn-rsgi.md
#   make bench                    full scheduling benchmark, written to docs/benchmarks.md
#   make wheels                   manylinux2014 wheels for CPython 3.10-3.13 and the sdist, in dist/
#   make wheel-smoke              one wheel installed where there is no Rust, then used (CI runs it)
#   make soak [SOAK_MINUTES=30]   a long mixed load with faults; RSS, descriptors and threads sampled
#   make fuzz [FUZZ_SECONDS=60]   every fuzz target (fuzz/) for that long, with libFuzzer; CI runs 10 s each

PYTHON ?= python3
PY_EXE := $(shell tools/find-python $(PYTHON))
ifeq ($(PY_EXE),)
$(error no working interpreter called $(PYTHON))
endif
PY_TAG := $(shell $(PY_EXE) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ifeq ($(PYTHON),python3)
VENV ?= .venv
else
VENV ?= .venv-$(PY_TAG)
endif
VPY := $(VENV)/bin/python
export PYO3_PYTHON := $(abspath $(VPY))

.PHONY: run test test-deps build venv cargo-test pytest conformance autobahn autobahn-rsgi bench bench-quick clean wheels wheel-smoke soak fuzz

$(VENV)/.deps: requirements-dev.txt
	$(PY_EXE) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.deps

build: venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet

# A target dir of its own: maturin builds the extension with other settings, and sharing
# one directory would rebuild PyO3 on every switch.
# The interpreter's library directory: where PyO3 links the test binary against a shared
# libpython (pyenv's 3.10 is built so), which the loader does not look in by itself.
PY_LIBDIR := $(shell $(PY_EXE) -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')

cargo-test: venv
	LD_LIBRARY_PATH=$(PY_LIBDIR)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} CARGO_TARGET_DIR=target/cargo-test cargo test --release --quiet

# The WSGI tests run twice: on the thread engine, then on the loop's WSGI path
# (--wsgi-engine loop; tests/wsgiutil.py).
WSGI_TESTS = tests/test_wsgi_environ.py tests/test_wsgi_input.py tests/test_wsgi_lifecycle.py \
	tests/test_wsgi_response.py

pytest: build
	$(VPY) -m pytest -q
	SWORDFISH_TEST_WSGI_ENGINE=loop $(VPY) -m pytest -q $(WSGI_TESTS)

# System packages the tests use (Debian's chromium for the browser test), installed on a
# machine that lacks them.
test-deps:
	tools/install-test-deps.sh

test: test-deps cargo-test pytest

# tools/build-wheels.sh: maturin --zig (ziglang from PyPI) in .venv-wheels, auditwheel.
wheels:
	tools/build-wheels.sh

wheel-smoke:
	tools/wheel-smoke.sh $(PYTHON)

conformance: build
	$(VPY) tools/conformance.py

# The first run installs wstest on Python 2.7 into tools/autobahn/.py27/ (see install-py27.sh).
autobahn: build
	$(VPY) tools/autobahn/run.py

autobahn-rsgi: build
	$(VPY) tools/autobahn/run.py --server swordfish-rsgi

run: build
	@echo "serving examples/app.py on http://127.0.0.1:8000 (try: curl http://127.0.0.1:8000/ ; Ctrl-C stops)"
	$(VPY) -m swordfish serve app:app --app-dir examples --host 127.0.0.1 --port 8000

bench-quick: build
	$(MAKE) -C benchmarks quick PYTHON=$(PYTHON)

bench: build
	$(MAKE) -C benchmarks full PYTHON=$(PYTHON)

FUZZ_SECONDS ?= 60
fuzz: venv
	FUZZ_SECONDS=$(FUZZ_SECONDS) tools/fuzz.sh $(VPY)

SOAK_MINUTES ?= 30
soak: build
	$(MAKE) -C benchmarks soak PYTHON=$(PYTHON) ARGS='--minutes $(SOAK_MINUTES)'

clean:
	rm -rf target dist .venv .venv-* python/swordfish/*.so
