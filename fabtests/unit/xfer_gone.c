/*
 * Peers that go away in ways the process-liveness check alone cannot see,
 * or in the middle of a transfer that travels through the queue
 * (docs/wire-shm.md, "Peers that go away").
 *
 *  1. An endpoint closed by a process that lives on (one process, two
 *     endpoints X and Y): X's pending 1 MiB send to Y fails with
 *     FI_ECONNABORTED within seconds instead of waiting for an answer that
 *     never comes; a send to Y's address then fails at once
 *     (-FI_EHOSTUNREACH: nobody is there).
 *  2. A new endpoint opened at the closed one's address receives what X
 *     sends next (X forgets the closed queue and finds the new one).
 *  3. The other way round: Z's 1 MiB send is unexpected at Y when Z
 *     closes; the receive Y posts afterwards fails with FI_EIO instead of
 *     copying from buffers Z no longer owns, and Y keeps working.
 *  4. A sender killed while it pushes a send from memory CMA cannot reach
 *     (memfd_secret; the receiver pulls it through the queue): the
 *     receive fails with FI_EIO within seconds. Skipped (with the
 *     reason) where memfd_secret is unavailable.
 *  5. A peer that stops reading its queue holds up only the answers owed
 *     to it: S fills A's queue, then owes A an ACK (which must wait), and
 *     B's rendezvous send to S still completes.
 *  6. An initiator that closes its endpoint with an RMA read and an RMA
 *     write outstanding: when the target gets to them it copies nothing
 *     (the read's buffer, reused by then, is not written; the write's
 *     bytes do not land) and keeps serving others.
 *  7. Memory that goes away under an open registration: the target unmaps
 *     a registered buffer and maps new memory at the same address; a
 *     write with the old key is refused (FI_EACCES) and the new
 *     memory keeps its bytes; registering the new memory works.
 *  8. A peer that answers and then closes: the answer, still unread in our
 *     queue when we find the peer closed, completes the send it answers
 *     (it is not failed with FI_ECONNABORTED).
 *  9. As 7 for a registration of two iovs (fi_mr_regv: never held by the
 *     registration cache, watched while open all the same): replacing its
 *     second piece revokes it. (fabtests/run.sh also runs this program with
 *     FI_OXMR_MR_CACHE_EXPLICIT=0, where 7's registration is uncached too.)
 */
#include "oxt.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef SYS_memfd_secret
#define SYS_memfd_secret 447
#endif

#define BIG (1UL << 20)
#define PULLED (64UL << 20)

/* The completion of the initiator `x`'s operation whose target `t` runs
 * progress only here (both in this process): as oxt_next_completion on
 * x's CQ, within 5 s, with t's CQ read in between. */
static int completion_served_by(struct oxt_ep *x, struct oxt_ep *t, void **ctx)
{
	double until = oxt_now_ms() + 5000;
	int rc = -1;

	while (rc == -1 && oxt_now_ms() < until) {
		void *tctx;

		(void)oxt_next_completion(t->cq, 1, &tctx); /* t's progress */
		rc = oxt_next_completion(x->cq, 1, ctx);
	}
	return rc;
}

static void closed_peers(void)
{
	struct oxt_ep x, y, z;
	struct fi_context c1, c2, c3;
	unsigned char *buf = malloc(BIG), *rbuf = malloc(BIG);
	fi_addr_t x_to_y, z_to_y;
	struct sockaddr_in y_addr;
	void *ctx = NULL;
	double t0;
	int rc;

	REQUIRE(buf && rbuf, "malloc");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_ep_open(&y, 0, FI_WAIT_NONE);
	memcpy(&y_addr, y.name, sizeof y_addr);
	x_to_y = oxt_ep_insert(&x, &y);

	OXT_GROUP("1. an endpoint closed in a live process: the pending send to it fails with FI_ECONNABORTED, the next send finds nobody");
	oxt_fill(buf, BIG, 1);
	/* Y posts no receive: the RTS waits at Y unanswered. */
	REQUIRE_RC(fi_send(x.ep, buf, BIG, NULL, x_to_y, &c1), 0);
	rc = oxt_next_completion(x.cq, 50, &ctx);
	EXPECT(rc == -1, "the send completed (%d) before Y received anything", rc);
	oxt_ep_close(&y);
	t0 = oxt_now_ms();
	rc = oxt_next_completion(x.cq, 5000, &ctx);
	EXPECT(rc == FI_ECONNABORTED && ctx == &c1,
	       "the send to the closed endpoint: completion %d (%s), want FI_ECONNABORTED", rc,
	       rc > 0 ? fi_strerror(rc) : "none within 5 s");
	if (rc == FI_ECONNABORTED)
		printf("# the pending send failed %.0f ms after its peer closed\n", oxt_now_ms() - t0);
	EXPECT_RC(fi_send(x.ep, buf, 64, NULL, x_to_y, &c2), -FI_EHOSTUNREACH);

	OXT_GROUP("2. a new endpoint at the closed one's address gets what is sent there next");
	oxt_ep_open(&y, ntohs(y_addr.sin_port), FI_WAIT_NONE);
	EXPECT(!memcmp(&y_addr, y.name, sizeof y_addr), "the new endpoint has another address");
	oxt_fill(buf, 64, 2);
	memset(rbuf, 0, 64);
	REQUIRE_RC(fi_recv(y.ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, &c3), 0);
	EXPECT_RC(fi_send(x.ep, buf, 64, NULL, x_to_y, &c2), 0);
	rc = oxt_next_completion(x.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c2, "the send to the new endpoint: completion %d", rc);
	rc = oxt_next_completion(y.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c3, "the new endpoint's receive: completion %d", rc);
	EXPECT(oxt_same(rbuf, 64, 2), "the new endpoint received other bytes");

	OXT_GROUP("3. a send left unexpected by an endpoint that closes: the receive posted later fails with FI_EIO");
	oxt_ep_open(&z, 0, FI_WAIT_NONE);
	z_to_y = oxt_ep_insert(&z, &y);
	oxt_fill(buf, BIG, 3);
	REQUIRE_RC(fi_send(z.ep, buf, BIG, NULL, z_to_y, &c1), 0);
	/* Y takes the RTS in as unexpected. */
	rc = oxt_next_completion(y.cq, 100, &ctx);
	EXPECT(rc == -1, "Y completed something (%d) with no receive posted", rc);
	oxt_ep_close(&z);
	/* Z's buffer now belongs to something else. */
	oxt_fill(buf, BIG, 4);
	memset(rbuf, 0, BIG);
	REQUIRE_RC(fi_recv(y.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c3), 0);
	rc = oxt_next_completion(y.cq, 5000, &ctx);
	EXPECT(rc == FI_EIO && ctx == &c3, "the receive of the closed endpoint's send: completion %d (%s), want FI_EIO",
	       rc, rc > 0 ? fi_strerror(rc) : "none");
	EXPECT(!oxt_same(rbuf, BIG, 4), "the receive copied from the closed endpoint's buffer");
	/* Y still works. */
	oxt_fill(buf, BIG, 5);
	REQUIRE_RC(fi_recv(y.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c3), 0);
	EXPECT_RC(fi_send(x.ep, buf, BIG, NULL, x_to_y, &c2), 0);
	{
		int got = 0;
		double until = oxt_now_ms() + 5000;

		while (got < 2 && oxt_now_ms() < until) {
			if (oxt_next_completion(x.cq, 1, &ctx) == 0 && ctx == &c2)
				got++;
			if (oxt_next_completion(y.cq, 1, &ctx) == 0 && ctx == &c3)
				got++;
		}
		EXPECT(got == 2, "X -> Y after the close: %d of 2 completions", got);
		EXPECT(oxt_same(rbuf, BIG, 5), "Y received other bytes");
	}
	oxt_ep_close(&y);
	oxt_ep_close(&x);
	free(buf);
	free(rbuf);
}

/* The child: sends PULLED bytes from secret memory, runs progress for a
 * moment (pushing some of it), then stops and waits to be killed. */
static int pulled_sender(int sock)
{
	struct oxt_side s;
	struct fi_context c;
	struct fi_cq_tagged_entry ent;
	unsigned char *sec;
	char go;
	double until;
	int fd = (int)syscall(SYS_memfd_secret, 0);

	REQUIRE(fd >= 0, "memfd_secret in the child");
	REQUIRE(ftruncate(fd, PULLED) == 0, "ftruncate secret memory");
	sec = mmap(NULL, PULLED, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REQUIRE(sec != MAP_FAILED, "mmap secret memory");
	oxt_side_open(&s, sock);
	oxt_fill(sec, PULLED, 6);
	REQUIRE_RC(fi_send(s.ep, sec, PULLED, NULL, s.peer, &c), 0);
	REQUIRE(write(sock, "s", 1) == 1, "socketpair write");
	REQUIRE(read(sock, &go, 1) == 1, "socketpair read");
	until = oxt_now_ms() + 30;
	while (oxt_now_ms() < until)
		fi_cq_read(s.cq, &ent, 1);
	REQUIRE(write(sock, "p", 1) == 1, "socketpair write");
	for (;;)
		pause();
	return 0;
}

static void killed_mid_pull(void)
{
	int sock, fd, status, rc;
	unsigned char *rbuf;
	struct oxt_side s;
	struct fi_context c;
	void *ctx = NULL;
	char m;
	pid_t pid;
	double t0;

	OXT_GROUP("4. a sender killed while it pushes a send from secret memory: the receive fails with FI_EIO");
	fd = (int)syscall(SYS_memfd_secret, 0);
	if (fd < 0) {
		oxt_skip("memfd_secret(2) is unavailable (%s): no memory that process_vm_readv cannot reach",
			 strerror(errno));
		return;
	}
	close(fd);
	rbuf = malloc(PULLED);
	REQUIRE(rbuf, "malloc");
	pid = oxt_fork(pulled_sender, &sock);
	oxt_side_open(&s, sock);
	REQUIRE(read(sock, &m, 1) == 1, "socketpair read");
	REQUIRE_RC(fi_recv(s.ep, rbuf, PULLED, NULL, FI_ADDR_UNSPEC, &c), 0);
	/* Match the RTS (process_vm_readv: EFAULT) and ask for the bytes. */
	rc = oxt_next_completion(s.cq, 50, &ctx);
	EXPECT(rc == -1, "the receive completed (%d) before the sender pushed anything", rc);
	REQUIRE(write(sock, "g", 1) == 1, "socketpair write");
	/* The sender pushes for 30 ms; we take what arrives. */
	while (read(sock, &m, 1) != 1)
		;
	rc = oxt_next_completion(s.cq, 50, &ctx);
	EXPECT(rc == -1, "the receive completed (%d) with the sender stopped part way", rc);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	t0 = oxt_now_ms();
	rc = oxt_next_completion(s.cq, 5000, &ctx);
	EXPECT(rc == FI_EIO && ctx == &c, "the receive from the killed sender: completion %d (%s), want FI_EIO", rc,
	       rc > 0 ? fi_strerror(rc) : "none within 5 s");
	if (rc == FI_EIO)
		printf("# the receive failed %.0f ms after its sender was killed\n", oxt_now_ms() - t0);
	oxt_side_close(&s);
	free(rbuf);
}

static void stalled_peer(void)
{
	struct oxt_ep s, a, b;
	struct fi_context c[4];
	unsigned char *buf = malloc(BIG), *rbuf = malloc(BIG), small[64] = { 0 };
	fi_addr_t s_to_a, a_to_s, b_to_s;
	void *ctx = NULL;
	int rc, sent = 0, got;
	double until;

	OXT_GROUP("5. a peer that stops reading its queue holds up only the answers owed to it");
	REQUIRE(buf && rbuf, "malloc");
	oxt_ep_open(&s, 0, FI_WAIT_NONE);
	oxt_ep_open(&a, 0, FI_WAIT_NONE);
	oxt_ep_open(&b, 0, FI_WAIT_NONE);
	s_to_a = oxt_ep_insert(&s, &a);
	a_to_s = oxt_ep_insert(&a, &s);
	b_to_s = oxt_ep_insert(&b, &s);
	/* A never runs progress from here on: S fills its queue. */
	while (sent < 100000) {
		ssize_t r = fi_inject(s.ep, small, sizeof small, s_to_a);

		if (r == -FI_EAGAIN)
			break;
		REQUIRE(r == 0, "inject to A: %zd", r);
		sent++;
	}
	EXPECT(sent > 0 && sent < 100000, "A's queue took %d injects and never filled", sent);
	/* A's rendezvous send to S: S copies it and owes A an ACK that cannot
	 * be delivered while A's queue is full. */
	oxt_fill(buf, BIG, 7);
	REQUIRE_RC(fi_send(a.ep, buf, BIG, NULL, a_to_s, &c[0]), 0);
	REQUIRE_RC(fi_recv(s.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c[1]), 0);
	rc = oxt_next_completion(s.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c[1], "S's receive of A's send: completion %d", rc);
	/* B's rendezvous send to S: S's answers to B must not wait behind A's. */
	oxt_fill(buf, BIG, 8);
	REQUIRE_RC(fi_recv(s.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c[2]), 0);
	REQUIRE_RC(fi_send(b.ep, buf, BIG, NULL, b_to_s, &c[3]), 0);
	got = 0;
	until = oxt_now_ms() + 5000;
	while (got < 2 && oxt_now_ms() < until) {
		if (oxt_next_completion(s.cq, 1, &ctx) == 0 && ctx == &c[2])
			got++;
		if (oxt_next_completion(b.cq, 1, &ctx) == 0 && ctx == &c[3])
			got++;
	}
	EXPECT(got == 2, "B -> S while A's queue is full: %d of 2 completions", got);
	EXPECT(oxt_same(rbuf, BIG, 8), "S received other bytes from B");
	/* A reads its queue again: its send completes (the ACK was kept). */
	got = 0;
	until = oxt_now_ms() + 5000;
	while (!got && oxt_now_ms() < until) {
		struct fi_cq_tagged_entry ent;

		fi_cq_read(s.cq, &ent, 1); /* S retries the ACK */
		if (fi_cq_read(a.cq, &ent, 1) == 1 && ent.op_context == &c[0])
			got = 1;
	}
	EXPECT(got, "A's send never completed once A read its queue again");
	oxt_ep_close(&b);
	oxt_ep_close(&a);
	oxt_ep_close(&s);
	free(buf);
	free(rbuf);
}

static void closed_initiator(void)
{
	struct oxt_ep x, t;
	struct fid_mr *mr;
	struct fi_context c[3];
	const size_t n = 64 << 10;
	unsigned char *reg = malloc(2 * n), *buf = malloc(2 * n);
	fi_addr_t x_to_t;
	uint64_t base;
	void *ctx = NULL;
	int rc;

	OXT_GROUP("6. RMA outstanding when the initiator closes: the target copies nothing for it");
	REQUIRE(reg && buf, "malloc");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_ep_open(&t, 0, FI_WAIT_NONE);
	x_to_t = oxt_ep_insert(&x, &t);
	oxt_fill(reg, 2 * n, 9);
	REQUIRE_RC(fi_mr_reg(t.e.domain, reg, 2 * n, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), 0);
	base = (t.e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)reg : 0;
	/* T runs no progress yet: both wait in its queue. */
	memset(buf, 0, 2 * n);
	REQUIRE_RC(fi_read(x.ep, buf, n, NULL, x_to_t, base, fi_mr_key(mr), &c[0]), 0);
	oxt_fill(buf + n, n, 10);
	REQUIRE_RC(fi_write(x.ep, buf + n, n, NULL, x_to_t, base + n, fi_mr_key(mr), &c[1]), 0);
	oxt_ep_close(&x);
	/* X's buffers now hold something else. */
	oxt_fill(buf, 2 * n, 11);
	rc = oxt_next_completion(t.cq, 200, &ctx);
	EXPECT(rc == -1, "the target completed something (%d)", rc);
	EXPECT(oxt_same(buf, 2 * n, 11), "the target wrote into the closed initiator's buffer");
	EXPECT(oxt_same(reg, 2 * n, 9), "the closed initiator's write landed at the target");
	/* T still serves a live initiator. */
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	x_to_t = oxt_ep_insert(&x, &t);
	REQUIRE_RC(fi_read(x.ep, buf, n, NULL, x_to_t, base, fi_mr_key(mr), &c[2]), 0);
	rc = completion_served_by(&x, &t, &ctx);
	EXPECT(rc == 0 && ctx == &c[2], "a read after the close: completion %d", rc);
	EXPECT(oxt_same(buf, n, 9), "the read after the close brought other bytes");
	EXPECT_RC(fi_close(&mr->fid), 0);
	oxt_ep_close(&x);
	oxt_ep_close(&t);
	free(reg);
	free(buf);
}

static void unmapped_under_mr(void)
{
	struct oxt_ep x, t;
	struct fid_mr *mr, *mr2;
	struct fi_context c;
	const size_t n = 64 << 10;
	unsigned char *src = malloc(n), *reg;
	uint64_t base;
	void *ctx = NULL;
	fi_addr_t x_to_t;
	int rc;
	bool virt;

	OXT_GROUP("7. memory unmapped and mapped again under an open registration: the old key is refused");
	REQUIRE(src, "malloc");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_ep_open(&t, 0, FI_WAIT_NONE);
	x_to_t = oxt_ep_insert(&x, &t);
	virt = (t.e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	reg = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(reg != MAP_FAILED, "mmap");
	memset(reg, 0, n);
	REQUIRE_RC(fi_mr_reg(t.e.domain, reg, n, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), 0);
	base = virt ? (uint64_t)(uintptr_t)reg : 0;
	/* A write while the memory is the registered memory lands. */
	oxt_fill(src, n, 12);
	REQUIRE_RC(fi_write(x.ep, src, n, NULL, x_to_t, base, fi_mr_key(mr), &c), 0);
	rc = completion_served_by(&x, &t, &ctx);
	EXPECT(rc == 0 && oxt_same(reg, n, 12), "the first write: completion %d", rc);
	/* The application replaces the memory without closing the MR. */
	REQUIRE(mmap(reg, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == reg,
		"mmap MAP_FIXED");
	memset(reg, 0xAA, n);
	oxt_fill(src, n, 13);
	REQUIRE_RC(fi_write(x.ep, src, n, NULL, x_to_t, base, fi_mr_key(mr), &c), 0);
	rc = completion_served_by(&x, &t, &ctx);
	EXPECT(rc == FI_EACCES, "a write with the key of replaced memory: completion %d (%s), want FI_EACCES",
	       rc, rc > 0 ? fi_strerror(rc) : "none");
	{
		size_t i = oxt_first_not(reg, n, 0xAA);

		EXPECT(i == n, "the new memory changed at byte %zu", i);
	}
	/* Registering the new memory works. */
	REQUIRE_RC(fi_mr_reg(t.e.domain, reg, n, FI_REMOTE_WRITE, 0, 1, 0, &mr2, NULL), 0);
	REQUIRE_RC(fi_write(x.ep, src, n, NULL, x_to_t, base, fi_mr_key(mr2), &c), 0);
	rc = completion_served_by(&x, &t, &ctx);
	EXPECT(rc == 0 && oxt_same(reg, n, 13), "a write to the new registration: completion %d", rc);
	EXPECT_RC(fi_close(&mr2->fid), 0);
	EXPECT_RC(fi_close(&mr->fid), 0);
	oxt_ep_close(&t);
	oxt_ep_close(&x);
	munmap(reg, n);
	free(src);
}

static void answered_then_closed(void)
{
	struct oxt_ep x, y;
	struct fi_context c1, c2, c3;
	unsigned char *buf = malloc(BIG), *rbuf = malloc(BIG);
	fi_addr_t x_to_y;
	void *ctx = NULL;
	int rc;

	OXT_GROUP("8. a peer that answers and then closes: its answer still completes the send");
	REQUIRE(buf && rbuf, "malloc");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_ep_open(&y, 0, FI_WAIT_NONE);
	x_to_y = oxt_ep_insert(&x, &y);
	oxt_fill(buf, BIG, 14);
	REQUIRE_RC(fi_recv(y.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c2), 0);
	REQUIRE_RC(fi_send(x.ep, buf, BIG, NULL, x_to_y, &c1), 0);
	/* Only Y runs progress: it copies, completes and ACKs into X's queue. */
	rc = oxt_next_completion(y.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c2 && oxt_same(rbuf, BIG, 14), "Y's receive: completion %d", rc);
	oxt_ep_close(&y);
	/* X finds Y closed before it reads its queue. */
	EXPECT_RC(fi_send(x.ep, buf, 64, NULL, x_to_y, &c3), -FI_EHOSTUNREACH);
	rc = oxt_next_completion(x.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c1, "the answered send: completion %d (%s), want success", rc,
	       rc > 0 ? fi_strerror(rc) : "none");
	oxt_ep_close(&x);
	free(buf);
	free(rbuf);
}

static void unmapped_under_regv(void)
{
	struct oxt_ep x, t;
	struct fid_mr *mr;
	struct fi_context c;
	const size_t n = 64 << 10;
	unsigned char *src = malloc(n), *a, *b;
	struct iovec iov[2];
	uint64_t base;
	void *ctx = NULL;
	fi_addr_t x_to_t;
	int rc;

	OXT_GROUP("9. two-iov registration (uncached) whose second piece is replaced: the key is refused");
	REQUIRE(src, "malloc");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_ep_open(&t, 0, FI_WAIT_NONE);
	x_to_t = oxt_ep_insert(&x, &t);
	a = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(a != MAP_FAILED && b != MAP_FAILED, "mmap");
	memset(a, 0, n);
	memset(b, 0, n);
	iov[0] = (struct iovec){ a, n };
	iov[1] = (struct iovec){ b, n };
	REQUIRE_RC(fi_mr_regv(t.e.domain, iov, 2, FI_REMOTE_WRITE, 0, 2, 0, &mr, NULL), 0);
	base = (t.e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)a : 0;
	REQUIRE(mmap(b, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == b,
		"mmap MAP_FIXED");
	memset(b, 0xAA, n);
	oxt_fill(src, n, 15);
	REQUIRE_RC(fi_write(x.ep, src, n, NULL, x_to_t, base, fi_mr_key(mr), &c), 0);
	rc = completion_served_by(&x, &t, &ctx);
	EXPECT(rc == FI_EACCES, "a write with the key of a replaced regv: completion %d (%s), want FI_EACCES",
	       rc, rc > 0 ? fi_strerror(rc) : "none");
	{
		size_t i = oxt_first_not(a, n, 0);

		EXPECT(i == n, "the first piece changed at byte %zu", i);
	}
	EXPECT_RC(fi_close(&mr->fid), 0);
	oxt_ep_close(&t);
	oxt_ep_close(&x);
	munmap(a, n);
	munmap(b, n);
	free(src);
}

int main(int argc, char **argv)
{
	oxt_init(argv[0]);
	(void)argc;
	closed_peers();
	killed_mid_pull();
	stalled_peer();
	closed_initiator();
	unmapped_under_mr();
	answered_then_closed();
	unmapped_under_regv();
	return oxt_done();
}
