# GreenBoost top-level targets. Kbuild (beside this file) builds the module itself.
#   make kmod          greenboost.ko for the running kernel (or KERNELRELEASE=...)
#   make shim          libgreenboost_cuda.so (target/release)
#   make cli           the `greenboost` command
#   make install       sudo: shim, CLI, module, udev/modprobe/limits/DKMS files (DESTDIR ok)
#   make deb           Debian packages greenboost, greenboost-dkms, greenboost-dbgsym in build/deb
#   make test          every suite that needs no GPU (what CI runs)
#   make lint          the static gates (rustfmt, clippy, file maps, kmod/ checks, counter mirrors) + shim unit tests
#   make deb-test      the packages installed, used and purged in a debootstrap Debian 12 root;
#                      the packaged module built by DKMS and loaded in the stock QEMU guest
#   make kmod-test     module suite in QEMU guests (stock Debian kernel + Rust test kernel)
#   make shim-test     shim suite against fake CUDA libraries
#   make gpu-test      GPU suite (on a machine with an NVIDIA GPU)
#   make bench         benchmarks (on a machine with an NVIDIA GPU)
#   make bench-llamacpp  llama.cpp vs GreenBoost (on the GPU machine; bench/llamacpp/prepare.sh here first)
#   make plots         bench/results/plots/*.png from the committed results (matplotlib, here)
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all kmod shim cli test lint abi-test cli-test shim-test python-example-test python-package-test plots-test bench-test kmod-test install-test \
	deb deb-test gpu-test bench plots install uninstall clean
PREFIX ?= /usr/local

all: shim cli

kmod:
	scripts/build-kmod.sh

shim:
	$(CARGO) build --release -p greenboost-shim

cli:
	$(CARGO) build --release -p greenboost-cli

# rustfmt, clippy (warnings are errors; SAFETY comments and `# Safety` sections), the
# file maps of shim/ and kmod/ (scripts/check-layers.py), kmod/'s glue, SAFETY and
# rustfmt checks, the mirrors of the shim's counters (with a self-test that plants
# defects), and the shim's unit tests: one count per gate (scripts/lint.sh).
lint:
	@CARGO="$(CARGO)" scripts/run-suite.sh lint scripts/lint.sh

abi-test:
	@scripts/run-suite.sh abi-test $(CARGO) test -p greenboost-abi

# CLI and policy unit tests, `status --json` against a fake sysfs root, the READMEs'
# settings tables against the policy.
cli-test:
	@scripts/run-suite.sh cli-test $(CARGO) test -p greenboost-cli -p greenboost-policy

# Python zero-copy example (pytest): ABI against abi/greenboost.h, numpy/torch views; the
# real round trip and the CUDA view run where /dev/greenboost / a GPU exist, else are
# skipped (-rs says why). No cache: the tree stays as it was.
python-example-test:
	@scripts/run-suite.sh python-example-test python3 -m pytest -q -rs -p no:cacheprovider examples/python

# The greenboost Python package: the wheel built offline, installed into a fresh venv,
# and examples/python's tests run against the installed copy.
python-package-test:
	@scripts/run-suite.sh python-package-test tests/python-package/run.sh

# bench/plots.py's data against the results it reads, the committed PNGs, and a redraw
# where matplotlib is importable by $(PYTHON) (skipped otherwise).
plots-test:
	@scripts/run-suite.sh plots-test $(PYTHON) bench/test_plots.py

# bench/llamacpp/bound.py's bounds (the best placement in a VRAM budget), no GPU.
bench-test:
	@scripts/run-suite.sh bench-test $(PYTHON) bench/llamacpp/test_bound.py

# Staged install into a temporary DESTDIR, checked file by file, then uninstalled.
install-test:
	@scripts/run-suite.sh install-test tests/install/run.sh

# The packages (packaging/deb/build.sh: scripts/install.sh's tree, staged with PREFIX=/usr).
deb:
	packaging/deb/build.sh

# make deb's packages in a debootstrap Debian 12 root (cached): dpkg -i, greenboost run of a
# fake-CUDA program, status --prometheus, a container's private /dev/shm, apt purge, the
# Python package's wheel in a venv of the root's python3 with its tests, the root's file
# list as before; the packaged module built by DKMS and loaded in the stock guest.
deb-test:
	@scripts/run-suite.sh deb-test tests/deb/run.sh

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

# `run.sh all` builds llama-bench on the GPU machine when none is there, then measures.
bench-llamacpp:
	bench/llamacpp/run.sh all

# The PNGs of bench/results/plots/ from the committed results: run on the build machine
# (python3-matplotlib), then commit them. PYTHON=/usr/bin/python3 where python3 lacks it.
PYTHON ?= python3
plots:
	$(PYTHON) bench/plots.py

# `sudo make install`: the shim, the CLI, the module for the running kernel and the
# system files (scripts/install.sh). DESTDIR=DIR stages into DIR without touching the system.
install:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/install.sh

uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/uninstall.sh

clean:
	$(CARGO) clean
