"""Zero-copy GreenBoost buffers in Python: numpy arrays and PyTorch tensors whose memory
is pinned system RAM handed out by the greenboost kernel module (tier T2), or swappable
pages (tier T3) for data the GPU does not need now.

The CPU writes and reads a buffer as an ordinary numpy array or torch CPU tensor, and
after ``register_with_cuda`` the GPU reads and writes the very same pages over PCIe,
with no copy in either direction. KV caches built on these buffers are in
greenboost.kvcache.

The ioctl ABI is abi/greenboost.h (the Rust crate abi/ is the one definition);
examples/python/test_zerocopy.py checks this module against it.
"""

import errno
import fcntl
import mmap
import os
import struct
from collections import namedtuple

ABI_VERSION = 1
DEVICE_PATH = "/dev/greenboost"
CHUNK_SIZE = 2 << 20
ALLOC_NODE_STRICT = 1 << 0
ALLOC_T3 = 1 << 1
INFO_T3 = 1 << 3
TIER_T2 = 2
TIER_T3 = 3

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
    "gb_move": (("fd", "i"), ("tier", "I"), ("flags", "I"), ("pad0", "I"), ("buffer_id", "Q"), ("moved", "Q")),
    "gb_t3_stats": (("t3_used", "Q"), ("t3_resident", "Q"), ("t3_swapped", "Q"), ("t3_buffers", "Q"),
                    ("t3_cap", "Q"), ("t3_peak", "Q"), ("swap_free", "Q"), ("moves_to_t3", "Q"),
                    ("moves_to_t2", "Q"), ("moved_bytes", "Q"), ("move_ns", "Q"), ("move_refusals", "Q")),
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
    "GB_IOC_MOVE": _ioc(_IOC_READ | _IOC_WRITE, 0x07, LAYOUTS["gb_move"].size),
    "GB_IOC_T3_STATS": _ioc(_IOC_READ, 0x08, LAYOUTS["gb_t3_stats"].size),
}


class GreenBoostError(OSError):
    """An ioctl or open failed; the message says what to do about it."""


_HINTS = {
    errno.ENOENT: "the greenboost module is not loaded (sudo modprobe greenboost; `greenboost doctor` says why it may not load)",
    errno.EACCES: "you may not open /dev/greenboost: join the greenboost group (sudo usermod -aG greenboost $USER) and log in again",
    errno.ENOMEM: "the module refused the allocation: T2 cap, per-user cap, or free RAM below the module's reserve (greenboost status shows which)",
    errno.EINVAL: "invalid argument (size 0, unknown flag, or a NUMA node that is not online)",
    errno.E2BIG: "larger than the module's largest allocation (see Device.info().max_alloc)",
}
_NO_T3 = "this greenboost module has no T3 (GB_INFO_T3 is not set: Device.has_t3 is False); load a newer module"
_T3_FULL = ("T3 has no room: T3 pages are backed by swap, and the bytes of all T3 buffers must fit in the swap "
            "that others do not use (add swap with `greenboost swap add`; Device.t3_stats().t3_cap is the room)")
_MOVE_HINTS = {
    errno.EBUSY: ("the buffer is in use: attached for DMA, vmapped, or its pages pinned by someone else "
                  "(cudaHostRegister, io_uring); unregister it first (cudaHostUnregister) and move again"),
    errno.EINVAL: "not a greenboost buffer, or a tier other than TIER_T2 and TIER_T3",
    errno.EBADF: "the buffer's fd is closed, or /dev/greenboost was opened read-only",
    errno.EINTR: "interrupted by a signal; move again",
    errno.ENOTTY: _NO_T3,
}


def _explain(error, what, hints=None):
    """A GreenBoostError for a failed call: ``hints`` (errno -> advice) are specific to
    the call and take precedence over the general ones."""
    hint = (hints or {}).get(error.errno) or _HINTS.get(error.errno) or os.strerror(error.errno or 0)
    return GreenBoostError(error.errno, f"{what}: {hint}")


class Buffer:
    """One GreenBoost buffer: a DMA-BUF fd and its shared mapping, in T2 (pinned) or T3
    (swappable), see ``move``.

    Views (``numpy``, ``torch``) share the memory; keep the Buffer alive while they are
    in use. ``close`` fails with BufferError while views still exist (Python's mmap
    refuses to unmap memory that is still exported), which is what keeps it safe.
    ``device`` is the Device that allocated it, through which it moves (None for a
    buffer made from some other fd, which cannot move).
    """

    def __init__(self, fd, buffer_id, size, device=None, tier=TIER_T2):
        self.fd = fd
        self.id = buffer_id
        self.size = size
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._cuda_registered = False
        self._device = device
        self._tier = tier

    @property
    def tier(self):
        """TIER_T2 or TIER_T3: where the buffer was allocated or last moved."""
        return self._tier

    def move(self, tier):
        """Moves the buffer to ``tier`` and returns the bytes the kernel copied (0 when it
        was there already). The contents, the fd and this mapping survive: numpy and
        torch views taken before the move stay valid and see the same data (the mapping
        faults the new pages in).

        TIER_T2 is pinned RAM, the only tier the GPU reads; TIER_T3 is swappable, for
        data only the CPU touches or nobody touches for a while. The kernel refuses to
        move pages someone has pinned, so a buffer that ``register_with_cuda`` registered
        is unregistered from CUDA before it moves to T3: its ``cuda_tensor`` views must
        not be used after that, and after moving back to T2 it must be registered again.
        (If the move then fails, it stays unregistered.) Pins made by others are not
        this object's to drop: the move fails with EBUSY and the buffer stays where it
        was. Failures are GreenBoostErrors that say why (ENOMEM: no room in the tier).
        """
        if self._device is None:
            raise GreenBoostError(errno.EINVAL, f"buffer {self.id} was not allocated from a Device: it cannot move")
        if tier == TIER_T3 and self._cuda_registered:
            self._unregister_from_cuda()
        reply = self._device._move(self.fd, tier, f"GB_IOC_MOVE of buffer {self.id} to T{tier}")
        self._tier = tier
        return reply.moved

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
        the driver accepts (the same path the GreenBoost shim takes). A T3 buffer is
        refused: pinning it for the GPU is what T2 is for (``move(TIER_T2)`` first)."""
        if self._tier == TIER_T3:
            raise GreenBoostError(0, f"buffer {self.id} is in T3, which the GPU does not read: move(TIER_T2) first")
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

    def _unregister_from_cuda(self):
        import torch

        torch.cuda.cudart().cudaHostUnregister(self.address())
        self._cuda_registered = False

    def close(self):
        if self._cuda_registered:
            self._unregister_from_cuda()
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
    """An open /dev/greenboost. Buffers outlive it (each is its own DMA-BUF fd), but
    they move through it, so keep it open while buffers may move.

    ``ioctl`` is the call that reaches the kernel, ``fcntl.ioctl``'s signature; tests
    pass a fake to exercise everything above it without the module. ``has_t3`` says
    whether the module has T3 (``alloc(t3=True)``, ``Buffer.move``, ``t3_stats``).
    """

    def __init__(self, path=DEVICE_PATH, ioctl=fcntl.ioctl):
        self._ioctl = ioctl
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as error:
            raise _explain(error, f"cannot open {path}") from None
        try:
            info = self.info()
            if info.abi_version != ABI_VERSION:
                raise GreenBoostError(0, f"the module speaks ABI {info.abi_version}, this package ABI {ABI_VERSION}")
        except BaseException:
            os.close(self.fd)
            raise
        self.has_t3 = bool(info.features & INFO_T3)

    def _call(self, command, name, fields, what, hints=None):
        """Issues ``command`` with struct ``name`` packed from ``fields`` and returns the
        struct the kernel wrote back, as a record."""
        layout = LAYOUTS[name]
        request = bytearray(layout.pack(*fields))
        try:
            self._ioctl(self.fd, IOCTLS[command], request, True)
        except OSError as error:
            raise _explain(error, what, hints) from None
        return RECORDS[name]._make(layout.unpack(request))

    def _read(self, name, command, hints=None):
        return self._call(command, name, [0] * len(STRUCTS[name]), command, hints)

    def info(self):
        return self._read("gb_info", "GB_IOC_INFO")

    def pool_stats(self):
        return self._read("gb_pool_stats", "GB_IOC_POOL_STATS")

    def proc_stats(self):
        return self._read("gb_proc_stats", "GB_IOC_PROC_STATS")

    def t3_stats(self):
        """The T3 tier and the swap behind it (module-wide)."""
        return self._read("gb_t3_stats", "GB_IOC_T3_STATS", {errno.ENOTTY: _NO_T3})

    def alloc(self, size, numa_node=-1, strict=False, t3=False):
        """Allocates ``size`` bytes (rounded up to the page size) of pinned RAM, or with
        ``t3`` of swappable T3 pages (allocated on first touch; the NUMA arguments then
        apply once the buffer moves to T2)."""
        flags = (ALLOC_NODE_STRICT if strict else 0) | (ALLOC_T3 if t3 else 0)
        hints = None
        if t3:
            hints = {errno.ENOMEM: _T3_FULL,
                     errno.EINVAL: f"invalid argument (size 0, a NUMA node that is not online, or {_NO_T3})"}
        reply = self._call("GB_IOC_ALLOC", "gb_alloc", (size, flags, numa_node, -1, 0, 0, 0),
                           f"GB_IOC_ALLOC of {size} bytes{' in T3' if t3 else ''}", hints)
        try:
            return Buffer(reply.fd, reply.buffer_id, reply.alloc_size, self, TIER_T3 if t3 else TIER_T2)
        except BaseException:
            os.close(reply.fd)
            raise

    def _move(self, buffer_fd, tier, what):
        """GB_IOC_MOVE of the buffer behind ``buffer_fd``; ``Buffer.move`` is the API."""
        no_room = _T3_FULL if tier == TIER_T3 else (
            "T2 has no room: T2 cap, per-user cap, or free RAM below the module's reserve (greenboost status shows which)")
        return self._call("GB_IOC_MOVE", "gb_move", (buffer_fd, tier, 0, 0, 0, 0), what,
                          {**_MOVE_HINTS, errno.ENOMEM: no_room})

    def close(self):
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

