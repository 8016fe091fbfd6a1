// SPDX-License-Identifier: GPL-2.0
/*
 * greenboost.ko C glue: what Linux 6.12's Rust `kernel` crate cannot express yet.
 *
 *  - ops tables (file_operations, miscdevice, dma_buf_ops, sysfs attributes) whose
 *    entries are trampolines into Rust (gb_rs_*, all in kmod/entry.rs);
 *  - module parameters (6.12's `module!` has none) and MODULE_IMPORT_NS(DMA_BUF);
 *  - delayed/cancellable work items (6.12's Rust workqueue has neither);
 *  - one-line wrappers of static-inline or macro APIs for fds, eventfds and the
 *    calling process (get_pid/task_tgid, eventfd_signal, ...). Those for pages and
 *    mappings are in glue_mm.c.
 *
 * No policy lives here: every decision (limits, accounting, pool, bounds) is made in
 * Rust. Plain C11 + kernel APIs only, so it builds with GCC- and clang-built kernels.
 * Contract: glue.h (mirrored by glue_ffi.rs, checked by scripts/check-kmod-glue.py).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/highmem.h>
#include <linux/eventfd.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/kobject.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <linux/workqueue.h>

#include "glue.h"

/* The dma-buf exporter API lives in the DMA_BUF symbol namespace. */
MODULE_IMPORT_NS(DMA_BUF);

/* ---- module parameters (all writable at run time by root; read on every use) ---- */

static unsigned long pool_cap_mb;
module_param(pool_cap_mb, ulong, 0644);
MODULE_PARM_DESC(pool_cap_mb,
		 "Most T2 memory (MiB) held in buffers and cache at once (0 at load: half of RAM)");

static long reserve_mb = -1;
module_param(reserve_mb, long, 0644);
MODULE_PARM_DESC(reserve_mb,
		 "Available RAM (MiB) below which ALLOC fails with ENOMEM (-1 at load: RAM/32, 64..1024 MiB)");

static unsigned long uid_cap_mb;
module_param(uid_cap_mb, ulong, 0644);
MODULE_PARM_DESC(uid_cap_mb, "Most T2 memory (MiB) per user (0: no per-user cap)");

static unsigned long cache_mb = 128;
module_param(cache_mb, ulong, 0644);
MODULE_PARM_DESC(cache_mb, "Size (MiB) of the pre-zeroed 2 MiB page cache (0: no cache)");

static unsigned long watchdog_ms = 1000;
module_param(watchdog_ms, ulong, 0644);
MODULE_PARM_DESC(watchdog_ms, "Free-RAM watchdog period in ms (clamped to 100..60000)");

void gb_params_read(struct gb_params *out)
{
	out->pool_cap_mb = READ_ONCE(pool_cap_mb);
	out->reserve_mb = READ_ONCE(reserve_mb);
	out->uid_cap_mb = READ_ONCE(uid_cap_mb);
	out->cache_mb = READ_ONCE(cache_mb);
	out->watchdog_ms = READ_ONCE(watchdog_ms);
}

void gb_params_set_defaults(u64 pool_cap, s64 reserve)
{
	WRITE_ONCE(pool_cap_mb, pool_cap);
	WRITE_ONCE(reserve_mb, reserve);
}

/* ---- /dev/greenboost ---- */

static int gb_open(struct inode *inode, struct file *file)
{
	/* misc_open() left the miscdevice in private_data; Rust replaces it. */
	return gb_rs_open(&file->private_data, file->f_mode & FMODE_WRITE);
}

static int gb_release(struct inode *inode, struct file *file)
{
	gb_rs_release(file->private_data);
	return 0;
}

static long gb_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return gb_rs_ioctl(file->private_data, cmd, arg);
}

static const struct file_operations gb_fops = {
	.owner = THIS_MODULE,
	.open = gb_open,
	.release = gb_release,
	.unlocked_ioctl = gb_ioctl,
	/* every ABI struct has the same layout for 32- and 64-bit callers */
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice gb_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "greenboost",
	.fops = &gb_fops,
	/* root and the group a udev rule gives; never world-accessible */
	.mode = 0660,
};

int gb_misc_register(void)
{
	return misc_register(&gb_misc);
}

void gb_misc_deregister(void)
{
	misc_deregister(&gb_misc);
}

/* ---- DMA-BUF exporter ---- */

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
};

static int gb_dmabuf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct gb_attachment *a = kzalloc(sizeof(*a), GFP_KERNEL);
	int ret;

	if (!a)
		return -ENOMEM;
	ret = gb_rs_buffer_attach(dmabuf->priv, attach->dev, &a->sgt);
	if (ret) {
		kfree(a);
		return ret;
	}
	attach->priv = a;
	return 0;
}

static void gb_dmabuf_detach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct gb_attachment *a = attach->priv;

	gb_sgt_free(a->sgt);
	kfree(a);
}

static struct sg_table *gb_map_dma_buf(struct dma_buf_attachment *attach,
				       enum dma_data_direction dir)
{
	struct gb_attachment *a = attach->priv;
	int ret = dma_map_sgtable(attach->dev, a->sgt, dir, 0);

	if (ret)
		return ERR_PTR(ret);
	a->mapped = true;
	return a->sgt;
}

static void gb_unmap_dma_buf(struct dma_buf_attachment *attach, struct sg_table *sgt,
			     enum dma_data_direction dir)
{
	struct gb_attachment *a = attach->priv;

	a->mapped = false;
	dma_unmap_sgtable(attach->dev, sgt, dir, 0);
}

/*
 * CPU access brackets: the kernel mapping (vmap) and every DMA-mapped attachment are
 * made coherent for the CPU (begin) and for the devices (end). Nothing to do on
 * cache-coherent x86_64 without bouncing, but swiotlb bounce buffers (confidential
 * VMs, swiotlb=force, devices with small DMA masks) and non-coherent platforms need
 * these syncs to see each other's writes.
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

		if (!a->mapped)
			continue;
		if (begin)
			dma_sync_sgtable_for_cpu(attach->dev, a->sgt, dir);
		else
			dma_sync_sgtable_for_device(attach->dev, a->sgt, dir);
	}
	dma_resv_unlock(dmabuf->resv);
	return 0;
}

static void gb_dmabuf_release(struct dma_buf *dmabuf)
{
	gb_rs_buffer_release(dmabuf->priv);
}

/*
 * A page of a mapping whose PTE was zapped (MADV_DONTNEED, or never populated) is
 * mapped back on access, as vm_insert_page() maps it at mmap: a normal, refcounted
 * PTE that pin_user_pages(FOLL_LONGTERM) accepts (vmf_insert_mixed() would make it a
 * special PTE on x86, which GUP refuses). The vma holds the dma-buf file, so the
 * buffer in vm_private_data outlives every fault.
 */
static vm_fault_t gb_vm_fault(struct vm_fault *vmf)
{
	struct page *page = gb_rs_buffer_page(vmf->vma->vm_private_data, vmf->pgoff);
	int ret;

	if (!page)
		return VM_FAULT_SIGBUS;
	ret = vm_insert_page(vmf->vma, vmf->address, page);
	/* -EBUSY: a racing fault mapped it first */
	if (!ret || ret == -EBUSY)
		return VM_FAULT_NOPAGE;
	return vmf_error(ret);
}

static const struct vm_operations_struct gb_vm_ops = {
	.fault = gb_vm_fault,
};

static int gb_dmabuf_mmap(struct dma_buf *dmabuf, struct vm_area_struct *vma)
{
	int ret = gb_rs_buffer_mmap(dmabuf->priv, vma);

	if (ret)
		return ret;
	vma->vm_private_data = dmabuf->priv;
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

int gb_fd_reserve(void)
{
	return get_unused_fd_flags(O_CLOEXEC);
}

void gb_fd_discard(int fd)
{
	put_unused_fd(fd);
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

/* ---- eventfd ---- */

int gb_eventfd_get(int fd, struct eventfd_ctx **out)
{
	struct eventfd_ctx *ctx = eventfd_ctx_fdget(fd);

	if (IS_ERR(ctx))
		return PTR_ERR(ctx);
	*out = ctx;
	return 0;
}

void gb_eventfd_signal(struct eventfd_ctx *ctx)
{
	eventfd_signal(ctx);
}

void gb_eventfd_put(struct eventfd_ctx *ctx)
{
	eventfd_ctx_put(ctx);
}

/* ---- the calling process ---- */

struct pid *gb_current_tgid_get(void)
{
	return get_pid(task_tgid(current));
}

void gb_pid_put(struct pid *pid)
{
	put_pid(pid);
}

int gb_pid_nr(struct pid *pid)
{
	return pid_nr(pid);
}

int gb_pid_vnr(struct pid *pid)
{
	return pid_vnr(pid);
}

bool gb_capable_admin(void)
{
	/* root of the initial user namespace: container root sees its own uid only */
	return capable(CAP_SYS_ADMIN);
}

int gb_current_tgid_vnr(void)
{
	return task_tgid_vnr(current);
}

u32 gb_current_kuid(void)
{
	return __kuid_val(current_uid());
}

u32 gb_kuid_to_caller(u32 kuid)
{
	return from_kuid_munged(current_user_ns(), KUIDT_INIT(kuid));
}

void gb_current_comm(char *buf, size_t len)
{
	__get_task_comm(buf, len, current->group_leader);
}

/* ---- time ---- */

u64 gb_now_ms(void)
{
	return jiffies64_to_msecs(get_jiffies_64());
}

/* ---- background work ---- */

static void gb_watchdog_fn(struct work_struct *work)
{
	gb_rs_watchdog();
}
static DECLARE_DELAYED_WORK(gb_watchdog_work, gb_watchdog_fn);

static void gb_refill_fn(struct work_struct *work)
{
	gb_rs_refill();
}
static DECLARE_WORK(gb_refill_work, gb_refill_fn);

void gb_watchdog_kick(unsigned long delay_ms)
{
	mod_delayed_work(system_wq, &gb_watchdog_work, msecs_to_jiffies(delay_ms));
}

void gb_refill_kick(void)
{
	queue_work(system_unbound_wq, &gb_refill_work);
}

void gb_works_cancel(void)
{
	/* the watchdog may queue a refill, never the other way round */
	cancel_delayed_work_sync(&gb_watchdog_work);
	cancel_work_sync(&gb_refill_work);
}

/* ---- /sys/kernel/greenboost ---- */

static ssize_t stats_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return gb_rs_stats_show(buf, PAGE_SIZE);
}

static ssize_t report_store(struct kobject *kobj, struct kobj_attribute *attr,
			    const char *buf, size_t count)
{
	gb_rs_report();
	return count;
}

static struct kobj_attribute gb_stats_attr = __ATTR_RO(stats);
static struct kobj_attribute gb_report_attr = __ATTR_WO(report);

static struct attribute *gb_attrs[] = {
	&gb_stats_attr.attr,
	&gb_report_attr.attr,
	NULL,
};

static const struct attribute_group gb_attr_group = {
	.attrs = gb_attrs,
};

static struct kobject *gb_kobj;

int gb_sysfs_create(void)
{
	int ret;

	gb_kobj = kobject_create_and_add("greenboost", kernel_kobj);
	if (!gb_kobj)
		return -ENOMEM;
	ret = sysfs_create_group(gb_kobj, &gb_attr_group);
	if (ret) {
		kobject_put(gb_kobj);
		gb_kobj = NULL;
	}
	return ret;
}

void gb_sysfs_remove(void)
{
	/* removing the files waits for running show/store calls */
	kobject_put(gb_kobj);
	gb_kobj = NULL;
}
