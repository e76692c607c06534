/*
 * Waiting that wakes on arrival: a receiver blocked with a long timeout
 * wakes when its peer's message arrives, not by polling.
 *
 *  1. fi_cq_sread with a 5 s timeout; the peer sends 300 ms later.
 *  2. poll() on the CQ's FI_WAIT_FD fd (FI_GETWAIT) after fi_trywait
 *     returned 0, with a 5 s timeout; the peer sends 300 ms later.
 *  3. fi_cntr_wait (5 s timeout) on an FI_WAIT_FD counter bound for
 *     FI_RECV; the peer sends 300 ms later.
 *  4. fi_eq_sread (5 s timeout) on a passive endpoint's EQ; the peer
 *     calls fi_connect 300 ms later (FI_CONNREQ). Then the connector's own
 *     fi_eq_sread, which waits for FI_CONNECTED while we accept 300 ms
 *     after the request came (the peer checks its wait the same way).
 *  5. [two hosts] fi_eq_sread (15 s timeout) after fi_connect to
 *     OXT_ADDR_NOBODY, an address on the veth pair's subnet that no host
 *     has: the kernel gives up (ARP, about 3 s) and the EQ's error event
 *     comes; no thread waits for the connect, so the sleeper wakes on the
 *     connecting socket's error, not by ticking (one host: skipped, a
 *     refusal on loopback is known at once).
 *
 * Each must wake with the data, and while it waited use little CPU
 * (getrusage user+sys under 20% of the time it slept); in poll(), the fd
 * must wake it, and the process sleep (voluntary context switches, which
 * also counts fi_cq_sread's sleeps), at most MAX_WAKES times in the 300 ms
 * (polling with a 1 ms tick wakes ~300 times, which the CPU check alone
 * does not catch: each tick costs ~30 us). The provider's safety tick
 * (FI_OXMR_WAIT_TICK_MS, 100 ms by default) is set to 60 s here, longer
 * than the 5 s timeouts, so only the arrival can end a wait in time. The
 * wake-up latency
 * (the peer's CLOCK_MONOTONIC before fi_send to ours after the wait
 * returned) and, for poll(), how often the fd woke it are printed, not
 * checked: timing thresholds make a test flaky on a loaded machine.
 * Runs over shared memory and (fabtests/run.sh) over TCP: FI_OXMR_WIRE=tcp
 * on 127.0.0.1, and [two hosts] across a veth pair (the child enters the
 * peer's network namespace).
 *
 * The child prints its own lines as "wake[child]".
 */
#include "oxt.h"

#include <rdma/fi_cm.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define DELAY_MS 300
#define ROUNDS 3
#define MAX_WAKES 30

static double cpu_ms(void);
static long sleeps_so_far(void);

/* A MSG side: fabric, domain and an FI_WAIT_FD EQ at this side's address. */
struct msg_side {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
};

static void msg_open(struct msg_side *m)
{
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_FD, .size = 16 };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 16 };
	struct fi_info *hints = oxt_hints(FI_EP_MSG);

	memset(m, 0, sizeof *m);
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), NULL, FI_SOURCE, hints, &m->info), 0);
	fi_freeinfo(hints);
	REQUIRE_RC(fi_fabric(m->info->fabric_attr, &m->fabric, NULL), 0);
	REQUIRE_RC(fi_domain(m->fabric, m->info, &m->domain, NULL), 0);
	REQUIRE_RC(fi_eq_open(m->fabric, &ea, &m->eq, NULL), 0);
	REQUIRE_RC(fi_cq_open(m->domain, &ca, &m->cq, NULL), 0);
}

static struct fid_ep *msg_ep(struct msg_side *m, struct fi_info *info)
{
	struct fid_ep *ep = NULL;

	REQUIRE_RC(fi_endpoint(m->domain, info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &m->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &m->eq->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	return ep;
}

static void msg_close(struct msg_side *m)
{
	EXPECT_RC(fi_close(&m->cq->fid), 0);
	EXPECT_RC(fi_close(&m->eq->fid), 0);
	EXPECT_RC(fi_close(&m->domain->fid), 0);
	EXPECT_RC(fi_close(&m->fabric->fid), 0);
	fi_freeinfo(m->info);
}

/* The checks of a wait that began at t0 (CPU c0, sleeps cs0) and ended now
 * with (`got`) or without its event; returns when it ended. */
static double check_wait(const char *what, bool got, double t0, double c0, long cs0)
{
	double woke = oxt_now_ms(), cpu = cpu_ms() - c0;
	long cs = sleeps_so_far() - cs0;

	EXPECT(got, "%s: nothing within its 5 s timeout", what);
	EXPECT(woke - t0 >= DELAY_MS / 2, "%s: woke after %.1f ms, before the peer acted", what, woke - t0);
	EXPECT(woke - t0 < 4000, "%s: woke after %.1f ms: the timeout ended the wait, not the arrival", what,
	       woke - t0);
	EXPECT(cpu < 0.2 * (woke - t0), "%s: %.1f ms of CPU in a %.1f ms wait: it polls instead of sleeping", what,
	       cpu, woke - t0);
	EXPECT(cs <= MAX_WAKES, "%s: %ld sleeps in a %.1f ms wait: it ticks instead of waking on arrival", what, cs,
	       woke - t0);
	printf("# %s: waited %.1f ms, %.1f ms CPU, %ld sleeps\n", what, woke - t0, cpu, cs);
	return woke;
}

/* The peer's side of group 4: connect DELAY_MS after the pep's name came,
 * then wait in fi_eq_sread for FI_CONNECTED. */
static void child_connect(int sock)
{
	struct msg_side m;
	struct sockaddr_in pep_name;
	struct fi_eq_cm_entry ent;
	struct fid_ep *ep;
	uint32_t event = 0;
	double t, c0;
	long cs0;
	ssize_t n;

	REQUIRE(read(sock, &pep_name, sizeof pep_name) == sizeof pep_name, "socketpair read");
	msg_open(&m);
	ep = msg_ep(&m, m.info);
	usleep(DELAY_MS * 1000);
	t = oxt_now_ms();
	REQUIRE(write(sock, &t, sizeof t) == sizeof t, "socketpair write");
	REQUIRE_RC(fi_connect(ep, &pep_name, NULL, 0), 0);
	t = oxt_now_ms();
	c0 = cpu_ms();
	cs0 = sleeps_so_far();
	n = fi_eq_sread(m.eq, &event, &ent, sizeof ent, 5000, 0);
	check_wait("the connector's fi_eq_sread for FI_CONNECTED", n > 0 && event == FI_CONNECTED, t, c0, cs0);
	EXPECT(n < 0 || event == FI_CONNECTED, "the connector's EQ gave event %u, not FI_CONNECTED", event);
	EXPECT_RC(fi_close(&ep->fid), 0);
	msg_close(&m);
}

/* The peer: on each command byte, wait DELAY_MS, send 64 bytes, and
 * report when it started the send ('m': group 4's connect instead). */
static int child(int sock)
{
	struct oxt_ep s;
	fi_addr_t peer;
	unsigned char buf[64];
	struct fi_context c;
	void *ctx;
	char cmd;
	int rc;

	oxt_init("wake[child]");
	oxt_become_peer();
	oxt_ep_open(&s, 0, FI_WAIT_NONE);
	oxt_exchange(&s, sock, &peer);
	while (read(sock, &cmd, 1) == 1 && cmd != 'q') {
		double t;

		if (cmd == 'm') {
			child_connect(sock);
			continue;
		}

		usleep(DELAY_MS * 1000);
		oxt_fill(buf, sizeof buf, (unsigned)cmd);
		t = oxt_now_ms();
		REQUIRE_RC(fi_send(s.ep, buf, sizeof buf, NULL, peer, &c), 0);
		rc = oxt_next_completion(s.cq, 10000, &ctx);
		EXPECT(rc == 0 && ctx == &c, "child: %c: completion %d", cmd, rc);
		REQUIRE(write(sock, &t, sizeof t) == sizeof t, "socketpair write");
	}
	oxt_ep_close(&s);
	return oxt_done();
}

/* Voluntary context switches so far (each sleep that ended is one). */
static long sleeps_so_far(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_nvcsw;
}

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* The receiver's endpoint's FI_RECV counter (FI_WAIT_FD), bound before
 * fi_enable: oxt_ep_open's steps with a counter added. */
static struct fid_cntr *cntr;

static void ep_open_with_cntr(struct oxt_ep *x)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64, .wait_obj = FI_WAIT_FD };
	struct fi_cntr_attr ta = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_FD };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	size_t len = sizeof x->name;

	memset(x, 0, sizeof *x);
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	if (info->next) {
		fi_freeinfo(info->next);
		info->next = NULL;
	}
	x->e.info = info;
	REQUIRE_RC(fi_fabric(info->fabric_attr, &x->e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(x->e.fabric, info, &x->e.domain, NULL), 0);
	REQUIRE_RC(fi_cq_open(x->e.domain, &ca, &x->cq, NULL), 0);
	REQUIRE_RC(fi_cntr_open(x->e.domain, &ta, &cntr, NULL), 0);
	REQUIRE_RC(fi_av_open(x->e.domain, &aa, &x->av, NULL), 0);
	REQUIRE_RC(fi_endpoint(x->e.domain, info, &x->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &cntr->fid, FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(x->ep), 0);
	REQUIRE_RC(fi_getname(&x->ep->fid, x->name, &len), 0);
}

/* Post a receive, ask the child to send, wait the way `cmd` says ('s':
 * fi_cq_sread, 'p': fi_trywait + poll(), 'c': fi_cntr_wait), and check
 * what arrived and what the wait cost. */
static void round_trip(struct oxt_ep *r, int sock, char cmd)
{
	struct fid *fids[1] = { &r->cq->fid };
	struct fi_cq_tagged_entry ent;
	struct fi_context c;
	unsigned char rbuf[64];
	double t0, c0, woke, sent, cpu;
	int got = 0, sleeps = 0, fd = -1;
	long cs0;

	memset(rbuf, 0, sizeof rbuf);
	REQUIRE_RC(fi_recv(r->ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c), 0);
	if (cmd == 'p')
		REQUIRE_RC(fi_control(&r->cq->fid, FI_GETWAIT, &fd), 0);
	REQUIRE(write(sock, &cmd, 1) == 1, "socketpair write");
	t0 = oxt_now_ms();
	c0 = cpu_ms();
	cs0 = sleeps_so_far();
	if (cmd == 's') {
		ssize_t k = fi_cq_sread(r->cq, &ent, 1, NULL, 5000);

		EXPECT(k == 1, "fi_cq_sread: %zd (5 s timeout, the peer sent after %d ms)", k, DELAY_MS);
		got = k == 1;
	} else if (cmd == 'c') {
		uint64_t want = fi_cntr_read(cntr) + 1;
		int rc = fi_cntr_wait(cntr, want, 5000);

		EXPECT(rc == 0, "fi_cntr_wait: %d (5 s timeout, the peer sent after %d ms)", rc, DELAY_MS);
		got = rc == 0;
	} else {
		while (!got && oxt_now_ms() - t0 < 5000) {
			int tw = fi_trywait(r->e.fabric, fids, 1);

			EXPECT(tw == 0 || tw == -FI_EAGAIN, "fi_trywait: %d", tw);
			if (tw == 0) {
				struct pollfd p = { .fd = fd, .events = POLLIN };

				REQUIRE(poll(&p, 1, 5000) == 1, "poll on the CQ fd: no wake-up within 5 s");
				sleeps++;
			}
			ssize_t k = fi_cq_read(r->cq, &ent, 1);

			if (k == 1)
				got = 1;
			else
				EXPECT(k == -FI_EAGAIN, "fi_cq_read: %zd", k);
		}
		EXPECT(got, "no completion in 5 s");
	}
	woke = oxt_now_ms();
	cpu = cpu_ms() - c0;
	cs0 = sleeps_so_far() - cs0;
	REQUIRE(read(sock, &sent, sizeof sent) == sizeof sent, "socketpair read");
	if (cmd == 'c' && got) {
		/* (The receive's completion, after the wait was timed.) */
		void *ctx = NULL;

		got = oxt_next_completion(r->cq, 5000, &ctx) == 0;
		EXPECT(got, "the counted receive left no completion");
		ent.op_context = ctx;
	}
	if (got) {
		EXPECT(ent.op_context == &c, "a completion for another operation");
		EXPECT(oxt_same(rbuf, sizeof rbuf, (unsigned)cmd), "received other bytes");
	}
	EXPECT(woke - t0 >= DELAY_MS / 2, "woke after %.1f ms, before the peer sent", woke - t0);
	/* (Not a speed threshold: a wait that only its 5 s timeout ended
	 * still finds the data in its last look, so the wait must have ended
	 * before the timeout, and the safety tick is 60 s.) */
	EXPECT(woke - t0 < 4000, "woke after %.1f ms: the timeout ended the wait, not the arrival", woke - t0);
	EXPECT(cpu < 0.2 * (woke - t0), "%.1f ms of CPU in a %.1f ms wait: it polls instead of sleeping", cpu,
	       woke - t0);
	EXPECT(cs0 <= MAX_WAKES, "%ld sleeps in a %.1f ms wait: it ticks instead of waking on arrival", cs0,
	       woke - t0);
	if (cmd == 'p')
		EXPECT(sleeps <= MAX_WAKES, "poll() woke %d times in %.1f ms: the fd ticks instead of waking on arrival",
		       sleeps, woke - t0);
	if (cmd == 'c')
		printf("# fi_cntr_wait: waited %.1f ms, %.1f ms CPU, %ld sleeps, woke %.3f ms after the send\n", woke - t0,
		       cpu, cs0, woke - sent);
	else if (cmd == 's')
		printf("# fi_cq_sread: waited %.1f ms, %.1f ms CPU, %ld sleeps, woke %.3f ms after the send\n", woke - t0,
		       cpu, cs0, woke - sent);
	else
		printf("# poll() after fi_trywait: waited %.1f ms, %.1f ms CPU, %d wake-ups, woke %.3f ms after the send\n",
		       woke - t0, cpu, sleeps, woke - sent);
}

int main(int argc, char **argv)
{
	int sock, status;
	pid_t pid;
	struct oxt_ep r;
	fi_addr_t peer;

	/* A safety tick longer than the waits' 5 s timeout: a wait that the
	 * arrival does not wake (a doorbell not rung, a socket not watched)
	 * times out without its data, and the group fails. (Read at the first
	 * fi_getinfo, in both processes.) */
	setenv("FI_OXMR_WAIT_TICK_MS", "60000", 1);
	oxt_init(argv[0]);
	(void)argc;
	pid = oxt_fork(child, &sock);
	ep_open_with_cntr(&r);
	oxt_exchange(&r, sock, &peer);

	OXT_GROUP("1. fi_cq_sread (5 s timeout) wakes with the message its peer sends 300 ms later, using little CPU and few sleeps");
	for (int i = 0; i < ROUNDS; i++)
		round_trip(&r, sock, 's');

	OXT_GROUP("2. poll() on the CQ fd after fi_trywait wakes with the message sent 300 ms later, using little CPU and few sleeps");
	for (int i = 0; i < ROUNDS; i++)
		round_trip(&r, sock, 'p');

	OXT_GROUP("3. fi_cntr_wait (5 s timeout) wakes with the message sent 300 ms later, using little CPU and few sleeps");
	for (int i = 0; i < ROUNDS; i++)
		round_trip(&r, sock, 'c');

	OXT_GROUP("4. fi_eq_sread wakes with the FI_CONNREQ of a connect sent 300 ms later, and the connector's with FI_CONNECTED 300 ms after that, using little CPU and few sleeps");
	{
		struct msg_side m;
		struct fid_pep *pep = NULL;
		struct fid_ep *ep = NULL;
		struct sockaddr_in name;
		size_t len = sizeof name;
		union {
			struct fi_eq_cm_entry cm;
			unsigned char bytes[sizeof(struct fi_eq_cm_entry) + 256];
		} ev;
		uint32_t event = 0;
		double t0, c0, sent;
		long cs0;
		ssize_t n;

		msg_open(&m);
		REQUIRE_RC(fi_passive_ep(m.fabric, m.info, &pep, NULL), 0);
		REQUIRE_RC(fi_pep_bind(pep, &m.eq->fid, 0), 0);
		REQUIRE_RC(fi_listen(pep), 0);
		REQUIRE_RC(fi_getname(&pep->fid, &name, &len), 0);
		REQUIRE(write(sock, "m", 1) == 1, "socketpair write");
		REQUIRE(write(sock, &name, sizeof name) == sizeof name, "socketpair write");
		t0 = oxt_now_ms();
		c0 = cpu_ms();
		cs0 = sleeps_so_far();
		n = fi_eq_sread(m.eq, &event, &ev, sizeof ev, 5000, 0);
		check_wait("fi_eq_sread for FI_CONNREQ", n > 0 && event == FI_CONNREQ, t0, c0, cs0);
		REQUIRE(read(sock, &sent, sizeof sent) == sizeof sent, "socketpair read");
		if (n > 0 && event == FI_CONNREQ) {
			usleep(DELAY_MS * 1000);
			ep = msg_ep(&m, ev.cm.info);
			fi_freeinfo(ev.cm.info);
			EXPECT_RC(fi_accept(ep, NULL, 0), 0);
			n = fi_eq_sread(m.eq, &event, &ev, sizeof ev, 5000, 0);
			EXPECT(n > 0 && event == FI_CONNECTED, "the acceptor's fi_eq_sread: %zd, event %u", n, event);
		} else {
			EXPECT(0, "fi_eq_sread gave %zd, event %u: no FI_CONNREQ", n, event);
		}
		/* (The connector's checks are its own; its exit status says.) */
		if (ep)
			EXPECT_RC(fi_close(&ep->fid), 0);
		EXPECT_RC(fi_close(&pep->fid), 0);
		msg_close(&m);
	}

	if (getenv("OXT_ADDR_NOBODY") && *getenv("OXT_ADDR_NOBODY")) {
		OXT_GROUP("5. fi_eq_sread wakes with the error event of a connect to an address no host has, when the kernel gives up, using little CPU and few sleeps");
		struct msg_side m;
		struct fid_ep *ep;
		struct sockaddr_in nobody = oxt_sin(getenv("OXT_ADDR_NOBODY"), 9);
		struct fi_eq_err_entry ee = { 0 };
		struct fi_eq_cm_entry ent;
		uint32_t event = 0;
		double t0, c0, woke, cpu;
		long cs0, cs;
		ssize_t n;

		msg_open(&m);
		ep = msg_ep(&m, m.info);
		REQUIRE_RC(fi_connect(ep, &nobody, NULL, 0), 0);
		t0 = oxt_now_ms();
		c0 = cpu_ms();
		cs0 = sleeps_so_far();
		n = fi_eq_sread(m.eq, &event, &ent, sizeof ent, 15000, 0);
		woke = oxt_now_ms() - t0;
		cpu = cpu_ms() - c0;
		cs = sleeps_so_far() - cs0;
		EXPECT(n == -FI_EAVAIL, "fi_eq_sread: %zd (event %u), expected -FI_EAVAIL for the failed connect", n,
		       event);
		if (n == -FI_EAVAIL) {
			EXPECT(fi_eq_readerr(m.eq, &ee, 0) > 0, "fi_eq_readerr");
			EXPECT(ee.err == FI_EHOSTUNREACH || ee.err == FI_ETIMEDOUT,
			       "the failed connect's error: %d (%s)", ee.err, fi_strerror(ee.err));
		}
		EXPECT(cpu < 0.2 * woke, "%.1f ms of CPU in a %.1f ms wait: it polls instead of sleeping", cpu, woke);
		EXPECT(cs <= MAX_WAKES, "%ld sleeps in a %.1f ms wait: it ticks instead of waking on the socket", cs,
		       woke);
		printf("# fi_eq_sread for a connect to %s: error %d (%s) after %.1f ms, %.1f ms CPU, %ld sleeps\n",
		       getenv("OXT_ADDR_NOBODY"), ee.err, fi_strerror(ee.err), woke, cpu, cs);
		EXPECT_RC(fi_close(&ep->fid), 0);
		msg_close(&m);
	}

	REQUIRE(write(sock, "q", 1) == 1, "socketpair write");
	waitpid(pid, &status, 0);
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
	/* (oxt_ep_close's steps, with the counter closed before the domain.) */
	EXPECT_RC(fi_close(&r.ep->fid), 0);
	EXPECT_RC(fi_close(&r.av->fid), 0);
	EXPECT_RC(fi_close(&r.cq->fid), 0);
	EXPECT_RC(fi_close(&cntr->fid), 0);
	oxt_close(&r.e);
	return oxt_done();
}
