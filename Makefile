# Makefile — the only build system: from C11 host code, lib/libkt.a (the runtime an
# application links: errors, GPU layer, JIT and cache, families, DB reads, dispatch, NCCL,
# the embedded kernel sources and schema; no cuBLAS, no tuner), lib/libktdev.a (the tuner,
# the verify/time harness, bench and its cuBLAS baselines, DB writes and merge), bin/kt (the
# CLI, linking both) and the test runners.
CUDA ?= /usr/local/cuda
CC ?= gcc
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -Wno-missing-field-initializers -I$(CUDA)/include -Iruntime -pthread
# (-Wno-missing-field-initializers: positional kt_tensor_desc initializers leave compare,
# tolerance and set_len at their defaults, 0.)
# NVRTC and cuBLAS(Lt) come from the CUDA toolkit (found at run time through the rpath);
# SQLite is linked statically so the binary runs where only the shared library differs. Debian's
# libcjson-dev ships no static library: lib/ gets a copy of libcjson.so.1, found through the
# $ORIGIN/../lib rpath, so bin/kt runs on machines without it (the GPU machine).
LDLIBS_RT = -L$(CUDA)/lib64 -lnvrtc -Wl,-Bstatic -lsqlite3 -Wl,-Bdynamic -lcjson -ldl -lm -pthread
LDLIBS = -L$(CUDA)/lib64 -lcublasLt -lcublas $(LDLIBS_RT)
CJSON_SO = $(firstword $(wildcard /usr/lib/*/libcjson.so.1 /usr/lib/libcjson.so.1))
LDFLAGS += -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,$(CUDA)/lib64

ifeq ($(wildcard $(CUDA)/include/nvrtc.h),)
$(error CUDA toolkit not found at $(CUDA) (no include/nvrtc.h): install it or run make CUDA=/path/to/cuda)
endif

EMBEDDED = $(wildcard kernels/*.cu) $(wildcard kernels/common/*.cuh) $(wildcard kernels/common/*.h) tuner/check.cu runtime/model.cu bench/ceiling.cu bench/memory.cu bench/launch.cu bench/stream.cu $(wildcard db/*.sql) profiles/why_slow.ncu
RT_SRC = $(wildcard runtime/*.c kernels/*.c) db/db.c
DEV_SRC = $(wildcard tuner/*.c bench/*.c report/*.c) db/db_write.c
LIB_SRC = $(RT_SRC) $(DEV_SRC)
RT_OBJ = $(RT_SRC:%.c=build/%.o) build/embedded.o
DEV_OBJ = $(DEV_SRC:%.c=build/%.o)
TEST_SRC = $(wildcard tests/cpu/*.c)
TEST_OBJ = $(TEST_SRC:%.c=build/%.o)
HEADERS = $(wildcard runtime/*.h kernels/*.h kernels/common/*.h kernels/common/*.cuh tuner/*.h bench/*.h report/*.h db/*.h tests/cpu/*.h)

all: bin/kt lib/libkt.a lib/libktdev.a lib/libkt.so

build/tools/embed: tools/embed.c
	@mkdir -p $(@D)
	$(CC) -O2 -o $@ $<

# The report test's PNG reader (libpng: libpng-dev).
build/tools/png_ink: tools/png_ink.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $< -lpng

# An NVTX injection library that records the ranges a program opens (the NVTX tests).
build/tools/libnvtx_record.so: tools/nvtx_record.c
	@mkdir -p $(@D)
	$(CC) -O2 -std=c11 -Wall -Wextra -Werror -I$(CUDA)/include -shared -fPIC -o $@ $<

build/embedded.c: build/tools/embed $(EMBEDDED)
	build/tools/embed $(EMBEDDED) > $@.tmp && mv $@.tmp $@

build/embedded.o: build/embedded.c
	$(CC) -c -o $@ $<

build/%.o: %.c $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

lib/libkt.a: $(RT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

lib/libktdev.a: $(DEV_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The embedding API's shared library (runtime/kt_api.h; python/kt_embed.py loads it): the
# runtime library alone, no cuBLAS, no tuner. Debian's libsqlite3.a is not position-independent,
# so the shared library takes SQLite's shared one, copied into lib/ like cJSON's.
SQLITE_SO = $(firstword $(wildcard /usr/lib/*/libsqlite3.so.0 /usr/lib/libsqlite3.so.0))
lib/libsqlite3.so.0: $(SQLITE_SO)
	@mkdir -p $(@D)
	cp -L $< $@

lib/libkt.so: $(RT_OBJ) lib/libcjson.so.1 lib/libsqlite3.so.0
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -Wl,--no-undefined -o $@ $(RT_OBJ) -L$(CUDA)/lib64 -lnvrtc -l:libsqlite3.so.0 -lcjson -ldl -lm -pthread

lib/libcjson.so.1: $(CJSON_SO)
	@mkdir -p $(@D)
	cp -L $< $@

bin/kt: build/cli/main.o lib/libktdev.a lib/libkt.a lib/libcjson.so.1
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ build/cli/main.o lib/libktdev.a lib/libkt.a $(LDLIBS)

build/test_cpu: $(TEST_OBJ) lib/libktdev.a lib/libkt.a lib/libcjson.so.1
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) lib/libktdev.a lib/libkt.a $(LDLIBS)

TEST_TOOLS = build/test_cpu bin/kt lib/libkt.a lib/libkt.so build/tools/png_ink build/tools/libnvtx_record.so
# CPU tests: `make test` the quick ones (unit tests but the sweeps, the CLI, the library
# layout); `make test-all` everything that needs no GPU (sweeps, replay, report, fuzz too; CI runs it).
test: $(TEST_TOOLS)
	bash tests/cpu/run.sh --fast

test-all: $(TEST_TOOLS)
	bash tests/cpu/run.sh

# The sources against .clang-format (tests/cpu/format.sh; make test and test-all run it too),
# and the same files rewritten to it.
format-check:
	bash tests/cpu/format.sh

format:
	bash tests/cpu/format.sh --fix

# Fuzz targets (clang's libFuzzer + AddressSanitizer): the library rebuilt instrumented under
# build/fuzz, one binary per parser (tests/fuzz/targets.c); `make fuzz` runs each for
# KT_FUZZ_S seconds (default 20). make test runs them too where clang is installed.
FUZZ_CC ?= clang
FUZZ_TARGETS = shape config where int_list db_header
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -Wall -I$(CUDA)/include -Iruntime -pthread -fsanitize=fuzzer-no-link,address
FUZZ_OBJ = $(LIB_SRC:%.c=build/fuzz/%.o) build/fuzz/embedded.o
# kept between builds (make would delete them as intermediates and rebuild all for each target)
.SECONDARY: $(FUZZ_OBJ)

build/fuzz/%.o: %.c $(HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

build/fuzz/embedded.o: build/embedded.c
	@mkdir -p $(@D)
	$(FUZZ_CC) -c -o $@ $<

build/fuzz/fuzz_%: tests/fuzz/targets.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DKT_FUZZ_$* $(LDFLAGS) -o $@ $< $(FUZZ_OBJ) $(LDLIBS)

fuzz-targets: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)

fuzz: fuzz-targets
	bash tests/fuzz/run.sh

# The main job: sweep the five target shapes into kt.db (compile-only for sm_120 without a GPU).
demo: bin/kt
	bash tools/demo.sh

# GPU suite (on a machine with an NVIDIA GPU).
gpu-test: bin/kt
	bash tests/gpu/run.sh

# libFuzzer over the safetensors header and config.json parsers (clang; not part of `make test`).
build/fuzz_safetensors: tests/fuzz/fuzz_safetensors.c runtime/safetensors.c runtime/model.c lib/libkt.a lib/libcjson.so.1
	@mkdir -p $(@D)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -I$(CUDA)/include -Iruntime $(LDFLAGS) \
	    -o $@ tests/fuzz/fuzz_safetensors.c runtime/safetensors.c runtime/model.c lib/libkt.a $(LDLIBS_RT)
fuzz-safetensors: build/fuzz_safetensors

clean:
	rm -rf build bin lib

.PHONY: all test test-all format-check format demo gpu-test clean fuzz fuzz-targets fuzz-safetensors FORCE

# The commit a binary is built from, "-dirty" when tracked files differ from it (runs record
# it in the database): build/commit holds the last one, and main.o is rebuilt when it changes.
KT_COMMIT := $(shell git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
build/commit: FORCE
	@mkdir -p $(@D)
	@echo '$(KT_COMMIT)' | cmp -s - $@ || echo '$(KT_COMMIT)' > $@
build/cli/main.o: build/commit Makefile
build/cli/main.o: CFLAGS += -DKT_COMMIT='"$(KT_COMMIT)"'
FORCE:
