/*
 * hostile_tcp.c: a peer that is not oxmr, with nothing but raw sockets,
 * against a real oxmr endpoint (V) that has a real peer (R) through the real
 * libfabric (docs/security.md). Run without a job key and, by
 * fabtests/run.sh, with one (FI_OXMR_AUTH_KEY), on one host and across the
 * veth pair (the attacker then sits in the other network namespace):
 *
 *   1. hijacking (item 8): a raw connection from R's own IP names R before R
 *      ever spoke to V; V's first send to R must reach R. With a key: always.
 *      Without: a process on the peer's own IP can speak as it (said, not
 *      checked: docs/security.md, "Without a key");
 *   2. spoofing (item 7): from another IP, a hello naming R with a new epoch
 *      and an eager message tagged for a receive V directed at R: the
 *      receive takes R's real message, never the injected one, and V's
 *      connection with R survives;
 *   3. a credential (item 1) and wrong keys (items 2, 3): without a key, a
 *      raw peer gets in under its own name and every refused read, a known
 *      key at a wrong address or an unknown key, is answered alike; past
 *      FI_OXMR_REFUSE_MAX its connection is closed and a new one refused.
 *      With a key: refused at the hello, one log line;
 *   4. connections (item 5): 200 silent connections against
 *      FI_OXMR_TCP_CONN_MAX=32 and FI_OXMR_TCP_HELLO_MS=1000: V holds few
 *      descriptors for them, closes them, and R is served meanwhile;
 *   5. memory (item 6): an eager frame over the eager limit closes its
 *      connection; 64 MiB of eager messages nobody receives against
 *      FI_OXMR_UNEXP_MAX=4 MiB: the sender is held back, V's memory stays;
 *   6. dialling for the attacker (item 9): a hello naming a third party's
 *      address, then a request: V never connects there.
 *
 * The wire is forced to TCP. One host: V and R on 127.0.0.1, the attacker
 * sends from 127.0.0.2 where it needs another IP. Two hosts: V and R in one
 * namespace, the attacker in OXT_NETNS_PEER (it enters it after group 1).
 */
#include "oxt.h"

#include <poll.h>
#include <sys/wait.h>
#include <dirent.h>

#define BUF (1 << 20)
#define HELLO_LEN 116
#define TCP_WIRE_VERSION 5
#define MAGIC 0x3154584fu
#define REFUSE_MAX 16

/* Message kinds and header bits (docs/wire.md, "Messages"). */
#define OP_EAGER 1
#define OP_ACK 3
#define OP_READ 6
#define FLAG_TAGGED 1
#define OPT_MSG_ID 2
#define OPT_RMA_ADDR 4
#define OPT_RMA_KEY 8
#define OPT_STATUS 16

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

/* What the attacker learns from the test (what a real attacker could know
 * or guess: addresses, and, to show refusals are alike, one real key). */
struct brief {
	struct sockaddr_in v, r, third;
	uint64_t key, base;
	bool keyed;
};

static void ep_open(struct ep *e, struct fid_fabric *fab)
{
	struct fi_info *hints = oxt_hints(FI_EP_RDM);
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .size = 256 };
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	size_t len = sizeof e->name;

	hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_DIRECTED_RECV;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), NULL, FI_SOURCE, hints, &e->info), 0);
	fi_freeinfo(hints);
	if (fab)
		e->fab = fab;
	else
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
	REQUIRE_RC(fi_mr_reg(e->dom, e->buf, BUF, FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
			     &e->mr, NULL),
		   0);
}

/* ---- the attacker: raw sockets only ---- */

/* A blocking TCP connection to `to` from `from_ip` (NULL: the kernel's
 * choice); -1 if refused. */
static int raw_open(const struct sockaddr_in *to, const char *from_ip)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	REQUIRE(s >= 0, "socket: %s", strerror(errno));
	if (from_ip) {
		struct sockaddr_in me = oxt_sin(from_ip, 0);

		REQUIRE(bind(s, (struct sockaddr *)&me, sizeof me) == 0, "bind %s: %s", from_ip, strerror(errno));
	}
	if (connect(s, (const struct sockaddr *)to, sizeof *to) != 0) {
		close(s);
		return -1;
	}
	return s;
}

static void put32(unsigned char *b, uint32_t v) { memcpy(b, &v, 4); }
static void put64(unsigned char *b, uint64_t v) { memcpy(b, &v, 8); }

/* A hello naming `name` (kind 0: OPEN), keyed or not, nonce filled. */
static void hello(unsigned char *b, const struct sockaddr_in *name, uint32_t epoch, bool keyed)
{
	memset(b, 0, HELLO_LEN);
	put32(b, MAGIC);
	put32(b + 4, TCP_WIRE_VERSION);
	memcpy(b + 8, name, sizeof *name);
	put32(b + 36, epoch);
	put32(b + 40, 4242);
	put32(b + 44, 0);
	put32(b + 48, keyed ? 1 : 0);
	memset(b + 52, 0x5a, 32);
}

/* A frame (length prefix, header, body) from `name`; its length. */
static size_t frame(unsigned char *b, uint8_t op, uint8_t flags, uint16_t iovs, uint64_t len, uint64_t tag,
		    uint64_t msg_id, uint64_t rma_addr, uint64_t rma_key, const struct sockaddr_in *name,
		    const void *body, size_t body_len)
{
	unsigned char *h = b + 4;
	size_t at = 32;
	uint8_t present = 0;

	memset(h, 0, 32);
	h[0] = op;
	h[1] = flags;
	memcpy(h + 2, &iovs, 2);
	put32(h + 4, 4242);
	put64(h + 8, len);
	put64(h + 16, tag);
	memcpy(h + 24, &name->sin_port, 2);
	h[26] = 2 << 4 | 4; /* protocol version 2 (protocol/mod.rs), IPv4 sender */
	memcpy(h + 28, &name->sin_addr, 4);
	if (msg_id) {
		present |= OPT_MSG_ID;
		put64(h + at, msg_id);
		at += 8;
	}
	if (rma_addr) {
		present |= OPT_RMA_ADDR;
		put64(h + at, rma_addr);
		at += 8;
	}
	if (rma_key) {
		present |= OPT_RMA_KEY;
		put64(h + at, rma_key);
		at += 8;
	}
	h[27] = present;
	memcpy(h + at, body, body_len);
	at += body_len;
	put32(b, (uint32_t)at);
	return at + 4;
}

static bool send_all(int s, const void *p, size_t n)
{
	return send(s, p, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* Read what `s` sends within `ms` into `b` (up to `cap`); the count, and
 * whether it ended (closed or reset) in *closed. */
static size_t drain(int s, unsigned char *b, size_t cap, int ms, bool *closed)
{
	double end = oxt_now_ms() + ms;
	size_t got = 0;

	*closed = false;
	while (oxt_now_ms() < end) {
		struct pollfd pf = { .fd = s, .events = POLLIN };
		unsigned char scratch[4096];
		ssize_t r;

		if (poll(&pf, 1, 10) != 1)
			continue;
		r = recv(s, got < cap ? b + got : scratch, got < cap ? cap - got : sizeof scratch, 0);
		if (r <= 0) {
			*closed = true;
			break;
		}
		if (got < cap)
			got += (size_t)r;
	}
	return got;
}

/* The ACK statuses among the frames in `b` (after `skip` bytes of hello):
 * how many ACKs, and the statuses in st[]. */
static int acks(const unsigned char *b, size_t n, size_t skip, uint32_t *st, int max)
{
	size_t at = skip;
	int k = 0;

	while (at + 4 <= n) {
		uint32_t len;
		const unsigned char *h = b + at + 4;

		memcpy(&len, b + at, 4);
		if (at + 4 + len > n || len < 32)
			break;
		if (h[0] == OP_ACK && k < max) {
			size_t o = 32;
			uint64_t v = 0;

			for (int bit = 1; bit <= OPT_STATUS; bit <<= 1) {
				if (!(h[27] & bit))
					continue;
				if (bit == OPT_STATUS)
					memcpy(&v, h + o, 8);
				o += 8;
			}
			st[k++] = (uint32_t)v;
		}
		at += 4 + len;
	}
	return k;
}

static const char *other_ip(void)
{
	return oxt_two_hosts() ? NULL : "127.0.0.2";
}

/* Where group 3's key search comes from (its source is banned a while: on
 * one host not 127.0.0.1, V's and R's own). */
static const char *search_ip(void)
{
	return oxt_two_hosts() ? NULL : "127.0.0.3";
}

/* The attacker's address as a name (its own IP, a port nobody listens on). */
static struct sockaddr_in own_name(int s)
{
	struct sockaddr_in me;
	socklen_t l = sizeof me;

	REQUIRE(getsockname(s, (struct sockaddr *)&me, &l) == 0, "getsockname");
	me.sin_port = htons(9);
	return me;
}

static void ask(int sock, char c)
{
	oxt_put(sock, c);
	REQUIRE(oxt_get(sock) == 'k', "the victim's answer");
}

static int attacker(int sock)
{
	struct brief b;
	static unsigned char h[HELLO_LEN], f[1 << 17], in[1 << 16], payload[70000];
	bool closed;
	int s;

	oxt_reset_counts();
	REQUIRE(read(sock, &b, sizeof b) == sizeof b, "the brief");

	/* 1. Hijack: R's own IP (this namespace), R's name, before R spoke. */
	s = raw_open(&b.v, NULL);
	REQUIRE(s >= 0, "connect to V");
	hello(h, &b.r, 0x777, b.keyed);
	EXPECT(send_all(s, h, HELLO_LEN), "hello");
	if (b.keyed)
		EXPECT(send_all(s, (unsigned char[32]){ 0 }, 32), "a forged proof");
	oxt_sleep_ms(200);
	ask(sock, 'H');
	close(s);

	oxt_become_peer();

	/* 2. Spoof: another IP, R's name, a new epoch, an injected message. */
	s = raw_open(&b.v, other_ip());
	REQUIRE(s >= 0, "connect to V");
	hello(h, &b.r, 0x999, b.keyed);
	EXPECT(send_all(s, h, HELLO_LEN), "hello");
	if (b.keyed)
		EXPECT(send_all(s, (unsigned char[32]){ 0 }, 32), "a forged proof");
	EXPECT(send_all(s, f, frame(f, OP_EAGER, FLAG_TAGGED, 0, 8, 0x5151, 0, 0, 0, &b.r, "injected", 8)),
	       "the injected message");
	drain(s, in, sizeof in, 300, &closed);
	EXPECT(closed, "the impostor's connection was closed");
	close(s);
	ask(sock, 'S');

	/* 3. Wrong keys. */
	s = raw_open(&b.v, search_ip());
	REQUIRE(s >= 0, "connect to V");
	{
		struct sockaddr_in me = own_name(s);
		unsigned char iov[16];
		uint32_t st[64];
		size_t n = 0, got;
		int k, i;

		hello(h, &me, 0x1234, false);
		EXPECT(send_all(s, h, HELLO_LEN), "hello");
		put64(iov, 0x10000);
		put64(iov + 8, 8);
		/* A known key at a wrong address, an unknown key, then
		 * REFUSE_MAX more unknown keys. */
		n += frame(f + n, OP_READ, 0, 1, 8, 0, 0x1234ull << 32 | 1, b.base + BUF, b.key, &me, iov, 16);
		n += frame(f + n, OP_READ, 0, 1, 8, 0, 0x1234ull << 32 | 2, b.base, b.key ^ 0x1, &me, iov, 16);
		for (i = 0; i < REFUSE_MAX; i++)
			n += frame(f + n, OP_READ, 0, 1, 8, 0, 0x1234ull << 32 | (3 + i), b.base, b.key + 7 * i + 3,
				   &me, iov, 16);
		EXPECT(send_all(s, f, n), "the requests");
		got = drain(s, in, sizeof in, 2000, &closed);
		if (b.keyed) {
			EXPECT(closed, "keyed: a hello without the key is refused");
			EXPECT(got <= HELLO_LEN, "keyed: nothing but the refusal came back (%zu bytes)", got);
		} else {
			k = acks(in, got, HELLO_LEN, st, 64);
			EXPECT(k >= 2, "the first two requests were answered (%d answers)", k);
			EXPECT(k >= 2 && st[0] == st[1] && st[0] == FI_EACCES,
			       "a known key at a wrong address and an unknown key answer alike, FI_EACCES (%u, %u)",
			       k > 0 ? st[0] : 0, k > 1 ? st[1] : 0);
			EXPECT(k < REFUSE_MAX + 2, "not every wrong key was answered: %d of %d", k, REFUSE_MAX + 2);
			EXPECT(closed, "the connection was closed after %d refusals", REFUSE_MAX);
		}
		close(s);
		if (!b.keyed) {
			s = raw_open(&b.v, search_ip());
			if (s >= 0) {
				drain(s, in, sizeof in, 500, &closed);
				EXPECT(closed, "a new connection from the banned source is closed at once");
				close(s);
			}
		}
	}
	/* (The ban, FI_OXMR_REFUSE_BAN_MS, ends before the next groups.) */
	oxt_sleep_ms(1700);
	ask(sock, 'K');

	/* 4. Silent connections. */
	{
		int many[200], n = 0, gone = 0;

		for (int i = 0; i < 200; i++) {
			int t = raw_open(&b.v, other_ip());

			if (t >= 0)
				many[n++] = t;
		}
		ask(sock, 'C');
		oxt_sleep_ms(1500);
		ask(sock, 'c');
		for (int i = 0; i < n; i++) {
			struct pollfd pf = { .fd = many[i], .events = POLLIN };

			if (poll(&pf, 1, 0) == 1 && recv(many[i], in, sizeof in, MSG_DONTWAIT) <= 0)
				gone++;
			close(many[i]);
		}
		EXPECT(gone == n, "every silent connection was closed (%d of %d)", gone, n);
	}

	/* 5. Memory: an eager frame over the limit; then a flood of eager
	 *    messages nobody receives. (Under a ban from group 3? The ban is
	 *    10 s: the flood comes from another IP on one host, or after it.) */
	if (!b.keyed) {
		struct sockaddr_in me;
		size_t sent = 0;
		double end;

		s = raw_open(&b.v, other_ip());
		REQUIRE(s >= 0, "connect to V");
		me = own_name(s);
		hello(h, &me, 0x4321, false);
		EXPECT(send_all(s, h, HELLO_LEN), "hello");
		memset(payload, 7, sizeof payload);
		EXPECT(send_all(s, f, frame(f, OP_EAGER, FLAG_TAGGED, 0, 70000, 1, 0, 0, 0, &me, payload, 70000)),
		       "an eager frame of 70000 bytes");
		drain(s, in, sizeof in, 1000, &closed);
		EXPECT(closed, "an eager frame over the 64 KiB limit closes its connection");
		close(s);

		s = raw_open(&b.v, other_ip());
		REQUIRE(s >= 0, "connect to V");
		me = own_name(s);
		hello(h, &me, 0x4322, false);
		EXPECT(send_all(s, h, HELLO_LEN), "hello");
		REQUIRE(fcntl(s, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
		end = oxt_now_ms() + 3000;
		{
			size_t n = frame(f, OP_EAGER, FLAG_TAGGED, 0, 60000, 2, 0, 0, 0, &me, payload, 60000), off = 0;

			while (oxt_now_ms() < end && sent < (64u << 20)) {
				ssize_t w = send(s, f + off, n - off, MSG_NOSIGNAL);

				if (w > 0) {
					sent += (size_t)w;
					off = (off + (size_t)w) % n;
				} else {
					oxt_sleep_ms(1);
				}
			}
		}
		printf("    the flood put %zu bytes into the socket in 3 s\n", sent);
		EXPECT(sent < (32u << 20), "the flood was held back (%zu bytes taken of 64 MiB)", sent);
		ask(sock, 'M');
		close(s);
	} else {
		/* With a key: a stranger's flood after a forged proof goes
		 * nowhere; its connection ends at the proof. */
		struct sockaddr_in me;
		size_t sent = 0;
		double end = oxt_now_ms() + 1000;

		s = raw_open(&b.v, other_ip());
		REQUIRE(s >= 0, "connect to V");
		me = own_name(s);
		hello(h, &me, 0x4323, true);
		EXPECT(send_all(s, h, HELLO_LEN), "hello");
		EXPECT(send_all(s, (unsigned char[32]){ 0 }, 32), "a forged proof");
		memset(payload, 7, sizeof payload);
		{
			size_t n = frame(f, OP_EAGER, FLAG_TAGGED, 0, 60000, 2, 0, 0, 0, &me, payload, 60000);
			ssize_t w = 0;

			REQUIRE(fcntl(s, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
			while (oxt_now_ms() < end && sent < (64u << 20)) {
				w = send(s, f, n, MSG_NOSIGNAL);
				if (w > 0)
					sent += (size_t)w;
				else if (errno == EPIPE || errno == ECONNRESET)
					break;
				else
					oxt_sleep_ms(1);
			}
			printf("    the keyed flood put %zu bytes into the socket before it ended\n", sent);
			EXPECT(w < 0 && (errno == EPIPE || errno == ECONNRESET), "the stranger's connection ended (%s)",
			       strerror(errno));
			EXPECT(sent < (16u << 20), "the stranger's flood was cut short (%zu bytes)", sent);
		}
		close(s);
		ask(sock, 'M');
	}

	/* 6. Dial for the attacker: a hello naming a third party, a request. */
	s = raw_open(&b.v, other_ip());
	REQUIRE(s >= 0, "connect to V");
	{
		unsigned char iov[16];

		hello(h, &b.third, 0x5555, b.keyed);
		EXPECT(send_all(s, h, HELLO_LEN), "hello");
		put64(iov, 0x10000);
		put64(iov + 8, 8);
		send_all(s, f, frame(f, OP_READ, 0, 1, 8, 0, 0x5555ull << 32 | 1, b.base, b.key ^ 1, &b.third, iov, 16));
		drain(s, in, sizeof in, 300, &closed);
		close(s);
	}
	ask(sock, 'D');
	oxt_put(sock, 'E');
	return oxt_failed_total ? 1 : 0;
}

/* ---- the victim ---- */

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	REQUIRE(d, "opendir /proc/self/fd");
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void progress(struct ep *v, struct ep *r)
{
	struct fi_cq_tagged_entry e;

	fi_cq_read(v->cq, &e, 0);
	fi_cq_read(r->cq, &e, 0);
}

/* Progress both until `cq` has a completion (returned in *e) or `ms` pass. */
static int wait_cq(struct ep *v, struct ep *r, struct fid_cq *cq, struct fi_cq_tagged_entry *e, int ms)
{
	double end = oxt_now_ms() + ms;

	while (oxt_now_ms() < end) {
		ssize_t n = fi_cq_read(cq, e, 1);

		if (n == 1)
			return 1;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };

			fi_cq_readerr(cq, &err, 0);
			return -(int)err.err;
		}
		progress(v, r);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ep v, r;
	struct brief b;
	fi_addr_t v_r, r_v;
	int sock, status, third;
	pid_t child;
	long rss0 = 0;
	bool keyed;
	struct fi_cq_tagged_entry e;
	char rbuf[64];
	struct fi_context ctx[8];

	(void)argc;
	setenv("FI_OXMR_WIRE", "tcp", 1);
	setenv("FI_OXMR_REFUSE_MAX", "16", 1);
	setenv("FI_OXMR_TCP_CONN_MAX", "32", 1);
	setenv("FI_OXMR_TCP_HELLO_MS", "1000", 1);
	setenv("FI_OXMR_UNEXP_MAX", "4194304", 1);
	setenv("FI_OXMR_REFUSE_BAN_MS", "1500", 1);
	setenv("FI_LOG_LEVEL", "warn", 0);
	oxt_init(argv[0]);
	alarm(90);
	keyed = getenv("FI_OXMR_AUTH_KEY") && *getenv("FI_OXMR_AUTH_KEY");
	printf("# %s, %s\n", oxt_two_hosts() ? "two hosts (network namespaces)" : "one host",
	       keyed ? "with a job key" : "without a job key");
	ep_open(&v, NULL);
	ep_open(&r, v.fab);
	REQUIRE_RC(fi_av_insert(v.av, &r.name, 1, &v_r, 0, NULL), 1);
	REQUIRE_RC(fi_av_insert(r.av, &v.name, 1, &r_v, 0, NULL), 1);

	memset(&b, 0, sizeof b);
	b.v = v.name;
	b.r = r.name;
	b.key = fi_mr_key(v.mr);
	b.base = (uint64_t)(uintptr_t)v.buf;
	b.keyed = keyed;
	{
		/* The third party: a listener on V's host that nobody should
		 * ever connect to. */
		struct sockaddr_in t = oxt_sin(oxt_addr(), 0);
		socklen_t l = sizeof t;

		third = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		REQUIRE(third >= 0 && bind(third, (struct sockaddr *)&t, sizeof t) == 0 && listen(third, 8) == 0 &&
				getsockname(third, (struct sockaddr *)&t, &l) == 0,
			"a third party's listener");
		b.third = t;
	}

	OXT_GROUP("1. a hello naming R from R's own IP before R spoke: V's first send still reaches R (checked with a key)");
	child = oxt_fork(attacker, &sock);
	REQUIRE(write(sock, &b, sizeof b) == sizeof b, "brief the attacker");
	for (;;) {
		struct pollfd pf = { .fd = sock, .events = POLLIN };
		char c;

		progress(&v, &r);
		if (poll(&pf, 1, 1) != 1)
			continue;
		c = oxt_get(sock);
		if (c == 'E')
			break;
		switch (c) {
		case 'H':
			REQUIRE_RC(fi_trecv(r.ep, rbuf, sizeof rbuf, NULL, r_v, 0x11, 0, &ctx[0]), 0);
			REQUIRE_RC(fi_tsend(v.ep, "to R", 4, NULL, v_r, 0x11, &ctx[1]), 0);
			{
				int got = wait_cq(&v, &r, r.cq, &e, 5000);

				if (keyed)
					EXPECT(got == 1 && !memcmp(rbuf, "to R", 4),
					       "keyed: V's first message to R reached R (%d)", got);
				else
					printf("    without a key: V's first message to R %s R (a process on R's IP may speak as R: docs/security.md)\n",
					       got == 1 ? "reached" : "did not reach");
			}
			while (fi_cq_read(v.cq, &e, 1) == 1)
				;
			OXT_GROUP("2. from another IP, a hello naming R and an injected message: V's receive directed at R takes R's message only");
			memset(rbuf, 0, sizeof rbuf);
			REQUIRE_RC(fi_trecv(v.ep, rbuf, sizeof rbuf, NULL, v_r, 0x5151, 0, &ctx[2]), 0);
			break;
		case 'S': {
			double end = oxt_now_ms() + 500;
			int got;

			while (oxt_now_ms() < end) {
				progress(&v, &r);
				if (fi_cq_read(v.cq, &e, 1) == 1)
					EXPECT(e.op_context != &ctx[2], "the receive directed at R took the impostor's message (%.8s)",
					       rbuf);
			}
			REQUIRE_RC(fi_tsend(r.ep, "real msg", 8, NULL, r_v, 0x5151, &ctx[3]), 0);
			got = wait_cq(&v, &r, v.cq, &e, 5000);
			EXPECT(got == 1 && e.op_context == &ctx[2] && !memcmp(rbuf, "real msg", 8),
			       "the receive took R's real message (%d, %.8s)", got, rbuf);
			while (wait_cq(&v, &r, r.cq, &e, 200) == 1)
				;
			OXT_GROUP(keyed ? "3. keyed: a raw peer without the key is refused at its hello"
					: "3. wrong keys: refusals answer alike, and a burst closes the connection and bans its source");
			break;
		}
		case 'K':
			OXT_GROUP("4. 200 silent connections: V holds at most its cap, closes them at the hello deadline, serves R");
			rss0 = fd_count();
			break;
		case 'C': {
			int fds = fd_count(), got;

			EXPECT(fds - rss0 <= 40, "V holds %d descriptors more for 200 silent connections (cap 32)",
			       fds - (int)rss0);
			REQUIRE_RC(fi_trecv(v.ep, rbuf, sizeof rbuf, NULL, v_r, 0x22, 0, &ctx[4]), 0);
			REQUIRE_RC(fi_tsend(r.ep, "served", 6, NULL, r_v, 0x22, &ctx[5]), 0);
			got = wait_cq(&v, &r, v.cq, &e, 5000);
			EXPECT(got == 1 && e.op_context == &ctx[4], "R is served meanwhile (%d)", got);
			while (wait_cq(&v, &r, r.cq, &e, 100) == 1)
				;
			break;
		}
		case 'c':
			OXT_GROUP(keyed ? "5. keyed: a stranger's flood after a forged proof ends at the proof; V's memory stays"
					: "5. an eager frame over the limit closes its connection; a flood of unexpected messages is held back");
			rss0 = oxt_status_kb("VmRSS");
			break;
		case 'M': {
			long grew = oxt_status_kb("VmRSS") - rss0;

			printf("    V's resident memory grew by %ld KiB\n", grew);
			EXPECT(grew < 24 * 1024, "V's memory grew by %ld KiB under the flood (bound 4 MiB)", grew);
			OXT_GROUP("6. a hello naming a third party, then a request: V never connects there");
			break;
		}
		case 'D': {
			double end = oxt_now_ms() + 1000;
			int in = -1;

			while (oxt_now_ms() < end && in < 0) {
				progress(&v, &r);
				in = accept(third, NULL, NULL);
			}
			EXPECT(in < 0, "V connected to the third party the attacker named");
			if (in >= 0)
				close(in);
			break;
		}
		default:
			REQUIRE(0, "an unknown command %c", c);
		}
		oxt_put(sock, 'k');
	}
	REQUIRE(waitpid(child, &status, 0) == child, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the attacker's checks passed (status %d)", status);
	OXT_GROUP("close");
	close(third);
	for (struct ep *x = &v;; x = &r) {
		EXPECT_RC(fi_close(&x->mr->fid), 0);
		EXPECT_RC(fi_close(&x->ep->fid), 0);
		EXPECT_RC(fi_close(&x->av->fid), 0);
		EXPECT_RC(fi_close(&x->cq->fid), 0);
		EXPECT_RC(fi_close(&x->dom->fid), 0);
		fi_freeinfo(x->info);
		free(x->buf);
		if (x == &r)
			break;
	}
	EXPECT_RC(fi_close(&v.fab->fid), 0);
	return oxt_done();
}
