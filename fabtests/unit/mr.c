/*
 * mr: memory registration (fi_mr(3)) against real kernel facilities.
 *
 * - mr_mode: what fi_getinfo grants for each hinted mode, and what each
 *   granted bit means for keys, fi_mr_bind, fi_mr_enable, fi_mr_refresh;
 * - bad input: each refused with a precise code, nothing left pinned, the
 *   failure counted in the extension statistics;
 * - real pinning, checked against the kernel's own counters in
 *   /proc/self/status (VmPin: io_uring long-term pins; VmLck: mlock), and
 *   through oxmr's extension API (fi_ext_oxmr.h, "oxmr_mr_ops").
 *
 * The program adapts to how run.sh starts it:
 *   FI_OXMR_MR_PIN=uring (default) | mlock | none   expected pinning
 *   OXT_MR_MEMLOCK=root   with FI_OXMR_MR_MAX_PINNED=1048576: the cap test
 *   OXT_MR_MEMLOCK=user   as uid 65534 under RLIMIT_MEMLOCK 1 MiB: the
 *                         cap comes from the rlimit
 * The two memlock modes run only the cap test.
 */
#include "oxt.h"

#include <stddef.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>

#include <rdma/fi_ext_oxmr.h>

#ifndef SYS_memfd_secret
#define SYS_memfd_secret 447
#endif

#define PS 4096UL
#define KB(bytes) ((long)((bytes) / 1024))
#define ACC_RW (FI_REMOTE_READ | FI_REMOTE_WRITE)

/* The mr_mode bits oxmr can grant. */
#define MR_SUPPORTED                                                           \
	(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |    \
	 FI_MR_ENDPOINT | FI_MR_MMU_NOTIFY)

/* ------------------------------------------------------------ pin mode */

enum pin { PIN_URING, PIN_MLOCK, PIN_NONE };

static enum pin pin_mode = PIN_URING;

static const char *pin_name(void)
{
	return pin_mode == PIN_MLOCK ? "mlock" :
	       pin_mode == PIN_NONE  ? "none" : "uring";
}

/* What a writable registration becomes under the pin mode in force. */
static uint32_t class_expected(void)
{
	return pin_mode == PIN_MLOCK ? OXMR_MR_CLASS_LOCKED :
	       pin_mode == PIN_NONE  ? OXMR_MR_CLASS_UNPINNED :
				       OXMR_MR_CLASS_PINNED;
}

/* ------------------------------------------------------- kernel counters */


/*
 * Expect the kernel to hold `kb` more than (pin0, lck0) in the way the pin
 * mode holds writable memory: VmPin under uring, VmLck under mlock, neither
 * under none.
 */
static void held_at(const char *file, int line, long pin0, long lck0, long kb)
{
	long pin = vm_pin(), lck = vm_lck();
	long want_pin = pin0 + (pin_mode == PIN_URING ? kb : 0);
	long want_lck = lck0 + (pin_mode == PIN_MLOCK ? kb : 0);

	if (pin != want_pin)
		oxt_fail(file, line,
			 "VmPin: expected %ld kB (%+ld), got %ld kB (%+ld) [FI_OXMR_MR_PIN=%s]",
			 want_pin, want_pin - pin0, pin, pin - pin0, pin_name());
	if (lck != want_lck)
		oxt_fail(file, line,
			 "VmLck: expected %ld kB (%+ld), got %ld kB (%+ld) [FI_OXMR_MR_PIN=%s]",
			 want_lck, want_lck - lck0, lck, lck - lck0, pin_name());
}
#define EXPECT_HELD(pin0, lck0, kb) held_at(__FILE__, __LINE__, pin0, lck0, kb)

/* ---------------------------------------------------------------- memory */

static char *map_anon(size_t len, int prot)
{
	void *p = mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED, "mmap(%zu): %s", len, strerror(errno));
	if (prot & PROT_WRITE)
		memset(p, 0x5a, len); /* resident, so pins take real pages */
	return p;
}

/* ------------------------------------------------------ fabric + ext ops */

struct ctx {
	struct oxt_env e;
	struct oxmr_mr_ops *ops;
};

/* oxmr RDM info for 127.0.0.1 with caps FI_MSG|FI_RMA and an mr_mode hint. */
static int getinfo_mr(int mr_mode, struct fi_info **info)
{
	struct fi_info *hints = oxt_hints(FI_EP_RDM);
	int ret;

	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = mr_mode;
	*info = NULL;
	ret = fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints,
			 info);
	fi_freeinfo(hints);
	if (ret == 0 && (*info)->next) {
		fi_freeinfo((*info)->next);
		(*info)->next = NULL;
	}
	return ret;
}

/* Fabric and domain over `info` (taken over), and the extension table. */
static void ctx_open_info(struct ctx *c, struct fi_info *info)
{
	memset(c, 0, sizeof *c);
	c->e.info = info;
	REQUIRE_RC(fi_fabric(info->fabric_attr, &c->e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(c->e.fabric, info, &c->e.domain, NULL), 0);
	REQUIRE_RC(fi_open_ops(&c->e.domain->fid, OXMR_MR_OPS_NAME, 0,
			       (void **)&c->ops, NULL),
		   0);
	REQUIRE(c->ops && c->ops->query && c->ops->stats,
		"oxmr_mr_ops table or its functions are NULL");
}

/* A domain with provider keys (so unrelated registrations never collide). */
static void ctx_open(struct ctx *c)
{
	struct fi_info *info;

	REQUIRE_RC(getinfo_mr(FI_MR_PROV_KEY | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_LOCAL,
			      &info),
		   0);
	ctx_open_info(c, info);
}

static void ctx_close(struct ctx *c)
{
	oxt_close(&c->e);
}

static struct oxmr_mr_info query(struct ctx *c, struct fid_mr *mr)
{
	struct oxmr_mr_info i;

	memset(&i, 0, sizeof i);
	i.size = sizeof i;
	EXPECT_RC(c->ops->query(mr, &i), 0);
	return i;
}

static struct oxmr_mr_stats stats(struct ctx *c)
{
	struct oxmr_mr_stats s;

	memset(&s, 0, sizeof s);
	s.size = sizeof s;
	EXPECT_RC(c->ops->stats(c->e.domain, &s), 0);
	return s;
}

static int reg(struct ctx *c, void *buf, size_t len, uint64_t access,
	       uint64_t key, struct fid_mr **mr)
{
	*mr = NULL;
	return fi_mr_reg(c->e.domain, buf, len, access, 0, key, 0, mr, NULL);
}

/* --------------------------------------------------- refused registrations */

struct snap {
	long pin, lck;
	struct oxmr_mr_stats st;
};

static void take(struct ctx *c, struct snap *s)
{
	s->pin = vm_pin();
	s->lck = vm_lck();
	s->st = stats(c);
}

static uint64_t field_of(const struct oxmr_mr_stats *s, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)s + off, sizeof v);
	return v;
}

/*
 * A registration that must have failed with `code`: nothing more pinned or
 * locked, the domain's bytes_pinned unchanged, the failure counted in the
 * stats field at `off`. A registration that succeeded anyway is described
 * and closed.
 */
static void refused_at(const char *file, int line, struct ctx *c,
		       const char *what, int rc, struct fid_mr *mr,
		       const struct snap *b, int code, const char *field,
		       size_t off)
{
	struct snap a;

	oxt_check_rc(file, line, what, rc, code);
	take(c, &a);
	if (rc == 0 && mr) {
		struct oxmr_mr_info i = query(c, mr);

		oxt_fail(file, line,
			 "%s: registered anyway: class %u, pin_slots %u, bytes_pinned %" PRIu64
			 ", len %" PRIu64 "; VmPin %+ld kB, VmLck %+ld kB",
			 what, i.class_, i.pin_slots, i.bytes_pinned, i.len,
			 a.pin - b->pin, a.lck - b->lck);
		EXPECT_RC(fi_close(&mr->fid), 0);
		return;
	}
	if (a.pin != b->pin)
		oxt_fail(file, line, "%s: VmPin changed: %ld -> %ld kB", what,
			 b->pin, a.pin);
	if (a.lck != b->lck)
		oxt_fail(file, line, "%s: VmLck changed: %ld -> %ld kB", what,
			 b->lck, a.lck);
	if (a.st.bytes_pinned != b->st.bytes_pinned)
		oxt_fail(file, line,
			 "%s: stats bytes_pinned changed: %" PRIu64 " -> %" PRIu64,
			 what, b->st.bytes_pinned, a.st.bytes_pinned);
	if (a.st.live != b->st.live)
		oxt_fail(file, line, "%s: stats live changed: %" PRIu64 " -> %" PRIu64,
			 what, b->st.live, a.st.live);
	if (field_of(&a.st, off) != field_of(&b->st, off) + 1)
		oxt_fail(file, line,
			 "%s: stats %s: expected %" PRIu64 ", got %" PRIu64,
			 what, field, field_of(&b->st, off) + 1,
			 field_of(&a.st, off));
}

/* rc is the return code of a registration that wrote `mr`. */
#define EXPECT_REFUSED(c, what, rc, mr, before, code, field)                   \
	refused_at(__FILE__, __LINE__, c, what, rc, mr, before, code, #field,  \
		   offsetof(struct oxmr_mr_stats, field))

/* ------------------------------------------------------------- ext table */

static void test_ext_ops(void)
{
	struct oxt_env e;
	struct oxmr_mr_ops *ops = NULL;
	void *other = NULL;

	OXT_GROUP("fi_open_ops(domain, \"oxmr_mr_ops\"): size, version; unknown name -FI_ENOSYS");
	oxt_open(&e);
	EXPECT_RC(fi_open_ops(&e.domain->fid, OXMR_MR_OPS_NAME, 0,
			      (void **)&ops, NULL),
		  0);
	REQUIRE(ops != NULL, "fi_open_ops returned 0 but no table");
	EXPECT_EQ(ops->size, sizeof(struct oxmr_mr_ops));
	EXPECT_EQ(ops->version, OXMR_EXT_VERSION);
	EXPECT(ops->query != NULL, "query is NULL");
	EXPECT(ops->stats != NULL, "stats is NULL");
	EXPECT_RC(fi_open_ops(&e.domain->fid, "oxmr_no_such_ops", 0, &other,
			      NULL),
		  -FI_ENOSYS);
	EXPECT(other == NULL, "fi_open_ops(unknown name) wrote the out-parameter");
	oxt_close(&e);
}

/* --------------------------------------------------------------- mr_mode */

static int effective(int mr_mode)
{
	if (mr_mode & OXT_MR_BASIC)
		return (mr_mode & ~OXT_MR_BASIC) | FI_MR_VIRT_ADDR |
		       FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return mr_mode & ~OXT_MR_SCALABLE;
}

static void test_mr_mode(const char *name, int hint, int granted)
{
	char title[200];
	struct fi_info *info = NULL;
	struct ctx c;
	struct fid_mr *mr1 = NULL, *mr2 = NULL, *mr3 = NULL;
	struct fid_cntr *cntr = NULL;
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP,
				   .wait_obj = FI_WAIT_NONE };
	struct oxmr_mr_stats st;
	long pin_start, lck_start;
	char *buf;
	int eff, ret;

	snprintf(title, sizeof title,
		 "mr_mode hint %s -> %#x: keys, desc, cntr bind, enable, refresh",
		 name, granted);
	OXT_GROUP(strdup(title));
	ret = getinfo_mr(hint, &info);
	EXPECT_RC(ret, 0);
	if (ret)
		return;
	EXPECT_EQ(info->domain_attr->mr_mode, granted);
	eff = effective(info->domain_attr->mr_mode);
	ctx_open_info(&c, info);
	buf = map_anon(4 * PS, PROT_READ | PROT_WRITE);
	pin_start = vm_pin();
	lck_start = vm_lck();

	if (eff & FI_MR_PROV_KEY) {
		/* the requested key is ignored */
		EXPECT_RC(reg(&c, buf, PS, ACC_RW, 0x1234, &mr1), 0);
		EXPECT_RC(reg(&c, buf + PS, PS, ACC_RW, 0x1234, &mr2), 0);
		REQUIRE(mr1 && mr2, "registrations failed");
		EXPECT(fi_mr_key(mr1) != fi_mr_key(mr2),
		       "two registrations got the same key %#" PRIx64,
		       fi_mr_key(mr1));
		EXPECT(fi_mr_key(mr1) != FI_KEY_NOTAVAIL, "key is FI_KEY_NOTAVAIL");
		EXPECT(fi_mr_key(mr2) != FI_KEY_NOTAVAIL, "key is FI_KEY_NOTAVAIL");
		EXPECT(fi_mr_key(mr1) != 0x1234,
		       "the requested key 0x1234 was used under FI_MR_PROV_KEY");
		EXPECT_RC(reg(&c, buf + 2 * PS, PS, ACC_RW, FI_KEY_NOTAVAIL, &mr3),
			  0);
		if (mr3) {
			EXPECT(fi_mr_key(mr3) != FI_KEY_NOTAVAIL,
			       "key is FI_KEY_NOTAVAIL");
			EXPECT_RC(fi_close(&mr3->fid), 0);
		}
	} else {
		const uint64_t k = 0xC0DE0001;

		EXPECT_RC(reg(&c, buf, PS, ACC_RW, k, &mr1), 0);
		REQUIRE(mr1, "registration failed");
		EXPECT_EQ(fi_mr_key(mr1), k);
		st = stats(&c);
		EXPECT_RC(reg(&c, buf + PS, PS, ACC_RW, k, &mr3), -FI_ENOKEY);
		EXPECT_EQ(stats(&c).fail_enokey, st.fail_enokey + 1);
		EXPECT_RC(fi_close(&mr1->fid), 0);
		EXPECT_RC(reg(&c, buf, PS, ACC_RW, k, &mr1), 0);
		REQUIRE(mr1, "re-registration with a freed key failed");
		EXPECT_EQ(fi_mr_key(mr1), k);
		EXPECT_RC(reg(&c, buf + PS, PS, ACC_RW, FI_KEY_NOTAVAIL, &mr3),
			  -FI_EKEYREJECTED);
		EXPECT_RC(reg(&c, buf + PS, PS, ACC_RW, k + 1, &mr2), 0);
		REQUIRE(mr2, "registration failed");
		EXPECT_EQ(fi_mr_key(mr2), k + 1);
	}
	EXPECT(fi_mr_desc(mr1) != NULL, "fi_mr_desc is NULL");
	EXPECT(fi_mr_desc(mr2) != NULL, "fi_mr_desc is NULL");
	EXPECT_HELD(pin_start, lck_start, 2 * KB(PS));

	/* counters count remote accesses: FI_REMOTE_WRITE/READ flags needed */
	REQUIRE_RC(fi_cntr_open(c.e.domain, &ca, &cntr, NULL), 0);
	EXPECT_RC(fi_mr_bind(mr1, &cntr->fid, FI_REMOTE_WRITE), 0);
	EXPECT_RC(fi_mr_bind(mr2, &cntr->fid, 0), -FI_EBADFLAGS);

	if (eff & FI_MR_ENDPOINT) {
		struct fid_ep *ep = NULL;

		REQUIRE_RC(fi_endpoint(c.e.domain, c.e.info, &ep, NULL), 0);
		EXPECT_RC(fi_mr_enable(mr1), -FI_EINVAL);
		EXPECT_RC(fi_mr_bind(mr1, &ep->fid, 0), 0);
		EXPECT_RC(fi_mr_enable(mr1), 0);
		/* the MR's binding is weak: the endpoint closes first */
		EXPECT_RC(fi_close(&ep->fid), 0);
	} else {
		EXPECT_RC(fi_mr_enable(mr1), 0);
	}

	if (eff & FI_MR_MMU_NOTIFY) {
		struct iovec iov = { buf, PS };
		long pin0 = vm_pin(), lck0 = vm_lck();
		struct oxmr_mr_info i;

		EXPECT_RC(fi_mr_refresh(mr1, &iov, 1, 0), 0);
		EXPECT_HELD(pin0, lck0, 0);
		i = query(&c, mr1);
		EXPECT_EQ(i.class_, class_expected());
		EXPECT_EQ(i.bytes_pinned, pin_mode == PIN_NONE ? 0 : PS);
		EXPECT_EQ(stats(&c).bytes_pinned, pin_mode == PIN_NONE ? 0 : 2 * PS);
	}

	/* the counter binding is weak too */
	EXPECT_RC(fi_close(&cntr->fid), 0);
	EXPECT_RC(fi_close(&mr1->fid), 0);
	EXPECT_RC(fi_close(&mr2->fid), 0);
	EXPECT_EQ(stats(&c).live, 0);
	EXPECT_HELD(pin_start, lck_start, 0);
	munmap(buf, 4 * PS);
	ctx_close(&c);
}

static void test_mr_modes(void)
{
	static const struct {
		const char *name;
		int hint, granted;
	} m[] = {
		{ "0", 0, 0 },
		{ "FI_MR_LOCAL", FI_MR_LOCAL, FI_MR_LOCAL },
		{ "FI_MR_VIRT_ADDR", FI_MR_VIRT_ADDR, FI_MR_VIRT_ADDR },
		{ "FI_MR_ALLOCATED", FI_MR_ALLOCATED, FI_MR_ALLOCATED },
		{ "FI_MR_PROV_KEY", FI_MR_PROV_KEY, FI_MR_PROV_KEY },
		{ "FI_MR_ENDPOINT", FI_MR_ENDPOINT, FI_MR_ENDPOINT },
		{ "FI_MR_MMU_NOTIFY", FI_MR_MMU_NOTIFY, FI_MR_MMU_NOTIFY },
		{ "FI_MR_RAW", FI_MR_RAW, 0 },
		{ "FI_MR_HMEM", FI_MR_HMEM, 0 },
		{ "all supported bits", MR_SUPPORTED, MR_SUPPORTED },
		{ "all bits + FI_MR_RAW + FI_MR_HMEM",
		  MR_SUPPORTED | FI_MR_RAW | FI_MR_HMEM, MR_SUPPORTED },
		{ "FI_MR_BASIC", OXT_MR_BASIC, OXT_MR_BASIC },
		{ "FI_MR_SCALABLE", OXT_MR_SCALABLE, OXT_MR_SCALABLE },
	};
	size_t i;

	for (i = 0; i < sizeof m / sizeof m[0]; i++)
		test_mr_mode(m[i].name, m[i].hint, m[i].granted);
}

/* ------------------------------------------------------------ real pins */

static void test_pin_2mib(void)
{
	const size_t len = 2UL << 20;
	struct ctx c;
	struct fid_mr *mr = NULL;
	struct oxmr_mr_info i;
	struct oxmr_mr_stats s0, s;
	long pin0, lck0;
	char *buf;

	ctx_open(&c);
	buf = map_anon(len, PROT_READ | PROT_WRITE);

	OXT_GROUP("register 2 MiB: the kernel holds it, query and stats say so");
	s0 = stats(&c);
	EXPECT_EQ(s0.pin_mode, pin_mode == PIN_MLOCK ? 2 : pin_mode == PIN_NONE ? 3 : 1);
	EXPECT_EQ(s0.live, 0);
	EXPECT_EQ(s0.bytes_pinned, 0);
	pin0 = vm_pin();
	lck0 = vm_lck();
	EXPECT_RC(reg(&c, buf, len, ACC_RW, 0, &mr), 0);
	REQUIRE(mr != NULL, "2 MiB registration failed");
	EXPECT_HELD(pin0, lck0, KB(len));
	i = query(&c, mr);
	EXPECT_EQ(i.class_, class_expected());
	EXPECT_EQ(i.pin_slots, pin_mode == PIN_URING ? 1 : 0);
	EXPECT_EQ(i.bytes_pinned, pin_mode == PIN_NONE ? 0 : len);
	EXPECT_EQ(i.len, len);
	EXPECT_EQ(i.key, fi_mr_key(mr));
	EXPECT_EQ(i.access, ACC_RW);
	s = stats(&c);
	EXPECT_EQ(s.live, 1);
	EXPECT_EQ(s.registrations, s0.registrations + 1);
	EXPECT_EQ(s.bytes_pinned, pin_mode == PIN_NONE ? 0 : len);
	EXPECT_EQ(s.process_bytes_pinned, pin_mode == PIN_NONE ? 0 : len);
	EXPECT_EQ(s.slots_used, pin_mode == PIN_URING ? 1 : 0);

	OXT_GROUP("close the 2 MiB registration: the kernel lets go, stats live 0");
	EXPECT_RC(fi_close(&mr->fid), 0);
	EXPECT_HELD(pin0, lck0, 0);
	s = stats(&c);
	EXPECT_EQ(s.live, 0);
	EXPECT_EQ(s.bytes_pinned, 0);
	EXPECT_EQ(s.process_bytes_pinned, 0);
	EXPECT_EQ(s.slots_used, 0);
	munmap(buf, len);
	ctx_close(&c);
}

/* mlock mode: overlapping registrations keep each other's pages locked. */
static void test_mlock_overlap(void)
{
	struct ctx c;
	struct fid_mr *a = NULL, *b = NULL;
	long lck0, pin0;
	char *buf;

	if (pin_mode != PIN_MLOCK)
		return;
	OXT_GROUP("mlock: A=[0,3) and B=[2,5) pages; closing A keeps B's pages locked");
	ctx_open(&c);
	buf = map_anon(5 * PS, PROT_READ | PROT_WRITE);
	lck0 = vm_lck();
	pin0 = vm_pin();
	EXPECT_RC(reg(&c, buf, 3 * PS, ACC_RW, 0, &a), 0);
	EXPECT_RC(reg(&c, buf + 2 * PS, 3 * PS, ACC_RW, 0, &b), 0);
	REQUIRE(a && b, "registrations failed");
	EXPECT_EQ(vm_lck(), lck0 + 20);
	EXPECT_EQ(query(&c, a).class_, OXMR_MR_CLASS_LOCKED);
	EXPECT_EQ(query(&c, b).class_, OXMR_MR_CLASS_LOCKED);
	EXPECT_RC(fi_close(&a->fid), 0);
	EXPECT_EQ(vm_lck(), lck0 + 12);
	EXPECT_RC(fi_close(&b->fid), 0);
	EXPECT_EQ(vm_lck(), lck0);
	EXPECT_EQ(vm_pin(), pin0);
	munmap(buf, 5 * PS);
	ctx_close(&c);
}

/* ------------------------------------------------------------ bad input */

static void test_unmapped(struct ctx *c)
{
	struct fid_mr *mr;
	struct snap b;
	char *buf;
	int rc;

	OXT_GROUP("unmapped and partly unmapped ranges: -FI_EFAULT, nothing held");
	buf = map_anon(2 * PS, PROT_READ | PROT_WRITE);
	REQUIRE(munmap(buf, 2 * PS) == 0, "munmap: %s", strerror(errno));
	take(c, &b);
	rc = reg(c, buf, 2 * PS, ACC_RW, 0, &mr);
	EXPECT_REFUSED(c, "unmapped", rc, mr, &b, -FI_EFAULT, fail_efault);
	take(c, &b);
	rc = reg(c, buf, 2 * PS, FI_REMOTE_READ, 0, &mr);
	EXPECT_REFUSED(c, "unmapped, FI_REMOTE_READ", rc, mr, &b, -FI_EFAULT,
		       fail_efault);

	buf = map_anon(2 * PS, PROT_READ | PROT_WRITE);
	REQUIRE(munmap(buf + PS, PS) == 0, "munmap: %s", strerror(errno));
	take(c, &b);
	rc = reg(c, buf, 2 * PS, ACC_RW, 0, &mr);
	EXPECT_REFUSED(c, "second page unmapped", rc, mr, &b, -FI_EFAULT,
		       fail_efault);
	take(c, &b);
	rc = reg(c, buf, 2 * PS, FI_REMOTE_READ, 0, &mr);
	EXPECT_REFUSED(c, "second page unmapped, FI_REMOTE_READ", rc, mr, &b,
		       -FI_EFAULT, fail_efault);
	munmap(buf, PS);
}

static void test_prot(struct ctx *c)
{
	struct fid_mr *mr;
	struct snap b;
	char *buf;
	int rc;

	OXT_GROUP("PROT_NONE memory: -FI_EACCES, nothing held");
	buf = map_anon(2 * PS, PROT_NONE);
	take(c, &b);
	rc = reg(c, buf, 2 * PS, ACC_RW, 0, &mr);
	EXPECT_REFUSED(c, "PROT_NONE", rc, mr, &b, -FI_EACCES, fail_eacces);
	take(c, &b);
	rc = reg(c, buf, 2 * PS, FI_REMOTE_READ, 0, &mr);
	EXPECT_REFUSED(c, "PROT_NONE, FI_REMOTE_READ", rc, mr, &b, -FI_EACCES,
		       fail_eacces);
	munmap(buf, 2 * PS);

	OXT_GROUP("PROT_READ memory: FI_REMOTE_WRITE or FI_RECV -FI_EACCES");
	buf = map_anon(2 * PS, PROT_READ);
	take(c, &b);
	rc = reg(c, buf, 2 * PS, FI_REMOTE_WRITE, 0, &mr);
	EXPECT_REFUSED(c, "PROT_READ, FI_REMOTE_WRITE", rc, mr, &b, -FI_EACCES,
		       fail_eacces);
	take(c, &b);
	rc = reg(c, buf, 2 * PS, FI_RECV, 0, &mr);
	EXPECT_REFUSED(c, "PROT_READ, FI_RECV", rc, mr, &b, -FI_EACCES,
		       fail_eacces);

	OXT_GROUP("PROT_READ memory: FI_REMOTE_READ|FI_SEND is held with mlock (class LOCKED)");
	{
		long pin0 = vm_pin(), lck0 = vm_lck();
		struct oxmr_mr_info i;
		bool none = pin_mode == PIN_NONE;

		EXPECT_RC(reg(c, buf, 2 * PS, FI_REMOTE_READ | FI_SEND, 0, &mr),
			  0);
		if (mr) {
			i = query(c, mr);
			EXPECT_EQ(i.class_, none ? OXMR_MR_CLASS_UNPINNED :
						   OXMR_MR_CLASS_LOCKED);
			EXPECT_EQ(i.bytes_pinned, none ? 0 : 2 * PS);
			EXPECT_EQ(i.pin_slots, 0);
			EXPECT_EQ(vm_lck(), lck0 + (none ? 0 : 8));
			EXPECT_EQ(vm_pin(), pin0);
			EXPECT_EQ(stats(c).bytes_pinned, none ? 0 : 2 * PS);
			EXPECT_RC(fi_close(&mr->fid), 0);
			EXPECT_EQ(vm_lck(), lck0);
			EXPECT_EQ(stats(c).bytes_pinned, 0);
		}
	}
	munmap(buf, 2 * PS);
}

static void test_zero_and_overflow(struct ctx *c)
{
	struct fid_mr *mr;
	struct snap b;
	long pin0, lck0;
	char *buf;
	int rc;

	OXT_GROUP("zero length (NULL, 0): registers, class UNPINNED, len 0");
	pin0 = vm_pin();
	lck0 = vm_lck();
	EXPECT_RC(reg(c, NULL, 0, ACC_RW, 0, &mr), 0);
	if (mr) {
		struct oxmr_mr_info i = query(c, mr);

		EXPECT_EQ(i.class_, OXMR_MR_CLASS_UNPINNED);
		EXPECT_EQ(i.len, 0);
		EXPECT_EQ(i.bytes_pinned, 0);
		EXPECT_EQ(i.pin_slots, 0);
		EXPECT_EQ(vm_pin(), pin0);
		EXPECT_EQ(vm_lck(), lck0);
		EXPECT_RC(fi_close(&mr->fid), 0);
	}

	OXT_GROUP("addr + len past the address space: -FI_EINVAL");
	take(c, &b);
	rc = reg(c, (void *)(UINTPTR_MAX - 4095), 8192, ACC_RW, 0, &mr);
	EXPECT_REFUSED(c, "UINTPTR_MAX-4095 + 8192", rc, mr, &b, -FI_EINVAL,
		       fail_einval);

	OXT_GROUP("unknown access bits -FI_EINVAL, unknown flags -FI_EBADFLAGS");
	buf = map_anon(PS, PROT_READ | PROT_WRITE);
	take(c, &b);
	rc = reg(c, buf, PS, ACC_RW | (1ULL << 60), 0, &mr);
	EXPECT_REFUSED(c, "access bit 60", rc, mr, &b, -FI_EINVAL, fail_einval);
	take(c, &b);
	mr = NULL;
	rc = fi_mr_reg(c->e.domain, buf, PS, ACC_RW, 0, 0, 1ULL << 61, &mr,
		       NULL);
	EXPECT_REFUSED(c, "flag bit 61", rc, mr, &b, -FI_EBADFLAGS, fail_einval);

	OXT_GROUP("NULL buffer with a length: -FI_EINVAL");
	take(c, &b);
	rc = reg(c, NULL, PS, ACC_RW, 0, &mr);
	EXPECT_REFUSED(c, "NULL, 4096", rc, mr, &b, -FI_EINVAL, fail_einval);
	munmap(buf, PS);
}

static void test_iovs(struct ctx *c)
{
	struct iovec iov[9];
	struct fid_mr *mr;
	struct snap b;
	long pin0, lck0;
	char *buf;
	int i, rc;

	OXT_GROUP("fi_mr_regv: 8 iovs (mr_iov_limit) register, 9 are -FI_EINVAL");
	EXPECT_EQ(c->e.info->domain_attr->mr_iov_limit, 8);
	buf = map_anon(18 * PS, PROT_READ | PROT_WRITE);
	for (i = 0; i < 9; i++) {
		iov[i].iov_base = buf + 2 * i * PS; /* every other page */
		iov[i].iov_len = PS;
	}
	pin0 = vm_pin();
	lck0 = vm_lck();
	mr = NULL;
	EXPECT_RC(fi_mr_regv(c->e.domain, iov, 8, ACC_RW, 0, 0, 0, &mr, NULL),
		  0);
	if (mr) {
		struct oxmr_mr_info q = query(c, mr);

		EXPECT_EQ(q.len, 8 * PS);
		EXPECT_EQ(q.class_, class_expected());
		EXPECT_EQ(q.pin_slots, pin_mode == PIN_URING ? 8 : 0);
		EXPECT_EQ(q.bytes_pinned, pin_mode == PIN_NONE ? 0 : 8 * PS);
		EXPECT_HELD(pin0, lck0, 8 * KB(PS));
		EXPECT_RC(fi_close(&mr->fid), 0);
		EXPECT_HELD(pin0, lck0, 0);
	}
	take(c, &b);
	mr = NULL;
	rc = fi_mr_regv(c->e.domain, iov, 9, ACC_RW, 0, 0, 0, &mr, NULL);
	EXPECT_REFUSED(c, "fi_mr_regv(9 iovs)", rc, mr, &b, -FI_EINVAL,
		       fail_einval);
	munmap(buf, 18 * PS);
}

static void test_hmem(struct ctx *c)
{
	struct fi_mr_attr attr;
	struct iovec iov;
	struct fid_mr *mr = NULL;
	struct snap b;
	char *buf;
	int rc;

	OXT_GROUP("fi_mr_regattr with iface FI_HMEM_CUDA: -FI_ENOSYS");
	buf = map_anon(PS, PROT_READ | PROT_WRITE);
	iov.iov_base = buf;
	iov.iov_len = PS;
	memset(&attr, 0, sizeof attr);
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.access = ACC_RW;
	attr.iface = FI_HMEM_CUDA;
	take(c, &b);
	rc = fi_mr_regattr(c->e.domain, &attr, 0, &mr);
	EXPECT_REFUSED(c, "FI_HMEM_CUDA", rc, mr, &b, -FI_ENOSYS, fail_other);
	munmap(buf, PS);
}

/*
 * fi_mr_attr grows with the API (iface 1.10, hmem_data 1.19, page_size 1.22,
 * base_mr 2.0...): an application built against the 1.9 headers passes the
 * smaller struct, and a provider must read no field it does not have. The
 * struct here ends where `iface` would begin, at the end of a page whose
 * next page is PROT_NONE: a read past it kills the test.
 */
static void test_old_api_attr(void)
{
	const size_t sz = offsetof(struct fi_mr_attr, iface);
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	struct fi_mr_attr *attr;
	struct oxmr_mr_info qi;
	struct fid_mr *mr = NULL;
	struct iovec iov;
	struct ctx c;
	char *two, *buf;
	int rc;

	OXT_GROUP("API 1.9 application: fi_mr_regattr reads nothing past its smaller fi_mr_attr");
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_LOCAL;
	rc = fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", NULL, FI_SOURCE, hints,
			&info);
	fi_freeinfo(hints);
	REQUIRE_RC(rc, 0);
	if (info->next) {
		fi_freeinfo(info->next);
		info->next = NULL;
	}
	ctx_open_info(&c, info);
	EXPECT_EQ(c.e.fabric->api_version, FI_VERSION(1, 9));
	two = map_anon(2 * PS, PROT_READ | PROT_WRITE);
	REQUIRE_RC(mprotect(two + PS, PS, PROT_NONE), 0);
	buf = map_anon(PS, PROT_READ | PROT_WRITE);
	attr = (struct fi_mr_attr *)(two + PS - sz);
	memset(attr, 0, sz);
	iov.iov_base = buf;
	iov.iov_len = PS;
	attr->mr_iov = &iov;
	attr->iov_count = 1;
	attr->access = ACC_RW;
	rc = fi_mr_regattr(c.e.domain, attr, 0, &mr);
	EXPECT_RC(rc, 0);
	if (rc == 0) {
		qi = query(&c, mr);
		EXPECT_EQ(qi.len, PS);
		EXPECT_EQ(qi.key, fi_mr_key(mr));
		EXPECT_RC(fi_close(&mr->fid), 0);
	}
	munmap(buf, PS);
	munmap(two, 2 * PS);
	ctx_close(&c);
}

static void test_secret(struct ctx *c)
{
	static const uint64_t acc[] = { ACC_RW, FI_REMOTE_READ };
	static const char *const name[] = {
		"memfd_secret memory, FI_REMOTE_READ|FI_REMOTE_WRITE: -FI_EFAULT",
		"memfd_secret memory, FI_REMOTE_READ: -FI_EFAULT",
	};
	struct fid_mr *mr;
	struct snap b;
	char *buf;
	int fd, rc;
	size_t k;

	/* (FI_OXMR_MR_PIN=none pins nothing but still checks the mappings:
	 * the same refusal) */
	fd = (int)syscall(SYS_memfd_secret, 0);
	if (fd < 0) {
		int err = errno;

		for (k = 0; k < 2; k++) {
			OXT_GROUP(name[k]);
			oxt_skip("memfd_secret(2) is unavailable (%s)", strerror(err));
		}
		return;
	}
	REQUIRE(ftruncate(fd, 2 * PS) == 0, "ftruncate: %s", strerror(errno));
	buf = mmap(NULL, 2 * PS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(buf != MAP_FAILED, "mmap(memfd_secret): %s", strerror(errno));
	memset(buf, 1, 2 * PS);
	for (k = 0; k < 2; k++) {
		OXT_GROUP(name[k]);
		take(c, &b);
		rc = reg(c, buf, 2 * PS, acc[k], 0, &mr);
		EXPECT_REFUSED(c, "memfd_secret", rc, mr, &b, -FI_EFAULT,
			       fail_efault);
	}
	munmap(buf, 2 * PS);
	close(fd);
}

static void test_pfnmap(struct ctx *c)
{
	static const uint64_t acc[] = { ACC_RW, FI_REMOTE_READ };
	static const char *const name[] = {
		"perf ring buffer (VM_PFNMAP|VM_IO), FI_REMOTE_READ|FI_REMOTE_WRITE: -FI_EFAULT",
		"perf ring buffer (VM_PFNMAP|VM_IO), FI_REMOTE_READ: -FI_EFAULT",
	};
	struct perf_event_attr pa;
	struct fid_mr *mr;
	struct snap b;
	const size_t len = (1 + 8) * PS;
	char *buf;
	int fd, rc;
	size_t k;

	memset(&pa, 0, sizeof pa);
	pa.type = PERF_TYPE_SOFTWARE;
	pa.size = sizeof pa;
	pa.config = PERF_COUNT_SW_DUMMY;
	pa.disabled = 1;
	pa.exclude_kernel = 1;
	pa.exclude_hv = 1;
	/* (FI_OXMR_MR_PIN=none: the mappings are checked, the same refusal) */
	fd = (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1,
			  PERF_FLAG_FD_CLOEXEC);
	if (fd < 0) {
		int err = errno;

		for (k = 0; k < 2; k++) {
			OXT_GROUP(name[k]);
			oxt_skip("perf_event_open(SW_DUMMY) failed (%s): no PFN-mapped memory",
				 strerror(err));
		}
		return;
	}
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(buf != MAP_FAILED, "mmap(perf ring buffer): %s",
		strerror(errno));
	for (k = 0; k < 2; k++) {
		OXT_GROUP(name[k]);
		take(c, &b);
		rc = reg(c, buf, len, acc[k], 0, &mr);
		EXPECT_REFUSED(c, "perf ring buffer", rc, mr, &b, -FI_EFAULT,
			       fail_efault);
	}
	munmap(buf, len);
	close(fd);
}

static void test_bad_input(void)
{
	struct ctx c;

	ctx_open(&c);
	test_unmapped(&c);
	test_prot(&c);
	test_zero_and_overflow(&c);
	test_iovs(&c);
	test_hmem(&c);
	test_secret(&c);
	test_pfnmap(&c);
	OXT_GROUP("after the bad input: nothing live, nothing pinned");
	{
		struct oxmr_mr_stats s = stats(&c);

		EXPECT_EQ(s.live, 0);
		EXPECT_EQ(s.bytes_pinned, 0);
		EXPECT_EQ(s.slots_used, 0);
	}
	ctx_close(&c);
}

/* --------------------------------------------------------------- memlock */

static void test_memlock(const char *how)
{
	const uint64_t cap = 1048576;
	bool user = !strcmp(how, "user");
	size_t small = 512UL << 10, big = user ? 2UL << 20 : 1UL << 20;
	struct ctx c;
	struct fid_mr *a = NULL, *b = NULL;
	struct oxmr_mr_stats s;
	struct oxmr_mr_info i;
	struct rlimit rl;
	long pin0, lck0;
	char *sbuf, *bbuf;
	char title[200];

	if (user) {
		OXT_GROUP("unprivileged (uid 65534, RLIMIT_MEMLOCK 1 MiB): the cap is the rlimit");
		EXPECT_EQ(getuid(), 65534);
		REQUIRE(getrlimit(RLIMIT_MEMLOCK, &rl) == 0, "getrlimit: %s",
			strerror(errno));
		REQUIRE_EQ(rl.rlim_cur, cap);
	} else {
		const char *v = getenv("FI_OXMR_MR_MAX_PINNED");

		OXT_GROUP("FI_OXMR_MR_MAX_PINNED=1048576 sets the cap");
		REQUIRE(v && !strcmp(v, "1048576"),
			"run with FI_OXMR_MR_MAX_PINNED=1048576 (got %s)",
			v ? v : "(unset)");
	}
	ctx_open(&c);
	s = stats(&c);
	EXPECT_EQ(s.pin_cap, cap);
	EXPECT_EQ(s.pin_mode, 1);
	sbuf = map_anon(small, PROT_READ | PROT_WRITE);
	bbuf = map_anon(big, PROT_READ | PROT_WRITE);

	snprintf(title, sizeof title,
		 "cap 1 MiB: 512 KiB registers, then %zu KiB more is -FI_ENOMEM; the first stays",
		 big >> 10);
	OXT_GROUP(strdup(title));
	pin0 = vm_pin();
	lck0 = vm_lck();
	EXPECT_RC(reg(&c, sbuf, small, ACC_RW, 0, &a), 0);
	REQUIRE(a != NULL, "512 KiB registration failed");
	EXPECT_HELD(pin0, lck0, KB(small));
	EXPECT_RC(reg(&c, bbuf, big, ACC_RW, 0, &b), -FI_ENOMEM);
	if (b) {
		EXPECT_RC(fi_close(&b->fid), 0);
		b = NULL;
	}
	EXPECT_HELD(pin0, lck0, KB(small));
	s = stats(&c);
	EXPECT_EQ(s.fail_enomem, 1);
	EXPECT_EQ(s.live, 1);
	EXPECT_EQ(s.bytes_pinned, small);
	i = query(&c, a);
	EXPECT_EQ(i.class_, OXMR_MR_CLASS_PINNED);
	EXPECT_EQ(i.bytes_pinned, small);
	EXPECT_RC(fi_close(&a->fid), 0);
	EXPECT_HELD(pin0, lck0, 0);
	EXPECT_EQ(stats(&c).bytes_pinned, 0);

	if (!user) {
		OXT_GROUP("cap 1 MiB: exactly 1 MiB registers once nothing else is pinned");
		EXPECT_RC(reg(&c, bbuf, big, ACC_RW, 0, &b), 0);
		if (b) {
			EXPECT_HELD(pin0, lck0, KB(big));
			EXPECT_RC(fi_close(&b->fid), 0);
		}
		EXPECT_HELD(pin0, lck0, 0);
	}
	munmap(sbuf, small);
	munmap(bbuf, big);
	ctx_close(&c);
}

int main(int argc, char **argv)
{
	/* This program checks registration itself: closing an MR must unpin at
	 * once, so the lazy-deregistration cache is off here (mr_cache.c tests
	 * it). Set before fi_getinfo, which reads the variables. */
	setenv("FI_OXMR_MR_CACHE_ENABLE", "0", 1);
	const char *pm = getenv("FI_OXMR_MR_PIN");
	const char *memlock = getenv("OXT_MR_MEMLOCK");

	(void)argc;
	oxt_init(argv[0]);
	REQUIRE(vm_pin() >= 0 && vm_lck() >= 0,
		"/proc/self/status has no VmPin:/VmLck: lines");
	if (pm && !strcmp(pm, "mlock"))
		pin_mode = PIN_MLOCK;
	else if (pm && !strcmp(pm, "none"))
		pin_mode = PIN_NONE;
	else
		REQUIRE(!pm || !*pm || !strcmp(pm, "uring"),
			"unexpected FI_OXMR_MR_PIN=%s", pm);
	printf("# %s: FI_OXMR_MR_PIN=%s%s%s, uid %d\n", oxt_prog, pin_name(),
	       memlock ? ", OXT_MR_MEMLOCK=" : "", memlock ? memlock : "",
	       (int)getuid());

	if (memlock) {
		REQUIRE(!strcmp(memlock, "root") || !strcmp(memlock, "user"),
			"OXT_MR_MEMLOCK is root or user, got %s", memlock);
		REQUIRE(pin_mode == PIN_URING,
			"the memlock runs use the default pinning");
		test_memlock(memlock);
		return oxt_done();
	}
	test_ext_ops();
	test_mr_modes();
	test_pin_2mib();
	test_mlock_overlap();
	test_bad_input();
	test_old_api_attr();
	return oxt_done();
}
