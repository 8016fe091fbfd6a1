// SPDX-License-Identifier: GPL-2.0
/*
 * greenboost.ko C glue, memory half: one-line wrappers of the static-inline or macro
 * APIs for pages (allocation flags, zeroing, reference counts, NUMA nodes, free RAM),
 * user mappings (vm_flags_set, vm_insert_pages), scatter-gather tables and kernel
 * mappings (vmap).
 *
 * No policy lives here: every decision is made in Rust. Contract: glue.h (mirrored by
 * glue_ffi.rs, checked by scripts/check-kmod-glue.py).
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/gfp.h>
#include <linux/highmem.h>
#include <linux/memcontrol.h>
#include <linux/mm.h>
#include <linux/nodemask.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/topology.h>
#include <linux/vmalloc.h>

#include "glue.h"

/* ---- mmap ---- */

void gb_vma_info(struct vm_area_struct *vma, unsigned long *start, unsigned long *pages,
		 unsigned long *pgoff, bool *shared)
{
	*start = vma->vm_start;
	*pages = vma_pages(vma);
	*pgoff = vma->vm_pgoff;
	*shared = vma->vm_flags & VM_MAYSHARE;
}

void gb_vma_prepare(struct vm_area_struct *vma)
{
	/*
	 * Real struct pages (no VM_IO/VM_PFNMAP), so that pin_user_pages(FOLL_LONGTERM)
	 * -- what cuMemHostRegister does -- accepts the mapping; cached protection.
	 */
	vm_flags_set(vma, VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTDUMP);
}

int gb_vma_fill(struct vm_area_struct *vma, unsigned long addr, struct page *head,
		unsigned long first, unsigned long npages)
{
	struct page *batch[32];

	while (npages) {
		unsigned long n = min_t(unsigned long, npages, ARRAY_SIZE(batch));
		unsigned long left = n, i;
		int ret;

		for (i = 0; i < n; i++)
			batch[i] = nth_page(head, first + i);
		ret = vm_insert_pages(vma, addr, batch, &left);
		/* -EBUSY: that page is mapped already (the rest of a partly zapped chunk) */
		if (ret && ret != -EBUSY)
			return ret;
		if (ret)
			n = n - left + 1;
		first += n;
		npages -= n;
		addr += n << PAGE_SHIFT;
	}
	return 0;
}

/* ---- pages ---- */

struct page *gb_chunk_alloc(int nid, unsigned int order, bool zero, bool strict, bool cheap,
			    bool account)
{
	/* GFP_HIGHUSER has no __GFP_MOVABLE: never ZONE_MOVABLE or CMA (pinnable) */
	gfp_t gfp = GFP_HIGHUSER | __GFP_NOWARN;
	struct page *page;

	/* charged to the current task's memory cgroup; a charge over its limit fails */
	if (account)
		gfp |= __GFP_ACCOUNT;

	if (zero)
		gfp |= __GFP_ZERO;
	/* never the OOM killer: a failed allocation is an ENOMEM for the caller */
	gfp |= cheap ? __GFP_NORETRY : __GFP_RETRY_MAYFAIL;
	/*
	 * A node validated at ALLOC may have gone offline since: fail a strict request,
	 * let the others fall back, rather than ask for an offline node (which dumps a
	 * stack with __GFP_THISNODE).
	 */
	if (nid != NUMA_NO_NODE && !gb_node_online(nid)) {
		if (strict)
			return NULL;
		nid = NUMA_NO_NODE;
	}
	if (nid == NUMA_NO_NODE) {
		page = alloc_pages(gfp, order);
	} else {
		if (strict)
			gfp |= __GFP_THISNODE;
		page = alloc_pages_node(nid, gfp, order);
	}
	/*
	 * A physically contiguous block of order-0 pages, never a compound page: user
	 * mappings insert it one PTE at a time, and mm's MADV_COLD/MADV_PAGEOUT walk meets
	 * a PTE-mapped large folio by splitting it, which without
	 * CONFIG_TRANSPARENT_HUGEPAGE is a stub that succeeds without splitting, so the
	 * walk retried the same PTE forever (holding mmap_lock, deaf to SIGKILL). Order-0
	 * pages off the LRU are skipped by that walk on every kernel.
	 */
	if (page && order)
		split_page(page, order);
	return page;
}

void gb_chunk_free(struct page *page, unsigned int order)
{
	unsigned long i;

	/* each page on its own: another holder (a pipe, a pin) may keep some of them */
	for (i = 0; i < (1UL << order); i++)
		__free_page(nth_page(page, i));
}

void gb_chunk_zero(struct page *page, unsigned int order)
{
	unsigned long i;

	for (i = 0; i < (1UL << order); i++) {
		clear_highpage(nth_page(page, i));
		if ((i & 127) == 127)
			cond_resched();
	}
}

bool gb_chunk_charged(struct page *page)
{
	return PageMemcgKmem(page);
}

bool gb_current_memcg_charged(void)
{
#ifdef CONFIG_MEMCG
	struct mem_cgroup *memcg;
	bool child;

	if (mem_cgroup_disabled() || !memcg_kmem_online())
		return false;
	rcu_read_lock();
	memcg = mem_cgroup_from_task(current);
	child = memcg && parent_mem_cgroup(memcg);
	rcu_read_unlock();
	return child;
#else
	return false;
#endif
}

bool gb_chunk_exclusive(struct page *page, unsigned int order)
{
	unsigned long i;

	for (i = 0; i < (1UL << order); i++)
		if (page_count(nth_page(page, i)) != 1)
			return false;
	return true;
}

int gb_page_nid(struct page *page)
{
	return page_to_nid(page);
}

bool gb_node_online(int nid)
{
	/* online and with memory: a memoryless node has nothing to allocate from */
	return nid >= 0 && nid < MAX_NUMNODES && node_state(nid, N_MEMORY);
}

int gb_numa_node_id(void)
{
	int nid = numa_mem_id(), n, best = NUMA_NO_NODE;

	/*
	 * The nearest node with memory to this CPU. numa_mem_id() is that only where the
	 * architecture supports memoryless nodes (not x86, where a CPU of a memoryless
	 * node gets its own node and a strict ALLOC there could never succeed).
	 */
	if (node_state(nid, N_MEMORY))
		return nid;
	for_each_node_state(n, N_MEMORY)
		if (best == NUMA_NO_NODE || node_distance(nid, n) < node_distance(nid, best))
			best = n;
	return best;
}

u64 gb_mem_available(void)
{
	return (u64)si_mem_available() << PAGE_SHIFT;
}

u64 gb_total_ram(void)
{
	return (u64)totalram_pages() << PAGE_SHIFT;
}

/* ---- long loops and short waits ---- */

bool gb_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

void gb_cond_resched(void)
{
	cond_resched();
}

void gb_short_sleep(void)
{
	usleep_range(100, 200);
}

/* ---- RLIMIT_MEMLOCK, charged to the user as io_uring and RDMA do ---- */

int gb_memlock_charge(unsigned long npages, struct user_struct **out)
{
	unsigned long limit, cur, new;
	struct user_struct *user;

	*out = NULL;
	if (capable(CAP_IPC_LOCK))
		return 0;
	limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	user = get_uid(current_user());
	cur = atomic_long_read(&user->locked_vm);
	do {
		new = cur + npages;
		if (new < cur || new > limit) {
			free_uid(user);
			return -ENOMEM;
		}
	} while (!atomic_long_try_cmpxchg(&user->locked_vm, &cur, new));
	*out = user;
	return 0;
}

void gb_memlock_uncharge(struct user_struct *user, unsigned long npages)
{
	atomic_long_sub(npages, &user->locked_vm);
}

void gb_memlock_put(struct user_struct *user)
{
	free_uid(user);
}

/* ---- scatter-gather and kernel mappings ---- */

u64 gb_dma_seg_limit(struct device *dev)
{
	/* swiotlb caps one mapping at its slot run (256 KiB), whatever the device says */
	return min_t(u64, dma_get_max_seg_size(dev), dma_max_mapping_size(dev));
}

int gb_sgt_build(const struct gb_chunk *chunks, unsigned int nchunks, u64 seg_max,
		 struct sg_table **out)
{
	struct sg_table *sgt = kmalloc(sizeof(*sgt), GFP_KERNEL);
	struct scatterlist *sg;
	unsigned long nents = 0;
	unsigned int i;
	int ret;

	if (!sgt)
		return -ENOMEM;
	for (i = 0; i < nchunks; i++)
		nents += DIV_ROUND_UP_ULL(PAGE_SIZE << chunks[i].order, seg_max);
	ret = -E2BIG;
	if (nents > UINT_MAX)
		goto free;
	ret = sg_alloc_table(sgt, nents, GFP_KERNEL);
	if (ret)
		goto free;
	sg = sgt->sgl;
	for (i = 0; i < nchunks; i++) {
		u64 len = PAGE_SIZE << chunks[i].order, off;

		for (off = 0; off < len; off += seg_max) {
			sg_set_page(sg, nth_page(chunks[i].page, off >> PAGE_SHIFT),
				    min_t(u64, seg_max, len - off), 0);
			sg = sg_next(sg);
		}
		cond_resched();
	}
	*out = sgt;
	return 0;
free:
	kfree(sgt);
	return ret;
}

void *gb_vmap_chunks(const struct gb_chunk *chunks, unsigned int nchunks,
		     unsigned long npages)
{
	struct page **pages = kvmalloc_array(npages, sizeof(*pages), GFP_KERNEL | __GFP_NOWARN);
	unsigned long k = 0, j;
	unsigned int i;
	void *vaddr;

	if (!pages)
		return NULL;
	for (i = 0; i < nchunks; i++) {
		for (j = 0; j < (1UL << chunks[i].order) && k < npages; j++)
			pages[k++] = nth_page(chunks[i].page, j);
		cond_resched();
	}
	vaddr = vmap(pages, k, VM_MAP, PAGE_KERNEL);
	kvfree(pages);
	return vaddr;
}

void gb_vunmap(void *vaddr)
{
	vunmap(vaddr);
}
