#!/usr/bin/env bash
# DKMS's MAKE step (dkms.conf): builds greenboost.ko for kernel $1 with the project's
# own build script and leaves it where dkms.conf says (./greenboost.ko). Runs in
# DKMS's copy of /usr/src/greenboost-VERSION.
set -euo pipefail
krel=${1:?usage: dkms-build.sh KERNELRELEASE [HEADERS_DIR]}
# DKMS passes the kernel's build directory (its --kernelsourcedir, or
# /lib/modules/KERNELRELEASE/build); build-kmod.sh finds the latter by itself.
headers=()
[ -n "${2:-}" ] && [ -f "$2/.config" ] && headers=(--headers "$2")
here=$(cd "$(dirname "$0")/../.." && pwd)
# The same cache as scripts/install.sh's build: bindgen and the private kernel trees
# live there, so a kernel update needs neither cargo nor the network.
export GREENBOOST_CACHE=${GREENBOOST_CACHE:-/var/cache/greenboost}
ko=$("$here/scripts/build-kmod.sh" --kernelrelease "$krel" "${headers[@]}" --out "$here/dkms-out/$krel" | grep '/greenboost\.ko$' | tail -1)
[ -n "$ko" ] || { echo "greenboost: the build reported no greenboost.ko for $krel" >&2; exit 1; }
cp "$ko" "$here/greenboost.ko"
