/*
 * Corners of the API an application may use and a provider easily gets
 * wrong (fi_cm(3), fi_endpoint(3), fi_av(3), fi_msg(3), fi_cq(3)); one
 * process, endpoints talking over oxmr's shared-memory wire.
 *
 *  1. fi_setname on an RDM endpoint before fi_enable: peers reach it
 *     under the new name (its queue moved with it).
 *  2. FI_SETOPSFLAG after fi_enable: an endpoint bound with
 *     FI_SELECTIVE_COMPLETION reports a plain fi_send once FI_COMPLETION
 *     is in its transmit op flags (and not before).
 *  3. fi_av_remove of an FI_AV_MAP entry listed twice frees it once: two
 *     later inserts of different addresses get different fi_addrs.
 *  4. Bad buffers and flags are refused, not taken: an iov with a NULL
 *     base and a length (-FI_EINVAL), FI_MULTI_RECV on fi_sendmsg
 *     (-FI_EBADFLAGS: it is for receives; multi_recv.c tests them).
 *  5. fi_cq_sread on an FI_CQ_COND_NONE CQ ignores `cond`: one completion
 *     returns at once even with cond pointing at 16.
 *  6. fi_cntr_wait sees an error that its own progress counts: a refused
 *     RMA write whose answer is already waiting ends the wait with
 *     -FI_EAVAIL, not a timeout.
 *  7. fi_enable while another thread reads the CQ the endpoint is bound
 *     to (FI_THREAD_SAFE), 200 times with more than 4 endpoints on it:
 *     no deadlock.
 *  8. FI_SELECTIVE_COMPLETION: a receive posted without FI_COMPLETION
 *     that fails (truncated) still gives its error completion, with its
 *     context and olen (fi_cq(3): "error completions are generated for
 *     all operations, including those for which a completion was not
 *     requested"); one that succeeds gives none.
 *  9. FI_DELIVERY_COMPLETE with only a counter bound for sends: the send
 *     counter goes up once the receiver has taken the message, not when
 *     fi_send returns (fi_cntr(3): counters follow the completion
 *     semantics of fi_cq(3)).
 */
#include <pthread.h>
#include "oxt.h"

static struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 64, .wait_obj = FI_WAIT_UNSPEC };

/* The next completion of `cq` within 5 s (0 success, -1 none). */
static int one_completion(struct fid_cq *cq, void **ctx)
{
	return oxt_next_completion(cq, 5000, ctx);
}

static void setname(void)
{
	struct oxt_env e;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct oxt_ep x;
	struct sockaddr_in want = oxt_sin("127.0.0.1", 0), got;
	size_t len = sizeof got;
	char msg[32] = "over the new name", rbuf[32] = { 0 };
	struct fi_context c1, c2;
	fi_addr_t to;
	void *ctx;
	int port_fd;
	socklen_t sl = sizeof want;

	OXT_GROUP("1. fi_setname on an RDM endpoint: peers reach it under the new name");
	/* A free port, found by binding and releasing it. */
	port_fd = socket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(port_fd >= 0 && bind(port_fd, (struct sockaddr *)&want, sizeof want) == 0, "bind");
	REQUIRE(getsockname(port_fd, (struct sockaddr *)&want, &sl) == 0, "getsockname");
	close(port_fd);

	oxt_open(&e);
	REQUIRE_RC(fi_cq_open(e.domain, &cq_attr, &cq, NULL), 0);
	REQUIRE_RC(fi_av_open(e.domain, &(struct fi_av_attr){ .type = FI_AV_TABLE }, &av, NULL), 0);
	REQUIRE_RC(fi_endpoint(e.domain, e.info, &ep, NULL), 0);
	REQUIRE_RC(fi_setname(&ep->fid, &want, sizeof want), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	REQUIRE_RC(fi_getname(&ep->fid, &got, &len), 0);
	EXPECT(got.sin_port == want.sin_port, "fi_getname: port %u, set %u", ntohs(got.sin_port),
	       ntohs(want.sin_port));
	REQUIRE_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c1), 0);

	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	REQUIRE_RC(fi_av_insert(x.av, &want, 1, &to, 0, NULL), 1);
	EXPECT_RC(fi_send(x.ep, msg, sizeof msg, NULL, to, &c2), 0);
	EXPECT(one_completion(x.cq, &ctx) == 0 && ctx == &c2, "the send to the new name did not complete");
	EXPECT(one_completion(cq, &ctx) == 0 && ctx == &c1, "the endpoint did not receive under its new name");
	EXPECT(!memcmp(rbuf, msg, sizeof msg), "received other bytes");
	oxt_ep_close(&x);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
}

/* A CQ and an AV (FI_AV_TABLE) of `e`'s domain. */
static void open_cq_av(struct oxt_env *e, struct fid_cq **cq, struct fid_av **av)
{
	REQUIRE_RC(fi_cq_open(e->domain, &cq_attr, cq, NULL), 0);
	REQUIRE_RC(fi_av_open(e->domain, &(struct fi_av_attr){ .type = FI_AV_TABLE }, av, NULL), 0);
}

/* An endpoint of `e` with `cq` bound (`cq_flags`), `cntr` (unless NULL)
 * bound for FI_SEND, and `av`; enabled. */
static struct fid_ep *bound_ep(struct oxt_env *e, struct fid_cq *cq, uint64_t cq_flags,
			       struct fid_cntr *cntr, struct fid_av *av)
{
	struct fid_ep *ep = NULL;

	REQUIRE_RC(fi_endpoint(e->domain, e->info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, cq_flags), 0);
	if (cntr)
		REQUIRE_RC(fi_ep_bind(ep, &cntr->fid, FI_SEND), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	return ep;
}

static void setopsflag(void)
{
	struct oxt_env e;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct oxt_ep x;
	struct fi_context c1, c2;
	uint64_t flags;
	fi_addr_t to;
	char buf[8] = "abc";
	void *ctx;
	int rc;

	OXT_GROUP("2. FI_SETOPSFLAG after fi_enable reaches the running endpoint");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_open(&e);
	open_cq_av(&e, &cq, &av);
	ep = bound_ep(&e, cq, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION, NULL, av);
	REQUIRE_RC(fi_av_insert(av, x.name, 1, &to, 0, NULL), 1);
	/* The receiver takes both messages. */
	for (int i = 0; i < 2; i++)
		REQUIRE_RC(fi_recv(x.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, NULL), 0);

	flags = FI_TRANSMIT;
	REQUIRE_RC(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	EXPECT(!(flags & FI_COMPLETION), "transmit op flags start with FI_COMPLETION (%#llx)",
	       (unsigned long long)flags);
	EXPECT_RC(fi_send(ep, buf, 4, NULL, to, &c1), 0);
	(void)oxt_next_completion(x.cq, 200, &ctx);
	rc = oxt_next_completion(cq, 200, &ctx);
	EXPECT(rc == -1, "a selective send without FI_COMPLETION was reported (%d)", rc);

	flags = FI_TRANSMIT | FI_COMPLETION;
	REQUIRE_RC(fi_control(&ep->fid, FI_SETOPSFLAG, &flags), 0);
	EXPECT_RC(fi_send(ep, buf, 4, NULL, to, &c2), 0);
	(void)oxt_next_completion(x.cq, 200, &ctx);
	rc = one_completion(cq, &ctx);
	EXPECT(rc == 0 && ctx == &c2, "after FI_SETOPSFLAG(FI_COMPLETION) the send was not reported (%d)", rc);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
	oxt_ep_close(&x);
}

static void av_remove_twice(void)
{
	struct oxt_env e;
	struct fid_av *av;
	struct sockaddr_in a = oxt_sin("127.0.0.1", 4001), b = oxt_sin("127.0.0.1", 4002),
			   c = oxt_sin("127.0.0.1", 4003);
	fi_addr_t fa = FI_ADDR_NOTAVAIL, fb = FI_ADDR_NOTAVAIL, fc = FI_ADDR_NOTAVAIL, twice[2];

	OXT_GROUP("3. fi_av_remove of an FI_AV_MAP entry listed twice frees it once");
	oxt_open(&e);
	REQUIRE_RC(fi_av_open(e.domain, &(struct fi_av_attr){ .type = FI_AV_MAP }, &av, NULL), 0);
	REQUIRE_RC(fi_av_insert(av, &a, 1, &fa, 0, NULL), 1);
	twice[0] = twice[1] = fa;
	EXPECT_RC(fi_av_remove(av, twice, 2, 0), 0);
	REQUIRE_RC(fi_av_insert(av, &b, 1, &fb, 0, NULL), 1);
	REQUIRE_RC(fi_av_insert(av, &c, 1, &fc, 0, NULL), 1);
	EXPECT(fb != fc, "two different addresses got fi_addr %llu both", (unsigned long long)fb);
	EXPECT_RC(fi_close(&av->fid), 0);
	oxt_close(&e);
}

static void refused(void)
{
	struct oxt_ep x;
	struct iovec iov = { .iov_base = NULL, .iov_len = 64 };
	char buf[64];
	struct iovec ok = { .iov_base = buf, .iov_len = sizeof buf };
	struct fi_msg m = { .msg_iov = &ok, .iov_count = 1, .addr = FI_ADDR_UNSPEC };

	OXT_GROUP("4. a NULL iov base with a length, and FI_MULTI_RECV off fi_recvmsg, are refused");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	EXPECT_RC(fi_recvv(x.ep, &iov, NULL, 1, FI_ADDR_UNSPEC, NULL), -FI_EINVAL);
	EXPECT_RC(fi_sendmsg(x.ep, &m, FI_MULTI_RECV), -FI_EBADFLAGS);
	EXPECT_RC(fi_recvmsg(x.ep, NULL, 0), -FI_EINVAL);
	oxt_ep_close(&x);
}

static void sread_cond_none(void)
{
	struct oxt_ep x, y;
	struct fi_cq_tagged_entry ent[16];
	size_t sixteen = 16;
	fi_addr_t to;
	char buf[8] = "x";
	struct fi_context c;
	double t0;
	ssize_t n;

	OXT_GROUP("5. fi_cq_sread on an FI_CQ_COND_NONE CQ ignores cond");
	oxt_ep_open(&x, 0, FI_WAIT_UNSPEC);
	oxt_ep_open(&y, 0, FI_WAIT_NONE);
	to = oxt_ep_insert(&x, &y);
	REQUIRE_RC(fi_recv(y.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, NULL), 0);
	REQUIRE_RC(fi_send(x.ep, buf, 1, NULL, to, &c), 0);
	t0 = oxt_now_ms();
	n = fi_cq_sread(x.cq, ent, 16, &sixteen, 5000);
	EXPECT(n == 1 && ent[0].op_context == &c, "fi_cq_sread gave %zd", n);
	EXPECT(oxt_now_ms() - t0 < 2500, "fi_cq_sread waited %.0f ms for 16 completions", oxt_now_ms() - t0);
	oxt_ep_close(&y);
	oxt_ep_close(&x);
}

static void cntr_wait_error(void)
{
	struct oxt_env e;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_cntr *cntr;
	struct oxt_ep t;
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	char buf[64] = { 0 };
	fi_addr_t to;
	void *ctx;
	double t0;
	int rc;

	OXT_GROUP("6. fi_cntr_wait ends with -FI_EAVAIL for an error its own progress counts");
	oxt_ep_open(&t, 0, FI_WAIT_NONE);
	oxt_open(&e);
	REQUIRE_RC(fi_cq_open(e.domain, &cq_attr, &cq, NULL), 0);
	REQUIRE_RC(fi_av_open(e.domain, &(struct fi_av_attr){ .type = FI_AV_TABLE }, &av, NULL), 0);
	REQUIRE_RC(fi_cntr_open(e.domain, &ca, &cntr, NULL), 0);
	REQUIRE_RC(fi_endpoint(e.domain, e.info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cntr->fid, FI_WRITE), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	REQUIRE_RC(fi_av_insert(av, t.name, 1, &to, 0, NULL), 1);
	/* A key nobody registered: the target refuses and answers at once. */
	REQUIRE_RC(fi_write(ep, buf, sizeof buf, NULL, to, 0, 0xdead, NULL), 0);
	(void)oxt_next_completion(t.cq, 200, &ctx); /* the target's progress */
	t0 = oxt_now_ms();
	rc = fi_cntr_wait(cntr, 1, 3000);
	EXPECT(rc == -FI_EAVAIL, "fi_cntr_wait: %d (%s), want -FI_EAVAIL", rc, fi_strerror(-rc));
	EXPECT(oxt_now_ms() - t0 < 2000, "fi_cntr_wait took %.0f ms", oxt_now_ms() - t0);
	EXPECT_EQ(fi_cntr_readerr(cntr), 1);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
	oxt_ep_close(&t);
}

static volatile int reader_stop;

static void *cq_reader(void *arg)
{
	struct fid_cq *cq = arg;
	struct fi_cq_tagged_entry ent;

	while (!reader_stop)
		(void)fi_cq_read(cq, &ent, 1);
	return NULL;
}

static void enable_under_reader(void)
{
	struct oxt_env e;
	struct fid_cq *cq;
	struct fid_av *av;
	pthread_t th;
	double t0 = oxt_now_ms();
	int i;

	OXT_GROUP("7. fi_enable while another thread reads the CQ: 200 endpoints, no deadlock");
	oxt_open(&e);
	REQUIRE_RC(fi_cq_open(e.domain, &cq_attr, &cq, NULL), 0);
	REQUIRE_RC(fi_av_open(e.domain, &(struct fi_av_attr){ .type = FI_AV_TABLE }, &av, NULL), 0);
	REQUIRE(pthread_create(&th, NULL, cq_reader, cq) == 0, "pthread_create");
	for (i = 0; i < 200; i++) {
		struct fid_ep *ep;

		REQUIRE_RC(fi_endpoint(e.domain, e.info, &ep, NULL), 0);
		REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
		REQUIRE_RC(fi_enable(ep), 0);
		EXPECT_RC(fi_close(&ep->fid), 0);
	}
	reader_stop = 1;
	pthread_join(th, NULL);
	printf("# 200 endpoints enabled and closed under a reading thread in %.0f ms\n", oxt_now_ms() - t0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
}

static void selective_error(void)
{
	struct oxt_env e;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct oxt_ep x;
	struct fi_context c1, c2;
	struct fi_cq_tagged_entry ent;
	struct fi_cq_err_entry err = { 0 };
	char name[64], small[4], big[16] = "0123456789abcdef";
	size_t len = sizeof name;
	fi_addr_t to;
	ssize_t n = -FI_EAGAIN;
	void *ctx;
	int rc;

	OXT_GROUP("8. FI_SELECTIVE_COMPLETION: a failed receive without FI_COMPLETION still reports its error");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_open(&e);
	open_cq_av(&e, &cq, &av);
	ep = bound_ep(&e, cq, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION, NULL, av);
	REQUIRE_RC(fi_getname(&ep->fid, name, &len), 0);
	REQUIRE_RC(fi_av_insert(x.av, name, 1, &to, 0, NULL), 1);

	/* A receive that fits: no completion (none was asked for). */
	REQUIRE_RC(fi_recv(ep, big, sizeof big, NULL, FI_ADDR_UNSPEC, &c1), 0);
	EXPECT_RC(fi_send(x.ep, big, 8, NULL, to, NULL), 0);
	(void)oxt_next_completion(x.cq, 200, &ctx);
	rc = oxt_next_completion(cq, 200, &ctx);
	EXPECT(rc == -1, "a selective receive without FI_COMPLETION was reported (%d)", rc);

	/* One too small: its error is reported all the same. */
	REQUIRE_RC(fi_recv(ep, small, sizeof small, NULL, FI_ADDR_UNSPEC, &c2), 0);
	EXPECT_RC(fi_send(x.ep, big, sizeof big, NULL, to, NULL), 0);
	(void)oxt_next_completion(x.cq, 200, &ctx);
	for (double until = oxt_now_ms() + 5000; oxt_now_ms() < until;) {
		n = fi_cq_read(cq, &ent, 1);
		if (n != -FI_EAGAIN)
			break;
	}
	EXPECT(n == -FI_EAVAIL, "the truncated receive gave no error completion (fi_cq_read: %zd)", n);
	if (n == -FI_EAVAIL) {
		EXPECT_RC(fi_cq_readerr(cq, &err, 0), 1);
		EXPECT_EQ(err.err, FI_ETRUNC);
		EXPECT(err.op_context == &c2, "the error's context is not the receive's");
		EXPECT_EQ(err.olen, sizeof big - sizeof small);
		EXPECT(err.flags & FI_RECV, "the error's flags lack FI_RECV (%#llx)",
		       (unsigned long long)err.flags);
	}
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
	oxt_ep_close(&x);
}

static void delivery_counter(void)
{
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP };
	struct oxt_env e;
	struct fid_cntr *cntr;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct oxt_ep x;
	char buf[64] = "delivered", in[64];
	uint64_t flags = FI_TRANSMIT | FI_DELIVERY_COMPLETE;
	uint64_t got = 0;
	fi_addr_t to;
	void *ctx;

	OXT_GROUP("9. FI_DELIVERY_COMPLETE, counter only: the send counts once the receiver has the message");
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	oxt_open(&e);
	REQUIRE_RC(fi_cntr_open(e.domain, &ca, &cntr, NULL), 0);
	open_cq_av(&e, &cq, &av);
	/* (A CQ for receives only: sends report to the counter alone.) */
	ep = bound_ep(&e, cq, FI_RECV, cntr, av);
	REQUIRE_RC(fi_control(&ep->fid, FI_SETOPSFLAG, &flags), 0);
	REQUIRE_RC(fi_av_insert(av, x.name, 1, &to, 0, NULL), 1);

	EXPECT_RC(fi_send(ep, buf, sizeof buf, NULL, to, NULL), 0);
	/* The receiver does not progress yet: nothing may count. */
	for (double until = oxt_now_ms() + 200; oxt_now_ms() < until;)
		got += fi_cntr_read(cntr);
	EXPECT(got == 0, "the send counted before the receiver had the message");
	REQUIRE_RC(fi_recv(x.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL), 0);
	EXPECT_RC(oxt_next_completion(x.cq, 2000, &ctx), 0);
	for (double until = oxt_now_ms() + 2000; oxt_now_ms() < until && fi_cntr_read(cntr) == 0;)
		;
	EXPECT_EQ(fi_cntr_read(cntr), 1);
	EXPECT_EQ(fi_cntr_readerr(cntr), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
	oxt_ep_close(&x);
}

int main(int argc, char **argv)
{
	oxt_init(argv[0]);
	(void)argc;
	setname();
	setopsflag();
	av_remove_twice();
	refused();
	sread_cond_none();
	cntr_wait_error();
	enable_under_reader();
	selective_error();
	delivery_counter();
	return oxt_done();
}
