#!/usr/bin/env bash
# Installs the build and test dependencies (Debian 12). Idempotent; needs root.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# rust-web-clippy: kmod's clippy gate (the clippy of the kernel's rustc; make kmod-test).
# debootstrap: make deb-test installs the packages into a fresh Debian 12 root.
PKGS=(linux-source-6.12 rustc-web rust-web-src rust-web-clippy clang lld llvm libclang-dev
      qemu-system-x86 busybox-static flex bison bc libelf-dev libssl-dev cpio xz-utils
      make gcc gcc-12 libc6-dev kmod dwarves python3 python3-numpy python3-pytest dkms patch
      python3-pip python3-venv python3-setuptools python3-wheel debootstrap)
# make cli-test reads `status --prometheus` with Prometheus's own parser
# (prometheus_client); Debian's package where the sources have it (Debian 12 does).
apt-cache show python3-prometheus-client >/dev/null 2>&1 && PKGS+=(python3-prometheus-client)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing packages (${missing[*]}): run as root or apt-get install them"
  log "installing: ${missing[*]}"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
need_cmd cargo "cargo (rustup)"
# make lint: rustfmt and clippy of the toolchain on PATH (rustup components).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1 \
   || ! rustfmt --version >/dev/null 2>&1; then
  command -v rustup >/dev/null 2>&1 \
    || die "cargo fmt / cargo clippy missing and no rustup: install the rustfmt and clippy of your toolchain"
  log "installing the rustfmt and clippy components (rustup)"
  rustup component add rustfmt clippy >&2 || die "rustup component add rustfmt clippy failed"
fi
# The Python example's numpy views run on the python3 that runs the suite (Debian's
# python3-numpy serves Debian's python only; PATH may name another one). Its torch
# views stay skipped here: PyPI's torch wheel brings several GB of CUDA libraries, which
# would take CI's time for two checks; they run where torch is (the GPU machine).
if ! python3 -c 'import numpy' >/dev/null 2>&1; then
  log "installing numpy for $(command -v python3)"
  python3 -m pip install -q numpy >&2 || log "pip install numpy failed: the Python example skips its numpy views"
fi
# make python-example-test runs pytest; as numpy, Debian's package serves Debian's python3 only.
if ! python3 -m pytest --version >/dev/null 2>&1; then
  log "installing pytest for $(command -v python3)"
  python3 -m pip install -q pytest >&2 || die "pip install pytest failed: make python-example-test needs it"
fi
# As numpy: Debian's package serves Debian's python3 only. Without it the check skips.
if ! python3 -c 'import prometheus_client' >/dev/null 2>&1; then
  log "installing prometheus-client for $(command -v python3)"
  python3 -m pip install -q prometheus-client >&2 \
    || log "pip install prometheus-client failed: the status --prometheus parser check skips"
fi
# make python-package-test builds the wheel offline (pip wheel --no-build-isolation):
# setuptools >= 61 (pyproject.toml's [project]) and wheel on the python3 that runs it,
# Debian's packages above for Debian's python3.
if ! python3 -c 'import sys, setuptools, wheel; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' >/dev/null 2>&1; then
  log "installing setuptools and wheel for $(command -v python3)"
  python3 -m pip install -q 'setuptools>=61' wheel >&2 \
    || log "pip install setuptools wheel failed: make python-package-test cannot build the wheel"
fi
ensure_bindgen
