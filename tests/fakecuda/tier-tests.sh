# Live tiering (gbtier, programs/tier_tests.c), sourced by run-tests.sh: movable T2 beside
# another process on a shared fake device. The program starts and stops its balloons
# itself (GBTEST_BALLOON_BIN); the tier thread looks every 10 ms.

# tier_run NAME [VAR=value...] ARGS: gbtier under the shim on a new share file.
tier_run() {
    tr_name=$1
    shift
    share=$work/$tr_name.share
    rm -f "$share"
    shim "$tr_name" $SHIMENV FAKECUDA_DEVICE_SHARE="$share" GBTEST_BALLOON_BIN="$BIN/gbballoon" \
        GREENBOOST_VRAM_HEADROOM=$TIER_HEADROOM GREENBOOST_TIER_INTERVAL_MS=10 "$@"
}

TIER_BLOCK=$(( VRAM / 16 ))
TIER_HEADROOM=$(( VRAM / 8 ))

t_tier_promote_demote() {
    # Half of 6 blocks are movable beside the balloon; all promoted once it leaves, the
    # newest demoted when another process leaves half the headroom free.
    tier_run tier-promote-demote "$BIN/gbtier" promote-demote $TIER_BLOCK 6 || return 1
    out_has "^promoted $(( TIER_BLOCK * 3 >> 20 )) MiB in 3 moves" "want three blocks promoted" || return 1
    # The record greenboost status read is gone with the process.
    record=$(sed -n 's/^published //p' "$out")
    if [ -z "$record" ] || [ -e "$record" ]; then
        why="the shim's record ${record:-(none)} is not removed at exit"
        return 1
    fi
}
t_tier_control_off_fails() {
    # The same with live tiering off: nothing is movable (fails the placement check).
    share=$work/tier-control-off.share
    rm -f "$share"
    run_fails tier-control-off-fails "0 blocks movable" $SHIMENV FAKECUDA_DEVICE_SHARE="$share" \
        GBTEST_BALLOON_BIN="$BIN/gbballoon" GREENBOOST_VRAM_HEADROOM=$TIER_HEADROOM GREENBOOST_TIERING=off "$BIN/gbtier" promote-demote $TIER_BLOCK 6
}
t_tier_no_demote() {
    tier_run tier-no-demote GREENBOOST_DEMOTE=off GBTEST_EXPECT=nodemote "$BIN/gbtier" promote-demote $TIER_BLOCK 6
}
t_tier_budget() {
    # Tiering on under a budget of 3 blocks: promotion waits for room in the budget.
    tier_run tier-budget GREENBOOST_TIERING=on GREENBOOST_VRAM_BUDGET=$(( TIER_BLOCK * 3 )) \
        "$BIN/gbtier" budget $TIER_BLOCK 5
}
t_tier_cap() {
    tier_run tier-cap GREENBOOST_T2_CAP=$(( TIER_BLOCK * 2 )) "$BIN/gbtier" cap $TIER_BLOCK
}
t_tier_order() {
    # Products read one of three movable blocks; with room for one, that one moves.
    tier_run tier-order "$BIN/gbtier" order $TIER_BLOCK
}
t_tier_second_device() {
    # Device 1 (VRAM/2) with a budget of two blocks: promotion goes to device 1.
    tier_run tier-second-device FAKECUDA_DEVICES=2 FAKECUDA_VRAM1=$(( VRAM / 2 )) GREENBOOST_TIERING=on \
        GREENBOOST_VRAM_BUDGET=0:$VRAM,1:$(( TIER_BLOCK * 2 )) "$BIN/gbtier" second-device $TIER_BLOCK
}
t_tier_free_moving() {
    tier_run tier-free-moving "$BIN/gbtier" free-moving $TIER_BLOCK 12
}

t_tier_refresh() {
    # The driver evicts a promoted block for another process: back once that one leaves.
    tier_run tier-refresh GREENBOOST_DEMOTE=off "$BIN/gbtier" refresh $TIER_BLOCK
}

t_tier_pair() {
    # Two processes under the shim, room for one's blocks: moves take 50 ms each.
    tier_run tier-pair FAKECUDA_PREFETCH_DELAY_US=50000 "$BIN/gbtier" pair $TIER_BLOCK
}

t_tier_swap() {
    # A working set allocated after the weights took the room, named by every launch:
    # swapped into VRAM with a weight block while kernels run, every byte kept.
    tier_run tier-swap GREENBOOST_VRAM_RESERVE=0 GREENBOOST_LOG=debug "$BIN/gbtier" swap $TIER_BLOCK || return 1
    out_has "^swap: working set where 0" "want the working set in VRAM" || return 1
    # The heat table at debug level says what moved and why.
    out_has "heat table" "want the heat table at debug level" || return 1
    out_has "in T2: heat .*: swap in" "want the swapped-in allocation in the heat table" || return 1
    out_has "in VRAM: heat .*, unread [0-9]* ticks: swap out" \
        "want the swapped-out allocation in the heat table, with the ticks it went unread"
}
t_tier_swap_off_fails() {
    # The same with live tiering off: the weights are plain VRAM, nothing can make room.
    share=$work/tier-swap-off.share
    rm -f "$share"
    run_fails tier-swap-off-fails "want movable memory in VRAM" $SHIMENV FAKECUDA_DEVICE_SHARE="$share" \
        GBTEST_BALLOON_BIN="$BIN/gbballoon" GREENBOOST_VRAM_HEADROOM=$TIER_HEADROOM GREENBOOST_VRAM_RESERVE=0 \
        GREENBOOST_TIERING=off "$BIN/gbtier" swap $TIER_BLOCK
}
t_tier_swap_kept() {
    # The same swap on a 3 GiB device that keeps the VRAM managed pages leave and gives
    # moves into VRAM fresh VRAM (the H200's worst case), 8 working blocks of 48 MiB (one
    # run each; more than one 256 MiB arrival group) and a 512 MiB headroom: the moves in
    # stop one run past the plan, the shim says so, and nothing is demoted after. Without
    # the give-back (the fallback where it fails).
    tier_run tier-swap-kept FAKECUDA_VRAM=3G FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_VRAM_HEADROOM=$(( 512 << 20 )) \
        GREENBOOST_VRAM_RESERVE=0 GREENBOOST_GIVE_BACK=off GREENBOOST_LOG=info "$BIN/gbtier" swap-kept $(( 48 << 20 )) 8 \
        || return 1
    out_has "moves into VRAM took .* the rest wait" "want the tier thread to stop the moves into VRAM past its plan"
}
t_tier_swap_kept_steps() {
    # The same, 2 more working blocks named every 60 rounds: each swap one group that takes
    # fresh VRAM; remembered after the first, so that later ones wait.
    tier_run tier-swap-kept-steps FAKECUDA_VRAM=3G FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_VRAM_HEADROOM=$(( 512 << 20 )) GREENBOOST_VRAM_RESERVE=0 GREENBOOST_GIVE_BACK=off GREENBOOST_LOG=info \
        "$BIN/gbtier" swap-kept $(( 48 << 20 )) 8 2 || return 1
    out_has "swaps into VRAM took .* from now on they move in only what free VRAM beyond the headroom holds" \
        "want the tier thread to remember that swaps took fresh VRAM"
}
t_tier_swap_kept_rise() {
    # tier-swap-kept-steps, then another process holding 8 blocks exits: free VRAM rises past the
    # headroom, and the working blocks still hot in T2 do not swap in past what free VRAM
    # holds beyond the headroom's slack (the driver is known to keep what moves out leave).
    tier_run tier-swap-kept-rise FAKECUDA_VRAM=3G FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_VRAM_HEADROOM=$(( 512 << 20 )) GREENBOOST_VRAM_RESERVE=0 GREENBOOST_GIVE_BACK=off GREENBOOST_LOG=info \
        "$BIN/gbtier" swap-kept $(( 48 << 20 )) 8 2 0 8
}
t_tier_swap_kept_back() {
    # tier-swap-kept, then launches name only the weights: those the swap moved out swap
    # back, each into the VRAM chunks it left (the device kept them for it), free VRAM
    # under the headroom and not falling.
    tier_run tier-swap-kept-back FAKECUDA_VRAM=3G FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_VRAM_HEADROOM=$(( 512 << 20 )) GREENBOOST_VRAM_RESERVE=0 GREENBOOST_GIVE_BACK=off GREENBOOST_LOG=info \
        "$BIN/gbtier" swap-kept $(( 48 << 20 )) 8 8 0 0 1
}
t_tier_give_back_swap() {
    # tier-swap-kept with GREENBOOST_GIVE_BACK=on: the tick gives back what its moves out
    # left the device, every working block swaps in, the device keeps nothing. 6 hot
    # blocks (288 MiB) stay in VRAM: what the driver could evict for another process
    # during the give-back (at least the headroom, else none is made). Ticks of 30 ms: at
    # 10 ms, a stall of the naming loop for a few ticks (a busy CI machine) made the hot
    # blocks look colder than the weights the verifier reads, and swaps moved them out.
    tier_run tier-give-back-swap FAKECUDA_VRAM=3G GREENBOOST_GIVE_BACK=on FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_TIER_INTERVAL_MS=30 GREENBOOST_TIERING=on GREENBOOST_VRAM_HEADROOM=$(( 256 << 20 )) \
        GREENBOOST_VRAM_RESERVE=0 GBTEST_EXPECT=given_back \
        "$BIN/gbtier" swap-kept $(( 48 << 20 )) 8 8 6
}
t_tier_give_back_off_fails() {
    # Without it, the moves in stop where they took fresh VRAM.
    share=$work/tier-give-back-off-fails.share
    rm -f "$share"
    run_fails tier-give-back-off-fails "MiB: 0 MiB given back" \
        $SHIMENV FAKECUDA_DEVICE_SHARE="$share" GBTEST_BALLOON_BIN="$BIN/gbballoon" GREENBOOST_TIER_INTERVAL_MS=10 \
        FAKECUDA_VRAM=3G FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_TIERING=on GREENBOOST_VRAM_HEADROOM=$(( 256 << 20 )) \
        GREENBOOST_VRAM_RESERVE=0 GREENBOOST_GIVE_BACK=off GBTEST_EXPECT=given_back "$BIN/gbtier" swap-kept \
        $(( 48 << 20 )) 8 8 6
}
t_tier_give_back_nothing_evictable() {
    # tier-swap-kept with GREENBOOST_GIVE_BACK=on and no hot blocks: the tick swaps every
    # weight out, so that nothing of the process's is left in VRAM for the driver to evict
    # for another process's allocation during a give-back's moment: none is made, and the
    # swaps stop where their moves in took fresh VRAM, as with it off.
    tier_run tier-give-back-nothing-evictable FAKECUDA_VRAM=3G GREENBOOST_GIVE_BACK=on FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_TIERING=on GREENBOOST_VRAM_HEADROOM=$(( 256 << 20 )) GREENBOOST_VRAM_RESERVE=0 \
        "$BIN/gbtier" swap-kept $(( 48 << 20 )) 8
}
t_tier_give_back_short() {
    # A 128 MiB shortfall (a 256 MiB headroom, half of it left free: not pressing):
    # demoted once, and given back: free VRAM rises to the headroom, the device keeps
    # nothing.
    tier_run tier-give-back-short FAKECUDA_VRAM=1G GREENBOOST_GIVE_BACK=on FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_TIERING=on \
        GREENBOOST_VRAM_HEADROOM=$(( 256 << 20 )) GBTEST_EXPECT=given_back "$BIN/gbtier" pressure-once $(( 32 << 20 )) 16 4
}
t_tier_give_back_slow() {
    # The same short of VRAM on a device whose allocations take 300 ms to get kept VRAM:
    # given back once, the shim says it held all free VRAM too long, and gives back no
    # more in this process.
    tier_run tier-give-back-slow FAKECUDA_VRAM=1G GREENBOOST_GIVE_BACK=on FAKECUDA_MANAGED_KEEPS_VRAM=1 FAKECUDA_KEPT_CLAIM_US=300000 \
        GREENBOOST_TIERING=on GREENBOOST_VRAM_HEADROOM=$(( 256 << 20 )) GREENBOOST_LOG=info GBTEST_EXPECT=given_back \
        "$BIN/gbtier" pressure-once $(( 32 << 20 )) 16 4 || return 1
    out_has "held all free VRAM for [0-9]* ms (more than 250 ms): no more for this process" \
        "want the shim to stop giving back after a give-back that held all free VRAM too long"
}
t_tier_give_back_pressing() {
    # The same under pressure (32 MiB of the 256 MiB headroom left free): demoted once,
    # nothing given back (the driver may have evicted the pages already).
    tier_run tier-give-back-pressing FAKECUDA_VRAM=1G GREENBOOST_GIVE_BACK=on FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_TIERING=on \
        GREENBOOST_VRAM_HEADROOM=$(( 256 << 20 )) "$BIN/gbtier" pressure-once $(( 32 << 20 )) 16
}
t_tier_pressure_once() {
    # 8 movable blocks in VRAM on a device that keeps the VRAM managed pages leave; another
    # process leaves an eighth of the headroom free (under a quarter: pressing): the
    # shortfall is demoted once (less than it plus one block over 300 ticks), not at
    # every tick.
    tier_run tier-pressure-once FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_TIERING=on \
        "$BIN/gbtier" pressure-once $TIER_BLOCK 8
}
t_tier_make_room() {
    # An allocation made while computing takes VRAM at once, a weight block making room.
    tier_run tier-make-room GREENBOOST_VRAM_RESERVE=0 "$BIN/gbtier" make-room $TIER_BLOCK || return 1
    out_has "^make-room: working block managed (where 0" "want the working block in VRAM"
}
t_tier_make_room_short() {
    # A block and a quarter allocated while computing: one weight block leaves a quarter
    # wanted and the next is more than twice that; it goes all the same (rules/room_victims.rs:
    # on an H100 a prefill activation went to T2 with 442 of 448 MiB found).
    tier_run tier-make-room-short GREENBOOST_VRAM_RESERVE=0 "$BIN/gbtier" make-room $TIER_BLOCK \
        $(( TIER_BLOCK + TIER_BLOCK / 4 ))
}
t_tier_make_room_lanes() {
    # Room for two blocks and a half: three weight blocks go to T2, each prefetch to the
    # host taking 100 ms inside the call (the driver migrates to the host in the calling
    # thread): they are issued from several threads at once (engine/tier_moves.rs).
    tier_run tier-make-room-lanes GREENBOOST_VRAM_RESERVE=0 FAKECUDA_PREFETCH_HOST_CALL_US=100000 \
        "$BIN/gbtier" make-room $TIER_BLOCK $(( 2 * TIER_BLOCK + TIER_BLOCK / 2 )) || return 1
    out_has "host prefetch calls at once [2-9]" "want the weight blocks' prefetches issued at once"
}
t_tier_make_room_kept() {
    # The same on a device that keeps the VRAM managed pages leave (48 MiB blocks, a
    # 64 MiB headroom: the two weight blocks left in VRAM are more, for the driver to evict
    # for another process during the give-back): the weight block's VRAM, given back, is
    # what the working block takes, and free VRAM stays at the headroom.
    tier_run tier-make-room-kept FAKECUDA_VRAM=1G GREENBOOST_GIVE_BACK=on FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_VRAM_RESERVE=0 \
        GREENBOOST_VRAM_HEADROOM=$(( 64 << 20 )) "$BIN/gbtier" make-room $(( 48 << 20 ))
}
t_tier_make_room_kept_answered() {
    # The same without the give-back: the block takes fresh VRAM, under the headroom by
    # at most itself, and what the device keeps of the demoted weight answers that drop:
    # over 30 ticks no other weight block goes to T2 (without engine/room_kept.rs a tick
    # demoted a second one for it).
    tier_run tier-make-room-kept-answered FAKECUDA_VRAM=1G GREENBOOST_GIVE_BACK=off FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_VRAM_RESERVE=0 GREENBOOST_VRAM_HEADROOM=$(( 64 << 20 )) GBTEST_EXPECT=kept \
        "$BIN/gbtier" make-room $(( 48 << 20 ))
}
t_tier_working_set() {
    # At the default settings (no give-back) on a device that keeps the VRAM managed pages
    # leave: 8 weight blocks beside another process, then 4 working blocks allocated while
    # computing each get VRAM, a weight making room, though free VRAM fell under a quarter
    # of the headroom after the first (the device keeps the weights' VRAM for this process).
    # Ticks of 20 ms: the working blocks are idle long enough (at most 50 ticks) within the
    # test's 3 s of reading the weights for the weights to displace them.
    tier_run tier-working-set FAKECUDA_VRAM=1G GREENBOOST_GIVE_BACK=off FAKECUDA_MANAGED_KEEPS_VRAM=1 \
        GREENBOOST_TIER_INTERVAL_MS=20 \
        GREENBOOST_VRAM_RESERVE=0 GREENBOOST_VRAM_HEADROOM=$(( 64 << 20 )) GREENBOOST_LOG=debug "$BIN/gbtier" working-set $(( 48 << 20 )) 8
}
t_tier_room_churn() {
    # A working set that comes and goes (allocated, used, freed, 6 rounds): the weight
    # demoted for it stays in T2 until the rounds end (no round trip a round), then returns.
    tier_run tier-room-churn GREENBOOST_VRAM_RESERVE=0 GREENBOOST_LOG=debug "$BIN/gbtier" room-churn $(( 16 << 20 )) 6
}
t_tier_room_churn_read() {
    # The same with the weights read all along: the demoted weight, hotter than the idle
    # working block, does not swap back in while room is being made either.
    tier_run tier-room-churn-read GREENBOOST_VRAM_RESERVE=0 GREENBOOST_LOG=debug "$BIN/gbtier" room-churn \
        $(( 16 << 20 )) 6 read
}
t_tier_cycle() {
    # Weights read once per pass, in order, a pass eight ticks long: none trades places
    # with another (each part's heat is over the interval between its reads).
    tier_run tier-cycle GREENBOOST_VRAM_RESERVE=0 GREENBOOST_LOG=debug "$BIN/gbtier" cycle $(( 16 << 20 )) 8 80
}
t_tier_scratch_room() {
    # GEMM staging's scratch, refused by the budget (weights hold the room), gets VRAM by
    # room made for the next product: a weight block goes to T2, the products are staged.
    # No tick meanwhile (an hour apart: a loaded machine has run this past a minute): a tick
    # would swap the hot weight in instead.
    tier_run tier-scratch-room GREENBOOST_VRAM_RESERVE=0 GREENBOOST_TIER_INTERVAL_MS=3600000 GREENBOOST_LOG=debug \
        "$BIN/gbtier" scratch-room $(( 8 << 20 )) || return 1
    log_has "GEMM a=vram" "no product read the weight from VRAM: not staged"
}
t_tier_scratch_room_parts() {
    # The same with weights of 64 MiB, cut into 2 MiB parts that room can be made of a
    # chunk at a time: once the scratch has grown, no product makes room again.
    tier_run tier-scratch-room-parts FAKECUDA_VRAM=1G GREENBOOST_VRAM_HEADROOM=$(( 64 << 20 )) \
        GREENBOOST_VRAM_RESERVE=0 GREENBOOST_TIER_INTERVAL_MS=3600000 GREENBOOST_LOG=debug \
        "$BIN/gbtier" scratch-room $(( 64 << 20 )) || return 1
    log_has "GEMM a=vram" "no product read the weight from VRAM: not staged"
}
t_tier_make_room_kept_off_fails() {
    # Without the give-back the working block takes fresh VRAM under the headroom (and
    # a tick may meanwhile demote another weight block for it).
    share=$work/tier-make-room-kept-off-fails.share
    rm -f "$share"
    run_fails tier-make-room-kept-off-fails "under the headroom\|2 weight blocks went to T2" $SHIMENV FAKECUDA_DEVICE_SHARE="$share" \
        GBTEST_BALLOON_BIN="$BIN/gbballoon" GREENBOOST_TIER_INTERVAL_MS=10 FAKECUDA_VRAM=1G \
        FAKECUDA_MANAGED_KEEPS_VRAM=1 GREENBOOST_VRAM_RESERVE=0 GREENBOOST_VRAM_HEADROOM=$(( 64 << 20 )) \
        GREENBOOST_GIVE_BACK=off "$BIN/gbtier" make-room $(( 48 << 20 ))
}
t_tier_make_room_off_fails() {
    share=$work/tier-make-room-off.share
    rm -f "$share"
    run_fails tier-make-room-off-fails "no room was made" $SHIMENV FAKECUDA_DEVICE_SHARE="$share" \
        GBTEST_BALLOON_BIN="$BIN/gbballoon" GREENBOOST_VRAM_HEADROOM=$TIER_HEADROOM GREENBOOST_VRAM_RESERVE=0 \
        GREENBOOST_TIERING=off "$BIN/gbtier" make-room $TIER_BLOCK
}
t_tier_ranges() {
    # One block of a 12-block buffer (cut into 2 MiB parts), named by every launch, moves to
    # VRAM alone; the rest stays in T2, every byte kept.
    tier_run tier-ranges GREENBOOST_TIERING=on GREENBOOST_VRAM_RESERVE=0 "$BIN/gbtier" ranges $TIER_BLOCK
}
t_tier_ranges_room() {
    # A block allocated while computing takes the place of one block's worth of a buffer's
    # coldest parts.
    # A 256 MiB device: others hold more than twice the headroom (contested), VRAM is movable.
    tier_run tier-ranges-room FAKECUDA_VRAM=256M GREENBOOST_VRAM_RESERVE=0 "$BIN/gbtier" ranges-room $TIER_BLOCK
}
t_tier_ranges_demote() {
    # Another process takes half a block of the headroom: a run of the buffer's parts goes
    # to T2, not the whole buffer.
    tier_run tier-ranges-demote GREENBOOST_TIERING=on "$BIN/gbtier" ranges-demote $TIER_BLOCK
}
t_tier_kernel_times() {
    # Two kernels name two pieces each of a buffer equally often; one reads a sixteenth of
    # its pieces. Timed against the fake link (10 GB/s both), the whole reader's pieces end
    # in VRAM.
    # The exit summary says what became of the launches sampled.
    tier_run tier-kernel-times GREENBOOST_TIERING=on GREENBOOST_VRAM_RESERVE=0 FAKECUDA_LINK_NS_PER_KIB=100 \
        GREENBOOST_LINK_GBPS=10 GREENBOOST_LOG=info "$BIN/gbtier" kernel-times $TIER_BLOCK || return 1
    out_has "; [1-9][0-9]* timed of [1-9][0-9]* sampled: [0-9]* given up at the launch" \
        "want the summary to count the launches sampled for their time and what became of them"
}
t_tier_vram_times() {
    # A short kernel names a large buffer in VRAM as often as another reads a small block
    # in T2 whole: timed at the fake device memory's peak rate (50 times its link's), the
    # buffer is colder per byte, and the block comes in. A slow fake link (0.26 GB/s)
    # keeps the fake's own time per launch, larger on a busy machine, small beside a VRAM
    # read; a device twice the size, so that the buffer (cut into parts) is not a pool.
    tier_run tier-vram-times FAKECUDA_VRAM=$(( VRAM * 2 )) GREENBOOST_TIERING=on GREENBOOST_VRAM_RESERVE=0 \
        FAKECUDA_LINK_NS_PER_KIB=4000 GREENBOOST_LINK_GBPS=1 GREENBOOST_LOG=debug \
        "$BIN/gbtier" vram-times $(( TIER_BLOCK * 8 )) $(( TIER_BLOCK / 2 ))
}
t_tier_vram_times_rare() {
    # The same with the buffer's reader launched once in a pass of 256 launches: the
    # block comes in from the first launches of each kernel timed, before a turn of
    # every 257th launch meets the buffer's reader.
    tier_run tier-vram-times-rare FAKECUDA_VRAM=$(( VRAM * 2 )) GREENBOOST_TIERING=on GREENBOOST_VRAM_RESERVE=0 \
        FAKECUDA_LINK_NS_PER_KIB=4000 GREENBOOST_LINK_GBPS=1 GREENBOOST_LOG=debug \
        "$BIN/gbtier" vram-times $(( TIER_BLOCK * 8 )) $(( TIER_BLOCK / 2 )) 256
}
t_tier_attributes() {
    # Movable VRAM and movable T2 answer pointer attribute queries as device memory.
    tier_run tier-attributes "$BIN/gbtier" attributes $TIER_BLOCK
}
t_tier_attributes_off() {
    # Live tiering off: pinned T2 (registered host memory) answers as device memory too.
    tier_run tier-attributes-off GREENBOOST_TIERING=off "$BIN/gbtier" attributes $TIER_BLOCK
}
t_tier_bound_pool() {
    # The default, the device alone, a budget of half the weights (12 blocks, cut into
    # 2 MiB parts), no reserve: the weight buffer is movable T2, promoted into the budget
    # while it loads; the KV cache after it, larger than the reserve, is movable VRAM in
    # room the weights make; the block kernels keep writing moves to VRAM.
    tier_run tier-bound-pool GREENBOOST_VRAM_RESERVE=0 GREENBOOST_VRAM_BUDGET=$(( TIER_BLOCK * 6 )) \
        "$BIN/gbtier" bound-pool $TIER_BLOCK
}
t_tier_bound_load() {
    # The same buffer loaded by copies with ticks between them, no kernel launched: the
    # first blocks promoted into the budget stay, none traded for a block written later.
    tier_run tier-bound-load GREENBOOST_VRAM_RESERVE=0 GREENBOOST_VRAM_BUDGET=$(( TIER_BLOCK * 6 )) \
        "$BIN/gbtier" bound-load $TIER_BLOCK
}
t_tier_bound_tensors() {
    # The default, a budget of four blocks: tensors loaded one at a time stay plain VRAM,
    # then pinned T2; what is allocated while computing is movable.
    tier_run tier-bound-tensors GREENBOOST_VRAM_RESERVE=0 GREENBOOST_VRAM_BUDGET=$(( TIER_BLOCK * 4 )) GREENBOOST_LOG=info \
        "$BIN/gbtier" bound-tensors $TIER_BLOCK || return 1
    out_has "the VRAM budget binds on device 0: live tiering moves" "GREENBOOST_LOG=info: no line says why memory became movable"
}
t_tier_demote_host_short() {
    # Beside another process, with a host reserve no host has: the blocks in VRAM stay
    # there when another process wants the VRAM (moving them to T2 would take host RAM
    # that never goes to swap), and the log says why.
    tier_run tier-demote-host-short GREENBOOST_HOST_RESERVE=1T GREENBOOST_LOG=info \
        "$BIN/gbtier" demote-host-short $TIER_BLOCK || return 1
    out_has "stays in VRAM: the host has no RAM for it above its reserve" "no line says why nothing was demoted"
}
t_tier_uncontested() {
    # Alone, or beside a process holding less than twice the headroom: plain VRAM.
    tier_run tier-uncontested "$BIN/gbtier" uncontested $TIER_BLOCK
}
t_tier_pool() {
    # A memory pool's allocation stays the driver's VRAM where a plain one is movable.
    tier_run tier-pool "$BIN/gbtier" pool $TIER_BLOCK
}
t_tier_ipc() {
    # Movable VRAM refused by IPC with the driver's error, and the shim says why.
    tier_run tier-ipc "$BIN/gbtier" ipc $TIER_BLOCK || return 1
    out_has "CUDA IPC cannot export .* movable by live tiering" "want the shim's explanation" || return 1
    out_has "GREENBOOST_TIERING=off" "want the way out"
}
t_tier_ipc_off() {
    # Live tiering off: the same allocation is the driver's own and exports.
    tier_run tier-ipc-off GREENBOOST_TIERING=off GBTEST_EXPECT=exported "$BIN/gbtier" ipc $TIER_BLOCK
}

tier_tests="tier_promote_demote tier_control_off_fails tier_no_demote tier_budget tier_cap tier_order tier_second_device tier_free_moving tier_refresh tier_pair tier_swap tier_swap_kept tier_swap_kept_steps tier_swap_kept_rise tier_swap_kept_back tier_give_back_swap tier_give_back_off_fails tier_give_back_nothing_evictable tier_give_back_short tier_give_back_slow tier_give_back_pressing tier_pressure_once tier_swap_off_fails tier_ipc tier_ipc_off tier_make_room tier_make_room_short tier_make_room_lanes tier_make_room_kept tier_make_room_kept_answered tier_working_set tier_room_churn tier_room_churn_read tier_cycle tier_scratch_room tier_scratch_room_parts tier_make_room_kept_off_fails tier_make_room_off_fails tier_ranges tier_ranges_room tier_ranges_demote tier_kernel_times tier_vram_times tier_vram_times_rare tier_attributes tier_attributes_off tier_uncontested tier_bound_pool tier_bound_load tier_bound_tensors tier_demote_host_short tier_pool"
