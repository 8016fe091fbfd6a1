"""T3 through Buffer.move and Device against a fake ioctl layer (FakeKernel, memfd pages):
the calls they make and the errors they turn refusals into. The tiered KV cache built on
them is test_zerocopy_tiered_cache.py."""

import errno
import os

import pytest

from zerocopy_testlib import FakeKernel, gz, memfd_buffer

MIB = 1 << 20


@pytest.fixture
def kernel():
    return FakeKernel()


@pytest.fixture
def device(kernel):
    with gz.Device(os.devnull, ioctl=kernel) as device:
        yield device


@pytest.fixture
def t3_buffer(device):
    with device.alloc(MIB, t3=True) as buffer:
        yield buffer


@pytest.fixture
def t2_buffer(device):
    with device.alloc(MIB) as buffer:
        yield buffer


def raised_by(call, exception=gz.GreenBoostError):
    """What ``call()`` raised; the test fails if it raised nothing."""
    with pytest.raises(exception) as raised:
        call()
    return raised.value


def test_has_t3_follows_gb_info_t3(device):
    assert device.has_t3


def test_alloc_t3_asks_for_gb_alloc_t3_and_the_buffer_starts_in_t3(kernel, t3_buffer):
    assert kernel.alloc_flags == [gz.ALLOC_T3] and t3_buffer.tier == gz.TIER_T3 == kernel.tier(t3_buffer)


def test_register_with_cuda_refuses_a_t3_buffer_the_gpu_reads_t2_only(t3_buffer):
    assert "move(TIER_T2) first" in str(raised_by(t3_buffer.register_with_cuda))


def test_move_to_t2_issues_one_move_and_reports_the_bytes_copied(kernel, t3_buffer):
    moved = t3_buffer.move(gz.TIER_T2)
    assert kernel.moves == [(t3_buffer.id, gz.TIER_T2)] and moved == MIB, f"{kernel.moves} {moved}"


def test_after_the_move_the_tier_is_t2_here_and_in_the_kernel(kernel, t3_buffer):
    t3_buffer.move(gz.TIER_T2)
    assert t3_buffer.tier == gz.TIER_T2 == kernel.tier(t3_buffer)


def test_a_view_taken_before_the_move_still_reads_the_data(t3_buffer):
    view = t3_buffer.memoryview()
    view[:4] = b"cold"
    t3_buffer.move(gz.TIER_T2)
    assert bytes(view[:4]) == b"cold"
    view.release()


def test_a_move_to_the_tier_the_buffer_is_in_copies_nothing(t3_buffer):
    t3_buffer.move(gz.TIER_T2)
    assert t3_buffer.move(gz.TIER_T2) == 0


def test_t3_stats_unpacks_into_its_named_fields(kernel, device, t3_buffer):
    t3_buffer.move(gz.TIER_T2)
    stats = device.t3_stats()
    assert stats.moves_to_t2 == 1 and stats.moved_bytes == MIB and stats.t3_used == 0 \
        and stats.t3_cap == kernel.t3_room, str(stats)


def test_a_tier_that_does_not_exist_is_refused_with_einval(t2_buffer):
    error = raised_by(lambda: t2_buffer.move(7))
    assert error.errno == errno.EINVAL and "TIER_T2 and TIER_T3" in str(error)


def test_ebusy_on_a_move_says_the_buffer_is_pinned_and_to_unregister_it_first(kernel, t2_buffer):
    kernel.busy.add(t2_buffer.id)
    error = raised_by(lambda: t2_buffer.move(gz.TIER_T3))
    assert error.errno == errno.EBUSY and "cudaHostUnregister" in str(error) and f"buffer {t2_buffer.id}" in str(error)


def test_a_refused_move_leaves_the_buffer_where_it_was(kernel, t2_buffer):
    kernel.busy.add(t2_buffer.id)
    raised_by(lambda: t2_buffer.move(gz.TIER_T3))
    assert t2_buffer.tier == gz.TIER_T2 == kernel.tier(t2_buffer)


def test_enomem_on_a_demote_says_t3_has_no_room_and_that_it_needs_swap(kernel, t2_buffer):
    kernel.t3_room = 0
    error = raised_by(lambda: t2_buffer.move(gz.TIER_T3))
    assert error.errno == errno.ENOMEM and "T3 has no room" in str(error) and "greenboost swap add" in str(error)


def test_enomem_on_a_t3_allocation_says_the_same(kernel, device):
    kernel.t3_room = 0
    error = raised_by(lambda: device.alloc(4096, t3=True))
    assert error.errno == errno.ENOMEM and "greenboost swap add" in str(error)


@pytest.fixture
def cuda_events(kernel, t2_buffer):
    """t2_buffer marked as registered with CUDA by this object, the CUDA unregister call
    stood in for (so that the order is checked on machines without a GPU): the list of
    (call, MOVEs asked for before it)."""
    events = []

    def unregister():
        events.append(("cudaHostUnregister", len(kernel.moves)))
        t2_buffer._cuda_registered = False

    t2_buffer._cuda_registered = True
    t2_buffer._unregister_from_cuda = unregister
    yield events
    t2_buffer._cuda_registered = False


def test_a_demote_of_a_buffer_it_registered_with_cuda_unregisters_it_first_then_moves(kernel, t2_buffer, cuda_events):
    # The kernel would refuse to move pages CUDA holds pinned.
    t2_buffer.move(gz.TIER_T3)
    assert cuda_events == [("cudaHostUnregister", 0)] and kernel.moves == [(t2_buffer.id, gz.TIER_T3)], str(cuda_events)


def test_a_move_that_is_no_demote_leaves_the_cuda_registration_alone(t2_buffer, cuda_events):
    t2_buffer.move(gz.TIER_T2)
    assert not cuda_events and t2_buffer._cuda_registered


@pytest.fixture
def device_without_t3():
    with gz.Device(os.devnull, ioctl=FakeKernel(t3=False)) as device:
        yield device


def test_has_t3_is_false_without_gb_info_t3(device_without_t3):
    assert not device_without_t3.has_t3


def test_t3_stats_on_a_module_without_t3_says_so(device_without_t3):
    error = raised_by(device_without_t3.t3_stats)
    assert error.errno == errno.ENOTTY and "no T3" in str(error)


def test_alloc_t3_on_a_module_without_t3_says_so(device_without_t3):
    error = raised_by(lambda: device_without_t3.alloc(4096, t3=True))
    assert error.errno == errno.EINVAL and "no T3" in str(error)


def test_a_move_on_a_module_without_t3_says_so(device_without_t3):
    with device_without_t3.alloc(4096) as buffer:
        error = raised_by(lambda: buffer.move(gz.TIER_T3))
    assert error.errno == errno.ENOTTY and "no T3" in str(error)


def test_a_buffer_that_no_device_allocated_cannot_move():
    with memfd_buffer(4096) as buffer:
        assert "not allocated from a Device" in str(raised_by(lambda: buffer.move(gz.TIER_T3)))
