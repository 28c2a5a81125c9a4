# braidinfer — the two entry points: `make run` (set up if needed, build, generate text with the
# embedded model, on the GPU if there is one) and `make test` (set up, build, run every test).
BUILD ?= build
BUILD_TYPE ?= Release
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc)

.PHONY: all deps configure build run test clean

MODEL ?= models/tiny-fortunes
PROMPT ?= The meaning of life is
NEW_TOKENS ?= 64
DEVICE ?= auto

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@$(BUILD)/braidinfer generate --model $(MODEL) --prompt "$(PROMPT)" -n $(NEW_TOKENS) --device $(DEVICE)

# Python tests first, ctest last, then one closing line: 'ctest: N passed, N failed, N skipped'.
test: build
	@if [ -d python/tests ]; then \
	  BRAIDINFER_LIBRARY=$(CURDIR)/$(BUILD)/libbraid.so $(PYTHON) -m pytest -q python/tests; \
	fi
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit ctest.xml; \
	  status=$$?; $(PYTHON) $(CURDIR)/scripts/test_summary.py ctest.xml; exit $$status

clean:
	rm -rf $(BUILD)
