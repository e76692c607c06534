/*
 * dgram: FI_EP_DGRAM endpoints (fi_endpoint(3)): getinfo offers them with
 * FI_MSG and a max_msg_size of one frame (8080 bytes); two endpoints
 * exchange datagrams up to that size (every byte checked, remote CQ data,
 * the source address); a larger one is -FI_EMSGSIZE at the call; RMA and
 * atomics, which a datagram endpoint does not offer, are -FI_EOPNOTSUPP.
 */
#include "oxt.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

struct dep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	char name[64];
};

static void dep_open(struct oxt_env *e, struct dep *d)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA, .size = 64 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	size_t len = sizeof d->name;

	REQUIRE_RC(fi_cq_open(e->domain, &ca, &d->cq, NULL), 0);
	REQUIRE_RC(fi_av_open(e->domain, &aa, &d->av, NULL), 0);
	REQUIRE_RC(fi_endpoint(e->domain, e->info, &d->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(d->ep, &d->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(d->ep, &d->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(d->ep), 0);
	REQUIRE_RC(fi_getname(&d->ep->fid, d->name, &len), 0);
}

static void dep_close(struct dep *d)
{
	EXPECT_RC(fi_close(&d->ep->fid), 0);
	EXPECT_RC(fi_close(&d->av->fid), 0);
	EXPECT_RC(fi_close(&d->cq->fid), 0);
}

/* The next completion of `d` within 5 s (progressing `other` too). */
static int next(struct dep *d, struct dep *other, struct fi_cq_data_entry *e, fi_addr_t *src)
{
	double until = oxt_now_ms() + 5000;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_readfrom(d->cq, e, 1, src);
		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			void *ctx;
			return OXT_READERR(d->cq, &ctx);
		}
		fi_cq_read(other->cq, NULL, 0);
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct oxt_env e;
	struct dep a, b;
	fi_addr_t a_at_b, b_at_a, src;
	static unsigned char out[8081], in[8192];
	struct fi_cq_data_entry ce;
	uint64_t one = 1;
	int ctx[4];

	(void)argc;
	oxt_init(argv[0]);

	OXT_GROUP("getinfo offers FI_EP_DGRAM: FI_MSG, max_msg_size 8080 (one frame), no RMA");
	oxt_open_type(&e, FI_EP_DGRAM);
	EXPECT_EQ(e.info->ep_attr->type, FI_EP_DGRAM);
	EXPECT_EQ(e.info->ep_attr->max_msg_size, 8080);
	EXPECT(e.info->caps & FI_MSG, "no FI_MSG");
	EXPECT((e.info->caps & (FI_RMA | FI_ATOMIC | FI_TAGGED)) == 0, "caps 0x%llx", (unsigned long long)e.info->caps);
	dep_open(&e, &a);
	dep_open(&e, &b);
	REQUIRE_RC(fi_av_insert(a.av, b.name, 1, &b_at_a, 0, NULL), 1);
	REQUIRE_RC(fi_av_insert(b.av, a.name, 1, &a_at_b, 0, NULL), 1);

	OXT_GROUP("datagrams of 0, 8 and 8080 bytes arrive whole, with their source and CQ data");
	{
		size_t sizes[] = { 0, 8, 8080 };
		for (unsigned k = 0; k < 3; k++) {
			size_t n = sizes[k];

			oxt_fill(out, n, 40 + k);
			memset(in, 0, sizeof in);
			REQUIRE_RC(fi_recv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
			REQUIRE_RC(fi_senddata(a.ep, out, n, NULL, 0xd0 + k, b_at_a, &ctx[1]), 0);
			EXPECT_EQ(next(&a, &b, &ce, &src), 0);
			EXPECT(ce.op_context == &ctx[1], "send completion context");
			EXPECT_EQ(next(&b, &a, &ce, &src), 0);
			EXPECT(ce.op_context == &ctx[0], "recv completion context");
			EXPECT_EQ(ce.len, n);
			EXPECT_EQ(ce.data, 0xd0 + k);
			EXPECT_EQ(src, a_at_b);
			EXPECT(oxt_same(in, n, 40 + k), "datagram of %zu bytes differs", n);
		}
	}

	OXT_GROUP("a datagram over max_msg_size is -FI_EMSGSIZE; RMA and atomics -FI_EOPNOTSUPP");
	EXPECT_RC(fi_send(a.ep, out, 8081, NULL, b_at_a, &ctx[2]), -FI_EMSGSIZE);
	EXPECT_RC(fi_write(a.ep, out, 8, NULL, b_at_a, 0, 0, &ctx[2]), -FI_EOPNOTSUPP);
	EXPECT_RC(fi_atomic(a.ep, &one, 1, NULL, b_at_a, 0, 0, FI_UINT64, FI_SUM, &ctx[2]), -FI_EOPNOTSUPP);
	/* still working after the refusals */
	REQUIRE_RC(fi_recv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
	REQUIRE_RC(fi_send(a.ep, out, 16, NULL, b_at_a, &ctx[1]), 0);
	EXPECT_EQ(next(&a, &b, &ce, &src), 0);
	EXPECT_EQ(next(&b, &a, &ce, &src), 0);
	EXPECT_EQ(ce.len, 16);

	dep_close(&a);
	dep_close(&b);
	oxt_close(&e);
	return oxt_done();
}
