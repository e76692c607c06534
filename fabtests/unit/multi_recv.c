/*
 * multi_recv: multi-receive buffers (FI_MULTI_RECV, fi_msg(3), fi_cq(3))
 * between two processes. The child sends; this process receives.
 *
 *  1. 8 B, 1 KiB, 64 KiB and 1 MiB (inline, rendezvous, shared copies on
 *     one host, pulled DATA over TCP), all in flight at once, into one
 *     buffer: each completion's buf is where its message landed, at
 *     successive offsets, and holds every byte of it; the buffer is
 *     released with 4095 bytes left under FI_OPT_MIN_MULTI_RECV 4096 (the
 *     default, 64, would keep it), so FI_MULTI_RECV is on the fourth
 *     completion only and a fifth message goes to the next buffer.
 *  2. fi_cancel of a posted buffer: an FI_ECANCELED error completion with
 *     FI_MULTI_RECV; a second cancel finds nothing.
 *  3. Reuse: the first buffer posted again (1000 bytes of it, minimum 64)
 *     takes messages from its start: 900 and 50 bytes (50 left: released,
 *     FI_MULTI_RECV), then, posted once more, a message that arrived
 *     while no buffer was posted.
 *  4. FI_MULTI_RECV in the endpoint's default rx op_flags (FI_SETOPSFLAG):
 *     fi_recv posts a buffer; fi_trecv stays a plain tagged receive.
 *  5. Refusals: fi_trecvmsg with FI_MULTI_RECV (-FI_EBADFLAGS and a log
 *     line: libfabric's tagged API has none), a buffer of two iovs
 *     (-FI_EINVAL).
 *
 * Run by fabtests/run.sh on the default wire (shared memory between these
 * two processes) and with FI_OXMR_WIRE=tcp.
 */
#include "oxt.h"

#include <sys/wait.h>

#define NBIG 4
static const size_t big_sizes[NBIG] = { 8, 1024, 64 << 10, 1 << 20 };
/* Phase 1's buffer: the four messages and 4095 bytes more. */
#define LEFT_A 4095
#define MIN_A 4096
#define NEXT_SIZE (2 << 20)

/* Wait for this many send completions (every send the child posted). */
static void sends_done(struct oxt_side *s, int n)
{
	struct fi_cq_tagged_entry ent;
	double until = oxt_now_ms() + 30000;
	int done = 0;

	while (done < n && oxt_now_ms() < until) {
		ssize_t r = fi_cq_read(s->cq, &ent, 1);
		void *ectx;

		if (r == 1)
			done++;
		else if (r == -FI_EAVAIL)
			EXPECT(0, "a send failed: %s", fi_strerror(OXT_READERR(s->cq, &ectx)));
	}
	EXPECT(done == n, "%d of %d sends completed in 30 s", done, n);
}

static void send_one(struct oxt_side *s, const unsigned char *buf, size_t len, struct fi_context *ctx)
{
	ssize_t rc;
	double until = oxt_now_ms() + 10000;

	do {
		rc = fi_send(s->ep, buf, len, NULL, s->peer, ctx);
		if (rc == -FI_EAGAIN)
			(void)fi_cq_read(s->cq, NULL, 0);
	} while (rc == -FI_EAGAIN && oxt_now_ms() < until);
	EXPECT_RC(rc, 0);
}

static int child(int sock)
{
	struct oxt_side s;
	struct fi_context ctx[8];
	unsigned char *m[NBIG], small[1024];
	unsigned char tsmall[32];

	oxt_reset_counts();
	oxt_prog = "multi_recv[child]";
	OXT_GROUP("the child's sends: all complete");
	oxt_side_open(&s, sock);
	for (int i = 0; i < NBIG; i++) {
		m[i] = malloc(big_sizes[i]);
		REQUIRE(m[i], "malloc");
		oxt_fill(m[i], big_sizes[i], i + 1);
	}

	/* 1: the four at once, then a fifth. */
	(void)oxt_get(sock);
	for (int i = 0; i < NBIG; i++)
		send_one(&s, m[i], big_sizes[i], &ctx[i]);
	oxt_fill(small, 300, 5);
	send_one(&s, small, 300, &ctx[4]);
	sends_done(&s, 5);
	oxt_put(sock, 'd');

	/* 3: 900 and 50 bytes, then 20 while no buffer is posted. */
	(void)oxt_get(sock);
	oxt_fill(m[3], 900, 6);
	send_one(&s, m[3], 900, &ctx[0]);
	oxt_fill(small, 50, 7);
	send_one(&s, small, 50, &ctx[1]);
	sends_done(&s, 2);
	oxt_put(sock, 'd');
	(void)oxt_get(sock);
	oxt_fill(small, 20, 8);
	send_one(&s, small, 20, &ctx[2]);
	sends_done(&s, 1);
	oxt_put(sock, 'd');

	/* 4: two untagged messages of 100 bytes, a tagged one of 32. */
	(void)oxt_get(sock);
	oxt_fill(m[2], 100, 9);
	oxt_fill(m[3], 100, 10);
	send_one(&s, m[2], 100, &ctx[0]);
	send_one(&s, m[3], 100, &ctx[1]);
	oxt_fill(tsmall, sizeof tsmall, 11);
	EXPECT_RC(fi_tsend(s.ep, tsmall, sizeof tsmall, NULL, s.peer, 9, &ctx[2]), 0);
	sends_done(&s, 3);
	oxt_put(sock, 'd');

	/* (Open until the parent is done.) */
	(void)oxt_get(sock);
	oxt_side_close(&s);
	for (int i = 0; i < NBIG; i++)
		free(m[i]);
	return oxt_done();
}

/* The next receive completion within 10 s: 0 and *e for a success, the
 * error code and *err for an error completion, -1 for none. */
static int next_recv(struct oxt_side *s, struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *err)
{
	double until = oxt_now_ms() + 10000;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(s->cq, e, 1);

		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			memset(err, 0, sizeof *err);
			if (fi_cq_readerr(s->cq, err, 0) != 1) {
				EXPECT(0, "fi_cq_readerr after -FI_EAVAIL failed");
				return -1;
			}
			return err->err;
		}
	}
	EXPECT(0, "no completion in 10 s");
	return -1;
}

/* One message's completion: context, where it landed, its length, the
 * release flag, and its bytes (oxt_fill's pattern for `seed`). */
static void expect_msg(struct oxt_side *s, void *ctx, const unsigned char *at, size_t len, bool last,
		       unsigned seed, const char *what)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	int rc = next_recv(s, &e, &err);

	if (rc != 0) {
		EXPECT(0, "%s: %s", what, rc > 0 ? fi_strerror(rc) : "no completion");
		return;
	}
	EXPECT(e.op_context == ctx, "%s: context %p, posted %p", what, e.op_context, ctx);
	EXPECT(e.buf == at, "%s: buf %p, expected %p", what, e.buf, (const void *)at);
	EXPECT(e.len == len, "%s: len %zu, sent %zu", what, e.len, len);
	EXPECT((e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG), "%s: flags %#llx", what,
	       (unsigned long long)e.flags);
	EXPECT(!!(e.flags & FI_MULTI_RECV) == last, "%s: FI_MULTI_RECV %s (flags %#llx)", what,
	       last ? "missing on the buffer's last completion" : "on a completion that is not the last",
	       (unsigned long long)e.flags);
	if (e.buf == at)
		EXPECT(oxt_same(at, len, seed), "%s: its bytes at its offset", what);
}

static ssize_t post_multi(struct oxt_side *s, void *buf, size_t len, struct fi_context *ctx)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fi_msg m = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = ctx };

	return fi_recvmsg(s->ep, &m, FI_MULTI_RECV);
}

static void expect_canceled(struct oxt_side *s, struct fi_context *ctx, const char *what)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	int rc;

	EXPECT_RC(fi_cancel(&s->ep->fid, ctx), 0);
	rc = next_recv(s, &e, &err);
	EXPECT(rc == FI_ECANCELED, "%s: the cancel's completion: %s", what,
	       rc > 0 ? fi_strerror(rc) : rc == 0 ? "a success" : "none");
	if (rc == FI_ECANCELED) {
		EXPECT(err.op_context == ctx, "%s: context %p, posted %p", what, err.op_context, (void *)ctx);
		EXPECT(err.flags & FI_MULTI_RECV, "%s: no FI_MULTI_RECV on the cancel (flags %#llx)", what,
		       (unsigned long long)err.flags);
	}
	EXPECT_RC(fi_cancel(&s->ep->fid, ctx), -FI_ENOENT);
}

static void set_min(struct oxt_side *s, size_t v)
{
	size_t got = 0, len = sizeof got;

	EXPECT_RC(fi_setopt(&s->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof v), 0);
	EXPECT_RC(fi_getopt(&s->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &len), 0);
	EXPECT_EQ(got, v);
}

int main(int argc, char **argv)
{
	struct oxt_side s;
	struct fi_context ca, cb, cc, ct;
	size_t size_a = LEFT_A, off = 0;
	unsigned char *a, *b, c[256], t[64];
	int sock, status;
	pid_t pid;

	oxt_init(argv[0]);
	(void)argc;
	/* (Group 5 reads a refusal's log line.) */
	setenv("FI_LOG_LEVEL", "warn", 0);
	for (int i = 0; i < NBIG; i++)
		size_a += big_sizes[i];
	a = malloc(size_a);
	b = malloc(NEXT_SIZE);
	REQUIRE(a && b, "malloc");
	pid = oxt_fork(child, &sock);
	oxt_side_open(&s, sock);
	REQUIRE(s.e.info->caps & FI_MULTI_RECV, "fi_getinfo offers FI_MULTI_RECV (caps %#llx)",
		(unsigned long long)s.e.info->caps);

	OXT_GROUP("1. 8 B, 1 KiB, 64 KiB, 1 MiB at successive offsets; released under FI_OPT_MIN_MULTI_RECV 4096");
	set_min(&s, MIN_A);
	memset(a, 0, size_a);
	memset(b, 0, NEXT_SIZE);
	EXPECT_RC(post_multi(&s, a, size_a, &ca), 0);
	EXPECT_RC(post_multi(&s, b, NEXT_SIZE, &cb), 0);
	oxt_put(sock, 'g');
	for (int i = 0; i < NBIG; i++) {
		char what[64];

		snprintf(what, sizeof what, "message %d (%zu bytes)", i + 1, big_sizes[i]);
		expect_msg(&s, &ca, a + off, big_sizes[i], i == NBIG - 1, i + 1, what);
		off += big_sizes[i];
	}
	EXPECT(oxt_first_not(a + off, LEFT_A, 0) == LEFT_A, "bytes written past the last message");
	expect_msg(&s, &cb, b, 300, false, 5, "the fifth message, in the next buffer");
	EXPECT(oxt_get(sock) == 'd', "the child's sends");

	OXT_GROUP("2. fi_cancel of a buffer: FI_ECANCELED with FI_MULTI_RECV");
	expect_canceled(&s, &cb, "the next buffer");

	OXT_GROUP("3. a buffer posted again takes messages from its start (minimum 64)");
	set_min(&s, 64);
	memset(a, 0, size_a);
	EXPECT_RC(post_multi(&s, a, 1000, &ca), 0);
	oxt_put(sock, 'g');
	expect_msg(&s, &ca, a, 900, false, 6, "900 bytes (100 left)");
	expect_msg(&s, &ca, a + 900, 50, true, 7, "50 bytes (50 left, under 64)");
	EXPECT(oxt_get(sock) == 'd', "the child's sends");
	/* With no buffer posted: the message waits, and takes the buffer
	 * posted next (at its post or when it arrives). */
	oxt_put(sock, 'g');
	EXPECT(oxt_get(sock) == 'd', "the child's send");
	memset(a, 0, size_a);
	EXPECT_RC(post_multi(&s, a, 1000, &ca), 0);
	expect_msg(&s, &ca, a, 20, false, 8, "20 bytes sent while no buffer was posted");
	expect_canceled(&s, &ca, "the buffer posted again");

	OXT_GROUP("4. default rx op_flags FI_MULTI_RECV: fi_recv posts a buffer, fi_trecv a plain receive");
	{
		uint64_t flags = FI_RECV | FI_MULTI_RECV;
		struct fi_cq_tagged_entry e;
		struct fi_cq_err_entry err;

		REQUIRE_RC(fi_control(&s.ep->fid, FI_SETOPSFLAG, &flags), 0);
		memset(c, 0, sizeof c);
		EXPECT_RC(fi_recv(s.ep, c, sizeof c, NULL, FI_ADDR_UNSPEC, &cc), 0);
		EXPECT_RC(fi_trecv(s.ep, t, sizeof t, NULL, FI_ADDR_UNSPEC, 9, 0, &ct), 0);
		oxt_put(sock, 'g');
		expect_msg(&s, &cc, c, 100, false, 9, "100 bytes (156 left)");
		expect_msg(&s, &cc, c + 100, 100, true, 10, "100 bytes (56 left, under 64)");
		EXPECT_RC(next_recv(&s, &e, &err), 0);
		EXPECT(e.op_context == &ct && e.len == 32 && e.tag == 9, "the tagged receive: ctx %p len %zu tag %llu",
		       e.op_context, e.len, (unsigned long long)e.tag);
		EXPECT((e.flags & (FI_TAGGED | FI_MULTI_RECV)) == FI_TAGGED, "the tagged receive's flags %#llx",
		       (unsigned long long)e.flags);
		EXPECT(oxt_same(t, 32, 11), "the tagged receive's bytes");
		EXPECT(oxt_get(sock) == 'd', "the child's sends");
		flags = FI_RECV;
		EXPECT_RC(fi_control(&s.ep->fid, FI_SETOPSFLAG, &flags), 0);
	}

	OXT_GROUP("5. refused: fi_trecvmsg with FI_MULTI_RECV (with a log line), a buffer of two iovs");
	{
		struct iovec iov[2] = { { a, 64 }, { a + 64, 64 } };
		struct fi_msg_tagged tm = { .msg_iov = iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 1 };
		struct fi_msg m = { .msg_iov = iov, .iov_count = 2, .addr = FI_ADDR_UNSPEC, .context = &ca };
		const char *log;

		oxt_capture_begin();
		EXPECT_RC(fi_trecvmsg(s.ep, &tm, FI_MULTI_RECV), -FI_EBADFLAGS);
		log = oxt_capture_end();
		EXPECT(strstr(log, "no multi-receive buffers"), "no log line says why:\n%s", log);
		EXPECT_RC(fi_recvmsg(s.ep, &m, FI_MULTI_RECV), -FI_EINVAL);
		EXPECT_RC(fi_cancel(&s.ep->fid, &ca), -FI_ENOENT);
	}

	oxt_put(sock, 'q');
	oxt_side_close(&s);
	close(sock);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	OXT_GROUP("the child's checks");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with status %d", status);
	free(a);
	free(b);
	return oxt_done();
}
