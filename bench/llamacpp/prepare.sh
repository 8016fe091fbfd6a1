#!/usr/bin/env bash
# Run here (not on the device) before the device calls of `make bench-llamacpp`.
# Fetches the llama-cpp-python sdist from PyPI (pinned version, sha256-checked, cached in
# ${GREENBOOST_CACHE:-~/.cache/greenboost}/llamacpp) and stages build/llama-carry/, which
# git ignores and the device calls name in their carry list:
#   llama.cpp-src.tar.xz  the sdist's vendor/llama.cpp, trimmed to what a CUDA+CPU build
#                         of llama-bench needs (run.sh builds it on the device)
#   bin/llama-bench       only when a CUDA build made here exists (LLAMACPP_CUDA_BUILD
#                         names its build folder); then the device skips its build
#   gguf-py/              the sdist's gguf package (pure Python) for make_gguf.py
#   llama-version         sdist version and llama.cpp commit
#   commit                the GreenBoost commit measured (the device gets no .git)
# Usage: bench/llamacpp/prepare.sh [--print-src]   (--print-src: only print the
#        extracted llama.cpp source directory, fetching it if needed; selftest.sh uses it)
set -euo pipefail
cd "$(dirname "$0")/../.."

SDIST_VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache=${GREENBOOST_CACHE:-$HOME/.cache/greenboost}/llamacpp
sdist=$cache/llama_cpp_python-$SDIST_VERSION.tar.gz
extracted=$cache/src-$SDIST_VERSION
src=$extracted/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp
carry=build/llama-carry

log() { echo "prepare: $*" >&2; }

fetch_sdist() {
    mkdir -p "$cache"
    if [[ -f $sdist ]] && echo "$SDIST_SHA256  $sdist" | sha256sum -c --status; then
        return
    fi
    log "downloading llama-cpp-python $SDIST_VERSION sdist from PyPI"
    # The JSON API names the file's URL (relative on some mirrors, hence urljoin).
    python3 - "$SDIST_VERSION" "$sdist.part" <<'EOF'
import json, sys, urllib.parse, urllib.request
version, out = sys.argv[1], sys.argv[2]
api = "https://pypi.org/pypi/llama-cpp-python/json"
with urllib.request.urlopen(api, timeout=60) as r:
    files = json.load(r)["releases"].get(version, [])
sdists = [f for f in files if f["packagetype"] == "sdist"]
if not sdists:
    sys.exit(f"prepare: PyPI lists no sdist for llama-cpp-python {version}")
url = urllib.parse.urljoin(api, sdists[0]["url"])
urllib.request.urlretrieve(url, out)
EOF
    if ! echo "$SDIST_SHA256  $sdist.part" | sha256sum -c --status; then
        log "sha256 mismatch for the downloaded sdist (expected $SDIST_SHA256); not used"
        rm -f "$sdist.part"
        exit 1
    fi
    mv "$sdist.part" "$sdist"
}

extract_sdist() {
    [[ -f $extracted/.done ]] && return
    rm -rf "$extracted"
    mkdir -p "$extracted"
    tar -xzf "$sdist" -C "$extracted"
    touch "$extracted/.done"
}

fetch_sdist
extract_sdist
if [[ ${1:-} == --print-src ]]; then
    echo "$src"
    exit 0
fi

# The sdist carries llama.cpp's git metadata (a submodule gitdir); fall back to "unknown"
# rather than fail where git is missing.
llama_commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
llama_date=$(git -C "$src" log -1 --format=%cs 2>/dev/null || echo unknown)

rm -rf "$carry"
mkdir -p "$carry/bin"
# Everything CMake reads for a CUDA+CPU build of llama-bench; the other backends, docs,
# models, the web UI and tests are left out (they are most of the 176 MB).
XZ_OPT=-T0 tar -C "$src" -cJf "$carry/llama.cpp-src.tar.xz" \
    --exclude='ggml/src/ggml-'{cann,et,hexagon,metal,opencl,openvino,sycl,virtgpu,vulkan,webgpu,zdnn,zendnn} \
    --exclude=tools/ui --exclude=tools/server/public --exclude='*.gguf' \
    CMakeLists.txt LICENSE cmake ggml include src common tools vendor licenses
cp -r "$src/gguf-py" "$carry/gguf-py"
rm -rf "$carry/gguf-py/tests" "$carry/gguf-py/examples"
find "$carry/gguf-py" -name __pycache__ -prune -exec rm -rf {} +

if [[ -n ${LLAMACPP_CUDA_BUILD:-} ]]; then
    bin=$LLAMACPP_CUDA_BUILD/bin/llama-bench
    [[ -x $bin ]] || { log "LLAMACPP_CUDA_BUILD=$LLAMACPP_CUDA_BUILD has no bin/llama-bench"; exit 1; }
    strip -o "$carry/bin/llama-bench" "$bin"
fi

printf 'llama-cpp-python %s (sdist sha256 %s)\nllama.cpp %s (%s)\n' \
    "$SDIST_VERSION" "$SDIST_SHA256" "$llama_commit" "$llama_date" >"$carry/llama-version"
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- bench/llamacpp shim abi || commit="$commit-dirty"
echo "$commit" >"$carry/commit"
log "staged $carry ($(du -sh "$carry" | cut -f1)): $(cd "$carry" && find . -maxdepth 2 -type f | sort | tr '\n' ' ')"
log "llama.cpp $llama_commit, GreenBoost $commit"
