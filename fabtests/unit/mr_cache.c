/*
 * mr_cache: the lazy-deregistration registration cache
 * (FI_OXMR_MR_CACHE_ENABLE=1; provider/src/mr/cache.rs, mr/uffd.rs).
 *
 * Closing a registration keeps its pin cached; registering the same range
 * (or a range inside it) again with access the entry covers reuses the pin.
 * The kernel tells the cache (userfaultfd UNMAP / REMOVE / REMAP events) when
 * cached memory is unmapped, discarded or moved, so that a cached pin never
 * serves memory that is no longer mapped at its address.
 *
 * Words used below:
 *   hit   stats.cache_hits grows by 1 (misses do not) and query.cache_entry
 *         is the id of an earlier registration's entry;
 *   miss  stats.cache_misses grows by 1 (hits do not) and the entry id is
 *         new (larger than every id seen before);
 *   "pins the new pages"  query(mr).pfn0 == the PFN that /proc/self/pagemap
 *         shows for the address now, and != the PFN the old entry pinned.
 * PFNs (FI_OXMR_MR_RECORD_PFN=1) are visible to root only; without them the
 * PFN comparisons are skipped (said once) and hits/misses still checked.
 * VmPin (/proc/self/status) is the kernel's count of long-term pinned pages
 * (io_uring fixed buffers): it shows what the cache really holds.
 *
 * madvise reports its discard *before* the kernel zaps the pages, so the
 * provider serves a registration of a range discarded in the last 50 ms
 * uncached (cache.rs REMOVE_GRACE): right after a madvise the test accepts
 * a miss or an uncached registration (never a hit, always the new pages),
 * and checks that 60 ms later the range is cached again.
 *
 * The stress (8 threads register/query/close one 64 KiB range while a 9th
 * munmaps and maps it again) checks every registration that no remap
 * overlapped twice: its pfn0 is the page mapped now (root), and its entry
 * was not already seen before a later remap (every remap must invalidate
 * every entry of the range; this check needs no PFNs).
 *
 * The program adapts to how run.sh starts it:
 *   (default)                          lazy dereg, invalidation by munmap,
 *        MAP_FIXED, partial munmap, brk/sbrk, madvise, mremap, free/malloc,
 *        access in the match, fork, and the 9-thread stress
 *        (it sets FI_OXMR_MR_CACHE_ENABLE=1 and FI_OXMR_MR_RECORD_PFN=1
 *        itself, before fi_getinfo; FI_OXMR_MR_CACHE_ENABLE=0 is kept)
 *   FI_OXMR_MR_CACHE_MAX_COUNT=4       eviction by count
 *   FI_OXMR_MR_CACHE_MAX_SIZE=262144   eviction by size
 *   OXT_MR_CACHE_MEMLOCK=user          as uid 65534 under RLIMIT_MEMLOCK
 *        1 MiB: unused entries are evicted when pinning needs the budget
 *   FI_OXMR_MR_CACHE_ENABLE=0, FI_OXMR_MR_CACHE_MONITOR=none,
 *   FI_OXMR_MR_CACHE_EXPLICIT=0        nothing is served from a cache
 *   OXT_QUICK=1                        stress with 100,000 registrations
 *                                      (default 1,000,000: ~2 s release,
 *                                      ~5 s debug on 2 cores; stopped at
 *                                      35 s in any case)
 *   OXT_STRESS_N=<n>                   stress with n registrations
 */
#include "oxt.h"

#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <rdma/fi_ext_oxmr.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MADV_FREE
#define MADV_FREE 8
#endif

#define PS 4096UL
#define K64 (64UL * 1024)
#define KB(bytes) ((long)((bytes) / 1024))
#define ACC_RW (FI_REMOTE_READ | FI_REMOTE_WRITE)
#define ACC_R FI_REMOTE_READ

/* ------------------------------------------------------------ the domain */

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct oxmr_mr_ops *ops;

/* Largest cache entry id seen: a miss must produce a larger one. */
static uint64_t max_entry;

static int getinfo_cache(struct fi_info **out)
{
	struct fi_info *hints = oxt_hints(FI_EP_RDM);
	int ret;

	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_LOCAL;
	*out = NULL;
	ret = fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, out);
	fi_freeinfo(hints);
	if (ret == 0 && (*out)->next) {
		fi_freeinfo((*out)->next);
		(*out)->next = NULL;
	}
	return ret;
}

static void dom_open(void)
{
	REQUIRE_RC(getinfo_cache(&info), 0);
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	REQUIRE_RC(fi_domain(fabric, info, &domain, NULL), 0);
	REQUIRE_RC(fi_open_ops(&domain->fid, OXMR_MR_OPS_NAME, 0,
			       (void **)&ops, NULL),
		   0);
	REQUIRE(ops && ops->query && ops->stats,
		"oxmr_mr_ops table or its functions are NULL");
}

static void dom_close(void)
{
	EXPECT_RC(fi_close(&domain->fid), 0);
	EXPECT_RC(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	domain = NULL;
	fabric = NULL;
	info = NULL;
}

static struct oxmr_mr_stats st(void)
{
	struct oxmr_mr_stats s;

	memset(&s, 0, sizeof s);
	s.size = sizeof s;
	EXPECT_RC(ops->stats(domain, &s), 0);
	return s;
}

static struct oxmr_mr_info qi(struct fid_mr *mr)
{
	struct oxmr_mr_info i;

	memset(&i, 0, sizeof i);
	i.size = sizeof i;
	EXPECT_RC(ops->query(mr, &i), 0);
	return i;
}

static int reg(void *buf, size_t len, uint64_t acc, struct fid_mr **mr)
{
	*mr = NULL;
	return fi_mr_reg(domain, buf, len, acc, 0, 0, 0, mr, NULL);
}

static void mr_close_at(const char *file, int line, struct fid_mr **mr)
{
	if (*mr)
		oxt_check_rc(file, line, "fi_close(mr)", fi_close(&(*mr)->fid),
			     0);
	*mr = NULL;
}
#define MR_CLOSE(mr) mr_close_at(__FILE__, __LINE__, &(mr))

/* ------------------------------------------------------- kernel counters */


static void vmpin_at(const char *file, int line, const char *what, long base,
		     long kb)
{
	long now = vm_pin();

	if (now != base + kb)
		oxt_fail(file, line,
			 "VmPin %s: expected %ld kB (%+ld), got %ld kB (%+ld)",
			 what, base + kb, kb, now, now - base);
}
#define EXPECT_VMPIN(what, base, kb) vmpin_at(__FILE__, __LINE__, what, base, kb)

/* PFNs: /proc/self/pagemap, opened once per process (an fd opened by the
 * parent keeps showing the parent's pages in a forked child). */
static int pagemap_fd = -1;
static bool pfns;

static void pagemap_open(void)
{
	if (pagemap_fd >= 0)
		close(pagemap_fd);
	pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
}

/* The PFN behind `addr` now (0: not present, or hidden from this user). */
static uint64_t pfn_now(const void *addr)
{
	uint64_t e = 0;
	off_t off = (off_t)((uintptr_t)addr / PS) * 8;

	if (pagemap_fd < 0 ||
	    pread(pagemap_fd, &e, sizeof e, off) != (ssize_t)sizeof e)
		return 0;
	if (!(e & (1ULL << 63)))
		return 0;
	return e & ((1ULL << 55) - 1);
}

/* ---------------------------------------------------------------- memory */

static void fill(void *p, size_t len, int c)
{
	memset(p, c, len); /* resident, so pins take real pages */
}

static char *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED, "mmap(%zu): %s", len, strerror(errno));
	fill(p, len, 'a');
	return p;
}

/* New anonymous memory at exactly `addr` (MAP_FIXED), filled with `c`. */
static void map_fixed(void *addr, size_t len, int c)
{
	void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);

	REQUIRE(p == addr, "mmap(%p, %zu, MAP_FIXED): %s", addr, len,
		p == MAP_FAILED ? strerror(errno) : "another address");
	fill(p, len, c);
}

/* Bytes the kernel pins for [p, p+len): whole pages. */
static size_t charged(const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;

	return ((a + len + PS - 1) & ~(PS - 1)) - (a & ~(PS - 1));
}

/* ---------------------------------------------------- hit / miss checks */

/*
 * Register and expect a hit on entry `entry` (0: on any earlier entry).
 * Checks the registered length, and pfn0 against pagemap. The MR (or NULL)
 * is returned, its query in *out.
 */
static struct fid_mr *hit_at(const char *file, int line, const char *what,
			     void *buf, size_t len, uint64_t acc,
			     uint64_t entry, struct oxmr_mr_info *out)
{
	struct oxmr_mr_stats b = st(), a;
	struct oxmr_mr_info i;
	struct fid_mr *mr = NULL;
	char what2[300];
	int rc;

	snprintf(what2, sizeof what2, "%s: fi_mr_reg", what);
	rc = reg(buf, len, acc, &mr);
	if (!oxt_check_rc(file, line, what2, rc, 0))
		return NULL;
	a = st();
	i = qi(mr);
	if (out)
		*out = i;
	if (a.cache_hits != b.cache_hits + 1 ||
	    a.cache_misses != b.cache_misses)
		oxt_fail(file, line,
			 "%s: expected a cache hit (hits +1, misses +0), got hits %+lld, misses %+lld (entry %" PRIu64 ")",
			 what, (long long)(a.cache_hits - b.cache_hits),
			 (long long)(a.cache_misses - b.cache_misses),
			 i.cache_entry);
	if (entry && i.cache_entry != entry)
		oxt_fail(file, line,
			 "%s: expected cache entry %" PRIu64 ", got %" PRIu64,
			 what, entry, i.cache_entry);
	if (!entry && (i.cache_entry == 0 || i.cache_entry > max_entry))
		oxt_fail(file, line,
			 "%s: expected an earlier cache entry (1..%" PRIu64 "), got %" PRIu64,
			 what, max_entry, i.cache_entry);
	if (i.len != len)
		oxt_fail(file, line, "%s: query len: expected %zu, got %" PRIu64,
			 what, len, i.len);
	if (pfns && i.pfn0 != pfn_now(buf))
		oxt_fail(file, line,
			 "%s: query pfn0 %#" PRIx64 " is not the page mapped at %p now (%#" PRIx64 ")",
			 what, i.pfn0, buf, pfn_now(buf));
	return mr;
}
#define REG_HIT(what, buf, len, acc, entry, out)                               \
	hit_at(__FILE__, __LINE__, what, buf, len, acc, entry, out)

/*
 * Register and expect a miss: a new entry (not `old_entry`), pinning the
 * page mapped now at `buf`, which is not `old_pfn` (when old_pfn != 0).
 */
static struct fid_mr *miss_at(const char *file, int line, const char *what,
			      void *buf, size_t len, uint64_t acc,
			      uint64_t old_entry, uint64_t old_pfn,
			      struct oxmr_mr_info *out)
{
	struct oxmr_mr_stats b = st(), a;
	struct oxmr_mr_info i;
	struct fid_mr *mr = NULL;
	char what2[300];
	uint64_t now;
	int rc;

	snprintf(what2, sizeof what2, "%s: fi_mr_reg", what);
	rc = reg(buf, len, acc, &mr);
	if (!oxt_check_rc(file, line, what2, rc, 0))
		return NULL;
	a = st();
	i = qi(mr);
	if (out)
		*out = i;
	if (a.cache_misses != b.cache_misses + 1 ||
	    a.cache_hits != b.cache_hits)
		oxt_fail(file, line,
			 "%s: expected a cache miss (misses +1, hits +0), got misses %+lld, hits %+lld (entry %" PRIu64 "%s)",
			 what, (long long)(a.cache_misses - b.cache_misses),
			 (long long)(a.cache_hits - b.cache_hits),
			 i.cache_entry,
			 old_entry && i.cache_entry == old_entry ?
				 ": the stale entry" : "");
	if (i.cache_entry == 0 || i.cache_entry <= max_entry)
		oxt_fail(file, line,
			 "%s: expected a new cache entry (> %" PRIu64 "), got %" PRIu64 "%s",
			 what, max_entry, i.cache_entry,
			 old_entry && i.cache_entry == old_entry ?
				 " (the stale entry)" : "");
	if (i.cache_entry > max_entry)
		max_entry = i.cache_entry;
	if (i.len != len)
		oxt_fail(file, line, "%s: query len: expected %zu, got %" PRIu64,
			 what, len, i.len);
	now = pfn_now(buf);
	if (pfns && i.pfn0 != now)
		oxt_fail(file, line,
			 "%s: query pfn0 %#" PRIx64 " is not the page mapped at %p now (%#" PRIx64 ")",
			 what, i.pfn0, buf, now);
	if (pfns && old_pfn && i.pfn0 == old_pfn)
		oxt_fail(file, line,
			 "%s: pfn0 %#" PRIx64 " is the old page's (expected the new page %#" PRIx64 ")",
			 what, i.pfn0, now);
	return mr;
}
#define REG_MISS(what, buf, len, acc, old_entry, old_pfn, out)                 \
	miss_at(__FILE__, __LINE__, what, buf, len, acc, old_entry, old_pfn,   \
		out)

/* Stats counter deltas. */
#define EXPECT_GREW(a, b, field)                                               \
	EXPECT((a).field > (b).field,                                          \
	       "stats." #field ": expected to grow from %" PRIu64 ", got %" PRIu64, \
	       (b).field, (a).field)

/*
 * Let the cache apply what the monitor has logged so far (every
 * registration does that first), so that the pins of entries invalidated
 * by earlier groups' munmaps are dropped before VmPin is measured. It
 * registers one page that never changes: a miss the first time, then hits,
 * so settle() itself leaves VmPin as it is.
 */
static char *settle_page;

static void settle(void)
{
	struct fid_mr *mr = NULL;

	if (!settle_page)
		settle_page = map_anon(PS);
	EXPECT_RC(reg(settle_page, PS, ACC_RW, &mr), 0);
	MR_CLOSE(mr);
}

/*
 * A cached, unused entry for [buf, buf+len): register (a miss), close.
 * Returns the entry's id; its pfn0 in *pfn. *base gets VmPin before it.
 */
static uint64_t cache_one_at(const char *file, int line, void *buf,
			     size_t len, uint64_t *pfn, long *base)
{
	struct oxmr_mr_info i;
	struct fid_mr *mr;

	settle();
	if (base)
		*base = vm_pin();
	mr = miss_at(file, line, "first registration", buf, len, ACC_RW, 0, 0,
		     &i);
	if (!mr) {
		*pfn = 0;
		return 0;
	}
	*pfn = i.pfn0;
	mr_close_at(file, line, &mr);
	if (base)
		vmpin_at(file, line, "after closing (the pin stays cached)",
			 *base, KB(charged(buf, len)));
	return i.cache_entry;
}
#define CACHE_ONE(buf, len, pfn, base)                                         \
	cache_one_at(__FILE__, __LINE__, buf, len, pfn, base)

/* A group `what` that cannot be set up here, skipped (counted). */
static void skip(const char *what, const char *why)
{
	OXT_GROUP(what);
	oxt_skip("%s", why);
}

/* End the current group as skipped, unless one of its checks failed. */
static void group_skip(const char *why)
{
	oxt_skip("%s", why);
}

/* ------------------------------------------------- 1. basic lazy dereg */

static void test_basic(void)
{
	struct oxmr_mr_info i1, i2, i3;
	struct oxmr_mr_stats s;
	struct fid_mr *mr1, *mr2, *mr3;
	uint64_t keys[3];
	long base;
	char *a;

	OXT_GROUP("lazy dereg: close keeps the 64 KiB pin (VmPin), re-registration is a hit on the same entry with a new key");
	a = map_anon(K64);
	base = vm_pin();
	mr1 = REG_MISS("register A", a, K64, ACC_RW, 0, 0, &i1);
	REQUIRE(mr1, "first registration failed");
	EXPECT_EQ(i1.class_, OXMR_MR_CLASS_PINNED);
	EXPECT_EQ(i1.bytes_pinned, K64);
	EXPECT_VMPIN("registered", base, 64);
	keys[0] = fi_mr_key(mr1);
	MR_CLOSE(mr1);
	EXPECT_VMPIN("after close (cached)", base, 64);
	s = st();
	EXPECT_EQ(s.live, 0);
	EXPECT_EQ(s.cache_entries, 1);
	EXPECT_EQ(s.cache_bytes, K64);
	mr2 = REG_HIT("register A again", a, K64, ACC_RW, i1.cache_entry, &i2);
	REQUIRE(mr2, "re-registration failed");
	keys[1] = fi_mr_key(mr2);
	EXPECT(keys[1] != keys[0], "re-registration got the closed MR's key %#" PRIx64,
	       keys[0]);
	EXPECT_EQ(i2.pfn0, i1.pfn0);
	EXPECT_EQ(i2.bytes_pinned, K64);
	EXPECT_EQ(i2.class_, OXMR_MR_CLASS_PINNED);
	EXPECT_VMPIN("hit", base, 64);
	s = st();
	EXPECT_EQ(s.cache_entries, 1);
	EXPECT_EQ(s.cache_bytes, K64);

	OXT_GROUP("lazy dereg: a sub-range of A (pages 1-2) is a hit on A's entry, pfn0 is its own first page");
	mr3 = REG_HIT("register A+4K, 8K", a + PS, 2 * PS, ACC_RW,
		      i1.cache_entry, &i3);
	if (mr3) {
		keys[2] = fi_mr_key(mr3);
		EXPECT(keys[2] != keys[0] && keys[2] != keys[1],
		       "sub-range registration reused key %#" PRIx64, keys[2]);
		EXPECT_EQ(i3.len, 2 * PS);
		EXPECT_EQ(i3.key, keys[2]);
	}
	MR_CLOSE(mr3);
	MR_CLOSE(mr2);
	EXPECT_VMPIN("all closed, one entry cached", base, 64);
	s = st();
	EXPECT_EQ(s.live, 0);
	EXPECT_EQ(s.cache_entries, 1);
	EXPECT_EQ(s.cache_bytes, K64);

	OXT_GROUP("lazy dereg: after munmap(A) the next registration drops A's cached pin (VmPin)");
	REQUIRE(munmap(a, K64) == 0, "munmap: %s", strerror(errno));
	a = map_anon(2 * PS);
	base = vm_pin();
	mr1 = REG_MISS("register other memory", a, 2 * PS, ACC_RW, 0, 0, NULL);
	EXPECT_VMPIN("A's pin released, the new 8 KiB pinned", base, 8 - 64);
	s = st();
	EXPECT_EQ(s.cache_entries, 1);
	EXPECT_EQ(s.cache_bytes, 2 * PS);
	MR_CLOSE(mr1);
	munmap(a, 2 * PS);
}

/* ------------------------------------------------ 2. invalidation */

/* munmap + mmap(MAP_FIXED) at the same address. */
static void test_munmap_fixed(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	uint64_t e, pfn;
	long base;
	char *a;

	OXT_GROUP("munmap A, mmap MAP_FIXED at A: miss, pins the new pages, old pin released, inv_unmap grows");
	a = map_anon(K64);
	e = CACHE_ONE(a, K64, &pfn, &base);
	b = st();
	REQUIRE(munmap(a, K64) == 0, "munmap: %s", strerror(errno));
	map_fixed(a, K64, 'b');
	EXPECT(!pfns || pfn_now(a) != pfn,
	       "the new mapping has the old (still pinned) page %#" PRIx64, pfn);
	mr = REG_MISS("register A after munmap+mmap", a, K64, ACC_RW, e, pfn,
		      NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	EXPECT_VMPIN("old pin released, new one held", base, 64);
	MR_CLOSE(mr);
	munmap(a, K64);
}

/* munmap + plain mmap that the kernel happens to place at the same address. */
static void test_munmap_same_place(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	uint64_t e, pfn;
	long base;
	char *a, *p;

	OXT_GROUP("munmap A, plain mmap(NULL) of the same size lands at A: miss, pins the new pages");
	a = map_anon(K64);
	e = CACHE_ONE(a, K64, &pfn, &base);
	b = st();
	REQUIRE(munmap(a, K64) == 0, "munmap: %s", strerror(errno));
	p = mmap(NULL, K64, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(p != MAP_FAILED, "mmap: %s", strerror(errno));
	if (p != a) {
		char why[200];

		snprintf(why, sizeof why,
			 "the kernel placed the new mapping at %p, not at the old %p",
			 (void *)p, (void *)a);
		group_skip(why);
		munmap(p, K64);
		/* the next registration drops the stale entry */
		return;
	}
	fill(p, K64, 'c');
	mr = REG_MISS("register A after munmap+mmap(NULL)", a, K64, ACC_RW, e,
		      pfn, NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	EXPECT_VMPIN("old pin released, new one held", base, 64);
	MR_CLOSE(mr);
	munmap(a, K64);
}

/* MAP_FIXED directly over a live mapping whose registration is closed. */
static void test_fixed_over_cached(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	uint64_t e, pfn;
	long base;
	char *a;

	OXT_GROUP("mmap MAP_FIXED over live A (registration closed, cached): miss, new pages, inv_unmap grows");
	a = map_anon(K64);
	e = CACHE_ONE(a, K64, &pfn, &base);
	b = st();
	map_fixed(a, K64, 'd');
	mr = REG_MISS("register A after MAP_FIXED over it", a, K64, ACC_RW, e,
		      pfn, NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	EXPECT_VMPIN("old pin released, new one held", base, 64);
	MR_CLOSE(mr);
	munmap(a, K64);
}

/* MAP_FIXED over a live mapping whose MR is still open. */
static void test_fixed_over_open(void)
{
	struct oxmr_mr_info i0, i1, i2;
	struct oxmr_mr_stats b, a2;
	struct fid_mr *old, *mr, *mr2;
	uint64_t key0;
	long base;
	char *a;

	OXT_GROUP("mmap MAP_FIXED over A while its MR is open: the open MR keeps its pin, the next registration misses");
	a = map_anon(K64);
	settle();
	base = vm_pin();
	old = REG_MISS("register A (kept open)", a, K64, ACC_RW, 0, 0, &i0);
	REQUIRE(old, "registration failed");
	key0 = fi_mr_key(old);
	b = st();
	map_fixed(a, K64, 'e');
	mr = REG_MISS("register A after MAP_FIXED over it", a, K64, ACC_RW,
		      i0.cache_entry, i0.pfn0, &i1);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	/* the open MR is untouched: same key, entry, length, pin */
	i2 = qi(old);
	EXPECT_EQ(i2.key, key0);
	EXPECT_EQ(i2.cache_entry, i0.cache_entry);
	EXPECT_EQ(i2.pfn0, i0.pfn0);
	EXPECT_EQ(i2.len, K64);
	EXPECT_EQ(i2.bytes_pinned, K64);
	EXPECT_EQ(i2.class_, OXMR_MR_CLASS_PINNED);
	EXPECT(fi_mr_desc(old) != NULL, "the open MR's fi_mr_desc is NULL");
	EXPECT_EQ(st().live, 2);
	EXPECT_VMPIN("the open MR's old pages and the new ones", base, 128);
	if (mr) {
		/* and the new entry serves the next registration */
		mr2 = REG_HIT("register A once more", a, K64, ACC_RW,
			      i1.cache_entry, NULL);
		MR_CLOSE(mr2);
	}
	MR_CLOSE(old);
	EXPECT_VMPIN("closing the open MR released the invalidated entry's pin",
		     base, 64);
	MR_CLOSE(mr);
	EXPECT_VMPIN("the new entry stays cached", base, 64);
	munmap(a, K64);
}

/* Unmap one page in the middle of a cached 16-page entry, map it again. */
static void test_partial_munmap(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mid, *mr;
	uint64_t e, pfn, pfn_mid;
	long base;
	char *a;

	OXT_GROUP("munmap page 7 of a cached 16-page entry, MAP_FIXED it again: page 7 and the whole range miss");
	a = map_anon(16 * PS);
	pfn_mid = pfn_now(a + 7 * PS);
	e = CACHE_ONE(a, 16 * PS, &pfn, &base);
	b = st();
	REQUIRE(munmap(a + 7 * PS, PS) == 0, "munmap: %s", strerror(errno));
	map_fixed(a + 7 * PS, PS, 'f');
	mid = REG_MISS("register page 7 alone", a + 7 * PS, PS, ACC_RW, e,
		       pfn_mid, NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	/* page 0 did not change: only the miss and its pfn are checked */
	mr = REG_MISS("register the whole 16 pages", a, 16 * PS, ACC_RW, e, 0,
		      NULL);
	EXPECT_VMPIN("old pin released; page 7 and the 16 pages held", base,
		     4 + 64);
	MR_CLOSE(mid);
	MR_CLOSE(mr);
	munmap(a, 16 * PS);
}

/* brk: grow the heap by 64 KiB, register its top, shrink, grow again. */
static void test_brk(bool raw)
{
	const char *what = raw ? "syscall(SYS_brk)" : "sbrk";
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	uint64_t e, pfn;
	char title[200];
	char *top, *cur;
	long base;

	/* Keep malloc off the break while the test moves it: a 4 MiB top pad
	 * gives the main arena room, so no allocation below sbrks. */
	static void *volatile pad;

	mallopt(M_TOP_PAD, 4 << 20);
	pad = malloc(100 << 10);
	free(pad);
	oxt_group_end();
	top = raw ? (char *)syscall(SYS_brk, 0) : sbrk(0);
	if ((uintptr_t)top % PS) {
		skip(what, "the program break is not page-aligned");
		return;
	}
	snprintf(title, sizeof title,
		 "%s(+64 KiB), register the new heap top, close, shrink by 64 KiB, grow again: miss, new pfn",
		 what);
	OXT_GROUP(strdup(title));
	if (raw) {
		cur = (char *)syscall(SYS_brk, top + K64);
		REQUIRE(cur == top + K64, "brk(%p) returned %p", top + K64, cur);
	} else {
		cur = sbrk(K64);
		REQUIRE(cur == top, "sbrk(64K) returned %p, the break was %p",
			cur, top);
	}
	fill(top, K64, 'g');
	e = CACHE_ONE(top, K64, &pfn, &base);
	b = st();
	cur = raw ? (char *)syscall(SYS_brk, 0) : sbrk(0);
	if (cur != top + K64) {
		/* something else moved the break: shrinking would cut it */
		oxt_fail(__FILE__, __LINE__,
			 "the break moved under the test to %p (expected %p): not shrinking",
			 cur, top + K64);
		return;
	}
	if (raw) {
		REQUIRE((char *)syscall(SYS_brk, top) == top, "brk(shrink) failed");
		REQUIRE((char *)syscall(SYS_brk, top + K64) == top + K64,
			"brk(grow) failed");
	} else {
		REQUIRE(sbrk(-(intptr_t)K64) == top + K64, "sbrk(-64K) failed");
		REQUIRE(sbrk(K64) == top, "sbrk(+64K) did not return %p", top);
	}
	fill(top, K64, 'h');
	mr = REG_MISS("register the heap top after shrink+grow", top, K64,
		      ACC_RW, e, pfn, NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	EXPECT_VMPIN("old pin released, new one held", base, 64);
	MR_CLOSE(mr);
	cur = raw ? (char *)syscall(SYS_brk, 0) : sbrk(0);
	EXPECT(cur == top + K64, "the break moved under the test to %p", cur);
	if (cur == top + K64) {
		if (raw)
			EXPECT(syscall(SYS_brk, top) == (long)top,
			       "brk(restore) failed");
		else
			EXPECT(sbrk(-(intptr_t)K64) != (void *)-1,
			       "sbrk(restore) failed");
	}
}

/*
 * The registration right after a discard (madvise) of its range: never a
 * hit, never the old entry, and it pins the pages mapped now (not
 * `old_pfn`, when non-zero). It is a miss, or served uncached: the provider
 * does not cache a range that had a discard applied in the last 50 ms
 * (REMOVE_GRACE in cache.rs: madvise reports before it zaps, so a pin
 * racing with it could hold pages about to be dropped). After that grace
 * (60 ms later) the range is cached again: a miss if the first was
 * uncached, then a hit. All MRs are closed; one entry stays cached.
 */
static void after_discard_at(const char *file, int line, const char *what,
			     char *buf, size_t len, uint64_t old_entry,
			     uint64_t old_pfn)
{
	struct oxmr_mr_stats b = st(), a;
	struct oxmr_mr_info i, i2;
	struct fid_mr *mr = NULL, *mr2;
	bool uncached = false;
	uint64_t now;
	int rc;

	rc = reg(buf, len, ACC_RW, &mr);
	if (!oxt_check_rc(file, line, what, rc, 0))
		return;
	a = st();
	i = qi(mr);
	now = pfn_now(buf);
	if (a.cache_hits != b.cache_hits || i.cache_entry == old_entry)
		oxt_fail(file, line,
			 "%s: served from the cache (hits %+lld, entry %" PRIu64 ", old entry %" PRIu64 ")",
			 what, (long long)(a.cache_hits - b.cache_hits),
			 i.cache_entry, old_entry);
	else if (i.cache_entry == 0 &&
		 a.cache_uncached == b.cache_uncached + 1 &&
		 a.cache_misses == b.cache_misses)
		uncached = true;
	else if (a.cache_misses != b.cache_misses + 1 ||
		 i.cache_entry <= max_entry)
		oxt_fail(file, line,
			 "%s: expected a miss (a new entry) or an uncached registration, got misses %+lld, uncached %+lld, entry %" PRIu64,
			 what, (long long)(a.cache_misses - b.cache_misses),
			 (long long)(a.cache_uncached - b.cache_uncached),
			 i.cache_entry);
	if (i.cache_entry > max_entry)
		max_entry = i.cache_entry;
	if (pfns && i.pfn0 != now)
		oxt_fail(file, line,
			 "%s: query pfn0 %#" PRIx64 " is not the page mapped at %p now (%#" PRIx64 ")",
			 what, i.pfn0, (void *)buf, now);
	if (pfns && old_pfn && i.pfn0 == old_pfn)
		oxt_fail(file, line,
			 "%s: pfn0 %#" PRIx64 " is the discarded page's", what,
			 i.pfn0);
	printf("# %s: %s: %s (entry %" PRIu64 ")\n", oxt_prog, what,
	       uncached ? "uncached (within the provider's discard grace)" :
			  "miss",
	       i.cache_entry);
	mr_close_at(file, line, &mr);
	oxt_sleep_ms(60);
	if (uncached) {
		mr2 = miss_at(file, line, "60 ms later: cached again (miss)", buf,
			      len, ACC_RW, old_entry, old_pfn, &i2);
		mr_close_at(file, line, &mr2);
		i.cache_entry = i2.cache_entry;
	}
	mr2 = hit_at(file, line, "then a hit", buf, len, ACC_RW, i.cache_entry,
		     NULL);
	mr_close_at(file, line, &mr2);
}
#define AFTER_DISCARD(what, buf, len, old_entry, old_pfn)                      \
	after_discard_at(__FILE__, __LINE__, what, buf, len, old_entry, old_pfn)

/* madvise(DONTNEED / FREE) of the whole cached range. */
static void test_madvise(int advice, const char *name)
{
	struct oxmr_mr_stats b, a2;
	uint64_t e, pfn;
	char title[200];
	long base;
	char *a;

	a = map_anon(K64);
	oxt_group_end();
	if (madvise(a, K64, advice) != 0 && errno == EINVAL) {
		skip(name, "madvise refuses it here (EINVAL)");
		munmap(a, K64);
		return;
	}
	snprintf(title, sizeof title,
		 "madvise(%s) of a cached 64 KiB entry, then touch: no hit, pins the page mapped now, inv_remove grows",
		 name);
	OXT_GROUP(strdup(title));
	fill(a, K64, 'i');
	e = CACHE_ONE(a, K64, &pfn, &base);
	b = st();
	REQUIRE(madvise(a, K64, advice) == 0, "madvise(%s): %s", name,
		strerror(errno));
	fill(a, K64, 'j');
	/* DONTNEED drops the pages: the touch faults in new ones (the old ones
	 * are still pinned by the entry, so they cannot come back). FREE only
	 * marks them lazily freeable, and a pinned page is never reclaimed:
	 * the touch may keep the same page, which is then correct to pin. */
	if (pfns && advice != MADV_DONTNEED)
		printf("# %s: madvise(%s): page 0 was %#" PRIx64 ", is %#" PRIx64 " (%s)\n",
		       oxt_prog, name, pfn, pfn_now(a),
		       pfn == pfn_now(a) ? "kept" : "replaced");
	AFTER_DISCARD("register A after madvise + touch", a, K64, e,
		      advice == MADV_DONTNEED ? pfn : 0);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_remove);
	EXPECT_VMPIN("old pin released, one new entry held", base, 64);
	munmap(a, K64);
}

/* DONTNEED on one middle page of a cached 16-page entry. */
static void test_madvise_middle(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	uint64_t e, pfn, pfn_mid;
	long base;
	char *a;

	OXT_GROUP("madvise(DONTNEED) page 9 of a cached 16-page entry: page 9 (no hit, new page), then the whole range misses");
	a = map_anon(16 * PS);
	pfn_mid = pfn_now(a + 9 * PS);
	e = CACHE_ONE(a, 16 * PS, &pfn, &base);
	b = st();
	REQUIRE(madvise(a + 9 * PS, PS, MADV_DONTNEED) == 0, "madvise: %s",
		strerror(errno));
	fill(a + 9 * PS, PS, 'k');
	AFTER_DISCARD("register page 9 alone", a + 9 * PS, PS, e, pfn_mid);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_remove);
	mr = REG_MISS("register the whole 16 pages", a, 16 * PS, ACC_RW, e, 0,
		      NULL);
	EXPECT_VMPIN("old pin released; page 9 and the 16 pages held", base,
		     4 + 64);
	MR_CLOSE(mr);
	munmap(a, 16 * PS);
}

/* mremap: move A elsewhere, map something new at A. */
static void test_mremap_move(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr, *mv;
	struct oxmr_mr_info i;
	uint64_t e, pfn;
	long base;
	char *a, *dst, *p;

	OXT_GROUP("mremap(MAYMOVE|FIXED) A to B, mmap new memory at A: A misses with new pages, inv_remap grows");
	a = map_anon(K64);
	dst = mmap(NULL, K64, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(dst != MAP_FAILED, "mmap: %s", strerror(errno));
	e = CACHE_ONE(a, K64, &pfn, &base);
	b = st();
	p = mremap(a, K64, K64, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	REQUIRE(p == dst, "mremap(A -> %p): %s", (void *)dst,
		p == MAP_FAILED ? strerror(errno) : "another address");
	EXPECT(!pfns || pfn_now(dst) == pfn,
	       "the moved page is %#" PRIx64 ", expected the pinned %#" PRIx64,
	       pfn_now(dst), pfn);
	map_fixed(a, K64, 'l');
	mr = REG_MISS("register A after mremap moved it away", a, K64, ACC_RW,
		      e, pfn, NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_remap);
	/* the moved memory at B is the old pages: a new entry pins them */
	mv = REG_MISS("register B (the moved memory)", dst, K64, ACC_RW, e, 0,
		      &i);
	EXPECT(!pfns || i.pfn0 == pfn,
	       "B's pfn0 %#" PRIx64 ", expected the moved page %#" PRIx64,
	       i.pfn0, pfn);
	EXPECT_VMPIN("old entry released; A's new and B's entries held", base,
		     128);
	MR_CLOSE(mr);
	MR_CLOSE(mv);
	munmap(a, K64);
	munmap(dst, K64);
}

/* mremap grow in place. */
static void test_mremap_grow(void)
{
	struct fid_mr *mr;
	struct oxmr_mr_stats b, a2;
	uint64_t e, pfn;
	long base;
	char *a, *p;

	OXT_GROUP("mremap grows A from 64 to 128 KiB in place: the original range may hit, the grown range misses");
	a = map_anon(2 * K64);
	REQUIRE(munmap(a + K64, K64) == 0, "munmap: %s", strerror(errno));
	e = CACHE_ONE(a, K64, &pfn, &base);
	p = mremap(a, K64, 2 * K64, 0);
	if (p == MAP_FAILED) {
		char why[200];

		snprintf(why, sizeof why, "mremap cannot grow A in place: %s",
			 strerror(errno));
		group_skip(why);
		munmap(a, K64);
		return;
	}
	REQUIRE(p == a, "mremap without MAYMOVE moved A to %p", (void *)p);
	fill(a + K64, K64, 'm');
	b = st();
	mr = NULL;
	EXPECT_RC(reg(a, K64, ACC_RW, &mr), 0);
	if (mr) {
		struct oxmr_mr_info i = qi(mr);

		a2 = st();
		printf("# %s: after growing in place, the original 64 KiB: %s (entry %" PRIu64 ", cached entry was %" PRIu64 ")\n",
		       oxt_prog,
		       a2.cache_hits == b.cache_hits + 1 ? "hit" : "miss",
		       i.cache_entry, e);
		if (a2.cache_hits == b.cache_hits + 1)
			EXPECT_EQ(i.cache_entry, e);
		if (i.cache_entry > max_entry)
			max_entry = i.cache_entry;
		EXPECT(!pfns || i.pfn0 == pfn_now(a),
		       "pfn0 %#" PRIx64 " is not A's page %#" PRIx64, i.pfn0,
		       pfn_now(a));
		MR_CLOSE(mr);
	}
	mr = REG_MISS("register the grown 128 KiB", a, 2 * K64, ACC_RW, e, 0,
		      NULL);
	EXPECT_EQ(qi(mr).bytes_pinned, 2 * K64);
	MR_CLOSE(mr);
	(void)base;
	munmap(a, 2 * K64);
}

/* mremap shrink in place: no entry covering the dropped tail is served. */
static void test_mremap_shrink(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	struct oxmr_mr_info i;
	uint64_t e, pfn;
	long base;
	char *a, *p;
	int rc;

	OXT_GROUP("mremap shrinks a cached 128 KiB A to 64 KiB: the old range is -FI_EFAULT, the rest never uses the old entry");
	a = map_anon(2 * K64);
	e = CACHE_ONE(a, 2 * K64, &pfn, &base);
	b = st();
	p = mremap(a, 2 * K64, K64, 0);
	REQUIRE(p == a, "mremap(shrink): %s",
		p == MAP_FAILED ? strerror(errno) : "moved");
	rc = reg(a, 2 * K64, ACC_RW, &mr);
	EXPECT_RC(rc, -FI_EFAULT);
	if (rc == 0 && mr) {
		i = qi(mr);
		oxt_fail(__FILE__, __LINE__,
			 "the old 128 KiB range registered (entry %" PRIu64 ", old entry %" PRIu64 ") although its tail is unmapped",
			 i.cache_entry, e);
		MR_CLOSE(mr);
	}
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	EXPECT_VMPIN("the old 128 KiB entry released", base, 0);
	b = st();
	EXPECT_RC(reg(a, K64, ACC_RW, &mr), 0);
	if (mr) {
		i = qi(mr);
		a2 = st();
		printf("# %s: after shrinking, the remaining 64 KiB: %s (entry %" PRIu64 ")\n",
		       oxt_prog,
		       a2.cache_hits > b.cache_hits ? "hit" : "miss",
		       i.cache_entry);
		EXPECT(i.cache_entry != e,
		       "the remaining 64 KiB was served by the old entry %" PRIu64 " that covers the unmapped tail",
		       e);
		EXPECT_EQ(i.bytes_pinned, K64);
		EXPECT(!pfns || i.pfn0 == pfn_now(a),
		       "pfn0 %#" PRIx64 " is not A's page %#" PRIx64, i.pfn0,
		       pfn_now(a));
		if (i.cache_entry > max_entry)
			max_entry = i.cache_entry;
		MR_CLOSE(mr);
	}
	munmap(a, K64);
}

/* free()/malloc() of large (mmapped) blocks. */
static void test_malloc_reuse(void)
{
	const size_t len = 1UL << 20;
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	uint64_t e, pfn;
	volatile uintptr_t pa; /* p's address, kept past free(p) */
	long base;
	char *p, *q;

	OXT_GROUP("M_MMAP_THRESHOLD 64 KiB: malloc 1 MiB, register, close, free, malloc 1 MiB again at the same address: miss, new pfn");
	REQUIRE(mallopt(M_MMAP_THRESHOLD, 64 * 1024) == 1,
		"mallopt(M_MMAP_THRESHOLD) failed");
	p = malloc(len);
	REQUIRE(p, "malloc(1 MiB) failed");
	/* glibc marks a chunk it got from mmap with IS_MMAPPED (0x2) in the
	 * size word before the block: free() then munmaps it */
	if (!(((size_t *)p)[-1] & 2)) {
		group_skip("malloc served 1 MiB from the heap, not from mmap");
		free(p);
		return;
	}
	fill(p, len, 'n');
	e = CACHE_ONE(p, len, &pfn, &base);
	b = st();
	pa = (uintptr_t)p;
	free(p);
	q = malloc(len);
	REQUIRE(q, "malloc(1 MiB) failed");
	if ((uintptr_t)q != pa) {
		char why[200];

		snprintf(why, sizeof why,
			 "the second malloc(1 MiB) returned %p, not %p",
			 (void *)q, (void *)pa);
		group_skip(why);
		free(q);
		return;
	}
	fill(q, len, 'o');
	mr = REG_MISS("register the new block", q, len, ACC_RW, e, pfn, NULL);
	a2 = st();
	EXPECT_GREW(a2, b, cache_inv_unmap);
	/* the block is not page-aligned: 257 pages are pinned */
	EXPECT_VMPIN("old pin released, new one held", base,
		     KB(charged(q, len)));
	MR_CLOSE(mr);
	free(q);
}

/* ------------------------------------------------ 3. access in the match */

static void test_access(void)
{
	struct oxmr_mr_info ir, irw, i;
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	long lck0;
	char *a;
	int rc;

	OXT_GROUP("access: an entry pinned for FI_REMOTE_READ does not serve READ|WRITE (miss); READ then hits");
	a = map_anon(K64);
	mr = REG_MISS("register A FI_REMOTE_READ", a, K64, ACC_R, 0, 0, &ir);
	MR_CLOSE(mr);
	mr = REG_MISS("register A FI_REMOTE_READ|FI_REMOTE_WRITE", a, K64,
		      ACC_RW, ir.cache_entry, 0, &irw);
	EXPECT(irw.cache_entry != ir.cache_entry,
	       "the read-only entry served a write registration");
	EXPECT_EQ(irw.access, ACC_RW);
	MR_CLOSE(mr);
	mr = REG_HIT("register A FI_REMOTE_READ again", a, K64, ACC_R, 0, &i);
	if (mr) {
		EXPECT(i.cache_entry == ir.cache_entry ||
			       i.cache_entry == irw.cache_entry,
		       "entry %" PRIu64 " is neither A's read entry %" PRIu64 " nor its read-write entry %" PRIu64,
		       i.cache_entry, ir.cache_entry, irw.cache_entry);
		EXPECT_EQ(i.access, ACC_R);
	}
	MR_CLOSE(mr);
	munmap(a, K64);

	OXT_GROUP("access: PROT_READ memory registers FI_REMOTE_READ (LOCKED); FI_REMOTE_WRITE stays -FI_EACCES");
	a = mmap(NULL, K64, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(a != MAP_FAILED, "mmap: %s", strerror(errno));
	lck0 = vm_lck();
	mr = REG_MISS("register read-only A FI_REMOTE_READ", a, K64, ACC_R, 0,
		      0, &ir);
	EXPECT_EQ(ir.class_, OXMR_MR_CLASS_LOCKED);
	MR_CLOSE(mr);
	EXPECT(vm_lck() == lck0 + 64,
	       "VmLck: expected %ld kB (the entry stays cached), got %ld", lck0 + 64,
	       vm_lck());
	b = st();
	rc = reg(a, K64, FI_REMOTE_WRITE, &mr);
	EXPECT_RC(rc, -FI_EACCES);
	if (rc == 0 && mr) {
		i = qi(mr);
		oxt_fail(__FILE__, __LINE__,
			 "read-only memory registered for FI_REMOTE_WRITE (entry %" PRIu64 ", read entry %" PRIu64 ")",
			 i.cache_entry, ir.cache_entry);
		MR_CLOSE(mr);
	}
	a2 = st();
	EXPECT_EQ(a2.cache_hits, b.cache_hits);
	EXPECT_EQ(a2.fail_eacces, b.fail_eacces + 1);
	rc = reg(a, K64, ACC_RW, &mr);
	EXPECT_RC(rc, -FI_EACCES);
	if (rc == 0)
		MR_CLOSE(mr);
	mr = REG_HIT("register read-only A FI_REMOTE_READ again", a, K64,
		     ACC_R, ir.cache_entry, &i);
	if (mr)
		EXPECT_EQ(i.class_, OXMR_MR_CLASS_LOCKED);
	MR_CLOSE(mr);
	munmap(a, K64);
}

/*
 * mprotect() is not a userfaultfd event, but perf records it (an mmap
 * record of the changed mapping), and the cache reads those records
 * before every lookup: a cached read-write entry whose memory was made
 * read-only is not served to a new registration, which then answers as a
 * fresh one does (-FI_EACCES for FI_REMOTE_WRITE on PROT_READ memory, for
 * anything on PROT_NONE memory), and served again for what the memory
 * still allows. (Where perf is not allowed, a hit checks its range in
 * /proc/self/maps as a miss does: the same answers; the Rust tests
 * cover that path.)
 */
static void test_mprotect(void)
{
	struct fid_mr *mr = NULL;
	char *a = map_anon(K64);
	int rc;

	OXT_GROUP("a cached read-write entry, then mprotect: a new registration answers as a fresh one (PROT_READ: FI_REMOTE_WRITE -FI_EACCES, FI_REMOTE_READ registers; PROT_NONE: -FI_EACCES)");
	EXPECT_RC(reg(a, K64, ACC_RW, &mr), 0);
	MR_CLOSE(mr);
	EXPECT_RC(reg(a, K64, ACC_RW, &mr), 0);
	MR_CLOSE(mr);
	REQUIRE(mprotect(a, K64, PROT_READ) == 0, "mprotect: %s", strerror(errno));
	rc = reg(a, K64, FI_REMOTE_WRITE, &mr);
	EXPECT_RC(rc, -FI_EACCES);
	MR_CLOSE(mr);
	rc = reg(a, K64, ACC_R, &mr);
	EXPECT_RC(rc, 0);
	MR_CLOSE(mr);
	REQUIRE(mprotect(a, K64, PROT_NONE) == 0, "mprotect: %s", strerror(errno));
	rc = reg(a, K64, ACC_R, &mr);
	EXPECT_RC(rc, -FI_EACCES);
	MR_CLOSE(mr);
	REQUIRE(mprotect(a, K64, PROT_READ | PROT_WRITE) == 0, "mprotect: %s", strerror(errno));
	rc = reg(a, K64, ACC_RW, &mr);
	EXPECT_RC(rc, 0);
	MR_CLOSE(mr);
	oxt_group_end();
	munmap(a, K64);
}

/* -------------------------------------------------------------- 7. fork */

struct child_report {
	int rc;              /* fi_mr_reg in the child */
	uint64_t entry;      /* its query's cache_entry */
	uint64_t hits0, hits1; /* stats.cache_hits before/after */
	uint64_t pfn0, pfn_now; /* its query's pfn0, pagemap in the child */
	int wrote;           /* the child wrote 'Z' over A */
};

/*
 * A child that opens a domain of its own gets a cache that sees its own
 * munmap: the parent's monitor thread did not survive the fork, and the
 * userfaultfd it reads watches the parent's memory.
 */
static void test_fork_new_domain(void)
{
	uint64_t e[3] = { 0 };
	int pfd[2], status = 0;
	ssize_t n;
	pid_t pid;
	char *a;

	OXT_GROUP("fork, then a new domain in the child: munmap + mmap MAP_FIXED there is a cache miss, not the stale entry");
	/* Mapped before the fork, so the parent has it too. */
	a = map_anon(K64);
	fill(a, K64, 'p');
	REQUIRE(pipe(pfd) == 0, "pipe: %s", strerror(errno));
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct fid_mr *cmr = NULL;

		alarm(20); /* alarms are not inherited */
		dom_open();
		if (reg(a, K64, ACC_RW, &cmr) == 0) {
			e[0] = qi(cmr).cache_entry;
			fi_close(&cmr->fid);
		}
		munmap(a, K64);
		map_fixed(a, K64, 'c');
		cmr = NULL;
		if (reg(a, K64, ACC_RW, &cmr) == 0) {
			e[1] = qi(cmr).cache_entry;
			fi_close(&cmr->fid);
		}
		e[2] = 1;
		n = write(pfd[1], e, sizeof e);
		_exit(n == (ssize_t)sizeof e ? 0 : 3);
	}
	close(pfd[1]);
	n = read(pfd[0], e, sizeof e);
	close(pfd[0]);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x (14: it hung)", status);
	REQUIRE(n == (ssize_t)sizeof e && e[2] == 1, "no report from the child");
	EXPECT(e[0] != 0, "the child's first registration was not cached");
	EXPECT(e[1] != e[0], "the child's registration after munmap + MAP_FIXED used the stale entry %" PRIu64, e[0]);
	munmap(a, K64);
}

/* Shared mappings lose pages without an event for our mapping
 * (ftruncate, hole punching by anyone holding the file): never cached. */
static void test_shared_uncached(void)
{
	struct oxmr_mr_stats b, a2;
	struct fid_mr *mr;
	int fd;
	char *m;

	OXT_GROUP("a MAP_SHARED (memfd) range registers uncached, twice: no entry, no hit");
	fd = memfd_create("oxmr-test", MFD_CLOEXEC);
	REQUIRE(fd >= 0 && ftruncate(fd, K64) == 0, "memfd: %s", strerror(errno));
	m = mmap(NULL, K64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(m != MAP_FAILED, "mmap: %s", strerror(errno));
	memset(m, 's', K64);
	for (int i = 0; i < 2; i++) {
		b = st();
		REQUIRE_RC(reg(m, K64, ACC_RW, &mr), 0);
		a2 = st();
		EXPECT_EQ(qi(mr).cache_entry, 0);
		EXPECT(a2.cache_uncached == b.cache_uncached + 1 && a2.cache_hits == b.cache_hits,
		       "registration %d: uncached %+lld, hits %+lld (want +1, +0)", i + 1,
		       (long long)(a2.cache_uncached - b.cache_uncached), (long long)(a2.cache_hits - b.cache_hits));
		MR_CLOSE(mr);
	}
	munmap(m, K64);
	close(fd);
}

static void test_fork(void)
{
	struct child_report r;
	struct oxmr_mr_info i;
	struct fid_mr *mr;
	uint64_t e, pfn;
	long base, pin_fork;
	int pfd[2], status = 0;
	ssize_t n;
	pid_t pid;
	char *a;

	OXT_GROUP("fork with an unused cached entry for A: the child's registration of A is no cache hit");
	a = map_anon(K64);
	fill(a, K64, 'P');
	e = CACHE_ONE(a, K64, &pfn, &base);
	pin_fork = vm_pin();
	REQUIRE(pipe(pfd) == 0, "pipe: %s", strerror(errno));
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct fid_mr *cmr = NULL;
		struct oxmr_mr_stats s;

		alarm(20); /* alarms are not inherited */
		pagemap_open();
		memset(&r, 0, sizeof r);
		memset(&s, 0, sizeof s);
		s.size = sizeof s;
		ops->stats(domain, &s);
		r.hits0 = s.cache_hits;
		r.rc = reg(a, K64, ACC_RW, &cmr);
		if (r.rc == 0) {
			struct oxmr_mr_info ci;

			memset(&ci, 0, sizeof ci);
			ci.size = sizeof ci;
			ops->query(cmr, &ci);
			r.entry = ci.cache_entry;
			r.pfn0 = ci.pfn0;
			r.pfn_now = pfn_now(a);
		}
		ops->stats(domain, &s);
		r.hits1 = s.cache_hits;
		memset(a, 'Z', K64);
		r.wrote = 1;
		if (cmr)
			fi_close(&cmr->fid);
		n = write(pfd[1], &r, sizeof r);
		_exit(n == (ssize_t)sizeof r ? 0 : 3);
	}
	close(pfd[1]);
	memset(&r, 0, sizeof r);
	n = read(pfd[0], &r, sizeof r);
	close(pfd[0]);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child: status %#x", status);
	REQUIRE(n == (ssize_t)sizeof r, "no report from the child");
	EXPECT_RC(r.rc, 0);
	EXPECT(r.hits1 == r.hits0,
	       "the child's registration was a cache hit (hits %" PRIu64 " -> %" PRIu64 ")",
	       r.hits0, r.hits1);
	EXPECT(r.entry != e,
	       "the child's registration uses the parent's cached entry %" PRIu64,
	       e);
	if (pfns) {
		EXPECT(r.pfn0 == r.pfn_now,
		       "the child's pfn0 %#" PRIx64 " is not the child's page %#" PRIx64,
		       r.pfn0, r.pfn_now);
		EXPECT(r.pfn_now != pfn,
		       "the child maps the parent's pinned page %#" PRIx64, pfn);
	}
	EXPECT(r.wrote, "the child did not write");
	{
		long at = -1;
		size_t k;

		for (k = 0; k < K64 && at < 0; k++)
			if (a[k] != 'P')
				at = (long)k;
		EXPECT(at < 0, "the child's write reached the parent's A (byte %ld is '%c')",
		       at, at < 0 ? 'P' : a[at]);
	}

	OXT_GROUP("fork: the parent's next registration of A hits its entry, pfn0 still the page mapped in the parent");
	mr = REG_HIT("parent registers A after the fork", a, K64, ACC_RW, e, &i);
	EXPECT(!pfns || i.pfn0 == pfn,
	       "pfn0 %#" PRIx64 ", expected the page pinned before the fork %#" PRIx64,
	       i.pfn0, pfn);
	MR_CLOSE(mr);

	OXT_GROUP("fork: the child's registration left nothing pinned or accounted in the parent (VmPin)");
	EXPECT_VMPIN("in the parent after the child registered, closed and exited",
		     pin_fork, 0);
	(void)base;
	munmap(a, K64);
}

/*
 * A registration the parent makes after fork() keeps its pin while a child
 * registers memory of its own: parent and child must not share pins.
 */
static void test_fork_parent_pin(void)
{
	struct oxmr_mr_info i;
	struct fid_mr *mb;
	int go[2], done[2], status = 0, crc = -1;
	long pin0, pin_child;
	char *a, *b, c = 0;
	pid_t pid;

	OXT_GROUP("fork: the parent registers 128 KiB B after the fork; a child registering 64 KiB does not take B's pin (VmPin)");
	a = map_anon(K64);
	b = map_anon(2 * K64);
	settle();
	REQUIRE(pipe(go) == 0 && pipe(done) == 0, "pipe: %s", strerror(errno));
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct fid_mr *cmr = NULL;
		int rc = -1;

		alarm(20);
		close(go[1]);
		close(done[0]);
		if (read(go[0], &c, 1) == 1)
			rc = reg(a, K64, ACC_RW, &cmr);
		if (write(done[1], &rc, sizeof rc) != (ssize_t)sizeof rc)
			_exit(3);
		if (read(go[0], &c, 1) != 1) /* parent has measured */
			_exit(4);
		if (cmr)
			fi_close(&cmr->fid);
		_exit(0);
	}
	close(go[0]);
	close(done[1]);
	pin0 = vm_pin();
	mb = REG_MISS("parent registers B (128 KiB) after the fork", b, 2 * K64,
		      ACC_RW, 0, 0, &i);
	EXPECT_VMPIN("B registered", pin0, 128);
	REQUIRE(write(go[1], &c, 1) == 1, "pipe write: %s", strerror(errno));
	if (read(done[0], &crc, sizeof crc) != (ssize_t)sizeof crc)
		crc = -1;
	EXPECT_RC(crc, 0);
	pin_child = vm_pin();
	EXPECT(pin_child == pin0 + 128,
	       "VmPin in the parent with B open, after the child registered 64 KiB: expected %ld kB (+128, B), got %ld kB (%+ld): the child's registration changed the parent's pins",
	       pin0 + 128, pin_child, pin_child - pin0);
	if (mb) {
		i = qi(mb);
		EXPECT_EQ(i.bytes_pinned, 2 * K64);
	}
	REQUIRE(write(go[1], &c, 1) == 1, "pipe write: %s", strerror(errno));
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child: status %#x", status);
	close(go[1]);
	close(done[0]);
	EXPECT_VMPIN("after the child closed its MR and exited, B still open",
		     pin0, 128);
	MR_CLOSE(mb);
	EXPECT_VMPIN("B closed (cached)", pin0, 128);
	munmap(a, K64);
	munmap(b, 2 * K64);
}

/* ------------------------------------------------------------ 6. threads */

#define STRESS_THREADS 8

static struct stress {
	char *a;
	size_t n;                /* registrations to make, all threads */
	atomic_ulong issued;     /* claimed so far */
	atomic_ulong gen;        /* odd while the remapper changes A */
	atomic_int stop;         /* remapper: stop */
	double deadline_ms;
	/* remapper */
	unsigned long remaps;
	int remap_err;
	void *remap_got;
} S;

struct worker {
	pthread_t t;
	unsigned long ok, efault, other, checked, stale, queries_bad;
	unsigned long stale_gen;
	int other_rc;
	uint64_t stale_pfn0, stale_now, stale_entry;
	uint64_t stale_gen_entry, stale_gen_then, stale_gen_now;
};

/*
 * Generation each cache entry was first seen in (+1; 0: not yet), by entry
 * id. Every remap unmaps A, which must invalidate every entry for A: an
 * entry seen in two different stable generations was served stale. This
 * needs no PFNs (it works unprivileged too).
 */
#define SEEN_IDS (1UL << 18)
static atomic_ulong seen_gen[SEEN_IDS];

static void *remapper(void *arg)
{
	uint64_t v;
	size_t k;

	(void)arg;
	while (!atomic_load(&S.stop)) {
		void *p;

		atomic_fetch_add(&S.gen, 1); /* odd: changing */
		if (munmap(S.a, K64) != 0) {
			S.remap_err = errno;
			atomic_fetch_add(&S.gen, 1);
			break;
		}
		/* MAP_FIXED_NOREPLACE: like MAP_FIXED into the hole, but if
		 * another thread's mmap took the hole meanwhile, fail instead
		 * of clobbering it */
		p = mmap(S.a, K64, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p != S.a) {
			S.remap_err = p == MAP_FAILED ? errno : -1;
			S.remap_got = p;
			if (p != MAP_FAILED)
				munmap(p, K64);
			atomic_fetch_add(&S.gen, 1);
			break;
		}
		v = atomic_load(&S.gen) + 1;
		for (k = 0; k < K64; k += PS) /* every page present */
			memcpy(S.a + k, &v, sizeof v);
		atomic_fetch_add(&S.gen, 1); /* even: stable */
		S.remaps++;
		/* a short pause: stable windows for the workers to check in,
		 * yet thousands of remaps */
		{
			struct timespec ts = { 0, 50000 };

			nanosleep(&ts, NULL);
		}
	}
	atomic_store(&S.stop, 1);
	return NULL;
}

static void *worker(void *arg)
{
	struct worker *w = arg;
	unsigned long k = 0;

	for (;;) {
		struct fid_mr *mr = NULL;
		struct oxmr_mr_info i;
		unsigned long g1, g2;
		uint64_t now;
		int rc;

		if (atomic_fetch_add(&S.issued, 1) >= S.n)
			break;
		if ((++k & 255) == 0 && oxt_now_ms() > S.deadline_ms)
			break;
		g1 = atomic_load(&S.gen);
		rc = fi_mr_reg(domain, S.a, K64, ACC_RW, 0, 0, 0, &mr, NULL);
		if (rc == -FI_EFAULT) {
			w->efault++;
			continue;
		}
		if (rc != 0) {
			w->other++;
			w->other_rc = rc;
			continue;
		}
		w->ok++;
		memset(&i, 0, sizeof i);
		i.size = sizeof i;
		if (ops->query(mr, &i) != 0)
			w->queries_bad++;
		now = pfn_now(S.a);
		g2 = atomic_load(&S.gen);
		if (g1 == g2 && !(g1 & 1)) {
			/* no remap overlapped: the pin must be A's page now */
			w->checked++;
			if (pfns && i.pfn0 != now) {
				if (!w->stale) {
					w->stale_pfn0 = i.pfn0;
					w->stale_now = now;
					w->stale_entry = i.cache_entry;
				}
				w->stale++;
			}
			/* and its entry must not be one seen before a remap */
			if (i.cache_entry && i.cache_entry < SEEN_IDS) {
				unsigned long want = 0;

				if (!atomic_compare_exchange_strong(
					    &seen_gen[i.cache_entry], &want,
					    g1 + 1) &&
				    want != g1 + 1) {
					if (!w->stale_gen) {
						w->stale_gen_entry = i.cache_entry;
						w->stale_gen_then = want - 1;
						w->stale_gen_now = g1;
					}
					w->stale_gen++;
				}
			}
		}
		fi_close(&mr->fid);
	}
	return NULL;
}

static void test_stress(void)
{
	struct worker w[STRESS_THREADS];
	struct oxmr_mr_stats b, a2;
	unsigned long ok = 0, efault = 0, other = 0, checked = 0, stale = 0;
	unsigned long bad = 0, stale_gen = 0;
	const char *quick = getenv("OXT_QUICK"), *nenv = getenv("OXT_STRESS_N");
	pthread_t rt;
	double t0, ms;
	char title[300];
	char *guard;
	int k, other_rc = 0;

	memset(&S, 0, sizeof S);
	for (k = 0; k < (int)SEEN_IDS; k++)
		atomic_init(&seen_gen[k], 0);
	S.n = quick && !strcmp(quick, "1") ? 100000 : 1000000;
	if (nenv && *nenv)
		S.n = strtoul(nenv, NULL, 10);
	snprintf(title, sizeof title,
		 "stress: 8 threads register/query/close A (64 KiB) while a 9th remaps it: %zu registrations, no stale pin",
		 S.n);
	OXT_GROUP(strdup(title));
	/* A in the middle of a reserved region */
	guard = mmap(NULL, 3 * K64, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		     0);
	REQUIRE(guard != MAP_FAILED, "mmap: %s", strerror(errno));
	S.a = guard + K64;
	map_fixed(S.a, K64, 's');
	b = st();
	t0 = oxt_now_ms();
	/* at most 35 s, so the program finishes inside its 60 s watchdog */
	S.deadline_ms = t0 + 35000;
	memset(w, 0, sizeof w);
	REQUIRE(pthread_create(&rt, NULL, remapper, NULL) == 0,
		"pthread_create failed");
	for (k = 0; k < STRESS_THREADS; k++)
		REQUIRE(pthread_create(&w[k].t, NULL, worker, &w[k]) == 0,
			"pthread_create failed");
	for (k = 0; k < STRESS_THREADS; k++)
		pthread_join(w[k].t, NULL);
	atomic_store(&S.stop, 1);
	pthread_join(rt, NULL);
	ms = oxt_now_ms() - t0;
	a2 = st();
	for (k = 0; k < STRESS_THREADS; k++) {
		ok += w[k].ok;
		efault += w[k].efault;
		other += w[k].other;
		checked += w[k].checked;
		stale += w[k].stale;
		stale_gen += w[k].stale_gen;
		bad += w[k].queries_bad;
		if (w[k].stale_gen)
			printf("# %s: stress thread %d: first entry served after a remap: entry %" PRIu64 " seen in generation %" PRIu64 ", served again in generation %" PRIu64 "\n",
			       oxt_prog, k, w[k].stale_gen_entry,
			       w[k].stale_gen_then, w[k].stale_gen_now);
		if (w[k].other)
			other_rc = w[k].other_rc;
		if (w[k].stale)
			printf("# %s: stress thread %d: first stale pin: entry %" PRIu64 " pfn0 %#" PRIx64 ", A maps %#" PRIx64 "\n",
			       oxt_prog, k, w[k].stale_entry, w[k].stale_pfn0,
			       w[k].stale_now);
	}
	printf("# %s: stress: %lu registrations (%lu ok, %lu -FI_EFAULT while A was unmapped, %lu other) in %.0f ms (%.0f/s); %lu remaps; cache hits %" PRIu64 ", misses %" PRIu64 ", uncached %" PRIu64 ", inv_unmap %" PRIu64 "\n",
	       oxt_prog, ok + efault + other, ok, efault, other, ms,
	       (ok + efault + other) / (ms / 1000), S.remaps,
	       a2.cache_hits - b.cache_hits, a2.cache_misses - b.cache_misses,
	       a2.cache_uncached - b.cache_uncached,
	       a2.cache_inv_unmap - b.cache_inv_unmap);
	printf("# %s: stress: %lu samples checked (no remap overlapped): %lu stale by PFN%s, %lu entries served again after a remap\n",
	       oxt_prog, checked, stale,
	       pfns ? "" : " (PFNs hidden: not compared)", stale_gen);
	EXPECT(S.remap_err == 0,
	       "remapper: %s (mmap gave %p); stopped after %lu remaps",
	       S.remap_err > 0 ? strerror(S.remap_err) : "the hole at A was taken",
	       S.remap_got, S.remaps);
	EXPECT(ok + efault + other >= S.n,
	       "only %lu of %zu registrations ran within the 35 s budget",
	       ok + efault + other, S.n);
	EXPECT(other == 0, "%lu registrations failed otherwise (last %s)",
	       other, oxt_errname(other_rc));
	EXPECT(bad == 0, "%lu queries failed", bad);
	EXPECT(stale == 0,
	       "%lu registrations returned a pin that is not the page mapped at A (of %lu checked)",
	       stale, checked);
	EXPECT(stale_gen == 0,
	       "%lu registrations (of %lu checked) were served an entry that was already valid before a later remap of A",
	       stale_gen, checked);
	EXPECT(checked > 0, "no sample could be checked");
	EXPECT(S.remaps > 0, "the remapper never remapped A");
	EXPECT(a2.cache_hits > b.cache_hits, "no cache hit during the stress");
	EXPECT(a2.cache_misses > b.cache_misses, "no cache miss during the stress");
	EXPECT_EQ(a2.live, 0);
	if (S.remap_err) {
		/* the hole at A may be another mapping now: leave it */
		munmap(guard, K64);
		munmap(guard + 2 * K64, K64);
	} else {
		munmap(guard, 3 * K64);
	}
}

/* ----------------------------------------------------------- 4. eviction */

static void test_evict(const char *var, unsigned long limit)
{
	bool by_count = !strcmp(var, "FI_OXMR_MR_CACHE_MAX_COUNT");
	struct oxmr_mr_stats b, a2, s;
	struct oxmr_mr_info ix, i;
	struct fid_mr *mr, *x, *x2;
	char *buf[9];
	char title[200];
	long base;
	int k;

	for (k = 0; k < 9; k++)
		buf[k] = map_anon(K64);
	snprintf(title, sizeof title,
		 "%s=%lu: register+close 8 distinct 64 KiB buffers: at most 4 entries cached, >= 4 evicted, VmPin <= 4 buffers",
		 var, limit);
	OXT_GROUP(strdup(title));
	b = st();
	base = vm_pin();
	for (k = 0; k < 8; k++) {
		mr = REG_MISS("register buffer k", buf[k], K64, ACC_RW, 0, 0,
			      NULL);
		MR_CLOSE(mr);
	}
	a2 = st();
	EXPECT(a2.cache_entries <= 4, "cache_entries %" PRIu64 " > 4",
	       a2.cache_entries);
	if (!by_count)
		EXPECT(a2.cache_bytes <= limit,
		       "cache_bytes %" PRIu64 " > %lu", a2.cache_bytes, limit);
	EXPECT(a2.cache_evictions - b.cache_evictions >= 4,
	       "cache_evictions grew by %" PRIu64 ", expected >= 4",
	       a2.cache_evictions - b.cache_evictions);
	EXPECT(vm_pin() - base <= 4 * 64,
	       "VmPin grew by %ld kB: more than 4 buffers (256 kB) stay pinned",
	       vm_pin() - base);
	EXPECT_EQ((uint64_t)(vm_pin() - base), a2.cache_bytes / 1024);
	/* the most recent ones are the ones kept */
	mr = REG_HIT("register buffer 7 (most recent) again", buf[7], K64,
		     ACC_RW, 0, NULL);
	MR_CLOSE(mr);
	mr = REG_MISS("register buffer 0 (evicted) again", buf[0], K64, ACC_RW,
		      0, 0, NULL);
	MR_CLOSE(mr);

	OXT_GROUP("eviction: an entry in use is never evicted: X stays open while 8 others churn");
	x = REG_MISS("register X (kept open)", buf[8], K64, ACC_RW, 0, 0, &ix);
	REQUIRE(x, "registration failed");
	for (k = 0; k < 16; k++) {
		/* 0..7, then 7..0: every other entry is evicted at least once */
		int j = k < 8 ? k : 15 - k;

		EXPECT_RC(reg(buf[j], K64, ACC_RW, &mr), 0);
		MR_CLOSE(mr);
	}
	s = st();
	EXPECT(s.cache_entries <= 4, "cache_entries %" PRIu64 " > 4",
	       s.cache_entries);
	i = qi(x);
	EXPECT_EQ(i.cache_entry, ix.cache_entry);
	EXPECT_EQ(i.key, fi_mr_key(x));
	EXPECT_EQ(i.bytes_pinned, K64);
	EXPECT_EQ(i.class_, OXMR_MR_CLASS_PINNED);
	EXPECT(!pfns || i.pfn0 == pfn_now(buf[8]),
	       "X's pfn0 %#" PRIx64 " is not its page %#" PRIx64, i.pfn0,
	       pfn_now(buf[8]));
	/* X's entry is still in the cache: a second registration hits it */
	x2 = REG_HIT("register X again while it is open", buf[8], K64, ACC_RW,
		     ix.cache_entry, NULL);
	MR_CLOSE(x2);
	MR_CLOSE(x);
	x = REG_HIT("register X after closing it", buf[8], K64, ACC_RW,
		    ix.cache_entry, NULL);
	MR_CLOSE(x);
	s = st();
	EXPECT_EQ(s.live, 0);
	EXPECT((uint64_t)(vm_pin() - base) == s.cache_bytes / 1024,
	       "VmPin grew by %ld kB, but %" PRIu64 " bytes are cached",
	       vm_pin() - base, s.cache_bytes);
	for (k = 0; k < 9; k++)
		munmap(buf[k], K64);
}

/* Unprivileged, RLIMIT_MEMLOCK 1 MiB: pinning evicts unused entries. */
static void test_memlock_user(void)
{
	const size_t la = 512UL << 10, lb = 768UL << 10;
	struct oxmr_mr_stats b, a2;
	struct oxmr_mr_info ia, ib;
	struct fid_mr *ma, *mb;
	struct rlimit rl;
	long base;
	char *a, *bb;
	int rc;

	OXT_GROUP("uid 65534, RLIMIT_MEMLOCK 1 MiB: cached 512 KiB A, then 768 KiB B registers by evicting A");
	EXPECT_EQ(getuid(), 65534);
	REQUIRE(getrlimit(RLIMIT_MEMLOCK, &rl) == 0, "getrlimit: %s",
		strerror(errno));
	REQUIRE_EQ(rl.rlim_cur, 1048576);
	EXPECT_EQ(st().pin_cap, 1048576);
	a = map_anon(la);
	bb = map_anon(lb);
	base = vm_pin();
	ma = REG_MISS("register A (512 KiB)", a, la, ACC_RW, 0, 0, &ia);
	MR_CLOSE(ma);
	EXPECT_VMPIN("A closed, cached", base, KB(la));
	b = st();
	mb = REG_MISS("register B (768 KiB), over the limit with A cached", bb,
		      lb, ACC_RW, 0, 0, &ib);
	a2 = st();
	EXPECT(a2.cache_evictions > b.cache_evictions,
	       "cache_evictions did not grow (%" PRIu64 ")", a2.cache_evictions);
	EXPECT_EQ(a2.cache_entries, 1);
	EXPECT_EQ(a2.cache_bytes, lb);
	EXPECT_EQ(a2.fail_enomem, b.fail_enomem);
	EXPECT_VMPIN("A evicted, B pinned", base, KB(lb));

	OXT_GROUP("RLIMIT_MEMLOCK 1 MiB: with B open (in use) A cannot evict it: -FI_ENOMEM, B still held");
	b = st();
	rc = reg(a, la, ACC_RW, &ma);
	EXPECT_RC(rc, -FI_ENOMEM);
	if (rc == 0)
		MR_CLOSE(ma);
	a2 = st();
	EXPECT_EQ(a2.fail_enomem, b.fail_enomem + 1);
	if (mb) {
		struct oxmr_mr_info i = qi(mb);

		EXPECT_EQ(i.cache_entry, ib.cache_entry);
		EXPECT_EQ(i.bytes_pinned, lb);
	}
	EXPECT_VMPIN("B still pinned", base, KB(lb));

	OXT_GROUP("RLIMIT_MEMLOCK 1 MiB: B closed (cached), A registers again by evicting B");
	MR_CLOSE(mb);
	b = st();
	ma = REG_MISS("register A again", a, la, ACC_RW, ia.cache_entry, 0,
		      NULL);
	a2 = st();
	EXPECT(a2.cache_evictions > b.cache_evictions,
	       "cache_evictions did not grow");
	EXPECT_VMPIN("B evicted, A pinned", base, KB(la));
	MR_CLOSE(ma);
	munmap(a, la);
	munmap(bb, lb);
}

/* ------------------------------------------------ 5. nothing served */

static void test_no_cache(const char *why, bool has_cache)
{
	struct oxmr_mr_stats b, a2;
	struct oxmr_mr_info i;
	struct fid_mr *mr;
	char title[200];
	long base;
	char *a;
	int k;

	snprintf(title, sizeof title,
		 "%s: every re-registration pins afresh (no hits), VmPin drops after each close",
		 why);
	OXT_GROUP(strdup(title));
	a = map_anon(K64);
	b = st();
	base = vm_pin();
	for (k = 0; k < 4; k++) {
		EXPECT_RC(reg(k == 3 ? a + PS : a, k == 3 ? PS : K64, ACC_RW,
			      &mr),
			  0);
		if (!mr)
			continue;
		i = qi(mr);
		EXPECT_EQ(i.cache_entry, 0);
		EXPECT_EQ(i.class_, OXMR_MR_CLASS_PINNED);
		EXPECT(!pfns || i.pfn0 == pfn_now(k == 3 ? a + PS : a),
		       "pfn0 %#" PRIx64 " is not the page mapped now", i.pfn0);
		EXPECT_VMPIN("registered", base, k == 3 ? 4 : 64);
		MR_CLOSE(mr);
		EXPECT_VMPIN("closed", base, 0);
	}
	a2 = st();
	EXPECT_EQ(a2.cache_hits, 0);
	EXPECT_EQ(a2.cache_misses, 0);
	EXPECT_EQ(a2.cache_entries, 0);
	EXPECT_EQ(a2.cache_bytes, 0);
	EXPECT_EQ(a2.cache_uncached - b.cache_uncached, has_cache ? 4 : 0);
	/* an invalidation changes nothing either */
	map_fixed(a, K64, 'q');
	EXPECT_RC(reg(a, K64, ACC_RW, &mr), 0);
	if (mr) {
		i = qi(mr);
		EXPECT_EQ(i.cache_entry, 0);
		EXPECT(!pfns || i.pfn0 == pfn_now(a),
		       "pfn0 %#" PRIx64 " is not the page mapped now", i.pfn0);
	}
	MR_CLOSE(mr);
	EXPECT_EQ(st().cache_hits, 0);
	munmap(a, K64);
}

/* ------------------------------------------------------------------ main */

static bool env_is(const char *var, const char *val)
{
	const char *v = getenv(var);

	return v && !strcmp(v, val);
}

int main(int argc, char **argv)
{
	const char *en = getenv("FI_OXMR_MR_CACHE_ENABLE");
	const char *cnt = getenv("FI_OXMR_MR_CACHE_MAX_COUNT");
	const char *sz = getenv("FI_OXMR_MR_CACHE_MAX_SIZE");
	const char *memlock = getenv("OXT_MR_CACHE_MEMLOCK");
	bool disabled = en && !strcmp(en, "0");
	char *probe;
	double t0 = oxt_now_ms();

	/* Set before fi_getinfo, which reads the variables. A run that asks
	 * for FI_OXMR_MR_CACHE_ENABLE=0 keeps it. */
	if (!disabled)
		setenv("FI_OXMR_MR_CACHE_ENABLE", "1", 1);
	setenv("FI_OXMR_MR_RECORD_PFN", "1", 1);

	(void)argc;
	oxt_init(argv[0]);
	REQUIRE(vm_pin() >= 0, "/proc/self/status has no VmPin: line");
	pagemap_open();
	probe = map_anon(PS);
	pfns = pfn_now(probe) != 0;
	munmap(probe, PS);
	printf("# %s: uid %d, FI_OXMR_MR_CACHE_ENABLE=%s%s%s%s%s%s%s%s%s%s%s\n",
	       oxt_prog, (int)getuid(), disabled ? "0" : "1",
	       cnt ? ", FI_OXMR_MR_CACHE_MAX_COUNT=" : "", cnt ? cnt : "",
	       sz ? ", FI_OXMR_MR_CACHE_MAX_SIZE=" : "", sz ? sz : "",
	       getenv("FI_OXMR_MR_CACHE_MONITOR") ? ", FI_OXMR_MR_CACHE_MONITOR=" : "",
	       getenv("FI_OXMR_MR_CACHE_MONITOR") ? getenv("FI_OXMR_MR_CACHE_MONITOR") : "",
	       getenv("FI_OXMR_MR_CACHE_EXPLICIT") ? ", FI_OXMR_MR_CACHE_EXPLICIT=" : "",
	       getenv("FI_OXMR_MR_CACHE_EXPLICIT") ? getenv("FI_OXMR_MR_CACHE_EXPLICIT") : "",
	       memlock ? ", OXT_MR_CACHE_MEMLOCK=" : "", memlock ? memlock : "");
	if (!pfns)
		printf("# %s: /proc/self/pagemap shows no PFNs (not root): PFN comparisons skipped, hits and misses still checked\n",
		       oxt_prog);

	dom_open();
	if (disabled) {
		test_no_cache("FI_OXMR_MR_CACHE_ENABLE=0", false);
	} else if (env_is("FI_OXMR_MR_CACHE_MONITOR", "none")) {
		test_no_cache("FI_OXMR_MR_CACHE_MONITOR=none", false);
	} else if (env_is("FI_OXMR_MR_CACHE_EXPLICIT", "0")) {
		test_no_cache("FI_OXMR_MR_CACHE_EXPLICIT=0", true);
	} else if (memlock) {
		REQUIRE(!strcmp(memlock, "user"),
			"OXT_MR_CACHE_MEMLOCK is user, got %s", memlock);
		test_memlock_user();
	} else if (cnt) {
		REQUIRE(!strcmp(cnt, "4"), "run with FI_OXMR_MR_CACHE_MAX_COUNT=4 (got %s)",
			cnt);
		test_evict("FI_OXMR_MR_CACHE_MAX_COUNT", 4);
	} else if (sz) {
		REQUIRE(!strcmp(sz, "262144"),
			"run with FI_OXMR_MR_CACHE_MAX_SIZE=262144 (got %s)", sz);
		test_evict("FI_OXMR_MR_CACHE_MAX_SIZE", 262144);
	} else {
		long pin0 = vm_pin();

		test_basic();
		test_access();
		test_munmap_fixed();
		test_munmap_same_place();
		test_fixed_over_cached();
		test_fixed_over_open();
		test_partial_munmap();
		/* before the brk tests, which give malloc a 4 MiB top pad
		 * (a 1 MiB malloc would then come from the heap) */
		test_malloc_reuse();
		test_brk(false);
		test_brk(true);
		test_madvise(MADV_DONTNEED, "MADV_DONTNEED");
		test_madvise(MADV_FREE, "MADV_FREE");
		test_madvise_middle();
		test_mremap_move();
		test_mremap_grow();
		test_mremap_shrink();
		test_mprotect();
		test_shared_uncached();
		test_fork();
		test_fork_new_domain();
		test_fork_parent_pin();
		test_stress();
		OXT_GROUP("closing the domain releases every cached pin (VmPin back to the start)");
		EXPECT_EQ(st().live, 0);
		dom_close();
		EXPECT_VMPIN("after fi_close(domain)", pin0, 0);
		oxt_group_end();
		printf("# %s: %.0f ms\n", oxt_prog, oxt_now_ms() - t0);
		return oxt_done();
	}
	dom_close();
	oxt_group_end();
	printf("# %s: %.0f ms\n", oxt_prog, oxt_now_ms() - t0);
	return oxt_done();
}
