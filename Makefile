# braidinfer — the two entry points are `make test` (install what is missing, build, run every
# test) and, with the engine, `make run`.
BUILD ?= build
BUILD_TYPE ?= Release
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test test-python clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Python tests first, ctest last, then one closing line: 'ctest: N passed, N failed, N skipped'.
test: build
	@if [ -d python/tests ]; then \
	  BRAIDINFER_LIBRARY=$(CURDIR)/$(BUILD)/libbraid.so $(PYTHON) -m pytest -q python/tests; \
	fi
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit ctest.xml; \
	  status=$$?; $(PYTHON) $(CURDIR)/scripts/test_summary.py ctest.xml; exit $$status

clean:
	rm -rf $(BUILD)
