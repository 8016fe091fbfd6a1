"""Tests of greenboost.zerocopy and greenboost.kvcache (run: python3 -m pytest examples/python).

1. ABI against abi/greenboost.h: test_zerocopy_abi.py.
2. The numpy/torch/KV-cache views, on memfd-backed buffers (no module needed): shared
   memory really is shared, shapes and offsets are right, close() refuses while views
   are alive.
3. T3 and the tiered KV cache against a fake ioctl layer (FakeKernel, memfd pages, in
   zerocopy_testlib.py): test_zerocopy_tiers.py and test_zerocopy_tiered_cache.py.
4. With /dev/greenboost: a real round trip (alloc, write, read back through a second
   mapping, per-process accounting, errors; T3 moves when the module has T3). Skipped
   with the reason when absent.
5. With PyTorch and a CUDA GPU: a GPU kernel writes through the zero-copy CUDA view
   and the CPU sees it. Skipped with the reason otherwise.
"""

import errno
import mmap
import os

import pytest

import greenboost.kvcache as kv
import greenboost.zerocopy as gz
from zerocopy_testlib import CACHE_SHAPE, FakeKernel, import_or_skip, memfd_buffer, require_array_library

SIZE = 4 << 20
PATTERN = bytes(range(256)) * 16


# --- 2. views on memfd-backed buffers ---------------------------------------------------
@pytest.fixture
def buffer():
    with memfd_buffer(SIZE) as buffer:
        yield buffer


def test_a_second_mapping_of_the_fd_sees_writes_through_the_first(buffer):
    view = buffer.memoryview()
    view[0:4] = b"\x01\x02\x03\x04"
    view[SIZE - 4:SIZE] = b"tail"
    view.release()
    other = mmap.mmap(buffer.fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    assert other[0:4] == b"\x01\x02\x03\x04" and other[SIZE - 4:] == b"tail"
    other.close()


def test_close_refuses_while_a_view_is_alive(buffer):
    view = buffer.memoryview()
    with pytest.raises(BufferError):
        buffer.close()
    view.release()


def test_address_is_page_aligned_and_non_zero(buffer):
    address = buffer.address()
    assert address != 0 and address % mmap.PAGESIZE == 0, hex(address)


def test_close_closes_the_fd():
    buffer = memfd_buffer(SIZE)
    buffer.close()
    with pytest.raises(OSError) as raised:
        os.fstat(buffer.fd)
    assert raised.value.errno == errno.EBADF


@pytest.fixture
def np():
    return import_or_skip("numpy", "numpy is not installed (pip install numpy)")


@pytest.fixture
def torch():
    return import_or_skip("torch", "PyTorch is not installed")


def test_numpy_view_has_the_shape_and_dtype_asked_for(buffer, np):
    array = buffer.numpy("float32", (1024, 1024))
    assert array.shape == (1024, 1024) and array.dtype == np.float32


def test_numpy_views_share_memory(buffer, np):
    buffer.numpy("float32", (1024, 1024))[3, 5] = 2.5
    raw = buffer.numpy("float32")
    assert raw[3 * 1024 + 5] == 2.5 and raw.size == SIZE // 4


def test_numpy_offset_view_starts_at_the_offset(buffer, np):
    offset_view = buffer.numpy("uint8", offset=4096)
    offset_view[0] = 77
    assert buffer.numpy("uint8")[4096] == 77 and offset_view.size == SIZE - 4096


def test_torch_view_has_the_shape_and_dtype_asked_for(buffer, torch):
    tensor = buffer.torch(torch.float16, (2, 512, 8, 128))
    assert tuple(tensor.shape) == (2, 512, 8, 128) and tensor.dtype == torch.float16


def test_torch_views_share_memory(buffer, torch):
    buffer.torch(torch.float16, (2, 512, 8, 128))[1, 0, 0, 0] = 1.5
    assert float(buffer.torch(torch.float16)[512 * 8 * 128]) == 1.5


class MemfdDevice:
    """Stands in for Device.alloc in the KV-cache tests: same Buffer type, memfd pages."""

    def __init__(self):
        self.sizes = []

    def alloc(self, size):
        self.sizes.append(size)
        return memfd_buffer(size)


@pytest.fixture
def kv_cache():
    """(device, cache) of 3 layers; closed after the test unless the test closed it."""
    require_array_library()
    device = MemfdDevice()
    cache = kv.KVCache(device, layers=3, max_tokens=64, kv_heads=4, head_dim=32)
    yield device, cache
    cache.close()


def test_kv_cache_has_one_buffer_per_layer_of_2_tokens_heads_dim_2_bytes(kv_cache):
    device, _ = kv_cache
    assert device.sizes == [2 * 64 * 4 * 32 * 2] * 3, str(device.sizes)


def test_kv_cache_k_and_v_have_tokens_heads_dim(kv_cache):
    k0, v0 = kv_cache[1].layer(0)
    assert tuple(k0.shape) == (64, 4, 32) and tuple(v0.shape) == (64, 4, 32)


def test_kv_cache_k_v_and_other_layers_are_separate_memory(kv_cache):
    _, cache = kv_cache
    k0, v0 = cache.layer(0)
    k1, _ = cache.layer(1)
    k0[0, 0, 0] = 1.0
    v0[0, 0, 0] = 2.0
    assert float(k0[0, 0, 0]) == 1.0 and float(v0[0, 0, 0]) == 2.0 and float(k1[0, 0, 0]) == 0.0


def test_kv_cache_close_releases_every_layer(kv_cache):
    _, cache = kv_cache
    cache.close()
    assert cache.buffers == []


# --- 4. the real module ------------------------------------------------------------------
def test_a_missing_node_is_a_greenboost_error_that_says_to_load_the_module():
    with pytest.raises(gz.GreenBoostError) as raised:
        gz.Device("/nonexistent/greenboost")
    assert raised.value.errno == errno.ENOENT and "modprobe greenboost" in str(raised.value)


def test_a_node_that_is_not_greenboosts_is_refused_at_info():
    # /dev/null answers every ioctl with ENOTTY: the INFO call is made, and refused.
    with pytest.raises(gz.GreenBoostError) as raised:
        gz.Device("/dev/null")
    assert raised.value.errno == errno.ENOTTY and "GB_IOC_INFO" in str(raised.value)


@pytest.fixture
def device():
    """The real module's Device, or the test skipped with the reason there is none."""
    path = os.environ.get("GREENBOOST_DEVICE", gz.DEVICE_PATH)
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist (module not loaded): nothing to test against")
    try:
        device = gz.Device(path)
    except gz.GreenBoostError as error:
        pytest.skip(str(error))
    with device:
        yield device


def test_info_gives_the_abi_version_and_chunk_size(device):
    info = device.info()
    assert info.abi_version == gz.ABI_VERSION and info.chunk_size == gz.CHUNK_SIZE, str(info)


def test_alloc_returns_a_buffer_of_the_size_asked_for_and_proc_stats_counts_it(device):
    before = device.proc_stats().t2_used
    with device.alloc(8 << 20) as buffer:
        assert buffer.size == 8 << 20 and buffer.id > 0, f"{buffer.size} id {buffer.id}"
        assert device.proc_stats().t2_used >= before + (8 << 20)


def test_fresh_pages_are_zero(device):
    with device.alloc(8 << 20) as buffer:
        view = buffer.memoryview()
        assert view[:4096] == bytes(4096) and view[-4096:] == bytes(4096)
        view.release()


def test_a_second_mapping_of_a_dupd_dma_buf_fd_reads_what_the_first_wrote(device):
    size = 8 << 20
    with device.alloc(size) as buffer:
        view = buffer.memoryview()
        view[0:4096] = PATTERN
        view[size - 4096:size] = PATTERN
        view.release()
        second = mmap.mmap(os.dup(buffer.fd), size, mmap.MAP_SHARED, mmap.PROT_READ)
        assert second[0:4096] == PATTERN and second[size - 4096:] == PATTERN
        second.close()


def test_closing_the_buffer_gives_the_memory_back(device):
    before = device.proc_stats().t2_used
    device.alloc(8 << 20).close()
    assert device.proc_stats().t2_used == before


def test_an_unaligned_size_is_rounded_up_to_the_page_size(device):
    with device.alloc(5000) as odd:
        assert odd.size == 8192, str(odd.size)


def test_size_0_is_refused_with_einval(device):
    with pytest.raises(gz.GreenBoostError) as raised:
        device.alloc(0)
    assert raised.value.errno == errno.EINVAL and "invalid argument" in str(raised.value)


@pytest.fixture
def t3_device(device):
    if not device.has_t3:
        pytest.skip("this module has no T3 (GB_INFO_T3 is not set)")
    return device


@pytest.fixture
def t3_buffer(t3_device):
    """An 8 MiB buffer allocated in T3, PATTERN at both ends: (buffer, its memoryview)."""
    try:
        buffer = t3_device.alloc(8 << 20, t3=True)
    except gz.GreenBoostError as error:
        if error.errno != errno.ENOMEM:
            raise
        pytest.skip(str(error))
    with buffer:
        view = buffer.memoryview()
        view[0:4096] = PATTERN
        view[-4096:] = PATTERN
        yield buffer, view
        view.release()


def test_move_to_t2_and_back_keeps_the_data_under_the_mapping_made_in_t3(t3_buffer):
    buffer, view = t3_buffer
    promoted = buffer.move(gz.TIER_T2)
    assert view[0:4096] == PATTERN and view[-4096:] == PATTERN and 0 < promoted <= buffer.size, str(promoted)
    demoted = buffer.move(gz.TIER_T3)
    assert view[0:4096] == PATTERN and view[-4096:] == PATTERN and 0 < demoted <= buffer.size, str(demoted)


def test_a_real_move_to_the_tier_the_buffer_is_in_copies_nothing(t3_buffer):
    assert t3_buffer[0].move(gz.TIER_T3) == 0


def test_t3_stats_counts_the_buffer_and_the_moves(t3_device, t3_buffer):
    before = t3_device.t3_stats()
    t3_buffer[0].move(gz.TIER_T2)
    t3_buffer[0].move(gz.TIER_T3)
    stats = t3_device.t3_stats()
    assert stats.t3_used >= t3_buffer[0].size and stats.moves_to_t2 > before.moves_to_t2 \
        and stats.moves_to_t3 > before.moves_to_t3, str(stats)


@pytest.fixture
def module_cache(t3_device):
    """A tiered cache on the module whose blocks were used in turn, each stamped with its index + 1."""
    require_array_library()
    cache = kv.TieredKVCache(t3_device, blocks=4, hot_blocks=2, **CACHE_SHAPE)
    for index in (0, 1, 2, 3, 0, 2):
        cache.block(index)[...] = index + 1
    yield cache
    cache.close()


def test_tiered_cache_on_the_module_keeps_at_most_hot_blocks_in_t2_unless_it_said_it_could_not_tier(module_cache):
    assert module_cache.degraded is not None or sum(b.tier == gz.TIER_T2 for b in module_cache.buffers) <= 2, \
        str(module_cache.degraded)


def test_tiered_cache_on_the_module_keeps_every_blocks_data_through_its_moves(module_cache):
    assert all(float(module_cache.block(i).min()) == float(module_cache.block(i).max()) == i + 1 for i in range(4))


# --- 5. zero-copy CUDA view ----------------------------------------------------------------
@pytest.fixture
def cuda_torch(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to PyTorch")
    return torch


@pytest.fixture
def cuda_view(cuda_torch):
    """(host tensor, its CUDA view) over 64 MiB of the module's buffer, or of memfd pages
    where there is no module; the host holds 0, 1, 2, ... when the test starts."""
    torch = cuda_torch
    path = os.environ.get("GREENBOOST_DEVICE", gz.DEVICE_PATH)
    device = gz.Device(path) if os.path.exists(path) else None
    buffer = device.alloc(64 << 20) if device else memfd_buffer(64 << 20)
    try:
        host = buffer.torch(torch.float32)
        host.copy_(torch.arange(host.numel(), dtype=torch.float32))
        buffer.register_with_cuda()
        yield host, buffer.cuda_tensor(torch.float32)
    finally:
        buffer.close()
        if device is not None:
            device.close()


def test_the_cuda_view_is_on_the_gpu_with_the_same_shape(cuda_view):
    host, gpu = cuda_view
    assert gpu.is_cuda and gpu.shape == host.shape


def test_the_gpu_reads_what_the_cpu_wrote(cuda_torch, cuda_view):
    host, gpu = cuda_view
    assert bool(cuda_torch.equal(gpu[-1000:].cpu(), host[-1000:].clone()))


def test_the_cpu_reads_what_the_gpu_wrote_without_a_copy(cuda_torch, cuda_view):
    host, gpu = cuda_view
    gpu.mul_(2.0)
    cuda_torch.cuda.synchronize()
    assert float(host[12345]) == 2.0 * 12345 and float(host[-1]) == 2.0 * (host.numel() - 1)


def test_a_demote_unregisters_the_buffer_from_cuda(cuda_torch):
    # The fake kernel's buffers are memfd pages, which CUDA registers like the module's;
    # registering twice fails (cudaErrorHostMemoryAlreadyRegistered), so a second
    # registration after a round trip through T3 proves the demote unregistered it.
    with gz.Device(os.devnull, ioctl=FakeKernel()) as fake_device, fake_device.alloc(64 << 20) as buffer:
        buffer.register_with_cuda()
        buffer.move(gz.TIER_T3)
        buffer.move(gz.TIER_T2)
        buffer.register_with_cuda()
