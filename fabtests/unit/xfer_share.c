/*
 * Shared copies (docs/wire-shm.md): a large same-host transfer is copied by
 * both processes at once, in chunks claimed from a counter in the
 * receiver's queue file. This test makes every send from 64 KiB up a
 * shared copy in 4 KiB chunks (FI_OXMR_SHM_SHARE_MIN/CHUNK, set before
 * libfabric loads oxmr) and checks, with a child process as the sender:
 *
 * 1. a 64 MiB send arrives intact, and the sender's buffer is unchanged;
 * 2. a sender stopped (SIGSTOP) in the middle of the transfer does not
 *    hang the receiver: its fi_cq_read calls keep returning while the
 *    sender is stopped (the receiver waits a few milliseconds at most for
 *    a chunk the sender holds, then leaves the job to later progress), and
 *    after SIGCONT the data arrives intact. When the stop lands between
 *    two chunks, the receiver simply copies the rest itself; both are
 *    correct, and the check is the same;
 * 3. a sender killed (SIGKILL) in the middle of the transfer gives the
 *    receiver a completion (an error, or success with intact data if every
 *    chunk was already copied) within seconds, never a hang;
 * 4. the same with the 64 MiB sent as 8 messages queued at once, so the
 *    receiver pipelines them (a job left open while the next starts): every
 *    receive completes, intact or with an error, within seconds.
 *
 * The transfers use one endpoint pair per child; the parent receives.
 *
 * 0. First, FI_OXMR_SHM_EAGER_MAX (set to 1024 here, also before loading):
 *    a 1024 B send goes inline and completes while the receiver has posted
 *    nothing; a 1025 B send is a rendezvous and completes only once the
 *    receiver has taken it; both arrive intact.
 */
#include "oxt.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define MSG (64UL << 20)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = (i / 8) * 0x9E3779B97F4A7C15ULL + seed;
		memcpy(p + i, &v, 8);
	}
}

/* Whether p[0..n) holds fill()'s pattern for `seed` from byte `at` on. */
static bool same_at(const unsigned char *p, size_t at, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = ((at + i) / 8) * 0x9E3779B97F4A7C15ULL + seed, got;
		memcpy(&got, p + i, 8);
		if (got != v)
			return false;
	}
	return true;
}

static bool same(const unsigned char *p, size_t n, unsigned seed)
{
	return same_at(p, 0, n, seed);
}

/* Group 4 sends the buffer as this many messages, all queued at once. */
#define PARTS 8

/* The sender: send MSG bytes, wait for the completion (helping with the
 * copy while it waits), report whether its buffer is unchanged. */
static int child(int sock, unsigned seed)
{
	struct oxt_side s;
	struct fi_context ctx[PARTS];
	unsigned char *buf = malloc(MSG);
	/* Seed 4: PARTS messages at once (the receiver pipelines them). */
	int parts = seed == 4 ? PARTS : 1;
	char ok;

	REQUIRE(buf, "malloc");
	fill(buf, MSG, seed);
	oxt_side_open(&s, sock);
	REQUIRE(read(sock, &ok, 1) == 1, "socketpair read"); /* receive posted */
	for (int i = 0; i < parts; i++)
		REQUIRE_RC(fi_send(s.ep, buf + i * (MSG / parts), MSG / parts, NULL, s.peer, &ctx[i]), 0);
	for (int i = 0; i < parts; i++)
		EXPECT_RC(oxt_wait_one(&s, &ctx[i]), 0);
	ok = same(buf, MSG, seed) ? 'y' : 'n';
	REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
	REQUIRE(read(sock, &ok, 1) == 1, "socketpair read"); /* the parent is done */
	oxt_side_close(&s);
	free(buf);
	return oxt_done();
}

/* The sender of group 0: a 1024 B and a 1025 B send around the inline
 * limit; tells the parent what completed before it posted anything. */
static int child_eager(int sock)
{
	struct oxt_side s;
	struct fi_context c1, c2;
	struct fi_cq_tagged_entry ent;
	unsigned char b1[1024], b2[1025];
	char r[2];
	double until;
	int n1 = 0, n2 = 0;

	fill(b1, sizeof b1 & ~7UL, 10);
	fill(b2, sizeof b2 & ~7UL, 11);
	oxt_side_open(&s, sock);
	REQUIRE_RC(fi_send(s.ep, b1, sizeof b1, NULL, s.peer, &c1), 0);
	REQUIRE_RC(fi_send(s.ep, b2, sizeof b2, NULL, s.peer, &c2), 0);
	until = oxt_now_ms() + 300;
	while (oxt_now_ms() < until)
		if (fi_cq_read(s.cq, &ent, 1) == 1) {
			n1 += ent.op_context == &c1;
			n2 += ent.op_context == &c2;
		}
	r[0] = n1 == 1 ? 'y' : 'n'; /* the inline send completed alone */
	r[1] = n2 == 0 ? 'y' : 'n'; /* the rendezvous one waited */
	REQUIRE(write(sock, r, 2) == 2, "socketpair write");
	if (n2 == 0)
		EXPECT_RC(oxt_wait_one(&s, &c2), 0);
	REQUIRE(read(sock, r, 1) == 1, "socketpair read"); /* the parent is done */
	oxt_side_close(&s);
	return oxt_done();
}

struct stopper {
	pid_t pid;
	int sig1, sig2;
	int delay1_ms, delay2_ms;
	volatile int phase; /* 1 after sig1, 2 after sig2 */
};

static void *stop_later(void *arg)
{
	struct stopper *st = arg;

	oxt_sleep_ms(st->delay1_ms);
	kill(st->pid, st->sig1);
	__atomic_store_n(&st->phase, 1, __ATOMIC_SEQ_CST);
	if (st->sig2) {
		oxt_sleep_ms(st->delay2_ms);
		kill(st->pid, st->sig2);
	}
	__atomic_store_n(&st->phase, 2, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Start a sender child and its endpoint pair. */
static pid_t spawn(struct oxt_side *s, int *sock, unsigned seed)
{
	int sv[2];
	pid_t pid;

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	fflush(stdout); /* nothing buffered is printed twice */
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		/* The child reports its own checks, not the parent's group. */
		oxt_reset_counts();
		oxt_prog = "xfer_share[sender]";
		OXT_GROUP(seed ? "the sender's side" : "the sender's side of the inline limit");
		close(sv[0]);
		exit(seed ? child(sv[1], seed) : child_eager(sv[1]));
	}
	close(sv[1]);
	oxt_side_open(s, sv[0]);
	*sock = sv[0];
	return pid;
}

/* The end of a group with a live sender: it reports whether its buffer is
 * unchanged, exits cleanly, and the endpoint pair is closed. */
static void finish_sender(struct oxt_side *s, int sock, pid_t pid)
{
	int status;
	char ok;

	REQUIRE(read(sock, &ok, 1) == 1, "socketpair read");
	EXPECT(ok == 'y', "the sender's buffer changed during the send");
	REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
	waitpid(pid, &status, 0);
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sender failed (status %d)", status);
	oxt_side_close(s);
	close(sock);
}

/* The error completion of a receive whose sender was killed. */
static void expect_peer_gone(struct fid_cq *cq)
{
	void *ctx;
	int rc = OXT_READERR(cq, &ctx);

	if (rc > 0)
		EXPECT(rc == FI_EIO || rc == FI_ECONNABORTED,
		       "error completion: expected FI_EIO or FI_ECONNABORTED, got %s", fi_strerror(rc));
}

int main(int argc, char **argv)
{
	unsigned char *rbuf;
	struct fi_context ctx;
	struct fi_cq_tagged_entry ent;
	struct oxt_side s;
	int sock, status;
	char ok = 'p';
	pid_t pid;

	oxt_init(argv[0]);
	(void)argc;
	/* Before libfabric loads oxmr: every send from 64 KiB is shared, in
	 * 4 KiB chunks, so both processes take many chunks. */
	setenv("FI_OXMR_SHM_SHARE_MIN", "65536", 1);
	setenv("FI_OXMR_SHM_SHARE_CHUNK", "4096", 1);
	setenv("FI_OXMR_SHM_EAGER_MAX", "1024", 1);
	rbuf = malloc(MSG);
	REQUIRE(rbuf, "malloc");

	OXT_GROUP("0. FI_OXMR_SHM_EAGER_MAX=1024: a 1024 B send completes before any receive is posted, a 1025 B send waits for its receive");
	{
		struct fi_context c1, c2;
		char r[2];

		pid = spawn(&s, &sock, 0);
		REQUIRE(read(sock, r, 2) == 2, "socketpair read");
		EXPECT(r[0] == 'y', "the 1024 B send did not complete alone (inline)");
		EXPECT(r[1] == 'y', "the 1025 B send completed before its receive was posted (not a rendezvous)");
		memset(rbuf, 0xee, 4096);
		REQUIRE_RC(fi_recv(s.ep, rbuf, 1024, NULL, FI_ADDR_UNSPEC, &c1), 0);
		REQUIRE_RC(fi_recv(s.ep, rbuf + 2048, 1025, NULL, FI_ADDR_UNSPEC, &c2), 0);
		EXPECT_RC(oxt_wait_one(&s, &c1), 0);
		EXPECT_RC(oxt_wait_one(&s, &c2), 0);
		EXPECT(same(rbuf, 1024, 10) && same(rbuf + 2048, 1024, 11), "the receiver got different bytes");
		REQUIRE(write(sock, r, 1) == 1, "socketpair write");
		waitpid(pid, &status, 0);
		EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sender failed (status %d)", status);
		oxt_side_close(&s);
		close(sock);
	}

	OXT_GROUP("1. a 64 MiB send copied by both processes arrives intact; the sender's buffer is unchanged");
	pid = spawn(&s, &sock, 1);
	memset(rbuf, 0xee, MSG);
	REQUIRE_RC(fi_recv(s.ep, rbuf, MSG, NULL, FI_ADDR_UNSPEC, &ctx), 0);
	REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
	EXPECT_RC(oxt_wait_one(&s, &ctx), 0);
	EXPECT(same(rbuf, MSG, 1), "the receiver got different bytes");
	finish_sender(&s, sock, pid);

	OXT_GROUP("2. a sender stopped mid-transfer: the receiver's fi_cq_read keeps returning; after SIGCONT the data arrives intact");
	{
		struct stopper st = { 0 };
		pthread_t t;
		int returns_while_stopped = 0, phase_at_done = -1;
		double until;
		bool done = false;

		pid = spawn(&s, &sock, 2);
		memset(rbuf, 0xee, MSG);
		REQUIRE_RC(fi_recv(s.ep, rbuf, MSG, NULL, FI_ADDR_UNSPEC, &ctx), 0);
		st = (struct stopper){ .pid = pid, .sig1 = SIGSTOP, .sig2 = SIGCONT,
				       .delay1_ms = 2, .delay2_ms = 500 };
		REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
		REQUIRE(pthread_create(&t, NULL, stop_later, &st) == 0, "pthread_create");
		until = oxt_now_ms() + 20000;
		while (!done && oxt_now_ms() < until) {
			ssize_t n = fi_cq_read(s.cq, &ent, 1);
			int phase = __atomic_load_n(&st.phase, __ATOMIC_SEQ_CST);

			if (phase == 1)
				returns_while_stopped++;
			if (n == 1) {
				done = true;
			} else if (n == -FI_EAVAIL) {
				void *ectx;
				int rc = OXT_READERR(s.cq, &ectx);

				if (rc > 0)
					EXPECT(0, "error completion: %s", fi_strerror(rc));
				done = true;
			}
			if (done)
				phase_at_done = phase;
		}
		pthread_join(t, NULL);
		EXPECT(done, "no completion within 20 s");
		/* If the whole transfer finished before the stop, there was
		 * nothing to wait for; otherwise fi_cq_read must have returned
		 * while the sender was stopped. */
		if (phase_at_done == 0)
			printf("# the transfer ended before the stop; nothing to check there\n");
		else
			EXPECT(returns_while_stopped > 0,
			       "fi_cq_read did not return while the sender was stopped");
		EXPECT(same(rbuf, MSG, 2), "the receiver got different bytes");
		finish_sender(&s, sock, pid);
	}

	OXT_GROUP("3. a sender killed mid-transfer: the receive completes (error, or intact data) within seconds");
	{
		struct stopper st = { 0 };
		pthread_t t;
		double until;
		bool done = false;

		pid = spawn(&s, &sock, 3);
		memset(rbuf, 0xee, MSG);
		REQUIRE_RC(fi_recv(s.ep, rbuf, MSG, NULL, FI_ADDR_UNSPEC, &ctx), 0);
		st = (struct stopper){ .pid = pid, .sig1 = SIGKILL, .delay1_ms = 2 };
		REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
		REQUIRE(pthread_create(&t, NULL, stop_later, &st) == 0, "pthread_create");
		until = oxt_now_ms() + 20000;
		while (!done && oxt_now_ms() < until) {
			ssize_t n = fi_cq_read(s.cq, &ent, 1);

			if (n == 1) {
				EXPECT(same(rbuf, MSG, 3),
				       "a successful receive from the killed sender has different bytes");
				done = true;
			} else if (n == -FI_EAVAIL) {
				expect_peer_gone(s.cq);
				done = true;
			}
		}
		pthread_join(t, NULL);
		EXPECT(done, "no completion within 20 s of the sender's death");
		waitpid(pid, &status, 0);
		EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		       "the sender was to be killed (status %d)", status);
		oxt_side_close(&s);
		close(sock);
	}

	OXT_GROUP("4. a sender killed while 8 shared receives are queued (pipelined jobs): every receive completes (error, or intact data) within seconds");
	{
		struct fi_context rctx[PARTS];
		struct stopper st = { 0 };
		pthread_t t;
		double until;
		int done = 0, good = 0, failed = 0;

		pid = spawn(&s, &sock, 4);
		memset(rbuf, 0xee, MSG);
		for (int i = 0; i < PARTS; i++)
			REQUIRE_RC(fi_recv(s.ep, rbuf + i * (MSG / PARTS), MSG / PARTS, NULL, FI_ADDR_UNSPEC,
					   &rctx[i]),
				   0);
		st = (struct stopper){ .pid = pid, .sig1 = SIGKILL, .delay1_ms = 5 };
		REQUIRE(write(sock, &ok, 1) == 1, "socketpair write");
		REQUIRE(pthread_create(&t, NULL, stop_later, &st) == 0, "pthread_create");
		until = oxt_now_ms() + 20000;
		while (done < PARTS && oxt_now_ms() < until) {
			ssize_t n = fi_cq_read(s.cq, &ent, 1);

			if (n == 1) {
				int i = (int)((struct fi_context *)ent.op_context - rctx);

				EXPECT(i >= 0 && i < PARTS, "a completion for an unknown receive");
				if (i >= 0 && i < PARTS)
					EXPECT(same_at(rbuf + i * (MSG / PARTS), i * (MSG / PARTS), MSG / PARTS, 4),
					       "receive %d from the killed sender succeeded with different bytes", i);
				good++;
				done++;
			} else if (n == -FI_EAVAIL) {
				expect_peer_gone(s.cq);
				failed++;
				done++;
			}
		}
		pthread_join(t, NULL);
		printf("# %d receives intact, %d failed\n", good, failed);
		EXPECT(done == PARTS, "%d of %d receives completed within 20 s of the sender's death", done,
		       PARTS);
		waitpid(pid, &status, 0);
		EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		       "the sender was to be killed (status %d)", status);
		oxt_side_close(&s);
		close(sock);
	}

	free(rbuf);
	return oxt_done();
}
