"""``python3 -m greenboost``: a smoke run against the real device: allocate, write and
read a T2 buffer, and a T3 round trip when the module has T3. Without the module (or
the group) it exits with the GreenBoostError that says what to do."""

import sys

from .zerocopy import TIER_T2, TIER_T3, Device, GreenBoostError


def main():
    with Device() as gb:
        info = gb.info()
        print(f"GreenBoost ABI {info.abi_version}: T2 cap {info.pool_cap >> 20} MiB, reserve {info.reserve >> 20} MiB")
        with gb.alloc(64 << 20) as buffer:
            view = buffer.memoryview()
            view[:5] = b"hello"
            print(f"buffer {buffer.id}: {buffer.size >> 20} MiB mapped at {buffer.address():#x}, starts with {bytes(view[:5])!r}")
            view.release()
            print("this process now holds", gb.proc_stats().t2_used >> 20, "MiB of T2")
            if not gb.has_t3:
                print("this module has no T3")
                return
            try:
                print(f"moved to T3: {buffer.move(TIER_T3) >> 20} MiB copied; back to T2: {buffer.move(TIER_T2) >> 20} MiB")
            except GreenBoostError as error:
                print(error)
            stats = gb.t3_stats()
            print(f"T3: {stats.t3_used >> 20} MiB used of {stats.t3_cap >> 20} MiB room, swap {stats.swap_free >> 20} MiB free")


if __name__ == "__main__":
    try:
        main()
    except GreenBoostError as error:
        sys.exit(f"greenboost: {error}")
