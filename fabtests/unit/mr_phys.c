/*
 * The physical-address fallback for device memory (VM_PFNMAP|VM_IO).
 *
 * Device memory here is the perf_event ring buffer: genuine kernel memory
 * mapped VM_PFNMAP|VM_IO, which get_user_pages, io_uring and
 * process_vm_readv all refuse (EFAULT), like a driver's remap_pfn_range
 * buffer. Its control page is writable from byte 1088 (past struct
 * perf_event_mmap_page's fields) to the end; its data pages are read-only
 * and hold records the kernel wrote (mmap/comm/task events).
 *
 * Part 1 (this process): refusal without opt-in and its log line; success
 * with the per-call flag and with FI_OXMR_MR_PHYS_FALLBACK=1; the query's
 * physical runs against /proc/self/pagemap; what the fallback must refuse
 * even when asked (unmapped, heap, memfd_secret, a range running from the
 * ring into anonymous memory, past the end of the mapping, write access to
 * read-only device pages); revocation by munmap.
 *
 * Part 2 (two processes over the shared-memory wire; the parent owns the
 * device memory and serves, the child drives): RMA write into the writable
 * tail and read back (also checked by the owner through its mapping); RMA
 * read of the data pages equals what the owner reads; sends from device
 * memory (eager and large) and a receive into it; the child's own device
 * memory as local RMA buffers; the old key rejected after munmap, after a
 * new ring is mapped at the same address, and after anonymous memory
 * replaces the mapping (nothing written into the new memory).
 *
 * OXT_PHYS_BENCH=<iterations> adds a benchmark: RMA read bandwidth from
 * perf-ring data pages against ordinary registered memory, same sizes.
 */
#include "oxt.h"

#include <sys/resource.h>

#include <linux/perf_event.h>
#include <rdma/fi_ext_oxmr.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef SYS_memfd_secret
#define SYS_memfd_secret 447
#endif

#define PS 4096UL
#define TAIL_OFF 1088UL
#define TAIL_LEN (PS - TAIL_OFF)
#define DATA_PAGES 16UL
#define DATA_LEN (DATA_PAGES * PS)
#define RING_LEN ((1 + DATA_PAGES) * PS)
#define BENCH_PAGES 256UL

static uint64_t next_key = 0x5000;
/* FI_OXMR_MR_PHYS_FALLBACK=1 in the environment (the global opt-in). */
static bool env_opt_in;

/* A perf ring with kernel-written records in its data pages, then frozen
 * (the event disabled) so both processes see the same bytes. `at` places
 * it (MAP_FIXED) when non-NULL. Returns NULL where perf is unavailable. */
static char *perf_ring(size_t data_pages, void *at, int *fdp)
{
	struct perf_event_attr pa;
	char *ring;
	int fd;

	memset(&pa, 0, sizeof pa);
	pa.type = PERF_TYPE_SOFTWARE;
	pa.size = sizeof pa;
	pa.config = PERF_COUNT_SW_DUMMY;
	pa.mmap = 1;
	pa.mmap_data = 1;
	pa.comm = 1;
	pa.task = 1;
	pa.exclude_kernel = 1;
	pa.exclude_hv = 1;
	fd = (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return NULL;
	ring = mmap(at, (1 + data_pages) * PS, PROT_READ | PROT_WRITE,
		    MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
	REQUIRE(ring != MAP_FAILED, "mmap(perf ring): %s", strerror(errno));
	/* Records: a few data mmaps the event reports. */
	for (int i = 0; i < 64; i++) {
		void *p = mmap(NULL, PS * (1 + i % 3), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		munmap(p, PS * (1 + i % 3));
	}
	ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
	*fdp = fd;
	return ring;
}

static int reg(struct fid_domain *d, void *buf, size_t len, uint64_t acc, uint64_t flags, struct fid_mr **mr)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fi_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = acc,
				.requested_key = next_key++, .iface = FI_HMEM_SYSTEM };

	*mr = NULL;
	return fi_mr_regattr(d, &a, flags, mr);
}

static struct oxmr_mr_ops *mr_ops(struct fid_domain *d)
{
	struct oxmr_mr_ops *ops = NULL;

	REQUIRE_RC(fi_open_ops(&d->fid, OXMR_MR_OPS_NAME, 0, (void **)&ops, NULL), 0);
	REQUIRE(ops->version >= 2 && ops->phys_runs, "extension table version %u has no phys_runs", ops->version);
	return ops;
}

static struct oxmr_mr_info query(struct oxmr_mr_ops *ops, struct fid_mr *mr)
{
	struct oxmr_mr_info in = { .size = sizeof in };

	EXPECT_RC(ops->query(mr, &in), 0);
	return in;
}

/* Physical runs of [buf, buf+len) from /proc/self/pagemap, merged; -1 when
 * some page shows no frame (hidden, or not walked). */
static int pagemap_runs(const char *buf, size_t len, struct oxmr_phys_run *runs, size_t *n)
{
	uintptr_t a = (uintptr_t)buf, first = a & ~(PS - 1);
	size_t pages = (a + len + PS - 1) / PS - first / PS;
	uint64_t e;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	*n = 0;
	if (fd < 0)
		return -1;
	for (size_t i = 0; i < pages; i++) {
		uintptr_t ps = first + i * PS, lo = ps > a ? ps : a, hi = ps + PS < a + len ? ps + PS : a + len;
		uint64_t pfn, pa;

		if (pread(fd, &e, 8, (off_t)(ps / PS * 8)) != 8 || !(e >> 63) || !(pfn = e & ((1ULL << 55) - 1))) {
			close(fd);
			return -1;
		}
		pa = pfn * PS + (lo - ps);
		if (*n && runs[*n - 1].addr + runs[*n - 1].len == pa) {
			runs[*n - 1].len += hi - lo;
		} else {
			runs[*n].addr = pa;
			runs[*n].len = hi - lo;
			(*n)++;
		}
	}
	close(fd);
	return 0;
}

/* PROCMAP_QUERY (linux/fs.h since Linux 6.11, newer than these headers):
 * _IOWR('f', 17, struct procmap_query), 104 bytes, size first. */
#define OXT_PROCMAP_QUERY 0xC0686611UL
struct oxt_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t rest[10];
};

/* A descriptor of this process open on /proc/<pid>/maps (one the provider
 * keeps for PROCMAP_QUERY), or -1. */
static int own_maps_fd(void)
{
	char want[64], got[64];
	struct dirent *d;
	DIR *dir = opendir("/proc/self/fd");
	int found = -1;

	if (!dir)
		return -1;
	snprintf(want, sizeof want, "/proc/%d/maps", (int)getpid());
	while (found < 0 && (d = readdir(dir))) {
		ssize_t n;

		n = readlinkat(dirfd(dir), d->d_name, got, sizeof got - 1);
		if (n > 0) {
			got[n] = 0;
			if (!strcmp(got, want))
				found = atoi(d->d_name);
		}
	}
	closedir(dir);
	return found;
}

/* /proc/<pid>/maps of a process that has exited: the kernel cannot answer
 * PROCMAP_QUERY on it (ESRCH); -1 if it cannot be made. */
static int dead_maps_fd(void)
{
	char path[64];
	int p[2], fd, st;
	pid_t pid;

	if (pipe(p))
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char c;

		close(p[1]);
		if (read(p[0], &c, 1) < 0) {
			/* killed before or after: either way it exits */
		}
		_exit(0);
	}
	close(p[0]);
	snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	kill(pid, SIGKILL);
	close(p[1]);
	waitpid(pid, &st, 0);
	return fd;
}

/* Run `call` with stderr captured; returns what it logged (static buffer). */

static void part1(void)
{
	struct oxt_env e;
	struct oxmr_mr_ops *ops;
	struct fid_mr *mr;
	struct oxmr_mr_info in;
	struct oxmr_phys_run runs[64], pm[64];
	size_t n = 64, npm = 0;
	char *ring, *anon, *sec;
	const char *log;
	int fd, sfd, rc;

	oxt_open(&e);
	ops = mr_ops(e.domain);
	ring = perf_ring(DATA_PAGES, NULL, &fd);
	REQUIRE(ring, "perf_event_open");

	if (env_opt_in) {
		printf("# FI_OXMR_MR_PHYS_FALLBACK=1: the refusal without opt-in is checked by the run without it\n");
	} else {
		OXT_GROUP("without opt-in: -FI_EFAULT and a log line naming the mapping and the variable");
		oxt_capture_begin();
		rc = reg(e.domain, ring + PS, DATA_LEN, FI_REMOTE_READ, 0, &mr);
		log = oxt_capture_end();
		EXPECT_RC(rc, -FI_EFAULT);
		EXPECT(strstr(log, "VM_PFNMAP") && strstr(log, "FI_OXMR_MR_PHYS_FALLBACK"),
		       "the log line should name the mapping and the variable; got: %s", log);
	}

	OXT_GROUP("with OXMR_MR_PHYS_FALLBACK: data pages for FI_REMOTE_READ|FI_SEND register as PHYSICAL");
	rc = reg(e.domain, ring + PS, DATA_LEN, FI_REMOTE_READ | FI_SEND, OXMR_MR_PHYS_FALLBACK, &mr);
	REQUIRE_RC(rc, 0);
	in = query(ops, mr);
	EXPECT_EQ(in.class_, OXMR_MR_CLASS_PHYSICAL);
	EXPECT_EQ(in.bytes_pinned, 0);

	OXT_GROUP("the query's physical runs equal what /proc/self/pagemap says");
	rc = ops->phys_runs(mr, runs, &n);
	if (pagemap_runs(ring + PS, DATA_LEN, pm, &npm) == 0) {
		EXPECT_EQ(in.phys_state, OXMR_PHYS_AVAILABLE);
		EXPECT_RC(rc, 0);
		EXPECT_EQ(n, npm);
		EXPECT(n == npm && memcmp(runs, pm, n * sizeof *runs) == 0, "runs differ from pagemap");
	} else {
		printf("# /proc/self/pagemap shows no frames for the ring (PFNs hidden, or a VM_PFNMAP mapping the kernel's page walk skips): the query must say unavailable\n");
		EXPECT_EQ(in.phys_state, OXMR_PHYS_UNAVAILABLE);
		EXPECT_RC(rc, -FI_ENODATA);
		EXPECT_EQ(in.phys_runs, 0);
	}
	n = 0;
	EXPECT(ops->phys_runs(mr, NULL, &n) == (in.phys_state == OXMR_PHYS_AVAILABLE ? -FI_ETOOSMALL : -FI_ENODATA),
	       "phys_runs with no room");
	EXPECT_RC(fi_close(&mr->fid), 0);

	OXT_GROUP("the writable tail of the control page registers for FI_REMOTE_WRITE|FI_RECV");
	EXPECT_RC(reg(e.domain, ring + TAIL_OFF, TAIL_LEN, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_RECV,
		      OXMR_MR_PHYS_FALLBACK, &mr), 0);
	if (mr)
		EXPECT_RC(fi_close(&mr->fid), 0);

	OXT_GROUP("data pages for FI_REMOTE_WRITE: -FI_EACCES (the driver refuses stores there)");
	EXPECT_RC(reg(e.domain, ring + PS, DATA_LEN, FI_REMOTE_WRITE, OXMR_MR_PHYS_FALLBACK, &mr), -FI_EACCES);

	OXT_GROUP("with opt-in, an unmapped address: -FI_EFAULT");
	anon = mmap(NULL, 2 * PS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(anon, 2 * PS);
	EXPECT_RC(reg(e.domain, anon, 2 * PS, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), -FI_EFAULT);

	OXT_GROUP("with opt-in, heap memory: -FI_EFAULT (never registered by physical address)");
	{
		char *heap = malloc(64 << 10);
		memset(heap, 1, 64 << 10);
		EXPECT_RC(reg(e.domain, heap, 64 << 10, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), -FI_EFAULT);
		free(heap);
	}

	OXT_GROUP("with opt-in, memfd_secret memory: -FI_EFAULT");
	sfd = (int)syscall(SYS_memfd_secret, 0);
	if (sfd < 0) {
		oxt_skip("memfd_secret(2) is unavailable (%s)", strerror(errno));
	} else {
		REQUIRE(ftruncate(sfd, 2 * PS) == 0, "ftruncate");
		sec = mmap(NULL, 2 * PS, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
		REQUIRE(sec != MAP_FAILED, "mmap secret");
		sec[0] = 1;
		EXPECT_RC(reg(e.domain, sec, 2 * PS, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), -FI_EFAULT);
		munmap(sec, 2 * PS);
		close(sfd);
	}

	OXT_GROUP("with opt-in, a range from the ring into adjacent anonymous memory: -FI_EFAULT");
	{
		/* Reserve ring + 1 page, place a ring over the front. */
		int fd2;
		char *area = mmap(NULL, RING_LEN + PS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		char *r2 = perf_ring(DATA_PAGES, area, &fd2);
		REQUIRE(r2 == area, "ring placed at the reservation");
		memset(area + RING_LEN, 2, PS);
		EXPECT_RC(reg(e.domain, r2 + PS, DATA_LEN + PS, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), -FI_EFAULT);
		OXT_GROUP("the same range without opt-in: -FI_EFAULT");
		EXPECT_RC(reg(e.domain, r2 + PS, DATA_LEN + PS, FI_REMOTE_READ, 0, &mr), -FI_EFAULT);

		OXT_GROUP("with opt-in, a range past the end of the mapping: -FI_EFAULT");
		munmap(area + RING_LEN, PS);
		EXPECT_RC(reg(e.domain, r2 + PS, DATA_LEN + PS, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), -FI_EFAULT);
		munmap(r2, RING_LEN);
		close(fd2);
	}

	OXT_GROUP("munmap revokes: the query then says revoked");
	{
		int fd3;
		char *r3 = perf_ring(DATA_PAGES, NULL, &fd3);
		REQUIRE_RC(reg(e.domain, r3 + PS, DATA_LEN, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), 0);
		munmap(r3, RING_LEN);
		in = query(ops, mr);
		EXPECT_EQ(in.phys_state, OXMR_PHYS_REVOKED);
		n = 64;
		EXPECT_RC(ops->phys_runs(mr, runs, &n), -FI_EKEYREJECTED);
		EXPECT_RC(fi_close(&mr->fid), 0);
		close(fd3);
	}

	OXT_GROUP("fi_mr_refresh renews no device registration and makes none");
	{
		int fd4, fd5;
		char *r4 = perf_ring(DATA_PAGES, NULL, &fd4), *a5;
		struct iovec iov;

		/* a device registration whose ring went: refused, not revived */
		REQUIRE_RC(reg(e.domain, r4 + PS, DATA_LEN, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), 0);
		munmap(r4, RING_LEN);
		iov = (struct iovec){ .iov_base = r4 + PS, .iov_len = DATA_LEN };
		EXPECT_RC(fi_mr_refresh(mr, &iov, 1, 0), -FI_EKEYREJECTED);
		EXPECT_EQ(query(ops, mr).phys_state, OXMR_PHYS_REVOKED);
		EXPECT_RC(fi_close(&mr->fid), 0);
		close(fd4);
		/* ordinary memory replaced by a ring: the refresh refuses to
		 * turn the registration into a device one */
		a5 = mmap(NULL, RING_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		REQUIRE(a5 != MAP_FAILED, "mmap: %s", strerror(errno));
		memset(a5, 1, RING_LEN);
		REQUIRE_RC(reg(e.domain, a5 + PS, DATA_LEN, FI_REMOTE_READ, 0, &mr), 0);
		REQUIRE(perf_ring(DATA_PAGES, a5, &fd5) == a5, "perf ring over the registered memory");
		iov = (struct iovec){ .iov_base = a5 + PS, .iov_len = DATA_LEN };
		EXPECT_RC(fi_mr_refresh(mr, &iov, 1, 0), -FI_EFAULT);
		/* (still an ordinary registration: no physical state) */
		EXPECT_EQ(query(ops, mr).phys_state, OXMR_PHYS_NONE);
		EXPECT_RC(fi_close(&mr->fid), 0);
		munmap(a5, RING_LEN);
		close(fd5);
	}

	/*
	 * The registration's check asks the kernel whether its mapping is
	 * still the one registered (PROCMAP_QUERY on a /proc/self/maps
	 * descriptor, /proc/self/maps, /proc/self/pagemap). Here no question
	 * can be answered: no descriptor can be opened (RLIMIT_NOFILE 3), and
	 * a /proc/self/maps descriptor the provider keeps is pointed, for the
	 * moment, at the maps of a process that has exited (PROCMAP_QUERY:
	 * ESRCH). Then the answer comes back and the check works again: an
	 * munmap revokes.
	 */
	OXT_GROUP("a check the kernel cannot answer now (no file descriptors left, PROCMAP_QUERY failing) revokes nothing; answered again, munmap revokes");
	{
		struct oxt_procmap_query q;
		struct rlimit old, none;
		uint32_t s0;
		int fd4, mfd, dfd = -1, saved = -1;
		char *r4 = perf_ring(DATA_PAGES, NULL, &fd4);

		REQUIRE(r4, "perf ring");
		REQUIRE_RC(reg(e.domain, r4 + PS, DATA_LEN, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mr), 0);
		in = query(ops, mr);
		s0 = in.phys_state;
		EXPECT(s0 == OXMR_PHYS_AVAILABLE || s0 == OXMR_PHYS_UNAVAILABLE,
		       "a fresh device registration's state is %u", s0);
		/* (after a query: a descriptor the check keeps is open now) */
		mfd = own_maps_fd();
		if (mfd >= 0) {
			dfd = dead_maps_fd();
			REQUIRE(dfd >= 0, "open the maps of an exited child: %s", strerror(errno));
			memset(&q, 0, sizeof q);
			q.size = sizeof q;
			q.query_addr = (uintptr_t)(r4 + PS);
			EXPECT(ioctl(dfd, OXT_PROCMAP_QUERY, &q) == -1 && errno == ESRCH,
			       "PROCMAP_QUERY on an exited process's maps: expected ESRCH, got %s",
			       strerror(errno));
			saved = dup(mfd);
			REQUIRE(saved >= 0 && dup2(dfd, mfd) == mfd, "dup2: %s", strerror(errno));
		} else {
			printf("# no /proc/self/maps descriptor kept open: the check opens its files, and none can be opened\n");
		}
		REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
		none = old;
		none.rlim_cur = 3; /* no new fd: /proc/self/{maps,pagemap} cannot be opened */
		REQUIRE(setrlimit(RLIMIT_NOFILE, &none) == 0, "setrlimit");
		EXPECT(open("/proc/self/maps", O_RDONLY) < 0 && errno == EMFILE,
		       "/proc/self/maps could still be opened");
		in = query(ops, mr);
		REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit back");
		if (mfd >= 0) {
			REQUIRE(dup2(saved, mfd) == mfd, "dup2 back: %s", strerror(errno));
			close(saved);
			close(dfd);
		}
		EXPECT(in.phys_state != OXMR_PHYS_REVOKED, "revoked while the kernel could not answer");
		EXPECT_EQ(in.phys_state, s0);
		in = query(ops, mr);
		EXPECT_EQ(in.phys_state, s0);
		munmap(r4, RING_LEN);
		in = query(ops, mr);
		EXPECT_EQ(in.phys_state, OXMR_PHYS_REVOKED);
		EXPECT_RC(fi_close(&mr->fid), 0);
		close(fd4);
	}

	if (env_opt_in) {
		OXT_GROUP("FI_OXMR_MR_PHYS_FALLBACK=1: the ring registers without the flag; heap is pinned, never PHYSICAL");
		EXPECT_RC(reg(e.domain, ring + PS, DATA_LEN, FI_REMOTE_READ, 0, &mr), 0);
		if (mr) {
			EXPECT_EQ(query(ops, mr).class_, OXMR_MR_CLASS_PHYSICAL);
			EXPECT_RC(fi_close(&mr->fid), 0);
		}
		char *heap = malloc(64 << 10);
		memset(heap, 1, 64 << 10);
		EXPECT_RC(reg(e.domain, heap, 64 << 10, FI_REMOTE_READ, 0, &mr), 0);
		if (mr) {
			EXPECT(query(ops, mr).class_ != OXMR_MR_CLASS_PHYSICAL, "heap memory registered by physical address");
			EXPECT_RC(fi_close(&mr->fid), 0);
		}
		free(heap);
	}
	munmap(ring, RING_LEN);
	close(fd);
	oxt_close(&e);
}

/* ---- part 2: two processes ---- */

struct keys {
	uint64_t tail_key, tail_addr, data_key, data_addr, nb_key, nb_addr;
	uint64_t bench_key, bench_addr, bnb_key, bnb_addr;
};

static uint64_t base(struct oxt_side *s, const void *p)
{
	return s->virt ? (uint64_t)(uintptr_t)p : 0;
}

/* One completion for either context within 10 s; its error code. */
static int wait_any(struct oxt_side *s, void *a, void *b)
{
	struct fi_cq_tagged_entry ent;
	double until = oxt_now_ms() + 10000;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(s->cq, &ent, 1);
		if (n == 1) {
			EXPECT(ent.op_context == a || ent.op_context == b, "completion for another operation");
			return 0;
		}
		if (n == -FI_EAVAIL) {
			void *ctx;
			int rc = OXT_READERR(s->cq, &ctx);

			if (rc > 0)
				EXPECT(ctx == a || ctx == b, "error completion for another operation");
			return rc;
		}
	}
	EXPECT(0, "no completion within 10 s");
	return -1;
}


/* The owner: serves RMA and answers the child's commands. */
static int owner(int sock, bool bench)
{
	struct oxt_side s;
	struct keys k = { 0 };
	struct fid_mr *mtail, *mdata, *mnb, *mtail2 = NULL, *mbench = NULL, *mbnb = NULL;
	struct fi_context sctx[2], rctx;
	unsigned char *nb = malloc(DATA_LEN), *bnb = NULL, exp[TAIL_LEN];
	char *ring, *bring = NULL;
	int fd, bfd = -1, done = 0;

	oxt_side_open(&s, sock);
	ring = perf_ring(DATA_PAGES, NULL, &fd);
	REQUIRE(ring, "perf_event_open");
	memset(ring + TAIL_OFF, 0, TAIL_LEN);
	oxt_fill(nb, DATA_LEN, 4);
	REQUIRE_RC(reg(s.e.domain, ring + TAIL_OFF, TAIL_LEN, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_RECV | FI_SEND,
		       OXMR_MR_PHYS_FALLBACK, &mtail), 0);
	REQUIRE_RC(reg(s.e.domain, ring + PS, DATA_LEN, FI_REMOTE_READ | FI_SEND, OXMR_MR_PHYS_FALLBACK, &mdata), 0);
	REQUIRE_RC(reg(s.e.domain, nb, DATA_LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, &mnb), 0);
	k.tail_key = fi_mr_key(mtail);
	k.tail_addr = base(&s, ring + TAIL_OFF);
	k.data_key = fi_mr_key(mdata);
	k.data_addr = base(&s, ring + PS);
	k.nb_key = fi_mr_key(mnb);
	k.nb_addr = base(&s, nb);
	if (bench) {
		bring = perf_ring(BENCH_PAGES, NULL, &bfd);
		bnb = malloc(BENCH_PAGES * PS);
		memset(bnb, 7, BENCH_PAGES * PS);
		REQUIRE_RC(reg(s.e.domain, bring + PS, BENCH_PAGES * PS, FI_REMOTE_READ, OXMR_MR_PHYS_FALLBACK, &mbench), 0);
		REQUIRE_RC(reg(s.e.domain, bnb, BENCH_PAGES * PS, FI_REMOTE_READ, 0, &mbnb), 0);
		k.bench_key = fi_mr_key(mbench);
		k.bench_addr = base(&s, bring + PS);
		k.bnb_key = fi_mr_key(mbnb);
		k.bnb_addr = base(&s, bnb);
	}
	REQUIRE(write(sock, &k, sizeof k) == sizeof k, "socketpair write");
	/* The owner's view of its data pages, read through its own mapping. */
	REQUIRE(write(sock, ring + PS, DATA_LEN) == (ssize_t)DATA_LEN, "snapshot write");

	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		struct fi_cq_tagged_entry ent;
		void *ectx;
		char c;

		ssize_t got = fi_cq_read(s.cq, &ent, 1);

		if (got == -FI_EAVAIL) {
			int rc = OXT_READERR(s.cq, &ectx);

			if (rc > 0)
				EXPECT(0, "owner: error completion %d (%s)", rc, fi_strerror(rc));
		} else if (got == 1 && ent.op_context == &rctx) {
			done |= 4;
		} else if (got == 1 && (ent.op_context == &sctx[0] || ent.op_context == &sctx[1])) {
			done |= ent.op_context == &sctx[0] ? 1 : 2;
		}
		if (poll(&p, 1, 0) != 1)
			continue;
		c = oxt_get(sock);
		switch (c) {
		case 'T': /* the tail as written by the child, through our mapping */
			oxt_fill(exp, TAIL_LEN, 1);
			oxt_fill(exp + 5, 13, 2);
			oxt_put(sock, memcmp(ring + TAIL_OFF, exp, TAIL_LEN) == 0 ? 'y' : 'n');
			break;
		case 'S': /* send from device memory: large, then eager at an odd offset */
			EXPECT_RC(fi_send(s.ep, ring + PS, DATA_LEN, fi_mr_desc(mdata), s.peer, &sctx[0]), 0);
			EXPECT_RC(fi_send(s.ep, ring + 2 * PS + 1, 2000, fi_mr_desc(mdata), s.peer, &sctx[1]), 0);
			break;
		case 's':
			/* (The receiver's completions can come before our
			 * sends' answers are read: progress a while first.) */
			for (double until = oxt_now_ms() + 5000; (done & 3) != 3 && oxt_now_ms() < until;) {
				got = fi_cq_read(s.cq, &ent, 1);
				if (got == 1 && (ent.op_context == &sctx[0] || ent.op_context == &sctx[1]))
					done |= ent.op_context == &sctx[0] ? 1 : 2;
				else if (got == 1 && ent.op_context == &rctx)
					done |= 4;
				else if (got == -FI_EAVAIL)
					break;
			}
			oxt_put(sock, (done & 3) == 3 ? 'y' : 'n');
			break;
		case 'R': /* receive into device memory */
			EXPECT_RC(fi_recv(s.ep, ring + TAIL_OFF, TAIL_LEN, fi_mr_desc(mtail), FI_ADDR_UNSPEC, &rctx), 0);
			oxt_put(sock, 'r');
			break;
		case 'V':
			oxt_put(sock, (done & 4) && oxt_same((unsigned char *)ring + TAIL_OFF, TAIL_LEN, 3) ? 'y' : 'n');
			break;
		case 'U': /* unmap the ring: its keys must die with it */
			munmap(ring, RING_LEN);
			close(fd);
			oxt_put(sock, 'u');
			break;
		case 'M': { /* a new ring at the same address, and a registration of its tail */
			char *r2 = perf_ring(DATA_PAGES, ring, &fd);
			EXPECT(r2 == ring, "new ring at the old address");
			memset(ring + TAIL_OFF, 0, TAIL_LEN);
			EXPECT_RC(reg(s.e.domain, ring + TAIL_OFF, TAIL_LEN, FI_REMOTE_WRITE | FI_REMOTE_READ,
				      OXMR_MR_PHYS_FALLBACK, &mtail2), 0);
			k.tail_key = mtail2 ? fi_mr_key(mtail2) : 0;
			REQUIRE(write(sock, &k.tail_key, 8) == 8, "socketpair write");
			break;
		}
		case 'A': /* anonymous memory replaces the ring, no access between */
			REQUIRE(mmap(ring, RING_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
				     -1, 0) == ring, "mmap over the ring");
			close(fd);
			oxt_put(sock, 'a');
			break;
		case 'Z': { /* nothing was written into the anonymous memory */
			bool zero = true;
			for (size_t i = 0; i < RING_LEN; i++)
				zero &= ring[i] == 0;
			oxt_put(sock, zero ? 'y' : 'n');
			break;
		}
		case 'D':
			goto out;
		default:
			EXPECT(0, "owner: unknown command %c", c);
			goto out;
		}
	}
out:
	fi_close(&mtail->fid);
	fi_close(&mdata->fid);
	fi_close(&mnb->fid);
	if (mtail2)
		fi_close(&mtail2->fid);
	if (mbench) {
		fi_close(&mbench->fid);
		fi_close(&mbnb->fid);
		munmap(bring, (1 + BENCH_PAGES) * PS);
		close(bfd);
	}
	oxt_side_close(&s);
	return 0;
}

static double bench_read(struct oxt_side *s, void *buf, void *desc, uint64_t addr, uint64_t key, size_t size, int iters)
{
	struct fi_context ctx;
	double t0 = oxt_now_ms();

	for (int i = 0; i < iters; i++) {
		if (fi_read(s->ep, buf, size, desc, s->peer, addr, key, &ctx) != 0 || oxt_wait_one(s, &ctx) != 0) {
			EXPECT(0, "bench read failed");
			return 0;
		}
	}
	return (double)size * iters / ((oxt_now_ms() - t0) / 1000.0) / 1e6;
}

static void driver(int sock, int bench_iters)
{
	struct oxt_side s;
	struct keys k;
	struct fi_context ctx, ctx2;
	unsigned char *snap = malloc(DATA_LEN), *buf = malloc(DATA_LEN), *small = malloc(4096), exp[TAIL_LEN];
	struct fid_mr *mt, *md;
	char *mine;
	int fd;
	uint64_t old_tail;

	oxt_side_open(&s, sock);
	REQUIRE(read(sock, &k, sizeof k) == sizeof k, "keys");
	for (size_t got = 0; got < DATA_LEN;) {
		ssize_t n = read(sock, snap + got, DATA_LEN - got);
		REQUIRE(n > 0, "snapshot read");
		got += (size_t)n;
	}

	OXT_GROUP("RMA write into the device tail (whole, then 13 unaligned bytes), read back");
	oxt_fill(exp, TAIL_LEN, 1);
	EXPECT_RC(fi_write(s.ep, exp, TAIL_LEN, NULL, s.peer, k.tail_addr, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_fill(small, 13, 2);
	EXPECT_RC(fi_write(s.ep, small, 13, NULL, s.peer, k.tail_addr + 5, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_fill(exp + 5, 13, 2);
	memset(buf, 0, TAIL_LEN);
	EXPECT_RC(fi_read(s.ep, buf, TAIL_LEN, NULL, s.peer, k.tail_addr, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(memcmp(buf, exp, TAIL_LEN) == 0, "read back differs from what was written");
	oxt_put(sock, 'T');
	EXPECT(oxt_get(sock) == 'y', "the owner sees other bytes through its mapping");

	OXT_GROUP("RMA read of the data pages (64 KiB, and 100 bytes at an odd offset) equals the owner's view");
	memset(buf, 0, DATA_LEN);
	EXPECT_RC(fi_read(s.ep, buf, DATA_LEN, NULL, s.peer, k.data_addr, k.data_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(memcmp(buf, snap, DATA_LEN) == 0, "data pages differ");
	EXPECT(snap[0] != 0 || snap[8] != 0, "the ring holds no records (nothing compared)");
	EXPECT_RC(fi_read(s.ep, small, 100, NULL, s.peer, k.data_addr + PS + 3, k.data_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(memcmp(small, snap + PS + 3, 100) == 0, "small read differs");

	OXT_GROUP("sends from device memory (64 KiB and 2000 bytes) arrive intact");
	memset(buf, 0, DATA_LEN);
	EXPECT_RC(fi_recv(s.ep, buf, DATA_LEN, NULL, FI_ADDR_UNSPEC, &ctx), 0);
	EXPECT_RC(fi_recv(s.ep, small, 2000, NULL, FI_ADDR_UNSPEC, &ctx2), 0);
	oxt_put(sock, 'S');
	/* The eager message completes first: the large one is pushed by its owner. */
	EXPECT_RC(wait_any(&s, &ctx, &ctx2), 0);
	EXPECT_RC(wait_any(&s, &ctx, &ctx2), 0);
	EXPECT(memcmp(buf, snap, DATA_LEN) == 0, "large send differs");
	EXPECT(memcmp(small, snap + PS + 1, 2000) == 0, "eager send differs");
	oxt_put(sock, 's');
	EXPECT(oxt_get(sock) == 'y', "the owner's sends did not complete");

	OXT_GROUP("a receive into device memory");
	oxt_put(sock, 'R');
	EXPECT(oxt_get(sock) == 'r', "owner not ready");
	oxt_fill(buf, TAIL_LEN, 3);
	EXPECT_RC(fi_send(s.ep, buf, TAIL_LEN, NULL, s.peer, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_sleep_ms(50);
	oxt_put(sock, 'V');
	EXPECT(oxt_get(sock) == 'y', "the owner's device memory does not hold the message");

	OXT_GROUP("the peer's own device memory as local RMA buffers");
	mine = perf_ring(DATA_PAGES, NULL, &fd);
	REQUIRE(mine, "perf ring");
	REQUIRE_RC(reg(s.e.domain, mine + TAIL_OFF, TAIL_LEN, FI_READ | FI_WRITE, OXMR_MR_PHYS_FALLBACK, &mt), 0);
	REQUIRE_RC(reg(s.e.domain, mine + PS, DATA_LEN, FI_WRITE, OXMR_MR_PHYS_FALLBACK, &md), 0);
	EXPECT_RC(fi_read(s.ep, mine + TAIL_OFF, TAIL_LEN, fi_mr_desc(mt), s.peer, k.nb_addr + 1, k.nb_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	oxt_fill(exp, TAIL_LEN + 1, 4);
	EXPECT(memcmp(mine + TAIL_OFF, exp + 1, TAIL_LEN - 1) == 0, "read into my device memory differs");
	EXPECT_RC(fi_write(s.ep, mine + PS, DATA_LEN, fi_mr_desc(md), s.peer, k.nb_addr, k.nb_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	memset(buf, 0, DATA_LEN);
	EXPECT_RC(fi_read(s.ep, buf, DATA_LEN, NULL, s.peer, k.nb_addr, k.nb_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(memcmp(buf, mine + PS, DATA_LEN) == 0, "write from my device memory differs");
	fi_close(&mt->fid);
	fi_close(&md->fid);
	munmap(mine, RING_LEN);
	close(fd);

	if (bench_iters > 0) {
		unsigned char *bb = malloc(BENCH_PAGES * PS);
		static const size_t sizes[] = { 4096, 65536, BENCH_PAGES * PS };
		for (size_t i = 0; i < 3; i++) {
			size_t sz = sizes[i];
			int it = sz >= (1 << 20) ? bench_iters / 8 + 1 : bench_iters;
			double dev = bench_read(&s, bb, NULL, k.bench_addr, k.bench_key, sz, it);
			double ord = bench_read(&s, bb, NULL, k.bnb_addr, k.bnb_key, sz, it);
			printf("# bench rma_read %7zu B: perf-ring data pages %9.1f MB/s, ordinary memory %9.1f MB/s, ratio %.2f\n",
			       sz, dev, ord, ord > 0 ? dev / ord : 0);
		}
		free(bb);
	}

	OXT_GROUP("after munmap the old keys are refused (FI_EACCES)");
	oxt_put(sock, 'U');
	EXPECT(oxt_get(sock) == 'u', "owner did not unmap");
	EXPECT_RC(fi_read(s.ep, buf, 100, NULL, s.peer, k.data_addr, k.data_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);
	EXPECT_RC(fi_write(s.ep, small, 100, NULL, s.peer, k.tail_addr, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);

	OXT_GROUP("a new ring at the same address: the old key stays rejected, the new registration works");
	old_tail = k.tail_key;
	oxt_put(sock, 'M');
	REQUIRE(read(sock, &k.tail_key, 8) == 8, "new key");
	EXPECT(k.tail_key != old_tail, "the new registration reused the old key");
	EXPECT_RC(fi_write(s.ep, small, 100, NULL, s.peer, k.tail_addr, old_tail, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);
	oxt_fill(small, 100, 5);
	EXPECT_RC(fi_write(s.ep, small, 100, NULL, s.peer, k.tail_addr, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);

	OXT_GROUP("anonymous memory replaces the ring: the key is rejected and nothing is written into it");
	oxt_put(sock, 'A');
	EXPECT(oxt_get(sock) == 'a', "owner did not replace the mapping");
	EXPECT_RC(fi_write(s.ep, small, 100, NULL, s.peer, k.tail_addr, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);
	EXPECT_RC(fi_read(s.ep, buf, 100, NULL, s.peer, k.tail_addr, k.tail_key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), FI_EACCES);
	oxt_put(sock, 'Z');
	EXPECT(oxt_get(sock) == 'y', "bytes were written into the memory that replaced the ring");

	oxt_put(sock, 'D');
	oxt_side_close(&s);
}

int main(int argc, char **argv)
{
	int sv[2], status, fd, iters;
	const char *b = getenv("OXT_PHYS_BENCH");
	char *probe;
	pid_t pid;

	(void)argc;
	setenv("FI_LOG_LEVEL", "warn", 0);
	oxt_init(argv[0]);
	iters = b ? atoi(b) : 0;
	env_opt_in = getenv("FI_OXMR_MR_PHYS_FALLBACK") && atoi(getenv("FI_OXMR_MR_PHYS_FALLBACK"));
	probe = perf_ring(DATA_PAGES, NULL, &fd);
	if (!probe)
		oxt_skip_all("perf_event_open(SW_DUMMY) failed (%s): no PFN-mapped memory to test with",
			     strerror(errno));
	munmap(probe, RING_LEN);
	close(fd);

	part1();
	oxt_group_end();

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		/* The owner reports its own checks only. */
		oxt_reset_counts();
		oxt_prog = "mr_phys[owner]";
		OXT_GROUP("the owner's side: its device memory served, its sends and receive");
		exit(owner(sv[1], iters > 0) || oxt_done());
	}
	close(sv[1]);
	driver(sv[0], iters);
	waitpid(pid, &status, 0);
	OXT_GROUP("the owner process");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "owner failed (status %d)", status);
	return oxt_done();
}
