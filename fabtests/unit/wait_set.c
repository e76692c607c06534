/*
 * Wait sets (fi_poll(3): fi_wait_open, fi_wait, fi_trywait and
 * fi_control(FI_GETWAIT) on a set, fi_close): a set holding an RDM
 * endpoint's CQ and its FI_RECV counter (both opened with
 * wait_obj = FI_WAIT_SET), once with an FI_WAIT_FD set and once with an
 * FI_WAIT_UNSPEC one, each with its own endpoint; a peer process sends to
 * the endpoint named by each command.
 *
 * For each set:
 *  1. fi_wait with nothing coming times out (-FI_ETIMEDOUT), sleeping.
 *  2. fi_wait (5 s timeout) wakes with a message the peer sends 300 ms
 *     later: the completion and the counter are there when it returns; the
 *     wait used little CPU (getrusage user+sys under 20% of the wait) and
 *     slept few times (voluntary context switches, at most MAX_WAKES: a
 *     1 ms tick would be ~300). The provider's safety tick
 *     (FI_OXMR_WAIT_TICK_MS) is 60 s here, longer than the timeouts, so
 *     only the arrival can end a wait in time.
 *  3. The fd from FI_GETWAIT, after fi_trywait on the set returned 0, is
 *     not readable, and becomes readable (poll(), 5 s timeout) when the
 *     peer's message arrives 300 ms later.
 *  4. Events that came before fi_wait are not missed: a message already
 *     sent (not yet progressed), one already progressed into the CQ by a
 *     counter read, fi_cntr_add, fi_cq_signal; each is reported by the
 *     next fi_wait (a lost one would time out after 5 s), a counter's
 *     change once.
 * Then, with the FI_WAIT_FD set:
 *  5. An EQ opened with FI_WAIT_SET in the set: fi_eq_write ends fi_wait.
 *  6. fi_close of a set with a member open is -FI_EBUSY (fi_poll(3)),
 *     until the last member is closed.
 *  7. Bad arguments are refused: fi_wait_open without attr, with flags,
 *     with FI_WAIT_NONE, FI_WAIT_SET or an unknown wait object, NULL out;
 *     FI_WAIT_MUTEX_COND -FI_ENOSYS; FI_WAIT_SET with a NULL wait_set or a
 *     fid that is not a wait set; a set of another fabric; FI_GETWAIT with
 *     a NULL argument, an unknown command; a FI_WAIT_YIELD set has no fd.
 *
 * Runs over shared memory and (fabtests/run.sh) with FI_OXMR_WIRE=tcp,
 * whose arrivals ring the set through sockets instead of the doorbell.
 * The child prints its own lines as "wait_set[child]".
 */
#include "oxt.h"

#include <sys/resource.h>
#include <sys/wait.h>

#define DELAY_MS 300
#define MAX_WAKES 30
#define NSETS 2

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* Voluntary context switches so far (each sleep that ended is one). */
static long sleeps_so_far(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_nvcsw;
}

/* The peer: on each command (a letter and the index of the endpoint to
 * send to), send 64 bytes, 's': DELAY_MS later, 'n': at once, and report
 * when the send completed. */
static int child(int sock)
{
	struct oxt_ep s;
	fi_addr_t to[NSETS];
	char names[NSETS][64];
	unsigned char buf[64];
	struct fi_context c;
	void *ctx;
	char cmd[2];

	oxt_init("wait_set[child]");
	oxt_become_peer();
	oxt_ep_open(&s, 0, FI_WAIT_NONE);
	REQUIRE(read(sock, names, sizeof names) == sizeof names, "socketpair read");
	REQUIRE(write(sock, s.name, sizeof s.name) == sizeof s.name, "socketpair write");
	for (int k = 0; k < NSETS; k++)
		REQUIRE_RC(fi_av_insert(s.av, names[k], 1, &to[k], 0, NULL), 1);
	while (read(sock, cmd, 2) == 2 && cmd[0] != 'q') {
		double t;
		int rc;

		if (cmd[0] == 's')
			usleep(DELAY_MS * 1000);
		oxt_fill(buf, sizeof buf, (unsigned)cmd[0]);
		REQUIRE_RC(fi_send(s.ep, buf, sizeof buf, NULL, to[cmd[1] - '0'], &c), 0);
		rc = oxt_next_completion(s.cq, 10000, &ctx);
		EXPECT(rc == 0 && ctx == &c, "child: %c: completion %d", cmd[0], rc);
		t = oxt_now_ms();
		REQUIRE(write(sock, &t, sizeof t) == sizeof t, "socketpair write");
	}
	oxt_ep_close(&s);
	return oxt_done();
}

/* One set with its members and the endpoint that feeds them. */
struct side {
	const char *what;
	enum fi_wait_obj obj;
	struct fid_wait *ws;
	struct fid_cq *cq;
	struct fid_cntr *cntr;
	struct fid_ep *ep;
	char name[64];
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static fi_addr_t peer;

static void side_open(struct side *x)
{
	struct fi_wait_attr wa = { .wait_obj = x->obj };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64, .wait_obj = FI_WAIT_SET };
	struct fi_cntr_attr ta = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_SET };
	size_t len = sizeof x->name;

	REQUIRE_RC(fi_wait_open(fabric, &wa, &x->ws), 0);
	ca.wait_set = x->ws;
	ta.wait_set = x->ws;
	REQUIRE_RC(fi_cq_open(domain, &ca, &x->cq, NULL), 0);
	REQUIRE_RC(fi_cntr_open(domain, &ta, &x->cntr, NULL), 0);
	REQUIRE_RC(fi_endpoint(domain, info, &x->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->cntr->fid, FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(x->ep), 0);
	REQUIRE_RC(fi_getname(&x->ep->fid, x->name, &len), 0);
}

/* Ask the peer to send to side `i` ('s': DELAY_MS from now, 'n': now). */
static void ask(int sock, char cmd, int i)
{
	char c[2] = { cmd, (char)('0' + i) };

	REQUIRE(write(sock, c, 2) == 2, "socketpair write");
}

static double peer_sent(int sock)
{
	double t;

	REQUIRE(read(sock, &t, sizeof t) == sizeof t, "socketpair read");
	return t;
}

/* The one completion of the receive posted with `c` into `rbuf`, and the
 * bytes the peer's command `cmd` sent. */
static void expect_received(struct side *x, struct fi_context *c, unsigned char *rbuf, char cmd)
{
	struct fi_cq_tagged_entry ent;
	ssize_t n = fi_cq_read(x->cq, &ent, 1);

	EXPECT(n == 1, "%s: fi_cq_read after the wait: %zd, expected the receive's completion", x->what, n);
	if (n == 1) {
		EXPECT(ent.op_context == c, "%s: a completion for another operation", x->what);
		EXPECT(oxt_same(rbuf, 64, (unsigned)cmd), "%s: received other bytes", x->what);
	}
}

/* Checks of a wait that began at t0 (CPU c0, sleeps cs0) and ended now. */
static void check_sleep(const char *what, double t0, double c0, long cs0)
{
	double took = oxt_now_ms() - t0, cpu = cpu_ms() - c0;
	long cs = sleeps_so_far() - cs0;

	EXPECT(cpu < 0.2 * took, "%s: %.1f ms of CPU in a %.1f ms wait: it polls instead of sleeping", what, cpu, took);
	EXPECT(cs <= MAX_WAKES, "%s: %ld sleeps in a %.1f ms wait: it ticks instead of waking on arrival", what, cs,
	       took);
	printf("# %s: waited %.1f ms, %.1f ms CPU, %ld sleeps\n", what, took, cpu, cs);
}

static void groups_for(struct side *x, int i, int sock)
{
	/* (OXT_GROUP keeps the pointer: one buffer per group.) */
	static char titles[NSETS][4][256];
	char *title;
	struct fi_context c;
	unsigned char rbuf[64];
	double t0, c0;
	uint64_t before;
	long cs0;
	int rc, fd = -1;

	title = titles[i][0];
	snprintf(title, sizeof titles[i][0], "1. %s set: fi_wait with nothing coming times out (-FI_ETIMEDOUT), sleeping", x->what);
	OXT_GROUP(title);
	t0 = oxt_now_ms();
	c0 = cpu_ms();
	cs0 = sleeps_so_far();
	rc = fi_wait(x->ws, DELAY_MS);
	EXPECT_RC(rc, -FI_ETIMEDOUT);
	EXPECT(oxt_now_ms() - t0 >= DELAY_MS - 20, "fi_wait(%d ms) returned after %.1f ms", DELAY_MS, oxt_now_ms() - t0);
	check_sleep("fi_wait with nothing coming", t0, c0, cs0);
	EXPECT_RC(fi_wait(x->ws, 0), -FI_ETIMEDOUT);

	title = titles[i][1];
	snprintf(title, sizeof titles[i][1],
		 "2. %s set: fi_wait (5 s timeout) wakes with the message its peer sends 300 ms later, sleeping", x->what);
	OXT_GROUP(title);
	memset(rbuf, 0, sizeof rbuf);
	before = fi_cntr_read(x->cntr);
	REQUIRE_RC(fi_recv(x->ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c), 0);
	ask(sock, 's', i);
	t0 = oxt_now_ms();
	c0 = cpu_ms();
	cs0 = sleeps_so_far();
	rc = fi_wait(x->ws, 5000);
	EXPECT_RC(rc, 0);
	EXPECT(oxt_now_ms() - t0 >= DELAY_MS / 2, "fi_wait returned after %.1f ms, before the peer sent",
	       oxt_now_ms() - t0);
	EXPECT(oxt_now_ms() - t0 < 4000, "fi_wait returned after %.1f ms: the timeout ended it, not the arrival",
	       oxt_now_ms() - t0);
	check_sleep("fi_wait for the peer's message", t0, c0, cs0);
	peer_sent(sock);
	EXPECT(fi_cntr_read(x->cntr) == before + 1, "%s: the FI_RECV counter is %" PRIu64 ", expected %" PRIu64,
	       x->what, fi_cntr_read(x->cntr), before + 1);
	expect_received(x, &c, rbuf, 's');
	/* (The CQ read empty, the counter's change reported: nothing left.) */
	EXPECT_RC(fi_wait(x->ws, 0), -FI_ETIMEDOUT);

	title = titles[i][2];
	snprintf(title, sizeof titles[i][2],
		 "3. %s set: its FI_GETWAIT fd, after fi_trywait, wakes poll() with the message sent 300 ms later",
		 x->what);
	OXT_GROUP(title);
	{
		enum fi_wait_obj obj = FI_WAIT_NONE;
		struct fid *fids[1] = { &x->ws->fid };
		struct pollfd p;

		rc = fi_control(&x->ws->fid, FI_GETWAIT, &fd);
		EXPECT_RC(rc, 0);
		EXPECT_RC(fi_control(&x->ws->fid, FI_GETWAITOBJ, &obj), 0);
		EXPECT(obj == FI_WAIT_FD, "FI_GETWAITOBJ: %d, expected FI_WAIT_FD", obj);
		if (rc == 0) {
			memset(rbuf, 0, sizeof rbuf);
			REQUIRE_RC(fi_recv(x->ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c), 0);
			EXPECT_RC(fi_trywait(fabric, fids, 1), 0);
			p = (struct pollfd){ .fd = fd, .events = POLLIN };
			EXPECT(poll(&p, 1, 0) == 0, "the set's fd is readable after fi_trywait returned 0, nothing sent");
			ask(sock, 's', i);
			t0 = oxt_now_ms();
			c0 = cpu_ms();
			cs0 = sleeps_so_far();
			p = (struct pollfd){ .fd = fd, .events = POLLIN };
			rc = poll(&p, 1, 5000);
			EXPECT(rc == 1, "poll on the set's fd: %d, no wake-up within 5 s of a message sent after 300 ms", rc);
			EXPECT(oxt_now_ms() - t0 >= DELAY_MS / 2, "poll returned after %.1f ms, before the peer sent",
			       oxt_now_ms() - t0);
			check_sleep("poll() on the set's fd", t0, c0, cs0);
			peer_sent(sock);
			/* The read runs progress: the completion is there. */
			expect_received(x, &c, rbuf, 's');
			/* Read: fi_trywait returns 0 again (the counter's change
			 * may make one -FI_EAGAIN first), and the fd sleeps. */
			rc = fi_trywait(fabric, fids, 1);
			if (rc == -FI_EAGAIN)
				rc = fi_trywait(fabric, fids, 1);
			EXPECT_RC(rc, 0);
			p = (struct pollfd){ .fd = fd, .events = POLLIN };
			EXPECT(poll(&p, 1, 50) == 0, "the set's fd is readable with nothing new");
		}
	}

	title = titles[i][3];
	snprintf(title, sizeof titles[i][3], "4. %s set: events that came before fi_wait are not missed", x->what);
	OXT_GROUP(title);
	/* A message in our queue (or socket), nothing progressed it yet. */
	memset(rbuf, 0, sizeof rbuf);
	REQUIRE_RC(fi_recv(x->ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c), 0);
	ask(sock, 'n', i);
	peer_sent(sock);
	oxt_sleep_ms(50);
	t0 = oxt_now_ms();
	EXPECT_RC(fi_wait(x->ws, 5000), 0);
	EXPECT(oxt_now_ms() - t0 < 4000, "a message sent before fi_wait: it returned after %.1f ms", oxt_now_ms() - t0);
	expect_received(x, &c, rbuf, 'n');
	EXPECT_RC(fi_wait(x->ws, 0), -FI_ETIMEDOUT);
	/* A completion already in the CQ: a counter read ran the progress
	 * that put it there (and wrote the member's fd). */
	memset(rbuf, 0, sizeof rbuf);
	before = fi_cntr_read(x->cntr);
	REQUIRE_RC(fi_recv(x->ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c), 0);
	ask(sock, 'n', i);
	peer_sent(sock);
	t0 = oxt_now_ms();
	while (fi_cntr_read(x->cntr) == before && oxt_now_ms() - t0 < 5000)
		;
	EXPECT(fi_cntr_read(x->cntr) == before + 1, "the counter did not count the message");
	t0 = oxt_now_ms();
	EXPECT_RC(fi_wait(x->ws, 5000), 0);
	EXPECT(oxt_now_ms() - t0 < 4000, "a completion queued before fi_wait: it returned after %.1f ms",
	       oxt_now_ms() - t0);
	expect_received(x, &c, rbuf, 'n');
	/* The counter's change was taken by a look before the CQ was read
	 * empty... or is reported now: either way once. */
	rc = fi_wait(x->ws, 0);
	if (rc == 0)
		rc = fi_wait(x->ws, 0);
	EXPECT_RC(rc, -FI_ETIMEDOUT);
	/* fi_cntr_add before the wait: reported once. */
	EXPECT_RC(fi_cntr_add(x->cntr, 1), 0);
	EXPECT_RC(fi_wait(x->ws, 5000), 0);
	EXPECT_RC(fi_wait(x->ws, 0), -FI_ETIMEDOUT);
	/* fi_cq_signal of a member before the wait: once. */
	EXPECT_RC(fi_cq_signal(x->cq), 0);
	EXPECT_RC(fi_wait(x->ws, 5000), 0);
	EXPECT_RC(fi_wait(x->ws, 0), -FI_ETIMEDOUT);
}

static void refusals(void)
{
	struct fi_wait_attr wa = { .wait_obj = FI_WAIT_FD };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 8, .wait_obj = FI_WAIT_SET };
	struct fi_cntr_attr ta = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_SET };
	struct fi_eq_attr ea = { .size = 8, .wait_obj = FI_WAIT_SET };
	struct fid_wait *ws = NULL, *ys = NULL;
	struct fid_cq *cq = NULL, *plain = NULL;
	struct fid_cntr *cntr = NULL;
	struct fid_eq *eq = NULL;
	struct fid_fabric *other = NULL;
	struct fid_domain *odom = NULL;
	enum fi_wait_obj obj = FI_WAIT_NONE;
	int fd = -1;

	OXT_GROUP("7. bad arguments are refused: fi_wait_open's attr, FI_WAIT_SET without a wait set or with another "
		  "fid, a set of another fabric, fi_control; an FI_WAIT_YIELD set has no fd");
	EXPECT_RC(fi_wait_open(fabric, NULL, &ws), -FI_EINVAL);
	EXPECT_RC(fi_wait_open(fabric, &wa, NULL), -FI_EINVAL);
	wa.flags = 1;
	EXPECT_RC(fi_wait_open(fabric, &wa, &ws), -FI_EINVAL);
	wa.flags = 0;
	wa.wait_obj = FI_WAIT_NONE;
	EXPECT_RC(fi_wait_open(fabric, &wa, &ws), -FI_EINVAL);
	wa.wait_obj = FI_WAIT_SET;
	EXPECT_RC(fi_wait_open(fabric, &wa, &ws), -FI_EINVAL);
	wa.wait_obj = (enum fi_wait_obj)99;
	EXPECT_RC(fi_wait_open(fabric, &wa, &ws), -FI_EINVAL);
	wa.wait_obj = FI_WAIT_MUTEX_COND;
	EXPECT_RC(fi_wait_open(fabric, &wa, &ws), -FI_ENOSYS);

	wa.wait_obj = FI_WAIT_FD;
	REQUIRE_RC(fi_wait_open(fabric, &wa, &ws), 0);
	EXPECT_RC(fi_control(&ws->fid, FI_GETWAIT, NULL), -FI_EINVAL);
	EXPECT_RC(fi_control(&ws->fid, 12345, &fd), -FI_ENOSYS);
	/* FI_WAIT_SET with no set, or with a fid that is not one. */
	EXPECT_RC(fi_cq_open(domain, &ca, &cq, NULL), -FI_EINVAL);
	EXPECT_RC(fi_cntr_open(domain, &ta, &cntr, NULL), -FI_EINVAL);
	EXPECT_RC(fi_eq_open(fabric, &ea, &eq, NULL), -FI_EINVAL);
	{
		struct fi_cq_attr pa = { .format = FI_CQ_FORMAT_TAGGED, .size = 8 };

		REQUIRE_RC(fi_cq_open(domain, &pa, &plain, NULL), 0);
		ca.wait_set = (struct fid_wait *)plain;
		EXPECT_RC(fi_cq_open(domain, &ca, &cq, NULL), -FI_EINVAL);
		EXPECT_RC(fi_close(&plain->fid), 0);
	}
	/* (A wait_set the wait object does not name is ignored: fi_cq(3).) */
	ca.wait_set = ws;
	ca.wait_obj = FI_WAIT_NONE;
	EXPECT_RC(fi_cq_open(domain, &ca, &cq, NULL), 0);
	if (cq)
		EXPECT_RC(fi_close(&cq->fid), 0);
	cq = NULL;
	EXPECT_RC(fi_close(&ws->fid), 0);
	/* A set of another fabric. */
	REQUIRE_RC(fi_fabric(info->fabric_attr, &other, NULL), 0);
	REQUIRE_RC(fi_domain(other, info, &odom, NULL), 0);
	REQUIRE_RC(fi_wait_open(fabric, &wa, &ws), 0);
	ca.wait_obj = FI_WAIT_SET;
	ca.wait_set = ws;
	EXPECT_RC(fi_cq_open(odom, &ca, &cq, NULL), -FI_EINVAL);
	ea.wait_set = ws;
	EXPECT_RC(fi_eq_open(other, &ea, &eq, NULL), -FI_EINVAL);
	EXPECT_RC(fi_close(&ws->fid), 0);
	EXPECT_RC(fi_close(&odom->fid), 0);
	EXPECT_RC(fi_close(&other->fid), 0);
	/* FI_WAIT_YIELD: no fd to hand out; fi_wait still times out. */
	wa.wait_obj = FI_WAIT_YIELD;
	REQUIRE_RC(fi_wait_open(fabric, &wa, &ys), 0);
	EXPECT_RC(fi_control(&ys->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	EXPECT_RC(fi_control(&ys->fid, FI_GETWAITOBJ, &obj), 0);
	EXPECT(obj == FI_WAIT_YIELD, "FI_GETWAITOBJ of an FI_WAIT_YIELD set: %d", obj);
	EXPECT_RC(fi_wait(ys, 20), -FI_ETIMEDOUT);
	EXPECT_RC(fi_close(&ys->fid), 0);
}

int main(int argc, char **argv)
{
	struct side sides[NSETS] = {
		{ .what = "FI_WAIT_FD", .obj = FI_WAIT_FD },
		{ .what = "FI_WAIT_UNSPEC", .obj = FI_WAIT_UNSPEC },
	};
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints;
	char names[NSETS][64], them[64];
	int sock, status, i;
	pid_t pid;

	/* A safety tick longer than the waits' 5 s timeouts: only an arrival
	 * that rings the set ends a wait in time. (Read at the first
	 * fi_getinfo, in both processes.) */
	setenv("FI_OXMR_WAIT_TICK_MS", "60000", 1);
	oxt_init(argv[0]);
	(void)argc;
	pid = oxt_fork(child, &sock);

	hints = oxt_hints(FI_EP_RDM);
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	if (info->next) {
		fi_freeinfo(info->next);
		info->next = NULL;
	}
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	REQUIRE_RC(fi_domain(fabric, info, &domain, NULL), 0);
	REQUIRE_RC(fi_av_open(domain, &aa, &av, NULL), 0);
	for (i = 0; i < NSETS; i++) {
		side_open(&sides[i]);
		memcpy(names[i], sides[i].name, sizeof names[i]);
	}
	REQUIRE(write(sock, names, sizeof names) == sizeof names, "socketpair write");
	REQUIRE(read(sock, them, sizeof them) == sizeof them, "socketpair read");
	REQUIRE_RC(fi_av_insert(av, them, 1, &peer, 0, NULL), 1);

	for (i = 0; i < NSETS; i++)
		groups_for(&sides[i], i, sock);

	OXT_GROUP("5. an EQ opened with FI_WAIT_SET is a member: fi_eq_write ends fi_wait");
	{
		struct fi_eq_attr ea = { .size = 8, .wait_obj = FI_WAIT_SET, .wait_set = sides[0].ws };
		struct fi_eq_entry ent = { .context = &ea, .data = 42 };
		struct fid_eq *eq = NULL;
		uint32_t event = 0;

		REQUIRE_RC(fi_eq_open(fabric, &ea, &eq, NULL), 0);
		EXPECT_RC(fi_wait(sides[0].ws, 0), -FI_ETIMEDOUT);
		EXPECT_RC(fi_eq_write(eq, FI_NOTIFY, &ent, sizeof ent, 0), (int)sizeof ent);
		EXPECT_RC(fi_wait(sides[0].ws, 5000), 0);
		EXPECT_RC(fi_wait(sides[0].ws, 0), 0);
		EXPECT_RC(fi_eq_read(eq, &event, &ent, sizeof ent, 0), (int)sizeof ent);
		EXPECT_RC(fi_wait(sides[0].ws, 0), -FI_ETIMEDOUT);
		EXPECT_RC(fi_close(&sides[0].ws->fid), -FI_EBUSY);
		EXPECT_RC(fi_close(&eq->fid), 0);
	}

	OXT_GROUP("6. fi_close of a wait set with a member open is -FI_EBUSY, until the last member is closed");
	REQUIRE(write(sock, "q-", 2) == 2, "socketpair write");
	waitpid(pid, &status, 0);
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
	for (i = 0; i < NSETS; i++) {
		struct side *x = &sides[i];

		EXPECT_RC(fi_close(&x->ws->fid), -FI_EBUSY);
		EXPECT_RC(fi_close(&x->ep->fid), 0);
		EXPECT_RC(fi_close(&x->ws->fid), -FI_EBUSY);
		EXPECT_RC(fi_close(&x->cq->fid), 0);
		EXPECT_RC(fi_close(&x->ws->fid), -FI_EBUSY);
		EXPECT_RC(fi_close(&x->cntr->fid), 0);
		EXPECT_RC(fi_close(&x->ws->fid), 0);
	}

	refusals();

	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&domain->fid), 0);
	EXPECT_RC(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	return oxt_done();
}
