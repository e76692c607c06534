/*
 * Waiting the ways fi_cq(3) and fi_trywait(3) describe, between two
 * processes, with manual progress (nothing moves until the application reads).
 *
 *  1. A receiver that sleeps in poll() on its CQ's wait fd (FI_WAIT_FD,
 *     FI_GETWAIT), after fi_trywait returned 0 as fi_trywait(3) requires,
 *     wakes for what its peer sends and receives it: an eager message and
 *     a 1 MiB one (rendezvous: the receiver copies it when it runs
 *     progress). The wake-ups come from the arrival (the endpoint's wake
 *     fd in the CQ's; fabtests/unit/wake.c measures them).
 *  2. An RMA target that only calls fi_cq_read(cq, NULL, 0) ("A count
 *     value of 0 may be used to drive progress", fi_cq(3)) serves its
 *     peer's writes.
 *
 * The child prints its own lines as "wait_fd[child]".
 */
#include "oxt.h"

#include <sys/wait.h>

#define BIG (1UL << 20)

/* The peer: on each command byte, send (or write) and complete it. */
static int child(int sock)
{
	struct oxt_ep s;
	fi_addr_t peer;
	unsigned char *buf = malloc(BIG);
	uint64_t rma[2];
	char cmd;
	void *ctx;
	struct fi_context c;
	int rc;

	oxt_init("wait_fd[child]");
	REQUIRE(buf, "malloc");
	oxt_ep_open(&s, 0, FI_WAIT_NONE);
	oxt_exchange(&s, sock, &peer);
	REQUIRE(read(sock, rma, sizeof rma) == sizeof rma, "socketpair read");
	while (read(sock, &cmd, 1) == 1 && cmd != 'q') {
		size_t n = cmd == 'e' ? 64 : BIG;

		usleep(50 * 1000); /* the parent is asleep by now */
		oxt_fill(buf, n, (unsigned)cmd);
		if (cmd == 'w')
			REQUIRE_RC(fi_write(s.ep, buf, n, NULL, peer, rma[0], rma[1], &c), 0);
		else
			REQUIRE_RC(fi_send(s.ep, buf, n, NULL, peer, &c), 0);
		rc = oxt_next_completion(s.cq, 10000, &ctx);
		EXPECT(rc == 0 && ctx == &c, "child: %c: completion %d", cmd, rc);
		REQUIRE(write(sock, rc == 0 ? "y" : "n", 1) == 1, "socketpair write");
	}
	oxt_ep_close(&s);
	free(buf);
	return oxt_done();
}

/* Receive `n` bytes sleeping in poll() between fi_trywait and fi_cq_read. */
static void sleep_until_received(struct oxt_ep *r, int sock, char cmd, size_t n, unsigned char *rbuf)
{
	struct fid *fids[1] = { &r->cq->fid };
	struct fi_context c;
	struct fi_cq_tagged_entry ent;
	int fd = -1, sleeps = 0, got = 0;
	double t0 = oxt_now_ms();
	char ok;

	REQUIRE_RC(fi_control(&r->cq->fid, FI_GETWAIT, &fd), 0);
	memset(rbuf, 0, n);
	REQUIRE_RC(fi_recv(r->ep, rbuf, n, NULL, FI_ADDR_UNSPEC, &c), 0);
	REQUIRE(write(sock, &cmd, 1) == 1, "socketpair write");
	while (!got && oxt_now_ms() - t0 < 10000) {
		int tw = fi_trywait(r->e.fabric, fids, 1);

		EXPECT(tw == 0 || tw == -FI_EAGAIN, "fi_trywait: %d", tw);
		if (tw == 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			/* A timeout here would be the bug: nothing wakes us. */
			REQUIRE(poll(&p, 1, 10000) == 1, "poll on the CQ fd: no wake-up within 10 s");
			sleeps++;
		}
		ssize_t k = fi_cq_read(r->cq, &ent, 1);

		if (k == 1) {
			EXPECT(ent.op_context == &c, "a completion for another operation");
			got = 1;
		} else {
			EXPECT(k == -FI_EAGAIN, "fi_cq_read: %zd", k);
		}
	}
	EXPECT(got, "%zu bytes: no completion in 10 s", n);
	EXPECT(oxt_same(rbuf, n, (unsigned)cmd), "%zu bytes: received other bytes", n);
	REQUIRE(read(sock, &ok, 1) == 1, "socketpair read");
	EXPECT(ok == 'y', "the child's send did not complete");
	printf("# %zu bytes: %d sleeps in poll(), %.1f ms\n", n, sleeps, oxt_now_ms() - t0);
}

int main(int argc, char **argv)
{
	int sock, status;
	pid_t pid;
	struct oxt_ep r;
	fi_addr_t peer;
	unsigned char *rbuf = malloc(BIG);
	struct fid_mr *mr;
	uint64_t rma[2];
	char ok;

	oxt_init(argv[0]);
	(void)argc;
	REQUIRE(rbuf, "malloc");
	pid = oxt_fork(child, &sock);
	oxt_ep_open(&r, 0, FI_WAIT_FD);
	oxt_exchange(&r, sock, &peer);
	REQUIRE_RC(fi_mr_reg(r.e.domain, rbuf, BIG, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), 0);
	rma[0] = (r.e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)rbuf : 0;
	rma[1] = fi_mr_key(mr);
	REQUIRE(write(sock, rma, sizeof rma) == sizeof rma, "socketpair write");

	OXT_GROUP("1. asleep in poll() on the CQ fd after fi_trywait: an eager and a 1 MiB send wake it and arrive");
	sleep_until_received(&r, sock, 'e', 64, rbuf);
	sleep_until_received(&r, sock, 'r', BIG, rbuf);

	OXT_GROUP("2. a target that only calls fi_cq_read(cq, NULL, 0) serves its peer's RMA write");
	memset(rbuf, 0, BIG);
	REQUIRE(write(sock, "w", 1) == 1, "socketpair write");
	{
		struct pollfd p = { .fd = sock, .events = POLLIN };
		double t0 = oxt_now_ms();

		while (poll(&p, 1, 0) == 0 && oxt_now_ms() - t0 < 10000)
			EXPECT_RC(fi_cq_read(r.cq, NULL, 0), -FI_EAGAIN);
		REQUIRE(read(sock, &ok, 1) == 1, "socketpair read");
		EXPECT(ok == 'y', "the child's write did not complete");
		EXPECT(oxt_same(rbuf, BIG, 'w'), "the write's bytes did not land");
	}

	REQUIRE(write(sock, "q", 1) == 1, "socketpair write");
	waitpid(pid, &status, 0);
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
	EXPECT_RC(fi_close(&mr->fid), 0);
	oxt_ep_close(&r);
	free(rbuf);
	return oxt_done();
}
