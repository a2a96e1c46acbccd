# fusedgpt build.
#   make train      ./train (host C11 + CUDA kernels; links cudart and NCCL, opens cuBLASLt at its first
#                   matrix product), one compile per core
#   make test       CPU tests (what CI runs); SANITIZE=1 builds them with ASan + UBSan
#   make test-gpu   GPU tests (needs a GPU)      make bench   output-layer benchmark (needs a GPU)
#   make data       default corpus -> tokenizer + shards      make clean
#   make deps       installs PCRE2 (the tests' one dependency) where missing; `make test` runs it
#   DEBUG=1         -g -O0 everywhere (objects in build-debug/; ./train relinks when the build changes)
# Development tools live in dev/ (bench/, check/, profile/, plots/, RESULTS.md); test fixtures and
# their generators in tests/fixtures/.
# Host library sources are every .c in common/, model/ (and its groups: cpu/, cuda/, dist/, train/), data/ and
# tokenizer/ (none of them has a main) but the commands that call the CUDA backend and so link into
# the trainer only, model/train/sample_cmd.c (`./train sample`) and model/train/eval_cmd.c
# (`./train eval`); CUDA sources are every .cu in kernels/ and model/. train.c and those commands
# make the trainer.

# Compiles run in parallel, one per core, unless -j is given; not with `clean` among the goals, which
# must not race the build, and not in the sub-makes, which share the top one's job slots.
ifeq ($(MAKELEVEL)$(filter clean,$(MAKECMDGOALS)),0)
MAKEFLAGS += -j$(shell nproc)
endif

CC       ?= gcc
NVCC     ?= nvcc
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
CUDA_GENCODE ?= -gencode arch=compute_90a,code=sm_90a

comma := ,
space := $(empty) $(empty)
OPT      := -O3
BUILD    := build
# a debug build's objects live apart: make tracks files, not flags, so sharing build/ would keep the
# -O3 objects (and ./train) of an earlier build
ifeq ($(DEBUG),1)
OPT      := -g -O0
BUILD    := build-debug
endif
SANFLAGS :=
ifeq ($(SANITIZE),1)
BUILD    := build-san
SANFLAGS := -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
endif

# -ffp-contract=off: no fused multiply-add on the host either, so the CPU reference's AdamW on bf16
# state (kernels/adamw_bf16.h) gives the GPU's bits on every host compiler and architecture.
CFLAGS   += -std=c11 $(OPT) -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -D_GNU_SOURCE -fopenmp -I. $(SANFLAGS)
NVFLAGS  += $(OPT) -std=c++17 $(CUDA_GENCODE) -I. -Xcompiler -ffp-contract=off,-Wall,-Wextra,-Wno-unused-parameter,-Wno-format-truncation
LDLIBS   += -lm -lpthread
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lcublasLt -lcublas -lnccl -lcudart
# ./train opens cuBLASLt at its first matrix product (kernels/cublaslt_loader.cu), so that runs that
# never reach the GPU do not pay for mapping it
TRAIN_CUDA_LIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lnccl -lcudart -ldl

CMD_SRC  := model/train/sample_cmd.c model/train/eval_cmd.c
HOST_SRC := $(filter-out $(CMD_SRC),$(wildcard common/*.c model/*.c model/*/*.c data/*.c tokenizer/*.c))
CUDA_SRC := $(wildcard kernels/*.cu model/*.cu model/*/*.cu)
HOST_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(HOST_SRC))
# CUDA objects are never sanitized, so the sanitizer build reuses them from build/; a debug build
# has its own.
CUDA_BUILD := $(if $(filter 1,$(DEBUG)),build-debug,build)
CUDA_OBJ := $(patsubst %.cu,$(CUDA_BUILD)/%.cu.o,$(CUDA_SRC))
TEST_SRC := $(wildcard tests/test_*.c)
TEST_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TEST_SRC) tests/runner.c tests/test_util.c)
GPU_TEST_SRC := $(wildcard tests/test_*_gpu.cu)
GPU_TEST_OBJ := $(patsubst %.cu,$(CUDA_BUILD)/%.cu.o,$(GPU_TEST_SRC))

.PHONY: all test test-gpu bench data clean deps compare FORCE
.DEFAULT_GOAL := train
all: train $(BUILD)/run_tests $(BUILD)/run_gpu_tests $(BUILD)/bench_output_layer $(BUILD)/bench_kernels \
     $(BUILD)/lt_algo_probe $(BUILD)/bench_gemm_sm90 $(BUILD)/bench_gemm_gated_sm90 $(BUILD)/bench_nccl_copy_engine $(BUILD)/kernel_trace.so \
     $(BUILD)/bench_sample

# Under SANITIZE=1 the tests run a sanitized trainer, $(BUILD)/train; ./train is never sanitized.
TRAIN_BIN := $(if $(SANFLAGS),$(BUILD)/train,train)
LINK_SAN  := $(if $(SANFLAGS),-Xcompiler $(subst $(space),$(comma),$(strip $(SANFLAGS))))
# ./train is one file for the optimized and the DEBUG=1 builds: a stamp rewritten when the build
# changes makes it relink from that build's objects (whose own older times would not)
TRAIN_STAMP := build/.train_build
$(TRAIN_STAMP): FORCE
	@mkdir -p $(dir $@)
	@[ "$$(cat $@ 2>/dev/null)" = "$(BUILD) $(OPT)" ] || echo "$(BUILD) $(OPT)" >$@
FORCE:
$(TRAIN_BIN): $(BUILD)/train.o $(patsubst %.c,$(BUILD)/%.o,$(CMD_SRC)) $(HOST_OBJ) $(CUDA_OBJ) $(if $(SANFLAGS),,$(TRAIN_STAMP))
	$(NVCC) $(CUDA_GENCODE) -Xcompiler -fopenmp $(LINK_SAN) -o $@ $(filter %.o,$^) $(TRAIN_CUDA_LIBS) $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(CUDA_BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

# its host code copies out on every core
$(CUDA_BUILD)/model/cuda/host_transfer.cu.o: NVFLAGS += -Xcompiler -fopenmp

# CPU tests: host library only (no CUDA), so the sanitizer build stays clean. Tests that check the
# command line run ./train, which is built first.
$(BUILD)/run_tests: $(TEST_OBJ) $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

TEST_LIBS ?= -lpcre2-8
$(BUILD)/run_tests: LDLIBS += $(TEST_LIBS)

# What a fresh Debian/Ubuntu machine lacks for `make test`: only PCRE2's headers and library, the
# tokenizer tests' oracle for the pre-tokenizer's split (never linked into ./train). The CUDA toolkit
# is assumed installed. Does nothing when PCRE2 is there.
deps:
	@[ -f /usr/include/pcre2.h ] || { \
	    echo "installing libpcre2-dev (test dependency)"; \
	    if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	    $$sudo apt-get update -qq && $$sudo apt-get install -y -qq libpcre2-dev >/dev/null; }

test: deps
	@$(MAKE) --no-print-directory $(BUILD)/run_tests $(TRAIN_BIN)
	FUSEDGPT_TRAIN=./$(TRAIN_BIN) ./$(BUILD)/run_tests $(FILTER)

$(BUILD)/run_gpu_tests: $(GPU_TEST_OBJ) $(BUILD)/tests/runner.o $(BUILD)/tests/test_util.o $(HOST_OBJ) $(CUDA_OBJ)
	$(NVCC) $(CUDA_GENCODE) -Xcompiler -fopenmp -o $@ $^ $(CUDA_LIBS) $(LDLIBS)

test-gpu: $(BUILD)/run_gpu_tests
	./$(BUILD)/run_gpu_tests $(FILTER)

$(BUILD)/bench_output_layer: $(CUDA_BUILD)/dev/bench/bench_output_layer.cu.o $(HOST_OBJ) $(CUDA_OBJ)
	$(NVCC) $(CUDA_GENCODE) -Xcompiler -fopenmp -o $@ $^ $(CUDA_LIBS) $(LDLIBS)

# the body kernels' benchmark (dev/bench/bench_kernels.cu): kernels/ alone, no model code
KERNEL_OBJ := $(patsubst %.cu,$(CUDA_BUILD)/%.cu.o,$(wildcard kernels/*.cu))
$(BUILD)/bench_kernels: $(CUDA_BUILD)/dev/bench/bench_kernels.cu.o $(KERNEL_OBJ)
	$(NVCC) $(CUDA_GENCODE) -o $@ $^ $(CUDA_LIBS)

# our Hopper GEMM for the fused output layer's dW and dH products, checked against cuBLAS and timed
# beside it (dev/bench/gemm_sm90.cu; header-only kernels/ helpers, no kernel objects)
$(BUILD)/bench_gemm_sm90: $(CUDA_BUILD)/dev/bench/gemm_sm90.cu.o
	$(NVCC) $(CUDA_GENCODE) -o $@ $^ $(CUDA_LIBS)

# the gated MLP's products with SwiGLU in their epilogues (kernels/gated_mlp.cu), beside cuBLASLt's
# product and kernels/swiglu.cu's pass (dev/bench/gemm_gated_sm90.cu)
$(BUILD)/bench_gemm_gated_sm90: $(CUDA_BUILD)/dev/bench/gemm_gated_sm90.cu.o $(KERNEL_OBJ)
	$(NVCC) $(CUDA_GENCODE) -o $@ $^ $(CUDA_LIBS)

# NCCL's kernel-driven exchanges against its copy-engine ones and the rank sum's loads, alone and
# beside GEMMs (two GPUs or more)
$(BUILD)/bench_nccl_copy_engine: $(CUDA_BUILD)/dev/bench/nccl_copy_engine.cu.o $(CUDA_BUILD)/kernels/rank_sum.cu.o
	$(NVCC) $(CUDA_GENCODE) -o $@ $^ $(CUDA_LIBS) -lpthread

# A CUPTI injection library (CUDA_INJECTION64_PATH) for dev/profile/gap_profile.sh; never linked.
$(BUILD)/kernel_trace.so: dev/profile/kernel_trace.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -shared -fPIC -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lcupti

# every cuBLASLt algorithm for the fused backward's GEMM shapes (dev/profile/output_layer_profile.sh
# runs it)
$(BUILD)/lt_algo_probe: $(CUDA_BUILD)/dev/profile/lt_algo_probe.cu.o
	$(NVCC) $(CUDA_GENCODE) -o $@ $^ $(CUDA_LIBS)

bench: $(BUILD)/bench_output_layer
	./$(BUILD)/bench_output_layer

data: train
	./train prepare --default-corpus

# Loss curves of the two output layers on the same model, seed and data (COMPARE_ARGS: train flags).
COMPARE_ARGS ?= -e d12 -v 262144 -b 16 -t 1024 -x 500
compare: train
	bash dev/check/compare_output_layers.sh runs/compare $(COMPARE_ARGS)

clean:
	rm -rf build build-san build-debug ./train

-include $(shell find $(CUDA_BUILD) $(BUILD) -name '*.d' 2>/dev/null | sort -u)

# tokenizer benchmark: training time, merges reached, tokens/byte, encode MB/s on the
# default corpus (prepared by `make data`); BENCH_TOKENIZER_ARGS overrides file and sizes.
BENCH_TOKENIZER_ARGS ?= .cache/corpus/default-v1.txt 262144 50304
$(BUILD)/bench_tokenizer: $(BUILD)/dev/bench/bench_tokenizer.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: bench-tokenizer
bench-tokenizer: $(BUILD)/bench_tokenizer
	./$(BUILD)/bench_tokenizer $(BENCH_TOKENIZER_ARGS)

# the host's time to draw a token from V logits with top-k and top-p (dev/bench/bench_sample.c)
$(BUILD)/bench_sample: $(BUILD)/dev/bench/bench_sample.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# SentencePiece-style tokenizer.json: load time and encode MB/s (dev/bench/bench_spm.sh makes the
# tokenizers it times).
$(BUILD)/bench_spm: $(BUILD)/dev/bench/bench_spm.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The pre-tokenizer against PCRE2 on a whole corpus (the tests do it on generated text).
SPLIT_FILE ?= .cache/corpus/default-v1.txt
$(BUILD)/check_split_pcre2: $(BUILD)/dev/check/check_split_pcre2.o $(HOST_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -lpcre2-8

.PHONY: check-split
check-split: $(BUILD)/check_split_pcre2
	./$(BUILD)/check_split_pcre2 $(SPLIT_FILE)
