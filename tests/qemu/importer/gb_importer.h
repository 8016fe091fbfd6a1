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
	__u32 pad;
	__u64 sg_first;		/* out: first u64 of the buffer, read through the sg pages */
	__u64 sg_last;		/* out: last u64 of the buffer, read through the sg pages */
	__u64 vmap_first;	/* out: first u64 of the buffer, read through the vmap */
	__u64 vmap_last;	/* out: last u64 of the buffer, read through the vmap */
};

#define GB_IMPORTER_IOC_CHECK _IOWR(0xB8, 0x01, struct gb_importer_check)

#endif
