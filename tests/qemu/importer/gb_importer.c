// SPDX-License-Identifier: GPL-2.0
/*
 * gb_importer: a test-only DMA-BUF importer for the GreenBoost QEMU suite.
 *
 * The one ioctl takes a DMA-BUF fd and does what a device driver importing it would do:
 * attach to our own device, map the attachment (the exporter builds and DMA-maps the sg
 * table), walk the table, read the buffer's first and last words through the sg pages
 * and through dma_buf_vmap, then undo everything. The figures go back to userspace,
 * which compares them with what GB_IOC_ALLOC promised. Flags (gb_importer.h) make the
 * device take 64 KiB segments at most, map three attachments at once, check that
 * begin/end_cpu_access make CPU and "device" writes visible to each other (the device
 * side writes through the DMA address, which is the bounce buffer under swiotlb), or
 * keep an attachment and a vmap after the ioctl (released by a later one), so that the
 * buffer's last fd can be closed under them, or map the first attachment twice (the
 * second map's answer goes back). Built for tests, never installed.
 */
#include <linux/dma-buf.h>
#include <linux/dma-direct.h>
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/iosys-map.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/uaccess.h>

#include "gb_importer.h"

static struct miscdevice gb_importer_dev;
static struct device_dma_parameters gb_importer_parms;

/* what HOLD keeps, under held_lock */
static DEFINE_MUTEX(held_lock);
static struct dma_buf *held_buf;
static struct dma_buf_attachment *held_attach;
static struct sg_table *held_sgt;
static struct iosys_map held_map;

/* The device's view of a DMA address (no IOMMU in the guests: direct mapping). */
static u64 *dev_word(struct device *dev, dma_addr_t addr)
{
	return phys_to_virt(dma_to_phys(dev, addr));
}

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
	for_each_sgtable_dma_sg(sgt, sg, i) {
		out->dma_total += sg_dma_len(sg);
		out->max_dma_seg = max_t(u64, out->max_dma_seg, sg_dma_len(sg));
	}
	if (sgt->nents)
		out->bounced = sg_dma_address(sgt->sgl) != sg_phys(sgt->sgl);
}

/*
 * CPU writes word 0, end_cpu_access, the device reads it; the device writes the last
 * word, begin_cpu_access, the CPU reads it. Under swiotlb the device side is the bounce
 * buffer, so only the exporter's syncs carry the data across.
 */
static int sync_check(struct dma_buf *buf, struct device *dev, struct sg_table *sgt,
		      struct gb_importer_check *out)
{
	struct scatterlist *first = sgt->sgl, *sg, *cpu_last = NULL, *dma_last = NULL;
	size_t last;
	unsigned int i;
	void *vaddr;
	int ret;

	for_each_sgtable_sg(sgt, sg, i)
		cpu_last = sg;
	for_each_sgtable_dma_sg(sgt, sg, i)
		dma_last = sg;
	if (!cpu_last || !dma_last)
		return -EINVAL;
	vaddr = kmap_local_page(sg_page(first));
	*(u64 *)(vaddr + first->offset) = GB_IMPORTER_CPU_MARK;
	kunmap_local(vaddr);
	ret = dma_buf_end_cpu_access(buf, DMA_TO_DEVICE);
	if (ret)
		return ret;
	out->dev_saw = *dev_word(dev, sg_dma_address(first));
	*dev_word(dev, sg_dma_address(dma_last) + sg_dma_len(dma_last) - sizeof(u64)) =
		GB_IMPORTER_DEV_MARK;
	ret = dma_buf_begin_cpu_access(buf, DMA_FROM_DEVICE);
	if (ret)
		return ret;
	last = cpu_last->offset + cpu_last->length - sizeof(u64);
	out->cpu_saw = read_u64_at_page(nth_page(sg_page(cpu_last), last >> PAGE_SHIFT),
					offset_in_page(last));
	return 0;
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

static int release_held(struct gb_importer_check *out)
{
	mutex_lock(&held_lock);
	if (!held_buf) {
		mutex_unlock(&held_lock);
		return -ENOENT;
	}
	/* the buffer's first word, through a vmap that outlived every user fd */
	iosys_map_memcpy_from(&out->vmap_first, &held_map, 0, sizeof(u64));
	dma_buf_vunmap_unlocked(held_buf, &held_map);
	dma_buf_unmap_attachment_unlocked(held_attach, held_sgt, DMA_BIDIRECTIONAL);
	dma_buf_detach(held_buf, held_attach);
	dma_buf_put(held_buf);
	held_buf = NULL;
	mutex_unlock(&held_lock);
	return 0;
}

/*
 * The first attachment is a device that reads and writes; the others only read: two
 * writable mappings of the same memory for one device are what DMA-API debugging calls
 * overlapping mappings, and readers are how several importers share a buffer.
 */
static enum dma_data_direction map_dir(unsigned int i)
{
	return i == 0 ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE;
}

static int check_dmabuf(struct gb_importer_check *out)
{
	struct device *dev = gb_importer_dev.this_device;
	struct dma_buf_attachment *attach[3] = {};
	struct sg_table *sgt[3] = {};
	unsigned int n = out->flags & GB_IMPORTER_ATTACH3 ? 3 : 1, i;
	struct dma_buf *buf;
	int ret = 0;

	buf = dma_buf_get(out->fd);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	out->dmabuf_size = buf->size;
	dma_set_max_seg_size(dev, out->flags & GB_IMPORTER_SEG_64K ? SZ_64K : UINT_MAX);
	out->seg_limit = dma_get_max_seg_size(dev);
	out->map_limit = dma_max_mapping_size(dev);

	for (i = 0; i < n; i++) {
		attach[i] = dma_buf_attach(buf, dev);
		if (IS_ERR(attach[i])) {
			ret = PTR_ERR(attach[i]);
			attach[i] = NULL;
			goto undo;
		}
		sgt[i] = dma_buf_map_attachment_unlocked(attach[i], map_dir(i));
		if (IS_ERR(sgt[i])) {
			ret = PTR_ERR(sgt[i]);
			sgt[i] = NULL;
			goto undo;
		}
		out->attachments++;
	}
	if (out->flags & GB_IMPORTER_MAP_TWICE) {
		struct sg_table *again = dma_buf_map_attachment_unlocked(attach[0], map_dir(0));

		/* an exporter that maps it again must give a table of its own to unmap */
		out->map2_err = PTR_ERR_OR_ZERO(again);
		if (!IS_ERR(again))
			dma_buf_unmap_attachment_unlocked(attach[0], again, map_dir(0));
	}
	ret = dma_buf_begin_cpu_access(buf, DMA_FROM_DEVICE);
	if (!ret) {
		/* the figures of the last table; every table must cover the buffer */
		for (i = 0; i < n; i++) {
			struct gb_importer_check one = { .fd = out->fd };

			walk_sg(sgt[i], &one);
			if (one.cpu_total != buf->size || one.dma_total != buf->size)
				ret = -EBADMSG;
			out->cpu_total = one.cpu_total;
			out->cpu_nents = one.cpu_nents;
			out->dma_total = one.dma_total;
			out->dma_nents = one.dma_nents;
			out->min_seg = one.min_seg;
			out->max_seg = one.max_seg;
			out->all_page_multiple = one.all_page_multiple;
			out->sg_first = one.sg_first;
			out->sg_last = one.sg_last;
			out->max_dma_seg = one.max_dma_seg;
			out->bounced = one.bounced;
		}
		if (dma_buf_end_cpu_access(buf, DMA_FROM_DEVICE) && !ret)
			ret = -EIO;
	}
	if (!ret && (out->flags & GB_IMPORTER_SYNC))
		ret = sync_check(buf, dev, sgt[0], out);
undo:
	/* detach in another order than attach */
	for (i = 0; i < n; i++) {
		unsigned int k = (i + 1) % n;

		if (!ret && k == 0 && (out->flags & GB_IMPORTER_HOLD))
			continue;
		if (sgt[k])
			dma_buf_unmap_attachment_unlocked(attach[k], sgt[k], map_dir(k));
		if (attach[k])
			dma_buf_detach(buf, attach[k]);
	}
	if (!ret)
		try_vmap(buf, out);
	if (!ret && (out->flags & GB_IMPORTER_HOLD)) {
		mutex_lock(&held_lock);
		if (held_buf) {
			ret = -EBUSY;
		} else {
			ret = dma_buf_vmap_unlocked(buf, &held_map);
			if (!ret) {
				held_buf = buf;
				held_attach = attach[0];
				held_sgt = sgt[0];
				mutex_unlock(&held_lock);
				return 0;
			}
		}
		mutex_unlock(&held_lock);
		dma_buf_unmap_attachment_unlocked(attach[0], sgt[0], DMA_BIDIRECTIONAL);
		dma_buf_detach(buf, attach[0]);
	}
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
	if (in.flags & ~GB_IMPORTER_FLAGS_ALL)
		return -EINVAL;
	check.fd = in.fd;
	check.flags = in.flags;
	if (in.flags & GB_IMPORTER_RELEASE)
		ret = release_held(&check);
	else
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
	/* without dma_parms every device takes 64 KiB segments; SEG_64K asks for that */
	dev->dma_parms = &gb_importer_parms;
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret) {
		misc_deregister(&gb_importer_dev);
		return ret;
	}
	return 0;
}

static void __exit gb_importer_exit(void)
{
	struct gb_importer_check unused;

	release_held(&unused);
	misc_deregister(&gb_importer_dev);
}

module_init(gb_importer_init);
module_exit(gb_importer_exit);
MODULE_DESCRIPTION("GreenBoost test-only DMA-BUF importer (QEMU suite)");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS(DMA_BUF);
