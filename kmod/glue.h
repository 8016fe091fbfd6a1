/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Contract between the Rust side of greenboost.ko (kmod/greenboost.rs and its
 * submodules, which own all logic) and the C glue: kmod/glue.c (ops tables, module
 * parameters, work items, fd/eventfd/process wrappers), kmod/glue_dmabuf.c (the
 * dma-buf and user-mapping ops) and kmod/glue_mm.c (wrappers of the page and mapping
 * APIs), for what Linux 6.12 has no Rust binding for.
 *
 * Every gb_rs_* prototype has its definition in kmod/entry.rs, every other one its
 * extern "C" declaration in kmod/glue_ffi.rs; scripts/check-kmod-glue.py checks that
 * names, argument counts and types agree both ways.
 */
#ifndef GREENBOOST_GLUE_H
#define GREENBOOST_GLUE_H

#include <linux/types.h>
#include <linux/dma-direction.h>

struct device;
struct dma_buf;
struct eventfd_ctx;
struct file;
struct mutex;
struct page;
struct pid;
struct sg_table;
struct vm_area_struct;
struct user_struct;

/*
 * One physically contiguous piece of a buffer: a block of 2^order order-0 pages (split,
 * never compound), named by its first page.
 */
struct gb_chunk {
	struct page *page;
	unsigned int order;
	unsigned int pad;
};

/* Module parameters, as one snapshot (see glue.c for their meaning). */
struct gb_params {
	u64 pool_cap_mb;
	s64 reserve_mb;
	s64 uid_cap_mb;
	u64 cache_mb;
	u64 watchdog_ms;
	s64 t3_cap_mb;
	s64 uid_t3_cap_mb;
	u64 uid_buffers;
};

/* ---- C -> Rust: implemented in kmod/entry.rs (#[no_mangle] extern "C") ---- */
int gb_rs_open(void **file_priv, bool writable);
void gb_rs_release(void *file_priv);
long gb_rs_ioctl(void *file_priv, unsigned int cmd, unsigned long arg);
void gb_rs_buffer_release(void *buf);
int gb_rs_buffer_mmap(void *buf, struct vm_area_struct *vma);
int gb_rs_buffer_fault(void *buf, struct vm_area_struct *vma, unsigned long addr,
		       unsigned long index, bool wait);
void gb_rs_buffer_wait(void *buf, bool killable);
int gb_rs_buffer_attach(void *buf, struct device *dev, struct sg_table **out);
void gb_rs_buffer_detach(void *buf);
int gb_rs_buffer_pin(void *buf, struct device *dev, struct page ***pages,
		     unsigned long *npages, struct sg_table **out);
void gb_rs_buffer_unpin(void *buf, struct page **pages, unsigned long npages);
int gb_rs_buffer_vmap(void *buf, void **out);
void gb_rs_buffer_vunmap(void *buf, void *vaddr);
void gb_rs_watchdog(void);
void gb_rs_refill(void);
size_t gb_rs_stats_show(char *buf, size_t len);
void gb_rs_report(void);
unsigned long gb_rs_shrink_count(void);
unsigned long gb_rs_shrink_scan(unsigned long nr);

/* ---- Rust -> C: implemented in glue.c ---- */
int gb_misc_register(void);
void gb_misc_deregister(void);
int gb_sysfs_create(void);
void gb_sysfs_remove(void);

void gb_params_read(struct gb_params *out);
void gb_params_set_defaults(u64 pool_cap_mb, s64 reserve_mb, s64 uid_cap_mb);

void gb_watchdog_kick(unsigned long delay_ms);
void gb_refill_kick(void);
void gb_works_cancel(void);
int gb_shrinker_register(void);
void gb_shrinker_unregister(void);
u64 gb_now_ms(void);
u64 gb_now_ns(void);

void gb_backing_lock_init(struct mutex *lock);
void gb_backing_lock(struct mutex *lock);
int gb_backing_lock_killable(struct mutex *lock);
bool gb_backing_trylock(struct mutex *lock);
void gb_backing_unlock(struct mutex *lock);

int gb_fd_reserve(void);
void gb_fd_discard(int fd);

int gb_eventfd_get(int fd, struct eventfd_ctx **out);
void gb_eventfd_signal(struct eventfd_ctx *ctx);
void gb_eventfd_put(struct eventfd_ctx *ctx);

struct pid *gb_current_tgid_get(void);
void gb_pid_put(struct pid *pid);
int gb_pid_nr(struct pid *pid);
int gb_pid_vnr(struct pid *pid);
bool gb_capable_admin(void);
int gb_current_tgid_vnr(void);
u32 gb_current_kuid(void);
u32 gb_kuid_to_caller(u32 kuid);
void gb_current_comm(char *buf, size_t len);

/* ---- Rust -> C: implemented in glue_dmabuf.c ---- */
int gb_dmabuf_export(void *buf, size_t size, struct dma_buf **out);
void gb_dmabuf_install(int fd, struct dma_buf *dmabuf);
void gb_dmabuf_put(struct dma_buf *dmabuf);
int gb_dmabuf_lookup(int fd, void **buf, struct dma_buf **out);

/* ---- Rust -> C: implemented in glue_mm.c ---- */
struct page *gb_chunk_alloc(int nid, unsigned int order, bool zero, bool strict,
			    bool cheap, bool account);
void gb_chunk_free(struct page *page, unsigned int order);
void gb_chunk_zero(struct page *page, unsigned int order);
bool gb_chunk_charged(struct page *page);
bool gb_current_memcg_charged(void);
bool gb_chunk_exclusive(struct page *page, unsigned int order);
int gb_page_nid(struct page *page);
bool gb_node_online(int nid);
int gb_numa_node_id(void);
u64 gb_mem_available(void);
u64 gb_total_ram(void);
bool gb_fatal_signal_pending(void);
void gb_cond_resched(void);
void gb_short_sleep(void);
int gb_memlock_charge(unsigned long npages, struct user_struct **out);
void gb_memlock_uncharge(struct user_struct *user, unsigned long npages);
void gb_memlock_put(struct user_struct *user);

void gb_vma_info(struct vm_area_struct *vma, unsigned long *start, unsigned long *pages,
		 unsigned long *pgoff, bool *shared);
void gb_vma_prepare(struct vm_area_struct *vma);
int gb_vma_fill(struct vm_area_struct *vma, unsigned long addr, struct page *head,
		unsigned long first, unsigned long npages);

u64 gb_dma_seg_limit(struct device *dev);
int gb_sgt_build(const struct gb_chunk *chunks, unsigned int nchunks, u64 seg_max,
		 struct sg_table **out);
void *gb_vmap_chunks(const struct gb_chunk *chunks, unsigned int nchunks,
		     unsigned long npages);
void gb_vunmap(void *vaddr);

/* ---- Rust -> C: implemented in glue_shmem.c ---- */
int gb_shmem_create(u64 size, struct file **out);
void gb_file_put(struct file *file);
int gb_map_file_create(struct file *shm, struct file **out);
void gb_shmem_counts(struct file *shm, u64 *resident, u64 *swapped);
u64 gb_swap_free(void);
void gb_vma_use_file(struct vm_area_struct *vma, struct file *map_file);
void gb_user_unmap(struct file *shm);
int gb_shmem_fault(struct file *shm, struct vm_area_struct *vma, unsigned long addr,
		   unsigned long index);
int gb_shmem_store(struct file *shm, unsigned long index, struct page *head,
		   unsigned int order);
int gb_shmem_load(struct file *shm, unsigned long index, struct page *head,
		  unsigned int order);
void gb_shmem_truncate(struct file *shm);
int gb_shmem_pin(struct file *shm, unsigned long npages, bool killable, struct page ***out,
		 unsigned long *pinned);
void gb_shmem_unpin(struct page **pages, unsigned long npages);
void gb_shmem_make_evictable(struct page **pages, unsigned long npages);
void gb_shmem_set_unevictable(struct file *shm, bool unevictable);
int gb_sgt_build_pages(struct page **pages, unsigned long npages, u64 seg_max,
		       struct sg_table **out);
void *gb_vmap_pages(struct page **pages, unsigned long npages);

#endif /* GREENBOOST_GLUE_H */
