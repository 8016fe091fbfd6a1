#!/bin/bash
# Builds the fake CUDA libraries and the test programs into OUTDIR/{lib,bin}.
#   tests/fakecuda/build.sh OUTDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fakes=$here/fakes        # the fake libraries; fakes/gpu: the simulated device they share
programs=$here/programs  # the test programs
out=$1
CC=${CC:-gcc}
# fakes/ on the include path for fakecuda.h, what programs see of the fakes.
CFLAGS="-O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -fPIC -pthread -I$fakes"
mkdir -p "$out/lib" "$out/bin" "$out/.build/link12" "$out/.build/link13" "$out/.build/linkcuda"
lib=$out/lib
b=$out/.build

# The simulated device, shared by the fake driver and NVML: fakegpu.c (how it works,
# setup, contexts) and the fakegpu_*.c files beside it, and managed*.c for managed memory
# (its data on the host, its residency as VRAM that fakegpu_vram.c lends).
$CC $CFLAGS -shared -Wl,-soname,libfakegpu.so -o "$lib/libfakegpu.so" "$fakes"/gpu/*.c
# Fakes find libfakegpu.so beside themselves, wherever the directory is copied.
fake_ld="-L$lib -Wl,-rpath,\$ORIGIN -lfakegpu -Wl,-Bsymbolic -Wl,--no-undefined"
$CC $CFLAGS -shared -fvisibility=hidden -Wl,-soname,libcuda.so.1 -o "$lib/libcuda.so.1" "$fakes"/libcuda.c \
    "$fakes"/libcuda_memory.c "$fakes"/libcuda_streams.c "$fakes"/libcuda_modules.c \
    "$fakes"/libcuda_launch.c "$fakes"/libcuda_copies.c "$fakes"/libcuda_arrays.c \
    "$fakes"/libcuda_graphs.c $fake_ld
$CC $CFLAGS -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -o "$lib/libnvidia-ml.so.1" "$fakes/libnvml.c" $fake_ld
for major in 12 13; do
    sed "s/@MAJOR@/$major/" "$fakes/cudart.map.in" > "$b/cudart$major.map"
    $CC $CFLAGS -shared -fvisibility=hidden -DCUDART_MAJOR=$major -Wl,-soname,libcudart.so.$major \
        -Wl,--version-script="$b/cudart$major.map" -Wl,-Bsymbolic -Wl,--no-undefined \
        -o "$lib/libcudart.so.$major" "$fakes/libcudart.c" "$fakes/libcudart_memory.c" "$fakes/libcudart_errors.c" "$fakes/libcudart_launch.c" "$fakes/libcudart_pointers.c" "$fakes/libcudart_events.c" -ldl
    ln -sf "$lib/libcudart.so.$major" "$b/link$major/libcudart.so"
done
ln -sf "$lib/libcuda.so.1" "$b/linkcuda/libcuda.so"

# cuBLAS and cuBLASLt; libcublas links libcublasLt, as the real one does.
$CC $CFLAGS -shared -fvisibility=hidden -DFAKE_CUBLASLT -Wl,-soname,libcublasLt.so.13 -o "$lib/libcublasLt.so.13" \
    "$fakes/libcublas.c" $fake_ld
$CC $CFLAGS -shared -fvisibility=hidden -Wl,-soname,libcublas.so.13 -o "$lib/libcublas.so.13" "$fakes/libcublas.c" \
    $fake_ld -l:libcublasLt.so.13
ln -sf "$lib/libcublas.so.13" "$b/link13/libcublas.so"
ln -sf "$lib/libcublasLt.so.13" "$b/link13/libcublasLt.so"

# Programs: LD_LIBRARY_PATH=OUTDIR/lib at run time, as with a CUDA install.
rt_tests="$programs/rt_tests.c $programs/rt_process_tests.c $programs/rt_split_tests.c $programs/rt_headroom_tests.c"
prog="$CC $CFLAGS -Wl,--no-as-needed"
$prog -o "$out/bin/gbtest-rt13" "$programs/rt_main.c" $rt_tests -L"$b/link13" -lcudart -L"$lib" -lfakegpu -ldl
$prog -o "$out/bin/gbtest-rt12" "$programs/rt_main.c" $rt_tests -L"$b/link12" -lcudart -L"$lib" -lfakegpu -ldl
$CC $CFLAGS -shared -Wl,-soname,libgbframework.so -o "$lib/libgbframework.so" $rt_tests \
    -L"$b/link13" -lcudart -L"$lib" -lfakegpu -ldl -Wl,-rpath,\$ORIGIN
$prog -o "$out/bin/gbtest-fw" "$programs/fw_host.c" -ldl
$prog -o "$out/bin/gbdriver" "$programs/drv_tests.c" "$programs/drv_managed_tests.c" -L"$b/linkcuda" -lcuda -L"$lib" -lfakegpu -ldl
$prog -o "$out/bin/gbdiscover" "$programs/discover.c" -L"$lib" -lfakegpu -ldl
# Another process on the device (headroom tests): the driver API, never the shim.
$prog -o "$out/bin/gbballoon" "$programs/balloon.c" -L"$b/linkcuda" -lcuda -L"$lib" -lfakegpu
$prog -o "$out/bin/gbtier" "$programs/tier_tests.c" "$programs/tier_harness.c" "$programs/tier_swap.c" "$programs/tier_kept.c" "$programs/tier_ranges.c" "$programs/tier_heat.c" "$programs/tier_bound.c" "$programs/tier_host.c" -L"$b/link13" -lcudart -lcublas -L"$b/linkcuda" -lcuda -L"$lib" -lfakegpu \
    -ldl -lpthread
gemm_libs="-L$b/link13 -lcudart -lcublas -lcublasLt -L$lib -lfakegpu -ldl"
$prog -o "$out/bin/gbgemm" "$programs/rt_main.c" "$programs/gemm_tests.c" $gemm_libs
$prog -o "$out/bin/gbahead" "$programs/gemm_lookahead.c" $gemm_libs -L"$b/linkcuda" -lcuda
$CC $CFLAGS -shared -Wl,-soname,libgbgemm.so -o "$lib/libgbgemm.so" "$programs/gemm_tests.c" $gemm_libs -Wl,-rpath,\$ORIGIN
# Kernel launches, copies and memsets, capture and graphs (launch-tests.sh): driver and runtime.
$prog -o "$out/bin/gblaunch" "$programs/launch_tests.c" "$programs/launch_graphs.c" "$programs/launch_memory_ops.c" \
    "$programs/launch_timing.c" -L"$b/link13" -lcudart -L"$b/linkcuda" -lcuda -L"$lib" -lfakegpu -ldl -lpthread
