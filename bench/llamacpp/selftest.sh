#!/usr/bin/env bash
# Local check of the llama.cpp benchmark, on a machine without a GPU (run it here before
# spending device time): stages the carry, builds a CPU-only llama-bench from the same
# carried source (cached), writes a tiny-shape GGUF with make_gguf.py and runs the whole
# `run.sh bench` phase on it (three configurations, -v logs, JSONL, report), the same on
# a tiny mixture-of-experts GGUF (the experts-on-CPU configuration), then feeds
# the report code a captured GPU-style run (CUDA buffer lines, VRAM samples, a shim
# summary, a timed-out configuration). Ends with "N passed, M failed".
# Environment: LLAMACPP_CPU_BIN  a CPU llama-bench to use instead of building one.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
here=bench/llamacpp
cache=${GREENBOOST_CACHE:-$HOME/.cache/greenboost}/llamacpp
passed=0
failed=0
check() {  # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@" >/dev/null 2>&1; then passed=$((passed + 1)); echo "ok   $what"
    else failed=$((failed + 1)); echo "FAIL $what"; fi
}

"$here/prepare.sh" || { echo "0 passed, 1 failed"; exit 1; }

bin=${LLAMACPP_CPU_BIN:-}
if [[ -z $bin ]]; then
    # Keyed by the carried source, so a new sdist pin rebuilds.
    key=$(sha256sum build/llama-carry/llama.cpp-src.tar.xz | cut -c1-16)
    dir=$cache/selftest-cpu-$key
    bin=$dir/build/bin/llama-bench
    if [[ ! -x $bin ]]; then
        if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
            echo "selftest: needs cmake and ninja (pip install cmake ninja)"
            exit 1
        fi
        rm -rf "$dir" && mkdir -p "$dir/src"
        tar -xJf build/llama-carry/llama.cpp-src.tar.xz -C "$dir/src"
        nice -n 10 cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
            >"$dir/configure.log" 2>&1 && nice -n 10 ninja -C "$dir/build" llama-bench >"$dir/build.log" 2>&1
    fi
fi
check "CPU llama-bench built from the carried source" test -x "$bin"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shim=${GREENBOOST_SHIM:-target/release/libgreenboost_cuda.so}
[[ -f $shim ]] || shim=$tmp/no-shim.so

# A long-context bench refuses a binary built without the CUDA flash-attention kernels
# (its -fa on attention would run on the CPU), before writing any model.
mkdir -p "$tmp/fa-off"
ln -s "$(realpath "$bin")" "$tmp/fa-off/llama-bench"
echo "on the device in 1 s (1 CPUs, flash attention OFF), nvcc 13.0" >"$tmp/fa-off/build-info"
LLAMACPP_BIN=$tmp/fa-off/llama-bench LLAMACPP_DEPTH=64 LLAMACPP_RESULTS_DIR=$tmp/fa-off/results \
    "$here/run.sh" bench >"$tmp/fa-off.log" 2>&1
check "run.sh bench refuses a long-context run on a build without flash-attention kernels" \
    grep -q "without the CUDA flash-attention kernels" "$tmp/fa-off.log"
check "... and writes no model or report for it" test ! -e "$tmp/fa-off/results"

# The whole bench phase on the tiny shape: the model is written by make_gguf.py and
# loaded by llama.cpp (tokenizer metadata accepted), every configuration is parsed.
mkdir -p "$tmp/out"
OUT=$tmp/out LLAMACPP_BIN=$bin LLAMACPP_SHAPE=tiny LLAMACPP_BUDGET_MIB=1024 LLAMACPP_REPS=1 \
    LLAMACPP_RESULTS_DIR=$tmp/results GREENBOOST_SHIM=$shim \
    "$here/run.sh" bench >"$tmp/bench.log" 2>&1
json=$tmp/results/llamacpp-dense-latest.json
check "run.sh bench wrote llamacpp-dense-latest.json" test -s "$json"
check "run.sh bench wrote the markdown report" compgen -G "$tmp/results/llamacpp-*.md"
check "report copied to \$OUT" test -s "$tmp/out/llamacpp-dense-latest.json"
check "raw logs copied to \$OUT, named for the comparison" \
    tar -tzf "$tmp/out/llamacpp-dense-raw.tar.gz" llamacpp-raw/meta.json
for cfg in vram partial; do
    check "$cfg: pp512 and tg128 measured on the tiny GGUF" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["configs"][sys.argv[2]]
assert c["status"] == "ok", c
assert c["results"]["pp512"]["tok_s"] > 0 and c["results"]["tg128"]["tok_s"] > 0
assert c["device_buffers_mib"], "no buffer lines parsed from -v output"' "$json" "$cfg"
done
check "partial: -ngl planned from the GGUF's layer bytes" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
plan = d["meta"]["ngl_plan"]
assert plan["n_layer"] == 4 and plan["layer_bytes"] > 0 and plan["ngl"] == 4, plan
assert d["configs"]["partial"]["ngl"] == "4"' "$json"
check "greenboost configuration ran and was reported" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["configs"]["greenboost"]
assert c["status"] in ("ok", "not run") or c["failure_tail"], c' "$json"
check "model metadata in the report" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["meta"]
assert m["model"]["shape"] == "tiny" and m["model"]["file_bytes"] > 0, m
assert "llama.cpp" in m["llama_version"], m' "$json"

# The same for the mixture-of-experts shape: the experts-on-CPU configuration replaces
# partial offload, --n-cpu-moe planned from the GGUF's expert tensors. A CPU build reports
# no CUDA compute buffer, so the plan assumes 512 MiB; a 518 MiB budget then leaves room
# for the other weights, the KV cache and one of the two layers' experts: N = 1. It
# writes into the same $OUT, as a device call running both comparisons does.
OUT=$tmp/out LLAMACPP_BIN=$bin LLAMACPP_SHAPE=qwen3moe-tiny LLAMACPP_BUDGET_MIB=518 LLAMACPP_REPS=1 \
    LLAMACPP_RESULTS_DIR=$tmp/moe-results GREENBOOST_SHIM=$shim \
    "$here/run.sh" bench >"$tmp/moe-bench.log" 2>&1
mjson=$tmp/moe-results/llamacpp-moe-latest.json
check "moe: raw logs beside the dense run's, which are kept" \
    tar -tzf "$tmp/out/llamacpp-moe-raw.tar.gz" llamacpp-raw/meta.json
check "dense raw logs still there after the moe run" \
    tar -tzf "$tmp/out/llamacpp-dense-raw.tar.gz" llamacpp-raw/meta.json
check "moe: vram, cpu_moe and ot_cpu measured, no partial configuration" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["configs"]
assert "partial" not in c, c.keys()
for name in ("vram", "cpu_moe", "ot_cpu"):
    assert c[name]["status"] == "ok", c[name]
    assert c[name]["results"]["pp512"]["tok_s"] > 0 and c[name]["results"]["tg128"]["tok_s"] > 0' "$mjson"
check "moe: --n-cpu-moe planned from the expert tensors and passed to llama-bench" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
plan = d["meta"]["ngl_plan"]
assert plan["n_layer"] == 2 and plan["expert_bytes_per_layer"] == 3 * 8 * 128 * 256 * 2 and plan["ncmoe"] == 1, plan
assert d["configs"]["cpu_moe"]["ngl"] == "99 -ncmoe " + str(plan["ncmoe"]), d["configs"]["cpu_moe"]["ngl"]
assert d["meta"]["model"]["arch"] == "qwen3moe" and "greenboost_vs_cpu_moe_tg128" in d["ratios"], d["ratios"]
assert d["configs"]["ot_cpu"]["ngl"] == "99 -ot exps=CPU", d["configs"]["ot_cpu"]
assert {"llamacpp_moe_tg_vs_bound", "llamacpp_moe_tg", "llamacpp_moe_pp"} <= set(d["figures"]), d["figures"]
# The layout is read from the GGUF (without torch here, no rates and so no bounds).
b = d["bounds"]["cpu_moe"]["read_per_token_gb"] if d["bounds"] else None
assert b is None or b["host_ram"] > 0, d["bounds"]' "$mjson"

# A captured GPU-style run: what the device produces, fed to the report code.
raw=$tmp/gpu-raw
mkdir -p "$raw"
cat >"$raw/meta.json" <<'EOF'
{"date": "2026-11-30", "greenboost_commit": "abc123", "gpu": "NVIDIA H200", "driver": "580.159.04",
 "cuda": "13.0", "gpu_used_baseline_mib": 1, "budget_mib": 8192, "reps": 2, "n_prompt": 512,
 "n_gen": 128, "model": {"shape": "llama3-8b", "file_bytes": 16060522496}}
EOF
line() { printf '{"n_prompt": %s, "n_gen": %s, "n_gpu_layers": %s, "avg_ts": %s, "stddev_ts": 0.5, "samples_ts": [1, 2]}\n' "$@"; }
for cfg in vram partial greenboost; do echo 0 >"$raw/$cfg.rc"; echo 10.0 >"$raw/$cfg.wall"; done
{ line 512 0 99 9000; line 0 128 99 250; } >"$raw/vram.jsonl"
{ line 512 0 18 1500; line 0 128 18 10; } >"$raw/partial.jsonl"
line 512 0 99 1200 >"$raw/greenboost.jsonl"
echo 124 >"$raw/greenboost.rc"
echo 99 >"$raw/vram.ngl"; echo 18 >"$raw/partial.ngl"; echo 99 >"$raw/greenboost.ngl"
cat >"$raw/partial.err" <<'EOF'
load_tensors:        CUDA0 model buffer size =  7488.00 MiB
load_tensors:   CPU_Mapped model buffer size =  8830.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =    54.00 MiB
llama_context:      CUDA0 compute buffer size =   300.00 MiB
llama_context:  CUDA_Host compute buffer size =    20.00 MiB
llama_context:      CUDA0 compute buffer size =   310.50 MiB
EOF
printf 'greenboost: summary: pid 7: peak T1 8.0 GiB, peak T2 7.9 GiB\nsome tail line\n' >"$raw/greenboost.err"
printf '1.0 600 123,590\n1.2 8500 123,8400\n1.4 8300 123,8350\n' >"$raw/partial.vram"
python3 "$here/analyze.py" report "$raw" "$tmp/gpu-results" >/dev/null 2>"$tmp/gpu-report.err"
gjson=$tmp/gpu-results/llamacpp-dense-latest.json
check "captured GPU run: report written as llamacpp-dense-2026-11-30-abc123.md" test -s "$tmp/gpu-results/llamacpp-dense-2026-11-30-abc123.md"
check "captured GPU run: buffers, peaks, ratios, shim summary, timeout" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
p, g = d["configs"]["partial"], d["configs"]["greenboost"]
assert p["vram_buffers_mib"] == 7488.0 + 54.0 + 310.5, p["vram_buffers_mib"]
assert p["vram"] == {"samples": 3, "gpu_used_peak_mib": 8500, "process_peak_mib": 8400,
                     "gpu_used_peak_minus_idle_mib": 8499}, p["vram"]
assert g["status"] == "timed out" and g["shim_summary"].startswith("greenboost: summary:"), g
assert g["results"]["pp512"]["tok_s"] == 1200 and "tg128" not in g["results"]
r = d["ratios"]
assert r["greenboost_vs_partial_pp512"] == 0.8 and r["greenboost_vs_partial_tg128"] is None, r
assert r["partial_vs_vram_tg128"] == 0.04, r' "$gjson"

# A captured long-context run: the bounds from the layout, the rates and the shim's
# placement lines (the model buffer split 3:1, the KV cache wholly in T2).
lraw=$tmp/longctx-raw
mkdir -p "$lraw"
cat >"$lraw/meta.json" <<'EOF'
{"date": "2026-12-02", "greenboost_commit": "abc123", "budget_mib": 3100, "reps": 1, "n_prompt": 512,
 "n_gen": 128, "depth": 8000, "model": {"shape": "x", "layers": 2, "hidden": 256, "heads": 2, "kv_heads": 1}}
EOF
cat >"$lraw/layout.json" <<'EOF'
{"experts_used": null, "experts": null, "tensors": [
 {"name": "output.weight", "bytes": 1000000000, "read": 1000000000, "layer": -1, "expert": false},
 {"name": "blk.0.ffn_up.weight", "bytes": 1000000000, "read": 1000000000, "layer": 0, "expert": false},
 {"name": "blk.1.ffn_up.weight", "bytes": 2000000000, "read": 2000000000, "layer": 1, "expert": false}]}
EOF
echo '{"link_gbs": 50.0, "hbm_gbs": 4000.0, "host_ram_gbs": 40.0, "cpu_threads": 16}' >"$lraw/rates.json"
for cfg in vram nkvo greenboost greenboost_tiering; do echo 0 >"$lraw/$cfg.rc"; echo 10.0 >"$lraw/$cfg.wall"; done
{ line 512 0 99 5000; line 0 128 99 500; } >"$lraw/vram.jsonl"
{ line 512 0 99 400; line 0 128 99 20; } >"$lraw/nkvo.jsonl"
{ line 512 0 99 2000; line 0 128 99 30; } >"$lraw/greenboost.jsonl"
{ line 512 0 99 2400; line 0 128 99 40; } >"$lraw/greenboost_tiering.jsonl"
printf 'greenboost[8]: summary: pid 8: kernel launches seen 900 (0 not fully read; 3 timed of 5 sampled: 1 given up at the launch, 0 whose time could not be read, 1 whose time bounded nothing), 9 allocations named by them; graph launches 0 (0 not fully read); 0 launches captured into graphs; 0 host functions, 4 copies and memsets (direct or in graphs)\n' >"$lraw/greenboost_tiering.err"
printf 'greenboost[8]: summary: pid 8: live tiering: 2 movable allocations; promoted 1234.5 MiB in 40 moves (80 ms), demoted 0.0 MiB in 0 (0 of them to make room for hotter ones; 0 ms; 0 ms of it issuing); 1234.5 MiB in VRAM at exit\n' >>"$lraw/greenboost_tiering.err"
echo '99 -nkvo 1' >"$lraw/nkvo.ngl"
printf 'load_tensors: CUDA0 model buffer size = 3814.70 MiB\nllama_kv_cache: CUDA0 KV buffer size = 1000.00 MiB\n' >"$lraw/greenboost.err"
printf 'greenboost[7]: split 0x7f0000000000: 3814.7 MiB = 2861.0 MiB VRAM + 953.7 MiB on host NUMA node 0 for device 0\n' >>"$lraw/greenboost.err"
printf 'greenboost[7]: T2 0x7f1000000000: 1000.0 MiB (userspace backend, buffer 1) for device 0; register 1.0 ms\n' >>"$lraw/greenboost.err"
python3 "$here/analyze.py" report "$lraw" "$tmp/longctx-results" >/dev/null 2>"$tmp/longctx-report.err"
check "captured long-context run: placement from the shim's log, bounds, figures" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "llamacpp-longctx", d["kind"]
g = d["bounds"]["greenboost"]
share = d["configs"]["greenboost"]["t2_share"]
assert abs(share["model"] - 0.25) < 1e-3 and share["kv"] == 1.0, share
# 2 layers x K and V x 8064 cells x 128 x 2 bytes of KV per token, all over the link;
# of the 4 GB of weights, the last quarter (1 GB of blk.1) too.
kv = 2 * 2 * 8064 * 128 * 2
assert abs(g["read_per_token_gb"]["t2"] - (1e9 + kv) / 1e9) < 2e-3, g
assert abs(g["read_per_token_gb"]["vram"] - 3.0) < 2e-3, g
assert d["bounds"]["nkvo"]["read_per_token_gb"]["host_ram"] == round(kv / 1e9, 3), d["bounds"]["nkvo"]
f = d["figures"]
assert f["llamacpp_longctx_tg"] == 1.5 and f["llamacpp_longctx_pp"] == 5.0, f
assert f["llamacpp_longctx_tg_vs_bound"] == round(30 / g["tg_bound_tok_s"], 3), (f, g)
# Live tiering on: its figures against the same rival, and what it promoted, from its summary.
assert f["llamacpp_longctx_tg_tiering"] == 2.0 and f["llamacpp_longctx_pp_tiering"] == 6.0, f
assert f["llamacpp_longctx_tiering_promoted_mib"] == 1234.5, f
t = d["configs"]["greenboost_tiering"]["tiering"]
assert t == {"movable_allocs": 2, "promoted_mib": 1234.5, "promotions": 40, "launches_timed": 3}, t
assert d["ratios"]["greenboost_tiering_vs_greenboost_tg128"] == round(40 / 30, 3), d["ratios"]' "$tmp/longctx-results/llamacpp-longctx-latest.json"

if ((failed)); then
    echo "--- run.sh bench log (tail)"; tail -40 "$tmp/bench.log"
    echo "--- moe bench log (tail)"; tail -20 "$tmp/moe-bench.log"
fi
echo "$passed passed, $failed failed"
((failed == 0))
