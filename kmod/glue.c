// SPDX-License-Identifier: GPL-2.0
/*
 * greenboost.ko C glue: what Linux 6.12's Rust `kernel` crate cannot express yet.
 *
 *  - ops tables (file_operations, miscdevice, sysfs attributes) whose entries are
 *    trampolines into Rust (gb_rs_*, all in kmod/entry.rs); the dma-buf and mapping
 *    ops are in glue_dmabuf.c;
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
#include <linux/eventfd.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/kobject.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/moduleparam.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/shrinker.h>
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

static long uid_cap_mb = -1;
module_param(uid_cap_mb, long, 0644);
MODULE_PARM_DESC(uid_cap_mb,
		 "Most T2 memory (MiB) per user (-1 at load: half of the pool cap; 0: no per-user cap)");

static unsigned long cache_mb = 128;
module_param(cache_mb, ulong, 0644);
MODULE_PARM_DESC(cache_mb, "Size (MiB) of the pre-zeroed 2 MiB page cache (0: no cache)");

static unsigned long watchdog_ms = 1000;
module_param(watchdog_ms, ulong, 0644);
MODULE_PARM_DESC(watchdog_ms, "Free-RAM watchdog period in ms (clamped to 100..60000)");

static long t3_cap_mb = -1;
module_param(t3_cap_mb, long, 0644);
MODULE_PARM_DESC(t3_cap_mb,
		 "Most T3 (swappable) memory (MiB) in buffers at once, within the free swap (-1: all of it; 0: no T3)");

static long uid_t3_cap_mb = -1;
module_param(uid_t3_cap_mb, long, 0644);
MODULE_PARM_DESC(uid_t3_cap_mb,
		 "Most T3 memory (MiB) per user (-1: half of what T3 may hold now; 0: no per-user T3 cap)");

static unsigned long uid_buffers = 4096;
module_param(uid_buffers, ulong, 0644);
MODULE_PARM_DESC(uid_buffers, "Most live buffers per user, T2 and T3 together (0: no limit)");

void gb_params_read(struct gb_params *out)
{
	out->pool_cap_mb = READ_ONCE(pool_cap_mb);
	out->reserve_mb = READ_ONCE(reserve_mb);
	out->uid_cap_mb = READ_ONCE(uid_cap_mb);
	out->cache_mb = READ_ONCE(cache_mb);
	out->watchdog_ms = READ_ONCE(watchdog_ms);
	out->t3_cap_mb = READ_ONCE(t3_cap_mb);
	out->uid_t3_cap_mb = READ_ONCE(uid_t3_cap_mb);
	out->uid_buffers = READ_ONCE(uid_buffers);
}

void gb_params_set_defaults(u64 pool_cap, s64 reserve, s64 uid_cap)
{
	WRITE_ONCE(pool_cap_mb, pool_cap);
	WRITE_ONCE(reserve_mb, reserve);
	WRITE_ONCE(uid_cap_mb, uid_cap);
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

int gb_fd_reserve(void)
{
	return get_unused_fd_flags(O_CLOEXEC);
}

void gb_fd_discard(int fd)
{
	put_unused_fd(fd);
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

/* ---- the buffers' backing locks (kmod/backing.rs) ---- */

void gb_backing_lock_init(struct mutex *lock)
{
	/* one lockdep class for every buffer's lock, as a Rust new_mutex! would give */
	static struct lock_class_key key;

	__mutex_init(lock, "greenboost::backing", &key);
}

void gb_backing_lock(struct mutex *lock)
{
	mutex_lock(lock);
}

int gb_backing_lock_killable(struct mutex *lock)
{
	return mutex_lock_killable(lock);
}

bool gb_backing_trylock(struct mutex *lock)
{
	return mutex_trylock(lock);
}

void gb_backing_unlock(struct mutex *lock)
{
	mutex_unlock(lock);
}

/* ---- time ---- */

u64 gb_now_ms(void)
{
	return jiffies64_to_msecs(get_jiffies_64());
}

u64 gb_now_ns(void)
{
	return ktime_get_ns();
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

/* ---- the pre-zeroed cache's shrinker ---- */

static struct shrinker *gb_shrinker;

static unsigned long gb_shrink_count(struct shrinker *shrinker, struct shrink_control *sc)
{
	return gb_rs_shrink_count();
}

static unsigned long gb_shrink_scan(struct shrinker *shrinker, struct shrink_control *sc)
{
	unsigned long freed = gb_rs_shrink_scan(sc->nr_to_scan);

	return freed ? freed : SHRINK_STOP;
}

int gb_shrinker_register(void)
{
	gb_shrinker = shrinker_alloc(0, "greenboost-cache");
	if (!gb_shrinker)
		return -ENOMEM;
	gb_shrinker->count_objects = gb_shrink_count;
	gb_shrinker->scan_objects = gb_shrink_scan;
	/* the cache frees whole 2 MiB chunks */
	gb_shrinker->batch = 512;
	shrinker_register(gb_shrinker);
	return 0;
}

void gb_shrinker_unregister(void)
{
	/* waits for running scans */
	shrinker_free(gb_shrinker);
	gb_shrinker = NULL;
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
