/*
 * srx: shared receive contexts (fi_srx_context; fi_endpoint(3) "Shared
 * Contexts"). Three receiving endpoints opened with rx_ctx_cnt =
 * FI_SHARED_CONTEXT share one context, each with its own CQ; a fourth,
 * plain endpoint sends to them. Receives posted to the context take the
 * messages of every endpoint bound to it, in posting order, and complete
 * into the CQ of the endpoint that received each message (and no other):
 * posted before the message, after it (the message kept by its endpoint,
 * the receive handed to it), eager and rendezvous (1 MiB), untagged and
 * tagged, directed. fi_cancel of a receive on the context. Closing an
 * endpoint drops what it kept: a later receive takes the next message of
 * another endpoint. The refusals: fi_recv on a bound endpoint, a transmit
 * or FI_MULTI_RECV or FI_PEEK on the context, binding it to an endpoint
 * without FI_SHARED_CONTEXT, closing it while bound.
 */
#include "oxt.h"

#include <pthread.h>
#include <rdma/fi_tagged.h>

#define NRX 3
#define BIG (1 << 20)

struct rep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	char name[64];
	fi_addr_t at; /* its fi_addr in the sender's AV */
};

static struct fid_cq *all_cq[NRX + 1];

static void ep_open(struct oxt_env *e, struct fi_info *fi, struct fid_av *av, struct fid_ep *srx, struct rep *r)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64, .wait_obj = FI_WAIT_UNSPEC };
	size_t len = sizeof r->name;

	REQUIRE_RC(fi_endpoint(e->domain, fi, &r->ep, NULL), 0);
	REQUIRE_RC(fi_cq_open(e->domain, &ca, &r->cq, NULL), 0);
	REQUIRE_RC(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(r->ep, &av->fid, 0), 0);
	if (srx)
		REQUIRE_RC(fi_ep_bind(r->ep, &srx->fid, 0), 0);
	REQUIRE_RC(fi_enable(r->ep), 0);
	REQUIRE_RC(fi_getname(&r->ep->fid, r->name, &len), 0);
}

/* Progress every CQ (nothing read). */
static void poke(void)
{
	for (int i = 0; i <= NRX; i++)
		if (all_cq[i])
			fi_cq_read(all_cq[i], NULL, 0);
}

/* The next completion of `cq` within 5 s: 0, an error code, or -1. */
static int next(struct fid_cq *cq, struct fi_cq_tagged_entry *e, void **errctx)
{
	double until = oxt_now_ms() + 5000;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(cq, e, 1);
		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL)
			return OXT_READERR(cq, errctx);
		poke();
	}
	return -1;
}

/* A thread asleep in fi_cq_sread on one CQ (10 s at most). */
struct sleeper {
	struct fid_cq *cq;
	struct fi_cq_tagged_entry e;
	ssize_t n;
};

static void *sleep_on(void *arg)
{
	struct sleeper *s = arg;

	s->n = fi_cq_sread(s->cq, &s->e, 1, NULL, 10000);
	return NULL;
}

/* Whether `cq` holds nothing after 20 ms of everyone's progress. */
static bool quiet(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;
	double until = oxt_now_ms() + 20;

	while (oxt_now_ms() < until)
		poke();
	return fi_cq_read(cq, &e, 0) == -FI_EAGAIN;
}

int main(int argc, char **argv)
{
	struct oxt_env e;
	struct fi_info *hints, *fi = NULL, *plain;
	struct fid_ep *srx;
	struct fid_av *av;
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_rx_attr ra;
	struct rep rx[NRX], tx;
	struct fi_cq_tagged_entry ce;
	static unsigned char out[BIG], in[NRX][BIG];
	void *ectx;
	int ctx[8];

	(void)argc;
	oxt_init(argv[0]);

	OXT_GROUP("getinfo takes rx_ctx_cnt FI_SHARED_CONTEXT; one shared receive context per endpoint");
	hints = oxt_hints(FI_EP_RDM);
	hints->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV;
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &fi), 0);
	fi_freeinfo(hints);
	EXPECT_EQ(fi->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT);
	EXPECT_EQ(fi->domain_attr->max_ep_srx_ctx, 1);
	if (fi->next) {
		fi_freeinfo(fi->next);
		fi->next = NULL;
	}
	memset(&e, 0, sizeof e);
	e.info = fi;
	REQUIRE_RC(fi_fabric(fi->fabric_attr, &e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(e.fabric, fi, &e.domain, NULL), 0);
	ra = *fi->rx_attr;
	REQUIRE_RC(fi_srx_context(e.domain, &ra, &srx, NULL), 0);
	REQUIRE_RC(fi_enable(srx), 0);
	REQUIRE_RC(fi_av_open(e.domain, &aa, &av, NULL), 0);
	for (int i = 0; i < NRX; i++) {
		ep_open(&e, fi, av, srx, &rx[i]);
		all_cq[i] = rx[i].cq;
	}
	plain = fi_dupinfo(fi);
	plain->ep_attr->rx_ctx_cnt = 1;
	ep_open(&e, plain, av, NULL, &tx);
	all_cq[NRX] = tx.cq;
	for (int i = 0; i < NRX; i++)
		REQUIRE_RC(fi_av_insert(av, rx[i].name, 1, &rx[i].at, 0, NULL), 1);

	OXT_GROUP("receives posted first: each message lands in the next one, completing at its own endpoint");
	for (int i = 0; i < NRX; i++)
		REQUIRE_RC(fi_recv(srx, in[i], 64, NULL, FI_ADDR_UNSPEC, &ctx[i]), 0);
	/* To the endpoints in the order 2, 0, 1: the receives in posting order. */
	for (int k = 0; k < NRX; k++) {
		int to = (k + 2) % NRX;
		oxt_fill(out, 40 + k, 10 + k);
		REQUIRE_RC(fi_send(tx.ep, out, 40 + k, NULL, rx[to].at, &ctx[7]), 0);
		EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);
		EXPECT_EQ(next(rx[to].cq, &ce, &ectx), 0);
		EXPECT(ce.op_context == &ctx[k], "message %d took receive %ld, not %d", k,
		       (long)((int *)ce.op_context - ctx), k);
		EXPECT_EQ(ce.len, 40 + k);
		EXPECT(oxt_same(in[k], 40 + k, 10 + k), "message %d differs", k);
	}
	for (int i = 0; i < NRX; i++)
		EXPECT(quiet(rx[i].cq), "endpoint %d has a completion that is not its own", i);

	OXT_GROUP("messages first (eager and rendezvous): the receive posted later is handed to the endpoint that kept it");
	{
		size_t sizes[2] = { 100, BIG };
		for (int k = 0; k < 2; k++) {
			int to = k + 1;
			oxt_fill(out, sizes[k], 30 + k);
			memset(in[0], 0, sizes[k]);
			REQUIRE_RC(fi_send(tx.ep, out, sizes[k], NULL, rx[to].at, &ctx[7]), 0);
			/* (Progressed until the endpoint has kept it.) */
			EXPECT(quiet(rx[to].cq), "a completion before any receive");
			REQUIRE_RC(fi_recv(srx, in[0], BIG, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
			EXPECT_EQ(next(rx[to].cq, &ce, &ectx), 0);
			EXPECT(ce.op_context == &ctx[0], "the receive's completion context");
			EXPECT_EQ(ce.len, sizes[k]);
			EXPECT(oxt_same(in[0], sizes[k], 30 + k), "%zu bytes differ", sizes[k]);
			EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);
		}
	}

	OXT_GROUP("a rendezvous message into a receive posted first");
	oxt_fill(out, BIG, 44);
	REQUIRE_RC(fi_recv(srx, in[1], BIG, NULL, FI_ADDR_UNSPEC, &ctx[1]), 0);
	REQUIRE_RC(fi_send(tx.ep, out, BIG, NULL, rx[0].at, &ctx[7]), 0);
	EXPECT_EQ(next(rx[0].cq, &ce, &ectx), 0);
	EXPECT(oxt_same(in[1], BIG, 44), "1 MiB differs");
	EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);

	OXT_GROUP("tagged: each message matches the receive of its tag, whichever endpoint took it");
	REQUIRE_RC(fi_trecv(srx, in[0], 64, NULL, FI_ADDR_UNSPEC, 0xa, 0, &ctx[0]), 0);
	REQUIRE_RC(fi_trecv(srx, in[1], 64, NULL, FI_ADDR_UNSPEC, 0xb, 0, &ctx[1]), 0);
	oxt_fill(out, 16, 50);
	REQUIRE_RC(fi_tsend(tx.ep, out, 16, NULL, rx[0].at, 0xb, &ctx[7]), 0);
	EXPECT_EQ(next(rx[0].cq, &ce, &ectx), 0);
	EXPECT(ce.op_context == &ctx[1] && ce.tag == 0xb, "tag 0xb took another receive");
	EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);
	REQUIRE_RC(fi_tsend(tx.ep, out, 16, NULL, rx[2].at, 0xa, &ctx[7]), 0);
	EXPECT_EQ(next(rx[2].cq, &ce, &ectx), 0);
	EXPECT(ce.op_context == &ctx[0] && ce.tag == 0xa, "tag 0xa took another receive");
	EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);

	OXT_GROUP("directed: a receive naming another source is passed over");
	{
		fi_addr_t tx_at;
		REQUIRE_RC(fi_av_insert(av, tx.name, 1, &tx_at, 0, NULL), 1);
		REQUIRE_RC(fi_recv(srx, in[0], 64, NULL, rx[0].at, &ctx[3]), 0);
		REQUIRE_RC(fi_recv(srx, in[1], 64, NULL, tx_at, &ctx[4]), 0);
		oxt_fill(out, 12, 70);
		REQUIRE_RC(fi_send(tx.ep, out, 12, NULL, rx[1].at, &ctx[7]), 0);
		EXPECT_EQ(next(rx[1].cq, &ce, &ectx), 0);
		EXPECT(ce.op_context == &ctx[4], "the message took the receive of another source");
		EXPECT(oxt_same(in[1], 12, 70), "directed data differs");
		EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);
		EXPECT_RC(fi_cancel(&srx->fid, &ctx[3]), 0);
		EXPECT_EQ(next(rx[0].cq, &ce, &ectx), FI_ECANCELED);
	}

	OXT_GROUP("fi_cancel on the context: FI_ECANCELED at the first bound endpoint's CQ");
	REQUIRE_RC(fi_trecv(srx, in[0], 64, NULL, FI_ADDR_UNSPEC, 0xdead, 0, &ctx[5]), 0);
	EXPECT_RC(fi_cancel(&srx->fid, &ctx[5]), 0);
	EXPECT_EQ(next(rx[0].cq, &ce, &ectx), FI_ECANCELED);
	EXPECT(ectx == &ctx[5], "the cancelled receive's context");
	EXPECT_RC(fi_cancel(&srx->fid, &ctx[5]), -FI_ENOENT);

	OXT_GROUP("a receive posted while a thread sleeps in fi_cq_sread on the keeping endpoint's CQ completes there");
	{
		struct sleeper sl = { .cq = rx[1].cq };
		pthread_t t;

		oxt_fill(out, 20, 80);
		REQUIRE_RC(fi_send(tx.ep, out, 20, NULL, rx[1].at, &ctx[7]), 0);
		EXPECT(quiet(rx[1].cq), "a completion before any receive");
		EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);
		REQUIRE(pthread_create(&t, NULL, sleep_on, &sl) == 0, "pthread_create");
		/* (Let it fall asleep: the receive is posted to a sleeper.) */
		oxt_sleep_ms(50);
		REQUIRE_RC(fi_recv(srx, in[2], 64, NULL, FI_ADDR_UNSPEC, &ctx[6]), 0);
		pthread_join(t, NULL);
		EXPECT_EQ(sl.n, 1);
		EXPECT(sl.n != 1 || sl.e.op_context == &ctx[6], "the sleeper's completion context");
		EXPECT(oxt_same(in[2], 20, 80), "the handed-off message differs");
	}

	OXT_GROUP("an endpoint closed with a receive handed to it: the receive takes another endpoint's message");
	/* Both endpoints 2 and 1 keep a tag-5 message (2's first); a receive
	 * of tag 5 matches 2's and is handed to it; 2 closes before it runs
	 * progress: the receive goes back to the context and takes 1's. */
	oxt_fill(out, 24, 60);
	REQUIRE_RC(fi_tsend(tx.ep, out, 24, NULL, rx[2].at, 5, &ctx[7]), 0);
	EXPECT(quiet(rx[2].cq), "a completion before any receive");
	oxt_fill(out, 24, 61);
	REQUIRE_RC(fi_tsend(tx.ep, out, 24, NULL, rx[1].at, 5, &ctx[7]), 0);
	EXPECT(quiet(rx[1].cq), "a completion before any receive");
	for (int k = 0; k < 2; k++)
		EXPECT_EQ(next(tx.cq, &ce, &ectx), 0);
	REQUIRE_RC(fi_trecv(srx, in[0], 64, NULL, FI_ADDR_UNSPEC, 5, 0, &ctx[0]), 0);
	EXPECT_RC(fi_close(&rx[2].ep->fid), 0);
	EXPECT_RC(fi_close(&rx[2].cq->fid), 0);
	all_cq[2] = NULL;
	EXPECT_EQ(next(rx[1].cq, &ce, &ectx), 0);
	EXPECT(ce.op_context == &ctx[0], "the receive's completion context");
	EXPECT(oxt_same(in[0], 24, 61), "the receive did not take endpoint 1's message");

	OXT_GROUP("refused: fi_recv on a bound endpoint, a transmit, FI_MULTI_RECV or FI_PEEK on the context");
	{
		struct fi_msg m = { 0 };
		struct fi_msg_tagged t = { 0 };
		struct iovec iov = { .iov_base = in[0], .iov_len = 64 };

		EXPECT_RC(fi_recv(rx[0].ep, in[0], 64, NULL, FI_ADDR_UNSPEC, &ctx[0]), -FI_EOPNOTSUPP);
		EXPECT_RC(fi_send(srx, out, 8, NULL, rx[0].at, &ctx[0]), -FI_EOPNOTSUPP);
		m.msg_iov = &iov;
		m.iov_count = 1;
		m.addr = FI_ADDR_UNSPEC;
		m.context = &ctx[0];
		EXPECT_RC(fi_recvmsg(srx, &m, FI_MULTI_RECV), -FI_EOPNOTSUPP);
		t.msg_iov = &iov;
		t.iov_count = 1;
		t.addr = FI_ADDR_UNSPEC;
		t.context = &ctx[0];
		EXPECT_RC(fi_trecvmsg(srx, &t, FI_PEEK), -FI_EOPNOTSUPP);
	}

	OXT_GROUP("refused: binding it to an endpoint without FI_SHARED_CONTEXT, enabling one with it unbound, closing it while bound, FI_MULTI_RECV defaults, a cancel with no endpoint enabled");
	{
		struct fid_ep *ep, *s2 = NULL;
		struct fi_rx_attr multi = *fi->rx_attr;
		REQUIRE_RC(fi_endpoint(e.domain, plain, &ep, NULL), 0);
		EXPECT_RC(fi_ep_bind(ep, &srx->fid, 0), -FI_EINVAL);
		EXPECT_RC(fi_close(&ep->fid), 0);
		REQUIRE_RC(fi_endpoint(e.domain, fi, &ep, NULL), 0);
		REQUIRE_RC(fi_ep_bind(ep, &tx.cq->fid, FI_TRANSMIT | FI_RECV), 0);
		REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
		EXPECT_RC(fi_enable(ep), -FI_EINVAL);
		EXPECT_RC(fi_close(&ep->fid), 0);
		EXPECT_RC(fi_close(&srx->fid), -FI_EBUSY);
		multi.op_flags |= FI_MULTI_RECV;
		EXPECT_RC(fi_srx_context(e.domain, &multi, &s2, NULL), -FI_EINVAL);
		REQUIRE_RC(fi_srx_context(e.domain, NULL, &s2, NULL), 0);
		REQUIRE_RC(fi_recv(s2, in[0], 64, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
		EXPECT_RC(fi_cancel(&s2->fid, &ctx[0]), -FI_EOPBADSTATE);
		EXPECT_RC(fi_close(&s2->fid), 0);
	}

	for (int i = 0; i < 2; i++) {
		EXPECT_RC(fi_close(&rx[i].ep->fid), 0);
		EXPECT_RC(fi_close(&rx[i].cq->fid), 0);
	}
	EXPECT_RC(fi_close(&tx.ep->fid), 0);
	EXPECT_RC(fi_close(&tx.cq->fid), 0);
	EXPECT_RC(fi_close(&srx->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	fi_freeinfo(plain);
	oxt_close(&e);
	return oxt_done();
}
