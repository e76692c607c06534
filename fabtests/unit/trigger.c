/*
 * trigger: endpoint aliases (fi_ep_alias, fi_endpoint(3)) and triggered
 * operations (FI_TRIGGER with a threshold trigger, fi_trigger(3)), on one
 * RDM endpoint that sends, writes and runs atomics on itself. Its tx CQ is
 * bound with FI_SELECTIVE_COMPLETION, a tx counter counts sends, writes
 * and reads, and a counter of its own (bound to nothing, moved with
 * fi_cntr_add) is the trigger of most operations. run.sh runs it on shared
 * memory and again with FI_OXMR_WIRE=tcp.
 *
 *  1. fi_ep_alias refusals (no direction, both, FI_TRIGGER with FI_RECV,
 *     flags that are no op flags); FI_TRIGGER is no endpoint default.
 *  2. An alias's flags: FI_GETOPSFLAG of both directions, FI_SETOPSFLAG;
 *     an alias with FI_TRANSMIT|FI_COMPLETION on the selective endpoint
 *     writes a CQ entry for each send posted through it, the endpoint
 *     none.
 *  3. An alias with FI_TRANSMIT|FI_TRIGGER|FI_COMPLETION: fi_write through
 *     it returns 0 and writes nothing until the counter reaches the
 *     threshold (the target untouched, no completion, the tx counter
 *     still), then writes once; the completion's op_context is the
 *     triggered context. fi_send and fi_atomic through it likewise.
 *  4. The *msg calls with FI_TRIGGER: fi_sendmsg, fi_tsendmsg,
 *     fi_atomicmsg, fi_fetch_atomicmsg, fi_writemsg with FI_INJECT (the
 *     data copied when posted: the source is changed before it fires).
 *  5. A threshold the counter has reached already posts at once.
 *  6. An armed operation holds nothing up, and fires after what its
 *     counter counts (fabtests' fi_rdm_rma_trigger): triggered write A on
 *     "tx counter + 1", then plain write B to the same bytes; the tx
 *     counter reaches +2 and the bytes are A's.
 *  7. Bad contexts refused at the call, nothing posted: NULL context,
 *     NULL counter, a CQ where the counter belongs, FI_TRIGGER_XPU, an
 *     unknown event type; triggered receives (-FI_ENOSYS).
 *  8. fi_cancel of an armed operation: FI_ECANCELED, and it never fires.
 *  9. A reader asleep in fi_cntr_wait on the tx counter sees the write
 *     that another thread's fi_cntr_add fires (the wait tick is set to
 *     60 s: only the endpoint's own re-check, armed operations being
 *     work of its own, can notice the counter).
 * 10. Closing: the endpoint with an alias open is -FI_EBUSY; an alias of
 *     an alias; fi_ep_bind on an alias refused; the endpoint closes with an
 *     operation still armed.
 */
#include "oxt.h"

#include <rdma/fi_trigger.h>

static struct oxt_env env;
static struct fid_cq *txcq, *rxcq;
static struct fid_cntr *txcntr, *tc;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_mr *mr;
static fi_addr_t self = FI_ADDR_NOTAVAIL;
static uint64_t raddr, rkey;

#define REGION 256
static unsigned char target[REGION] __attribute__((aligned(64)));

static void open_all(void)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP };
	struct fi_cntr_attr wa = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	char name[64];
	size_t len = sizeof name;

	oxt_open(&env);
	REQUIRE(env.info->caps & FI_TRIGGER, "the RDM info has no FI_TRIGGER (caps 0x%llx)",
		(unsigned long long)env.info->caps);
	REQUIRE(env.info->tx_attr->caps & FI_TRIGGER, "tx_attr caps without FI_TRIGGER");
	REQUIRE_RC(fi_cq_open(env.domain, &ca, &txcq, NULL), 0);
	REQUIRE_RC(fi_cq_open(env.domain, &ca, &rxcq, NULL), 0);
	REQUIRE_RC(fi_cntr_open(env.domain, &wa, &txcntr, NULL), 0);
	REQUIRE_RC(fi_cntr_open(env.domain, &na, &tc, NULL), 0);
	REQUIRE_RC(fi_av_open(env.domain, &aa, &av, NULL), 0);
	REQUIRE_RC(fi_endpoint(env.domain, env.info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION), 0);
	REQUIRE_RC(fi_ep_bind(ep, &rxcq->fid, FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &txcntr->fid, FI_SEND | FI_WRITE | FI_READ), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	REQUIRE_RC(fi_getname(&ep->fid, name, &len), 0);
	REQUIRE_RC(fi_av_insert(av, name, 1, &self, 0, NULL), 1);
	REQUIRE_RC(fi_mr_reg(env.domain, target, sizeof target, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0x71, 0, &mr,
			     NULL),
		   0);
	if (env.info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		REQUIRE_RC(fi_mr_bind(mr, &ep->fid, 0), 0);
		REQUIRE_RC(fi_mr_enable(mr), 0);
	}
	rkey = fi_mr_key(mr);
	raddr = (env.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
}

/* Run the endpoint's progress for `ms` (fi_cntr_read of its bound tx
 * counter drives it; no CQ entry is consumed). */
static void spin_ms(int ms)
{
	double until = oxt_now_ms() + ms;

	while (oxt_now_ms() < until)
		(void)fi_cntr_read(txcntr);
}

/* The next entry of `cq` within 5 s: 0 and the entry, a positive error
 * code (the entry's context and flags filled from the error entry), or -1
 * for none. */
static int next_entry(struct fid_cq *cq, struct fi_cq_tagged_entry *out)
{
	double until = oxt_now_ms() + 5000;

	memset(out, 0, sizeof *out);
	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(cq, out, 1);

		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = { 0 };

			if (fi_cq_readerr(cq, &e, 0) != 1)
				return -2;
			out->op_context = e.op_context;
			out->flags = e.flags;
			return e.err;
		}
	}
	return -1;
}

/* `cq` holds nothing now (after `spin_ms` ran progress). */
#define EXPECT_EMPTY(cq, what)                                                                         \
	do {                                                                                           \
		struct fi_cq_tagged_entry e_;                                                          \
		ssize_t n_ = fi_cq_read((cq), &e_, 1);                                                 \
		EXPECT(n_ == -FI_EAGAIN, "%s: fi_cq_read gave %zd (context %p), expected -FI_EAGAIN", \
		       (what), n_, n_ == 1 ? e_.op_context : NULL);                                    \
	} while (0)

/* One success entry of `cq` for `ctx` with `want` among its flags. */
static void expect_entry(int line, struct fid_cq *cq, void *ctx, uint64_t want)
{
	struct fi_cq_tagged_entry e;
	int rc = next_entry(cq, &e);

	if (rc != 0) {
		oxt_fail(__FILE__, line, "no completion (%d) where one for %p was expected", rc, ctx);
		return;
	}
	if (e.op_context != ctx)
		oxt_fail(__FILE__, line, "completion for %p, expected %p", e.op_context, ctx);
	if ((e.flags & want) != want)
		oxt_fail(__FILE__, line, "completion flags 0x%llx lack 0x%llx", (unsigned long long)e.flags,
			 (unsigned long long)want);
}

#define EXPECT_ENTRY(cq, ctx, want) expect_entry(__LINE__, (cq), (ctx), (want))

static void arm(struct fi_triggered_context *t, struct fid_cntr *c, size_t threshold)
{
	memset(t, 0, sizeof *t);
	t->event_type = FI_TRIGGER_THRESHOLD;
	t->trigger.threshold.cntr = c;
	t->trigger.threshold.threshold = threshold;
}

static void test_alias_refusals(void)
{
	struct fid_ep *a = NULL;
	uint64_t f;

	OXT_GROUP("1. fi_ep_alias refusals; FI_TRIGGER is no endpoint default");
	EXPECT_RC(fi_ep_alias(ep, &a, FI_COMPLETION), -FI_EINVAL);
	EXPECT_RC(fi_ep_alias(ep, &a, FI_TRANSMIT | FI_RECV), -FI_EINVAL);
	EXPECT_RC(fi_ep_alias(ep, &a, FI_RECV | FI_TRIGGER), -FI_ENOSYS);
	EXPECT_RC(fi_ep_alias(ep, &a, FI_TRANSMIT | FI_MULTI_RECV), -FI_EBADFLAGS);
	EXPECT_RC(fi_ep_alias(ep, &a, FI_RECV | FI_DELIVERY_COMPLETE), -FI_EBADFLAGS);
	EXPECT(a == NULL, "a refused fi_ep_alias wrote its out-parameter");
	f = FI_TRANSMIT | FI_TRIGGER;
	EXPECT_RC(fi_control(&ep->fid, FI_SETOPSFLAG, &f), -FI_EINVAL);
	f = FI_TRANSMIT;
	EXPECT_RC(fi_control(&ep->fid, FI_GETOPSFLAG, &f), 0);
	EXPECT_EQ(f & FI_TRIGGER, 0);
}

static char sbuf[64] = "through the alias", rbuf[64];

static void test_alias_flags(void)
{
	struct fid_ep *a = NULL;
	struct fi_context c1, c2, r1, r2;
	uint64_t f;

	OXT_GROUP("2. alias flags: FI_GETOPSFLAG/FI_SETOPSFLAG; FI_COMPLETION on a selective endpoint");
	REQUIRE_RC(fi_ep_alias(ep, &a, FI_TRANSMIT | FI_COMPLETION), 0);
	REQUIRE(a != NULL, "fi_ep_alias returned 0 and no alias");
	EXPECT_EQ(a->fid.fclass, FI_CLASS_EP);
	EXPECT(a != ep, "the alias is the endpoint's own fid");
	f = FI_TRANSMIT;
	EXPECT_RC(fi_control(&a->fid, FI_GETOPSFLAG, &f), 0);
	EXPECT_EQ(f, FI_TRANSMIT | FI_COMPLETION);
	f = FI_RECV;
	EXPECT_RC(fi_control(&a->fid, FI_GETOPSFLAG, &f), 0);
	EXPECT_EQ(f, FI_RECV); /* the endpoint's rx defaults: none */

	/* the endpoint (selective, no FI_COMPLETION): no tx entry; the
	 * alias: one */
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &r1), 0);
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &r2), 0);
	EXPECT_RC(fi_send(ep, sbuf, sizeof sbuf, NULL, self, &c1), 0);
	EXPECT_ENTRY(rxcq, &r1, FI_RECV);
	EXPECT_RC(fi_send(a, sbuf, sizeof sbuf, NULL, self, &c2), 0);
	EXPECT_ENTRY(rxcq, &r2, FI_RECV);
	EXPECT_ENTRY(txcq, &c2, FI_SEND | FI_MSG);
	EXPECT_EMPTY(txcq, "the endpoint's own send (no FI_COMPLETION)");

	/* FI_SETOPSFLAG on the alias: back to no FI_COMPLETION */
	f = FI_TRANSMIT;
	EXPECT_RC(fi_control(&a->fid, FI_SETOPSFLAG, &f), 0);
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &r1), 0);
	EXPECT_RC(fi_send(a, sbuf, sizeof sbuf, NULL, self, &c1), 0);
	EXPECT_ENTRY(rxcq, &r1, FI_RECV);
	spin_ms(20);
	EXPECT_EMPTY(txcq, "a send through the alias after FI_SETOPSFLAG without FI_COMPLETION");
	f = FI_TRANSMIT | FI_MULTI_RECV;
	EXPECT_RC(fi_control(&a->fid, FI_SETOPSFLAG, &f), -FI_EBADFLAGS);
	EXPECT_RC(fi_close(&a->fid), 0);
}

static void test_alias_trigger(void)
{
	struct fid_ep *a = NULL;
	struct fi_triggered_context tw, ts, ta;
	static unsigned char src[32];
	static uint64_t sum_target_init = 5, operand = 10;
	struct fi_context r1;
	uint64_t t0, tx0, *word = (uint64_t *)(target + 128);

	OXT_GROUP("3. alias FI_TRANSMIT|FI_TRIGGER: a triggered write waits for its counter");
	REQUIRE_RC(fi_ep_alias(ep, &a, FI_TRANSMIT | FI_TRIGGER | FI_COMPLETION), 0);
	memset(target, 0, sizeof target);
	oxt_fill(src, sizeof src, 3);
	fi_cntr_set(tc, 0);
	t0 = fi_cntr_read(tc);
	tx0 = fi_cntr_read(txcntr);
	arm(&tw, tc, 3);
	EXPECT_RC(fi_write(a, src, sizeof src, NULL, self, raddr, rkey, &tw), 0);
	spin_ms(30);
	EXPECT_EQ(oxt_first_not(target, sizeof src, 0), sizeof src);
	EXPECT_EQ(fi_cntr_read(txcntr), tx0);
	EXPECT_EMPTY(txcq, "a triggered write before its threshold");
	EXPECT_RC(fi_cntr_add(tc, 2), 0);
	spin_ms(30);
	EXPECT_EQ(oxt_first_not(target, sizeof src, 0), sizeof src);
	EXPECT_EQ(fi_cntr_read(txcntr), tx0);
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_RC(fi_cntr_wait(txcntr, tx0 + 1, 5000), 0);
	EXPECT(oxt_same(target, sizeof src, 3), "the triggered write's data is not at the target");
	EXPECT_ENTRY(txcq, &tw, FI_RMA | FI_WRITE);
	spin_ms(10);
	EXPECT_EQ(fi_cntr_read(txcntr), tx0 + 1);
	EXPECT_EQ(fi_cntr_read(tc), t0 + 3);

	OXT_GROUP("3. alias FI_TRANSMIT|FI_TRIGGER: fi_send and fi_atomic through it");
	fi_cntr_set(tc, 0);
	memset(rbuf, 0, sizeof rbuf);
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &r1), 0);
	arm(&ts, tc, 1);
	EXPECT_RC(fi_send(a, sbuf, sizeof sbuf, NULL, self, &ts), 0);
	*word = sum_target_init;
	arm(&ta, tc, 2);
	EXPECT_RC(fi_atomic(a, &operand, 1, NULL, self, raddr + 128, rkey, FI_UINT64, FI_SUM, &ta), 0);
	spin_ms(30);
	EXPECT_EMPTY(rxcq, "a triggered send before its threshold");
	EXPECT_EQ(*word, 5);
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_ENTRY(rxcq, &r1, FI_RECV | FI_MSG);
	EXPECT_STR(rbuf, sbuf);
	EXPECT_ENTRY(txcq, &ts, FI_SEND | FI_MSG);
	spin_ms(20);
	EXPECT_EQ(*word, 5);
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_ENTRY(txcq, &ta, FI_ATOMIC);
	EXPECT_EQ(*word, 15);
	EXPECT_RC(fi_close(&a->fid), 0);
}

static void test_msg_trigger(void)
{
	struct fi_triggered_context t1, t2, t3, t4, t5;
	struct fi_context r1, r2;
	struct iovec iov;
	struct fi_msg m;
	struct fi_msg_tagged tm;
	struct fi_msg_atomic am;
	struct fi_msg_rma wm;
	struct fi_ioc ioc, rioc;
	struct fi_rma_ioc rma_ioc;
	struct fi_rma_iov rma_iov;
	static uint64_t operand = 7, result = 0;
	static unsigned char isrc[16];
	uint64_t *word = (uint64_t *)(target + 128);
	char tbuf[64];

	OXT_GROUP("4. fi_sendmsg and fi_tsendmsg with FI_TRIGGER");
	fi_cntr_set(tc, 10);
	memset(rbuf, 0, sizeof rbuf);
	memset(tbuf, 0, sizeof tbuf);
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &r1), 0);
	EXPECT_RC(fi_trecv(ep, tbuf, sizeof tbuf, NULL, FI_ADDR_UNSPEC, 0x77, 0, &r2), 0);
	iov.iov_base = sbuf;
	iov.iov_len = sizeof sbuf;
	arm(&t1, tc, 12);
	m = (struct fi_msg){ .msg_iov = &iov, .iov_count = 1, .addr = self, .context = &t1 };
	EXPECT_RC(fi_sendmsg(ep, &m, FI_TRIGGER | FI_COMPLETION), 0);
	arm(&t2, tc, 11);
	tm = (struct fi_msg_tagged){ .msg_iov = &iov, .iov_count = 1, .addr = self, .tag = 0x77, .context = &t2 };
	EXPECT_RC(fi_tsendmsg(ep, &tm, FI_TRIGGER | FI_COMPLETION), 0);
	spin_ms(30);
	EXPECT_EMPTY(rxcq, "triggered sends before their thresholds");
	EXPECT_EMPTY(txcq, "triggered sends before their thresholds");
	EXPECT_RC(fi_cntr_add(tc, 1), 0); /* 11: the tagged one only */
	EXPECT_ENTRY(rxcq, &r2, FI_RECV | FI_TAGGED);
	EXPECT_ENTRY(txcq, &t2, FI_SEND | FI_TAGGED);
	EXPECT_STR(tbuf, sbuf);
	spin_ms(20);
	EXPECT_EMPTY(rxcq, "the untagged send before its threshold");
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_ENTRY(rxcq, &r1, FI_RECV | FI_MSG);
	EXPECT_ENTRY(txcq, &t1, FI_SEND | FI_MSG);
	EXPECT_STR(rbuf, sbuf);

	OXT_GROUP("4. fi_atomicmsg and fi_fetch_atomicmsg with FI_TRIGGER");
	*word = 100;
	ioc = (struct fi_ioc){ .addr = &operand, .count = 1 };
	rioc = (struct fi_ioc){ .addr = &result, .count = 1 };
	rma_ioc = (struct fi_rma_ioc){ .addr = raddr + 128, .count = 1, .key = rkey };
	arm(&t3, tc, 13);
	am = (struct fi_msg_atomic){ .msg_iov = &ioc, .iov_count = 1, .addr = self, .rma_iov = &rma_ioc,
				     .rma_iov_count = 1, .datatype = FI_UINT64, .op = FI_SUM, .context = &t3 };
	EXPECT_RC(fi_atomicmsg(ep, &am, FI_TRIGGER | FI_COMPLETION), 0);
	arm(&t4, tc, 14);
	am.context = &t4;
	EXPECT_RC(fi_fetch_atomicmsg(ep, &am, &rioc, NULL, 1, FI_TRIGGER | FI_COMPLETION), 0);
	spin_ms(30);
	EXPECT_EQ(*word, 100);
	EXPECT_EMPTY(txcq, "triggered atomics before their thresholds");
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_ENTRY(txcq, &t3, FI_ATOMIC | FI_WRITE);
	EXPECT_EQ(*word, 107);
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_ENTRY(txcq, &t4, FI_ATOMIC | FI_READ);
	EXPECT_EQ(*word, 114);
	EXPECT_EQ(result, 107);

	OXT_GROUP("4. fi_writemsg with FI_INJECT|FI_TRIGGER: the data is copied when posted");
	memset(target, 0, 64);
	oxt_fill(isrc, sizeof isrc, 9);
	iov.iov_base = isrc;
	iov.iov_len = sizeof isrc;
	rma_iov = (struct fi_rma_iov){ .addr = raddr, .len = sizeof isrc, .key = rkey };
	arm(&t5, tc, 15);
	wm = (struct fi_msg_rma){ .msg_iov = &iov, .iov_count = 1, .addr = self, .rma_iov = &rma_iov,
				  .rma_iov_count = 1, .context = &t5 };
	EXPECT_RC(fi_writemsg(ep, &wm, FI_INJECT | FI_TRIGGER | FI_COMPLETION), 0);
	memset(isrc, 0xee, sizeof isrc); /* the application's buffer again */
	spin_ms(20);
	EXPECT_EQ(oxt_first_not(target, sizeof isrc, 0), sizeof isrc);
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	EXPECT_ENTRY(txcq, &t5, FI_RMA | FI_WRITE);
	EXPECT(oxt_same(target, sizeof isrc, 9), "the injected triggered write carried the buffer's later bytes");
}

static void test_reached(void)
{
	struct fi_triggered_context t;
	static unsigned char src[16];

	OXT_GROUP("5. a threshold already reached posts at once");
	memset(target, 0, 64);
	oxt_fill(src, sizeof src, 21);
	fi_cntr_set(tc, 50);
	struct iovec iov = { .iov_base = src, .iov_len = sizeof src };
	struct fi_rma_iov rma_iov = { .addr = raddr, .len = sizeof src, .key = rkey };
	struct fi_msg_rma wm = { .msg_iov = &iov, .iov_count = 1, .addr = self, .rma_iov = &rma_iov,
				 .rma_iov_count = 1, .context = &t };

	arm(&t, tc, 40);
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER | FI_COMPLETION), 0);
	EXPECT_ENTRY(txcq, &t, FI_RMA | FI_WRITE);
	EXPECT(oxt_same(target, sizeof src, 21), "the write is not at the target");
	arm(&t, tc, 50);
	oxt_fill(src, sizeof src, 22);
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER | FI_COMPLETION), 0);
	EXPECT_ENTRY(txcq, &t, FI_RMA | FI_WRITE);
	EXPECT(oxt_same(target, sizeof src, 22), "the write is not at the target");
}

static void test_order(void)
{
	struct fid_ep *a = NULL;
	struct fi_triggered_context t;
	struct fi_context c;
	static char text_a[] = "Hello2 from Client!", text_b[] = "Hello1 from Client!";
	uint64_t tx0;

	OXT_GROUP("6. an armed write holds nothing up and fires after what its counter counts");
	REQUIRE_RC(fi_ep_alias(ep, &a, FI_TRANSMIT | FI_TRIGGER), 0);
	memset(target, 0, 64);
	tx0 = fi_cntr_read(txcntr);
	arm(&t, txcntr, tx0 + 1);
	EXPECT_RC(fi_write(a, text_a, strlen(text_a), NULL, self, raddr, rkey, &t), 0);
	EXPECT_RC(fi_write(ep, text_b, strlen(text_b), NULL, self, raddr, rkey, &c), 0);
	EXPECT_RC(fi_cntr_wait(txcntr, tx0 + 2, 5000), 0);
	EXPECT_STR((char *)target, text_a);
	spin_ms(10);
	EXPECT_EMPTY(txcq, "writes without FI_COMPLETION on a selective endpoint");
	EXPECT_RC(fi_close(&a->fid), 0);
}

static void test_bad_contexts(void)
{
	struct fi_triggered_context t;
	struct fi_context rc;
	static unsigned char src[16];
	struct iovec iov = { .iov_base = src, .iov_len = sizeof src };
	struct fi_rma_iov rma_iov = { .addr = raddr, .len = sizeof src, .key = rkey };
	struct fi_msg_rma wm = { .msg_iov = &iov, .iov_count = 1, .addr = self, .rma_iov = &rma_iov,
				 .rma_iov_count = 1, .context = &t };
	struct fi_msg rm = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &rc };
	struct fi_msg_tagged trm = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &rc };
	uint64_t tx0 = fi_cntr_read(txcntr);

	OXT_GROUP("7. bad triggered contexts and triggered receives refused; nothing posted");
	memset(target, 0, 64);
	oxt_fill(src, sizeof src, 31);
	fi_cntr_set(tc, 0);
	wm.context = NULL;
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), -FI_EINVAL);
	wm.context = &t;
	arm(&t, NULL, 1);
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), -FI_EINVAL);
	arm(&t, (struct fid_cntr *)txcq, 1);
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), -FI_EINVAL);
	arm(&t, tc, 1);
	t.event_type = FI_TRIGGER_XPU;
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), -FI_ENOSYS);
	t.event_type = (enum fi_trigger_event)77;
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), -FI_EINVAL);
	EXPECT_RC(fi_recvmsg(ep, &rm, FI_TRIGGER), -FI_ENOSYS);
	EXPECT_RC(fi_trecvmsg(ep, &trm, FI_TRIGGER), -FI_ENOSYS);
	/* a bad peer is refused at the call, not when it fires */
	arm(&t, tc, 1);
	wm.addr = 999;
	EXPECT(fi_writemsg(ep, &wm, FI_TRIGGER) < 0, "a triggered write to fi_addr 999 was accepted");
	wm.addr = self;
	EXPECT_RC(fi_cntr_add(tc, 5), 0);
	spin_ms(30);
	EXPECT_EMPTY(txcq, "refused operations");
	EXPECT_EMPTY(rxcq, "refused receives");
	EXPECT_EQ(fi_cntr_read(txcntr), tx0);
	EXPECT_EQ(fi_cntr_readerr(txcntr), 0);
	EXPECT_EQ(oxt_first_not(target, sizeof src, 0), sizeof src);
}

static void test_cancel(void)
{
	struct fi_triggered_context t;
	struct fi_cq_tagged_entry e;
	static unsigned char src[16];
	struct iovec iov = { .iov_base = src, .iov_len = sizeof src };
	struct fi_rma_iov rma_iov = { .addr = raddr, .len = sizeof src, .key = rkey };
	struct fi_msg_rma wm = { .msg_iov = &iov, .iov_count = 1, .addr = self, .rma_iov = &rma_iov,
				 .rma_iov_count = 1, .context = &t };
	uint64_t tx0 = fi_cntr_read(txcntr);

	OXT_GROUP("8. fi_cancel of an armed operation: FI_ECANCELED, and it never fires");
	memset(target, 0, 64);
	oxt_fill(src, sizeof src, 41);
	fi_cntr_set(tc, 0);
	arm(&t, tc, 2);
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), 0);
	EXPECT_RC(fi_cancel(&ep->fid, &t), 0);
	EXPECT_EQ(next_entry(txcq, &e), FI_ECANCELED);
	EXPECT(e.op_context == &t, "the canceled entry's context is %p, expected %p", e.op_context, (void *)&t);
	EXPECT_RC(fi_cancel(&ep->fid, &t), -FI_ENOENT);
	EXPECT_RC(fi_cntr_add(tc, 2), 0);
	spin_ms(30);
	EXPECT_EQ(oxt_first_not(target, sizeof src, 0), sizeof src);
	EXPECT_EQ(fi_cntr_read(txcntr), tx0);
	EXPECT_EMPTY(txcq, "a canceled triggered write");
}

struct waiter {
	uint64_t until;
	int rc;
	double woke;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->rc = fi_cntr_wait(txcntr, w->until, 5000);
	w->woke = oxt_now_ms();
	return NULL;
}

static void test_sleeper(void)
{
	struct fi_triggered_context t;
	static unsigned char src[16];
	struct iovec iov = { .iov_base = src, .iov_len = sizeof src };
	struct fi_rma_iov rma_iov = { .addr = raddr, .len = sizeof src, .key = rkey };
	struct fi_msg_rma wm = { .msg_iov = &iov, .iov_count = 1, .addr = self, .rma_iov = &rma_iov,
				 .rma_iov_count = 1, .context = &t };
	struct waiter w = { .rc = 1 };
	pthread_t th;
	double t0;

	OXT_GROUP("9. a reader asleep in fi_cntr_wait sees the write another thread's fi_cntr_add fires");
	memset(target, 0, 64);
	oxt_fill(src, sizeof src, 51);
	fi_cntr_set(tc, 0);
	w.until = fi_cntr_read(txcntr) + 1;
	arm(&t, tc, 1);
	EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), 0);
	REQUIRE(pthread_create(&th, NULL, wait_thread, &w) == 0, "pthread_create");
	oxt_sleep_ms(100); /* (past the wait's spin: it sleeps) */
	t0 = oxt_now_ms();
	EXPECT_RC(fi_cntr_add(tc, 1), 0);
	pthread_join(th, NULL);
	EXPECT_RC(w.rc, 0);
	/* (Not a speed threshold: a wait that only its 5 s timeout ended
	 * still sees the write, from its last progress, but returns after
	 * it; the safety tick is 60 s.) */
	EXPECT(w.woke - t0 < 4000, "woke %.1f ms after fi_cntr_add: the timeout ended the wait, not the counter",
	       w.woke - t0);
	EXPECT(oxt_same(target, sizeof src, 51), "the triggered write is not at the target");
}

static void test_close(void)
{
	struct fid_ep *a = NULL, *b = NULL;
	struct fi_triggered_context t;
	static unsigned char src[16];
	uint64_t f;

	OXT_GROUP("10. closing: the endpoint after its aliases; an alias of an alias; an armed operation");
	REQUIRE_RC(fi_ep_alias(ep, &a, FI_TRANSMIT | FI_TRIGGER), 0);
	EXPECT_RC(fi_ep_alias(a, &b, FI_RECV | FI_COMPLETION), 0);
	if (b) {
		f = FI_RECV;
		EXPECT_RC(fi_control(&b->fid, FI_GETOPSFLAG, &f), 0);
		EXPECT_EQ(f, FI_RECV | FI_COMPLETION);
		f = FI_TRANSMIT; /* the endpoint's, not the first alias's */
		EXPECT_RC(fi_control(&b->fid, FI_GETOPSFLAG, &f), 0);
		EXPECT_EQ(f & FI_TRIGGER, 0);
	}
	EXPECT_RC(fi_ep_bind(a, &av->fid, 0), -FI_EINVAL);
	EXPECT_RC(fi_close(&ep->fid), -FI_EBUSY);
	EXPECT_RC(fi_close(&a->fid), 0);
	EXPECT_RC(fi_close(&ep->fid), -FI_EBUSY); /* b is still open */
	if (b)
		EXPECT_RC(fi_close(&b->fid), 0);
	fi_cntr_set(tc, 0);
	arm(&t, tc, 1000);
	{
		struct iovec iov = { .iov_base = src, .iov_len = sizeof src };
		struct fi_rma_iov rma_iov = { .addr = raddr, .len = sizeof src, .key = rkey };
		struct fi_msg_rma wm = { .msg_iov = &iov, .iov_count = 1, .addr = self, .rma_iov = &rma_iov,
					 .rma_iov_count = 1, .context = &t };

		EXPECT_RC(fi_writemsg(ep, &wm, FI_TRIGGER), 0);
	}
	spin_ms(10);
	if (env.info->domain_attr->mr_mode & FI_MR_ENDPOINT)
		EXPECT_RC(fi_close(&mr->fid), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	ep = NULL;
}

int main(int argc, char **argv)
{
	(void)argc;
	oxt_init(argv[0]);
	/* (Only an arrival, or the endpoint's own re-check, ends a sleep: group 9.) */
	setenv("FI_OXMR_WAIT_TICK_MS", "60000", 1);
	open_all();
	test_alias_refusals();
	test_alias_flags();
	test_alias_trigger();
	test_msg_trigger();
	test_reached();
	test_order();
	test_bad_contexts();
	test_cancel();
	test_sleeper();
	test_close();
	if (!(env.info->domain_attr->mr_mode & FI_MR_ENDPOINT))
		EXPECT_RC(fi_close(&mr->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&tc->fid), 0);
	EXPECT_RC(fi_close(&txcntr->fid), 0);
	EXPECT_RC(fi_close(&rxcq->fid), 0);
	EXPECT_RC(fi_close(&txcq->fid), 0);
	oxt_close(&env);
	return oxt_done();
}
