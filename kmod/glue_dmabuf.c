// SPDX-License-Identifier: GPL-2.0
/*
 * greenboost.ko C glue, DMA-BUF half: the dma_buf_ops table (attachments with their
 * own sg tables, DMA mapping, CPU-access syncs, vmap, mmap) and the vm_operations of
 * a buffer's user mappings (the fault handler), calling into kmod/entry.rs; exporting,
 * installing and putting a dma-buf.
 *
 * No policy lives here: the page a fault maps, the segment size of an attachment's
 * table and whether a vmap is allowed are decided in Rust. Contract: glue.h (mirrored
 * by glue_ffi.rs, checked by scripts/check-kmod-glue.py).
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/file.h>
#include <linux/highmem.h>
#include <linux/iosys-map.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>

#include "glue.h"

/*
 * One importer's view of a buffer (attach->priv), as system_heap.c keeps it: its own
 * sg table, built at attach with segments within that device's limits (Rust picks
 * them), DMA-mapped between map_dma_buf and unmap_dma_buf. The core's attachment list
 * (dmabuf->attachments) and `mapped` are under the reservation lock: attach adds to
 * the list after our attach callback, detach removes before ours, and map/unmap run
 * with the lock held.
 */
struct gb_attachment {
	struct sg_table *sgt;
	bool mapped;
	/* the direction it is mapped for: its syncs must keep to it (DMA-API rule) */
	enum dma_data_direction dir;
	/* T3: the pages pinned while mapped (the table is built at map, freed at unmap) */
	struct page **pages;
	unsigned long npages;
};

static int gb_dmabuf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct gb_attachment *a = kzalloc(sizeof(*a), GFP_KERNEL);
	int ret;

	if (!a)
		return -ENOMEM;
	/* a T2 buffer's table now; a T3 buffer's none until mapped */
	ret = gb_rs_buffer_attach(dmabuf->priv, attach->dev, &a->sgt);
	if (ret) {
		kfree(a);
		return ret;
	}
	attach->priv = a;
	return 0;
}

/* made by gb_sgt_build or gb_sgt_build_pages */
static void gb_sgt_free(struct sg_table *sgt)
{
	sg_free_table(sgt);
	kfree(sgt);
}

static void gb_dmabuf_detach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct gb_attachment *a = attach->priv;

	/* an importer that detaches while still mapped leaks its DMA mapping, not our pins */
	if (a->pages) {
		gb_sgt_free(a->sgt);
		gb_rs_buffer_unpin(dmabuf->priv, a->pages, a->npages);
	} else if (a->sgt) {
		gb_sgt_free(a->sgt);
	}
	kfree(a);
	gb_rs_buffer_detach(dmabuf->priv);
}

static struct sg_table *gb_map_dma_buf(struct dma_buf_attachment *attach,
				       enum dma_data_direction dir)
{
	struct gb_attachment *a = attach->priv;
	bool pinned = false;
	int ret;

	/*
	 * One mapping per attachment: a second one would DMA-map the same table again (its
	 * first mapping's addresses lost) and, for a T3 buffer, hand out the table the
	 * first unmap frees. The core answers EBUSY to a cached mapping in another
	 * direction; so do we to any second one.
	 */
	if (a->mapped)
		return ERR_PTR(-EBUSY);
	if (!a->sgt) {
		ret = gb_rs_buffer_pin(attach->dmabuf->priv, attach->dev, &a->pages,
				       &a->npages, &a->sgt);
		if (ret)
			return ERR_PTR(ret);
		pinned = true;
	}
	ret = dma_map_sgtable(attach->dev, a->sgt, dir, 0);
	if (ret) {
		if (pinned) {
			gb_sgt_free(a->sgt);
			gb_rs_buffer_unpin(attach->dmabuf->priv, a->pages, a->npages);
			a->sgt = NULL;
			a->pages = NULL;
		}
		return ERR_PTR(ret);
	}
	a->mapped = true;
	a->dir = dir;
	return a->sgt;
}

static void gb_unmap_dma_buf(struct dma_buf_attachment *attach, struct sg_table *sgt,
			     enum dma_data_direction dir)
{
	struct gb_attachment *a = attach->priv;

	a->mapped = false;
	dma_unmap_sgtable(attach->dev, sgt, dir, 0);
	if (a->pages) {
		gb_sgt_free(a->sgt);
		gb_rs_buffer_unpin(attach->dmabuf->priv, a->pages, a->npages);
		a->sgt = NULL;
		a->pages = NULL;
	}
}

/*
 * CPU access brackets: the vmap and every DMA-mapped attachment made coherent for the
 * CPU (begin) or the devices (end): no work on coherent x86_64 without bouncing, but
 * swiotlb bounce buffers and non-coherent platforms need it.
 */
static int gb_cpu_access(struct dma_buf *dmabuf, enum dma_data_direction dir, bool begin)
{
	struct dma_buf_attachment *attach;
	int ret = dma_resv_lock_interruptible(dmabuf->resv, NULL);

	if (ret)
		return ret;
	if (begin && dmabuf->vmapping_counter)
		invalidate_kernel_vmap_range(dmabuf->vmap_ptr.vaddr, dmabuf->size);
	if (!begin && dmabuf->vmapping_counter)
		flush_kernel_vmap_range(dmabuf->vmap_ptr.vaddr, dmabuf->size);
	list_for_each_entry(attach, &dmabuf->attachments, node) {
		struct gb_attachment *a = attach->priv;

		/* a one-way mapping is synced its own way; a bidirectional one as asked */
		enum dma_data_direction sync = a->dir == DMA_BIDIRECTIONAL ? dir : a->dir;

		if (!a->mapped)
			continue;
		if (begin)
			dma_sync_sgtable_for_cpu(attach->dev, a->sgt, sync);
		else
			dma_sync_sgtable_for_device(attach->dev, a->sgt, sync);
	}
	dma_resv_unlock(dmabuf->resv);
	return 0;
}

static void gb_dmabuf_release(struct dma_buf *dmabuf)
{
	gb_rs_buffer_release(dmabuf->priv);
}

/*
 * Every mapping holds a reference to its dma-buf (its vm_file is the buffer's shmem
 * file, see glue_shmem.c), taken at mmap and for every copy of the vma (fork, split,
 * mremap), dropped when the vma goes: the buffer outlives every mapping.
 */
static void gb_vm_open(struct vm_area_struct *vma)
{
	get_dma_buf(vma->vm_private_data);
}

static void gb_vm_close(struct vm_area_struct *vma)
{
	dma_buf_put(vma->vm_private_data);
}

/*
 * A move holds the buffer's backing lock across its whole copy (seconds for a large
 * buffer read back from swap), so a fault that finds it taken waits as filemap_fault
 * waits for a locked folio: where the fault may be retried, without the mmap (or vma)
 * lock, killably when the fault is, then VM_FAULT_RETRY, so that a SIGKILLed process
 * dies at once instead of after the move; where it may not, as __folio_lock does.
 */
static vm_fault_t gb_vm_fault_busy(struct vm_fault *vmf)
{
	struct dma_buf *dmabuf = vmf->vma->vm_private_data;
	int ret;

	if (vmf->flags & FAULT_FLAG_RETRY_NOWAIT)
		return VM_FAULT_RETRY;
	if (vmf->flags & FAULT_FLAG_ALLOW_RETRY) {
		/* the vma may go once its lock is dropped; the buffer stays for the wait */
		get_dma_buf(dmabuf);
		release_fault_lock(vmf);
		gb_rs_buffer_wait(dmabuf->priv, vmf->flags & FAULT_FLAG_KILLABLE);
		dma_buf_put(dmabuf);
		return VM_FAULT_RETRY;
	}
	ret = gb_rs_buffer_fault(dmabuf->priv, vmf->vma, vmf->address, vmf->pgoff, true);
	return ret ? vmf_error(ret) : VM_FAULT_NOPAGE;
}

/*
 * Mappings are filled on fault, never at mmap: a move between tiers zaps every
 * mapping of the file, and a vma is linked to the file only after mmap returns, so
 * pages inserted at mmap could escape the zap. Rust inserts the pages (the whole T2
 * chunk, or the T3 page) under the buffer's backing lock, so that no move runs between
 * the lookup and the PTE: a normal, refcounted PTE that pin_user_pages(FOLL_LONGTERM)
 * accepts (vmf_insert_mixed() would make it a special PTE on x86, which GUP refuses).
 */
static vm_fault_t gb_vm_fault(struct vm_fault *vmf)
{
	struct dma_buf *dmabuf = vmf->vma->vm_private_data;
	int ret = gb_rs_buffer_fault(dmabuf->priv, vmf->vma, vmf->address, vmf->pgoff, false);

	/* -EAGAIN: a move holds the buffer */
	if (ret == -EAGAIN)
		return gb_vm_fault_busy(vmf);
	/* past the end: -EFAULT; T3 page not allocatable: -ENOSPC; both SIGBUS */
	return ret ? vmf_error(ret) : VM_FAULT_NOPAGE;
}

static const struct vm_operations_struct gb_vm_ops = {
	.open = gb_vm_open,
	.close = gb_vm_close,
	.fault = gb_vm_fault,
};

static int gb_dmabuf_mmap(struct dma_buf *dmabuf, struct vm_area_struct *vma)
{
	int ret = gb_rs_buffer_mmap(dmabuf->priv, vma);

	if (ret)
		return ret;
	get_dma_buf(dmabuf);
	vma->vm_private_data = dmabuf;
	vma->vm_ops = &gb_vm_ops;
	return 0;
}

static int gb_dmabuf_vmap(struct dma_buf *dmabuf, struct iosys_map *map)
{
	void *vaddr;
	int ret = gb_rs_buffer_vmap(dmabuf->priv, &vaddr);

	if (ret)
		return ret;
	iosys_map_set_vaddr(map, vaddr);
	return 0;
}

static void gb_dmabuf_vunmap(struct dma_buf *dmabuf, struct iosys_map *map)
{
	gb_rs_buffer_vunmap(dmabuf->priv, map->vaddr);
}

static int gb_begin_cpu_access(struct dma_buf *dmabuf, enum dma_data_direction dir)
{
	return gb_cpu_access(dmabuf, dir, true);
}

static int gb_end_cpu_access(struct dma_buf *dmabuf, enum dma_data_direction dir)
{
	return gb_cpu_access(dmabuf, dir, false);
}

static const struct dma_buf_ops gb_dmabuf_ops = {
	.attach = gb_dmabuf_attach,
	.detach = gb_dmabuf_detach,
	.map_dma_buf = gb_map_dma_buf,
	.unmap_dma_buf = gb_unmap_dma_buf,
	.release = gb_dmabuf_release,
	.mmap = gb_dmabuf_mmap,
	.vmap = gb_dmabuf_vmap,
	.vunmap = gb_dmabuf_vunmap,
	.begin_cpu_access = gb_begin_cpu_access,
	.end_cpu_access = gb_end_cpu_access,
};

int gb_dmabuf_export(void *buf, size_t size, struct dma_buf **out)
{
	/* sets .owner = THIS_MODULE: each dma-buf pins the module until released */
	DEFINE_DMA_BUF_EXPORT_INFO(exp);
	struct dma_buf *dmabuf;

	exp.ops = &gb_dmabuf_ops;
	exp.size = size;
	exp.flags = O_RDWR;
	exp.priv = buf;
	dmabuf = dma_buf_export(&exp);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	*out = dmabuf;
	return 0;
}

void gb_dmabuf_install(int fd, struct dma_buf *dmabuf)
{
	/* what dma_buf_fd() does, split so that ALLOC can copy its reply out first */
	fd_install(fd, dmabuf->file);
}

void gb_dmabuf_put(struct dma_buf *dmabuf)
{
	dma_buf_put(dmabuf);
}

int gb_dmabuf_lookup(int fd, void **buf, struct dma_buf **out)
{
	struct dma_buf *dmabuf = dma_buf_get(fd);

	/* -EBADF: not open; -EINVAL: not a dma-buf */
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	if (dmabuf->ops != &gb_dmabuf_ops) {
		dma_buf_put(dmabuf);
		return -EINVAL;
	}
	*buf = dmabuf->priv;
	*out = dmabuf;
	return 0;
}
