"""The GPU suite's checks of parts of one allocation (tests/gpu/run.sh, section "ranges";
issue 36 items 1 and 2): with GREENBOOST_TIERING=on, an allocation of at least 64 MiB is
cut into 2 MiB parts that live tiering moves on their own, weighed by the starts kernels
name in it and by sampled kernel times. Beside a balloon (all but LEAVE_GIB of the free
VRAM, without the shim), each role sizes its buffer from the VRAM it finds free: four
pieces, room for two.

Run under the shim (run.sh: LD_PRELOAD=libgreenboost_cuda.so GREENBOOST_LOG=info):

  python3 tests/gpu/tiering_ranges.py

  ranges.hot_part          role hot_part: a buffer far larger than the room, all in T2;
                           kernels keep reading its last quarter: that quarter must end in
                           VRAM (its T2 bytes 0) while most of the rest stays in T2
  ranges.hot_part_intact   the buffer's checksums before and after
  ranges.kernel_times      role kernel_times: the first and third pieces read by
                           index_select of a sixteenth of their rows, the second and fourth
                           by a sum of all of them, as often; the summed pieces must end in
                           VRAM and the first in T2 (launches timed: a figure)
  ranges.kernel_times_intact  the buffer's checksums before and after
  ranges.hot_part_give_back, ranges.hot_part_give_back_intact   hot_part again with
                           GREENBOOST_GIVE_BACK=on, while another process (without the
                           shim) allocates and frees 64 MiB through libcuda over and over:
  ranges.give_back_beside_allocator   none of its allocations failed, and give-backs
                           were made (each holds all free VRAM for a moment: the driver
                           must serve the other process by evicting this one's managed
                           memory, shim/src/rules/tiering.rs AfterMovesOut::evictable)

Output: PASS name: why / FAIL name: why / KV key=value; exit status 1 when anything failed.
The harness (balloon, roles in processes of their own, timeouts) is tiering_swap.py's.
"""

import sys
import time

import tiering_swap as harness
from gbgpu.foreign import AllocatorBeside
from gbgpu.verdicts import kv

LEAVE_GIB = 8
MIB = 1 << 20
GIB = 1 << 30
HEADROOM = GIB              # the shim's default headroom; promotions keep a quarter more free
RESERVE = 512 * MIB         # the default reserve (an eighth of the budget, at most 512 MiB)
MARGIN = 512 * MIB          # the role's own small allocations (cuBLAS, index_select's outputs)
ROW_BYTES = 64 * 1024       # kernel_times' rows
WAIT_S = 90                 # a role's rounds
ALLOCATOR_MIB = 64          # what the other process allocates and frees, over and over


def pieces_for(free):
    """The size of one of four pieces, with room for two beside the headroom, the reserve
    and a margin: whole 64 MiB."""
    room = max(0, free - HEADROOM - HEADROOM // 4 - RESERVE - MARGIN)
    return max(256 * MIB, room // 2 // (64 * MIB) * (64 * MIB))


def buffer_in_t2(name):
    """The role's start: the shim, a buffer of four pieces placed in T2 whole (far beyond
    the room), the piece's size and the buffer's checksums, then a product (the program
    computes from there on); None (with `name`'s verdict failed) when the buffer did not
    land wholly in T2."""
    import torch
    from tiering_swap_roles import block_sums, shim_here, start_torch, verdict

    shim = shim_here()
    free, _ = start_torch()
    kv(f"ranges.{name}.free_at_start_mib", free // MIB)
    piece = pieces_for(free)
    buf = torch.empty(4 * piece // 2, dtype=torch.bfloat16, device="cuda")
    placed = shim.t2_bytes(buf)  # before live tiering's next tick can move any of it
    g = torch.Generator(device="cuda").manual_seed(7)
    buf.normal_(0.0, 1.0, generator=g)
    torch.cuda.synchronize()
    kv(f"ranges.{name}.buffer", f"{4 * piece // MIB} MiB, {placed // MIB} MiB in T2")
    if placed != 4 * piece:
        verdict(f"ranges.{name}", False, f"the {4 * piece // MIB} MiB buffer has {placed // MIB} MiB in T2 when made: "
                "the check wants all of it there (more than the room left beside the balloon)")
        return None
    sums = block_sums(buf)
    computing()
    # As the shim reports it to the program (its room); the device's own free VRAM is
    # sampled outside the shim by run.sh (ranges.free_floor).
    kv(f"ranges.{name}.room_after_start_mib", torch.cuda.mem_get_info()[0] // MIB)
    return shim, buf, piece, sums


def intact(name, buf, sums):
    """`name`'s _intact verdict: the buffer's checksums as they were before the moves."""
    from tiering_swap_roles import block_sums, verdict

    changed = int((block_sums(buf) != sums).sum())
    verdict(f"ranges.{name}_intact", changed == 0, f"{changed} of {len(sums)} checksum blocks changed")


def computing():
    """A cuBLAS product: the program computes from here on."""
    import torch

    x = torch.ones(64, 64, device="cuda")
    torch.mm(x, x)
    torch.cuda.synchronize()


def role_hot_part(label="hot_part"):
    import torch
    from tiering_swap_roles import counters, figures, grown, verdict

    started = buffer_in_t2(label)
    if started is None:
        return
    shim, buf, piece, sums = started
    hot, cold = buf[3 * piece // 2:], buf[:3 * piece // 2]
    start, began, rounds = counters(shim), time.monotonic(), 0
    lowest = torch.cuda.mem_get_info()[0]
    while time.monotonic() - began < WAIT_S and shim.t2_bytes(hot):
        hot.sum()
        torch.cuda.synchronize()
        rounds += 1
        lowest = min(lowest, torch.cuda.mem_get_info()[0])
    kv(f"ranges.{label}.lowest_room_mib", lowest // MIB)
    seconds = time.monotonic() - began
    hot_t2, cold_t2 = shim.t2_bytes(hot), shim.t2_bytes(cold)
    grew = grown(start, counters(shim))
    figures(f"ranges.{label}", grew)
    what = (f"after {rounds} sums in {seconds:.1f} s: the read quarter has {hot_t2 // MIB} MiB in T2, the rest "
            f"{cold_t2 // MIB} of {3 * piece // MIB} MiB; promotions +{grew['promotions']} "
            f"({grew['promoted_bytes'] // MIB} MiB)")
    verdict(f"ranges.{label}", hot_t2 == 0 and cold_t2 >= piece, what + " (want 0, and at least one piece of the "
            "rest still in T2: the buffer does not move whole)")
    intact(label, buf, sums)


def role_kernel_times():
    import torch
    from tiering_swap_roles import counters, figures, grown, verdict

    started = buffer_in_t2("kernel_times")
    if started is None:
        return
    shim, buf, piece, sums = started
    rows, cols = piece // ROW_BYTES, ROW_BYTES // 2
    views = [buf[i * piece // 2:(i + 1) * piece // 2].view(rows, cols) for i in range(4)]
    some = torch.randperm(rows, device="cuda")[:rows // 16]
    start, began, rounds = counters(shim), time.monotonic(), 0
    stats_before = shim.stats()

    def settled():
        return (shim.t2_bytes(views[1]) == 0 and shim.t2_bytes(views[3]) == 0
                and shim.t2_bytes(views[0]) == piece)

    def timed_now():
        return int(shim.stats().launches_timed - stats_before.launches_timed)

    # Until the summed pieces are in VRAM and a launch was timed (if the sums alone are
    # named more often than the index_selects, they settle before any time is taken).
    while time.monotonic() - began < WAIT_S and not (settled() and timed_now() > 0):
        for i, view in enumerate(views):
            if i % 2 == 0:
                torch.index_select(view, 0, some)
            else:
                view.sum()
        torch.cuda.synchronize()
        rounds += 1
    seconds = time.monotonic() - began
    timed = timed_now()
    where = [shim.t2_bytes(v) // MIB for v in views]
    grew = grown(start, counters(shim))
    figures("ranges.kernel_times", grew)
    kv("ranges.kernel_times.launches_timed", timed)
    verdict("ranges.kernel_times", settled(),
            f"after {rounds} rounds in {seconds:.1f} s, MiB in T2 of the four {piece // MIB} MiB pieces "
            f"(partial, whole, partial, whole readers): {where} (want [{piece // MIB}, 0, *, 0]); launches timed "
            f"{timed}; swaps +{grew['swaps']}, promotions +{grew['promotions']}")
    intact("kernel_times", buf, sums)


TIERING_ON = {"GREENBOOST_TIERING": "on"}


def check_hot_part(foreign):
    harness.relay(harness.run_role("hot_part", env=TIERING_ON, timeout=150),
                  ("ranges.hot_part", "ranges.hot_part_intact"))


def check_kernel_times(foreign):
    harness.relay(harness.run_role("kernel_times", env=TIERING_ON, timeout=150),
                  ("ranges.kernel_times", "ranges.kernel_times_intact"))


def check_give_back_beside_allocator(foreign):
    """hot_part with GREENBOOST_GIVE_BACK=on while another process (without the shim)
    allocates and frees 64 MiB through libcuda over and over: none of its allocations may
    fail for the give-backs' moments, and give-backs must have happened."""
    names = ("ranges.hot_part_give_back", "ranges.hot_part_give_back_intact", "ranges.give_back_beside_allocator")
    with AllocatorBeside(ALLOCATOR_MIB) as allocator:
        if not allocator.started:
            harness.fail_all(names, "the allocator (gbgpu.foreign, without the shim) did not start")
            return
        run = harness.run_role("hot_part", "hot_part_give_back", env=dict(TIERING_ON, GREENBOOST_GIVE_BACK="on"),
                               timeout=150)
    tries, failed, slowest_ms = allocator.tries, allocator.failed, allocator.slowest_ms
    harness.relay(run, names[:2])
    figures = dict(line[3:].split("=", 1) for line in run.out.splitlines() if line.startswith("KV ") and "=" in line)
    give_backs = int(figures.get("ranges.hot_part_give_back.give_backs", 0))
    kv("ranges.allocator.allocations", tries)
    kv("ranges.allocator.failed", failed)
    kv("ranges.allocator.slowest_ms", slowest_ms)
    harness.say(names[2], failed == 0 and give_backs > 0,
                f"{give_backs} give-backs while another process allocated {ALLOCATOR_MIB} MiB {tries} times: "
                f"{failed} failed, the slowest took {slowest_ms} ms (want none failed, and a give-back made)")


CHECKS = [
    (check_hot_part, ("ranges.hot_part", "ranges.hot_part_intact")),
    (check_kernel_times, ("ranges.kernel_times", "ranges.kernel_times_intact")),
    (check_give_back_beside_allocator,
     ("ranges.hot_part_give_back", "ranges.hot_part_give_back_intact", "ranges.give_back_beside_allocator")),
]


def role(name, args):
    harness.die_with_parent()
    if name == "balloon":
        return harness.balloon(float(args[0]))
    roles = {"hot_part": role_hot_part, "kernel_times": role_kernel_times}
    if name not in roles:
        raise SystemExit(f"unknown role {name}")
    roles[name](*args)
    sys.stdout.flush()


def main():
    harness.program(__file__, "ranges", role, lambda: harness.checks(CHECKS, LEAVE_GIB))


if __name__ == "__main__":
    main()
