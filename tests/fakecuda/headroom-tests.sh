# Sourced by run-tests.sh (the headroom tests of gbtest-rt13 and gbtest-fw, gbballoon).
# The VRAM headroom (GREENBOOST_VRAM_HEADROOM): VRAM the shim keeps free on the device,
# whoever uses it. Other processes are real: FAKECUDA_DEVICE_SHARE=file (one per test)
# makes the fake processes that name it use one device (its VRAM counted together,
# allocations past it fail), and gbballoon is such a process without the shim, holding
# memory (and growing on SIGUSR1). Sizes scale with VRAM: blocks of VRAM/16.
HR_BLOCK=$(( VRAM / 16 ))
HR_DEFAULT=$(( VRAM / 8 < 1073741824 ? VRAM / 8 : 1073741824 ))

# balloon_start NAME HOLD [GROW]: a balloon on a new $work/NAME.share ($share), started
# and ready ($balloon_pid, output in $balloon_out).
balloon_start() {
    share=$work/$1.share
    balloon_out=$work/$1.balloon.out
    rm -f "$share"
    : >"$balloon_out" # before the balloon starts: the wait below reads it at once
    env LD_LIBRARY_PATH="$LIB" FAKECUDA_LOG="$work/$1.balloon.log" FAKECUDA_DEVICE_SHARE="$share" \
        "$BIN/gbballoon" "$2" "${3:-0}" "$test_timeout" >"$balloon_out" 2>&1 </dev/null &
    balloon_pid=$!
    i=0
    while ! grep -q '^ready' "$balloon_out"; do
        if ! kill -0 "$balloon_pid" 2>/dev/null || [ $i -ge 600 ]; then
            why="the balloon did not start: $(tail -n 2 "$balloon_out" | tr '\n' ' ')"
            kill "$balloon_pid" 2>/dev/null
            wait "$balloon_pid" 2>/dev/null
            return 1
        fi
        i=$((i + 1))
        sleep 0.1 2>/dev/null || sleep 1
    done
}

# balloon_stop: stops the balloon; fails (keeping an earlier $why) unless it freed
# everything and the device was then empty: every process gave its VRAM back.
balloon_stop() {
    kill "$balloon_pid" 2>/dev/null
    wait "$balloon_pid" 2>/dev/null
    if ! grep -q '^ok balloon device_used=0$' "$balloon_out"; then
        [ -n "$why" ] || why="the balloon, stopped: $(grep -m1 -e '^FAIL' -e '^ok' "$balloon_out" || tail -n 1 "$balloon_out")"
        return 1
    fi
}

# headroom_run NAME HOLD GROW [VAR=value...] PROGRAM ARGS: the program under the shim
# beside a balloon of HOLD bytes that grows by GROW when the program signals it.
headroom_run() {
    hr_name=$1 hr_hold=$2 hr_grow=$3
    shift 3
    balloon_start "$hr_name" "$hr_hold" "$hr_grow" || return 1
    shim "$hr_name" $SHIMENV FAKECUDA_DEVICE_SHARE="$share" GBTEST_BALLOON_PID="$balloon_pid" \
        GBTEST_BALLOON_GROW="$hr_grow" "$@"
    hr_rc=$?
    balloon_stop || hr_rc=1
    return $hr_rc
}

t2_count_is() { # $1: "N of M": how many of the program's allocations went to T2
    out_has "^$1 in T2" "want $1 allocations in T2: $(grep ' in T2, ' "$out")"
}

t_headroom_control_oom() {
    # Without the shim, the fake's shared device refuses what the balloon leaves too
    # little room for: cuMemAlloc fails for real, and free memory is the device's.
    balloon_start headroom-control-oom $(( VRAM / 2 )) || return 1
    run_fails headroom-control-oom "cudaMalloc #8 of" FAKECUDA_DEVICE_SHARE="$share" \
        "$BIN/gbtest-rt13" headroom 0 10 $HR_BLOCK
    hr_rc=$?
    balloon_stop || hr_rc=1
    return $hr_rc
}
t_headroom_foreign() {
    # The balloon leaves VRAM/2; a headroom of VRAM/4 leaves room for 4 blocks, 6 to T2.
    headroom_run headroom-foreign $(( VRAM / 2 )) 0 GREENBOOST_VRAM_HEADROOM=$(( VRAM / 4 )) \
        "$BIN/gbtest-rt13" headroom $(( VRAM / 4 )) 10 $HR_BLOCK || return 1
    t2_count_is "6 of 10"
}
t_headroom_grows() {
    # The balloon holds VRAM/4, and after 4 blocks grows by 3/8 VRAM: the device then
    # has the headroom (VRAM/8) free, and the 4 later blocks go to T2.
    headroom_run headroom-grows $(( VRAM / 4 )) $(( VRAM * 3 / 8 )) GREENBOOST_VRAM_HEADROOM=$(( VRAM / 8 )) \
        "$BIN/gbtest-rt13" headroom $(( VRAM / 8 )) 8 $HR_BLOCK 4 || return 1
    t2_count_is "4 of 8"
}
t_headroom_two_shims() {
    # Two programs under the shim at once, each allocating 10/16 of the device: at most
    # VRAM - headroom + one block of it in VRAM (see test_headroom), so 5 blocks or more
    # in T2 between them. An empty balloon checks at the end that the device is empty.
    balloon_start headroom-two-shims 0 || return 1
    barrier=$work/headroom-two-shims.barrier
    rm -f "$barrier"
    hr_env="$SHIMENV FAKECUDA_DEVICE_SHARE=$share GBTEST_BARRIER=$barrier GREENBOOST_VRAM_HEADROOM=$(( VRAM / 8 ))"
    (shim headroom-two-shims-a $hr_env "$BIN/gbtest-rt13" headroom $(( VRAM / 8 )) 10 $HR_BLOCK) &
    first=$!
    shim headroom-two-shims-b $hr_env "$BIN/gbtest-rt13" headroom $(( VRAM / 8 )) 10 $HR_BLOCK
    hr_rc=$?
    if ! wait $first; then
        why="first program: $(grep -m1 '^FAIL:' "$work/headroom-two-shims-a.out" | cut -c7-) ${why:+/ second: $why}"
        hr_rc=1
    fi
    balloon_stop || hr_rc=1
    [ $hr_rc -eq 0 ] || return 1
    t2a=$(sed -n 's/^\([0-9]*\) of 10 in T2.*/\1/p' "$work/headroom-two-shims-a.out")
    t2b=$(sed -n 's/^\([0-9]*\) of 10 in T2.*/\1/p' "$work/headroom-two-shims-b.out")
    most=$(( (VRAM - VRAM / 8 + HR_BLOCK) / HR_BLOCK ))
    if [ $(( ${t2a:-0} + ${t2b:-0} )) -lt $(( 20 - most )) ]; then
        why="${t2a:-?} + ${t2b:-?} blocks in T2: at most $most of 20 fit beside the headroom"
        return 1
    fi
}
t_headroom_report() {
    # The balloon leaves the headroom and a half block free: reported free is that half
    # block, then 0 once small allocations eat into the headroom.
    others=$(( VRAM - VRAM / 8 - HR_BLOCK / 2 ))
    headroom_run headroom-report $others 0 GREENBOOST_VRAM_HEADROOM=$(( VRAM / 8 )) \
        "$BIN/gbtest-rt13" headroom-report $(( VRAM / 8 )) $others
}
t_headroom_default() {
    # No GREENBOOST_VRAM_HEADROOM: the default, 1G at most VRAM/8 (16M of 128M); the
    # balloon leaves VRAM/2: 6 blocks fit, 2 go to T2.
    hr_saved=$GREENBOOST_VRAM_HEADROOM
    unset GREENBOOST_VRAM_HEADROOM
    headroom_run headroom-default $(( VRAM / 2 )) 0 "$BIN/gbtest-rt13" headroom $HR_DEFAULT 8 $HR_BLOCK
    hr_rc=$?
    export GREENBOOST_VRAM_HEADROOM="$hr_saved"
    [ $hr_rc -eq 0 ] || return 1
    t2_count_is "2 of 8"
}
