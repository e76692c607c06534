/*
 * Peers that go away in ways the process-liveness check alone cannot see,
 * or in the middle of a transfer that travels through the queue
 * (docs/wire.md, "Peers come and go").
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
 *     receive fails with FI_EIO within seconds. Skipped where
 *     memfd_secret is unavailable.
 *  5. A peer that stops reading its queue holds up only the answers owed
 *     to it: S fills A's queue, then owes A an ACK (which must wait), and
 *     B's rendezvous send to S still completes.
 *  6. An initiator that closes its endpoint with an RMA read and an RMA
 *     write outstanding: when the target gets to them it copies nothing
 *     (the read's buffer, reused by then, is not written; the write's
 *     bytes do not land) and keeps serving others.
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

struct ep {
	struct oxt_env e;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	char name[64];
};

/* An endpoint on 127.0.0.1 (`port` 0: an ephemeral one) with a CQ and AV. */
static void ep_open(struct ep *x, uint16_t port)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	char service[16];
	size_t len = sizeof x->name;

	memset(x, 0, sizeof *x);
	snprintf(service, sizeof service, "%u", port);
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", port ? service : NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	if (info->next) {
		fi_freeinfo(info->next);
		info->next = NULL;
	}
	x->e.info = info;
	REQUIRE_RC(fi_fabric(info->fabric_attr, &x->e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(x->e.fabric, info, &x->e.domain, NULL), 0);
	REQUIRE_RC(fi_cq_open(x->e.domain, &ca, &x->cq, NULL), 0);
	REQUIRE_RC(fi_av_open(x->e.domain, &aa, &x->av, NULL), 0);
	REQUIRE_RC(fi_endpoint(x->e.domain, info, &x->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(x->ep), 0);
	REQUIRE_RC(fi_getname(&x->ep->fid, x->name, &len), 0);
}

static void ep_close(struct ep *x)
{
	EXPECT_RC(fi_close(&x->ep->fid), 0);
	EXPECT_RC(fi_close(&x->av->fid), 0);
	EXPECT_RC(fi_close(&x->cq->fid), 0);
	oxt_close(&x->e);
}

static fi_addr_t insert(struct ep *x, const struct ep *peer)
{
	fi_addr_t a = FI_ADDR_NOTAVAIL;

	REQUIRE_RC(fi_av_insert(x->av, peer->name, 1, &a, 0, NULL), 1);
	return a;
}

/* The next completion of `cq` within `ms`: 0 success, a positive FI_E*
 * code for an error completion (its context in *ctx), -1 none. */
static int next_completion(struct fid_cq *cq, int ms, void **ctx)
{
	struct fi_cq_tagged_entry ent;
	struct fi_cq_err_entry err = { 0 };
	double until = oxt_now_ms() + ms;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(cq, &ent, 1);

		if (n == 1) {
			*ctx = ent.op_context;
			return 0;
		}
		if (n == -FI_EAVAIL) {
			fi_cq_readerr(cq, &err, 0);
			*ctx = err.op_context;
			return err.err;
		}
	}
	return -1;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 13 + seed);
}

static bool same(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 13 + seed))
			return false;
	return true;
}

static void closed_peers(void)
{
	struct ep x, y, z;
	struct fi_context c1, c2, c3;
	unsigned char *buf = malloc(BIG), *rbuf = malloc(BIG);
	fi_addr_t x_to_y, z_to_y;
	struct sockaddr_in y_addr;
	void *ctx = NULL;
	double t0;
	int rc;

	REQUIRE(buf && rbuf, "malloc");
	ep_open(&x, 0);
	ep_open(&y, 0);
	memcpy(&y_addr, y.name, sizeof y_addr);
	x_to_y = insert(&x, &y);

	OXT_GROUP("1. an endpoint closed in a live process: the pending send to it fails with FI_ECONNABORTED, the next send finds nobody");
	fill(buf, BIG, 1);
	/* Y posts no receive: the RTS waits at Y unanswered. */
	REQUIRE_RC(fi_send(x.ep, buf, BIG, NULL, x_to_y, &c1), 0);
	rc = next_completion(x.cq, 50, &ctx);
	EXPECT(rc == -1, "the send completed (%d) before Y received anything", rc);
	ep_close(&y);
	t0 = oxt_now_ms();
	rc = next_completion(x.cq, 5000, &ctx);
	EXPECT(rc == FI_ECONNABORTED && ctx == &c1,
	       "the send to the closed endpoint: completion %d (%s), want FI_ECONNABORTED", rc,
	       rc > 0 ? fi_strerror(rc) : "none within 5 s");
	if (rc == FI_ECONNABORTED)
		printf("# the pending send failed %.0f ms after its peer closed\n", oxt_now_ms() - t0);
	EXPECT_RC(fi_send(x.ep, buf, 64, NULL, x_to_y, &c2), -FI_EHOSTUNREACH);

	OXT_GROUP("2. a new endpoint at the closed one's address gets what is sent there next");
	ep_open(&y, ntohs(y_addr.sin_port));
	EXPECT(!memcmp(&y_addr, y.name, sizeof y_addr), "the new endpoint has another address");
	fill(buf, 64, 2);
	memset(rbuf, 0, 64);
	REQUIRE_RC(fi_recv(y.ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, &c3), 0);
	EXPECT_RC(fi_send(x.ep, buf, 64, NULL, x_to_y, &c2), 0);
	rc = next_completion(x.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c2, "the send to the new endpoint: completion %d", rc);
	rc = next_completion(y.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c3, "the new endpoint's receive: completion %d", rc);
	EXPECT(same(rbuf, 64, 2), "the new endpoint received other bytes");

	OXT_GROUP("3. a send left unexpected by an endpoint that closes: the receive posted later fails with FI_EIO");
	ep_open(&z, 0);
	z_to_y = insert(&z, &y);
	fill(buf, BIG, 3);
	REQUIRE_RC(fi_send(z.ep, buf, BIG, NULL, z_to_y, &c1), 0);
	/* Y takes the RTS in as unexpected. */
	rc = next_completion(y.cq, 100, &ctx);
	EXPECT(rc == -1, "Y completed something (%d) with no receive posted", rc);
	ep_close(&z);
	/* Z's buffer now belongs to something else. */
	fill(buf, BIG, 4);
	memset(rbuf, 0, BIG);
	REQUIRE_RC(fi_recv(y.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c3), 0);
	rc = next_completion(y.cq, 5000, &ctx);
	EXPECT(rc == FI_EIO && ctx == &c3, "the receive of the closed endpoint's send: completion %d (%s), want FI_EIO",
	       rc, rc > 0 ? fi_strerror(rc) : "none");
	EXPECT(!same(rbuf, BIG, 4), "the receive copied from the closed endpoint's buffer");
	/* Y still works. */
	fill(buf, BIG, 5);
	REQUIRE_RC(fi_recv(y.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c3), 0);
	EXPECT_RC(fi_send(x.ep, buf, BIG, NULL, x_to_y, &c2), 0);
	{
		int got = 0;
		double until = oxt_now_ms() + 5000;

		while (got < 2 && oxt_now_ms() < until) {
			if (next_completion(x.cq, 1, &ctx) == 0 && ctx == &c2)
				got++;
			if (next_completion(y.cq, 1, &ctx) == 0 && ctx == &c3)
				got++;
		}
		EXPECT(got == 2, "X -> Y after the close: %d of 2 completions", got);
		EXPECT(same(rbuf, BIG, 5), "Y received other bytes");
	}
	ep_close(&y);
	ep_close(&x);
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
	fill(sec, PULLED, 6);
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
	int sv[2], fd, status, rc;
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
		printf("# skipped: memfd_secret unavailable (%s)\n", strerror(errno));
		return;
	}
	close(fd);
	rbuf = malloc(PULLED);
	REQUIRE(rbuf, "malloc");
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		exit(pulled_sender(sv[1]));
	}
	close(sv[1]);
	oxt_side_open(&s, sv[0]);
	REQUIRE(read(sv[0], &m, 1) == 1, "socketpair read");
	REQUIRE_RC(fi_recv(s.ep, rbuf, PULLED, NULL, FI_ADDR_UNSPEC, &c), 0);
	/* Match the RTS (process_vm_readv: EFAULT) and ask for the bytes. */
	rc = next_completion(s.cq, 50, &ctx);
	EXPECT(rc == -1, "the receive completed (%d) before the sender pushed anything", rc);
	REQUIRE(write(sv[0], "g", 1) == 1, "socketpair write");
	/* The sender pushes for 30 ms; we take what arrives. */
	while (read(sv[0], &m, 1) != 1)
		;
	rc = next_completion(s.cq, 50, &ctx);
	EXPECT(rc == -1, "the receive completed (%d) with the sender stopped part way", rc);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	t0 = oxt_now_ms();
	rc = next_completion(s.cq, 5000, &ctx);
	EXPECT(rc == FI_EIO && ctx == &c, "the receive from the killed sender: completion %d (%s), want FI_EIO", rc,
	       rc > 0 ? fi_strerror(rc) : "none within 5 s");
	if (rc == FI_EIO)
		printf("# the receive failed %.0f ms after its sender was killed\n", oxt_now_ms() - t0);
	oxt_side_close(&s);
	free(rbuf);
}

static void stalled_peer(void)
{
	struct ep s, a, b;
	struct fi_context c[4];
	unsigned char *buf = malloc(BIG), *rbuf = malloc(BIG), small[64] = { 0 };
	fi_addr_t s_to_a, a_to_s, b_to_s;
	void *ctx = NULL;
	int rc, sent = 0, got;
	double until;

	OXT_GROUP("5. a peer that stops reading its queue holds up only the answers owed to it");
	REQUIRE(buf && rbuf, "malloc");
	ep_open(&s, 0);
	ep_open(&a, 0);
	ep_open(&b, 0);
	s_to_a = insert(&s, &a);
	a_to_s = insert(&a, &s);
	b_to_s = insert(&b, &s);
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
	fill(buf, BIG, 7);
	REQUIRE_RC(fi_send(a.ep, buf, BIG, NULL, a_to_s, &c[0]), 0);
	REQUIRE_RC(fi_recv(s.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c[1]), 0);
	rc = next_completion(s.cq, 5000, &ctx);
	EXPECT(rc == 0 && ctx == &c[1], "S's receive of A's send: completion %d", rc);
	/* B's rendezvous send to S: S's answers to B must not wait behind A's. */
	fill(buf, BIG, 8);
	REQUIRE_RC(fi_recv(s.ep, rbuf, BIG, NULL, FI_ADDR_UNSPEC, &c[2]), 0);
	REQUIRE_RC(fi_send(b.ep, buf, BIG, NULL, b_to_s, &c[3]), 0);
	got = 0;
	until = oxt_now_ms() + 5000;
	while (got < 2 && oxt_now_ms() < until) {
		if (next_completion(s.cq, 1, &ctx) == 0 && ctx == &c[2])
			got++;
		if (next_completion(b.cq, 1, &ctx) == 0 && ctx == &c[3])
			got++;
	}
	EXPECT(got == 2, "B -> S while A's queue is full: %d of 2 completions", got);
	EXPECT(same(rbuf, BIG, 8), "S received other bytes from B");
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
	ep_close(&b);
	ep_close(&a);
	ep_close(&s);
	free(buf);
	free(rbuf);
}

static void closed_initiator(void)
{
	struct ep x, t;
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
	ep_open(&x, 0);
	ep_open(&t, 0);
	x_to_t = insert(&x, &t);
	fill(reg, 2 * n, 9);
	REQUIRE_RC(fi_mr_reg(t.e.domain, reg, 2 * n, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), 0);
	base = (t.e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)reg : 0;
	/* T runs no progress yet: both wait in its queue. */
	memset(buf, 0, 2 * n);
	REQUIRE_RC(fi_read(x.ep, buf, n, NULL, x_to_t, base, fi_mr_key(mr), &c[0]), 0);
	fill(buf + n, n, 10);
	REQUIRE_RC(fi_write(x.ep, buf + n, n, NULL, x_to_t, base + n, fi_mr_key(mr), &c[1]), 0);
	ep_close(&x);
	/* X's buffers now hold something else. */
	fill(buf, 2 * n, 11);
	rc = next_completion(t.cq, 200, &ctx);
	EXPECT(rc == -1, "the target completed something (%d)", rc);
	EXPECT(same(buf, 2 * n, 11), "the target wrote into the closed initiator's buffer");
	EXPECT(same(reg, 2 * n, 9), "the closed initiator's write landed at the target");
	/* T still serves a live initiator. */
	ep_open(&x, 0);
	x_to_t = insert(&x, &t);
	REQUIRE_RC(fi_read(x.ep, buf, n, NULL, x_to_t, base, fi_mr_key(mr), &c[2]), 0);
	{
		double until = oxt_now_ms() + 5000;

		rc = -1;
		while (rc == -1 && oxt_now_ms() < until) {
			void *tctx;

			(void)next_completion(t.cq, 1, &tctx); /* T's progress */
			rc = next_completion(x.cq, 1, &ctx);
		}
	}
	EXPECT(rc == 0 && ctx == &c[2], "a read after the close: completion %d", rc);
	EXPECT(same(buf, n, 9), "the read after the close brought other bytes");
	EXPECT_RC(fi_close(&mr->fid), 0);
	ep_close(&x);
	ep_close(&t);
	free(reg);
	free(buf);
}

int main(int argc, char **argv)
{
	oxt_init(argv[0]);
	(void)argc;
	closed_peers();
	killed_mid_pull();
	stalled_peer();
	closed_initiator();
	return oxt_done();
}
