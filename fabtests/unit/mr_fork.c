/*
 * mr_fork: a registration survives fork() in the parent.
 *
 * A 1 MiB buffer filled with 'A' is registered (FI_REMOTE_READ |
 * FI_REMOTE_WRITE); the child writes 'B' over its copy and exits; the
 * parent's buffer must still hold 'A', and it must still be the memory that
 * was registered.
 *
 * What the kernel gives, by pin mode:
 *
 * - uring (default): the pages are pinned with FOLL_PIN|FOLL_LONGTERM
 *   (io_uring fixed buffers). At fork, the kernel copies pinned anonymous
 *   pages for the child instead of sharing them copy-on-write (MMF_HAS_PINNED
 *   + page_maybe_dma_pinned, mm/memory.c copy_present_page), so the parent
 *   keeps the very pages it pinned: same PFN before and after the fork and
 *   after the parent writes again, and the child's page is another one.
 *
 * - FI_OXMR_MR_PIN=mlock: mlock is not inherited (the child's VMAs lose
 *   VM_LOCKED) and locked pages are shared copy-on-write like any others.
 *   The child's write copies the child's page; the parent keeps its data.
 *   Whether the parent's next write copies its page too depends on whether
 *   the kernel still counts the page as shared at that moment, so only the
 *   content is checked: the PFNs are printed, not compared.
 *
 * PFNs come from /proc/self/pagemap, which shows them to root only
 * (CAP_SYS_ADMIN); otherwise they read as 0 and the PFN checks are skipped.
 *
 * Then the registration is used after the fork, as a peer would use it: a
 * second child, a process of its own with its own endpoint, writes 'D'
 * over the first 64 KiB through RMA and reads the last 4 KiB back; the
 * parent's endpoint (in the registration's domain) serves both. The write
 * must land in the parent's buffer (what the parent reads), the read must
 * return the parent's bytes ('C'), not the first child's.
 */
#include "oxt.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <rdma/fi_ext_oxmr.h>

#define LEN (1UL << 20)
#define K64 (64UL << 10)
#define TAIL 4096UL

/* The PFN behind `addr` (0: not present, or hidden from this user). */
static uint64_t pfn_of(const void *addr)
{
	long ps = sysconf(_SC_PAGESIZE);
	uint64_t e = 0;
	off_t off = (off_t)((uintptr_t)addr / (uintptr_t)ps) * 8;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0)
		return 0;
	if (pread(fd, &e, sizeof e, off) != (ssize_t)sizeof e)
		e = 0;
	close(fd);
	if (!(e & (1ULL << 63))) /* not present */
		return 0;
	return e & ((1ULL << 55) - 1);
}

/* Offset of the first byte of `buf` that is not `c`, or -1. */
static long first_not(const char *buf, size_t len, char c)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (buf[i] != c)
			return (long)i;
	return -1;
}

/*
 * The second child: an RMA initiator in a process of its own. Writes 'D'
 * over [addr, addr + 64 KiB) of the parent's registration `key` and reads
 * its last 4 KiB back. Exit status: 0 all done; 10 the write was not
 * posted, 11 it completed in error (or not at all), 12/13 the same for the
 * read, 14 the read did not bring 'C'.
 */
static int rma_child(const char *parent_name, uint64_t key, uint64_t addr)
{
	static char src[K64], back[TAIL];
	struct oxt_ep x;
	fi_addr_t peer = FI_ADDR_NOTAVAIL;
	void *ctx = NULL;
	int w = 0, r = 0;

	alarm(20);
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	REQUIRE_RC(fi_av_insert(x.av, parent_name, 1, &peer, 0, NULL), 1);
	memset(src, 'D', sizeof src);
	if (fi_write(x.ep, src, K64, NULL, peer, addr, key, &w) != 0)
		return 10;
	if (oxt_next_completion(x.cq, 10000, &ctx) != 0 || ctx != &w)
		return 11;
	if (fi_read(x.ep, back, TAIL, NULL, peer, addr + LEN - TAIL, key, &r) != 0)
		return 12;
	if (oxt_next_completion(x.cq, 10000, &ctx) != 0 || ctx != &r)
		return 13;
	if (first_not(back, TAIL, 'C') >= 0)
		return 14;
	oxt_ep_close(&x);
	return 0;
}

int main(int argc, char **argv)
{
	/* This program checks registration itself: closing an MR must unpin at
	 * once, so the lazy-deregistration cache is off here (mr_cache.c tests
	 * it). Set before fi_getinfo, which reads the variables. */
	setenv("FI_OXMR_MR_CACHE_ENABLE", "0", 1);
	const char *pm = getenv("FI_OXMR_MR_PIN");
	bool mlock_mode = pm && !strcmp(pm, "mlock");
	uint32_t cls = mlock_mode ? OXMR_MR_CLASS_LOCKED : OXMR_MR_CLASS_PINNED;
	struct fi_info *hints, *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_mr *mr = NULL;
	struct oxmr_mr_ops *ops = NULL;
	struct oxmr_mr_info q;
	uint64_t pfn0, pfn1, pfn2, child_pfn = 0;
	int pipefd[2], status = 0;
	bool pfns;
	char *buf;
	pid_t pid;

	(void)argc;
	oxt_init(argv[0]);
	REQUIRE(!pm || !*pm || mlock_mode || !strcmp(pm, "uring"),
		"mr_fork runs with FI_OXMR_MR_PIN unset, uring or mlock (got %s)",
		pm);
	printf("# %s: FI_OXMR_MR_PIN=%s\n", oxt_prog, mlock_mode ? "mlock" : "uring");

	hints = oxt_hints(FI_EP_RDM);
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_LOCAL;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints,
			      &info),
		   0);
	fi_freeinfo(hints);
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	REQUIRE_RC(fi_domain(fabric, info, &domain, NULL), 0);
	REQUIRE_RC(fi_open_ops(&domain->fid, OXMR_MR_OPS_NAME, 0, (void **)&ops,
			       NULL),
		   0);

	OXT_GROUP("register 1 MiB of 'A' for remote read and write");
	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(buf != MAP_FAILED, "mmap: %s", strerror(errno));
	memset(buf, 'A', LEN);
	REQUIRE_RC(fi_mr_reg(domain, buf, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE,
			     0, 0, 0, &mr, NULL),
		   0);
	memset(&q, 0, sizeof q);
	q.size = sizeof q;
	EXPECT_RC(ops->query(mr, &q), 0);
	EXPECT_EQ(q.class_, cls);
	EXPECT_EQ(q.bytes_pinned, LEN);
	pfn0 = pfn_of(buf);
	pfns = pfn0 != 0;
	if (!pfns)
		printf("# %s: /proc/self/pagemap shows no PFNs (not root?): PFN checks skipped\n",
		       oxt_prog);

	OXT_GROUP("fork: the child writes 'B' over its copy and exits 0");
	REQUIRE(pipe(pipefd) == 0, "pipe: %s", strerror(errno));
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		uint64_t p = pfn_of(buf);

		if (write(pipefd[1], &p, sizeof p) != (ssize_t)sizeof p)
			_exit(3);
		memset(buf, 'B', LEN);
		_exit(first_not(buf, LEN, 'B') < 0 ? 0 : 4);
	}
	close(pipefd[1]);
	if (read(pipefd[0], &child_pfn, sizeof child_pfn) !=
	    (ssize_t)sizeof child_pfn)
		child_pfn = 0;
	close(pipefd[0]);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s",
		strerror(errno));
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child: status %#x (exit 3: pipe write failed; 4: its own write did not stick)",
	       status);

	OXT_GROUP("after the fork the parent's registered buffer still holds 'A'");
	{
		long at = first_not(buf, LEN, 'A');

		EXPECT(at < 0, "byte %ld is '%c', expected 'A'", at,
		       at < 0 ? 'A' : buf[at]);
	}

	pfn1 = pfn_of(buf);
	oxt_group_end();
	if (pfns)
		printf("# %s: PFN of page 0: registered %#" PRIx64
		       ", child before its write %#" PRIx64
		       ", parent after fork %#" PRIx64 "\n",
		       oxt_prog, pfn0, child_pfn, pfn1);
	if (pfns && !mlock_mode) {
		OXT_GROUP("uring: the parent keeps the pinned page, the child got a copy");
		EXPECT_EQ(pfn1, pfn0);
		EXPECT(child_pfn != pfn0,
		       "the child mapped the parent's pinned page %#" PRIx64
		       " (shared, not copied at fork)",
		       pfn0);
	}

	OXT_GROUP("the parent writes 'C': its buffer holds 'C', the registration still holds");
	memset(buf, 'C', LEN);
	{
		long at = first_not(buf, LEN, 'C');

		EXPECT(at < 0, "byte %ld is '%c', expected 'C'", at,
		       at < 0 ? 'C' : buf[at]);
	}
	pfn2 = pfn_of(buf);
	if (pfns)
		printf("# %s: PFN of page 0 after the parent's write: %#" PRIx64 "\n",
		       oxt_prog, pfn2);
	if (pfns && !mlock_mode)
		EXPECT_EQ(pfn2, pfn0);
	memset(&q, 0, sizeof q);
	q.size = sizeof q;
	EXPECT_RC(ops->query(mr, &q), 0);
	EXPECT_EQ(q.class_, cls);
	EXPECT_EQ(q.bytes_pinned, LEN);

	OXT_GROUP("after the fork, another process's RMA: its write of 'D' lands in the parent's registration, its read returns the parent's 'C'");
	{
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
		struct fi_av_attr aa = { .type = FI_AV_TABLE };
		struct fi_cq_tagged_entry ent;
		struct fid_ep *ep = NULL;
		struct fid_cq *cq = NULL;
		struct fid_av *av = NULL;
		char name[64] = { 0 };
		size_t nlen = sizeof name;
		uint64_t key = fi_mr_key(mr);
		double until;
		bool exited = false;

		REQUIRE_RC(fi_cq_open(domain, &ca, &cq, NULL), 0);
		REQUIRE_RC(fi_av_open(domain, &aa, &av, NULL), 0);
		REQUIRE_RC(fi_endpoint(domain, info, &ep, NULL), 0);
		REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
		REQUIRE_RC(fi_enable(ep), 0);
		REQUIRE_RC(fi_getname(&ep->fid, name, &nlen), 0);
		pid = fork();
		REQUIRE(pid >= 0, "fork: %s", strerror(errno));
		if (pid == 0)
			_exit(rma_child(name, key, (uint64_t)(uintptr_t)buf));
		/* (Reading our CQ runs our endpoint's progress: the target's
		 * side of both accesses.) */
		until = oxt_now_ms() + 20000;
		while (!exited && oxt_now_ms() < until) {
			(void)fi_cq_read(cq, &ent, 1);
			exited = waitpid(pid, &status, WNOHANG) == pid;
		}
		if (!exited) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
		}
		EXPECT(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		       "the initiator: %s, status %#x (exit 10/11: the write not posted / not completed, 12/13: the read, 14: the read did not bring 'C')",
		       exited ? "exited" : "still running after 20 s", status);
		{
			long at = first_not(buf, K64, 'D');
			long rest = first_not(buf + K64, LEN - K64, 'C');

			EXPECT(at < 0, "byte %ld of the written 64 KiB is '%c', expected 'D'", at,
			       at < 0 ? 'D' : buf[at]);
			EXPECT(rest < 0, "byte %ld past the write is '%c', expected 'C'",
			       rest < 0 ? 0 : rest + (long)K64, rest < 0 ? 'C' : buf[K64 + rest]);
		}
		if (pfns && !mlock_mode)
			EXPECT_EQ(pfn_of(buf), pfn0);
		EXPECT_RC(fi_close(&ep->fid), 0);
		EXPECT_RC(fi_close(&av->fid), 0);
		EXPECT_RC(fi_close(&cq->fid), 0);
	}

	OXT_GROUP("close the registration, domain and fabric");
	EXPECT_RC(fi_close(&mr->fid), 0);
	EXPECT_RC(fi_close(&domain->fid), 0);
	EXPECT_RC(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	munmap(buf, LEN);
	return oxt_done();
}
