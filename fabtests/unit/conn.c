/*
 * conn.c: TCP connections that fail, peers that die or restart, and
 * connections that send garbage (docs/wire-tcp.md), with real
 * processes through the real libfabric:
 *
 *   1. a connect refused: every operation queued behind it (eager send,
 *      rendezvous send, RMA write) fails with FI_ECONNREFUSED, with a log line
 *      (one per connect tried);
 *   2. (two hosts only) a connect to an address nobody answers at: the send
 *      returns at once and fails with FI_EHOSTUNREACH, bounded;
 *   3. a SIGKILLed peer: its pending rendezvous send, RMA read and
 *      delivery-complete send fail with FI_ECONNABORTED;
 *   4. a restarted peer (a new process, a new endpoint at the same address):
 *      what was pending with the old one fails with FI_ECONNABORTED, and the
 *      new one is reached, both ways, through the same fi_addr;
 *   5. raw sockets that connect to the endpoint and send garbage (bad magic,
 *      bad version, a truncated hello, an oversized length prefix, a frame
 *      whose header lies about its size): each connection is closed with one
 *      log line, and the endpoint keeps serving a real peer.
 *
 * The wire is forced to TCP (FI_OXMR_WIRE=tcp). One host: both processes on
 * 127.0.0.1. Two hosts (fabtests/run.sh with fabtests/netns.sh): this
 * process in one network namespace, its peers in OXT_NETNS_PEER, so every
 * connection crosses the veth pair; OXT_ADDR_NOBODY is an address on that
 * subnet that no host has (group 2).
 *
 * usage: conn            (a peer process is this program run as
 *                         conn --peer <fd> <first-recv|first-send> <port>)
 */
#include "oxt.h"

#include <sys/prctl.h>
#include <sys/wait.h>

#define BUF (1 << 20)
#define BIGSEND (128 << 10) /* over the inline limit (TCP: 64 KiB): a rendezvous send */
#define WAIT_MS 20000      /* the bound on any one completion */

struct ep {
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_mr *mr;
	struct sockaddr_in name;
	char *buf;
};

static void ep_open(struct ep *e, uint16_t port)
{
	struct fi_info *hints = oxt_hints(FI_EP_RDM);
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT, .size = 64 };
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	char svc[16];
	size_t len = sizeof e->name;

	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	snprintf(svc, sizeof svc, "%u", port);
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), port ? svc : NULL, FI_SOURCE, hints, &e->info), 0);
	fi_freeinfo(hints);
	REQUIRE_RC(fi_fabric(e->info->fabric_attr, &e->fab, NULL), 0);
	REQUIRE_RC(fi_domain(e->fab, e->info, &e->dom, NULL), 0);
	REQUIRE_RC(fi_endpoint(e->dom, e->info, &e->ep, NULL), 0);
	REQUIRE_RC(fi_cq_open(e->dom, &cqa, &e->cq, NULL), 0);
	REQUIRE_RC(fi_av_open(e->dom, &ava, &e->av, NULL), 0);
	REQUIRE_RC(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(e->ep, &e->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(e->ep), 0);
	REQUIRE_RC(fi_getname(&e->ep->fid, &e->name, &len), 0);
	e->buf = calloc(1, BUF);
	REQUIRE(e->buf, "calloc");
	REQUIRE_RC(fi_mr_reg(e->dom, e->buf, BUF,
			     FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
			     &e->mr, NULL),
		   0);
}

static void ep_close(struct ep *e)
{
	EXPECT_RC(fi_close(&e->mr->fid), 0);
	EXPECT_RC(fi_close(&e->ep->fid), 0);
	EXPECT_RC(fi_close(&e->av->fid), 0);
	EXPECT_RC(fi_close(&e->cq->fid), 0);
	EXPECT_RC(fi_close(&e->dom->fid), 0);
	EXPECT_RC(fi_close(&e->fab->fid), 0);
	fi_freeinfo(e->info);
	free(e->buf);
}

static fi_addr_t insert(struct ep *e, const struct sockaddr_in *a)
{
	fi_addr_t fa = FI_ADDR_NOTAVAIL;

	REQUIRE_RC(fi_av_insert(e->av, a, 1, &fa, 0, NULL), 1);
	return fa;
}

/* One completion within WAIT_MS (progress by reading): its context and
 * error (0: success); false if none came. */
static bool next(struct ep *e, void **ctx, int *err)
{
	double end = oxt_now_ms() + WAIT_MS;

	while (oxt_now_ms() < end) {
		struct fi_cq_entry c;
		struct fi_cq_err_entry ee = { 0 };
		ssize_t n = fi_cq_read(e->cq, &c, 1);

		if (n == 1) {
			*ctx = c.op_context;
			*err = 0;
			return true;
		}
		if (n == -FI_EAVAIL) {
			REQUIRE(fi_cq_readerr(e->cq, &ee, 0) == 1, "fi_cq_readerr");
			*ctx = ee.op_context;
			*err = ee.err;
			return true;
		}
		REQUIRE(n == -FI_EAGAIN, "fi_cq_read: %zd", n);
		oxt_sleep_ms(0);
	}
	return false;
}

/* The next completion must be a success of `ctx`. */
static bool expect_ok(struct ep *e, void *ctx, const char *what)
{
	void *got;
	int err;

	if (!next(e, &got, &err)) {
		EXPECT(false, "%s: no completion within %d ms", what, WAIT_MS);
		return false;
	}
	EXPECT(got == ctx && err == 0, "%s: completion of %p, error %d (%s); expected %p, success", what, got, err,
	       fi_strerror(err), ctx);
	return got == ctx && err == 0;
}

/* `n` error completions, one for each of ctx[0..n), each with `code`. */
static void expect_failed(struct ep *e, void **ctx, int n, int code, const char *what)
{
	bool seen[8] = { 0 };

	for (int k = 0; k < n; k++) {
		void *got;
		int err, i;

		if (!next(e, &got, &err)) {
			EXPECT(false, "%s: %d of %d operations completed within %d ms", what, k, n, WAIT_MS);
			return;
		}
		for (i = 0; i < n && ctx[i] != got; i++)
			;
		EXPECT(i < n && !seen[i], "%s: a completion of %p, not one of the operations (or twice)", what, got);
		EXPECT(err == code, "%s: operation %d completed with %d (%s), expected -%s", what, i, err,
		       fi_strerror(err), oxt_errname(-code));
		if (i < n)
			seen[i] = true;
	}
}

/* ------------------------------------------------------------ the peer */

static int peer_main(int ctl, const char *mode, uint16_t port)
{
	struct ep q;
	struct sockaddr_in p;
	fi_addr_t pa;
	uint64_t key;
	static char c1, c2, c3;

	oxt_peer_side = true;
	oxt_prog = "conn[peer]";
	ep_open(&q, port);
	key = fi_mr_key(q.mr);
	REQUIRE(write(ctl, &q.name, sizeof q.name) == sizeof q.name, "write name");
	REQUIRE(write(ctl, &key, sizeof key) == sizeof key, "write key");
	REQUIRE(read(ctl, &p, sizeof p) == sizeof p, "read the peer's name");
	pa = insert(&q, &p);
	REQUIRE_RC(fi_recv(q.ep, q.buf, 64, NULL, FI_ADDR_UNSPEC, &c1), 0);
	if (!strcmp(mode, "first-recv")) {
		/* Answer one message, then stop making progress (killed). */
		REQUIRE(expect_ok(&q, &c1, "peer: the first message"), "peer: no first message");
		memcpy(q.buf + 64, "reply", 6);
		REQUIRE_RC(fi_send(q.ep, q.buf + 64, 16, NULL, pa, &c2), 0);
		REQUIRE(expect_ok(&q, &c2, "peer: its reply"), "peer: its reply did not complete");
		oxt_put(ctl, 'r');
		for (;;)
			pause();
	}
	/* first-send: speak first, then answer one message. */
	memcpy(q.buf + 64, "new", 4);
	REQUIRE_RC(fi_send(q.ep, q.buf + 64, 16, NULL, pa, &c2), 0);
	REQUIRE(expect_ok(&q, &c2, "peer: its first message"), "peer: its first message did not complete");
	oxt_put(ctl, 'r');
	REQUIRE(expect_ok(&q, &c1, "peer: the answer to its first message"), "peer: no message");
	EXPECT(!strcmp(q.buf, "again"), "peer: got \"%.8s\", expected \"again\"", q.buf);
	memcpy(q.buf + 64, "reply", 6);
	REQUIRE_RC(fi_send(q.ep, q.buf + 64, 16, NULL, pa, &c3), 0);
	REQUIRE(expect_ok(&q, &c3, "peer: its reply"), "peer: its reply did not complete");
	EXPECT(oxt_get(ctl) == 'q', "peer: the command to quit");
	ep_close(&q);
	return oxt_done();
}

/* A peer process (this program, exec'd on the peer host) in `mode` at
 * `port` (0: any): its pid; its control socket, name and registration key
 * in *ctl, *name, *key; it learns `me`. */
static pid_t spawn(const char *mode, uint16_t port, const struct sockaddr_in *me, int *ctl,
		   struct sockaddr_in *name, uint64_t *key)
{
	int sv[2];
	pid_t pid;

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		char fd[16], ps[16];

		close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		oxt_become_peer();
		snprintf(fd, sizeof fd, "%d", sv[1]);
		snprintf(ps, sizeof ps, "%u", port);
		execl("/proc/self/exe", "conn", "--peer", fd, mode, ps, (char *)NULL);
		printf("exec /proc/self/exe: %s\n", strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	*ctl = sv[0];
	REQUIRE(read(*ctl, name, sizeof *name) == sizeof *name, "the peer's name (did it start?)");
	REQUIRE(read(*ctl, key, sizeof *key) == sizeof *key, "the peer's key");
	REQUIRE(write(*ctl, me, sizeof *me) == sizeof *me, "our name to the peer");
	return pid;
}

static void reap(pid_t pid, bool killed)
{
	int st = 0;

	if (killed)
		kill(pid, SIGKILL);
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	if (!killed)
		EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the peer's exit status 0x%x (its failures are above)", st);
}

/* A first-recv peer that has answered our first message and stopped. */
static pid_t stopped_peer(struct ep *p, int *ctl, struct sockaddr_in *qn, uint64_t *key, fi_addr_t *qa)
{
	static char a, b;
	pid_t pid = spawn("first-recv", qn->sin_port ? ntohs(qn->sin_port) : 0, &p->name, ctl, qn, key);

	*qa = insert(p, qn);
	memcpy(p->buf, "hi", 3);
	REQUIRE_RC(fi_recv(p->ep, p->buf + 256, 64, NULL, FI_ADDR_UNSPEC, &b), 0);
	REQUIRE_RC(fi_send(p->ep, p->buf, 16, NULL, *qa, &a), 0);
	(void)expect_ok(p, &a, "our first message to the peer");
	(void)expect_ok(p, &b, "the peer's reply");
	EXPECT(oxt_get(*ctl) == 'r', "the peer's ready word");
	return pid;
}

/* A first-send peer at qn (port 0: any) talks with us through fi_addr
 * *qa (FI_ADDR_NOTAVAIL: insert it); `first` is already posted for its
 * first message when given. */
static void talk_with_new_peer(struct ep *p, struct sockaddr_in *qn, fi_addr_t *qa, void *first)
{
	static char r1, s, r2;
	struct sockaddr_in got;
	uint64_t key;
	int ctl;
	pid_t pid;

	if (!first) {
		REQUIRE_RC(fi_recv(p->ep, p->buf + 256, 64, NULL, FI_ADDR_UNSPEC, &r1), 0);
		first = &r1;
	}
	pid = spawn("first-send", ntohs(qn->sin_port), &p->name, &ctl, &got, &key);
	if (qn->sin_port)
		EXPECT(got.sin_port == qn->sin_port && got.sin_addr.s_addr == qn->sin_addr.s_addr,
		       "the new peer opened at another address");
	if (*qa == FI_ADDR_NOTAVAIL)
		*qa = insert(p, &got);
	/* (Its first message completes once our endpoint answered its
	 * connection: we progress here, then read its ready word.) */
	(void)expect_ok(p, first, "the new peer's first message");
	EXPECT(oxt_get(ctl) == 'r', "the new peer's ready word");
	EXPECT(!strcmp(p->buf + 256, "new"), "got \"%.8s\" from the new peer, expected \"new\"", p->buf + 256);
	REQUIRE_RC(fi_recv(p->ep, p->buf + 512, 64, NULL, FI_ADDR_UNSPEC, &r2), 0);
	memcpy(p->buf + 128, "again", 6);
	REQUIRE_RC(fi_send(p->ep, p->buf + 128, 16, NULL, *qa, &s), 0);
	(void)expect_ok(p, &s, "our message to the new peer");
	(void)expect_ok(p, &r2, "the new peer's reply");
	EXPECT(!strcmp(p->buf + 512, "reply"), "got \"%.8s\", expected \"reply\"", p->buf + 512);
	oxt_put(ctl, 'q');
	reap(pid, false);
	close(ctl);
}

/* ------------------------------------------------------------ groups */

static struct sockaddr_in peer_host(uint16_t port)
{
	const char *v = getenv("OXT_ADDR_PEER");

	return oxt_sin(oxt_two_hosts() && v && *v ? v : "127.0.0.1", port);
}

static void t_refused(struct ep *p)
{
	static char c[3];
	void *ctx[3] = { &c[0], &c[1], &c[2] };
	struct sockaddr_in nobody = peer_host(1);
	fi_addr_t fa;
	ssize_t rc[3];
	int queued = 0;
	const char *log;

	OXT_GROUP("1. a connect refused fails what was queued behind it with FI_ECONNREFUSED, with a log line");
	fa = insert(p, &nobody);
	oxt_capture_begin();
	rc[0] = fi_send(p->ep, p->buf, 16, NULL, fa, ctx[0]);
	rc[1] = fi_send(p->ep, p->buf, BIGSEND, NULL, fa, ctx[1]);
	rc[2] = fi_write(p->ep, p->buf, 64, NULL, fa, 0, 0, ctx[2]);
	for (int i = 0; i < 3; i++) {
		EXPECT(rc[i] == 0 || rc[i] == -FI_ECONNREFUSED, "operation %d: %zd (%s)", i, rc[i],
		       fi_strerror((int)-rc[i]));
		if (rc[i] == 0)
			ctx[queued++] = ctx[i];
	}
	expect_failed(p, ctx, queued, FI_ECONNREFUSED, "operations to a port nobody listens on");
	log = oxt_capture_end();
	EXPECT(strstr(log, "refused the TCP connection"), "no log line says the connection was refused:\n%s", log);
	printf("# %d of 3 operations queued behind the connect, the rest refused in the call\n", queued);
}

static void t_nobody(struct ep *p)
{
	static char c;
	void *ctx[1] = { &c };
	const char *v = getenv("OXT_ADDR_NOBODY");
	struct sockaddr_in nobody;
	const char *log;
	double t0;

	OXT_GROUP("2. a connect nobody answers: the send returns at once and fails with FI_EHOSTUNREACH, bounded");
	REQUIRE(v && *v, "OXT_ADDR_NOBODY is not set (fabtests/run.sh sets it with the namespaces)");
	nobody = oxt_sin(v, 9);
	t0 = oxt_now_ms();
	oxt_capture_begin();
	EXPECT_RC(fi_send(p->ep, p->buf, 16, NULL, insert(p, &nobody), ctx[0]), 0);
	expect_failed(p, ctx, 1, FI_EHOSTUNREACH, "a send to an address no host has");
	log = oxt_capture_end();
	EXPECT(strstr(log, "could not be connected to over TCP") && strstr(log, v),
	       "no log line says %s could not be connected to:\n%s", v, log);
	printf("# failed after %.0f ms\n", oxt_now_ms() - t0);
}

static void t_killed(struct ep *p)
{
	static char c[3];
	void *ctx[3] = { &c[0], &c[1], &c[2] };
	struct sockaddr_in qn = { 0 };
	struct fi_msg m;
	struct iovec iov;
	uint64_t key;
	fi_addr_t qa;
	int ctl;
	pid_t pid;

	OXT_GROUP("3. a SIGKILLed peer: its pending send, RMA read and delivery-complete send fail with FI_ECONNABORTED");
	pid = stopped_peer(p, &ctl, &qn, &key, &qa);
	REQUIRE_RC(fi_send(p->ep, p->buf, BIGSEND, NULL, qa, ctx[0]), 0);
	REQUIRE_RC(fi_read(p->ep, p->buf + BIGSEND, 64, NULL, qa, 0, key, ctx[1]), 0);
	iov.iov_base = p->buf;
	iov.iov_len = 16;
	m = (struct fi_msg){ .msg_iov = &iov, .iov_count = 1, .addr = qa, .context = ctx[2] };
	REQUIRE_RC(fi_sendmsg(p->ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
	reap(pid, true);
	expect_failed(p, ctx, 3, FI_ECONNABORTED, "operations pending with a killed peer");
	close(ctl);
}

static void t_restarted(struct ep *p)
{
	static char c, first;
	void *ctx[1] = { &c };
	struct sockaddr_in qn = { 0 };
	uint64_t key;
	fi_addr_t qa;
	int ctl;
	pid_t pid;

	OXT_GROUP("4. a restarted peer: what was pending with the old one fails, the new one is reached at the same fi_addr");
	pid = stopped_peer(p, &ctl, &qn, &key, &qa);
	REQUIRE_RC(fi_send(p->ep, p->buf, BIGSEND, NULL, qa, ctx[0]), 0);
	/* (No progress here until the new peer has spoken.) */
	reap(pid, true);
	close(ctl);
	REQUIRE_RC(fi_recv(p->ep, p->buf + 256, 64, NULL, FI_ADDR_UNSPEC, &first), 0);
	{
		/* The new peer's first message arrives before the old one's
		 * send fails or after: both must happen. */
		static char r2, s;
		struct sockaddr_in got;
		uint64_t k2;
		int ctl2;
		pid_t pid2 = spawn("first-send", ntohs(qn.sin_port), &p->name, &ctl2, &got, &k2);
		void *want[2] = { ctx[0], &first };
		bool seen[2] = { false, false };

		EXPECT(got.sin_port == qn.sin_port && got.sin_addr.s_addr == qn.sin_addr.s_addr,
		       "the new peer opened at another address");
		/* (Its first message completes once we answered its connection:
		 * the ready word is read after we progressed.) */
		for (int k = 0; k < 2; k++) {
			void *g;
			int err, i;

			if (!next(p, &g, &err)) {
				EXPECT(false, "%d of 2 completions (the old peer's send, the new peer's message)", k);
				break;
			}
			for (i = 0; i < 2 && want[i] != g; i++)
				;
			EXPECT(i < 2 && !seen[i], "a completion of %p, not one expected (or twice)", g);
			if (i == 0)
				EXPECT(err == FI_ECONNABORTED, "the send pending with the old peer: %d (%s)", err,
				       fi_strerror(err));
			if (i == 1)
				EXPECT(err == 0 && !strcmp(p->buf + 256, "new"),
				       "the new peer's message: error %d, \"%.8s\"", err, p->buf + 256);
			if (i < 2)
				seen[i] = true;
		}
		EXPECT(oxt_get(ctl2) == 'r', "the new peer's ready word");
		REQUIRE_RC(fi_recv(p->ep, p->buf + 512, 64, NULL, FI_ADDR_UNSPEC, &r2), 0);
		memcpy(p->buf + 128, "again", 6);
		REQUIRE_RC(fi_send(p->ep, p->buf + 128, 16, NULL, qa, &s), 0);
		(void)expect_ok(p, &s, "our message to the new peer, at the old one's fi_addr");
		(void)expect_ok(p, &r2, "the new peer's reply");
		oxt_put(ctl2, 'q');
		reap(pid2, false);
		close(ctl2);
	}
}

/* The TCP wire version this oxmr speaks (wire/tcp/mod.rs, VERSION), which a
 * raw connection's hello must carry to get past it. */
#define TCP_WIRE_VERSION 5
/* Its hello's length (magic, version, name, epoch, pid, kind, flags, nonce,
 * proof; a peer without a job key leaves the last three zero). */
#define TCP_HELLO_LEN 116

/* What a raw connection sends, and what oxmr's log must say about it. */
struct garbage {
	const char *what;
	unsigned char bytes[256];
	size_t len;
	bool half_close;
	const char *log;
};

static size_t hello(unsigned char *b, uint32_t version)
{
	struct sockaddr_in me = oxt_sin("198.18.0.9", 5);
	uint32_t magic = 0x3154584f, epoch = 0x1234, pid = 1;

	memset(b, 0, TCP_HELLO_LEN);
	memcpy(b, &magic, 4);
	memcpy(b + 4, &version, 4);
	memcpy(b + 8, &me, sizeof me);
	memcpy(b + 36, &epoch, 4);
	memcpy(b + 40, &pid, 4);
	return TCP_HELLO_LEN;
}

static void t_garbage(struct ep *p)
{
	static struct garbage g[5];
	size_t n;

	OXT_GROUP("5. raw sockets sending garbage are closed, one log line each, and the endpoint keeps serving");
	g[0] = (struct garbage){ .what = "bad magic", .len = 48, .log = "does not speak oxmr's TCP wire" };
	memset(g[0].bytes, 'X', 48);
	g[1] = (struct garbage){ .what = "bad version", .log = "wire version 99" };
	g[1].len = hello(g[1].bytes, 99);
	g[2] = (struct garbage){ .what = "truncated hello", .half_close = true, .log = "ended inside its hello" };
	g[2].len = hello(g[2].bytes, TCP_WIRE_VERSION) - 28;
	g[3] = (struct garbage){ .what = "oversized length", .log = "a frame of 4294967295 bytes" };
	n = hello(g[3].bytes, TCP_WIRE_VERSION);
	memset(g[3].bytes + n, 0xff, 4);
	g[3].len = n + 4;
	g[4] = (struct garbage){ .what = "a header that lies about its size", .log = "malformed" };
	n = hello(g[4].bytes, TCP_WIRE_VERSION);
	{
		/* A 40-byte frame whose header (protocol version 2 in byte 26's
		 * high half) says all five optional words follow (byte 27):
		 * 72 bytes of header in a frame of 40. */
		uint32_t flen = 40;

		memcpy(g[4].bytes + n, &flen, 4);
		memset(g[4].bytes + n + 4, 0, 40);
		g[4].bytes[n + 4 + 0] = 1;    /* op: an eager send */
		g[4].bytes[n + 4 + 26] = 0x24; /* version 2, IPv4 sender */
		g[4].bytes[n + 4 + 27] = 0x1f;
		g[4].len = n + 44;
	}
	for (int i = 0; i < 5; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0), lines = 0;
		bool closed = false;
		double end;
		const char *log, *l;

		REQUIRE(s >= 0, "socket");
		REQUIRE(connect(s, (struct sockaddr *)&p->name, sizeof p->name) == 0, "connect to our endpoint: %s",
			strerror(errno));
		{
			/* (A hello names the IP it comes from: without a job key,
			 * oxmr believes a hello only from the IP its name gives.) */
			struct sockaddr_in local;
			socklen_t ll = sizeof local;
			uint32_t magic = 0x3154584f;

			REQUIRE(getsockname(s, (struct sockaddr *)&local, &ll) == 0, "getsockname: %s", strerror(errno));
			local.sin_port = htons(5);
			if (g[i].len >= 8 + sizeof local && !memcmp(g[i].bytes, &magic, 4))
				memcpy(g[i].bytes + 8, &local, sizeof local);
		}
		oxt_capture_begin();
		REQUIRE(write(s, g[i].bytes, g[i].len) == (ssize_t)g[i].len, "write the garbage");
		if (g[i].half_close)
			shutdown(s, SHUT_WR);
		end = oxt_now_ms() + WAIT_MS;
		while (!closed && oxt_now_ms() < end) {
			struct pollfd pf = { .fd = s, .events = POLLIN };
			char b[64];

			fi_cq_read(p->cq, NULL, 0); /* progress */
			if (poll(&pf, 1, 1) == 1) {
				ssize_t r = read(s, b, sizeof b);

				closed = r == 0 || (r < 0 && errno == ECONNRESET);
			}
		}
		log = oxt_capture_end();
		/* (Lines about TCP connections: a real peer's going may be
		 * logged meanwhile too.) */
		for (l = log; (l = strstr(l, "TCP connection")); l++) {
			lines++;
			if (!(l = strchr(l, '\n')))
				break;
		}
		EXPECT(closed, "%s: the connection was not closed within %d ms", g[i].what, WAIT_MS);
		EXPECT(strstr(log, g[i].log), "%s: no log line says \"%s\":\n%s", g[i].what, g[i].log, log);
		EXPECT(lines == 1, "%s: %d log lines about the connection, expected one:\n%s", g[i].what, lines, log);
		close(s);
	}
	{
		struct sockaddr_in any = { 0 };
		fi_addr_t qa = FI_ADDR_NOTAVAIL;

		talk_with_new_peer(p, &any, &qa, NULL);
	}
}

int main(int argc, char **argv)
{
	struct ep p;

	if (argc == 5 && !strcmp(argv[1], "--peer"))
		return peer_main(atoi(argv[2]), argv[3], (uint16_t)atoi(argv[4]));
	/* (Before libfabric reads its environment.) */
	setenv("FI_OXMR_WIRE", "tcp", 1);
	setenv("FI_LOG_LEVEL", "warn", 0);
	oxt_init(argv[0]);
	ep_open(&p, 0);
	printf("# %s, endpoint at %s:%u\n", oxt_two_hosts() ? "two hosts (network namespaces)" : "one host",
	       inet_ntoa(p.name.sin_addr), ntohs(p.name.sin_port));
	t_refused(&p);
	if (oxt_two_hosts())
		t_nobody(&p);
	t_killed(&p);
	t_restarted(&p);
	t_garbage(&p);
	OXT_GROUP("close");
	ep_close(&p);
	return oxt_done();
}
