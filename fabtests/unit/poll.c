/*
 * poll: poll sets (fi_poll(3)): fi_poll_open, fi_poll_add, fi_poll_del,
 * fi_poll and fi_close on a set holding a tx CQ, an rx CQ and a counter
 * bound to FI_SEND of one endpoint that sends to itself. fi_poll returns
 * the contexts of the CQs that are not empty and of the counters that
 * changed since it last returned them; the refusals; threads.
 */
#include "oxt.h"

static struct oxt_env env;
static struct fid_cq *txcq, *rxcq;
static struct fid_cntr *cntr;
static struct fid_av *av;
static struct fid_ep *ep;
static fi_addr_t self = FI_ADDR_NOTAVAIL;

/* The contexts the CQs and the counter were opened with. */
static char tx_ctx, rx_ctx, cntr_ctx, tmp_ctx;

#define TX (1 << 0)
#define RX (1 << 1)
#define CNTR (1 << 2)

static const char *ctx_name(void *c)
{
	return c == &tx_ctx ? "tx CQ" : c == &rx_ctx ? "rx CQ" : c == &cntr_ctx ? "counter" : "unknown";
}

/* One fi_poll with an array of `count`: the set of members it returned
 * (TX | RX | CNTR); a return outside 0..count, an unknown context, one
 * returned twice, or a write past `count` is a failed check. */
static int poll_once(struct fid_poll *ps, int count)
{
	void *ctx[8];
	int n, i, got = 0;

	for (i = 0; i < 8; i++)
		ctx[i] = &env; /* a sentinel */
	n = fi_poll(ps, ctx, count);
	EXPECT(n >= 0 && n <= count, "fi_poll(count %d) returned %d", count, n);
	if (n < 0 || n > count)
		return 0;
	for (i = 0; i < n; i++) {
		int bit = ctx[i] == &tx_ctx ? TX : ctx[i] == &rx_ctx ? RX : ctx[i] == &cntr_ctx ? CNTR : 0;

		EXPECT(bit != 0, "fi_poll returned an unknown context %p at %d", ctx[i], i);
		EXPECT(!(got & bit), "fi_poll returned the %s twice", ctx_name(ctx[i]));
		got |= bit;
	}
	for (i = n; i < 8; i++)
		EXPECT(ctx[i] == &env, "fi_poll(count %d) returned %d but wrote slot %d", count, n, i);
	return got;
}

static const char *bits_str(int b, char *buf, size_t len)
{
	snprintf(buf, len, "{%s%s%s }", b & TX ? " tx" : "", b & RX ? " rx" : "", b & CNTR ? " cntr" : "");
	return buf;
}

#define EXPECT_POLL(ps, count, want)                                                                   \
	do {                                                                                           \
		char g_[40], w_[40];                                                                   \
		int got_ = poll_once((ps), (count));                                                   \
		EXPECT(got_ == (want), "fi_poll(count %d): got %s, expected %s", (count),             \
		       bits_str(got_, g_, sizeof g_), bits_str((want), w_, sizeof w_));                \
	} while (0)

/* Poll until every member in `want` was returned at least once (10 s);
 * what was returned, in all. */
static int poll_until(struct fid_poll *ps, int want)
{
	double until = oxt_now_ms() + 10000;
	int seen = 0;

	while ((seen & want) != want && oxt_now_ms() < until)
		seen |= poll_once(ps, 8);
	return seen;
}

static void read_one(struct fid_cq *cq, void *op)
{
	void *ctx = NULL;
	int rc = oxt_next_completion(cq, 5000, &ctx);

	EXPECT(rc == 0 && ctx == op, "completion %d with context %p, expected success for %p", rc, ctx, op);
}

static void open_objects(void)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .size = 64 };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	char name[64];
	size_t len = sizeof name;

	oxt_open(&env);
	REQUIRE_RC(fi_cq_open(env.domain, &ca, &txcq, &tx_ctx), 0);
	REQUIRE_RC(fi_cq_open(env.domain, &ca, &rxcq, &rx_ctx), 0);
	REQUIRE_RC(fi_cntr_open(env.domain, &na, &cntr, &cntr_ctx), 0);
	REQUIRE_RC(fi_av_open(env.domain, &aa, &av, NULL), 0);
	REQUIRE_RC(fi_endpoint(env.domain, env.info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT), 0);
	REQUIRE_RC(fi_ep_bind(ep, &rxcq->fid, FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cntr->fid, FI_SEND), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	REQUIRE_RC(fi_getname(&ep->fid, name, &len), 0);
	REQUIRE_RC(fi_av_insert(av, name, 1, &self, 0, NULL), 1);
}

static char sbuf[64] = "to myself", rbuf[64];
static struct fi_context sctx, rctx;

static void send_to_self(void)
{
	memset(rbuf, 0, sizeof rbuf);
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &rctx), 0);
	EXPECT_RC(fi_send(ep, sbuf, sizeof sbuf, NULL, self, &sctx), 0);
}

static void test_open_and_refusals(struct fid_poll **out)
{
	struct fi_poll_attr pa = { .flags = 1 };
	struct fid_poll *ps = NULL, *ps2 = NULL;
	struct oxt_env other;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .size = 8 };
	struct fid_cq *ocq = NULL;
	void *ctx[1];

	OXT_GROUP("fi_poll_open: reserved attr flags refused, NULL attr and flags 0 open");
	EXPECT_RC(fi_poll_open(env.domain, &pa, &ps), -FI_EINVAL);
	EXPECT(ps == NULL, "a refused fi_poll_open wrote its out-parameter");
	EXPECT_RC(fi_poll_open(env.domain, NULL, &ps2), 0);
	if (ps2) {
		EXPECT_EQ(ps2->fid.fclass, FI_CLASS_POLL);
		EXPECT_RC(fi_close(&ps2->fid), 0);
	}
	pa.flags = 0;
	REQUIRE_RC(fi_poll_open(env.domain, &pa, &ps), 0);

	OXT_GROUP("an empty poll set: fi_poll returns 0");
	EXPECT_RC(fi_poll(ps, ctx, 1), 0);

	OXT_GROUP("fi_poll_add: the tx CQ, the rx CQ and the counter");
	EXPECT_RC(fi_poll_add(ps, &txcq->fid, 0), 0);
	EXPECT_RC(fi_poll_add(ps, &rxcq->fid, 0), 0);
	EXPECT_RC(fi_poll_add(ps, &cntr->fid, 0), 0);

	OXT_GROUP("fi_poll_add refusals: flags, twice, not a CQ or counter, another domain");
	EXPECT_RC(fi_poll_add(ps, &txcq->fid, 1), -FI_EBADFLAGS);
	EXPECT_RC(fi_poll_add(ps, &txcq->fid, 0), -FI_EALREADY);
	EXPECT_RC(fi_poll_add(ps, &cntr->fid, 0), -FI_EALREADY);
	EXPECT_RC(fi_poll_add(ps, &av->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_poll_add(ps, &ep->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_poll_add(ps, &env.domain->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_poll_add(ps, &ps->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_poll_add(ps, NULL, 0), -FI_EINVAL);
	oxt_open(&other);
	REQUIRE_RC(fi_cq_open(other.domain, &ca, &ocq, NULL), 0);
	EXPECT_RC(fi_poll_add(ps, &ocq->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_close(&ocq->fid), 0);

	OXT_GROUP("a poll set holds its domain: fi_close of the domain is -FI_EBUSY until the set closes");
	REQUIRE_RC(fi_poll_open(other.domain, NULL, &ps2), 0);
	EXPECT_RC(fi_close(&other.domain->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&ps2->fid), 0);
	oxt_close(&other);

	OXT_GROUP("fi_poll_del refusals: flags, not a member, NULL");
	EXPECT_RC(fi_poll_del(ps, &txcq->fid, 2), -FI_EBADFLAGS);
	EXPECT_RC(fi_poll_del(ps, &av->fid, 0), -FI_ENOENT);
	EXPECT_RC(fi_poll_del(ps, NULL, 0), -FI_EINVAL);

	OXT_GROUP("fi_poll refusals: a negative count, a NULL array");
	EXPECT_RC(fi_poll(ps, ctx, -1), -FI_EINVAL);
	EXPECT_RC(fi_poll(ps, NULL, 1), -FI_EINVAL);
	EXPECT_RC(fi_poll(ps, NULL, 0), 0);

	OXT_GROUP("members are held: fi_close of a CQ or counter in a set is -FI_EBUSY");
	EXPECT_RC(fi_close(&cntr->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&txcq->fid), -FI_EBUSY);

	OXT_GROUP("nothing happened: fi_poll returns 0, again and again");
	EXPECT_POLL(ps, 8, 0);
	EXPECT_POLL(ps, 8, 0);
	EXPECT_POLL(ps, 1, 0);
	*out = ps;
}

static void test_events(struct fid_poll *ps)
{
	char g[40], g2[40];
	int seen, a, b;

	OXT_GROUP("a send to self: fi_poll returns the tx CQ, the rx CQ and the counter");
	send_to_self();
	seen = poll_until(ps, TX | RX | CNTR);
	EXPECT(seen == (TX | RX | CNTR), "within 10 s fi_poll returned %s", bits_str(seen, g, sizeof g));
	EXPECT_EQ(fi_cntr_read(cntr), 1);

	OXT_GROUP("both CQs are returned while not empty; the counter once per change");
	EXPECT_POLL(ps, 8, TX | RX);
	EXPECT_POLL(ps, 8, TX | RX);

	OXT_GROUP("count limits the array, and the next call returns the other CQ");
	a = poll_once(ps, 1);
	b = poll_once(ps, 1);
	EXPECT((a == TX && b == RX) || (a == RX && b == TX), "two fi_poll(count 1): %s then %s",
	       bits_str(a, g, sizeof g), bits_str(b, g2, sizeof g2));
	EXPECT_POLL(ps, 0, 0);

	OXT_GROUP("a CQ read empty is no longer returned");
	read_one(rxcq, &rctx);
	EXPECT(!memcmp(rbuf, sbuf, sizeof sbuf), "received \"%.63s\"", rbuf);
	EXPECT_POLL(ps, 8, TX);
	read_one(txcq, &sctx);
	EXPECT_POLL(ps, 8, 0);

	OXT_GROUP("fi_cntr_add is a change: returned once");
	EXPECT_RC(fi_cntr_add(cntr, 1), 0);
	EXPECT_POLL(ps, 8, CNTR);
	EXPECT_POLL(ps, 8, 0);

	OXT_GROUP("fi_cntr_set down, then counted up to the value last returned: still a change");
	EXPECT_EQ(fi_cntr_read(cntr), 2);
	EXPECT_RC(fi_cntr_set(cntr, 1), 0);
	EXPECT_RC(fi_cntr_add(cntr, 1), 0);
	EXPECT_POLL(ps, 8, CNTR);
	EXPECT_POLL(ps, 8, 0);

	OXT_GROUP("an error count change is returned once");
	EXPECT_RC(fi_cntr_adderr(cntr, 1), 0);
	EXPECT_POLL(ps, 8, CNTR);
	EXPECT_POLL(ps, 8, 0);

	OXT_GROUP("a counter change that does not fit the array waits for the next call");
	send_to_self();
	seen = poll_until(ps, TX | RX);
	EXPECT((seen & (TX | RX)) == (TX | RX), "within 10 s fi_poll returned %s", bits_str(seen, g, sizeof g));
	/* (the counter may have been returned with them) */
	EXPECT_RC(fi_cntr_add(cntr, 1), 0);
	seen = 0;
	for (a = 0; a < 3; a++)
		seen |= poll_once(ps, 1);
	EXPECT(seen & CNTR, "three fi_poll(count 1) with both CQs full never returned the changed counter");
	EXPECT_POLL(ps, 8, TX | RX);
	read_one(rxcq, &rctx);
	read_one(txcq, &sctx);
	EXPECT_POLL(ps, 8, 0);
}

static void test_del(struct fid_poll *ps)
{
	char g[40];
	int seen;

	OXT_GROUP("fi_poll_del: a deleted CQ is not returned, and is not a member any more");
	EXPECT_RC(fi_poll_del(ps, &rxcq->fid, 0), 0);
	EXPECT_RC(fi_poll_del(ps, &rxcq->fid, 0), -FI_ENOENT);
	send_to_self();
	seen = poll_until(ps, TX | CNTR);
	EXPECT(seen == (TX | CNTR), "within 10 s fi_poll returned %s", bits_str(seen, g, sizeof g));
	read_one(rxcq, &rctx); /* the rx CQ did get its entry */
	read_one(txcq, &sctx);
	EXPECT_POLL(ps, 8, 0);

	OXT_GROUP("fi_poll_del of the counter; the rx CQ added back is returned again");
	EXPECT_RC(fi_poll_add(ps, &rxcq->fid, 0), 0);
	EXPECT_RC(fi_poll_del(ps, &cntr->fid, 0), 0);
	EXPECT_RC(fi_poll_del(ps, &cntr->fid, 0), -FI_ENOENT);
	send_to_self();
	seen = poll_until(ps, TX | RX);
	EXPECT(seen == (TX | RX), "within 10 s fi_poll returned %s", bits_str(seen, g, sizeof g));
	read_one(rxcq, &rctx);
	read_one(txcq, &sctx);
}

struct poller {
	struct fid_poll *ps;
	volatile int *stop;
	int bad;
	long polls;
};

static void *poll_loop(void *arg)
{
	struct poller *p = arg;
	void *ctx[2];

	while (!*p->stop) {
		int n = fi_poll(p->ps, ctx, 2);

		if (n < 0 || n > 2)
			p->bad++;
		for (int i = 0; i < n && i < 2; i++)
			if (ctx[i] != &tx_ctx && ctx[i] != &rx_ctx && ctx[i] != &cntr_ctx && ctx[i] != &tmp_ctx)
				p->bad++;
		__atomic_fetch_add(&p->polls, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void test_threads(struct fid_poll *ps)
{
	struct poller p[3];
	pthread_t th[3];
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .size = 8 };
	struct fid_cq *tmp = NULL;
	volatile int stop = 0;
	int i, k, bad = 0;

	OXT_GROUP("threads: three fi_poll loops while this thread adds, deletes, closes and sends");
	for (i = 0; i < 3; i++) {
		p[i] = (struct poller){ .ps = ps, .stop = &stop };
		REQUIRE(pthread_create(&th[i], NULL, poll_loop, &p[i]) == 0, "pthread_create");
	}
	/* (every poller running before this thread starts changing the set) */
	for (i = 0; i < 3; i++) {
		double until = oxt_now_ms() + 10000;

		while (__atomic_load_n(&p[i].polls, __ATOMIC_ACQUIRE) == 0 && oxt_now_ms() < until)
			sched_yield();
	}
	for (k = 0; k < 200; k++) {
		EXPECT_RC(fi_poll_add(ps, &cntr->fid, 0), 0);
		EXPECT_RC(fi_poll_del(ps, &rxcq->fid, 0), 0);
		if (k % 20 == 0) {
			send_to_self();
			read_one(rxcq, &rctx);
			read_one(txcq, &sctx);
		}
		EXPECT_RC(fi_poll_add(ps, &rxcq->fid, 0), 0);
		EXPECT_RC(fi_poll_del(ps, &cntr->fid, 0), 0);
		/* Deleted, a CQ closes at once: no fi_poll under way in
		 * another thread still holds it. */
		REQUIRE_RC(fi_cq_open(env.domain, &ca, &tmp, &tmp_ctx), 0);
		EXPECT_RC(fi_poll_add(ps, &tmp->fid, 0), 0);
		EXPECT_RC(fi_poll_del(ps, &tmp->fid, 0), 0);
		EXPECT_RC(fi_close(&tmp->fid), 0);
	}
	stop = 1;
	for (i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		bad += p[i].bad;
		EXPECT(p[i].polls > 0, "thread %d never polled", i);
	}
	EXPECT(bad == 0, "%d bad fi_poll answers in the threads", bad);
}

int main(int argc, char **argv)
{
	struct fid_poll *ps = NULL;

	(void)argc;
	oxt_init(argv[0]);
	open_objects();
	test_open_and_refusals(&ps);
	test_events(ps);
	test_del(ps);
	test_threads(ps);

	OXT_GROUP("fi_close of a poll set with members; then the members close");
	EXPECT_RC(fi_poll_add(ps, &cntr->fid, 0), 0);
	EXPECT_RC(fi_close(&ps->fid), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);
	EXPECT_RC(fi_close(&txcq->fid), 0);
	EXPECT_RC(fi_close(&rxcq->fid), 0);
	oxt_close(&env);
	return oxt_done();
}
