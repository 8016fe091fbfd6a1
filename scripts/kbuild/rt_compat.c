// SPDX-License-Identifier: GPL-2.0
/*
 * Symbols the Rust runtime (rust/kernel.o of GreenBoost's private CONFIG_RUST=y build)
 * references but a distro kernel built without CONFIG_RUST does not export. Linked
 * into the self-contained module only (scripts/kbuild/rust_rt.kbuild); built only from
 * exported C symbols. modpost names any further gap as an undefined symbol.
 */
#include <linux/slab.h>
#include <linux/vmalloc.h>

/*
 * Linux 6.12 has vrealloc_noprof() in vmlinux but does not export it: its only
 * caller is the built-in Rust `Vmalloc` allocator (VVec, KVVec). Rebuild it from
 * exported pieces with the same contract: size 0 frees, a NULL pointer allocates, and
 * kvrealloc_noprof() hands a vmalloc address to the kernel's own vrealloc_noprof().
 */
void *vrealloc_noprof(const void *p, size_t size, gfp_t flags)
{
	if (!size) {
		vfree(p);
		return NULL;
	}
	if (!p)
		return __vmalloc_noprof(size, flags);
	return kvrealloc_noprof(p, size, flags);
}
