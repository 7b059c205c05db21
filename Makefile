# mlxcel: `make run` runs a real generation, `make test` runs the tests. Both set up a fresh
# Debian 12 machine first (as root).
DEB_PKGS := build-essential cmake pkg-config ninja-build clang libclang-rt-14-dev libomp-dev \
            libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libxxhash-dev \
            libopenblas-dev libcmocka-dev curl wordnet-base prometheus chromium python3
BUILD   ?= build
ASAN    ?= build-asan
FUZZ    ?= build-fuzz
SECONDS ?= 60
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build build-asan test test-fast run bench fuzz fuzz-run clean

all: build

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps: all packages present"; fi

build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# CPU-only ASan+UBSan build: the bad-input corpus and parsers must run clean under it.
build-asan:
	cmake -S . -B $(ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMLXCEL_CUDA=OFF -DMLXCEL_SANITIZE=ON
	cmake --build $(ASAN) -j $(JOBS)

# The fuzz build's tests replay every committed fuzz input (fuzz/corpus, fuzz/regress) once.
test: deps build build-asan fuzz
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -LE nosan
	cd $(FUZZ) && ctest --output-on-failure -j $(JOBS)

run: deps build
	./$(BUILD)/mlxcel generate -m models/wordnet-chat-16m -p 'What does "ocean" mean?'

bench: deps build
	./$(BUILD)/mlxcel bench --help

# libFuzzer targets (clang, ASan + UBSan) and their replay tests into $(FUZZ); docs/fuzzing.md.
fuzz: deps
	cmake -S . -B $(FUZZ) -G Ninja -DCMAKE_C_COMPILER=clang -DMLXCEL_CUDA=OFF -DMLXCEL_FUZZ=ON
	cmake --build $(FUZZ) -j $(JOBS)

# Every target SECONDS long (two at a time) on a scratch copy of its corpus; prints the table
# (also $(FUZZ)/fuzz-run.md). Crash reproducers land in fuzz/regress/<target>/.
fuzz-run: fuzz
	bash fuzz/run.sh $(FUZZ) $(SECONDS) $(TARGETS)

clean:
	rm -rf $(BUILD) $(ASAN) $(FUZZ)
