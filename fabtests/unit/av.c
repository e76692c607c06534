/*
 * av: address vector inserts (plain, by service, symmetric), lookups,
 * removal, straddr, and asynchronous inserts reported on an EQ, for both
 * FI_AV_TABLE and FI_AV_MAP (fi_av(3), fi_eq(3)).
 *
 * oxmr's addresses are 16-byte struct sockaddr_in and 28-byte struct
 * sockaddr_in6.
 */
#include "oxt.h"

static struct oxt_env env;

static const char *type_name(enum fi_av_type t)
{
	return t == FI_AV_TABLE ? "FI_AV_TABLE" : "FI_AV_MAP";
}

static char group_buf[256];

/* A group name with the AV type in front. */
static const char *G(enum fi_av_type t, const char *what)
{
	snprintf(group_buf, sizeof group_buf, "[%s] %s", type_name(t), what);
	return group_buf;
}

static struct fid_av *av_open_flags(enum fi_av_type t, uint64_t flags)
{
	struct fi_av_attr a = { .type = t, .count = 1, .flags = flags };
	struct fid_av *av = NULL;

	REQUIRE_RC(fi_av_open(env.domain, &a, &av, NULL), 0);
	return av;
}

static struct fid_av *av_open(enum fi_av_type t)
{
	return av_open_flags(t, 0);
}

static struct fid_eq *eq_open(void)
{
	struct fi_eq_attr a = { .size = 64, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *eq = NULL;

	REQUIRE_RC(fi_eq_open(env.fabric, &a, &eq, NULL), 0);
	return eq;
}

/* fi_av_lookup of `fa` must give exactly the 16 bytes of `want`. */
static void expect_lookup_sin(int line, struct fid_av *av, fi_addr_t fa,
			      const struct sockaddr_in *want)
{
	unsigned char buf[64];
	size_t len = sizeof buf;
	int ret;

	memset(buf, 0xAA, sizeof buf);
	ret = fi_av_lookup(av, fa, buf, &len);
	if (!oxt_check_rc(__FILE__, line, "fi_av_lookup", ret, 0))
		return;
	oxt_check_eq(__FILE__, line, "lookup addrlen", len, sizeof *want);
	if (memcmp(buf, want, sizeof *want)) {
		char ip[INET_ADDRSTRLEN] = "?";
		const struct sockaddr_in *got = (const void *)buf;

		inet_ntop(AF_INET, &got->sin_addr, ip, sizeof ip);
		oxt_fail(__FILE__, line,
			 "lookup of fi_addr %" PRIu64 ": bytes differ (got family %u %s:%u, expected %s:%u)",
			 (uint64_t)fa, got->sin_family, ip,
			 ntohs(got->sin_port), inet_ntoa(want->sin_addr),
			 ntohs(want->sin_port));
	}
}

#define LOOKUP_SIN(av, fa, want) expect_lookup_sin(__LINE__, av, fa, want)

static void test_insert(enum fi_av_type t)
{
	struct fid_av *av = av_open(t);
	struct sockaddr_in two[2] = { oxt_sin("127.0.0.1", 9228),
				      oxt_sin("127.0.0.1", 9229) };
	struct sockaddr_in mixed[2], zero, a3 = oxt_sin("127.0.0.1", 9230),
					   a4 = oxt_sin("127.0.0.1", 9231);
	fi_addr_t fa[2] = { 77, 77 }, fz = 77, fm[2] = { 77, 77 };
	fi_addr_t fs[2] = { 77, 77 };
	int errs[2] = { -1, -1 };
	unsigned char buf[32];
	size_t len;

	OXT_GROUP(G(t, "fi_av_insert of 2 valid addresses returns 2"));
	EXPECT_RC(fi_av_insert(av, two, 2, fa, 0, NULL), 2);
	if (t == FI_AV_TABLE) {
		EXPECT_EQ(fa[0], 0);
		EXPECT_EQ(fa[1], 1);
	} else {
		EXPECT(fa[0] != FI_ADDR_NOTAVAIL && fa[1] != FI_ADDR_NOTAVAIL,
		       "FI_ADDR_NOTAVAIL for a valid address");
		EXPECT(fa[0] != fa[1], "both addresses got fi_addr %" PRIu64,
		       (uint64_t)fa[0]);
	}

	OXT_GROUP(G(t, "fi_av_lookup returns the inserted bytes, addrlen 16"));
	LOOKUP_SIN(av, fa[0], &two[0]);
	LOOKUP_SIN(av, fa[1], &two[1]);

	OXT_GROUP(G(t, "fi_av_lookup into 4 bytes: truncated, addrlen 16, 0"));
	memset(buf, 0xAA, sizeof buf);
	len = 4;
	EXPECT_RC(fi_av_lookup(av, fa[1], buf, &len), 0);
	EXPECT_EQ(len, sizeof(struct sockaddr_in));
	EXPECT(memcmp(buf, &two[1], 4) == 0,
	       "the 4 bytes are not the start of the address");
	EXPECT(buf[4] == 0xAA, "fi_av_lookup wrote past the 4-byte buffer");

	OXT_GROUP(G(t, "an invalid address (16 zero bytes) is not inserted"));
	memset(&zero, 0, sizeof zero);
	EXPECT_RC(fi_av_insert(av, &zero, 1, &fz, 0, NULL), 0);
	EXPECT_EQ(fz, FI_ADDR_NOTAVAIL);

	OXT_GROUP(G(t, "a valid and an invalid address: returns 1"));
	mixed[0] = a3;
	mixed[1] = zero;
	EXPECT_RC(fi_av_insert(av, mixed, 2, fm, 0, NULL), 1);
	EXPECT(fm[0] != FI_ADDR_NOTAVAIL, "valid address got FI_ADDR_NOTAVAIL");
	EXPECT_EQ(fm[1], FI_ADDR_NOTAVAIL);
	if (t == FI_AV_TABLE)
		EXPECT_EQ(fm[0], 2); /* the next index; failures take none */
	LOOKUP_SIN(av, fm[0], &a3);

	OXT_GROUP(G(t, "FI_SYNC_ERR reports 0 for a good address, an error for a bad one"));
	mixed[0] = a4;
	EXPECT_RC(fi_av_insert(av, mixed, 2, fs, FI_SYNC_ERR, errs), 1);
	EXPECT_EQ(errs[0], 0);
	EXPECT(errs[1] != 0, "FI_SYNC_ERR status of the bad address is 0");
	EXPECT_EQ(fs[1], FI_ADDR_NOTAVAIL);
	LOOKUP_SIN(av, fs[0], &a4);

	OXT_GROUP(G(t, "fi_av_remove, then fi_av_lookup is -FI_EINVAL"));
	EXPECT_RC(fi_av_remove(av, &fa[0], 1, 0), 0);
	len = sizeof buf;
	EXPECT_RC(fi_av_lookup(av, fa[0], buf, &len), -FI_EINVAL);
	LOOKUP_SIN(av, fa[1], &two[1]); /* the others stay */

	OXT_GROUP(G(t, "removing an unknown fi_addr is -FI_EINVAL and removes nothing"));
	{
		fi_addr_t both[2] = { fa[1], 123456 };

		EXPECT_RC(fi_av_remove(av, both, 2, 0), -FI_EINVAL);
		LOOKUP_SIN(av, fa[1], &two[1]);
		both[1] = fa[0]; /* already removed */
		EXPECT_RC(fi_av_remove(av, both, 2, 0), -FI_EINVAL);
		LOOKUP_SIN(av, fa[1], &two[1]);
	}

	OXT_GROUP(G(t, "unknown insert flags give -FI_EBADFLAGS"));
	EXPECT_RC(fi_av_insert(av, &a3, 1, &fz, FI_SEND,
			       NULL),
		  -FI_EBADFLAGS);

	EXPECT_RC(fi_close(&av->fid), 0);
}

static void test_insert_ipv6(enum fi_av_type t)
{
	struct fid_av *av = av_open(t);
	struct sockaddr_in6 a = oxt_sin6("::1", 9228), got;
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	size_t len = sizeof got;

	OXT_GROUP(G(t, "a 28-byte sockaddr_in6 inserts and looks up"));
	EXPECT_RC(fi_av_insert(av, &a, 1, &fa, 0, NULL), 1);
	memset(&got, 0, sizeof got);
	EXPECT_RC(fi_av_lookup(av, fa, &got, &len), 0);
	EXPECT_EQ(len, sizeof(struct sockaddr_in6));
	EXPECT(memcmp(&got, &a, sizeof a) == 0,
	       "looked-up sockaddr_in6 differs from the inserted one");
	EXPECT_RC(fi_close(&av->fid), 0);
}

static void test_svc_sym(enum fi_av_type t)
{
	struct fid_av *av;
	fi_addr_t fa = FI_ADDR_NOTAVAIL, fs[4];
	struct sockaddr_in want;
	int i;

	OXT_GROUP(G(t, "fi_av_insertsvc(127.0.0.1, 4000) inserts 1"));
	av = av_open(t);
	EXPECT_RC(fi_av_insertsvc(av, "127.0.0.1", "4000", &fa, 0, NULL), 1);
	want = oxt_sin("127.0.0.1", 4000);
	LOOKUP_SIN(av, fa, &want);
	EXPECT_RC(fi_close(&av->fid), 0);

	OXT_GROUP(G(t, "fi_av_insertsym(127.0.0.1 x2, 4000 x2) inserts 4 in order"));
	av = av_open(t);
	for (i = 0; i < 4; i++)
		fs[i] = FI_ADDR_NOTAVAIL;
	EXPECT_RC(fi_av_insertsym(av, "127.0.0.1", 2, "4000", 2, fs, 0, NULL),
		  4);
	for (i = 0; i < 4; i++) {
		want = oxt_sin(i < 2 ? "127.0.0.1" : "127.0.0.2",
			       (uint16_t)(4000 + i % 2));
		LOOKUP_SIN(av, fs[i], &want);
		if (t == FI_AV_TABLE)
			EXPECT_EQ(fs[i], i);
	}
	EXPECT_RC(fi_close(&av->fid), 0);
}

static void test_table_null_fi_addr(void)
{
	struct fid_av *av = av_open(FI_AV_TABLE);
	struct sockaddr_in a = oxt_sin("127.0.0.1", 9228);

	OXT_GROUP("[FI_AV_TABLE] insert with a NULL fi_addr array uses index 0");
	EXPECT_RC(fi_av_insert(av, &a, 1, NULL, 0, NULL), 1);
	LOOKUP_SIN(av, 0, &a);
	EXPECT_RC(fi_close(&av->fid), 0);
}

static void test_straddr(void)
{
	struct fid_av *av = av_open(FI_AV_TABLE);
	struct sockaddr_in a = oxt_sin("127.0.0.1", 9228);
	struct sockaddr_in6 a6 = oxt_sin6("::1", 9228);
	const char *want = "fi_sockaddr_in://127.0.0.1:9228";
	const char *want6 = "fi_sockaddr_in6://[::1]:9228";
	char buf[128];
	const char *s;
	size_t len;

	OXT_GROUP("fi_av_straddr of 127.0.0.1:9228");
	len = sizeof buf;
	memset(buf, 0, sizeof buf);
	s = fi_av_straddr(av, &a, buf, &len);
	EXPECT(s == buf, "fi_av_straddr did not return buf");
	EXPECT_STR(buf, want);
	EXPECT_EQ(len, strlen(want) + 1);

	OXT_GROUP("fi_av_straddr into a small buffer truncates, len = size needed");
	memset(buf, 'x', sizeof buf);
	len = 8;
	s = fi_av_straddr(av, &a, buf, &len);
	EXPECT(s == buf, "fi_av_straddr did not return buf");
	EXPECT(memcmp(buf, want, 7) == 0, "truncated text \"%.7s\" is not a prefix of \"%s\"",
	       buf, want);
	EXPECT(buf[8] == 'x', "fi_av_straddr wrote past the 8-byte buffer");
	EXPECT_EQ(len, strlen(want) + 1);

	OXT_GROUP("fi_av_straddr of [::1]:9228");
	len = sizeof buf;
	memset(buf, 0, sizeof buf);
	s = fi_av_straddr(av, &a6, buf, &len);
	EXPECT(s == buf, "fi_av_straddr did not return buf");
	EXPECT_STR(buf, want6);
	EXPECT_EQ(len, strlen(want6) + 1);
	EXPECT_RC(fi_close(&av->fid), 0);
}

/* Read one event from `eq`, waiting up to 5 s (inserts may complete late). */
static ssize_t eq_get(struct fid_eq *eq, uint32_t *event, void *buf,
		      size_t len)
{
	return fi_eq_sread(eq, event, buf, len, 5000, 0);
}

static void test_async(enum fi_av_type t)
{
	struct fid_eq *eq = eq_open();
	struct fid_av *av = av_open_flags(t, FI_EVENT);
	struct sockaddr_in good[3] = { oxt_sin("127.0.0.1", 9300),
				       oxt_sin("127.0.0.1", 9301),
				       oxt_sin("127.0.0.1", 9302) };
	struct sockaddr_in with_bad[3];
	fi_addr_t fa[3] = { 77, 77, 77 };
	struct fi_eq_entry ent;
	struct fi_eq_err_entry err;
	uint32_t event = ~0u;
	int ctx1, ctx2;

	REQUIRE_RC(oxt_av_bind(av, &eq->fid, 0), 0);

	OXT_GROUP(G(t, "FI_EVENT AV: insert returns 0, then FI_AV_COMPLETE"));
	EXPECT_RC(fi_av_insert(av, good, 2, fa, 0, &ctx1), 0);
	memset(&ent, 0, sizeof ent);
	EXPECT_RC(eq_get(eq, &event, &ent, sizeof ent), sizeof ent);
	EXPECT_EQ(event, FI_AV_COMPLETE);
	EXPECT_EQ((uintptr_t)ent.fid, (uintptr_t)&av->fid);
	EXPECT_EQ((uintptr_t)ent.context, (uintptr_t)&ctx1);
	EXPECT_EQ(ent.data, 2);
	if (t == FI_AV_TABLE) {
		EXPECT_EQ(fa[0], 0);
		EXPECT_EQ(fa[1], 1);
	}
	LOOKUP_SIN(av, fa[0], &good[0]);
	LOOKUP_SIN(av, fa[1], &good[1]);

	OXT_GROUP(G(t, "FI_EVENT AV, one bad address: error event, then FI_AV_COMPLETE"));
	with_bad[0] = good[2];
	memset(&with_bad[1], 0, sizeof with_bad[1]);
	with_bad[2] = oxt_sin("127.0.0.1", 9303);
	EXPECT_RC(fi_av_insert(av, with_bad, 3, fa, 0, &ctx2), 0);
	EXPECT_RC(eq_get(eq, &event, &ent, sizeof ent), -FI_EAVAIL);
	memset(&err, 0, sizeof err);
	EXPECT_RC(fi_eq_readerr(eq, &err, 0), sizeof(struct fi_eq_err_entry));
	EXPECT_EQ((uintptr_t)err.fid, (uintptr_t)&av->fid);
	EXPECT_EQ((uintptr_t)err.context, (uintptr_t)&ctx2);
	EXPECT_EQ(err.data, 1);
	EXPECT(err.err > 0, "err.err is %d, expected a positive error code",
	       err.err);
	memset(&ent, 0, sizeof ent);
	EXPECT_RC(eq_get(eq, &event, &ent, sizeof ent), sizeof ent);
	EXPECT_EQ(event, FI_AV_COMPLETE);
	EXPECT_EQ((uintptr_t)ent.context, (uintptr_t)&ctx2);
	EXPECT_EQ(ent.data, 2);
	EXPECT_EQ(fa[1], FI_ADDR_NOTAVAIL);
	LOOKUP_SIN(av, fa[0], &with_bad[0]);
	LOOKUP_SIN(av, fa[2], &with_bad[2]);
	EXPECT_RC(fi_eq_read(eq, &event, &ent, sizeof ent, 0), -FI_EAGAIN);

	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&eq->fid), 0);
}

/*
 * fi_av(3): "AV operations are synchronous by default, but may be set to
 * operate asynchronously by specifying the FI_EVENT flag to fi_av_open."
 * and "If an AV is opened with FI_EVENT, any insertions attempted before an
 * EQ is bound to the AV will fail with -FI_ENOEQ."
 */
static void test_async_is_opt_in(enum fi_av_type t)
{
	struct fid_eq *eq = eq_open();
	struct fid_av *av = av_open(t);
	struct sockaddr_in two[2] = { oxt_sin("127.0.0.1", 9400),
				      oxt_sin("127.0.0.1", 9401) };
	fi_addr_t fa[2] = { 77, 77 };
	struct fi_eq_entry ent;
	uint32_t event;
	int ctx;

	OXT_GROUP(G(t, "AV without FI_EVENT stays synchronous with an EQ bound (fi_av(3))"));
	REQUIRE_RC(oxt_av_bind(av, &eq->fid, 0), 0);
	EXPECT_RC(fi_av_insert(av, two, 2, fa, 0, &ctx), 2);
	EXPECT_RC(fi_eq_read(eq, &event, &ent, sizeof ent, 0), -FI_EAGAIN);
	EXPECT_RC(fi_close(&av->fid), 0);

	OXT_GROUP(G(t, "FI_EVENT AV without an EQ: insert is -FI_ENOEQ (fi_av(3))"));
	av = av_open_flags(t, FI_EVENT);
	EXPECT_RC(fi_av_insert(av, two, 2, fa, 0, &ctx), -FI_ENOEQ);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&eq->fid), 0);
}

/*
 * fi_av(3), FI_AV_UNSPEC: "Provider will choose its preferred AV type. The
 * AV type used will be returned through the type field in fi_av_attr."
 */
static void test_unspec_type(void)
{
	struct fi_av_attr a = { .type = FI_AV_UNSPEC };
	struct fid_av *av = NULL;

	OXT_GROUP("FI_AV_UNSPEC: the chosen type is returned in attr.type (fi_av(3))");
	EXPECT_RC(fi_av_open(env.domain, &a, &av, NULL), 0);
	EXPECT(a.type == FI_AV_TABLE || a.type == FI_AV_MAP,
	       "attr.type is still %d after fi_av_open, expected FI_AV_TABLE (%d) or FI_AV_MAP (%d)",
	       a.type, FI_AV_TABLE, FI_AV_MAP);
	if (av)
		EXPECT_RC(fi_close(&av->fid), 0);
}

/* An endpoint with its own CQ on the shared AV `av`, and its name. */
static struct fid_ep *cache_ep(struct fid_av *av, struct fid_cq **cq, char name[64])
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 16 };
	struct fid_ep *ep = NULL;
	size_t len = 64;

	REQUIRE_RC(fi_cq_open(env.domain, &ca, cq, NULL), 0);
	REQUIRE_RC(fi_endpoint(env.domain, env.info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	REQUIRE_RC(fi_getname(&ep->fid, name, &len), 0);
	return ep;
}

/* Receive one message on `ep` within 5 s; its source fi_addr, or -1 if
 * none came. `expect` is the byte the sender put in it. */
static fi_addr_t cache_recv(struct fid_ep *ep, struct fid_cq *cq, char expect)
{
	struct fi_cq_tagged_entry e;
	fi_addr_t src = (fi_addr_t)-1;
	char buf[8] = { 0 };
	double until = oxt_now_ms() + 5000;
	ssize_t n;

	REQUIRE_RC(fi_recv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, buf), 0);
	while ((n = fi_cq_readfrom(cq, &e, 1, &src)) == -FI_EAGAIN && oxt_now_ms() < until)
		;
	EXPECT_RC(n, 1);
	EXPECT(buf[0] == expect, "received byte %d, expected %d", buf[0], expect);
	return n == 1 ? src : (fi_addr_t)-1;
}

/* Whether anything arrives at `cq` within 200 ms. */
static bool cache_quiet(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;
	double until = oxt_now_ms() + 200;

	while (oxt_now_ms() < until)
		if (fi_cq_read(cq, &e, 1) != -FI_EAGAIN)
			return false;
	return true;
}

/* Engines keep the AV entries they used last (no AV lock per message);
 * every fi_av_insert / fi_av_remove must reach them at once: a removed
 * sender is no longer reported as a source, and a reused fi_addr sends to
 * its new address. */
static void test_changes_reach_transfers(void)
{
	struct fi_av_attr aa = { .type = FI_AV_MAP };
	struct fid_av *av = NULL;
	struct fid_ep *a, *b, *c;
	struct fid_cq *qa, *qb, *qc;
	char na[64], nb[64], nc[64], one = 1, two = 2, three = 3;
	fi_addr_t fa, fb, fc;

	REQUIRE_RC(fi_av_open(env.domain, &aa, &av, NULL), 0);
	a = cache_ep(av, &qa, na);
	b = cache_ep(av, &qb, nb);
	c = cache_ep(av, &qc, nc);
	REQUIRE_RC(fi_av_insert(av, nb, 1, &fb, 0, NULL), 1);
	REQUIRE_RC(fi_av_insert(av, na, 1, &fa, 0, NULL), 1);

	OXT_GROUP("[FI_AV_MAP] a message from an AV entry reports its fi_addr as source");
	REQUIRE_RC(fi_inject(a, &one, 1, fb), 0);
	EXPECT_EQ(cache_recv(b, qb, one), fa);

	OXT_GROUP("[FI_AV_MAP] after fi_av_remove of the sender, its messages report FI_ADDR_NOTAVAIL");
	EXPECT_RC(fi_av_remove(av, &fa, 1, 0), 0);
	REQUIRE_RC(fi_inject(a, &two, 1, fb), 0);
	EXPECT_EQ(cache_recv(b, qb, two), FI_ADDR_NOTAVAIL);

	OXT_GROUP("[FI_AV_MAP] a removed fi_addr reused for another endpoint sends there, not to the old one");
	EXPECT_RC(fi_av_remove(av, &fb, 1, 0), 0);
	REQUIRE_RC(fi_av_insert(av, nc, 1, &fc, 0, NULL), 1);
	/* FI_AV_MAP reuses freed indexes (av.rs); the point is the reuse. */
	EXPECT_EQ(fc == fa || fc == fb, 1);
	REQUIRE_RC(fi_inject(a, &three, 1, fc), 0);
	EXPECT_EQ(cache_recv(c, qc, three), FI_ADDR_NOTAVAIL);
	EXPECT(cache_quiet(qb), "the endpoint that left the AV still got a message");

	fi_close(&a->fid);
	fi_close(&b->fid);
	fi_close(&c->fid);
	fi_close(&qa->fid);
	fi_close(&qb->fid);
	fi_close(&qc->fid);
	EXPECT_RC(fi_close(&av->fid), 0);
}

int main(int argc, char **argv)
{
	static const enum fi_av_type types[] = { FI_AV_TABLE, FI_AV_MAP };
	size_t i;

	(void)argc;
	oxt_init(argv[0]);
	oxt_open(&env);
	for (i = 0; i < 2; i++) {
		test_insert(types[i]);
		test_insert_ipv6(types[i]);
		test_svc_sym(types[i]);
	}
	test_table_null_fi_addr();
	test_straddr();
	for (i = 0; i < 2; i++)
		test_async(types[i]);
	for (i = 0; i < 2; i++)
		test_async_is_opt_in(types[i]);
	test_unspec_type();
	test_changes_reach_transfers();
	OXT_GROUP("close domain and fabric");
	oxt_close(&env);
	return oxt_done();
}
