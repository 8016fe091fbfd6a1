/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ABI of the test-only /dev/gb_importer device (tests/qemu/importer), mirrored by
 * tests/qemu/guest/src/importer.rs. Test infrastructure: not part of the GreenBoost ABI.
 */
#ifndef GB_IMPORTER_H
#define GB_IMPORTER_H

#include <linux/ioctl.h>
#include <linux/types.h>

struct gb_importer_check {
	__s32 fd;		/* in: a DMA-BUF fd */
	__u32 flags;		/* in: must be 0 */
	__u64 dmabuf_size;	/* out: dma_buf->size */
	__u64 cpu_total;	/* out: sum of sg->length over orig_nents */
	__u64 cpu_nents;	/* out: orig_nents */
	__u64 dma_total;	/* out: sum of sg_dma_len over nents */
	__u64 dma_nents;	/* out: nents after DMA mapping */
	__u64 min_seg;		/* out: shortest CPU segment */
	__u64 max_seg;		/* out: longest CPU segment */
	__u32 all_page_multiple; /* out: 1 if every segment offset/length is page aligned */
	__u32 vmap_ok;		/* out: 1 if dma_buf_vmap worked */
	__s32 vmap_err;		/* out: its error otherwise */
	__s32 map2_err;		/* out (MAP_TWICE): what a second map of the mapped attachment got */
	__u64 sg_first;		/* out: first u64 of the buffer, read through the sg pages */
	__u64 sg_last;		/* out: last u64 of the buffer, read through the sg pages */
	__u64 vmap_first;	/* out: first u64 of the buffer, read through the vmap */
	__u64 vmap_last;	/* out: last u64 of the buffer, read through the vmap */
	__u64 seg_limit;	/* out: dma_get_max_seg_size of the device used */
	__u64 map_limit;	/* out: dma_max_mapping_size of the device used */
	__u64 max_dma_seg;	/* out: longest DMA segment */
	__u32 bounced;		/* out: 1 if the first segment's DMA address is not its page */
	__u32 attachments;	/* out: attachments mapped at once */
	__u64 dev_saw;		/* out (SYNC): word 0 as the device reads it after end_cpu_access */
	__u64 cpu_saw;		/* out (SYNC): last word as the CPU reads it after begin_cpu_access */
};

/* flags */
#define GB_IMPORTER_SEG_64K	(1U << 0) /* the device takes DMA segments of 64 KiB at most */
#define GB_IMPORTER_ATTACH3	(1U << 1) /* three attachments mapped at once */
#define GB_IMPORTER_SYNC	(1U << 2) /* CPU/device writes across begin/end_cpu_access */
#define GB_IMPORTER_HOLD	(1U << 3) /* keep one attachment mapped and a vmap afterwards */
#define GB_IMPORTER_RELEASE	(1U << 4) /* drop what HOLD kept (fd unused); vmap_first read first */
#define GB_IMPORTER_MAP_TWICE	(1U << 5) /* map the first attachment a second time while mapped */
#define GB_IMPORTER_FLAGS_ALL	0x3fU

/* what SYNC writes: the CPU into word 0, the device into the last word */
#define GB_IMPORTER_CPU_MARK	0xc0ffee00c0ffee00ULL
#define GB_IMPORTER_DEV_MARK	0xdec0de00dec0de00ULL

#define GB_IMPORTER_IOC_CHECK _IOWR(0xB8, 0x01, struct gb_importer_check)

#endif
