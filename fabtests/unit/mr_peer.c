/*
 * Peer-direct registration: PCI BAR mappings with a proven device identity,
 * dma-buf fds, and the MMIO access rule of oxmr's device copies.
 *
 * What is simulated, and why: these machines have no mappable BAR, no
 * dma-buf exporter and no VFIO (see shared/DESIGN.md). The BAR parts run
 * against a synthetic sysfs tree under FI_OXMR_SYSFS_ROOT (a directory in
 * /dev/shm) that reproduces what the kernel shows for a device 0000:00:04.0
 * with a 64 KiB uncached BAR 0 at 0xfe000000 and a 1 MiB prefetchable BAR 2
 * at 0xd0000000: its `resource` file (one `start end flags` line per
 * resource, as pci-sysfs.c prints it) and `resource0`, `resource2`,
 * `resource2_wc`, `config` files. A BAR mapping is made by mmapping the
 * synthetic file at the BAR's physical address as file offset (the files
 * are sparse), so /proc/self/maps shows the path and the offset the kernel
 * shows for a real one (drivers/pci/mmap.c makes the offset the PFN). What
 * differs: the memory is tmpfs pages, not a device's (smaps has no `io pf`,
 * caching is write-back), so with the variable set oxmr looks for device
 * identity before it pins. Everything else is real: registration and its
 * refusals through libfabric, the extension query, RMA from a peer process
 * over the wire served by the owner's device copies, revocation on munmap.
 *
 * The perf-ring (real VM_PFNMAP|VM_IO kernel memory) side of the same
 * machinery is mr_phys.c.
 *
 * dma-buf: every refusal is real (a memfd, a socket, a regular file, a
 * closed fd, through oxmr_mr_ops.reg_dmabuf with their log lines). The
 * accept path runs with the real kernel where /dev/udmabuf exists
 * (OXT_UDMABUF=1, set by run.sh only there); elsewhere it runs in the
 * provider's unit test with a memfd standing in (provider/src/mr/mod.rs).
 *
 * The MMIO rule: oxmr_mr_ops.mmio_copy is the routine oxmr's data path
 * uses for device memory. A recorder (PROT_NONE + SIGSEGV, then one
 * single-stepped instruction with the trap flag, then a diff of the page
 * against its copy) sees every access it makes to the "device" pages: for
 * stores their address and width, for loads their address. The pages are
 * ordinary memory standing in for a UC mapping: the recorder traps every
 * access whatever the memory type. The machine code of the copy routines is
 * read with objdump: no SIMD register, no string instruction, and an
 * sfence in the store routine (the WC path).
 */
#include "oxt.h"

#include <rdma/fi_ext_oxmr.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <ucontext.h>

#define PS 4096UL
#define BAR0 0xfe000000ULL
#define BAR0_LEN 0x10000ULL
#define BAR2 0xd0000000ULL
#define BAR2_LEN 0x100000ULL
#define BDF "0000:00:04.0"

/* EXPECT_RC that says whether it held. */
#define OK_RC(expr, exp) oxt_check_rc(__FILE__, __LINE__, #expr, (long long)(expr), (long long)(exp))

static char root[128], dir[256];
static uint64_t next_key = 0x7000;

static void put_file(const char *name, const char *text, off_t size)
{
	char p[320];
	int fd;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0, "create %s: %s", p, strerror(errno));
	if (text)
		REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write %s", p);
	if (size)
		REQUIRE(ftruncate(fd, size) == 0, "ftruncate %s", p);
	close(fd);
}

/* The resource file: BAR 0 as given, BAR 2 prefetchable 64-bit. */
static void put_resource(uint64_t bar0_start)
{
	char text[2048] = "", line[80];

	for (int i = 0; i < 13; i++) {
		uint64_t s = 0, e = 0, f = 0;
		if (i == 0)
			s = bar0_start, e = bar0_start + BAR0_LEN - 1, f = 0x40200;
		if (i == 2)
			s = BAR2, e = BAR2 + BAR2_LEN - 1, f = 0x14220c;
		snprintf(line, sizeof line, "0x%016llx 0x%016llx 0x%016llx\n", (unsigned long long)s,
			 (unsigned long long)e, (unsigned long long)f);
		strcat(text, line);
	}
	put_file("resource", text, 0);
}

static void tree_make(void)
{
	char p[320];

	snprintf(root, sizeof root, "/dev/shm/oxt-sysfs-%d", (int)getpid());
	snprintf(dir, sizeof dir, "%s/devices/pci0000:00/" BDF, root);
	snprintf(p, sizeof p, "mkdir -p '%s'", dir);
	REQUIRE(system(p) == 0, "mkdir %s", dir);
	put_resource(BAR0);
	/* (Sparse past the BAR's end: a mapping can run past it, which the
	 * registration must refuse.) */
	put_file("resource0", NULL, (off_t)(BAR0 + 2 * BAR0_LEN));
	put_file("resource2", NULL, (off_t)(BAR2 + BAR2_LEN));
	put_file("resource2_wc", NULL, (off_t)(BAR2 + BAR2_LEN));
	put_file("config", NULL, 4096);
}

static void tree_remove(void)
{
	char p[200];

	if (!root[0])
		return;
	snprintf(p, sizeof p, "rm -rf '%s'", root);
	if (system(p) != 0)
		fprintf(stderr, "could not remove %s\n", root);
}

static char *bar_map(const char *name, uint64_t at, size_t len)
{
	char p[320];
	void *m;
	int fd;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	fd = open(p, O_RDWR);
	REQUIRE(fd >= 0, "open %s", p);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)at);
	REQUIRE(m != MAP_FAILED, "mmap %s at %#llx: %s", p, (unsigned long long)at, strerror(errno));
	close(fd);
	return m;
}

static int reg(struct fid_domain *d, void *buf, size_t len, uint64_t acc, struct fid_mr **mr)
{
	*mr = NULL;
	return fi_mr_reg(d, buf, len, acc, 0, next_key++, 0, mr, NULL);
}

static struct oxmr_mr_ops *mr_ops(struct fid_domain *d)
{
	struct oxmr_mr_ops *ops = NULL;

	REQUIRE_RC(fi_open_ops(&d->fid, OXMR_MR_OPS_NAME, 0, (void **)&ops, NULL), 0);
	REQUIRE(ops->version >= 3 && ops->device && ops->reg_dmabuf && ops->mmio_copy,
		"extension table version %u has no peer-direct entries", ops->version);
	return ops;
}


/* Register and expect `want`, with a log line holding `says`. */
static void refused(struct fid_domain *d, void *buf, size_t len, int want, const char *says)
{
	struct fid_mr *mr;
	const char *log;

	oxt_capture_begin();
	int rc = reg(d, buf, len, FI_REMOTE_READ | FI_REMOTE_WRITE, &mr);
	log = oxt_capture_end();
	EXPECT_RC(rc, want);
	EXPECT(strstr(log, says), "no log line saying \"%s\"; the log: %s", says, log);
	if (rc == 0)
		fi_close(&mr->fid);
}

static void identity(void)
{
	struct oxt_env e;
	struct oxmr_mr_ops *ops;
	struct fid_mr *mr;
	char *m, *wc, *cfg, *off;

	oxt_open(&e);
	ops = mr_ops(e.domain);

	OXT_GROUP("a synthetic BAR 0 mapping registers without opt-in as PEER: device, BAR, offset, bus range, UC");
	m = bar_map("resource0", BAR0 + PS, 4 * PS);
	if (OK_RC(reg(e.domain, m + 0x100, 2 * PS, FI_REMOTE_READ | FI_REMOTE_WRITE, &mr), 0)) {
		struct oxmr_mr_info in = { .size = sizeof in };
		struct oxmr_mr_device dv = { .size = sizeof dv };
		struct oxmr_phys_run run[2];
		size_t n = 2;

		EXPECT_RC(ops->query(mr, &in), 0);
		EXPECT_EQ(in.class_, OXMR_MR_CLASS_PEER);
		EXPECT_EQ(in.phys_state, OXMR_PHYS_AVAILABLE);
		EXPECT_EQ(in.bytes_pinned, 0);
		EXPECT_RC(ops->device(mr, &dv), 0);
		EXPECT_EQ(dv.kind, OXMR_DEV_PCI_BAR);
		EXPECT_EQ(dv.pci_valid, 1);
		EXPECT_EQ(dv.pci_domain, 0);
		EXPECT_EQ(dv.pci_bus, 0);
		EXPECT_EQ(dv.pci_dev, 4);
		EXPECT_EQ(dv.pci_func, 0);
		EXPECT_EQ(dv.index, 0);
		EXPECT_EQ(dv.offset, PS + 0x100);
		EXPECT_EQ(dv.bus_start, BAR0);
		EXPECT_EQ(dv.bus_end, BAR0 + BAR0_LEN - 1);
		EXPECT_EQ(dv.caching, OXMR_CACHING_UC);
		EXPECT_EQ(dv.prefetchable, 0);
		/* Physical runs without pagemap: the offset column is the address. */
		EXPECT_RC(ops->phys_runs(mr, run, &n), 0);
		EXPECT_EQ(n, 1);
		EXPECT_EQ(run[0].addr, BAR0 + PS + 0x100);
		EXPECT_EQ(run[0].len, 2 * PS);
		EXPECT_RC(fi_close(&mr->fid), 0);
	}

	OXT_GROUP("resource2_wc of the prefetchable BAR 2: WC, prefetchable, BAR 2");
	wc = bar_map("resource2_wc", BAR2 + 0x8000, 2 * PS);
	if (OK_RC(reg(e.domain, wc, 2 * PS, FI_REMOTE_READ, &mr), 0)) {
		struct oxmr_mr_device dv = { .size = sizeof dv };

		EXPECT_RC(ops->device(mr, &dv), 0);
		EXPECT_EQ(dv.index, 2);
		EXPECT_EQ(dv.offset, 0x8000);
		EXPECT_EQ(dv.caching, OXMR_CACHING_WC);
		EXPECT_EQ(dv.prefetchable, 1);
		EXPECT_EQ(dv.bus_start, BAR2);
		EXPECT_RC(fi_close(&mr->fid), 0);
	}

	OXT_GROUP("ordinary memory: no device (-FI_ENODATA from the device query)");
	{
		char *buf = malloc(PS);
		struct oxmr_mr_device dv = { .size = sizeof dv };

		if (OK_RC(reg(e.domain, buf, PS, FI_REMOTE_READ, &mr), 0)) {
			EXPECT_RC(ops->device(mr, &dv), -FI_ENODATA);
			fi_close(&mr->fid);
		}
		free(buf);
	}

	OXT_GROUP("refused: a range running past the BAR, with a log line");
	munmap(m, 4 * PS);
	m = bar_map("resource0", BAR0 + BAR0_LEN - PS, 2 * PS);
	refused(e.domain, m + PS / 2, PS, -FI_EFAULT, "runs past BAR 0 of " BDF);

	OXT_GROUP("refused: a mapping of a non-resource file under the root (config), with a log line");
	cfg = bar_map("config", 0, PS);
	refused(e.domain, cfg, 64, -FI_EFAULT, "not PCI device memory");

	OXT_GROUP("refused: the resource line disagrees with the mapping (BAR 0 mapped where BAR 0 is not)");
	off = bar_map("resource0", BAR0 - 0x100000, PS);
	refused(e.domain, off, 64, -FI_EFAULT, "the mapping and the device disagree");
	put_resource(0xc0000000ULL);
	{
		char *m0 = bar_map("resource0", BAR0, PS);
		refused(e.domain, m0, 64, -FI_EFAULT, "the mapping and the device disagree");
		munmap(m0, PS);
	}
	put_resource(BAR0);

	OXT_GROUP("refused: an MMIO range that is not 4-byte aligned");
	refused(e.domain, m + 2, 64, -FI_EINVAL, "not 4-byte aligned");

	munmap(m, 2 * PS);
	munmap(wc, 2 * PS);
	munmap(cfg, PS);
	munmap(off, PS);
	oxt_close(&e);
}

/* dma-buf refusals through the extension entry point. */
static void dmabuf_refusals(void)
{
	struct oxt_env e;
	struct oxmr_mr_ops *ops;
	struct {
		const char *what, *says;
		int fd, want;
	} c[4];
	int sv[2];
	char tmp[] = "/tmp/oxt-dmabuf-XXXXXX";

	oxt_open(&e);
	ops = mr_ops(e.domain);
	OXT_GROUP("dma-buf: a memfd, a socket, a regular file and a closed fd are refused, each named");
	c[0].fd = memfd_create("oxt-not-a-dmabuf", MFD_CLOEXEC);
	REQUIRE(ftruncate(c[0].fd, PS) == 0, "ftruncate");
	c[0].what = "memfd", c[0].says = "is a memfd (/memfd:oxt-not-a-dmabuf", c[0].want = -FI_EINVAL;
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	c[1].fd = sv[0], c[1].what = "socket", c[1].says = "is a socket (socket:[", c[1].want = -FI_EINVAL;
	c[2].fd = mkstemp(tmp);
	REQUIRE(c[2].fd >= 0 && ftruncate(c[2].fd, PS) == 0, "mkstemp");
	unlink(tmp);
	c[2].what = "regular file", c[2].says = "is a regular file (/tmp/oxt-dmabuf-", c[2].want = -FI_EINVAL;
	c[3].fd = dup(sv[1]);
	close(c[3].fd);
	c[3].what = "closed fd", c[3].says = "is not an open file descriptor", c[3].want = -FI_EBADF;
	for (int i = 0; i < 4; i++) {
		struct oxmr_mr_dmabuf b = { .fd = c[i].fd, .offset = 0, .len = PS, .base_addr = NULL };
		void *mr = NULL;
		const char *log;
		int rc;

		oxt_capture_begin();
		rc = ops->reg_dmabuf(e.domain, &b, FI_REMOTE_READ, 0, next_key++, 0, &mr, NULL);
		log = oxt_capture_end();
		EXPECT(rc == c[i].want, "%s: rc %d, want %d", c[i].what, rc, c[i].want);
		EXPECT(strstr(log, c[i].says) && strstr(log, "dma-buf"), "%s: no log line saying \"%s\"; the log: %s",
		       c[i].what, c[i].says, log);
		EXPECT(mr == NULL, "%s: an MR came out of a refusal", c[i].what);
#ifdef FI_MR_DMABUF
		/* libfabric >= 1.20 headers: the standard path says the same. */
		{
			struct fi_mr_dmabuf db = { .fd = c[i].fd, .offset = 0, .len = PS, .base_addr = NULL };
			struct fi_mr_attr a = { .dmabuf = &db, .iov_count = 1, .access = FI_REMOTE_READ,
						.requested_key = next_key++, .iface = FI_HMEM_SYSTEM };
			struct fid_mr *m2 = NULL;

			oxt_capture_begin();
			rc = fi_mr_regattr(e.domain, &a, FI_MR_DMABUF, &m2);
			log = oxt_capture_end();
			EXPECT(rc == c[i].want, "fi_mr_regattr(FI_MR_DMABUF) %s: rc %d, want %d", c[i].what, rc,
			       c[i].want);
			EXPECT(strstr(log, c[i].says), "FI_MR_DMABUF %s: no log line saying \"%s\"", c[i].what,
			       c[i].says);
		}
#endif
		if (i < 3)
			close(c[i].fd);
	}
	close(sv[1]);
	oxt_close(&e);
}

/* udmabuf (include/uapi/linux/udmabuf.h), for the accept path. */
struct oxt_udmabuf_create {
	uint32_t memfd, flags;
	uint64_t offset, size;
};
#define OXT_UDMABUF_CREATE _IOW('u', 0x42, struct oxt_udmabuf_create)

static void dmabuf_accept(void)
{
	struct oxt_env e;
	struct oxmr_mr_ops *ops;
	int dev, mfd, buf;
	struct oxt_udmabuf_create cr = { 0 };
	char *view;

	OXT_GROUP("dma-buf accept path with the real kernel (/dev/udmabuf)");
	dev = open("/dev/udmabuf", O_RDWR);
	REQUIRE(dev >= 0, "OXT_UDMABUF=1 but /dev/udmabuf: %s", strerror(errno));
	mfd = memfd_create("oxt-udmabuf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	REQUIRE(ftruncate(mfd, 4 * PS) == 0 && fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0, "memfd");
	view = mmap(NULL, 4 * PS, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	oxt_fill((unsigned char *)view, 4 * PS, 9);
	cr.memfd = (uint32_t)mfd, cr.size = 4 * PS, cr.flags = 1;
	buf = ioctl(dev, OXT_UDMABUF_CREATE, &cr);
	REQUIRE(buf >= 0, "UDMABUF_CREATE: %s", strerror(errno));
	oxt_open(&e);
	ops = mr_ops(e.domain);
	{
		struct oxmr_mr_dmabuf b = { .fd = buf, .offset = PS, .len = 2 * PS, .base_addr = (void *)0x100000 };
		struct oxmr_mr_device dv = { .size = sizeof dv };
		struct fid_mr *mr = NULL;

		if (OK_RC(ops->reg_dmabuf(e.domain, &b, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, next_key++, 0,
					      (void **)&mr, NULL), 0)) {
			close(buf); /* the registration holds its own reference */
			EXPECT_RC(ops->device(mr, &dv), 0);
			EXPECT_EQ(dv.kind, OXMR_DEV_DMABUF);
			EXPECT_EQ(dv.offset, PS);
			EXPECT_EQ(dv.dmabuf_size, 4 * PS);
			EXPECT(strcmp((char *)dv.exporter, "udmabuf") == 0, "exporter %s", (char *)dv.exporter);
			EXPECT_RC(fi_close(&mr->fid), 0);
		}
	}
	munmap(view, 4 * PS);
	close(mfd);
	close(dev);
	oxt_close(&e);
}

/* ---- The MMIO access recorder ---- */

#define DEV_PAGES 2
static unsigned char *rec_base;
static unsigned char shadow[DEV_PAGES * PS];
static uintptr_t fault_at;
static struct {
	uintptr_t addr;
	int width; /* bytes the instruction changed; 0 for a load */
	uintptr_t lo; /* first changed byte */
} acc[4096];
static int nacc, rec_bad;

static void on_segv(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	uintptr_t a = (uintptr_t)si->si_addr;

	if (a < (uintptr_t)rec_base || a >= (uintptr_t)rec_base + DEV_PAGES * PS) {
		signal(sig, SIG_DFL);
		return;
	}
	mprotect(rec_base, DEV_PAGES * PS, PROT_READ | PROT_WRITE);
	memcpy(shadow, rec_base, DEV_PAGES * PS);
	fault_at = a;
	uc->uc_mcontext.gregs[REG_EFL] |= 0x100; /* trap after one instruction */
}

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	ssize_t lo = -1, hi = -1;

	(void)sig, (void)si;
	for (size_t i = 0; i < DEV_PAGES * PS; i++)
		if (rec_base[i] != shadow[i]) {
			if (lo < 0)
				lo = (ssize_t)i;
			else if (hi + 1 != (ssize_t)i)
				rec_bad++; /* one instruction, two separate pieces */
			hi = (ssize_t)i;
		}
	if (nacc < (int)(sizeof acc / sizeof acc[0])) {
		acc[nacc].addr = fault_at;
		acc[nacc].width = lo < 0 ? 0 : (int)(hi - lo + 1);
		acc[nacc].lo = lo < 0 ? 0 : (uintptr_t)rec_base + (uintptr_t)lo;
		nacc++;
	}
	mprotect(rec_base, DEV_PAGES * PS, PROT_NONE);
	uc->uc_mcontext.gregs[REG_EFL] &= ~0x100LL;
}

static void record_start(void)
{
	nacc = 0, rec_bad = 0;
	REQUIRE(mprotect(rec_base, DEV_PAGES * PS, PROT_NONE) == 0, "mprotect");
}

static void record_stop(void)
{
	REQUIRE(mprotect(rec_base, DEV_PAGES * PS, PROT_READ | PROT_WRITE) == 0, "mprotect");
}

/* The accesses the copy rule plans for [a, a+n): the widest naturally
 * aligned access that fits, 8, 4, 2 or 1. */
static int planned(uintptr_t a, size_t n, uintptr_t *at, int *w)
{
	int k = 0;

	for (size_t off = 0; off < n;) {
		int x = 8;
		while (x > 1 && ((a + off) % (size_t)x || (size_t)x > n - off))
			x /= 2;
		at[k] = a + off, w[k] = x, k++;
		off += (size_t)x;
	}
	return k;
}

static void mmio_rule(void)
{
	struct oxt_env e;
	struct oxmr_mr_ops *ops;
	struct sigaction sa = { 0 };
	static const struct {
		size_t off, len;
	} cases[] = { { 0, 2 * PS }, { 8, 64 }, { 4, 100 }, { 12, 8 }, { 16, 4 }, { 1, 13 }, { 6, 27 } };
	unsigned char *src = malloc(2 * PS), *back = malloc(2 * PS);
	uintptr_t at[4096];
	int w[4096];

	oxt_open(&e);
	ops = mr_ops(e.domain);
	rec_base = mmap(NULL, DEV_PAGES * PS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(rec_base != MAP_FAILED, "mmap");
	sa.sa_flags = SA_SIGINFO;
	sa.sa_sigaction = on_segv;
	sigaction(SIGSEGV, &sa, NULL);
	sa.sa_sigaction = on_trap;
	sigaction(SIGTRAP, &sa, NULL);
	for (size_t i = 0; i < 2 * PS; i++)
		src[i] = (unsigned char)(1 + i % 200); /* never the 0xEE fill */

	OXT_GROUP("stores into device memory: aligned 4/8-byte general-register stores, each byte once, none outside");
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		uintptr_t d = (uintptr_t)rec_base + cases[c].off;
		size_t n = cases[c].len;
		int k = planned(d, n, at, w), narrow = 0;
		bool aligned = d % 4 == 0 && n % 4 == 0;

		memset(rec_base, 0xEE, DEV_PAGES * PS);
		record_start();
		int rc = ops->mmio_copy((void *)d, src, n, OXMR_MMIO_TO_DEVICE | (c % 2 ? OXMR_MMIO_WC : 0));
		record_stop();
		EXPECT_RC(rc, 0);
		EXPECT(rec_bad == 0, "case %zu: an instruction wrote two separate pieces", c);
		EXPECT(nacc == k, "case %zu (%#zx+%zu): %d accesses, the rule plans %d", c, cases[c].off, n, nacc, k);
		for (int i = 0; i < nacc && i < k; i++) {
			EXPECT(acc[i].width == w[i] && acc[i].lo == at[i] && acc[i].addr == at[i],
			       "case %zu access %d: %d bytes at +%#lx (fault at +%#lx), planned %d at +%#lx", c, i,
			       acc[i].width, (unsigned long)(acc[i].lo - (uintptr_t)rec_base),
			       (unsigned long)(acc[i].addr - (uintptr_t)rec_base), w[i],
			       (unsigned long)(at[i] - (uintptr_t)rec_base));
			narrow += acc[i].width < 4;
		}
		if (aligned)
			EXPECT(narrow == 0, "case %zu: 4-aligned, yet %d accesses narrower than 4 bytes", c, narrow);
		EXPECT(memcmp((void *)d, src, n) == 0, "case %zu: the device bytes differ", c);
		EXPECT(oxt_first_not(rec_base, cases[c].off, 0xEE) == cases[c].off &&
			       oxt_first_not((unsigned char *)d + n, DEV_PAGES * PS - cases[c].off - n, 0xEE) ==
				       DEV_PAGES * PS - cases[c].off - n,
		       "case %zu: a byte outside the range changed", c);
	}

	OXT_GROUP("loads from device memory: one per planned aligned access, in order, none outside");
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		uintptr_t s = (uintptr_t)rec_base + cases[c].off;
		size_t n = cases[c].len;
		int k = planned(s, n, at, w);

		memcpy(rec_base, src, 2 * PS);
		memset(back, 0, n);
		record_start();
		int rc = ops->mmio_copy(back, (void *)s, n, 0);
		record_stop();
		EXPECT_RC(rc, 0);
		EXPECT(nacc == k, "case %zu: %d loads, the rule plans %d", c, nacc, k);
		for (int i = 0; i < nacc && i < k; i++)
			EXPECT(acc[i].width == 0 && acc[i].addr == at[i], "case %zu load %d at +%#lx (changed %d), planned +%#lx",
			       c, i, (unsigned long)(acc[i].addr - (uintptr_t)rec_base), acc[i].width,
			       (unsigned long)(at[i] - (uintptr_t)rec_base));
		EXPECT(memcmp(back, (void *)s, n) == 0, "case %zu: the copy differs", c);
	}
	signal(SIGSEGV, SIG_DFL);
	signal(SIGTRAP, SIG_DFL);
	munmap(rec_base, DEV_PAGES * PS);
	free(src);
	free(back);
	oxt_close(&e);
}

/* The copy routines' machine code: no SIMD, no string instructions, an
 * sfence in the store routine. */
static void machine_code(void)
{
	char cmd[600], line[512];
	const char *pp = getenv("FI_PROVIDER_PATH");
	FILE *f;
	int in = 0, fns[2] = { 0, 0 }, sfence = 0, bad = 0;

	OXT_GROUP("the copy routines' machine code: general registers only, an sfence on the store side (objdump)");
	if (system("command -v objdump >/dev/null 2>&1") != 0) {
		oxt_skip("objdump (binutils) is not installed");
		return;
	}
	REQUIRE(pp, "FI_PROVIDER_PATH is not set");
	snprintf(cmd, sizeof cmd, "objdump -d -C --no-show-raw-insn '%s/liboxmr-fi.so'", pp);
	f = popen(cmd, "r");
	REQUIRE(f, "popen objdump");
	while (fgets(line, sizeof line, f)) {
		if (strchr(line, '<') && strstr(line, ">:")) {
			in = 0;
			if (strstr(line, "mr::phys::copy_to_device") && !strstr(line, "closure"))
				in = 1, fns[0]++;
			else if (strstr(line, "mr::phys::copy_from_device") && !strstr(line, "closure"))
				in = 2, fns[1]++;
			continue;
		}
		if (!in)
			continue;
		if (strstr(line, "xmm") || strstr(line, "ymm") || strstr(line, "zmm") || strstr(line, "rep ") ||
		    strstr(line, "movs") || strstr(line, "stos")) {
			if (bad++ < 5)
				EXPECT(0, "%s: %s", in == 1 ? "copy_to_device" : "copy_from_device", line);
		}
		if (in == 1 && strstr(line, "sfence"))
			sfence++;
	}
	pclose(f);
	EXPECT(fns[0] >= 1 && fns[1] >= 1, "copy routines not found in the library (%d, %d): stripped?", fns[0], fns[1]);
	EXPECT(sfence >= 1, "no sfence in copy_to_device");
	EXPECT(bad == 0, "%d SIMD or string instructions", bad);
}

/* ---- RMA into and out of a BAR registration, from a peer process ---- */

struct keys {
	uint64_t key, addr;
};


#define RMA_LEN (2 * PS)

static int owner(int sock)
{
	struct oxt_side s;
	struct keys k;
	struct fid_mr *mr;
	unsigned char *bar, exp[RMA_LEN];

	oxt_side_open(&s, sock);
	bar = (unsigned char *)bar_map("resource0", BAR0 + 4 * PS, RMA_LEN);
	memset(bar, 0, RMA_LEN);
	REQUIRE_RC(reg(s.e.domain, bar, RMA_LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, &mr), 0);
	k.key = fi_mr_key(mr);
	k.addr = s.virt ? (uint64_t)(uintptr_t)bar : 0;
	REQUIRE(write(sock, &k, sizeof k) == sizeof k, "keys");
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		struct fi_cq_tagged_entry ent;

		(void)fi_cq_read(s.cq, &ent, 1);
		if (poll(&p, 1, 0) != 1)
			continue;
		switch (oxt_get(sock)) {
		case 'W': /* what the peer wrote, through our own mapping */
			oxt_fill(exp, RMA_LEN, 21);
			oxt_fill(exp + 100, 40, 22);
			oxt_put(sock, memcmp(bar, exp, RMA_LEN) == 0 ? 'y' : 'n');
			break;
		case 'F': /* new bytes for the peer to read */
			oxt_fill(bar, RMA_LEN, 23);
			oxt_put(sock, 'f');
			break;
		case 'U':
			munmap(bar, RMA_LEN);
			oxt_put(sock, 'u');
			break;
		case 'D':
			fi_close(&mr->fid);
			oxt_side_close(&s);
			return 0;
		}
	}
}

static void driver(int sock)
{
	struct oxt_side s;
	struct keys k;
	struct fi_context ctx;
	unsigned char *buf = malloc(RMA_LEN), *exp = malloc(RMA_LEN);

	oxt_side_open(&s, sock);
	REQUIRE(read(sock, &k, sizeof k) == sizeof k, "keys");

	OXT_GROUP("RMA write into the BAR registration from a peer process (8 KiB, then 40 bytes at +100), checked by the owner");
	oxt_fill(buf, RMA_LEN, 21);
	EXPECT_RC(fi_write(s.ep, buf, RMA_LEN, NULL, s.peer, k.addr, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_fill(buf, 40, 22);
	EXPECT_RC(fi_write(s.ep, buf, 40, NULL, s.peer, k.addr + 100, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_put(sock, 'W');
	EXPECT(oxt_get(sock) == 'y', "the owner's BAR mapping holds other bytes");

	OXT_GROUP("RMA read out of the BAR registration (8 KiB, and 12 bytes at +4092) equals the owner's bytes");
	oxt_put(sock, 'F');
	EXPECT(oxt_get(sock) == 'f', "owner");
	memset(buf, 0, RMA_LEN);
	EXPECT_RC(fi_read(s.ep, buf, RMA_LEN, NULL, s.peer, k.addr, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_fill(exp, RMA_LEN, 23);
	EXPECT(memcmp(buf, exp, RMA_LEN) == 0, "read differs");
	EXPECT_RC(fi_read(s.ep, buf, 12, NULL, s.peer, k.addr + 4092, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(memcmp(buf, exp + 4092, 12) == 0, "small read differs");

	OXT_GROUP("an RMA not 4-byte aligned into MMIO memory: FI_EACCES at the initiator (as every refused remote access)");
	EXPECT_RC(fi_write(s.ep, buf, 8, NULL, s.peer, k.addr + 2, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);
	EXPECT_RC(fi_read(s.ep, buf, 6, NULL, s.peer, k.addr, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);

	OXT_GROUP("after munmap the old key is refused (FI_EACCES)");
	oxt_put(sock, 'U');
	EXPECT(oxt_get(sock) == 'u', "owner did not unmap");
	EXPECT_RC(fi_write(s.ep, buf, 64, NULL, s.peer, k.addr, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);
	EXPECT_RC(fi_read(s.ep, buf, 64, NULL, s.peer, k.addr, k.key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);

	oxt_put(sock, 'D');
	oxt_side_close(&s);
	free(buf);
	free(exp);
}

/* OXT_PEER_BENCH=<n>: n registrations and closes of 64 KiB of a synthetic
 * BAR, and n of ordinary memory (cache hits after the first). With
 * FI_OXMR_SYSFS_ROOT set every registration reads /proc/self/maps first
 * (the simulation's cost: with /sys only a failed pin leads there), so
 * the second figure is that read plus a cache hit, and the difference is
 * what identifying the BAR adds (its resource file, the probe-free pin). */
static void bench(int n)
{
	struct oxt_env e;
	struct fid_mr *mr;
	char *bar = bar_map("resource2", BAR2, 16 * PS), *plain = malloc(16 * PS);
	double t0, t1, t2;

	memset(plain, 1, 16 * PS);
	oxt_open(&e);
	t0 = oxt_now_ms();
	for (int i = 0; i < n; i++) {
		REQUIRE_RC(reg(e.domain, bar, 16 * PS, FI_REMOTE_READ | FI_REMOTE_WRITE, &mr), 0);
		fi_close(&mr->fid);
	}
	t1 = oxt_now_ms();
	for (int i = 0; i < n; i++) {
		REQUIRE_RC(reg(e.domain, plain, 16 * PS, FI_REMOTE_READ | FI_REMOTE_WRITE, &mr), 0);
		fi_close(&mr->fid);
	}
	t2 = oxt_now_ms();
	printf("# bench reg+close 64 KiB: synthetic BAR %.2f us, ordinary memory (a maps read and a cache hit) %.2f us\n",
	       (t1 - t0) * 1000 / n, (t2 - t1) * 1000 / n);
	oxt_close(&e);
	munmap(bar, 16 * PS);
	free(plain);
}

int main(int argc, char **argv)
{
	int sv[2], status;
	pid_t pid;

	(void)argc;
	setenv("FI_LOG_LEVEL", "warn", 0);
	oxt_init(argv[0]);
	tree_make();
	atexit(tree_remove);
	/* (Read when the provider loads, at the first fi_getinfo.) */
	setenv("FI_OXMR_SYSFS_ROOT", root, 1);

	identity();
	dmabuf_refusals();
	if (getenv("OXT_UDMABUF") && atoi(getenv("OXT_UDMABUF")))
		dmabuf_accept();
	mmio_rule();
	machine_code();
	oxt_group_end();
	if (getenv("OXT_PEER_BENCH"))
		bench(atoi(getenv("OXT_PEER_BENCH")) > 0 ? atoi(getenv("OXT_PEER_BENCH")) : 1000);

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		root[0] = 0; /* the parent removes the tree */
		oxt_reset_counts();
		oxt_prog = "mr_peer[owner]";
		OXT_GROUP("the owner's side: its BAR registration served");
		exit(owner(sv[1]) || oxt_done());
	}
	close(sv[1]);
	driver(sv[0]);
	waitpid(pid, &status, 0);
	OXT_GROUP("the owner process");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "owner failed (status %d)", status);
	return oxt_done();
}
