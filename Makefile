# GreenBoost top-level targets. Kbuild (beside this file) builds the module itself.
#   make kmod          greenboost.ko for the running kernel (or KERNELRELEASE=...)
#   make shim          libgreenboost_cuda.so (target/release)
#   make cli           the `greenboost` command
#   make test          every suite that needs no GPU (what CI runs)
#   make kmod-test     module suite in QEMU guests (stock Debian kernel + Rust test kernel)
#   make shim-test     shim suite against fake CUDA libraries
#   make gpu-test      GPU suite (on a machine with an NVIDIA GPU)
#   make bench         benchmarks (on a machine with an NVIDIA GPU)
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all kmod shim cli test abi-test kmod-test shim-test gpu-test bench install uninstall clean

all: shim

kmod:
	scripts/build-kmod.sh

shim:
	$(CARGO) build --release -p greenboost-shim

cli:
	$(CARGO) build --release -p greenboost-cli

abi-test:
	@scripts/run-suite.sh abi-test $(CARGO) test -p greenboost-abi

shim-test:
	@scripts/run-suite.sh shim-test tests/fakecuda/run.sh

kmod-test:
	@scripts/run-suite.sh kmod-test tests/qemu/run.sh

test:
	@scripts/test-all.sh

gpu-test:
	tests/gpu/run.sh

bench:
	bench/run.sh

clean:
	$(CARGO) clean
