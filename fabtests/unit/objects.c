/*
 * objects: opening and closing every oxmr object, close ordering
 * (-FI_EBUSY), endpoint binding and enabling rules, names, options and
 * controls (fi_fabric(3), fi_domain(3), fi_endpoint(3), fi_cm(3)).
 *
 * Memory registration is deliberately not tested here.
 */
#include "oxt.h"
#include <rdma/fi_collective.h>

static struct fid_cq *open_cq(struct fid_domain *d)
{
	struct fi_cq_attr a = { .format = FI_CQ_FORMAT_CONTEXT,
				.wait_obj = FI_WAIT_NONE };
	struct fid_cq *cq = NULL;

	REQUIRE_RC(fi_cq_open(d, &a, &cq, NULL), 0);
	return cq;
}

static struct fid_av *open_av(struct fid_domain *d)
{
	struct fi_av_attr a = { .type = FI_AV_TABLE };
	struct fid_av *av = NULL;

	REQUIRE_RC(fi_av_open(d, &a, &av, NULL), 0);
	return av;
}

static struct fid_cntr *open_cntr(struct fid_domain *d)
{
	struct fi_cntr_attr a = { .events = FI_CNTR_EVENTS_COMP,
				  .wait_obj = FI_WAIT_NONE };
	struct fid_cntr *c = NULL;

	REQUIRE_RC(fi_cntr_open(d, &a, &c, NULL), 0);
	return c;
}

static struct fid_eq *open_eq(struct fid_fabric *f)
{
	struct fi_eq_attr a = { .size = 8, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *eq = NULL;

	REQUIRE_RC(fi_eq_open(f, &a, &eq, NULL), 0);
	return eq;
}

static struct fid_ep *open_ep(struct oxt_env *e)
{
	struct fid_ep *ep = NULL;

	REQUIRE_RC(fi_endpoint(e->domain, e->info, &ep, NULL), 0);
	return ep;
}

/* An enabled RDM endpoint with a CQ and an AV. */
struct rdm {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
};

static void rdm_open(struct oxt_env *e, struct rdm *r)
{
	r->cq = open_cq(e->domain);
	r->av = open_av(e->domain);
	r->ep = open_ep(e);
	REQUIRE_RC(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(r->ep, &r->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(r->ep), 0);
}

static void rdm_close(struct rdm *r)
{
	EXPECT_RC(fi_close(&r->ep->fid), 0);
	EXPECT_RC(fi_close(&r->av->fid), 0);
	EXPECT_RC(fi_close(&r->cq->fid), 0);
}

static void test_open_close(void)
{
	struct oxt_env e, m;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_cntr *cntr;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_pep *pep = NULL;

	OXT_GROUP("fabric, domain, EQ, CQ, counter, AV, RDM endpoint open and close");
	oxt_open(&e);
	eq = open_eq(e.fabric);
	cq = open_cq(e.domain);
	cntr = open_cntr(e.domain);
	av = open_av(e.domain);
	ep = open_ep(&e);
	EXPECT_EQ(ep->fid.fclass, FI_CLASS_EP);
	EXPECT_EQ(cq->fid.fclass, FI_CLASS_CQ);
	EXPECT_EQ(eq->fid.fclass, FI_CLASS_EQ);
	EXPECT_EQ(av->fid.fclass, FI_CLASS_AV);
	EXPECT_EQ(cntr->fid.fclass, FI_CLASS_CNTR);
	EXPECT_EQ(e.domain->fid.fclass, FI_CLASS_DOMAIN);
	EXPECT_EQ(e.fabric->fid.fclass, FI_CLASS_FABRIC);
	EXPECT_RC(fi_close(&ep->fid), 0);
	/* an info asking a capability oxmr does not offer (FI_COLLECTIVE):
	 * refused by fi_endpoint, not silently ignored later */
	{
		uint64_t caps = e.info->caps;

		e.info->caps |= FI_COLLECTIVE;
		ep = NULL;
		EXPECT_RC(fi_endpoint(e.domain, e.info, &ep, NULL), -FI_EINVAL);
		if (ep)
			fi_close(&ep->fid);
		e.info->caps = caps;
	}
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	EXPECT_RC(fi_close(&eq->fid), 0);
	oxt_close(&e);

	OXT_GROUP("MSG endpoint and passive endpoint open and close");
	oxt_open_type(&m, FI_EP_MSG);
	EXPECT_RC(fi_passive_ep(m.fabric, m.info, &pep, NULL), 0);
	if (pep) {
		EXPECT_EQ(pep->fid.fclass, FI_CLASS_PEP);
		EXPECT_RC(fi_close(&pep->fid), 0);
	}
	ep = NULL;
	EXPECT_RC(fi_endpoint(m.domain, m.info, &ep, NULL), 0);
	if (ep)
		EXPECT_RC(fi_close(&ep->fid), 0);
	oxt_close(&m);
}

static void test_ebusy(void)
{
	struct oxt_env e;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_cntr *cntr;
	struct fid_eq *eq;
	struct fid_ep *ep;

	OXT_GROUP("fi_close is -FI_EBUSY while children or bindings exist");
	oxt_open(&e);

	/* parents with open children */
	EXPECT_RC(fi_close(&e.fabric->fid), -FI_EBUSY); /* open domain */
	cq = open_cq(e.domain);
	EXPECT_RC(fi_close(&e.domain->fid), -FI_EBUSY); /* open CQ */
	EXPECT_RC(fi_close(&cq->fid), 0);
	cntr = open_cntr(e.domain);
	EXPECT_RC(fi_close(&e.domain->fid), -FI_EBUSY); /* open counter */
	EXPECT_RC(fi_close(&cntr->fid), 0);
	av = open_av(e.domain);
	EXPECT_RC(fi_close(&e.domain->fid), -FI_EBUSY); /* open AV */
	EXPECT_RC(fi_close(&av->fid), 0);

	/* An open MR holds its domain; an MR's bindings are weak, and its own
	 * fi_close is never -FI_EBUSY (it gives the domain back: the domain's
	 * close below succeeds). */
	{
		static char buf[4096];
		struct fid_mr *mr = NULL;

		REQUIRE_RC(fi_mr_reg(e.domain, buf, sizeof buf, FI_REMOTE_READ, 0, 7, 0, &mr, NULL), 0);
		EXPECT_RC(fi_close(&e.domain->fid), -FI_EBUSY); /* open MR */
		cntr = open_cntr(e.domain);
		REQUIRE_RC(fi_mr_bind(mr, &cntr->fid, FI_REMOTE_READ), 0);
		EXPECT_RC(fi_close(&cntr->fid), 0);
		EXPECT_RC(fi_close(&mr->fid), 0);
	}

	/* objects bound to an endpoint */
	cq = open_cq(e.domain);
	av = open_av(e.domain);
	cntr = open_cntr(e.domain);
	ep = open_ep(&e);
	EXPECT_RC(fi_close(&e.domain->fid), -FI_EBUSY); /* open endpoint */
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cntr->fid, FI_SEND | FI_RECV), 0);
	EXPECT_RC(fi_close(&cq->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&av->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&cntr->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);

	/* an EQ bound to an AV; a fabric with an open EQ */
	eq = open_eq(e.fabric);
	REQUIRE_RC(oxt_av_bind(av, &eq->fid, 0), 0);
	EXPECT_RC(fi_close(&eq->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&e.domain->fid), 0);
	e.domain = NULL;
	EXPECT_RC(fi_close(&e.fabric->fid), -FI_EBUSY); /* open EQ */
	EXPECT_RC(fi_close(&eq->fid), 0);
	oxt_close(&e);
}

static void test_enable_and_bind(void)
{
	struct oxt_env e, m;
	struct fid_cq *cq, *cq2;
	struct fid_av *av;
	struct fid_cntr *cntr, *cntr2;
	struct fid_eq *eq;
	struct fid_ep *ep;

	oxt_open(&e);

	OXT_GROUP("fi_enable: RDM needs an AV (-FI_ENOAV) and a CQ (-FI_ENOCQ)");
	cq = open_cq(e.domain);
	av = open_av(e.domain);
	ep = open_ep(&e);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	EXPECT_RC(fi_enable(ep), -FI_ENOAV);
	EXPECT_RC(fi_close(&ep->fid), 0);
	ep = open_ep(&e);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	EXPECT_RC(fi_enable(ep), -FI_ENOCQ);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	EXPECT_RC(fi_enable(ep), 0);

	OXT_GROUP("fi_ep_bind after fi_enable is -FI_EOPBADSTATE");
	cntr = open_cntr(e.domain);
	EXPECT_RC(fi_ep_bind(ep, &cntr->fid, FI_SEND), -FI_EOPBADSTATE);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);

	OXT_GROUP("fi_ep_bind of a CQ: flag checks and one CQ per direction");
	cq2 = open_cq(e.domain);
	ep = open_ep(&e);
	EXPECT_RC(fi_ep_bind(ep, &cq->fid, 0), -FI_EBADFLAGS);
	EXPECT_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_READ),
		  -FI_EBADFLAGS);
	EXPECT_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT), 0);
	EXPECT_RC(fi_ep_bind(ep, &cq2->fid, FI_TRANSMIT), -FI_EINVAL);
	EXPECT_RC(fi_ep_bind(ep, &cq2->fid, FI_RECV | FI_SELECTIVE_COMPLETION),
		  0);
	EXPECT_RC(fi_ep_bind(ep, &cq->fid, FI_RECV), -FI_EINVAL);
	EXPECT_RC(fi_ep_bind(ep, &av->fid, 0), 0);

	OXT_GROUP("fi_ep_bind of counters: one counter per event type");
	cntr = open_cntr(e.domain);
	cntr2 = open_cntr(e.domain);
	EXPECT_RC(fi_ep_bind(ep, &cntr->fid, FI_SEND | FI_RECV), 0);
	/* fi_endpoint(3): "a EP may not bind to two counters both using FI_WRITE" */
	EXPECT(fi_ep_bind(ep, &cntr2->fid, FI_SEND | FI_WRITE) < 0,
	       "a second counter was bound for FI_SEND");
	EXPECT_RC(fi_ep_bind(ep, &cntr2->fid, FI_WRITE | FI_READ), 0);
	EXPECT_RC(fi_enable(ep), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&cntr2->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);
	EXPECT_RC(fi_close(&cq2->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);

	OXT_GROUP("fi_enable: MSG endpoint needs an EQ (-FI_ENOEQ)");
	oxt_open_type(&m, FI_EP_MSG);
	cq = open_cq(m.domain);
	eq = open_eq(m.fabric);
	ep = open_ep(&m);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	EXPECT_RC(fi_enable(ep), -FI_ENOEQ);
	EXPECT_RC(fi_ep_bind(ep, &eq->fid, 0), 0);
	EXPECT_RC(fi_enable(ep), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&eq->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&m);
}

static void test_data_path(void)
{
	struct oxt_env e;
	struct rdm r;
	char buf[64] = "oxmr";
	struct fi_context ctx[2];
	size_t len = sizeof(struct sockaddr_in);
	struct sockaddr_in self;
	fi_addr_t peer = FI_ADDR_NOTAVAIL;

	oxt_open(&e);
	rdm_open(&e, &r);
	REQUIRE_RC(fi_getname(&r.ep->fid, &self, &len), 0);
	REQUIRE_RC(fi_av_insert(r.av, &self, 1, &peer, 0, NULL), 1);

	OXT_GROUP("fi_cancel with nothing posted is -FI_ENOENT");
	EXPECT_RC(fi_cancel(&r.ep->fid, &ctx[0]), -FI_ENOENT);

	OXT_GROUP("send to self: the posted receive gets the bytes, both sides complete");
	{
		char in[64] = { 0 };
		struct fi_cq_tagged_entry ent[2];
		int got = 0, spins = 0;
		void *seen[2] = { NULL, NULL };

		EXPECT_RC(fi_recv(r.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
		EXPECT_RC(fi_send(r.ep, buf, 8, NULL, peer, &ctx[1]), 0);
		while (got < 2 && spins++ < 1000000) {
			ssize_t n = fi_cq_read(r.cq, ent, 1); /* one at a time: any CQ format */
			if (n > 0) {
				for (ssize_t i = 0; i < n; i++)
					seen[got + i] = ent[i].op_context;
				got += (int)n;
			} else if (n != -FI_EAGAIN) {
				EXPECT_RC(n, -FI_EAGAIN);
				break;
			}
		}
		EXPECT_EQ(got, 2);
		EXPECT((seen[0] == &ctx[0] && seen[1] == &ctx[1]) ||
			       (seen[0] == &ctx[1] && seen[1] == &ctx[0]),
		       "completion contexts %p %p are not the recv's and the send's", seen[0], seen[1]);
		EXPECT(memcmp(in, buf, 8) == 0, "received bytes differ from the sent ones");
	}

	OXT_GROUP("a posted receive can be cancelled: -FI_ECANCELED error completion");
	{
		char in[8];
		struct fi_cq_err_entry err = { 0 };
		struct fi_cq_tagged_entry ent;

		EXPECT_RC(fi_recv(r.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
		EXPECT_RC(fi_cancel(&r.ep->fid, &ctx[0]), 0);
		EXPECT_RC(fi_cq_read(r.cq, &ent, 1), -FI_EAVAIL);
		EXPECT_RC(fi_cq_readerr(r.cq, &err, 0), 1);
		EXPECT_EQ(err.err, FI_ECANCELED);
		EXPECT(err.op_context == &ctx[0], "cancelled completion has the wrong context");
	}

	OXT_GROUP("collectives are not implemented yet (-FI_ENOSYS)");
	EXPECT_RC(fi_barrier(r.ep, peer, &ctx[1]), -FI_ENOSYS);

	rdm_close(&r);
	oxt_close(&e);
}

/* connect() a TCP socket to `a`: true when something listens there. */
static bool listening(const struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool ok;

	if (fd < 0)
		return false;
	ok = connect(fd, (const struct sockaddr *)a, sizeof *a) == 0;
	close(fd);
	return ok;
}

static void test_names(void)
{
	struct oxt_env e, m;
	struct rdm r;
	struct sockaddr_in name, name2, to;
	unsigned char small[16];
	size_t len;
	struct fid_ep *ep;
	struct fid_pep *pep = NULL;

	oxt_open(&e);
	rdm_open(&e, &r);

	OXT_GROUP("fi_getname on an RDM endpoint names a listening TCP socket");
	memset(&name, 0, sizeof name);
	len = sizeof name;
	EXPECT_RC(fi_getname(&r.ep->fid, &name, &len), 0);
	EXPECT_EQ(len, sizeof(struct sockaddr_in));
	EXPECT_EQ(name.sin_family, AF_INET);
	EXPECT(name.sin_port != 0, "port is 0");
	EXPECT_EQ(ntohl(name.sin_addr.s_addr), INADDR_LOOPBACK);
	EXPECT(listening(&name), "connect() to %s:%u failed: %s",
	       inet_ntoa(name.sin_addr), ntohs(name.sin_port),
	       strerror(errno));

	OXT_GROUP("fi_getname with a short buffer: -FI_ETOOSMALL, addrlen 16");
	len = 4;
	memset(small, 0xAA, sizeof small);
	EXPECT_RC(fi_getname(&r.ep->fid, small, &len), -FI_ETOOSMALL);
	EXPECT_EQ(len, sizeof(struct sockaddr_in));
	EXPECT(small[4] == 0xAA, "fi_getname wrote past the 4-byte buffer");

	/*
	 * fi_cm(3): "If the actual address is larger than what can fit into
	 * the buffer, it will be truncated and -FI_ETOOSMALL will be returned."
	 */
	OXT_GROUP("fi_getname with a short buffer truncates the name (fi_cm(3))");
	EXPECT(memcmp(small, &name, 4) == 0,
	       "the 4-byte buffer holds %02x %02x %02x %02x, expected the first 4 bytes of the name (%02x %02x %02x %02x)",
	       small[0], small[1], small[2], small[3],
	       ((unsigned char *)&name)[0], ((unsigned char *)&name)[1],
	       ((unsigned char *)&name)[2], ((unsigned char *)&name)[3]);
	rdm_close(&r);

	OXT_GROUP("fi_setname before fi_enable moves the listener");
	ep = open_ep(&e);
	to = oxt_sin("127.0.0.1", 0);
	EXPECT_RC(fi_setname(&ep->fid, &to, sizeof to), 0);
	memset(&name2, 0, sizeof name2);
	len = sizeof name2;
	EXPECT_RC(fi_getname(&ep->fid, &name2, &len), 0);
	EXPECT_EQ(name2.sin_family, AF_INET);
	EXPECT_EQ(ntohl(name2.sin_addr.s_addr), INADDR_LOOPBACK);
	EXPECT(name2.sin_port != 0, "port is 0 after fi_setname(port 0)");
	EXPECT(listening(&name2), "connect() to the new name failed: %s",
	       strerror(errno));
	EXPECT_RC(fi_close(&ep->fid), 0);
	oxt_close(&e);

	OXT_GROUP("fi_getname on a passive endpoint names a listening socket");
	oxt_open_type(&m, FI_EP_MSG);
	REQUIRE_RC(fi_passive_ep(m.fabric, m.info, &pep, NULL), 0);
	memset(&name, 0, sizeof name);
	len = sizeof name;
	EXPECT_RC(fi_getname(&pep->fid, &name, &len), 0);
	EXPECT_EQ(len, sizeof(struct sockaddr_in));
	EXPECT_EQ(name.sin_family, AF_INET);
	EXPECT(name.sin_port != 0, "port is 0");
	EXPECT(listening(&name), "connect() to the passive endpoint failed: %s",
	       strerror(errno));
	EXPECT_RC(fi_close(&pep->fid), 0);
	oxt_close(&m);
}

static void test_options(void)
{
	struct oxt_env e, m;
	struct fid_ep *ep;
	struct fid_pep *pep = NULL;
	size_t v, len;
	uint32_t small;

	oxt_open(&e);
	ep = open_ep(&e);

	OXT_GROUP("fi_getopt/fi_setopt FI_OPT_MIN_MULTI_RECV");
	v = 0;
	len = sizeof v;
	EXPECT_RC(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV,
			    &v, &len),
		  0);
	EXPECT_EQ(v, 64);
	EXPECT_EQ(len, sizeof(size_t));
	v = 4096;
	EXPECT_RC(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV,
			    &v, sizeof v),
		  0);
	v = 0;
	len = sizeof v;
	EXPECT_RC(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV,
			    &v, &len),
		  0);
	EXPECT_EQ(v, 4096);

	OXT_GROUP("FI_OPT_CM_DATA_SIZE is readable (256) and read-only");
	v = 0;
	len = sizeof v;
	EXPECT_RC(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v,
			    &len),
		  0);
	EXPECT_EQ(v, 256);
	v = 16;
	EXPECT(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v,
			 sizeof v) < 0,
	       "fi_setopt(FI_OPT_CM_DATA_SIZE) succeeded on a read-only option");

	OXT_GROUP("fi_getopt errors: unknown level, short optlen");
	len = sizeof v;
	EXPECT_RC(fi_getopt(&ep->fid, 12345, FI_OPT_MIN_MULTI_RECV, &v, &len),
		  -FI_ENOPROTOOPT);
	EXPECT_RC(fi_setopt(&ep->fid, 12345, FI_OPT_MIN_MULTI_RECV, &v,
			    sizeof v),
		  -FI_ENOPROTOOPT);
	len = sizeof small;
	EXPECT_RC(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV,
			    &small, &len),
		  -FI_ETOOSMALL);
	EXPECT_RC(fi_close(&ep->fid), 0);
	oxt_close(&e);

	OXT_GROUP("FI_OPT_CM_DATA_SIZE on MSG and passive endpoints");
	oxt_open_type(&m, FI_EP_MSG);
	ep = open_ep(&m);
	v = 0;
	len = sizeof v;
	EXPECT_RC(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v,
			    &len),
		  0);
	EXPECT_EQ(v, 256);
	EXPECT_RC(fi_close(&ep->fid), 0);
	REQUIRE_RC(fi_passive_ep(m.fabric, m.info, &pep, NULL), 0);
	v = 0;
	len = sizeof v;
	EXPECT_RC(fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v,
			    &len),
		  0);
	EXPECT_EQ(v, 256);
	EXPECT_RC(fi_close(&pep->fid), 0);
	oxt_close(&m);
}

static void test_opsflag(void)
{
	struct oxt_env e;
	struct fi_info *hints, *info = NULL;
	struct fid_ep *ep = NULL;
	uint64_t flags;

	OXT_GROUP("fi_control FI_GETOPSFLAG/FI_SETOPSFLAG");
	oxt_open(&e);
	hints = oxt_hints(FI_EP_RDM);
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints,
			      &info),
		   0);
	fi_freeinfo(hints);
	REQUIRE_EQ(info->tx_attr->op_flags, FI_DELIVERY_COMPLETE);
	REQUIRE_RC(fi_endpoint(e.domain, info, &ep, NULL), 0);

	flags = FI_TRANSMIT;
	EXPECT_RC(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	EXPECT_EQ(flags & ~(uint64_t)FI_TRANSMIT, FI_DELIVERY_COMPLETE);
	flags = FI_RECV;
	EXPECT_RC(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	EXPECT_EQ(flags & ~(uint64_t)FI_RECV, 0);

	flags = FI_TRANSMIT | FI_INJECT_COMPLETE;
	EXPECT_RC(fi_control(&ep->fid, FI_SETOPSFLAG, &flags), 0);
	flags = FI_TRANSMIT;
	EXPECT_RC(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	EXPECT_EQ(flags & ~(uint64_t)FI_TRANSMIT, FI_INJECT_COMPLETE);

	/* fi_endpoint(3): FI_TRANSMIT or FI_RECV, not both */
	flags = FI_TRANSMIT | FI_RECV;
	EXPECT(fi_control(&ep->fid, FI_GETOPSFLAG, &flags) < 0,
	       "FI_GETOPSFLAG with both FI_TRANSMIT and FI_RECV succeeded");

	EXPECT_RC(fi_close(&ep->fid), 0);
	fi_freeinfo(info);
	oxt_close(&e);
}

/* Shared transmit contexts: endpoints opened with tx_ctx_cnt
 * FI_SHARED_CONTEXT bind one and send through it; a plain endpoint refuses
 * one; shared receive contexts are not offered. */
static void test_stx(void)
{
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_stx *stx = NULL;
	struct fid_ep *ep[2], *plain, *srx = NULL;
	struct fid_cq *cq;
	struct fid_av *av;
	fi_addr_t a[2];
	char name[2][64], in[2][16], out[2][16];
	size_t len;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .size = 16 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	int ctx[4], done = 0;
	double until;

	OXT_GROUP("shared transmit context: two endpoints send through one; a plain endpoint refuses it and an srx");
	hints->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &info), 0);
	EXPECT_EQ(info->ep_attr->tx_ctx_cnt, FI_SHARED_CONTEXT);
	EXPECT(info->domain_attr->max_ep_stx_ctx >= 1, "max_ep_stx_ctx %zu", info->domain_attr->max_ep_stx_ctx);
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fab, NULL), 0);
	REQUIRE_RC(fi_domain(fab, info, &dom, NULL), 0);
	REQUIRE_RC(fi_stx_context(dom, info->tx_attr, &stx, NULL), 0);
	REQUIRE_RC(fi_cq_open(dom, &ca, &cq, NULL), 0);
	REQUIRE_RC(fi_av_open(dom, &aa, &av, NULL), 0);
	for (int i = 0; i < 2; i++) {
		REQUIRE_RC(fi_endpoint(dom, info, &ep[i], NULL), 0);
		REQUIRE_RC(fi_ep_bind(ep[i], &stx->fid, 0), 0);
		EXPECT_RC(fi_ep_bind(ep[i], &stx->fid, 0), -FI_EINVAL);
		REQUIRE_RC(fi_ep_bind(ep[i], &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		REQUIRE_RC(fi_ep_bind(ep[i], &av->fid, 0), 0);
		REQUIRE_RC(fi_enable(ep[i]), 0);
		len = sizeof name[i];
		REQUIRE_RC(fi_getname(&ep[i]->fid, name[i], &len), 0);
		REQUIRE_RC(fi_av_insert(av, name[i], 1, &a[i], 0, NULL), 1);
	}
	for (int i = 0; i < 2; i++) {
		memset(in[i], 0, sizeof in[i]);
		snprintf(out[i], sizeof out[i], "through stx %d", i);
		REQUIRE_RC(fi_recv(ep[i], in[i], sizeof in[i], NULL, FI_ADDR_UNSPEC, &ctx[i]), 0);
	}
	REQUIRE_RC(fi_send(ep[0], out[0], sizeof out[0], NULL, a[1], &ctx[2]), 0);
	REQUIRE_RC(fi_send(ep[1], out[1], sizeof out[1], NULL, a[0], &ctx[3]), 0);
	until = oxt_now_ms() + 5000;
	while (done < 4 && oxt_now_ms() < until) {
		struct fi_cq_entry e;
		if (fi_cq_read(cq, &e, 1) == 1)
			done++;
	}
	EXPECT_EQ(done, 4);
	EXPECT(!strcmp(in[1], out[0]) && !strcmp(in[0], out[1]), "messages through the stx differ");
	/* an endpoint not opened for a shared context refuses one */
	hints->ep_attr->tx_ctx_cnt = 0;
	fi_freeinfo(info);
	info = NULL;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &info), 0);
	REQUIRE_RC(fi_endpoint(dom, info, &plain, NULL), 0);
	EXPECT_RC(fi_ep_bind(plain, &stx->fid, 0), -FI_EINVAL);
	/* (Shared receive contexts: srx.c; one binds only where asked.) */
	REQUIRE_RC(fi_srx_context(dom, info->rx_attr, &srx, NULL), 0);
	EXPECT_RC(fi_ep_bind(plain, &srx->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_close(&srx->fid), 0);
	EXPECT_RC(fi_close(&plain->fid), 0);
	for (int i = 0; i < 2; i++)
		EXPECT_RC(fi_close(&ep[i]->fid), 0);
	EXPECT_RC(fi_close(&stx->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	EXPECT_RC(fi_close(&dom->fid), 0);
	EXPECT_RC(fi_close(&fab->fid), 0);
	hints->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	fi_freeinfo(info);
	info = NULL;
	EXPECT_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &info), 0);
	EXPECT(info && info->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT, "rx_ctx_cnt FI_SHARED_CONTEXT not reflected");
	fi_freeinfo(info);
	fi_freeinfo(hints);
}

int main(int argc, char **argv)
{
	(void)argc;
	oxt_init(argv[0]);
	test_stx();
	test_open_close();
	test_ebusy();
	test_enable_and_bind();
	test_data_path();
	test_names();
	test_options();
	test_opsflag();
	return oxt_done();
}
