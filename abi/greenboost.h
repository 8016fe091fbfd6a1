/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * greenboost.h - the /dev/greenboost ioctl ABI for C users.
 *
 * Mirror of abi/src/greenboost_abi.rs, which is the one definition; the test
 * abi/tests/header.rs compiles this header and checks every size, offset and
 * command number against the Rust crate. See abi/src/greenboost_abi.rs for the
 * meaning of each field.
 */
#ifndef GREENBOOST_H
#define GREENBOOST_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GB_ABI_VERSION 1
/* shared with nsfs and remoteproc; full numbers differ (abi/tests/magic_0xb7.rs) */
#define GB_IOC_MAGIC 0xB7
#define GB_CHUNK_SIZE (2ULL << 20)
#define GB_DEVICE_PATH "/dev/greenboost"
#define GB_SYSFS_STATS "/sys/kernel/greenboost/stats"

#define GB_INFO_MMAP (1U << 0)
#define GB_INFO_EVENTFD (1U << 1)
#define GB_INFO_PROC_LIST (1U << 2)
#define GB_INFO_T3 (1U << 3)

#define GB_ALLOC_NODE_STRICT (1U << 0)
#define GB_ALLOC_T3 (1U << 1)
#define GB_ALLOC_FLAGS_ALL (GB_ALLOC_NODE_STRICT | GB_ALLOC_T3)

#define GB_TIER_T2 2
#define GB_TIER_T3 3
#define GB_PROC_LIST_T3 (1U << 0)

struct gb_info {
	__u32 abi_version;
	__u32 features;
	__u64 chunk_size;
	__u64 pool_cap;
	__u64 reserve;
	__u64 uid_cap;
	__u64 cache_target;
	__u64 max_alloc;
};

struct gb_alloc {
	__u64 size;
	__u32 flags;
	__s32 numa_node;
	__s32 fd;
	__u32 pad0;
	__u64 buffer_id;
	__u64 alloc_size;
};

struct gb_pool_stats {
	__u64 t2_used;
	__u64 t2_cached;
	__u64 t2_cap;
	__u64 t2_peak;
	__u64 t1_reported;
	__u64 t3_used;
	__u64 buffers;
	__u64 allocs;
	__u64 alloc_failures;
	__u64 free_ram;
	__u32 pressure;
	__u32 pad0;
};

struct gb_proc_stats {
	__s32 pid;
	__u32 uid;
	__u64 t2_used;
	__u64 t2_peak;
	__u64 buffers;
	__u64 t1_reported;
};

struct gb_proc_row {
	__s32 pid;
	__u32 uid;
	__u64 t1_used;
	__u64 t1_budget;
	__u64 t2_used;
	__u64 t2_peak;
	__u64 buffers;
	__u64 files;
	char comm[16];
};

struct gb_proc_list {
	__u64 rows;
	__u32 capacity;
	__u32 count;
	__u32 total;
	__u32 flags;
};

struct gb_proc_row_t3 {
	struct gb_proc_row row;
	__u64 t3_used;
	__u64 t3_resident;
	__u64 t3_swapped;
	__u64 t3_buffers;
};

struct gb_move {
	__s32 fd;
	__u32 tier;
	__u32 flags;
	__u32 pad0;
	__u64 buffer_id;
	__u64 moved;
};

struct gb_t3_stats {
	__u64 t3_used;
	__u64 t3_resident;
	__u64 t3_swapped;
	__u64 t3_buffers;
	__u64 t3_cap;
	__u64 t3_peak;
	__u64 swap_free;
	__u64 moves_to_t3;
	__u64 moves_to_t2;
	__u64 moved_bytes;
	__u64 move_ns;
	__u64 move_refusals;
};

struct gb_t1_report {
	__u64 vram_used;
	__u64 vram_budget;
};

struct gb_eventfd {
	__s32 fd;
	__u32 flags;
};

#define GB_IOC_INFO _IOR(GB_IOC_MAGIC, 0x00, struct gb_info)
#define GB_IOC_ALLOC _IOWR(GB_IOC_MAGIC, 0x01, struct gb_alloc)
#define GB_IOC_POOL_STATS _IOR(GB_IOC_MAGIC, 0x02, struct gb_pool_stats)
#define GB_IOC_PROC_STATS _IOR(GB_IOC_MAGIC, 0x03, struct gb_proc_stats)
#define GB_IOC_REPORT_T1 _IOW(GB_IOC_MAGIC, 0x04, struct gb_t1_report)
#define GB_IOC_REGISTER_EVENTFD _IOW(GB_IOC_MAGIC, 0x05, struct gb_eventfd)
#define GB_IOC_LIST_PROCS _IOWR(GB_IOC_MAGIC, 0x06, struct gb_proc_list)
#define GB_IOC_MOVE _IOWR(GB_IOC_MAGIC, 0x07, struct gb_move)
#define GB_IOC_T3_STATS _IOR(GB_IOC_MAGIC, 0x08, struct gb_t3_stats)

#endif /* GREENBOOST_H */
