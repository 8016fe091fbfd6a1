#!/usr/bin/env bash
# The long-prompt case run again and again in one device call, shims side by side:
# bench/longctx.py (dynamic cache) beside a balloon leaving LEAVE GiB (default 18), once per
# word of RUNS, each NAME:SHIM:LOG[:VAR=VALUE,...] (SHIM a file in build/bench-carry, LOG
# the GreenBoost log level); a free-GPU run first with FREE=1. Each run's stdout and stderr
# go under $OUT as NAME.out and NAME.err, a line a run in $OUT/steps.log, and everything in
# $OUT/all.tar.gz at the end (the device tool brings back a few files only).
#
#   OUT=... RUNS="new:libgreenboost_cuda.so:info old:baseline-X.so:info" bash bench/longctx_repeat.sh
set -u
out=${OUT:-/tmp/longctx-repeat}
mkdir -p "$out"
carry=$PWD/build/bench-carry
python_path=$carry/python
log() { echo "[$(date -u +%T)] $*" | tee -a "$out/steps.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv >>"$out/steps.log" 2>&1
longctx=(python3 bench/longctx.py --tokens "${TOKENS:-16384}" --modes dynamic --new-tokens "${NEW:-96}")

# One line of figures from a run's stdout.
figures() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        record = json.loads(line)
    except ValueError:
        continue
    if "error" in record:
        print("error", record["error"][:200])
    if "prefill_s" not in record:
        continue
    phases = record.get("phases") or {}
    end, first = phases.get("end", {}), phases.get("first_token", {})
    gib = lambda key: round((end.get(key) or 0) / 2**30, 2)
    print(f'prefill {record["prefill_s"]} s, decode {record["decode_tok_s"]} tok/s '
          f'(last half {record.get("decode_tail_tok_s")}), spills {end.get("headroom_spills")}, '
          f'room made {gib("room_made_bytes")} GiB, waited {round((first.get("room_made_ns") or 0) / 1e9, 2)} s, '
          f'weights in T2 {gib("weights_t2")} GiB')
PY
}

if [ "${FREE:-0}" = 1 ]; then
  timeout 150 "${longctx[@]}" >"$out/free.out" 2>"$out/free.err"
  log "free: exit $?, $(figures "$out/free.out")"
fi
PYTHONPATH=$python_path python3 -m gbgpu.foreign balloon "${LEAVE:-18}" >"$out/balloon.out" 2>&1 &
balloon=$!
for _ in $(seq 120); do grep -q ready "$out/balloon.out" && break; sleep 0.5; done
log "balloon: $(cat "$out/balloon.out")"
for run in ${RUNS:-}; do
  IFS=: read -r name shim level settings <<<"$run"
  IFS=, read -r -a settings <<<"${settings:-}"
  timeout "${RUN_S:-120}" env LD_PRELOAD="$carry/$shim" GREENBOOST_BACKEND=userspace GREENBOOST_T2_CAP=48G \
    GREENBOOST_LOG="$level" PYTHONPATH="$python_path" "${settings[@]}" "${longctx[@]}" >"$out/$name.out" 2>"$out/$name.err"
  log "$name: exit $?, $(figures "$out/$name.out")"
done
kill "$balloon" 2>/dev/null
wait "$balloon" 2>/dev/null
log done
(cd "$out" && tar czf all.tar.gz --exclude=all.tar.gz -- *)
