"""Moving memory between VRAM and host RAM at the same device address, two ways (issue 36
item 1, "measure your choice"; issue 34's room made): the shim's managed memory, moved by
the driver's prefetch, against VMM memory (cuMemCreate), whose physical backing the shim
would swap itself: the bytes copied on a copy engine into host-NUMA memory mapped at a
staging address, then the device address unmapped and mapped to that host memory (and
back). The VMM way needs the range idle while it is remapped (a kernel reading it then
would fault), the managed way does not; what each costs is what this measures.

  python3 bench/probes/vmm_swap_probe.py [GIB [PIECE_MIB]]   (defaults 4 and 64; one JSON line)

For cuMemAlloc memory (the reference), managed memory and VMM memory of GIB: the GPU's
read rate in VRAM (a kernel XOR-ing every 16-byte word), the move to the host (GB/s; for
VMM also the making of the new memory, the copy and the remapping apart: memory made
ahead would leave the copy and the remapping), the read rate over the link, the move back, and
whether every byte survived both moves (the XOR of the buffer before and after). Runs
without the shim.
"""

import ctypes
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gbgpu.managed import LOCATION_DEVICE, LOCATION_HOST, Driver, Location  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
LOCATION_HOST_NUMA = 3
CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID = 134
PROT_READWRITE = 3

KERNELS = r"""
extern "C" __global__ void fill(unsigned long long *p, unsigned long long words, unsigned long long seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < words;
         i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = (i + seed) * 0x9e3779b97f4a7c15ULL;
}
extern "C" __global__ void xor_read(const ulonglong2 *p, unsigned long long pairs, unsigned long long *out) {
    unsigned long long acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < pairs;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        ulonglong2 v = p[i];
        acc ^= v.x ^ v.y;
    }
    atomicXor(out, acc);
}
"""


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    """CUmemAllocationProp: pinned memory at a location, no shareable handle."""

    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


class Probe:
    def __init__(self, size, piece):
        self.driver = Driver()
        self.cupy = self.driver.cupy
        self.cuda = self.driver.cuda
        self.size, self.piece = size, piece
        module = self.cupy.RawModule(code=KERNELS)
        self.fill_kernel, self.read_kernel = module.get_function("fill"), module.get_function("xor_read")
        self.sms = self.cupy.cuda.Device(0).attributes["MultiProcessorCount"]
        node = ctypes.c_int(-1)
        self.cuda.cuDeviceGetAttribute(ctypes.byref(node), CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0)
        self.numa = max(node.value, 0)
        self.stream = self.cupy.cuda.Stream(non_blocking=True)

    def check(self, status, what):
        self.driver.check(status, what)

    def fill(self, ptr, seed):
        words = self.size // 8
        self.fill_kernel((self.sms * 8,), (512,), (self.cupy.uint64(ptr), self.cupy.uint64(words),
                                                    self.cupy.uint64(seed)))
        self.driver.sync()

    def read(self, ptr):
        """(XOR of every word, best GB/s of three reads)."""
        out = self.cupy.zeros(1, dtype=self.cupy.uint64)
        best = 0.0
        for _ in range(3):
            out.fill(0)
            start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            start.record()
            self.read_kernel((self.sms * 8,), (512,), (self.cupy.uint64(ptr), self.cupy.uint64(self.size // 16), out))
            end.record()
            end.synchronize()
            best = max(best, self.size / (self.cupy.cuda.get_elapsed_time(start, end) / 1e3) / 1e9)
        return int(out[0]), round(best, 1)

    def timed(self, action):
        self.driver.sync()
        began = time.perf_counter()
        action()
        self.stream.synchronize()
        self.driver.sync()
        return time.perf_counter() - began

    def rate(self, seconds):
        return round(self.size / seconds / 1e9, 2)

    # -- the reference: cuMemAlloc memory ------------------------------------------------
    def plain(self, out):
        ptr = ctypes.c_uint64()
        self.check(self.cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(self.size)), "cuMemAlloc")
        self.fill(ptr.value, 1)
        out["plain_xor"], out["plain_read_gbps"] = self.read(ptr.value)
        self.driver.release([ptr.value])

    # -- managed memory, moved by prefetch -------------------------------------------------
    def managed(self, out):
        driver = self.driver
        ptr = driver.managed(self.size, 0)
        self.fill(ptr, 1)
        moved = self.timed(lambda: driver.prefetch(ptr, self.size, LOCATION_DEVICE, self.stream.ptr))
        out["managed_to_vram_gbps"] = self.rate(moved)
        before, out["managed_vram_read_gbps"] = self.read(ptr)
        moved = self.timed(lambda: driver.prefetch(ptr, self.size, LOCATION_HOST, self.stream.ptr))
        out["managed_to_host_gbps"] = self.rate(moved)
        on_host, out["managed_host_read_gbps"] = self.read(ptr)
        moved = self.timed(lambda: driver.prefetch(ptr, self.size, LOCATION_DEVICE, self.stream.ptr))
        out["managed_back_to_vram_gbps"] = self.rate(moved)
        back, _ = self.read(ptr)
        out["managed_bytes_kept"] = before == on_host == back
        driver.release([ptr])

    # -- VMM memory, its backing swapped ---------------------------------------------------
    def create(self, location):
        prop = AllocationProp(type=1, requestedHandleTypes=0, location=location)
        handle = ctypes.c_uint64()
        self.check(self.cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(self.piece), ctypes.byref(prop),
                                         ctypes.c_ulonglong(0)), "cuMemCreate")
        return handle.value

    def map(self, at, handle):
        self.check(self.cuda.cuMemMap(ctypes.c_uint64(at), ctypes.c_size_t(self.piece), ctypes.c_size_t(0),
                                      ctypes.c_uint64(handle), ctypes.c_ulonglong(0)), "cuMemMap")
        access = AccessDesc(location=Location(LOCATION_DEVICE, 0), flags=PROT_READWRITE)
        self.check(self.cuda.cuMemSetAccess(ctypes.c_uint64(at), ctypes.c_size_t(self.piece), ctypes.byref(access),
                                            ctypes.c_size_t(1)), "cuMemSetAccess")

    def unmap(self, at):
        self.check(self.cuda.cuMemUnmap(ctypes.c_uint64(at), ctypes.c_size_t(self.piece)), "cuMemUnmap")

    def reserve(self):
        at = ctypes.c_uint64()
        self.check(self.cuda.cuMemAddressReserve(ctypes.byref(at), ctypes.c_size_t(self.size), ctypes.c_size_t(0),
                                                 ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        return at.value

    def swap(self, main, staging, handles, location):
        """Moves every piece of `main` to new memory at `location`: made and mapped at
        `staging`, copied there, then remapped. Returns the seconds of each of the three
        and the new handles."""
        pieces = self.size // self.piece
        fresh = []

        def make():
            for k in range(pieces):
                fresh.append(self.create(location))
                self.map(staging + k * self.piece, fresh[k])

        def copy():
            for k in range(pieces):
                self.check(self.cuda.cuMemcpyDtoDAsync_v2(ctypes.c_uint64(staging + k * self.piece),
                                                          ctypes.c_uint64(main + k * self.piece),
                                                          ctypes.c_size_t(self.piece),
                                                          ctypes.c_void_p(self.stream.ptr)), "cuMemcpyDtoDAsync")

        def remap():
            for k in range(pieces):
                self.unmap(main + k * self.piece)
                self.map(main + k * self.piece, fresh[k])
                self.unmap(staging + k * self.piece)
                self.check(self.cuda.cuMemRelease(ctypes.c_uint64(handles[k])), "cuMemRelease")

        return self.timed(make), self.timed(copy), self.timed(remap), fresh

    def vmm(self, out):
        pieces = self.size // self.piece
        main, staging = self.reserve(), self.reserve()
        device, host = Location(LOCATION_DEVICE, 0), Location(LOCATION_HOST_NUMA, self.numa)
        handles = [self.create(device) for _ in range(pieces)]
        for k in range(pieces):
            self.map(main + k * self.piece, handles[k])
        self.fill(main, 1)
        before, out["vmm_vram_read_gbps"] = self.read(main)
        make_s, copy_s, remap_s, handles = self.swap(main, staging, handles, host)
        out["vmm_to_host_make_s"], out["vmm_to_host_remap_s"] = round(make_s, 4), round(remap_s, 4)
        out["vmm_to_host_copy_gbps"], out["vmm_to_host_gbps"] = self.rate(copy_s), self.rate(make_s + copy_s + remap_s)
        on_host, out["vmm_host_read_gbps"] = self.read(main)
        make_s, copy_s, remap_s, handles = self.swap(main, staging, handles, device)
        out["vmm_to_vram_make_s"], out["vmm_to_vram_remap_s"] = round(make_s, 4), round(remap_s, 4)
        out["vmm_to_vram_copy_gbps"], out["vmm_to_vram_gbps"] = self.rate(copy_s), self.rate(make_s + copy_s + remap_s)
        back, out["vmm_back_read_gbps"] = self.read(main)
        out["vmm_bytes_kept"] = before == on_host == back
        for k in range(pieces):
            self.unmap(main + k * self.piece)
            self.check(self.cuda.cuMemRelease(ctypes.c_uint64(handles[k])), "cuMemRelease")
        for at in (main, staging):
            self.check(self.cuda.cuMemAddressFree(ctypes.c_uint64(at), ctypes.c_size_t(self.size)),
                       "cuMemAddressFree")


def main():
    gib = float(sys.argv[1]) if len(sys.argv) > 1 else 4
    piece = int(sys.argv[2]) * MIB if len(sys.argv) > 2 else 64 * MIB
    size = int(gib * GIB) // piece * piece
    probe = Probe(size, piece)
    out = {"probe": "vmm_swap", "bytes": size, "piece": piece, "host_numa_node": probe.numa}
    for step in (probe.plain, probe.managed, probe.vmm):
        try:
            step(out)
        except Exception as error:  # noqa: BLE001 - the line says which step failed and why
            out[f"{step.__name__}_error"] = str(error)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
