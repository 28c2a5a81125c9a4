# braidinfer — the two entry points: `make run` (set up if needed, build, generate text with the
# embedded model, on the GPU if there is one) and `make test` (set up, build, run every test).
BUILD ?= build
BUILD_TYPE ?= Release
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc)

.PHONY: all deps configure build run test clean fuzz test-sanitize

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

# Python tests first, ctest last, then one closing line: 'ctest: N passed, N failed, N skipped'
# (tests, not ctest entries: ctest runs braid_tests in shards, tests/CMakeLists.txt). TESTS is a
# gtest filter (GTEST_FILTER syntax: 'Tokenizer*:Config*', '-Server*') for the C++ tests.
TESTS ?=
test: build
	@if [ -d python/tests ]; then \
	  BRAIDINFER_LIBRARY=$(CURDIR)/$(BUILD)/libbraid.so $(PYTHON) -m pytest -q python/tests; \
	fi
	@rm -rf $(BUILD)/gtest-shards
	@cd $(BUILD) && $(if $(TESTS),GTEST_FILTER='$(TESTS)') \
	  ctest --output-on-failure -j $(JOBS) --output-junit ctest.xml; \
	  status=$$?; $(PYTHON) $(CURDIR)/scripts/test_summary.py ctest.xml gtest-shards; exit $$status

# `make test-sanitize` and `make fuzz` share one build folder (CPU only, clang-14, AddressSanitizer
# with leak checks + UndefinedBehaviorSanitizer, libFuzzer's coverage, -O1 with line tables): the
# library is compiled once for both, which halves what they add to CI.
SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD ?= $(SANITIZE_BUILD)
sanitize-configure-%: deps
	@cmake -S . -B $* -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DBRAID_FUZZ=ON -DBRAID_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null

# `make test-sanitize`: the C++ tests on the CPU under the sanitizers, by ctest; any report fails
# its shard (and names the test it came from). SANITIZE_TESTS is a gtest filter of the tests to
# run; the default leaves out what measures speed rather than correctness (a 200-client load test
# meets its read timeouts at sanitizer speed). braid_c_smoke is not built here.
SANITIZE_TESTS ?= -ServerLoad.TwoHundredConcurrentRequests
test-sanitize: sanitize-configure-$(SANITIZE_BUILD)
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target braid_tests
	@rm -rf $(SANITIZE_BUILD)/gtest-shards
	@cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 GTEST_FILTER='$(SANITIZE_TESTS)' \
	  ctest --output-on-failure -j $(JOBS) --output-junit ctest.xml -E '^braid_c_smoke$$'; \
	  status=$$?; $(PYTHON) $(CURDIR)/scripts/test_summary.py ctest.xml gtest-shards; exit $$status

# `make fuzz FUZZ_SECONDS=N`: every libFuzzer target of tests/fuzz/ for N seconds each, from the
# committed seeds (tests/fuzz/corpus/), then a table of executions per target.
FUZZ_SECONDS ?= 30
fuzz: sanitize-configure-$(FUZZ_BUILD)
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	@bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
