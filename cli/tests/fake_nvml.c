/* A stand-in libnvidia-ml.so.1 for `greenboost status` tests: two GPUs, one with a
 * full PCIe link and two processes (one with no memory figure), one whose bus id and
 * link width NVML does not give. Built by tests/status_nvml.rs with the system's cc. */
#include <stdint.h>
#include <string.h>

typedef void *handle_t;
struct memory_v2 { unsigned version; uint64_t total, reserved, free, used; };
struct pci { char legacy[16]; unsigned domain, bus, device, id, subsystem; char bus_id[32]; };
struct process { unsigned pid; uint64_t used; unsigned gi, ci; };

static unsigned index_of(handle_t h) { return (unsigned)(uintptr_t)h - 1; }

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *b, unsigned n) { strncpy(b, "550.54.15", n); return 0; }
int nvmlDeviceGetCount_v2(unsigned *c) { *c = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, handle_t *h) { *h = (handle_t)(uintptr_t)(i + 1); return 0; }
int nvmlDeviceGetName(handle_t h, char *b, unsigned n) {
    strncpy(b, index_of(h) == 0 ? "NVIDIA H200" : "NVIDIA RTX 4090 with a long name", n);
    return 0;
}
int nvmlDeviceGetMemoryInfo_v2(handle_t h, struct memory_v2 *m) {
    if (m->version != (sizeof(struct memory_v2) | 2u << 24)) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    /* Not free: 1.5 GiB (GPU 0) or 3 GiB (GPU 1), 512 MiB of it the driver's reservation. */
    m->total = (uint64_t)(index_of(h) + 1) * 80 << 30;
    m->reserved = 1 << 29;
    m->used = ((uint64_t)(index_of(h) + 1) * 3 << 29) - m->reserved;
    m->free = m->total - m->used - m->reserved;
    return 0;
}
int nvmlDeviceGetPciInfo_v3(handle_t h, struct pci *p) {
    if (index_of(h) == 1) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    strcpy(p->bus_id, "00000000:19:00.0");
    return 0;
}
int nvmlDeviceGetCurrPcieLinkGeneration(handle_t h, unsigned *v) { (void)h; *v = 4; return 0; }
int nvmlDeviceGetMaxPcieLinkGeneration(handle_t h, unsigned *v) { (void)h; *v = 5; return 0; }
int nvmlDeviceGetCurrPcieLinkWidth(handle_t h, unsigned *v) { if (index_of(h) == 1) return 3; *v = 16; return 0; }
int nvmlDeviceGetMaxPcieLinkWidth(handle_t h, unsigned *v) { (void)h; *v = 16; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(handle_t h, unsigned *n, struct process *p) {
    if (index_of(h) == 1) { *n = 0; return 0; }
    if (*n < 2) { *n = 2; return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */ }
    *n = 2;
    p[0].pid = 123; p[0].used = 5ull << 30;
    p[1].pid = 999; p[1].used = ~0ull; /* NVML_VALUE_NOT_AVAILABLE */
    return 0;
}
