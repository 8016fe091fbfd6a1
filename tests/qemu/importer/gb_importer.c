// SPDX-License-Identifier: GPL-2.0
/*
 * gb_importer: a test-only DMA-BUF importer for the GreenBoost QEMU suite.
 *
 * The one ioctl takes a DMA-BUF fd and does what a device driver importing it would do:
 * attach to our own device, map the attachment (the exporter builds and DMA-maps the sg
 * table), walk the table, read the buffer's first and last words through the sg pages
 * and through dma_buf_vmap, then undo everything. The figures go back to userspace,
 * which compares them with what GB_IOC_ALLOC promised. Built for tests, never installed.
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/iosys-map.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/uaccess.h>

#include "gb_importer.h"

static struct miscdevice gb_importer_dev;

static u64 read_u64_at_page(struct page *page, size_t offset)
{
	void *vaddr = kmap_local_page(page);
	u64 val = *(u64 *)(vaddr + offset);

	kunmap_local(vaddr);
	return val;
}

static void walk_sg(struct sg_table *sgt, struct gb_importer_check *out)
{
	struct scatterlist *sg;
	unsigned int i;

	out->cpu_nents = sgt->orig_nents;
	out->dma_nents = sgt->nents;
	out->min_seg = U64_MAX;
	out->all_page_multiple = 1;
	for_each_sgtable_sg(sgt, sg, i) {
		out->cpu_total += sg->length;
		out->min_seg = min_t(u64, out->min_seg, sg->length);
		out->max_seg = max_t(u64, out->max_seg, sg->length);
		if (!PAGE_ALIGNED(sg->offset) || !PAGE_ALIGNED(sg->length))
			out->all_page_multiple = 0;
		if (i == 0 && sg->length >= sizeof(u64))
			out->sg_first = read_u64_at_page(sg_page(sg), sg->offset);
		if (i == sgt->orig_nents - 1 && sg->length >= sizeof(u64)) {
			size_t last = sg->offset + sg->length - sizeof(u64);

			out->sg_last = read_u64_at_page(nth_page(sg_page(sg), last >> PAGE_SHIFT),
							offset_in_page(last));
		}
	}
	if (!sgt->orig_nents)
		out->min_seg = 0;
	for_each_sgtable_dma_sg(sgt, sg, i)
		out->dma_total += sg_dma_len(sg);
}

static void try_vmap(struct dma_buf *buf, struct gb_importer_check *out)
{
	struct iosys_map map;
	int ret = dma_buf_vmap_unlocked(buf, &map);

	if (ret) {
		out->vmap_err = ret;
		return;
	}
	out->vmap_ok = 1;
	if (buf->size >= sizeof(u64)) {
		iosys_map_memcpy_from(&out->vmap_first, &map, 0, sizeof(u64));
		iosys_map_memcpy_from(&out->vmap_last, &map, buf->size - sizeof(u64), sizeof(u64));
	}
	dma_buf_vunmap_unlocked(buf, &map);
}

static int check_dmabuf(struct gb_importer_check *out)
{
	struct device *dev = gb_importer_dev.this_device;
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
	struct dma_buf *buf;
	int ret;

	buf = dma_buf_get(out->fd);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	out->dmabuf_size = buf->size;

	attach = dma_buf_attach(buf, dev);
	if (IS_ERR(attach)) {
		ret = PTR_ERR(attach);
		goto put;
	}
	sgt = dma_buf_map_attachment_unlocked(attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto detach;
	}
	ret = dma_buf_begin_cpu_access(buf, DMA_FROM_DEVICE);
	if (!ret) {
		walk_sg(sgt, out);
		ret = dma_buf_end_cpu_access(buf, DMA_FROM_DEVICE);
	}
	dma_buf_unmap_attachment_unlocked(attach, sgt, DMA_BIDIRECTIONAL);
	if (!ret)
		try_vmap(buf, out);
detach:
	dma_buf_detach(buf, attach);
put:
	dma_buf_put(buf);
	return ret;
}

static long gb_importer_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct gb_importer_check check = {};
	void __user *uarg = (void __user *)arg;
	struct { __s32 fd; __u32 flags; } in;
	int ret;

	if (cmd != GB_IMPORTER_IOC_CHECK)
		return -ENOTTY;
	if (copy_from_user(&in, uarg, sizeof(in)))
		return -EFAULT;
	if (in.flags)
		return -EINVAL;
	check.fd = in.fd;
	ret = check_dmabuf(&check);
	if (ret)
		return ret;
	return copy_to_user(uarg, &check, sizeof(check)) ? -EFAULT : 0;
}

static const struct file_operations gb_importer_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = gb_importer_ioctl,
};

static struct miscdevice gb_importer_dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "gb_importer",
	.fops = &gb_importer_fops,
	.mode = 0600,
};

static int __init gb_importer_init(void)
{
	struct device *dev;
	int ret = misc_register(&gb_importer_dev);

	if (ret)
		return ret;
	/*
	 * A misc device has no DMA mask; the DMA API refuses (with a WARN) to map for a
	 * device without one. Give ours a 64-bit mask so exporters can dma_map the sg table.
	 */
	dev = gb_importer_dev.this_device;
	dev->dma_mask = &dev->coherent_dma_mask;
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret) {
		misc_deregister(&gb_importer_dev);
		return ret;
	}
	return 0;
}

static void __exit gb_importer_exit(void)
{
	misc_deregister(&gb_importer_dev);
}

module_init(gb_importer_init);
module_exit(gb_importer_exit);
MODULE_DESCRIPTION("GreenBoost test-only DMA-BUF importer (QEMU suite)");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS(DMA_BUF);
