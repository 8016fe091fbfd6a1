// SPDX-License-Identifier: GPL-2.0
/*
 * greenboost.ko C glue, T3 half: wrappers of the shmem, swap and user-mapping APIs
 * behind a buffer's shmem file (kmod/shmem.rs owns the file and decides when each of
 * these runs). Contract: glue.h (mirrored by glue_ffi.rs, checked by
 * scripts/check-kmod-glue.py).
 *
 * Every buffer has a shmem file. All of its user mappings belong to that file's page
 * cache (vma_set_file at mmap, with the map file below), so that unmap_mapping_range()
 * reaches every mapping when the buffer moves between tiers, and so that reclaim's
 * reverse map finds the mappings of a T3 page and can write it to swap while it is
 * mapped. In T2 the file holds no pages; in T3 it holds the buffer's contents.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pagemap.h>
#include <linux/pagevec.h>
#include <linux/scatterlist.h>
#include <linux/sched/signal.h>
#include <linux/shmem_fs.h>
#include <linux/slab.h>
#include <linux/swap.h>
#include <linux/vmalloc.h>

#include "glue.h"

/*
 * T3 pages never cost the OOM killer a victim: an allocation that cannot be satisfied
 * after reclaim (which writes T3 and other pages to swap) fails instead, and the
 * caller turns that into ENOMEM or SIGBUS.
 */
static gfp_t gb_t3_gfp(struct address_space *mapping)
{
	return mapping_gfp_mask(mapping) | __GFP_RETRY_MAYFAIL | __GFP_NOWARN;
}

int gb_shmem_create(u64 size, struct file **out)
{
	/* VM_NORESERVE: no overcommit charge; T3 admission bounds it against swap */
	struct file *file = shmem_file_setup("greenboost", size, VM_NORESERVE);

	if (IS_ERR(file))
		return PTR_ERR(file);
	*out = file;
	return 0;
}

void gb_file_put(struct file *file)
{
	fput(file);
}

/*
 * The map file's operations: none of its own. remap_file_pages() re-mmaps a vma's
 * vm_file over the range and MADV_REMOVE punches a hole through it (vfs_fallocate);
 * with the shmem file itself as vm_file, the first turned the range into a plain shmem
 * mapping (writes never reached a T2 buffer's pages, its pages outlived the buffer
 * outside every limit) and the second zeroed T3 contents. Without .mmap and
 * .fallocate they fail as for any such file: ENODEV and EOPNOTSUPP.
 */
static const struct file_operations gb_map_fops = {
	.owner = THIS_MODULE,
	/* msync(MS_SYNC): nothing to write back, as the shmem file answers */
	.fsync = noop_fsync,
};

int gb_map_file_create(struct file *shm, struct file **out)
{
	struct inode *inode = file_inode(shm);
	struct file *file;

	/* the file's last fput (deferred) reads gb_map_fops: the module must stay */
	if (!try_module_get(THIS_MODULE))
		return -ENODEV;
	/* the new dentry takes this inode reference; an error leaves it with us */
	ihold(inode);
	/* not counted against file-max: the shmem file it shadows is */
	file = alloc_file_pseudo_noaccount(inode, shm->f_path.mnt, "greenboost", O_RDWR,
					   &gb_map_fops);
	if (IS_ERR(file)) {
		iput(inode);
		module_put(THIS_MODULE);
		return PTR_ERR(file);
	}
	*out = file;
	return 0;
}

void gb_shmem_counts(struct file *shm, u64 *resident, u64 *swapped)
{
	struct address_space *mapping = shm->f_mapping;

	/* racy reads of two counters, for statistics */
	*resident = READ_ONCE(mapping->nrpages);
	*swapped = READ_ONCE(SHMEM_I(mapping->host)->swapped);
}

u64 gb_swap_free(void)
{
	return (u64)get_nr_swap_pages() << PAGE_SHIFT;
}

void gb_vma_use_file(struct vm_area_struct *vma, struct file *map_file)
{
	vma_set_file(vma, map_file);
}

void gb_user_unmap(struct file *shm)
{
	/* every mapping of every process, page tables only (even_cows: shared anyway) */
	unmap_mapping_range(shm->f_mapping, 0, 0, 1);
}

/*
 * The file's folio at @index, locked and still in the file (reclaim may have moved it
 * to the swap cache between the lookup and the lock), with a reference.
 */
static struct folio *gb_shmem_folio_locked(struct address_space *mapping, pgoff_t index)
{
	for (;;) {
		struct folio *folio = shmem_read_folio_gfp(mapping, index, gb_t3_gfp(mapping));

		if (IS_ERR(folio))
			return folio;
		folio_lock(folio);
		if (folio->mapping == mapping)
			return folio;
		folio_unlock(folio);
		folio_put(folio);
	}
}

int gb_shmem_fault(struct file *shm, struct vm_area_struct *vma, unsigned long addr,
		   unsigned long index)
{
	struct folio *folio = gb_shmem_folio_locked(shm->f_mapping, index);
	int ret;

	if (IS_ERR(folio))
		return PTR_ERR(folio);
	/*
	 * A normal file PTE (as finish_fault makes), inserted while the caller holds the
	 * buffer's backing lock, so that a move cannot run between the lookup and the
	 * PTE. The vma belongs to this file at this offset, so reclaim's rmap finds it.
	 */
	ret = vm_insert_page(vma, addr, folio_file_page(folio, index));
	folio_unlock(folio);
	folio_put(folio);
	/* -EBUSY: a racing fault mapped it first */
	return ret == -EBUSY ? 0 : ret;
}

int gb_shmem_store(struct file *shm, unsigned long index, struct page *head,
		   unsigned int order)
{
	struct address_space *mapping = shm->f_mapping;
	unsigned long i;

	for (i = 0; i < (1UL << order); i++) {
		struct folio *folio = gb_shmem_folio_locked(mapping, index + i);

		if (IS_ERR(folio))
			return PTR_ERR(folio);
		copy_highpage(folio_file_page(folio, index + i), nth_page(head, i));
		/* dirty: reclaim must write it to swap, never drop it */
		folio_mark_dirty(folio);
		folio_unlock(folio);
		folio_put(folio);
		if ((i & 127) == 127)
			cond_resched();
	}
	return 0;
}

int gb_shmem_load(struct file *shm, unsigned long index, struct page *head,
		  unsigned int order)
{
	struct address_space *mapping = shm->f_mapping;
	unsigned long i;

	for (i = 0; i < (1UL << order); i++) {
		struct folio *folio = gb_shmem_folio_locked(mapping, index + i);
		bool elsewhere;

		if (IS_ERR(folio))
			return PTR_ERR(folio);
		/*
		 * Pinned for DMA through a mapping (cuMemHostRegister, io_uring, RDMA): the
		 * pinner keeps using this page, so the buffer must stay on it. Plain page
		 * references (a pipe) keep their own copy alive and do not matter.
		 */
		elsewhere = folio_maybe_dma_pinned(folio);
		if (!elsewhere)
			copy_highpage(nth_page(head, i), folio_file_page(folio, index + i));
		folio_unlock(folio);
		folio_put(folio);
		if (elsewhere)
			return -EBUSY;
		if ((i & 127) == 127)
			cond_resched();
	}
	return 0;
}

void gb_shmem_truncate(struct file *shm)
{
	/* pages and swap slots both */
	shmem_truncate_range(file_inode(shm), 0, (loff_t)-1);
}

int gb_shmem_pin(struct file *shm, unsigned long npages, bool killable, struct page ***out,
		 unsigned long *pinned)
{
	struct address_space *mapping = shm->f_mapping;
	struct page **pages = kvmalloc_array(npages, sizeof(*pages), GFP_KERNEL | __GFP_NOWARN);
	unsigned long i;

	*out = pages;
	*pinned = 0;
	if (!pages)
		return -ENOMEM;
	for (i = 0; i < npages; i++) {
		struct folio *folio;

		if (killable && fatal_signal_pending(current))
			return -EINTR;
		folio = shmem_read_folio_gfp(mapping, i, gb_t3_gfp(mapping));
		if (IS_ERR(folio))
			return PTR_ERR(folio);
		/* the folio reference keeps the page; the caller keeps it from reclaim */
		pages[i] = folio_file_page(folio, i);
		*pinned = i + 1;
		if ((i & 127) == 127)
			cond_resched();
	}
	return 0;
}

void gb_shmem_unpin(struct page **pages, unsigned long npages)
{
	unsigned long i;

	for (i = 0; i < npages; i++) {
		/* a device may have written it: it must reach swap, not be dropped */
		set_page_dirty_lock(pages[i]);
		put_page(pages[i]);
	}
	kvfree(pages);
}

void gb_shmem_make_evictable(struct page **pages, unsigned long npages)
{
	struct folio_batch batch;
	unsigned long i;

	/*
	 * As i915 does when it unpins a shmem object: reclaim moved the pages it met while
	 * the mapping was unevictable to the unevictable list, and only this brings them
	 * back (otherwise they stay there until the buffer dies, outside every limit).
	 */
	folio_batch_init(&batch);
	for (i = 0; i < npages; i++) {
		if (!folio_batch_add(&batch, page_folio(pages[i]))) {
			check_move_unevictable_folios(&batch);
			folio_batch_reinit(&batch);
			cond_resched();
		}
	}
	if (folio_batch_count(&batch))
		check_move_unevictable_folios(&batch);
}

void gb_shmem_set_unevictable(struct file *shm, bool unevictable)
{
	/* as i915 does while a shmem object is pinned for the GPU */
	if (unevictable)
		mapping_set_unevictable(shm->f_mapping);
	else
		mapping_clear_unevictable(shm->f_mapping);
}

int gb_sgt_build_pages(struct page **pages, unsigned long npages, u64 seg_max,
		       struct sg_table **out)
{
	struct sg_table *sgt = kmalloc(sizeof(*sgt), GFP_KERNEL);
	int ret;

	if (!sgt)
		return -ENOMEM;
	if (npages > UINT_MAX || seg_max > UINT_MAX) {
		kfree(sgt);
		return -E2BIG;
	}
	ret = sg_alloc_table_from_pages_segment(sgt, pages, npages, 0, npages << PAGE_SHIFT,
						seg_max, GFP_KERNEL);
	if (ret) {
		kfree(sgt);
		return ret;
	}
	*out = sgt;
	return 0;
}

void *gb_vmap_pages(struct page **pages, unsigned long npages)
{
	if (npages > UINT_MAX)
		return NULL;
	return vmap(pages, npages, VM_MAP, PAGE_KERNEL);
}
