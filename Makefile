# segrt: the commands a user types. The real build is CMake (CMakeLists.txt);
# this file installs dependencies, configures and runs it.
#
#   make            build libsegrt.so, libsegrt.a, the segrt command and the tests
#   make check      every test: release build, sanitizer build, fuzzing for a minute
#   make demo       the main job on the shipped default model
#   make install PREFIX=/usr/local

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc)
MODELS     ?= $(abspath ../shared/models)
FUZZ_SECONDS ?= 60
CMAKE_FLAGS ?=

CONFIGURE = cmake -S . -DSEGRT_MODELS_DIR=$(MODELS) $(CMAKE_FLAGS)

.PHONY: all deps deps-build build check test test-asan fuzz demo install clean

all: build

deps-build:
	@bash scripts/deps.sh --build

deps:
	@bash scripts/deps.sh

build: deps-build
	@$(CONFIGURE) -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps
	@$(CONFIGURE) -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSEGRT_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)

# libFuzzer on the ONNX loader, seeded with the shared models.
fuzz: deps
	@CC=clang $(CONFIGURE) -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEGRT_FUZZ=ON \
	    -DSEGRT_CUDA=OFF -DSEGRT_TESTS=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_onnx fuzz_npy fuzz_image
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(MODELS)

check: test test-asan fuzz

demo: build
	@bash scripts/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
