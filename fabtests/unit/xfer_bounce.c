/*
 * Transfers from and into memory that process_vm_readv/writev cannot reach.
 *
 * The parent's buffers live in memfd_secret memory (unpinnable, invisible to
 * CMA: the kernel answers EFAULT). oxmr must then move the bytes through the
 * owner: the receiver (or RMA target) asks the process that owns the memory
 * to push it in chunks through the shared-memory queue. Checked for a large
 * send (RTS path), an RMA write whose source is secret memory, and an RMA
 * read whose destination is secret memory, and for four RMA writes from
 * secret memory that reach the target together (a run it would copy with
 * one process_vm_readv: the kernel refuses it, and each write falls back to
 * its owner's push). The child is an ordinary process with ordinary buffers;
 * it reports its own checks in its exit status, which the parent checks.
 * Skipped (exit 77, with the reason) where memfd_secret is unavailable.
 */
#include "oxt.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef SYS_memfd_secret
#define SYS_memfd_secret 447
#endif

#define MSG (1UL << 20)
#define RMA (64UL << 10)
#define QUEUED 4

static int child(int sock)
{
	struct oxt_side s;
	struct fid_mr *mr;
	struct fi_context rctx;
	unsigned char *rbuf = malloc(MSG), *tbuf = malloc(3 * RMA);
	uint64_t info[2];
	char done = 0;
	struct fi_cq_tagged_entry ent;

	/* The child reports its own checks (its exit status), not the parent's. */
	oxt_reset_counts();
	oxt_prog = "xfer_bounce[child]";
	OXT_GROUP("the child's side: its receive of the 1 MiB send, serving the parent's RMA");
	REQUIRE(rbuf && tbuf, "malloc");
	oxt_side_open(&s, sock);
	oxt_fill(tbuf + RMA, RMA, 3);
	memset(tbuf + 2 * RMA, 0, RMA);
	REQUIRE_RC(fi_mr_reg(s.e.domain, tbuf, 3 * RMA, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), 0);
	info[0] = fi_mr_key(mr);
	/* The address peers name byte 0 with: virtual under FI_MR_VIRT_ADDR, else 0. */
	info[1] = s.virt ? (uint64_t)(uintptr_t)tbuf : 0;
	REQUIRE(write(sock, info, sizeof info) == sizeof info, "socketpair write");
	REQUIRE_RC(fi_recv(s.ep, rbuf, MSG, NULL, FI_ADDR_UNSPEC, &rctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &rctx), 0);
	done = oxt_same(rbuf, MSG, 1) ? 'y' : 'n';
	REQUIRE(write(sock, &done, 1) == 1, "socketpair write");
	/* No progress for a while: the parent's queued writes arrive together. */
	usleep(300 * 1000);
	/* Serve the parent's RMA until it says it is done. */
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		void *ectx;

		if (fi_cq_read(s.cq, &ent, 1) == -FI_EAVAIL) {
			int rc = OXT_READERR(s.cq, &ectx);

			if (rc > 0)
				EXPECT(0, "error completion at the target: %s", fi_strerror(rc));
		}
		if (poll(&p, 1, 0) == 1)
			break;
	}
	REQUIRE(read(sock, &done, 1) == 1, "socketpair read");
	done = oxt_same(tbuf, RMA, 2) && oxt_same(tbuf + 2 * RMA, RMA, 4) ? 'y' : 'n';
	REQUIRE(write(sock, &done, 1) == 1, "socketpair write");
	EXPECT_RC(fi_close(&mr->fid), 0);
	oxt_side_close(&s);
	free(rbuf);
	free(tbuf);
	return oxt_done();
}

int main(int argc, char **argv)
{
	int sock, fd, status;
	unsigned char *sec;
	struct oxt_side s;
	struct fi_context ctx;
	uint64_t info[2];
	char ok;
	pid_t pid;

	oxt_init(argv[0]);
	(void)argc;
	fd = (int)syscall(SYS_memfd_secret, 0);
	if (fd < 0)
		oxt_skip_all("memfd_secret(2) is unavailable (%s): no memory that process_vm_readv cannot reach to test with",
			     strerror(errno));
	REQUIRE(ftruncate(fd, MSG) == 0, "ftruncate secret memory");
	sec = mmap(NULL, MSG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(sec != MAP_FAILED, "mmap secret memory");
	pid = oxt_fork(child, &sock);
	oxt_side_open(&s, sock);
	REQUIRE(read(sock, info, sizeof info) == sizeof info, "socketpair read");

	OXT_GROUP("1 MiB send from secret memory reaches the peer (pushed by its owner)");
	oxt_fill(sec, MSG, 1);
	EXPECT_RC(fi_send(s.ep, sec, MSG, NULL, s.peer, &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	REQUIRE(read(sock, &ok, 1) == 1, "socketpair read");
	EXPECT(ok == 'y', "the receiver got different bytes");

	OXT_GROUP("4 RMA writes of 16 KiB from secret memory, queued at the target together");
	{
		struct fi_context qctx[QUEUED];
		size_t part = RMA / QUEUED;

		oxt_fill(sec, RMA, 4);
		for (int i = 0; i < QUEUED; i++)
			EXPECT_RC(fi_write(s.ep, sec + i * part, part, NULL, s.peer,
					   info[1] + 2 * RMA + i * part, info[0], &qctx[i]),
				  0);
		for (int i = 0; i < QUEUED; i++) {
			struct fi_cq_tagged_entry e;
			double end = oxt_now_ms() + 10000;
			ssize_t n;

			while ((n = fi_cq_read(s.cq, &e, 1)) == -FI_EAGAIN && oxt_now_ms() < end)
				;
			EXPECT(n == 1, "queued write completion %d of %d: fi_cq_read gave %zd", i + 1,
			       QUEUED, n);
			if (n != 1)
				break;
		}
	}

	OXT_GROUP("RMA write of 64 KiB whose source is secret memory");
	oxt_fill(sec, RMA, 2);
	EXPECT_RC(fi_write(s.ep, sec, RMA, NULL, s.peer, info[1], info[0], &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);

	OXT_GROUP("RMA read of 64 KiB into secret memory");
	memset(sec, 0, RMA);
	EXPECT_RC(fi_read(s.ep, sec, RMA, NULL, s.peer, info[1] + RMA, info[0], &ctx), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(oxt_same(sec, RMA, 3), "the read brought different bytes");

	ok = 'd';
	REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
	REQUIRE(read(sock, &ok, 1) == 1, "socketpair read");
	OXT_GROUP("the target holds the written bytes");
	EXPECT(ok == 'y', "the target's region has different bytes");
	OXT_GROUP("the child's checks passed (its exit status)");
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child exit status 0x%x (its failures are printed above as xfer_bounce[child])", status);
	oxt_side_close(&s);
	return oxt_done();
}
