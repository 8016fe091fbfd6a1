# shellcheck shell=bash
# Common settings for the kernel-side scripts. Sourced, never run.
# Everything built here is cached outside the repository, keyed by its inputs.
GB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GB_CACHE=${GREENBOOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/greenboost}
BINDGEN_VERSION=0.73.2
BINDGEN=$GB_CACHE/bindgen-$BINDGEN_VERSION/bin/bindgen
# The kernel's Rust must be built with a rustc that ships its `core` source: Debian's
# rustc-web does (rust-web-src); the rustup toolchain on PATH has none.
KRUSTC=${KRUSTC:-/usr/bin/rustc}
KRUSTDOC=${KRUSTDOC:-/usr/bin/rustdoc}
export LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm-14/lib}

die() { echo "greenboost: $*" >&2; exit 1; }
log() { echo "greenboost: $*" >&2; }

# hash_inputs FILE... : a short key for a cache directory
hash_inputs() { cat "$@" | sha256sum | cut -c1-16; }

toolchain_id() {
  { "$KRUSTC" --version; "$BINDGEN" --version 2>/dev/null; clang --version | head -1;
    gcc --version | head -1; } | tr '\n' ' '
}

ensure_bindgen() {
  [ -x "$BINDGEN" ] && return 0
  log "installing bindgen-cli $BINDGEN_VERSION into $GB_CACHE"
  cargo install --locked bindgen-cli --version "$BINDGEN_VERSION" \
    --root "$GB_CACHE/bindgen-$BINDGEN_VERSION" >&2 || die "cargo install bindgen-cli failed"
}

need_cmd() {
  # need_cmd CMD PACKAGE
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found: install the Debian package '$2' (apt-get install $2)"
}

# The stock distro kernel the QEMU suite boots with the self-contained module: the
# Debian 12 upload whose source linux-source-6.12 ships (scripts/fetch-debian-kernel.sh),
# read from the installed package, because the module must be built from the very same
# upload and the archive moves on (6.12.117-1~deb12u1 gives 6.12.117+deb12-amd64).
stock_krel_of_installed_source() {
  local version
  version=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null) || return 1
  case $version in
    6.12.*-*~deb12u*) echo "${version%%-*}+deb12-amd64" ;;
    *) return 1 ;;
  esac
}
GB_STOCK_KREL=${GB_STOCK_KREL:-$(stock_krel_of_installed_source || echo 6.12.117+deb12-amd64)}
