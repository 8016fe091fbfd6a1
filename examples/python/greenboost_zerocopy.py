"""Zero-copy GreenBoost buffers in Python: numpy arrays and PyTorch tensors whose memory
is pinned system RAM handed out by the greenboost kernel module (tier T2).

A KV cache that does not fit in VRAM (ExLlamaV3-style: preallocated K and V tensors per
layer) can live in such buffers: the CPU writes and reads them as ordinary numpy/torch
CPU tensors, and after ``register_with_cuda`` the GPU reads and writes the very same
pages over PCIe, with no copy in either direction.

    from greenboost_zerocopy import Device, KVCache
    with Device() as gb:
        cache = KVCache(gb, layers=32, max_tokens=32768, kv_heads=8, head_dim=128)
        k, v = cache.layer(0)           # torch tensors (or numpy arrays without torch)

The ioctl ABI is abi/greenboost.h (the Rust crate abi/ is the one definition);
examples/python/test_zerocopy.py checks this file against it.
"""

import fcntl
import mmap
import os
import struct
from collections import namedtuple

ABI_VERSION = 1
DEVICE_PATH = "/dev/greenboost"
CHUNK_SIZE = 2 << 20
ALLOC_NODE_STRICT = 1 << 0

# --- ioctl encoding (asm-generic: x86_64, arm64, riscv) --------------------------------
_IOC_MAGIC = 0xB7
_IOC_WRITE = 1
_IOC_READ = 2


def _ioc(direction, number, size):
    return (direction << 30) | (size << 16) | (_IOC_MAGIC << 8) | number


# --- structs: (field, struct code) in declaration order; padding is explicit ---------
# "=" means native byte order with no implicit padding: every layout below is already
# naturally aligned, as the ABI requires, so it equals the C layout.
STRUCTS = {
    "gb_info": (("abi_version", "I"), ("features", "I"), ("chunk_size", "Q"), ("pool_cap", "Q"),
                ("reserve", "Q"), ("uid_cap", "Q"), ("cache_target", "Q"), ("max_alloc", "Q")),
    "gb_alloc": (("size", "Q"), ("flags", "I"), ("numa_node", "i"), ("fd", "i"), ("pad0", "I"),
                 ("buffer_id", "Q"), ("alloc_size", "Q")),
    "gb_pool_stats": (("t2_used", "Q"), ("t2_cached", "Q"), ("t2_cap", "Q"), ("t2_peak", "Q"),
                      ("t1_reported", "Q"), ("t3_used", "Q"), ("buffers", "Q"), ("allocs", "Q"),
                      ("alloc_failures", "Q"), ("free_ram", "Q"), ("pressure", "I"), ("pad0", "I")),
    "gb_proc_stats": (("pid", "i"), ("uid", "I"), ("t2_used", "Q"), ("t2_peak", "Q"),
                      ("buffers", "Q"), ("t1_reported", "Q")),
    "gb_t1_report": (("vram_used", "Q"), ("vram_budget", "Q")),
    "gb_eventfd": (("fd", "i"), ("flags", "I")),
}
LAYOUTS = {name: struct.Struct("=" + "".join(code for _, code in fields)) for name, fields in STRUCTS.items()}
RECORDS = {name: namedtuple(name, [f for f, _ in fields]) for name, fields in STRUCTS.items()}


def field_offsets(name):
    """{field: byte offset} of a struct, for checking against the C header."""
    offsets, fmt = {}, "="
    for field, code in STRUCTS[name]:
        offsets[field] = struct.calcsize(fmt)
        fmt += code
    return offsets


IOCTLS = {
    "GB_IOC_INFO": _ioc(_IOC_READ, 0x00, LAYOUTS["gb_info"].size),
    "GB_IOC_ALLOC": _ioc(_IOC_READ | _IOC_WRITE, 0x01, LAYOUTS["gb_alloc"].size),
    "GB_IOC_POOL_STATS": _ioc(_IOC_READ, 0x02, LAYOUTS["gb_pool_stats"].size),
    "GB_IOC_PROC_STATS": _ioc(_IOC_READ, 0x03, LAYOUTS["gb_proc_stats"].size),
    "GB_IOC_REPORT_T1": _ioc(_IOC_WRITE, 0x04, LAYOUTS["gb_t1_report"].size),
    "GB_IOC_REGISTER_EVENTFD": _ioc(_IOC_WRITE, 0x05, LAYOUTS["gb_eventfd"].size),
}


class GreenBoostError(OSError):
    """An ioctl or open failed; the message says what to do about it."""


def _explain(error, what):
    hints = {
        2: "the greenboost module is not loaded (sudo modprobe greenboost; `greenboost doctor` says why it may not load)",
        13: "you may not open /dev/greenboost: join the greenboost group (sudo usermod -aG greenboost $USER) and log in again",
        12: "the module refused the allocation: T2 cap, per-user cap, or free RAM below the module's reserve (greenboost status shows which)",
        22: "invalid argument (size 0, unknown flag, or a NUMA node that is not online)",
        7: "larger than the module's largest allocation (see Device.info().max_alloc)",
    }
    hint = hints.get(error.errno, os.strerror(error.errno or 0))
    return GreenBoostError(error.errno, f"{what}: {hint}")


class Buffer:
    """One pinned T2 buffer: a DMA-BUF fd and its shared mapping.

    Views (``numpy``, ``torch``) share the memory; keep the Buffer alive while they are
    in use. ``close`` fails with BufferError while views still exist (Python's mmap
    refuses to unmap memory that is still exported), which is what keeps it safe.
    """

    def __init__(self, fd, buffer_id, size):
        self.fd = fd
        self.id = buffer_id
        self.size = size
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._cuda_registered = False

    def memoryview(self):
        return memoryview(self._map)

    def address(self):
        """The host address of the mapping (for cudaHostRegister and friends)."""
        import ctypes

        anchor = ctypes.c_char.from_buffer(self._map)
        address = ctypes.addressof(anchor)
        del anchor
        return address

    def numpy(self, dtype="uint8", shape=None, offset=0):
        import numpy as np

        dtype = np.dtype(dtype)
        count = (self.size - offset) // dtype.itemsize if shape is None else int(np.prod(shape))
        array = np.frombuffer(self._map, dtype=dtype, count=count, offset=offset)
        return array if shape is None else array.reshape(shape)

    def torch(self, dtype=None, shape=None, offset=0):
        import torch

        dtype = dtype or torch.uint8
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = (self.size - offset) // itemsize if shape is None else _product(shape)
        tensor = torch.frombuffer(self._map, dtype=dtype, count=count, offset=offset)
        return tensor if shape is None else tensor.view(*shape)

    def register_with_cuda(self):
        """Pins the mapping for the GPU (cudaHostRegister, portable + mapped), so that CUDA
        kernels read it over PCIe. The module's mapping consists of real pages, which
        the driver accepts (the same path the GreenBoost shim takes)."""
        import torch

        cudart = torch.cuda.cudart()
        flags = 0x01 | 0x02  # cudaHostRegisterPortable | cudaHostRegisterMapped
        err = cudart.cudaHostRegister(self.address(), self.size, flags)
        if int(err) != 0:
            raise GreenBoostError(0, f"cudaHostRegister of buffer {self.id} failed with CUDA error {int(err)}")
        self._cuda_registered = True

    def cuda_tensor(self, dtype=None, shape=None, offset=0, device=0):
        """A CUDA tensor over the same pages (zero-copy): writes from either side are
        seen by the other after the usual synchronisation. Needs ``register_with_cuda``
        first; uses the unified address space (the device address is the host address,
        as on every 64-bit CUDA platform)."""
        import torch

        if not self._cuda_registered:
            raise GreenBoostError(0, "call register_with_cuda() before cuda_tensor()")
        dtype = dtype or torch.uint8
        host = self.torch(dtype, shape, offset)
        typestr = {torch.float16: "<f2", torch.bfloat16: "<i2", torch.float32: "<f4", torch.float64: "<f8",
                   torch.uint8: "|u1", torch.int8: "|i1", torch.int16: "<i2", torch.int32: "<i4",
                   torch.int64: "<i8"}[dtype]

        class _CudaArray:
            __cuda_array_interface__ = {
                "shape": tuple(host.shape),
                "typestr": typestr,
                "data": (self.address() + offset, False),
                "version": 3,
                "strides": None,
            }

        with torch.cuda.device(device):
            tensor = torch.as_tensor(_CudaArray(), device=f"cuda:{device}")
        # bfloat16 has no array-interface type code: it travels as int16 bits.
        return tensor.view(dtype) if dtype is torch.bfloat16 else tensor

    def close(self):
        if self._cuda_registered:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self.address())
            self._cuda_registered = False
        self._map.close()
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _product(shape):
    result = 1
    for extent in shape:
        result *= int(extent)
    return result


class Device:
    """An open /dev/greenboost. Buffers outlive it (each is its own DMA-BUF fd)."""

    def __init__(self, path=DEVICE_PATH):
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as error:
            raise _explain(error, f"cannot open {path}") from None
        try:
            info = self.info()
            if info.abi_version != ABI_VERSION:
                raise GreenBoostError(0, f"the module speaks ABI {info.abi_version}, this example ABI {ABI_VERSION}")
        except BaseException:
            os.close(self.fd)
            raise

    def _read(self, name, command):
        layout = LAYOUTS[name]
        buffer = bytearray(layout.size)
        try:
            fcntl.ioctl(self.fd, IOCTLS[command], buffer, True)
        except OSError as error:
            raise _explain(error, command) from None
        return RECORDS[name]._make(layout.unpack(buffer))

    def info(self):
        return self._read("gb_info", "GB_IOC_INFO")

    def pool_stats(self):
        return self._read("gb_pool_stats", "GB_IOC_POOL_STATS")

    def proc_stats(self):
        return self._read("gb_proc_stats", "GB_IOC_PROC_STATS")

    def alloc(self, size, numa_node=-1, strict=False):
        """Allocates ``size`` bytes (rounded up to the page size) of pinned RAM."""
        layout = LAYOUTS["gb_alloc"]
        request = bytearray(layout.pack(size, ALLOC_NODE_STRICT if strict else 0, numa_node, -1, 0, 0, 0))
        try:
            fcntl.ioctl(self.fd, IOCTLS["GB_IOC_ALLOC"], request, True)
        except OSError as error:
            raise _explain(error, f"GB_IOC_ALLOC of {size} bytes") from None
        reply = RECORDS["gb_alloc"]._make(layout.unpack(request))
        try:
            return Buffer(reply.fd, reply.buffer_id, reply.alloc_size)
        except BaseException:
            os.close(reply.fd)
            raise

    def close(self):
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class KVCache:
    """Per-layer K and V tensors in GreenBoost buffers, shaped like ExLlamaV3's cache
    layers: ``[2, max_tokens, kv_heads, head_dim]`` (K at index 0, V at 1). One buffer
    per layer, so layers can be freed or moved independently."""

    def __init__(self, device, layers, max_tokens, kv_heads, head_dim, dtype=None):
        try:
            import torch

            self._dtype = dtype or torch.float16
            itemsize = torch.empty((), dtype=self._dtype).element_size()
        except ImportError:
            import numpy as np

            self._dtype = np.dtype(dtype or "float16")
            itemsize = self._dtype.itemsize
        self.shape = (2, max_tokens, kv_heads, head_dim)
        self.layer_bytes = 2 * max_tokens * kv_heads * head_dim * itemsize
        self.buffers = []
        try:
            for _ in range(layers):
                self.buffers.append(device.alloc(self.layer_bytes))
        except BaseException:
            self.close()
            raise

    def layer(self, index):
        """(K, V) views of layer ``index``: torch tensors, or numpy arrays without torch."""
        buffer = self.buffers[index]
        try:
            import torch  # noqa: F401

            kv = buffer.torch(self._dtype, self.shape)
        except ImportError:
            kv = buffer.numpy(self._dtype, self.shape)
        return kv[0], kv[1]

    def close(self):
        while self.buffers:
            self.buffers.pop().close()


if __name__ == "__main__":
    with Device() as gb:
        info = gb.info()
        print(f"GreenBoost ABI {info.abi_version}: T2 cap {info.pool_cap >> 20} MiB, reserve {info.reserve >> 20} MiB")
        with gb.alloc(64 << 20) as buffer:
            view = buffer.memoryview()
            view[:5] = b"hello"
            print(f"buffer {buffer.id}: {buffer.size >> 20} MiB mapped at {buffer.address():#x}, starts with {bytes(view[:5])!r}")
            view.release()
            print("this process now holds", gb.proc_stats().t2_used >> 20, "MiB of T2")
