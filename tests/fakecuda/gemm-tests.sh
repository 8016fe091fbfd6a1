# GEMM operand staging (gbgemm, programs/gemm_tests.c), sourced by run-tests.sh.

# GEMM operand staging: a budget whose reserve is all of it, so the 4 MiB weights the
# programs load first go to T2 and their small activations to VRAM. The fake's log says
# what the device read each operand from ("GEMM a=vram": the staged copy).
# A width of 32 (not the default 1) so that the narrow product shows the width test.
GEMMENV="$SHIMENV GREENBOOST_VRAM_BUDGET=32M GREENBOOST_VRAM_RESERVE=32M GREENBOOST_STAGE_MIN_WIDTH=32 GREENBOOST_LOG=info"
gemm_reads() { # $1: what operand A was read from; $2: how many products must have read it so
    n=$(grep -c "GEMM a=$1 " "$log")
    if [ "$n" -ne "$2" ]; then
        why="$n products read the weight from $1, want $2: $(grep 'GEMM a=' "$log" | cut -d' ' -f2-4 | tr '\n' ';')"
        return 1
    fi
}
t_gemm_products() { # $1: program
    case $1 in
    fw) shim gemm-products-fw $GEMMENV GBTEST_FRAMEWORK=libgbgemm.so "$BIN/gbtest-fw" products || return 1 ;;
    # A cuBLASLt older than 12.9 refuses CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: strided batches.
    old-lt) shim gemm-products-old-lt $GEMMENV FAKECUDA_LT_NO_BATCH_MODE=1 "$BIN/gbgemm" products || return 1 ;;
    *) shim gemm-products $GEMMENV "$BIN/gbgemm" products || return 1 ;;
    esac
    # Four wide products staged (cublasSgemm_v2, cublasGemmEx, the strided batch,
    # cublasLtMatmul), the narrow one zero-copy.
    gemm_reads vram 4 || return 1
    gemm_reads hostreg 1 || return 1
    out_has "the shim's own copies: [1-9]" "staging made no copy of its own, so the program's counts proved nothing" || return 1
    out_has "GEMMs staged 4 ([^)]*), reading T2 in place 0 " "GREENBOOST_LOG=info: the exit summary does not count 4 staged products, none in place" || return 1
    # The cuBLASLt product's layouts are strided (its batch mode read, or refused by an
    # older cuBLASLt): nothing counts as a writer through pointer arrays.
    out_has "; 0 writers through pointers kept in device memory" "a strided product counted as a writer of everything"
}
t_gemm_products_rt13() { t_gemm_products rt13; }
t_gemm_products_fw() { t_gemm_products fw; }
t_gemm_products_old_lt() { t_gemm_products old-lt; }
t_gemm_movable() {
    # The weight in movable T2 (GREENBOOST_TIERING=on: managed memory preferred on the
    # host): the copy engine reads managed memory at a fraction of the link's rate, so the
    # shim copies it with its own SM copy kernel (the fake runs it as the copy it is); the
    # four wide products read the copy, as for pinned T2. Before those kernels
    # movable T2 was never staged (every product read it in place).
    shim gemm-movable $GEMMENV GREENBOOST_TIERING=on GBGEMM_T2_KIND=managed "$BIN/gbgemm" products || return 1
    log_has "cuLaunchKernel gb_copy16" "the shim launched no copy kernel" || return 1
    out_has "the shim's own copies: [1-9]" "staging made no copy of its own, so the program's counts proved nothing" || return 1
    gemm_reads vram 4 || return 1
    out_has "GEMMs staged 4 " "GREENBOOST_LOG=info: the exit summary does not count 4 staged products"
}
t_gemm_movable_no_kernels() {
    # Where the driver cannot load the copy kernel, movable T2 is read in place and the
    # products are right all the same (the program checks them).
    shim gemm-movable-no-kernels $GEMMENV GREENBOOST_TIERING=on GBGEMM_T2_KIND=managed FAKECUDA_NO_MODULES=1 \
        "$BIN/gbgemm" products || return 1
    gemm_reads vram 0 || return 1
    gemm_reads managed 5 || return 1
    out_has "copy kernel does not load" "GREENBOOST_LOG=info: the shim did not say why movable T2 stays in place"
}
t_gemm_staging_off() {
    # The same program with staging off: every product reads the weight zero-copy, so the
    # checks above can tell staging from none.
    shim gemm-staging-off $GEMMENV GREENBOOST_STAGING=off "$BIN/gbgemm" products || return 1
    gemm_reads vram 0 || return 1
    gemm_reads hostreg 5
}
t_gemm_default_width() {
    # The default width stages the narrow product too.
    shim gemm-default-width $GEMMENV GREENBOOST_STAGE_MIN_WIDTH= "$BIN/gbgemm" products || return 1
    gemm_reads vram 5
}
t_gemm_stage_max() {
    # Operands above GREENBOOST_STAGE_MAX stay zero-copy; the results are the same.
    shim gemm-stage-max $GEMMENV GREENBOOST_STAGE_MAX=1M "$BIN/gbgemm" products || return 1
    gemm_reads vram 0 || return 1
    # The summary counts them, with the 4 MiB operands they read over the link.
    out_has "GEMMs staged 0 ([^)]*), reading T2 in place 4 (16.0 MiB)" "the summary does not count the products read in place"
}
t_gemm_bf16_offset() {
    shim gemm-bf16-offset $GEMMENV "$BIN/gbgemm" bf16-offset || return 1
    gemm_reads vram 1
}
t_gemm_two_streams() {
    shim gemm-two-streams $GEMMENV "$BIN/gbgemm" two-streams || return 1
    gemm_reads vram 3
}
t_gemm_sliced() {
    # Four products of one 8 MiB weight (the first verifies the shape; the three after
    # it, beta = 1 and a rewrite of the weight among them, are computed in two slices
    # each): every result right (the program checks), three counted in slices.
    shim gemm-sliced $GEMMENV GREENBOOST_STAGE_SLICES=4 "$BIN/gbgemm" sliced || return 1
    out_has "GEMMs staged 4 ([^)]*, 3 in slices, 0 shapes unsliced" "GREENBOOST_LOG=info: the summary does not count 3 sliced products"
}
t_gemm_sliced_narrow() {
    # The same program where cuBLAS would compute a slice's shape with another kernel
    # (the fake rounds products chosen for fewer than 8192 rows otherwise): each slice
    # runs the whole product's cuBLASLt algorithm, so the slices are the whole product
    # and the shape is sliced.
    shim gemm-sliced-narrow $GEMMENV GREENBOOST_STAGE_SLICES=4 FAKECUDA_GEMM_NARROW_BELOW=8192 "$BIN/gbgemm" sliced || return 1
    out_has "GEMMs staged 4 ([^)]*, 3 in slices, 0 shapes unsliced" "GREENBOOST_LOG=info: the slices did not run the whole product's algorithm"
}
t_gemm_sliced_differs() {
    # ... and where cuBLASLt's heuristic offers another algorithm than cuBLAS's own
    # (one that rounds as the narrow kernel): the verification sees it and every product
    # is computed whole, every result still right.
    shim gemm-sliced-differs $GEMMENV GREENBOOST_STAGE_SLICES=4 FAKECUDA_GEMM_NARROW_BELOW=8192 FAKECUDA_LT_HEURISTIC_OTHER=1 "$BIN/gbgemm" sliced || return 1
    out_has "GEMMs staged 4 ([^)]*, 0 in slices, 1 shapes unsliced" "GREENBOOST_LOG=info: the summary does not say the shape stayed whole"
}
t_gemm_streamed() {
    # The same program with a scratch of 4 MiB (GREENBOOST_STAGE_MAX) for the 8 MiB weight:
    # streamed through its two 2 MiB halves in five slices, each half refilled only after
    # the slice that read it; the fake rounds kernels chosen for fewer than 8192 rows
    # otherwise, so the slices must run the whole product's algorithm. Every result right
    # (the weight's rewrite on the held stream among them), three counted in slices. The
    # default GREENBOOST_STAGE_SLICES (1): streaming is on by default.
    shim gemm-streamed $GEMMENV GREENBOOST_STAGE_MAX=4M FAKECUDA_GEMM_NARROW_BELOW=8192 \
        "$BIN/gbgemm" sliced || return 1
    out_has "GEMMs staged 4 ([^)]*, 3 in slices, 0 shapes unsliced" "GREENBOOST_LOG=info: the weight was not streamed through the scratch"
}
t_gemm_sliced_off() {
    # The default (GREENBOOST_STAGE_SLICES=1): one copy, then the product.
    shim gemm-sliced-off $GEMMENV "$BIN/gbgemm" sliced || return 1
    out_has "GEMMs staged 4 ([^)]*, 0 in slices, 0 shapes" "GREENBOOST_LOG=info: a product was sliced by default"
}
t_gemm_capture() {
    shim gemm-capture $GEMMENV "$BIN/gbgemm" capture || return 1
    gemm_reads vram 0 || return 1
    gemm_reads hostreg 1
}

# Look-ahead staging (gbahead, programs/gemm_lookahead.c): W2's copy made while W1's
# product runs is read only when nothing wrote W2 in between; each writer in turn.
t_gemm_lookahead() { # $1: writer
    extra=""
    [ "$1" = unread ] && extra="FAKECUDA_NO_PARAM_INFO=1"
    shim gemm-lookahead-$1 $GEMMENV GREENBOOST_STAGE_LOOKAHEAD=on $extra "$BIN/gbahead" rounds $1 || return 1
    line=$(grep '^lookahead:' "$out")
    last=$(echo "$line" | sed -n 's/.*(\([0-9]*\) in the last round), .*copies dropped.*/\1/p')
    read_ahead=$(echo "$line" | sed -n 's/^lookahead: writer [a-z]*: \([0-9]*\) products.*/\1/p')
    if [ "$1" = none ]; then
        [ "$last" = 1 ] && [ "$read_ahead" -ge 3 ] || { why="want the last round's W2 and earlier ones read from copies made ahead: $line"; return 1; }
    else
        # The unread writer is a launch the shim could not read (that alone drops the copy).
        [ "$1" != unread ] || out_has "; [1-9][0-9]* launches not fully read" "want the writer unreadable" || return 1
        # These name W2 only through a pointer kept in device memory: writers of everything.
        case $1 in batched|ltbatched|symbol|library|graphsymbol)
            out_has "; [1-9][0-9]* indirect writers" "want the writer counted as an indirect writer" || return 1;;
        esac
        [ "$last" = 0 ] && [ "$read_ahead" -ge 2 ] || { why="want copies made ahead read before the writer, not after: $line"; return 1; }
    fi
}
t_gemm_lookahead_none() { t_gemm_lookahead none; }
t_gemm_lookahead_kernel() { t_gemm_lookahead kernel; }
t_gemm_lookahead_memset() { t_gemm_lookahead memset; }
t_gemm_lookahead_memcpy() { t_gemm_lookahead memcpy; }
t_gemm_lookahead_graph() { t_gemm_lookahead graph; }
t_gemm_lookahead_unread() { t_gemm_lookahead unread; }
t_gemm_lookahead_batched() { t_gemm_lookahead batched; }
t_gemm_lookahead_ltbatched() { t_gemm_lookahead ltbatched; }
t_gemm_lookahead_symbol() { t_gemm_lookahead symbol; }
t_gemm_lookahead_library() { t_gemm_lookahead library; }
t_gemm_lookahead_graphsymbol() { t_gemm_lookahead graphsymbol; }
t_gemm_lookahead_off() {
    # The default: nothing is copied ahead, every product right.
    shim gemm-lookahead-off $GEMMENV "$BIN/gbahead" rounds memset || return 1
    out_has "^lookahead: writer memset: 0 products" "want no copy made ahead by default"
}
