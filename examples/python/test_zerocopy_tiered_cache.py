"""The tiered KV cache (greenboost.kvcache.TieredKVCache) against a fake ioctl layer
(FakeKernel, memfd pages): the LRU promote/demote policy, refusals (EBUSY) and the fall
back to T2 only when T3 is missing or full."""

import errno
import os
import warnings

import pytest

import greenboost.kvcache as kv
from zerocopy_testlib import CACHE_SHAPE, FakeKernel, gz, require_array_library

# One page of 4 KiB per block, so that the block is exactly the buffer (sizes round up to pages).
BLOCK_BYTES = 2 * 2 * 8 * 2 * 32 * 2  # layers * (K, V) * tokens * heads * dim * float16


@pytest.fixture
def tiered_cache():
    """make(kernel, blocks, hot_blocks) -> (cache, warnings its construction gave); the
    caches and their devices are closed after the test."""
    require_array_library()
    made = []

    def make(kernel, blocks, hot_blocks):
        device = gz.Device(os.devnull, ioctl=kernel)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = kv.TieredKVCache(device, blocks=blocks, hot_blocks=hot_blocks, **CACHE_SHAPE)
        made.append((device, cache))
        return cache, caught

    yield make
    for device, cache in made:
        cache.close()
        device.close()


def degradation_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "TieredKVCache" in str(w.message)]


def messages(caught):
    return str([str(w.message) for w in caught])


# --- the LRU policy: 6 blocks, 2 hot -----------------------------------------------------
@pytest.fixture
def kernel():
    return FakeKernel()


@pytest.fixture
def cache(kernel, tiered_cache):
    return tiered_cache(kernel, blocks=6, hot_blocks=2)[0]


def test_no_warning_while_t3_works(kernel, tiered_cache):
    cache, caught = tiered_cache(kernel, blocks=6, hot_blocks=2)
    assert not caught and cache.degraded is None, messages(caught)


def test_one_buffer_per_block_of_layers_2_tokens_heads_dim_2_bytes(cache):
    assert [buffer.size for buffer in cache.buffers] == [BLOCK_BYTES] * 6


def test_the_first_hot_blocks_blocks_start_in_t2_the_others_in_t3(kernel, cache):
    assert [buffer.tier for buffer in cache.buffers] == [2, 2, 3, 3, 3, 3] \
        and kernel.alloc_flags == [0, 0] + [gz.ALLOC_T3] * 4 and cache.hot == [0, 1] and not kernel.moves


def test_a_block_view_is_layers_2_block_tokens_kv_heads_head_dim(cache):
    assert tuple(cache.block(0).shape) == (2, 2, 8, 2, 32)


def test_using_a_cold_block_demotes_the_least_recently_used_hot_block_first_then_promotes_it(kernel, cache):
    ids = [buffer.id for buffer in cache.buffers]
    cache.block(0)
    cache.block(2)
    assert kernel.moves == [(ids[1], gz.TIER_T3), (ids[2], gz.TIER_T2)] and cache.hot == [0, 2], f"{kernel.moves} {cache.hot}"


def test_using_a_hot_block_asks_the_kernel_for_nothing_and_makes_it_the_most_recent(kernel, cache):
    cache.block(0)
    cache.block(2)
    del kernel.moves[:]
    cache.block(0)
    assert not kernel.moves and cache.hot == [2, 0]


@pytest.fixture
def lru_run(kernel, cache):
    """Uses blocks in an order that makes every kind of move, against a reference LRU of
    hot_blocks entries: the cache must ask for exactly its moves, keep exactly its hot
    set, and never hold more than hot_blocks blocks in T2. Each block is stamped with the
    step that used it last. Gives (problems seen, moves expected, stamps)."""
    ids = [buffer.id for buffer in cache.buffers]
    for index in (0, 2, 0):
        cache.block(index)
    del kernel.moves[:]
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
    return problems, expected_moves, stamps


def test_the_hot_set_never_exceeds_hot_blocks_is_the_lrus_and_is_what_is_in_t2(lru_run):
    problems, _, _ = lru_run
    assert not problems, "; ".join(problems)


def test_the_moves_asked_for_are_the_lrus_demote_before_promote(kernel, lru_run):
    _, expected_moves, _ = lru_run
    assert kernel.moves == expected_moves, f"{kernel.moves} != {expected_moves}"


def test_every_block_kept_its_data_across_its_moves_same_view_same_mapping(cache, lru_run):
    _, _, stamps = lru_run
    assert all(float(cache.block(i).min()) == float(cache.block(i).max()) == stamps[i] for i in stamps)


def test_a_block_index_out_of_range_is_an_index_error(cache):
    with pytest.raises(IndexError):
        cache.block(6)


def test_hot_blocks_0_is_refused(kernel):
    require_array_library()
    with gz.Device(os.devnull, ioctl=kernel) as device, pytest.raises(ValueError, match="hot_blocks"):
        kv.TieredKVCache(device, 2, 0, **CACHE_SHAPE)


def test_close_releases_every_block(cache):
    cache.close()
    assert cache.buffers == []


# --- refusals: 4 blocks, 2 hot -------------------------------------------------------------
@pytest.fixture
def small_cache(kernel, tiered_cache):
    return tiered_cache(kernel, blocks=4, hot_blocks=2)[0]


def test_ebusy_demoting_the_lru_block_names_it_the_block_asked_for_and_the_way_out(kernel, small_cache):
    kernel.busy.add(small_cache.buffers[0].id)
    with pytest.raises(gz.GreenBoostError) as raised:
        small_cache.block(2)
    error = str(raised.value)
    assert raised.value.errno == errno.EBUSY and "block 0" in error and "block 2" in error and "unregister it first" in error


def test_after_a_refused_demote_nothing_moved(kernel, small_cache):
    kernel.busy.add(small_cache.buffers[0].id)
    with pytest.raises(gz.GreenBoostError):
        small_cache.block(2)
    assert small_cache.hot == [0, 1] and [kernel.tier(buffer) for buffer in small_cache.buffers] == [2, 2, 3, 3] \
        and [buffer.tier for buffer in small_cache.buffers] == [2, 2, 3, 3]


@pytest.fixture
def refused_promote(kernel, small_cache):
    """Block 2 pinned, then used: the LRU block 0 is demoted, block 2's promote refused.
    Gives the error."""
    kernel.busy = {small_cache.buffers[2].id}
    with pytest.raises(gz.GreenBoostError) as raised:
        small_cache.block(2)
    return raised.value


def test_ebusy_promoting_a_block_names_it(refused_promote):
    assert refused_promote.errno == errno.EBUSY and "block 2 cannot be promoted" in str(refused_promote)


def test_a_refused_promote_leaves_the_block_in_t3_and_out_of_the_hot_set(kernel, small_cache, refused_promote):
    assert small_cache.buffers[2].tier == gz.TIER_T3 == kernel.tier(small_cache.buffers[2]) and small_cache.hot == [1]


def test_once_the_pin_is_gone_the_same_call_promotes_it(kernel, small_cache, refused_promote):
    kernel.busy.clear()
    small_cache.block(2)
    assert small_cache.buffers[2].tier == gz.TIER_T2 and small_cache.hot == [1, 2]


# --- degradation to T2 only: 4 blocks, 2 hot -----------------------------------------------
@pytest.fixture
def without_t3(tiered_cache):
    """A cache on a module without T3, its blocks used in turn: (kernel, cache, warnings
    at construction, warnings while used)."""
    kernel = FakeKernel(t3=False)
    cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        for index in (3, 0, 2, 1, 3):
            cache.block(index)
    return kernel, cache, caught, later


def test_without_t3_in_the_module_one_warning_that_says_so(without_t3):
    _, cache, caught, later = without_t3
    assert len(degradation_warnings(caught)) == 1 and "no T3" in str(caught[0].message) and not later \
        and "no T3" in cache.degraded, messages(caught + later)


def test_without_t3_in_the_module_every_block_in_t2_no_t3_allocation_no_move(without_t3):
    kernel, cache, _, _ = without_t3
    assert all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers) and kernel.alloc_flags == [0] * 4 and not kernel.moves


@pytest.fixture
def without_swap(tiered_cache):
    """A cache on a module whose T3 has no room: (kernel, cache, warnings at construction)."""
    kernel = FakeKernel(t3_room=0)
    cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    return kernel, cache, caught


def test_without_swap_one_warning_that_t3_has_no_room(without_swap):
    _, cache, caught = without_swap
    assert len(degradation_warnings(caught)) == 1 and "T3 has no room" in cache.degraded, messages(caught)


def test_without_swap_the_refused_t3_block_and_the_rest_are_allocated_in_t2(without_swap):
    kernel, cache, _ = without_swap
    assert kernel.alloc_flags == [0, 0, gz.ALLOC_T3, 0, 0] and all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers)


def test_without_swap_using_a_block_moves_nothing(without_swap):
    kernel, cache, _ = without_swap
    cache.block(3)
    assert not kernel.moves


@pytest.fixture
def swap_fills_up(tiered_cache):
    """T3 with room for two blocks (the two that start there); blocks 2 and 3 used, so the
    first demote finds T3 full: (kernel, cache, block ids, warnings while used)."""
    kernel = FakeKernel(t3_room=2 * BLOCK_BYTES)
    cache, _ = tiered_cache(kernel, blocks=4, hot_blocks=2)
    ids = [buffer.id for buffer in cache.buffers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.block(2)
        cache.block(3)
    return kernel, cache, ids, caught


def test_when_swap_fills_up_one_warning_then_t2_only(swap_fills_up):
    _, cache, _, caught = swap_fills_up
    assert len(degradation_warnings(caught)) == 1 and "T3 has no room" in cache.degraded, messages(caught)


def test_when_swap_fills_up_the_refused_demote_stays_in_t2_the_blocks_used_are_promoted_nothing_more_is_demoted(swap_fills_up):
    kernel, cache, ids, _ = swap_fills_up
    assert kernel.moves == [(ids[0], gz.TIER_T3), (ids[2], gz.TIER_T2), (ids[3], gz.TIER_T2)] \
        and all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers) and cache.hot == [0, 1, 2, 3], f"{kernel.moves} {cache.hot}"
