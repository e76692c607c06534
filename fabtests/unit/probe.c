/*
 * probe: tagged FI_PEEK, FI_CLAIM and FI_DISCARD (fi_tagged(3)) between two
 * processes, as Open MPI's MPI_Probe/MPI_Iprobe (FI_PEEK), MPI_Mprobe and
 * MPI_Mrecv (FI_PEEK|FI_CLAIM, then FI_CLAIM) use them.
 *
 * The child sends five tagged messages (inline ones with CQ data, 1 MiB
 * rendezvous ones) and waits until every send has completed; the parent
 * finds them by peeking: a peek reports length, tag, CQ data and source
 * without consuming the message (or gives an FI_ENOMSG error completion),
 * a claimed message is seen by no other receive or peek and is received by
 * the FI_CLAIM receive with the same context, and discarded messages
 * (FI_PEEK|FI_DISCARD, FI_CLAIM|FI_DISCARD) are gone while their sends
 * still complete. Run by fabtests/run.sh on the default wire (shared
 * memory between these two processes) and over TCP.
 */
#include "oxt.h"

#include <sys/wait.h>

#define BIG (1UL << 20)
#define NSENDS 5

static int child(int sock)
{
	struct oxt_side s;
	struct fi_context ctx[NSENDS];
	unsigned char *big2 = malloc(BIG), *big4 = malloc(BIG), small[100];
	struct fi_cq_tagged_entry ent;
	int done = 0;
	double until;
	char c = 'd';

	oxt_reset_counts();
	oxt_prog = "probe[child]";
	OXT_GROUP("the child's sends: all five complete (the discarded ones too)");
	REQUIRE(big2 && big4, "malloc");
	oxt_side_open(&s, sock);
	oxt_fill(small, sizeof small, 1);
	oxt_fill(big2, BIG, 2);
	oxt_fill(big4, BIG, 4);
	EXPECT_RC(fi_tsenddata(s.ep, small, 64, NULL, 0xabc, s.peer, 1, &ctx[0]), 0);
	EXPECT_RC(fi_tsend(s.ep, big2, BIG, NULL, s.peer, 2, &ctx[1]), 0);
	EXPECT_RC(fi_tsend(s.ep, small, 100, NULL, s.peer, 3, &ctx[2]), 0);
	EXPECT_RC(fi_tsend(s.ep, big4, BIG, NULL, s.peer, 4, &ctx[3]), 0);
	EXPECT_RC(fi_tsend(s.ep, small, 32, NULL, s.peer, 5, &ctx[4]), 0);
	until = oxt_now_ms() + 30000;
	while (done < NSENDS && oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(s.cq, &ent, 1);
		void *ectx;

		if (n == 1)
			done++;
		else if (n == -FI_EAVAIL)
			EXPECT(0, "a send failed: %s", fi_strerror(OXT_READERR(s.cq, &ectx)));
	}
	EXPECT(done == NSENDS, "%d of %d sends completed in 30 s", done, NSENDS);
	REQUIRE(write(sock, &c, 1) == 1, "socketpair write");
	/* (Keep the endpoint open until the parent is done with its checks.) */
	REQUIRE(read(sock, &c, 1) == 1, "socketpair read");
	oxt_side_close(&s);
	free(big2);
	free(big4);
	return oxt_done();
}

/*
 * One fi_trecvmsg with `flags` (FI_PEEK...) for `tag` from `src`, and its
 * completion, which every such call gives: 0 and *out for a success, the
 * error code of an error completion (FI_ENOMSG: nothing found), -1 for
 * none in 10 s (a failed check).
 */
static int probe_once(struct oxt_side *s, void *buf, size_t len, fi_addr_t src, uint64_t tag,
		      uint64_t flags, struct fi_context *ctx, struct fi_cq_tagged_entry *out)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fi_msg_tagged msg = {
		.msg_iov = buf ? &iov : NULL,
		.iov_count = buf ? 1 : 0,
		.addr = src,
		.tag = tag,
		.ignore = 0,
		.context = ctx,
	};
	double until = oxt_now_ms() + 10000;
	ssize_t rc;

	rc = fi_trecvmsg(s->ep, &msg, flags | FI_COMPLETION);
	if (rc != 0) {
		EXPECT(0, "fi_trecvmsg(flags %#llx): %s", (unsigned long long)flags, fi_strerror((int)-rc));
		return -1;
	}
	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(s->cq, out, 1);

		if (n == 1) {
			EXPECT(out->op_context == ctx, "a completion for another operation");
			return 0;
		}
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };

			if (fi_cq_readerr(s->cq, &err, 0) != 1) {
				EXPECT(0, "fi_cq_readerr after -FI_EAVAIL failed");
				return -1;
			}
			EXPECT(err.op_context == ctx, "an error completion for another operation");
			return err.err;
		}
	}
	EXPECT(0, "no completion for fi_trecvmsg(flags %#llx) in 10 s", (unsigned long long)flags);
	return -1;
}

/* Peek (with `flags`) until the message of `tag` is found, as MPI_Probe
 * does; 0 when found within 10 s. */
static int probe_until(struct oxt_side *s, fi_addr_t src, uint64_t tag, uint64_t flags,
		       struct fi_context *ctx, struct fi_cq_tagged_entry *out)
{
	double until = oxt_now_ms() + 10000;
	int rc = -1;

	while (oxt_now_ms() < until) {
		rc = probe_once(s, NULL, 0, src, tag, flags, ctx, out);
		if (rc != FI_ENOMSG)
			break;
	}
	EXPECT(rc == 0, "the message of tag %llu was not found: %s", (unsigned long long)tag,
	       rc > 0 ? fi_strerror(rc) : "no completion");
	return rc;
}

int main(int argc, char **argv)
{
	struct oxt_side s;
	struct fi_context ctx[8];
	struct fi_cq_tagged_entry e;
	unsigned char *big = malloc(BIG), small[100];
	int sock, status;
	char c;
	pid_t pid;

	oxt_init(argv[0]);
	(void)argc;
	REQUIRE(big, "malloc");
	pid = oxt_fork(child, &sock);
	oxt_side_open(&s, sock);

	OXT_GROUP("FI_PEEK for a tag nobody sent: an FI_ENOMSG error completion");
	EXPECT_RC(probe_once(&s, NULL, 0, FI_ADDR_UNSPEC, 99, FI_PEEK, &ctx[0], &e), FI_ENOMSG);

	OXT_GROUP("FI_PEEK reports length, tag, CQ data and source, and leaves the message");
	if (probe_until(&s, FI_ADDR_UNSPEC, 1, FI_PEEK, &ctx[1], &e) == 0) {
		EXPECT(e.len == 64 && e.tag == 1, "len %zu tag %llu, sent 64 and 1", e.len, (unsigned long long)e.tag);
		EXPECT(e.data == 0xabc && (e.flags & FI_REMOTE_CQ_DATA), "CQ data %#llx flags %#llx",
		       (unsigned long long)e.data, (unsigned long long)e.flags);
		EXPECT((e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED), "flags %#llx",
		       (unsigned long long)e.flags);
	}
	/* (Directed: from the child's address, as MPI_Probe(source) does.) */
	EXPECT_RC(probe_once(&s, NULL, 0, s.peer, 1, FI_PEEK, &ctx[2], &e), 0);
	memset(small, 0, sizeof small);
	EXPECT_RC(fi_trecv(s.ep, small, sizeof small, NULL, FI_ADDR_UNSPEC, 1, 0, &ctx[3]), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx[3]), 0);
	EXPECT(oxt_same(small, 64, 1), "the peeked message's data, received");
	EXPECT_RC(probe_once(&s, NULL, 0, FI_ADDR_UNSPEC, 1, FI_PEEK, &ctx[2], &e), FI_ENOMSG);

	OXT_GROUP("FI_PEEK|FI_CLAIM sets 1 MiB aside for the FI_CLAIM receive with its context");
	if (probe_until(&s, FI_ADDR_UNSPEC, 2, FI_PEEK | FI_CLAIM, &ctx[4], &e) == 0) {
		EXPECT(e.len == BIG && e.tag == 2, "len %zu tag %llu", e.len, (unsigned long long)e.tag);
		EXPECT_RC(probe_once(&s, NULL, 0, FI_ADDR_UNSPEC, 2, FI_PEEK, &ctx[5], &e), FI_ENOMSG);
		memset(big, 0, BIG);
		EXPECT_RC(probe_once(&s, big, BIG, FI_ADDR_UNSPEC, 0, FI_CLAIM, &ctx[4], &e), 0);
		EXPECT(e.len == BIG && e.tag == 2, "the claimed receive: len %zu tag %llu", e.len,
		       (unsigned long long)e.tag);
		EXPECT(oxt_same(big, BIG, 2), "the claimed receive's data");
	}

	OXT_GROUP("FI_PEEK|FI_DISCARD drops 1 MiB; FI_CLAIM|FI_DISCARD drops a claimed message");
	if (probe_until(&s, FI_ADDR_UNSPEC, 4, FI_PEEK | FI_DISCARD, &ctx[5], &e) == 0)
		EXPECT(e.len == BIG && e.tag == 4, "len %zu tag %llu", e.len, (unsigned long long)e.tag);
	EXPECT_RC(probe_once(&s, NULL, 0, FI_ADDR_UNSPEC, 4, FI_PEEK, &ctx[5], &e), FI_ENOMSG);
	if (probe_until(&s, FI_ADDR_UNSPEC, 3, FI_PEEK | FI_CLAIM, &ctx[6], &e) == 0) {
		EXPECT_RC(probe_once(&s, NULL, 0, FI_ADDR_UNSPEC, 0, FI_CLAIM | FI_DISCARD, &ctx[6], &e), 0);
		EXPECT(e.len == 100 && e.tag == 3, "the discard: len %zu tag %llu", e.len, (unsigned long long)e.tag);
	}
	EXPECT_RC(probe_once(&s, NULL, 0, FI_ADDR_UNSPEC, 3, FI_PEEK, &ctx[6], &e), FI_ENOMSG);

	OXT_GROUP("refusals: FI_CLAIM of an unclaimed context, FI_DISCARD alone, FI_PEEK on fi_recvmsg");
	{
		struct fi_msg_tagged tm = { .addr = FI_ADDR_UNSPEC, .tag = 5, .context = &ctx[7] };
		struct fi_msg m = { .addr = FI_ADDR_UNSPEC, .context = &ctx[7] };

		EXPECT_RC(fi_trecvmsg(s.ep, &tm, FI_CLAIM), -FI_EINVAL);
		EXPECT_RC(fi_trecvmsg(s.ep, &tm, FI_DISCARD), -FI_EINVAL);
		tm.context = NULL;
		EXPECT_RC(fi_trecvmsg(s.ep, &tm, FI_PEEK | FI_CLAIM), -FI_EINVAL);
		EXPECT_RC(fi_recvmsg(s.ep, &m, FI_PEEK), -FI_EBADFLAGS);
	}

	OXT_GROUP("the last message, received as usual; every send of the child completed");
	memset(small, 0, sizeof small);
	EXPECT_RC(fi_trecv(s.ep, small, sizeof small, NULL, FI_ADDR_UNSPEC, 5, 0, &ctx[7]), 0);
	EXPECT_RC(oxt_wait_one(&s, &ctx[7]), 0);
	EXPECT(oxt_same(small, 32, 1), "the last message's data");
	/* (The child's sends complete only as this side progresses.) */
	{
		struct pollfd p = { .fd = sock, .events = POLLIN };
		struct fi_cq_tagged_entry ent;
		double until = oxt_now_ms() + 30000;

		while (poll(&p, 1, 0) == 0 && oxt_now_ms() < until)
			(void)fi_cq_read(s.cq, &ent, 1);
		EXPECT(read(sock, &c, 1) == 1 && c == 'd', "the child did not report its sends done");
	}
	c = 'x';
	REQUIRE(write(sock, &c, 1) == 1, "socketpair write");
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's checks failed (status %#x)", status);
	oxt_side_close(&s);
	free(big);
	return oxt_done();
}
