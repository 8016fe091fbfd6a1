"""Section 3 of test_zerocopy.py: T3 and the tiered KV cache against a fake ioctl layer
(FakeKernel, memfd pages): the calls Buffer.move and Device make, the LRU
promote/demote policy, refusals (EBUSY, ENOMEM) and the fall back to T2 only when T3 is
missing or full."""

import errno
import os
import warnings

import greenboost_kvcache as kv
from zerocopy_testlib import CACHE_SHAPE, FakeKernel, check, check_raises, gz, have_array_library, memfd_buffer


def test_tier_api():
    kernel = FakeKernel()
    with gz.Device(os.devnull, ioctl=kernel) as device:
        check("has_t3 follows GB_INFO_T3", device.has_t3)
        buffer = device.alloc(1 << 20, t3=True)
        check("alloc(t3=True) asks for GB_ALLOC_T3, and the buffer starts in T3",
              kernel.alloc_flags == [gz.ALLOC_T3] and buffer.tier == gz.TIER_T3 == kernel.tier(buffer))
        check_raises("register_with_cuda refuses a T3 buffer (the GPU reads T2 only)", buffer.register_with_cuda,
                     gz.GreenBoostError, lambda error: "move(TIER_T2) first" in str(error))
        view = buffer.memoryview()
        view[:4] = b"cold"
        moved = buffer.move(gz.TIER_T2)
        check("move(TIER_T2) issues one MOVE and reports the bytes copied",
              kernel.moves == [(buffer.id, gz.TIER_T2)] and moved == 1 << 20, f"{kernel.moves} {moved}")
        check("after the move the tier is T2, here and in the kernel", buffer.tier == gz.TIER_T2 == kernel.tier(buffer))
        check("a view taken before the move still reads the data", bytes(view[:4]) == b"cold")
        check("a move to the tier the buffer is in copies nothing", buffer.move(gz.TIER_T2) == 0)
        stats = device.t3_stats()
        check("T3_STATS unpacks into its named fields", stats.moves_to_t2 == 1 and stats.moved_bytes == 1 << 20
              and stats.t3_used == 0 and stats.t3_cap == kernel.t3_room, str(stats))

        check_raises("a tier that does not exist is refused with EINVAL", lambda: buffer.move(7), gz.GreenBoostError,
                     lambda error: error.errno == errno.EINVAL and "TIER_T2 and TIER_T3" in str(error))
        kernel.busy.add(buffer.id)
        check_raises("EBUSY on a move says the buffer is pinned and to unregister it first",
                     lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                     lambda error: error.errno == errno.EBUSY and "cudaHostUnregister" in str(error) and f"buffer {buffer.id}" in str(error))
        check("a refused move leaves the buffer where it was", buffer.tier == gz.TIER_T2 == kernel.tier(buffer))
        kernel.busy.clear()
        kernel.t3_room = 0
        check_raises("ENOMEM on a demote says T3 has no room and that it needs swap",
                     lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                     lambda error: error.errno == errno.ENOMEM and "T3 has no room" in str(error) and "greenboost swap add" in str(error))
        check_raises("ENOMEM on a T3 allocation says the same", lambda: device.alloc(4096, t3=True), gz.GreenBoostError,
                     lambda error: error.errno == errno.ENOMEM and "greenboost swap add" in str(error))
        kernel.t3_room = 1 << 40

        # A buffer this object registered with CUDA is unregistered before it is demoted:
        # the kernel would refuse to move pages CUDA holds pinned. The CUDA call itself is
        # stood in for, so that the order is checked on machines without a GPU.
        events = []

        def unregister():
            events.append(("cudaHostUnregister", len(kernel.moves)))
            buffer._cuda_registered = False

        buffer._cuda_registered = True
        buffer._unregister_from_cuda = unregister
        moves_before = len(kernel.moves)
        buffer.move(gz.TIER_T3)
        check("a demote of a buffer it registered with CUDA unregisters it first, then moves",
              events == [("cudaHostUnregister", moves_before)] and kernel.moves[-1] == (buffer.id, gz.TIER_T3), str(events))
        buffer.move(gz.TIER_T2)
        buffer._cuda_registered = True
        buffer.move(gz.TIER_T2)
        check("a move that is no demote leaves the CUDA registration alone", len(events) == 1 and buffer._cuda_registered)
        buffer._cuda_registered = False
        view.release()
        buffer.close()

    with gz.Device(os.devnull, ioctl=FakeKernel(t3=False)) as device:
        check("has_t3 is False without GB_INFO_T3", not device.has_t3)
        check_raises("T3_STATS on a module without T3 says so", device.t3_stats, gz.GreenBoostError,
                     lambda error: error.errno == errno.ENOTTY and "no T3" in str(error))
        check_raises("alloc(t3=True) on a module without T3 says so", lambda: device.alloc(4096, t3=True), gz.GreenBoostError,
                     lambda error: error.errno == errno.EINVAL and "no T3" in str(error))
        with device.alloc(4096) as buffer:
            check_raises("a move on a module without T3 says so", lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                         lambda error: error.errno == errno.ENOTTY and "no T3" in str(error))
    with memfd_buffer(4096) as buffer:
        check_raises("a buffer that no Device allocated cannot move", lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                     lambda error: "not allocated from a Device" in str(error))


# One page of 4 KiB per block, so that the block is exactly the buffer (sizes round up to pages).
BLOCK_BYTES = 2 * 2 * 8 * 2 * 32 * 2  # layers * (K, V) * tokens * heads * dim * float16


def tiered_cache(kernel, blocks, hot_blocks):
    """(device, cache, warnings the cache's construction gave)."""
    device = gz.Device(os.devnull, ioctl=kernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = kv.TieredKVCache(device, blocks=blocks, hot_blocks=hot_blocks, **CACHE_SHAPE)
    return device, cache, caught


def degradation_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "TieredKVCache" in str(w.message)]




def test_tiered_policy():
    if not have_array_library("tiered KV cache policy"):
        return
    kernel = FakeKernel()
    device, cache, caught = tiered_cache(kernel, blocks=6, hot_blocks=2)
    ids = [buffer.id for buffer in cache.buffers]
    check("tiered cache: no warning while T3 works", not caught and cache.degraded is None, str([str(w.message) for w in caught]))
    check("tiered cache: one buffer per block of layers*2*tokens*heads*dim*2 bytes",
          [buffer.size for buffer in cache.buffers] == [BLOCK_BYTES] * 6)
    check("tiered cache: the first hot_blocks blocks start in T2, the others in T3",
          [buffer.tier for buffer in cache.buffers] == [2, 2, 3, 3, 3, 3]
          and kernel.alloc_flags == [0, 0] + [gz.ALLOC_T3] * 4 and cache.hot == [0, 1] and not kernel.moves)
    view = cache.block(0)
    check("tiered cache: a block view is [layers, 2, block_tokens, kv_heads, head_dim]", tuple(view.shape) == (2, 2, 8, 2, 32))
    cache.block(2)
    check("tiered cache: using a cold block demotes the least recently used hot block first, then promotes it",
          kernel.moves == [(ids[1], gz.TIER_T3), (ids[2], gz.TIER_T2)] and cache.hot == [0, 2], f"{kernel.moves} {cache.hot}")
    del kernel.moves[:]
    cache.block(0)
    check("tiered cache: using a hot block asks the kernel for nothing and makes it the most recent",
          not kernel.moves and cache.hot == [2, 0])

    # A reference LRU of hot_blocks entries: the cache must ask for exactly its moves,
    # keep exactly its hot set, and never hold more than hot_blocks blocks in T2.
    reference, expected_moves, problems = [2, 0], [], []
    first_views, stamps = {}, {}
    for step, index in enumerate([3, 3, 1, 4, 0, 5, 2, 2, 3, 1, 0, 5, 4]):
        view = cache.block(index)
        if index in reference:
            reference.remove(index)
        else:
            if len(reference) == cache.hot_blocks:
                expected_moves.append((ids[reference.pop(0)], gz.TIER_T3))
            expected_moves.append((ids[index], gz.TIER_T2))
        reference.append(index)
        in_t2 = [i for i, buffer in enumerate(cache.buffers) if buffer.tier == gz.TIER_T2]
        in_t2_for_kernel = [i for i, buffer in enumerate(cache.buffers) if kernel.tier(buffer) == gz.TIER_T2]
        if len(in_t2) > cache.hot_blocks or sorted(cache.hot) != in_t2 or in_t2 != in_t2_for_kernel or cache.hot != reference:
            problems.append(f"step {step}: hot {cache.hot}, T2 {in_t2}, kernel's T2 {in_t2_for_kernel}, reference {reference}")
        if first_views.setdefault(index, view) is not view:
            problems.append(f"step {step}: block {index} came back as another view object")
        if not float(view.min()) == float(view.max()) == stamps.get(index, 0):
            problems.append(f"step {step}: block {index} does not hold {stamps.get(index, 0)} everywhere")
        stamps[index] = float(step + 1)
        view[...] = step + 1
    check("tiered cache: the hot set never exceeds hot_blocks, is the LRU's, and is what is in T2", not problems, "; ".join(problems))
    check("tiered cache: the moves asked for are the LRU's, demote before promote", kernel.moves == expected_moves,
          f"{kernel.moves} != {expected_moves}")
    check("tiered cache: every block kept its data across its moves (same view, same mapping)",
          all(float(cache.block(i).min()) == float(cache.block(i).max()) == stamps[i] for i in stamps))
    check_raises("tiered cache: a block index out of range is an IndexError", lambda: cache.block(6), IndexError, lambda error: True)
    check_raises("tiered cache: hot_blocks 0 is refused", lambda: kv.TieredKVCache(device, 2, 0, **CACHE_SHAPE),
                 ValueError, lambda error: "hot_blocks" in str(error))
    del view, first_views
    cache.close()
    check("tiered cache: close() releases every block", cache.buffers == [])
    device.close()


def test_tiered_refusals():
    if not have_array_library("tiered KV cache refusals"):
        return
    kernel = FakeKernel()
    device, cache, _ = tiered_cache(kernel, blocks=4, hot_blocks=2)
    kernel.busy.add(cache.buffers[0].id)
    check_raises("tiered cache: EBUSY demoting the LRU block names it, the block asked for, and the way out",
                 lambda: cache.block(2), gz.GreenBoostError,
                 lambda error: error.errno == errno.EBUSY and "block 0" in str(error) and "block 2" in str(error)
                 and "unregister it first" in str(error))
    check("tiered cache: after a refused demote nothing moved",
          cache.hot == [0, 1] and [kernel.tier(buffer) for buffer in cache.buffers] == [2, 2, 3, 3]
          and [buffer.tier for buffer in cache.buffers] == [2, 2, 3, 3])
    kernel.busy = {cache.buffers[2].id}
    check_raises("tiered cache: EBUSY promoting a block names it", lambda: cache.block(2), gz.GreenBoostError,
                 lambda error: error.errno == errno.EBUSY and "block 2 cannot be promoted" in str(error))
    check("tiered cache: a refused promote leaves the block in T3 and out of the hot set",
          cache.buffers[2].tier == gz.TIER_T3 == kernel.tier(cache.buffers[2]) and cache.hot == [1])
    kernel.busy.clear()
    cache.block(2)
    check("tiered cache: once the pin is gone the same call promotes it", cache.buffers[2].tier == gz.TIER_T2 and cache.hot == [1, 2])
    cache.close()
    device.close()


def test_tiered_degradation():
    if not have_array_library("tiered KV cache without T3"):
        return
    kernel = FakeKernel(t3=False)
    device, cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        for index in (3, 0, 2, 1, 3):
            cache.block(index)
    check("without T3 in the module: one warning that says so", len(degradation_warnings(caught)) == 1
          and "no T3" in str(caught[0].message) and not later and "no T3" in cache.degraded,
          str([str(w.message) for w in caught + later]))
    check("without T3 in the module: every block in T2, no T3 allocation, no MOVE",
          all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers) and kernel.alloc_flags == [0] * 4 and not kernel.moves)
    cache.close()
    device.close()

    kernel = FakeKernel(t3_room=0)
    device, cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    check("without swap: one warning that T3 has no room", len(degradation_warnings(caught)) == 1
          and "T3 has no room" in cache.degraded, str([str(w.message) for w in caught]))
    check("without swap: the refused T3 block and the rest are allocated in T2",
          kernel.alloc_flags == [0, 0, gz.ALLOC_T3, 0, 0] and all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers))
    cache.block(3)
    check("without swap: using a block moves nothing", not kernel.moves)
    cache.close()
    device.close()

    kernel = FakeKernel(t3_room=2 * BLOCK_BYTES)
    device, cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    ids = [buffer.id for buffer in cache.buffers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.block(2)
        cache.block(3)
    check("when swap fills up: one warning, then T2 only", len(degradation_warnings(caught)) == 1
          and "T3 has no room" in cache.degraded, str([str(w.message) for w in caught]))
    check("when swap fills up: the refused demote stays in T2, the blocks used are promoted, nothing more is demoted",
          kernel.moves == [(ids[0], gz.TIER_T3), (ids[2], gz.TIER_T2), (ids[3], gz.TIER_T2)]
          and all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers) and cache.hot == [0, 1, 2, 3], f"{kernel.moves} {cache.hot}")
    cache.close()
    device.close()
