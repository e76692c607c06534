/*
 * threads.c - FI_THREAD_SAFE data path: several threads post and poll on
 * the same endpoints and CQs at once.
 *
 * One process, two RDM endpoints A and B (each with its own CQ). Two sender
 * threads post tagged sends on A (64 B inline, 20000 B rendezvous, 100000 B
 * shared copies: B asks A to copy half, so A's engine must be progressed by
 * whichever thread polls A's CQ), and both also poll A's CQ, counting every
 * send completion any of them reads. Two receiver threads poll B's CQ, where
 * the main thread posted one exactly-tagged receive per message, and check
 * each completion's length and data. Every engine and CQ is locked and
 * progressed by several threads at once; a lock that lets two threads in
 * loses or duplicates completions, corrupts data, or crashes.
 *
 * Checks: every message received once, with its length and bytes; every
 * send completed once; no error completions (and no failing
 * fi_cq_readerr); all within the watchdog.
 */
#include "../common/oxt.h"

#include <stdatomic.h>

#define SENDERS 2
#define PER_SENDER 240
#define MSGS (SENDERS * PER_SENDER)
#define SLOT (100 * 1024)
#define ROUNDS 6

static const size_t sizes[] = { 64, 20000, 100000 };

struct ep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t self;
};

static struct oxt_env env;
static struct fid_av *av;
static struct ep a, b;
static uint8_t *txbuf, *rxbuf;
static struct fi_context2 rctx[MSGS], sctx[MSGS];
static int received[MSGS];
static atomic_int recv_done, send_done, bad_data, bad_comp, bad_readerr, post_fail;

static size_t size_of(int idx) { return sizes[idx % 3]; }

static uint8_t pattern(int idx, size_t off) { return (uint8_t)(idx * 31 + off * 7 + 1); }

static void open_ep(struct ep *e)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 2 * MSGS };
	char name[64];
	size_t len = sizeof name;

	REQUIRE_RC(fi_cq_open(env.domain, &ca, &e->cq, NULL), 0);
	REQUIRE_RC(fi_endpoint(env.domain, env.info, &e->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(e->ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(e->ep), 0);
	REQUIRE_RC(fi_getname(&e->ep->fid, name, &len), 0);
	REQUIRE(fi_av_insert(av, name, 1, &e->self, 0, NULL) == 1, "fi_av_insert");
}

/* Read one entry of `cq`; errors are counted, and so is a failing
 * fi_cq_readerr after -FI_EAVAIL (with another thread's fi_cq_readerr
 * taking the entry first it can only follow an error completion, itself
 * a failure here). */
static int poll_one(struct fid_cq *cq, struct fi_cq_tagged_entry *e)
{
	ssize_t n = fi_cq_read(cq, e, 1);

	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };
		ssize_t r = fi_cq_readerr(cq, &err, 0);
		char rc[160];

		if (r == 1) {
			printf("# error completion: %s\n", fi_strerror(err.err));
			atomic_fetch_add(&bad_comp, 1);
		} else {
			printf("# fi_cq_readerr after -FI_EAVAIL: expected 1, got %s\n",
			       oxt_rcstr(r, rc, sizeof rc));
			atomic_fetch_add(&bad_readerr, 1);
		}
		return 0;
	}
	return n == 1;
}

static void *sender(void *arg)
{
	int t = (int)(intptr_t)arg;
	struct fi_cq_tagged_entry e;

	for (int k = 0; k < PER_SENDER; k++) {
		int idx = t * PER_SENDER + k;
		ssize_t rc;

		do {
			rc = fi_tsend(a.ep, txbuf + (size_t)idx * SLOT, size_of(idx), NULL, b.self,
				      (uint64_t)idx, &sctx[idx]);
			/* Poll A's CQ whether or not the post went through:
			 * the other sender and this one share it. */
			if (poll_one(a.cq, &e))
				atomic_fetch_add(&send_done, 1);
		} while (rc == -FI_EAGAIN);
		if (rc) {
			printf("# fi_tsend %d: %s\n", idx, fi_strerror((int)-rc));
			atomic_fetch_add(&post_fail, 1);
		}
	}
	double until = oxt_now_ms() + 30000;

	while (atomic_load(&send_done) < MSGS && oxt_now_ms() < until)
		if (poll_one(a.cq, &e))
			atomic_fetch_add(&send_done, 1);
	return NULL;
}

static void *receiver(void *arg)
{
	struct fi_cq_tagged_entry e;
	double until = oxt_now_ms() + 30000;

	(void)arg;
	while (atomic_load(&recv_done) < MSGS && oxt_now_ms() < until) {
		if (!poll_one(b.cq, &e))
			continue;
		int idx = (int)((struct fi_context2 *)e.op_context - rctx);

		if (idx < 0 || idx >= MSGS || e.tag != (uint64_t)idx || e.len != size_of(idx)) {
			printf("# receive completion: context %d tag %" PRIu64 " len %zu\n", idx, e.tag,
			       e.len);
			atomic_fetch_add(&bad_comp, 1);
		} else {
			const uint8_t *p = rxbuf + (size_t)idx * SLOT;

			for (size_t off = 0; off < e.len; off++)
				if (p[off] != pattern(idx, off)) {
					printf("# message %d: byte %zu is %u, expected %u\n", idx, off, p[off],
					       pattern(idx, off));
					atomic_fetch_add(&bad_data, 1);
					break;
				}
			__atomic_fetch_add(&received[idx], 1, __ATOMIC_RELAXED);
		}
		atomic_fetch_add(&recv_done, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[2 * SENDERS];
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	(void)argc;
	oxt_init(argv[0]);
	oxt_open(&env);
	REQUIRE(env.info->domain_attr->threading == FI_THREAD_SAFE,
		"oxmr offers threading %d, expected FI_THREAD_SAFE",
		env.info->domain_attr->threading);
	REQUIRE_RC(fi_av_open(env.domain, &aa, &av, NULL), 0);
	open_ep(&a);
	open_ep(&b);
	txbuf = malloc((size_t)MSGS * SLOT);
	rxbuf = malloc((size_t)MSGS * SLOT);
	REQUIRE(txbuf && rxbuf, "malloc");
	for (int idx = 0; idx < MSGS; idx++)
		for (size_t off = 0; off < size_of(idx); off++)
			txbuf[(size_t)idx * SLOT + off] = pattern(idx, off);

	for (int round = 0; round < ROUNDS; round++) {
		int dup = 0, missing = 0;
		static char name[160];

		/* (the previous round's line is printed from this buffer) */
		oxt_group_end();
		snprintf(name, sizeof name,
			 "round %d of %d: 2 threads send (64 B, 20000 B, 100000 B) and poll one CQ while "
			 "2 threads poll the receiver's CQ: every message once, intact",
			 round + 1, ROUNDS);
		OXT_GROUP(name);
		memset(received, 0, sizeof received);
		atomic_store(&recv_done, 0);
		atomic_store(&send_done, 0);
		for (int idx = 0; idx < MSGS; idx++) {
			memset(rxbuf + (size_t)idx * SLOT, 0, SLOT);
			REQUIRE_RC(fi_trecv(b.ep, rxbuf + (size_t)idx * SLOT, SLOT, NULL, a.self,
					    (uint64_t)idx, 0, &rctx[idx]),
				   0);
		}
		for (int t = 0; t < SENDERS; t++) {
			REQUIRE(pthread_create(&th[t], NULL, sender, (void *)(intptr_t)t) == 0,
				"pthread_create");
			REQUIRE(pthread_create(&th[SENDERS + t], NULL, receiver, NULL) == 0,
				"pthread_create");
		}
		for (int t = 0; t < 2 * SENDERS; t++)
			pthread_join(th[t], NULL);
		for (int idx = 0; idx < MSGS; idx++) {
			dup += received[idx] > 1;
			missing += received[idx] == 0;
		}
		EXPECT(post_fail == 0, "%d sends failed to post", (int)post_fail);
		EXPECT(bad_comp == 0, "%d wrong or error completions", (int)bad_comp);
		EXPECT(bad_readerr == 0, "%d failing fi_cq_readerr calls after -FI_EAVAIL",
		       (int)bad_readerr);
		EXPECT(bad_data == 0, "%d messages with wrong bytes", (int)bad_data);
		EXPECT(dup == 0 && missing == 0, "receives: %d reported twice, %d never (of %d)", dup,
		       missing, MSGS);
		EXPECT(send_done == MSGS, "send completions: expected %d, got %d", MSGS,
		       (int)send_done);
		if (post_fail || bad_comp || bad_readerr || bad_data || dup || missing ||
		    send_done != MSGS)
			break;
	}

	EXPECT_RC(fi_close(&a.ep->fid), 0);
	EXPECT_RC(fi_close(&b.ep->fid), 0);
	EXPECT_RC(fi_close(&a.cq->fid), 0);
	EXPECT_RC(fi_close(&b.cq->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	oxt_close(&env);
	free(txbuf);
	free(rxbuf);
	return oxt_done();
}
