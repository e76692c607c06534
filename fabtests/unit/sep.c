/*
 * sep: scalable endpoints (fi_scalable_ep, fi_tx_context, fi_rx_context;
 * fi_endpoint(3) "Scalable Endpoints") and receive contexts named with
 * fi_rx_addr (FI_NAMED_RX_CTX, an AV with rx_ctx_bits).
 *
 * Two scalable endpoints of three transmit and three receive contexts,
 * each context with its own CQ: a message from every transmit context of
 * one to every receive context of the other lands in that receive
 * context only (its CQ, and no other), completes on that transmit
 * context's CQ only, and its source (FI_SOURCE) is the peer's entry for
 * context 0, a context's own address once inserted (answering to its
 * index), FI_ADDR_NOTAVAIL otherwise. Tagged messages and
 * RMA writes and reads through a context; a plain endpoint reaches
 * receive context 0 by the scalable endpoint's name. The refusals: data
 * on the scalable endpoint itself or in a context's other direction,
 * bindings of the other direction, an index out of range, a context
 * made twice, a context after fi_enable, rx_ctx_bits too large, counts
 * above max_ep_tx_ctx, fi_endpoint with several contexts, closing the
 * scalable endpoint or a bound CQ while contexts are open. Closing the
 * contexts releases everything.
 */
#include "oxt.h"

#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define N 3
#define BITS 2

struct sep {
	struct fid_ep *sep;
	struct fid_av *av;
	struct fid_ep *tx[N], *rx[N];
	struct fid_cq *txcq[N], *rxcq[N];
	char name[64];
};

static void sep_open(struct oxt_env *e, struct fi_info *fi, struct sep *s)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE, .rx_ctx_bits = BITS };
	size_t len = sizeof s->name;

	memset(s, 0, sizeof *s);
	REQUIRE_RC(fi_scalable_ep(e->domain, fi, &s->sep, NULL), 0);
	REQUIRE_RC(fi_av_open(e->domain, &aa, &s->av, NULL), 0);
	REQUIRE_RC(fi_scalable_ep_bind(s->sep, &s->av->fid, 0), 0);
	for (int i = 0; i < N; i++) {
		REQUIRE_RC(fi_tx_context(s->sep, i, NULL, &s->tx[i], NULL), 0);
		REQUIRE_RC(fi_rx_context(s->sep, i, NULL, &s->rx[i], NULL), 0);
		REQUIRE_RC(fi_cq_open(e->domain, &ca, &s->txcq[i], NULL), 0);
		REQUIRE_RC(fi_cq_open(e->domain, &ca, &s->rxcq[i], NULL), 0);
		REQUIRE_RC(fi_ep_bind(s->tx[i], &s->txcq[i]->fid, FI_TRANSMIT), 0);
		REQUIRE_RC(fi_ep_bind(s->rx[i], &s->rxcq[i]->fid, FI_RECV), 0);
	}
	/* The contexts enabled before and after the scalable endpoint. */
	REQUIRE_RC(fi_enable(s->tx[0]), 0);
	REQUIRE_RC(fi_enable(s->rx[0]), 0);
	REQUIRE_RC(fi_enable(s->sep), 0);
	for (int i = 1; i < N; i++) {
		REQUIRE_RC(fi_enable(s->tx[i]), 0);
		REQUIRE_RC(fi_enable(s->rx[i]), 0);
	}
	REQUIRE_RC(fi_getname(&s->sep->fid, s->name, &len), 0);
}

static void sep_close(struct sep *s)
{
	/* A context holds its scalable endpoint; an open context's endpoint
	 * holds its CQ. */
	EXPECT_RC(fi_close(&s->sep->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&s->rxcq[0]->fid), -FI_EBUSY);
	for (int i = 0; i < N; i++) {
		EXPECT_RC(fi_close(&s->tx[i]->fid), 0);
		EXPECT_RC(fi_close(&s->rx[i]->fid), 0);
		EXPECT_RC(fi_close(&s->txcq[i]->fid), 0);
		EXPECT_RC(fi_close(&s->rxcq[i]->fid), 0);
	}
	EXPECT_RC(fi_close(&s->sep->fid), 0);
	EXPECT_RC(fi_close(&s->av->fid), 0);
}

/* Progress every CQ of both (nothing is read from them). */
static void poke(struct sep *a, struct sep *b)
{
	for (int i = 0; i < N; i++) {
		fi_cq_read(a->txcq[i], NULL, 0);
		fi_cq_read(a->rxcq[i], NULL, 0);
		fi_cq_read(b->txcq[i], NULL, 0);
		fi_cq_read(b->rxcq[i], NULL, 0);
	}
}

/* The next completion of `cq` within 5 s, progressing a and b. */
static int next(struct fid_cq *cq, struct sep *a, struct sep *b, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	double until = oxt_now_ms() + 5000;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_readfrom(cq, e, 1, src);
		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			void *ctx;
			return OXT_READERR(cq, &ctx);
		}
		poke(a, b);
	}
	return -1;
}

/* How many of `s`'s receive CQs hold a completion now. */
static int rx_ready(struct sep *s)
{
	struct fi_cq_tagged_entry e;
	int n = 0;

	for (int i = 0; i < N; i++) {
		if (fi_cq_read(s->rxcq[i], &e, 0) == -FI_EAGAIN)
			continue;
		n++;
	}
	return n;
}

int main(int argc, char **argv)
{
	struct oxt_env e;
	struct fi_info *hints, *fi = NULL, *one;
	struct sep a, b;
	fi_addr_t b_at_a, a_at_b, src;
	struct fi_cq_tagged_entry ce;
	static unsigned char out[4096], in[4096];
	int ctx[4];

	(void)argc;
	oxt_init(argv[0]);

	OXT_GROUP("getinfo offers FI_NAMED_RX_CTX and several contexts per RDM endpoint");
	hints = oxt_hints(FI_EP_RDM);
	hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_NAMED_RX_CTX | FI_SOURCE;
	hints->ep_attr->tx_ctx_cnt = N;
	hints->ep_attr->rx_ctx_cnt = N;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &fi), 0);
	EXPECT(fi->caps & FI_NAMED_RX_CTX, "caps 0x%llx", (unsigned long long)fi->caps);
	EXPECT_EQ(fi->ep_attr->tx_ctx_cnt, N);
	EXPECT_EQ(fi->ep_attr->rx_ctx_cnt, N);
	EXPECT(fi->domain_attr->max_ep_tx_ctx >= N && fi->domain_attr->max_ep_rx_ctx >= N, "max_ep_tx_ctx %zu",
	       fi->domain_attr->max_ep_tx_ctx);
	{
		struct fi_info *none = NULL;
		hints->ep_attr->tx_ctx_cnt = fi->domain_attr->max_ep_tx_ctx + 1;
		EXPECT_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &none), -FI_ENODATA);
		fi_freeinfo(none);
	}
	fi_freeinfo(hints);
	one = fi->next;
	fi->next = NULL;
	fi_freeinfo(one);
	memset(&e, 0, sizeof e);
	e.info = fi;
	REQUIRE_RC(fi_fabric(fi->fabric_attr, &e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(e.fabric, fi, &e.domain, NULL), 0);

	OXT_GROUP("refused: fi_endpoint with several contexts, rx_ctx_bits 17, a count above the most");
	{
		struct fid_ep *ep = NULL;
		struct fid_av *av = NULL;
		struct fi_av_attr aa = { .type = FI_AV_TABLE, .rx_ctx_bits = 17 };
		struct fi_info *big = fi_dupinfo(fi);

		EXPECT_RC(fi_endpoint(e.domain, fi, &ep, NULL), -FI_EINVAL);
		EXPECT_RC(fi_av_open(e.domain, &aa, &av, NULL), -FI_EINVAL);
		big->ep_attr->rx_ctx_cnt = fi->domain_attr->max_ep_rx_ctx + 1;
		EXPECT_RC(fi_scalable_ep(e.domain, big, &ep, NULL), -FI_EINVAL);
		fi_freeinfo(big);
	}

	sep_open(&e, fi, &a);
	sep_open(&e, fi, &b);
	REQUIRE_RC(fi_av_insert(a.av, b.name, 1, &b_at_a, 0, NULL), 1);
	REQUIRE_RC(fi_av_insert(b.av, a.name, 1, &a_at_b, 0, NULL), 1);

	OXT_GROUP("every transmit context to every receive context: that receive context and CQ only, source fi_rx_addr");
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < N; j++) {
			size_t n = 100 + 10 * i + j;
			unsigned seed = 3 * i + j;

			oxt_fill(out, n, seed);
			memset(in, 0, sizeof in);
			REQUIRE_RC(fi_recv(b.rx[j], in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
			REQUIRE_RC(fi_send(a.tx[i], out, n, NULL, fi_rx_addr(b_at_a, j, BITS), &ctx[1]), 0);
			EXPECT_EQ(next(a.txcq[i], &a, &b, &ce, &src), 0);
			EXPECT(ce.op_context == &ctx[1], "tx %d -> rx %d: send completion context", i, j);
			EXPECT_EQ(next(b.rxcq[j], &a, &b, &ce, &src), 0);
			EXPECT(ce.op_context == &ctx[0], "tx %d -> rx %d: recv completion context", i, j);
			EXPECT_EQ(ce.len, n);
			EXPECT(oxt_same(in, n, seed), "tx %d -> rx %d: data differs", i, j);
			/* (Context 0 sends from the name inserted; another
			 * context's address was not inserted.) */
			EXPECT_EQ(src, i == 0 ? a_at_b : FI_ADDR_NOTAVAIL);
			EXPECT_EQ(rx_ready(&b), 0);
			EXPECT_EQ(rx_ready(&a), 0);
		}
	}

	OXT_GROUP("a context's own address (fi_getname), inserted, is its source, and a reply to it lands in its index's receive context");
	{
		char name[64];
		size_t len = sizeof name;
		fi_addr_t tx2;

		REQUIRE_RC(fi_getname(&a.tx[2]->fid, name, &len), 0);
		REQUIRE_RC(fi_av_insert(b.av, name, 1, &tx2, 0, NULL), 1);
		REQUIRE_RC(fi_recv(a.rx[2], in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
		REQUIRE_RC(fi_recv(b.rx[1], in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[2]), 0);
		REQUIRE_RC(fi_send(a.tx[2], out, 8, NULL, fi_rx_addr(b_at_a, 1, BITS), &ctx[1]), 0);
		EXPECT_EQ(next(b.rxcq[1], &a, &b, &ce, &src), 0);
		EXPECT_EQ(src, tx2);
		EXPECT_EQ(next(a.txcq[2], &a, &b, &ce, NULL), 0);
	}
	REQUIRE_RC(fi_send(b.tx[0], out, 8, NULL, src, &ctx[3]), 0);
	EXPECT_EQ(next(a.rxcq[2], &a, &b, &ce, NULL), 0);
	EXPECT(ce.op_context == &ctx[0], "the reply landed elsewhere");
	EXPECT_EQ(next(b.txcq[0], &a, &b, &ce, NULL), 0);

	OXT_GROUP("tagged messages through contexts");
	oxt_fill(out, 64, 9);
	REQUIRE_RC(fi_trecv(b.rx[2], in, sizeof in, NULL, FI_ADDR_UNSPEC, 0x77, 0, &ctx[0]), 0);
	REQUIRE_RC(fi_tsend(a.tx[1], out, 64, NULL, fi_rx_addr(b_at_a, 2, BITS), 0x77, &ctx[1]), 0);
	EXPECT_EQ(next(b.rxcq[2], &a, &b, &ce, NULL), 0);
	EXPECT_EQ(ce.tag, 0x77);
	EXPECT(oxt_same(in, 64, 9), "tagged data differs");
	EXPECT_EQ(next(a.txcq[1], &a, &b, &ce, NULL), 0);

	OXT_GROUP("RMA write and read through a transmit context, to any receive context's index");
	{
		struct fid_mr *mr;
		static unsigned char target[4096];
		uint64_t base;

		REQUIRE_RC(fi_mr_reg(e.domain, target, sizeof target, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr,
				     NULL), 0);
		if (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) {
			/* One MR bound through two contexts of one endpoint. */
			REQUIRE_RC(fi_mr_bind(mr, &b.rx[0]->fid, 0), 0);
			REQUIRE_RC(fi_mr_bind(mr, &b.rx[1]->fid, 0), 0);
			EXPECT_RC(fi_mr_bind(mr, &a.rx[0]->fid, 0), -FI_EINVAL);
			REQUIRE_RC(fi_mr_enable(mr), 0);
		}
		base = (fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
		oxt_fill(out, 4096, 21);
		REQUIRE_RC(fi_write(a.tx[0], out, 4096, NULL, fi_rx_addr(b_at_a, 2, BITS), base, fi_mr_key(mr),
				    &ctx[1]), 0);
		EXPECT_EQ(next(a.txcq[0], &a, &b, &ce, NULL), 0);
		EXPECT(oxt_same(target, 4096, 21), "written data differs");
		memset(in, 0, sizeof in);
		REQUIRE_RC(fi_read(a.tx[1], in, 4096, NULL, fi_rx_addr(b_at_a, 0, BITS), base, fi_mr_key(mr), &ctx[1]),
			   0);
		EXPECT_EQ(next(a.txcq[1], &a, &b, &ce, NULL), 0);
		EXPECT(oxt_same(in, 4096, 21), "read data differs");
		EXPECT_RC(fi_close(&mr->fid), 0);
	}

	OXT_GROUP("a plain endpoint reaches receive context 0 by the scalable endpoint's name");
	{
		struct fi_info *plain = fi_dupinfo(fi);
		struct fid_ep *ep;
		struct fid_cq *cq;
		struct fid_av *av;
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 16 };
		struct fi_av_attr aa = { .type = FI_AV_TABLE };
		fi_addr_t to;

		plain->ep_attr->tx_ctx_cnt = 1;
		plain->ep_attr->rx_ctx_cnt = 1;
		REQUIRE_RC(fi_endpoint(e.domain, plain, &ep, NULL), 0);
		REQUIRE_RC(fi_cq_open(e.domain, &ca, &cq, NULL), 0);
		REQUIRE_RC(fi_av_open(e.domain, &aa, &av, NULL), 0);
		REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
		REQUIRE_RC(fi_enable(ep), 0);
		REQUIRE_RC(fi_av_insert(av, b.name, 1, &to, 0, NULL), 1);
		oxt_fill(out, 32, 5);
		REQUIRE_RC(fi_recv(b.rx[0], in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
		REQUIRE_RC(fi_send(ep, out, 32, NULL, to, &ctx[1]), 0);
		{
			/* (Both sides progressed: over TCP the plain endpoint's
			 * send waits on its connect.) */
			double until = oxt_now_ms() + 5000;
			ssize_t sent = -FI_EAGAIN, got = -FI_EAGAIN;
			struct fi_cq_tagged_entry re;
			while (oxt_now_ms() < until && (sent == -FI_EAGAIN || got == -FI_EAGAIN)) {
				if (sent == -FI_EAGAIN)
					sent = fi_cq_read(cq, &ce, 1);
				if (got == -FI_EAGAIN)
					got = fi_cq_read(b.rxcq[0], &re, 1);
				poke(&a, &b);
			}
			EXPECT_EQ(sent, 1);
			EXPECT_EQ(got, 1);
			EXPECT(got != 1 || re.op_context == &ctx[0], "the receive completion's context");
		}
		EXPECT(oxt_same(in, 32, 5), "data from the plain endpoint differs");
		EXPECT_RC(fi_close(&ep->fid), 0);
		EXPECT_RC(fi_close(&cq->fid), 0);
		EXPECT_RC(fi_close(&av->fid), 0);
		fi_freeinfo(plain);
	}

	OXT_GROUP("refused: data on the scalable endpoint or in a context's other direction");
	EXPECT_RC(fi_send(a.sep, out, 8, NULL, b_at_a, &ctx[1]), -FI_EINVAL);
	EXPECT_RC(fi_recv(a.tx[0], in, 8, NULL, FI_ADDR_UNSPEC, &ctx[1]), -FI_EOPNOTSUPP);
	EXPECT_RC(fi_trecv(a.tx[0], in, 8, NULL, FI_ADDR_UNSPEC, 1, 0, &ctx[1]), -FI_EOPNOTSUPP);
	EXPECT_RC(fi_send(a.rx[0], out, 8, NULL, b_at_a, &ctx[1]), -FI_EOPNOTSUPP);
	EXPECT_RC(fi_write(a.rx[0], out, 8, NULL, b_at_a, 0, 0, &ctx[1]), -FI_EOPNOTSUPP);

	OXT_GROUP("refused: other-direction bindings, indexes out of range, a context twice or after fi_enable");
	{
		struct fid_ep *c = NULL;
		struct fid_cq *cq;
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 16 };

		REQUIRE_RC(fi_cq_open(e.domain, &ca, &cq, NULL), 0);
		EXPECT_RC(fi_ep_bind(a.tx[1], &cq->fid, FI_RECV), -FI_EBADFLAGS);
		EXPECT_RC(fi_ep_bind(a.rx[1], &cq->fid, FI_TRANSMIT), -FI_EBADFLAGS);
		EXPECT_RC(fi_scalable_ep_bind(a.sep, &cq->fid, FI_TRANSMIT), -FI_EINVAL);
		EXPECT_RC(fi_ep_bind(a.tx[1], &a.av->fid, 0), -FI_EINVAL);
		EXPECT_RC(fi_close(&cq->fid), 0);
		EXPECT_RC(fi_tx_context(a.sep, N, NULL, &c, NULL), -FI_EINVAL);
		EXPECT_RC(fi_rx_context(a.sep, -1, NULL, &c, NULL), -FI_EINVAL);
		/* (Made before fi_enable: every context is.) */
		EXPECT_RC(fi_tx_context(a.sep, 0, NULL, &c, NULL), -FI_EOPBADSTATE);
	}
	{
		struct fid_ep *s2, *c1, *c2 = NULL;

		REQUIRE_RC(fi_scalable_ep(e.domain, fi, &s2, NULL), 0);
		REQUIRE_RC(fi_rx_context(s2, 1, NULL, &c1, NULL), 0);
		EXPECT_RC(fi_rx_context(s2, 1, NULL, &c2, NULL), -FI_EALREADY);
		EXPECT_RC(fi_enable(s2), -FI_ENOAV);
		EXPECT_RC(fi_close(&c1->fid), 0);
		EXPECT_RC(fi_close(&s2->fid), 0);
	}

	sep_close(&a);
	sep_close(&b);
	oxt_close(&e);
	return oxt_done();
}
