/*
 * xfer: the data path between processes (docs/wire.md, fi_msg(3),
 * fi_tagged(3), fi_rma(3), fi_cq(3)): on one host (shared memory, or TCP
 * with FI_OXMR_WIRE=tcp), or with the child on another host
 * (fabtests/run.sh's "xfer[two hosts]": OXT_NETNS_PEER, the child enters
 * that network namespace, and every transfer crosses a veth pair over TCP).
 *
 * The program forks; the parent and the child each open their own fabric,
 * domain and RDM endpoint after the fork (the child also a second endpoint,
 * used as "another peer"), exchange fi_getname addresses and MR keys over a
 * socketpair, and run the groups below in lock step. The two sides
 * coordinate only over the socketpair (SYNC: both sides at the same source
 * line), never through libfabric, and every completion is polled with a
 * deadline, so a broken data path fails a check instead of hanging.
 *
 *  1. FI_MSG sizes 0 B .. 16 MiB both ways (eager up to 8080 B, RTS above),
 *     the eager/RTS boundary (an eager send completes without the
 *     receiver, an RTS one on its ACK), fi_sendv/fi_recvv, fi_senddata,
 *     fi_inject, FI_DELIVERY_COMPLETE; over TCP (1z), the parent's sends
 *     from its registered buffer counted as io_uring SEND_ZC in the
 *     domain's extension stats under FI_OXMR_TCP_IO_URING=1, and not
 *     under 0;
 *  2. unexpected messages in order; messages queued behind a copy the
 *     receiver keeps for later, in order; FI_SOURCE (FI_ADDR_NOTAVAIL,
 *     then the inserted fi_addr);
 *  3. tags and ignore masks, tagged/untagged separation, directed receive;
 *  4. truncation (FI_ETRUNC, olen) on the eager and the RTS path;
 *  5. RMA write/read/writedata/inject_write at the child's registration;
 *  6. refused RMA (key, bounds, overflow, rights, closed key): an error
 *     completion with FI_EACCES whatever was wrong, guard bytes untouched,
 *     the endpoint keeps working;
 *  8. flow control: a full queue answers -FI_EAGAIN, nothing is lost;
 *  7. a peer that dies: pending operations fail with FI_ECONNABORTED (and
 *     a receive of its data with FI_EIO), the endpoint keeps working, and
 *     the dead peer's /dev/shm file is reclaimed by the next process that
 *     opens an endpoint.
 *
 * The child prints its own group lines as "xfer[child]"; its exit status
 * is checked by the parent.
 */
#include "oxt.h"

#include <fcntl.h>
#include <rdma/fi_ext_oxmr.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define KiB 1024UL
#define MiB (1024UL * 1024UL)
#define BIG (16 * MiB)
#define BUFLEN (BIG + 64 * KiB)
#define EAGER_MAX 8080 /* docs/wire.md: inline payload limit */
#define RING_CELLS 256 /* docs/wire-shm.md: cells per endpoint queue */

/* FI_OXMR_WIRE=tcp, or the two processes on two hosts (fabtests/run.sh's
 * network namespaces, OXT_NETNS_PEER: the child enters the peer's): the
 * same tests over the TCP wire (docs/wire-tcp.md), where what is
 * shm-specific differs: the flow-control bound (socket buffers and a 4 MiB
 * link queue, not 256 cells), the inline limit, and any order between two
 * endpoints' messages (two connections). */
static bool over_tcp(void)
{
	const char *v = getenv("FI_OXMR_WIRE");

	return (v && !strcmp(v, "tcp")) || oxt_two_hosts();
}

/* The inline limit in effect: FI_OXMR_SHM_EAGER_MAX (at most 8080) on shared
 * memory, FI_OXMR_TCP_EAGER_MAX (default 64 KiB, at most a 256 KiB frame
 * less its 72-byte header) over TCP. */
static size_t eager_max(void)
{
	const char *v = getenv(over_tcp() ? "FI_OXMR_TCP_EAGER_MAX" : "FI_OXMR_SHM_EAGER_MAX");
	size_t cap = over_tcp() ? 256 * KiB - 72 : EAGER_MAX;
	size_t m = v ? strtoull(v, NULL, 0) : over_tcp() ? 64 * KiB : EAGER_MAX;

	return m < cap ? m : cap;
}
#define TMO_MS 10000   /* one completion */
#define CTL_TMO_MS 20000 /* one control message */
#define STASH 2048
#define NCTX 1024
#define GUARD 4096
#define GUARD_BYTE 0xC3
#define FILL_BYTE 0x5A
#define POISON 0xEE

/* ------------------------------------------------------------ helpers */

static const char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

static const char *fmt(const char *f, ...)
{
	static char bufs[32][320];
	static int k;
	char *b = bufs[k++ % 32];
	va_list ap;

	va_start(ap, f);
	vsnprintf(b, sizeof bufs[0], f, ap);
	va_end(ap);
	return b;
}

/* A group name (kept until the next group starts). */
static const char *gname(const char *f, ...) __attribute__((format(printf, 1, 2)));

static const char *gname(const char *f, ...)
{
	static char bufs[2][320];
	static int k;
	char *b = bufs[k++ % 2];
	va_list ap;

	va_start(ap, f);
	vsnprintf(b, sizeof bufs[0], f, ap);
	va_end(ap);
	return b;
}

/* Byte i of the pattern `seed` (not periodic, so shifts show). */
static inline uint8_t pat(uint64_t seed, size_t i)
{
	uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ULL + i;

	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ULL;
	x ^= x >> 29;
	return (uint8_t)x;
}

static void fill(uint8_t *b, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pat(seed, i);
}

static bool pat_at(const char *file, int line, const uint8_t *b, size_t len,
		   uint64_t seed, const char *what)
{
	for (size_t i = 0; i < len; i++) {
		if (b[i] != pat(seed, i)) {
			oxt_fail(file, line,
				 "%s: data byte %zu of %zu: expected 0x%02x, got 0x%02x",
				 what, i, len, pat(seed, i), b[i]);
			return false;
		}
	}
	return true;
}

static bool bytes_at(const char *file, int line, const uint8_t *b, size_t len,
		     uint8_t v, const char *what)
{
	for (size_t i = 0; i < len; i++) {
		if (b[i] != v) {
			oxt_fail(file, line,
				 "%s: byte %zu of %zu: expected 0x%02x (untouched), got 0x%02x",
				 what, i, len, v, b[i]);
			return false;
		}
	}
	return true;
}

#define EXPECT_PAT(b, len, seed, ...)                                          \
	pat_at(__FILE__, __LINE__, (const uint8_t *)(b), (len), (seed),        \
	       fmt(__VA_ARGS__))
#define EXPECT_BYTES(b, len, v, ...)                                           \
	bytes_at(__FILE__, __LINE__, (const uint8_t *)(b), (len), (v),         \
		 fmt(__VA_ARGS__))

/* First offset in [b, b+len) whose byte differs from the pattern, or -1. */
static long pat_diff(const uint8_t *b, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(seed, i))
			return (long)i;
	return -1;
}

static long bytes_diff(const uint8_t *b, size_t len, uint8_t v)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return (long)i;
	return -1;
}

/* ------------------------------------------------------------ objects */

struct comp {
	bool err;
	fi_addr_t src;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry ee;
};

struct ept {
	const char *label;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	char name[64];
	size_t namelen;
	struct comp stash[STASH];
	unsigned head, tail;
};

struct node {
	bool parent;
	int ctl;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct ept e1, e2; /* e2: the child's second endpoint */
	fi_addr_t peer;    /* the other process's first endpoint */
	fi_addr_t peer2;   /* parent: the child's e2 once inserted; child: e2's view of the parent */
	uint8_t *tx, *rx;
	size_t buflen;
	struct fid_mr *txmr, *rxmr;
	void *txd, *rxd;
};

static struct fi_context2 ctxs[NCTX];
#define CTX(i) ((void *)&ctxs[(i)])

/* ------------------------------------------------------- control socket */

enum {
	OP_SYNC = 1,
	OP_HELLO,
	OP_DATA,
	OP_REPLY,
	CMD_VERIFY, /* a=region b=offset c=len d=seed */
	CMD_FILL,   /* a=region b=offset c=len d=seed */
	CMD_INTACT, /* a=region b=also the content (FILL_BYTE) */
	CMD_CQDATA, /* a=data b=len */
	CMD_QUIET,
	CMD_CLOSE, /* a=region */
	CMD_SEND_RTS,
	CMD_HOLD, /* a=ms: reply, then make no progress for that long */
	CMD_END,
};

struct cmsg {
	uint32_t op, id;
	uint64_t a, b, c, d;
	char text[256];
};

static void ctl_put(struct node *n, const struct cmsg *m)
{
	const char *p = (const char *)m;
	size_t left = sizeof *m;

	while (left) {
		ssize_t r = write(n->ctl, p, left);
		if (r < 0 && errno == EINTR)
			continue;
		REQUIRE(r > 0, "control socket write: %s", strerror(errno));
		p += r;
		left -= (size_t)r;
	}
}

/* Read one control message; false on timeout (REQUIREs no EOF/error). */
static bool ctl_get_tmo(struct node *n, struct cmsg *m, int tmo_ms)
{
	char *p = (char *)m;
	size_t left = sizeof *m;
	double end = oxt_now_ms() + tmo_ms;

	while (left) {
		struct pollfd pfd = { .fd = n->ctl, .events = POLLIN };
		int wait = (int)(end - oxt_now_ms() + 0.999);
		int r;

		r = poll(&pfd, 1, wait > 0 ? wait : 0);
		if (r < 0 && errno == EINTR)
			continue;
		REQUIRE(r >= 0, "poll on control socket: %s", strerror(errno));
		if (r == 0) {
			if (left == sizeof *m && oxt_now_ms() >= end)
				return false;
			/* a partial message: the rest is coming */
			REQUIRE(oxt_now_ms() < end + CTL_TMO_MS,
				"control socket: a partial message");
			continue;
		}
		ssize_t got = read(n->ctl, p, left);
		if (got < 0 && errno == EINTR)
			continue;
		REQUIRE(got > 0,
			"control socket: the other process is gone (%s)",
			got == 0 ? "EOF" : strerror(errno));
		p += got;
		left -= (size_t)got;
	}
	return true;
}

static void ctl_get(struct node *n, struct cmsg *m)
{
	REQUIRE(ctl_get_tmo(n, m, CTL_TMO_MS),
		"no control message from the other process within %d ms",
		CTL_TMO_MS);
}

/* Both processes meet at the same source line. */
static void sync_at(struct node *n, int line)
{
	struct cmsg m = { .op = OP_SYNC, .id = (uint32_t)line };

	ctl_put(n, &m);
	ctl_get(n, &m);
	REQUIRE(m.op == OP_SYNC && m.id == (uint32_t)line,
		"the processes are out of step: here at line %d, the other sent op %u id %u",
		line, m.op, m.id);
}
#define SYNC(n) sync_at((n), __LINE__)

/* Send / receive one number. */
static void put_num(struct node *n, uint64_t v)
{
	struct cmsg m = { .op = OP_DATA, .a = v };

	ctl_put(n, &m);
}

static uint64_t get_num(struct node *n)
{
	struct cmsg m;

	ctl_get(n, &m);
	REQUIRE(m.op == OP_DATA, "expected a data message, got op %u", m.op);
	return m.a;
}

/* ------------------------------------------------------ completions */

static void stash_push(struct ept *p, const struct comp *c)
{
	REQUIRE(p->tail - p->head < STASH, "%s: completion stash overflow",
		p->label);
	p->stash[p->tail++ % STASH] = *c;
}

static bool stash_pop(struct ept *p, struct comp *c)
{
	if (p->head == p->tail)
		return false;
	*c = p->stash[p->head++ % STASH];
	return true;
}

/* Put back the completion stash_pop (next_comp) just returned. */
static void stash_unpop(struct ept *p)
{
	p->head--;
}

/* Manual progress: read everything the CQ has into the stash. */
static void progress(struct ept *p)
{
	struct fi_cq_tagged_entry e[16];
	fi_addr_t src[16];
	char rc[160];

	for (;;) {
		ssize_t r = fi_cq_readfrom(p->cq, e, 16, src);

		if (r > 0) {
			for (ssize_t i = 0; i < r; i++) {
				struct comp c;

				memset(&c, 0, sizeof c);
				c.e = e[i];
				c.src = src[i];
				stash_push(p, &c);
			}
			continue;
		}
		if (r == -FI_EAGAIN)
			return;
		if (r == -FI_EAVAIL) {
			struct comp c;

			memset(&c, 0, sizeof c);
			c.err = true;
			c.src = FI_ADDR_NOTAVAIL;
			r = fi_cq_readerr(p->cq, &c.ee, 0);
			REQUIRE(r == 1,
				"%s: fi_cq_readerr after -FI_EAVAIL: expected 1, got %s",
				p->label, oxt_rcstr(r, rc, sizeof rc));
			stash_push(p, &c);
			continue;
		}
		REQUIRE(false, "%s: fi_cq_readfrom: expected entries, -FI_EAGAIN or -FI_EAVAIL, got %s",
			p->label, oxt_rcstr(r, rc, sizeof rc));
	}
}

/* The next completion within tmo_ms (0: only what is there now). */
static bool next_comp(struct ept *p, struct comp *c, int tmo_ms)
{
	double start = oxt_now_ms(), end = start + tmo_ms;

	for (;;) {
		if (stash_pop(p, c))
			return true;
		progress(p);
		if (stash_pop(p, c))
			return true;
		double now = oxt_now_ms();
		if (now >= end)
			return false;
		if (now - start > 2)
			usleep(50);
		else
			sched_yield();
	}
}

static const char *describe(const struct comp *c)
{
	if (c->err)
		return fmt("error completion: ctx %p flags 0x%llx err %d (%s) prov_errno %d len %zu olen %zu",
			   c->ee.op_context, (unsigned long long)c->ee.flags,
			   c->ee.err, oxt_errname(c->ee.err), c->ee.prov_errno,
			   c->ee.len, c->ee.olen);
	return fmt("completion: ctx %p flags 0x%llx len %zu data 0x%llx tag 0x%llx",
		   c->e.op_context, (unsigned long long)c->e.flags, c->e.len,
		   (unsigned long long)c->e.data, (unsigned long long)c->e.tag);
}

/* A successful completion for ctx with exactly these flags. */
static bool ok_at(const char *file, int line, struct ept *p, void *ctx,
		  uint64_t flags, struct comp *c, const char *what)
{
	if (!next_comp(p, c, TMO_MS)) {
		oxt_fail(file, line, "%s: no completion within %d ms", what,
			 TMO_MS);
		return false;
	}
	if (c->err) {
		oxt_fail(file, line, "%s: expected a successful completion, got an %s",
			 what, describe(c));
		return false;
	}
	if (c->e.op_context != ctx) {
		oxt_fail(file, line, "%s: expected the completion of context %p, got a %s",
			 what, ctx, describe(c));
		return false;
	}
	if (c->e.flags != flags)
		oxt_fail(file, line, "%s: completion flags: expected 0x%llx, got 0x%llx",
			 what, (unsigned long long)flags,
			 (unsigned long long)c->e.flags);
	return true;
}
#define EXPECT_OK(p, ctx, flags, c, ...)                                       \
	ok_at(__FILE__, __LINE__, (p), (ctx), (flags), (c), fmt(__VA_ARGS__))

/* fi_cq_strerror gives a non-empty printable string for prov_errno. */
static void strerror_at(const char *file, int line, struct ept *p,
			const struct comp *c, const char *what)
{
	char buf[256];
	const char *s;

	memset(buf, 0, sizeof buf);
	s = fi_cq_strerror(p->cq, c->ee.prov_errno, c->ee.err_data, buf,
			   sizeof buf);
	if (!s || !*s) {
		oxt_fail(file, line, "%s: fi_cq_strerror(prov_errno %d) returned %s",
			 what, c->ee.prov_errno, s ? "\"\"" : "NULL");
		return;
	}
	for (const char *q = s; *q; q++) {
		if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e) {
			oxt_fail(file, line, "%s: fi_cq_strerror(prov_errno %d) is not printable text (byte 0x%02x)",
				 what, c->ee.prov_errno, (unsigned char)*q);
			return;
		}
	}
}

/* An error completion for ctx with this err (positive) and flags. */
static bool err_at(const char *file, int line, struct ept *p, void *ctx,
		   int err, uint64_t flags, struct comp *c, int tmo_ms,
		   const char *what)
{
	if (!next_comp(p, c, tmo_ms)) {
		oxt_fail(file, line, "%s: expected an error completion (%s), got none within %d ms",
			 what, oxt_errname(err), tmo_ms);
		return false;
	}
	if (!c->err) {
		oxt_fail(file, line, "%s: expected an error completion with err %s, got a successful %s",
			 what, oxt_errname(err), describe(c));
		return false;
	}
	if (c->ee.op_context != ctx) {
		oxt_fail(file, line, "%s: expected the error completion of context %p, got an %s",
			 what, ctx, describe(c));
		return false;
	}
	if (c->ee.err != err)
		oxt_fail(file, line, "%s: err: expected %d (%s), got %d (%s)",
			 what, err, oxt_errname(err), c->ee.err,
			 oxt_errname(c->ee.err));
	if (c->ee.prov_errno == 0)
		oxt_fail(file, line, "%s: prov_errno is 0 in an error completion",
			 what);
	if (c->ee.flags != flags)
		oxt_fail(file, line, "%s: error completion flags: expected 0x%llx, got 0x%llx",
			 what, (unsigned long long)flags,
			 (unsigned long long)c->ee.flags);
	strerror_at(file, line, p, c, what);
	return true;
}
#define EXPECT_ERR(p, ctx, err, flags, c, ...)                                 \
	err_at(__FILE__, __LINE__, (p), (ctx), (err), (flags), (c), TMO_MS,    \
	       fmt(__VA_ARGS__))

/* No completion at all for ms (progressing all the while). */
static bool none_at(const char *file, int line, struct ept *p, int ms,
		    const char *what)
{
	struct comp c;

	if (!next_comp(p, &c, ms))
		return true;
	oxt_fail(file, line, "%s: expected no completion, got a %s", what,
		 describe(&c));
	return false;
}
#define EXPECT_NONE(p, ms, ...)                                                \
	none_at(__FILE__, __LINE__, (p), (ms), fmt(__VA_ARGS__))

/* Post (an expression returning ssize_t), retrying -FI_EAGAIN with progress. */
static bool post_at(const char *file, int line, const char *expr, ssize_t r,
		    const char *what)
{
	char g[160];

	if (r == 0)
		return true;
	oxt_fail(file, line, "%s: %s: expected 0, got %s", what, expr,
		 oxt_rcstr(r, g, sizeof g));
	return false;
}
#define POST(p, call, ...)                                                     \
	({                                                                     \
		ssize_t _r;                                                    \
		double _end = oxt_now_ms() + TMO_MS;                           \
		while ((_r = (call)) == -FI_EAGAIN && oxt_now_ms() < _end)     \
			progress(p);                                           \
		post_at(__FILE__, __LINE__, #call, _r, fmt(__VA_ARGS__));      \
	})

/* -------------------------------------------------------------- setup */

static void ept_open(struct node *n, struct ept *p, const char *label)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = FI_WAIT_NONE };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };

	p->label = label;
	REQUIRE_RC(fi_cq_open(n->domain, &ca, &p->cq, NULL), 0);
	REQUIRE_RC(fi_av_open(n->domain, &aa, &p->av, NULL), 0);
	REQUIRE_RC(fi_endpoint(n->domain, n->info, &p->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(p->ep, &p->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(p->ep, &p->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(p->ep), 0);
	p->namelen = sizeof p->name;
	REQUIRE_RC(fi_getname(&p->ep->fid, p->name, &p->namelen), 0);
}

static void ept_close(struct ept *p)
{
	if (!p->ep)
		return;
	EXPECT_RC(fi_close(&p->ep->fid), 0);
	EXPECT_RC(fi_close(&p->av->fid), 0);
	EXPECT_RC(fi_close(&p->cq->fid), 0);
	p->ep = NULL;
}

static struct fi_info *xfer_hints(void)
{
	struct fi_info *h = oxt_hints(FI_EP_RDM);

	h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_DIRECTED_RECV | FI_SOURCE;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY | FI_MR_LOCAL;
	return h;
}

static void node_open(struct node *n, bool two_eps, size_t buflen)
{
	struct fi_info *hints = xfer_hints();
	uint64_t acc = FI_SEND | FI_RECV | FI_READ | FI_WRITE;

	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), NULL, FI_SOURCE, hints,
			      &n->info),
		   0);
	fi_freeinfo(hints);
	REQUIRE((n->info->caps & (FI_DIRECTED_RECV | FI_SOURCE | FI_RMA |
				  FI_TAGGED | FI_MSG)) ==
			(FI_DIRECTED_RECV | FI_SOURCE | FI_RMA | FI_TAGGED |
			 FI_MSG),
		"fi_getinfo did not grant the asked caps: 0x%llx",
		(unsigned long long)n->info->caps);
	REQUIRE_RC(fi_fabric(n->info->fabric_attr, &n->fabric, NULL), 0);
	REQUIRE_RC(fi_domain(n->fabric, n->info, &n->domain, NULL), 0);
	ept_open(n, &n->e1, n->parent ? "parent ep" : "child ep");
	if (two_eps)
		ept_open(n, &n->e2, "child ep2");
	n->buflen = buflen;
	if (!buflen)
		return;
	n->tx = mmap(NULL, buflen, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	n->rx = mmap(NULL, buflen, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(n->tx != MAP_FAILED && n->rx != MAP_FAILED, "mmap: %s",
		strerror(errno));
	memset(n->tx, 0, buflen);
	memset(n->rx, 0, buflen);
	REQUIRE_RC(fi_mr_reg(n->domain, n->tx, buflen, acc, 0, 0, 0, &n->txmr,
			     NULL),
		   0);
	REQUIRE_RC(fi_mr_reg(n->domain, n->rx, buflen, acc, 0, 0, 0, &n->rxmr,
			     NULL),
		   0);
	n->txd = fi_mr_desc(n->txmr);
	n->rxd = fi_mr_desc(n->rxmr);
}

static void node_close(struct node *n)
{
	if (n->txmr)
		EXPECT_RC(fi_close(&n->txmr->fid), 0);
	if (n->rxmr)
		EXPECT_RC(fi_close(&n->rxmr->fid), 0);
	ept_close(&n->e2);
	ept_close(&n->e1);
	EXPECT_RC(fi_close(&n->domain->fid), 0);
	EXPECT_RC(fi_close(&n->fabric->fid), 0);
	fi_freeinfo(n->info);
	if (n->tx)
		munmap(n->tx, n->buflen);
	if (n->rx)
		munmap(n->rx, n->buflen);
}

static fi_addr_t av_insert(struct ept *p, const void *name)
{
	fi_addr_t fa = FI_ADDR_NOTAVAIL;

	REQUIRE_RC(fi_av_insert(p->av, name, 1, &fa, 0, NULL), 1);
	REQUIRE(fa != FI_ADDR_NOTAVAIL, "fi_av_insert gave FI_ADDR_NOTAVAIL");
	return fa;
}

/* Exchange names: each side sends its e1 (and the child its e2) name. */
struct hello {
	char name1[64], name2[64];
};

static void exchange(struct node *n, struct hello *peer)
{
	struct cmsg m = { .op = OP_HELLO };
	struct hello mine;

	memset(&mine, 0, sizeof mine);
	memcpy(mine.name1, n->e1.name, n->e1.namelen);
	if (n->e2.ep)
		memcpy(mine.name2, n->e2.name, n->e2.namelen);
	_Static_assert(sizeof mine <= sizeof m.text, "hello fits");
	memcpy(m.text, &mine, sizeof mine);
	ctl_put(n, &m);
	ctl_get(n, &m);
	REQUIRE(m.op == OP_HELLO, "expected the other side's names, got op %u",
		m.op);
	memcpy(peer, m.text, sizeof *peer);
}

static uint16_t port_of(const void *name)
{
	const struct sockaddr_in *s = name;

	return ntohs(s->sin_port);
}

/* ---------------------------------------------- 1. FI_MSG send/recv */

static const char *dir(bool parent_sends)
{
	return parent_sends ? "parent -> child" : "child -> parent";
}

static void t_sizes(struct node *n, bool ps)
{
	static const size_t sizes[] = { 0,	1,	   8,	4096, 8080,
					8081,	64 * KiB, MiB, BIG };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. fi_send/fi_recv of 0 B .. 16 MiB (eager <= %zu < RTS), %s",
		      eager_max(), dir(ps)));
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		size_t size = sizes[k];
		uint64_t seed = size * 4 + ps;

		if (!snd) {
			memset(n->rx, POISON, size + 64);
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx, size, n->rxd,
				     FI_ADDR_UNSPEC, CTX(0)),
			     "recv of %zu B", size);
		} else {
			fill(n->tx, size, seed);
		}
		SYNC(n);
		if (snd) {
			POST(&n->e1,
			     fi_send(n->e1.ep, n->tx, size, n->txd, n->peer,
				     CTX(1)),
			     "send of %zu B", size);
			EXPECT_OK(&n->e1, CTX(1), FI_SEND | FI_MSG, &c,
				  "send of %zu B", size);
			/* Large sends are copied by both processes (shared
			 * copies): the sender's side must only ever read
			 * its own buffer. */
			EXPECT_PAT(n->tx, size, seed,
				   "send buffer after the send of %zu B", size);
		} else if (EXPECT_OK(&n->e1, CTX(0), FI_RECV | FI_MSG, &c,
				     "recv of %zu B", size)) {
			EXPECT(c.e.len == size,
			       "recv of %zu B: len: expected %zu, got %zu", size,
			       size, c.e.len);
			EXPECT(c.src == n->peer,
			       "recv of %zu B: fi_cq_readfrom src: expected %llu (the sender), got %llu",
			       size, (unsigned long long)n->peer,
			       (unsigned long long)c.src);
			EXPECT_PAT(n->rx, size, seed, "recv of %zu B", size);
			EXPECT_BYTES(n->rx + size, 64, POISON,
				     "recv of %zu B: bytes after the buffer",
				     size);
		}
		SYNC(n);
	}
	EXPECT_NONE(&n->e1, 0, "after the sizes");
}

/*
 * A lone rendezvous send large enough to be shared (64 KiB up) is copied by
 * both processes in two chunks split at a page boundary of the receive
 * buffer (docs/wire-shm.md, shared copies): buffers that start inside a page,
 * at the same or different offsets on the two sides, arrive intact, and
 * nothing before or after the receive buffer is touched.
 */
static void t_offsets(struct node *n, bool ps)
{
	static const size_t sizes[] = { 64 * KiB, 64 * KiB + 1, 100000, 128 * KiB };
	static const size_t offs[][2] = { { 16, 16 }, { 16, 2048 }, { 4095, 16 }, { 2048, 4095 } };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. lone shared copies of 64-128 KiB between buffers that start inside a page (send/recv offsets 16/16, 16/2048, 4095/16, 2048/4095), %s",
			dir(ps)));
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
			size_t size = sizes[k], so = offs[o][0], ro = offs[o][1];
			uint64_t seed = 21000 + size + o * 7 + ps;

			if (!snd) {
				memset(n->rx, POISON, ro + size + 64);
				POST(&n->e1,
				     fi_recv(n->e1.ep, n->rx + ro, size, n->rxd,
					     FI_ADDR_UNSPEC, CTX(0)),
				     "recv of %zu B at offset %zu", size, ro);
			} else {
				fill(n->tx + so, size, seed);
			}
			SYNC(n);
			if (snd) {
				POST(&n->e1,
				     fi_send(n->e1.ep, n->tx + so, size, n->txd,
					     n->peer, CTX(1)),
				     "send of %zu B from offset %zu", size, so);
				EXPECT_OK(&n->e1, CTX(1), FI_SEND | FI_MSG, &c,
					  "send of %zu B from offset %zu", size, so);
				EXPECT_PAT(n->tx + so, size, seed,
					   "send buffer after the send of %zu B from offset %zu",
					   size, so);
			} else if (EXPECT_OK(&n->e1, CTX(0), FI_RECV | FI_MSG, &c,
					     "recv of %zu B at offset %zu", size, ro)) {
				EXPECT(c.e.len == size,
				       "recv of %zu B at offset %zu: len %zu", size,
				       ro, c.e.len);
				EXPECT_PAT(n->rx + ro, size, seed,
					   "recv of %zu B at offset %zu (sent from offset %zu)",
					   size, ro, so);
				EXPECT_BYTES(n->rx, ro, POISON,
					     "recv of %zu B at offset %zu: bytes before the buffer",
					     size, ro);
				EXPECT_BYTES(n->rx + ro + size, 64, POISON,
					     "recv of %zu B at offset %zu: bytes after the buffer",
					     size, ro);
			}
			SYNC(n);
		}
	}
	EXPECT_NONE(&n->e1, 0, "after the offsets");
}

/*
 * docs/wire.md: a send of up to the inline limit (eager_max(): 8080 B on
 * shared memory, 64 KiB over TCP) goes inline and completes when it is
 * written (the receiver need not do anything); a larger one is an RTS and
 * completes on the receiver's ACK. The receiver here neither posts
 * nor progresses until the sender has looked for its completion.
 */
static void t_boundary(struct node *n, bool ps)
{
	const size_t m = eager_max();
	const size_t sizes[] = { m - 1, m, m + 1, m + 16 };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. eager up to %zu B (FI_OXMR_SHM_EAGER_MAX, over TCP FI_OXMR_TCP_EAGER_MAX) completes without the receiver, RTS above waits for it (docs/wire.md), %s",
			m, dir(ps)));
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		size_t size = sizes[k];
		bool eager = size <= m, got = false;
		uint64_t seed = 500 + size * 2 + ps;

		if (snd) {
			fill(n->tx, size, seed);
			POST(&n->e1,
			     fi_send(n->e1.ep, n->tx, size, n->txd, n->peer,
				     CTX(1)),
			     "send of %zu B", size);
			got = next_comp(&n->e1, &c, eager ? 500 : 200);
			if (eager)
				EXPECT(got, "a %zu B send (<= %zu B: eager, complete once its cell is written): no completion within 500 ms while the receiver does nothing",
				       size, m);
			else
				EXPECT(!got, "a %zu B send (> %zu B: RTS, complete on the receiver's ACK) completed while the receiver did nothing: %s",
				       size, m, describe(&c));
			if (got)
				EXPECT(!c.err && c.e.op_context == CTX(1),
				       "send of %zu B: %s", size, describe(&c));
		}
		SYNC(n);
		if (!snd) {
			memset(n->rx, POISON, size);
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx, size, n->rxd,
				     FI_ADDR_UNSPEC, CTX(0)),
			     "recv of %zu B", size);
			if (EXPECT_OK(&n->e1, CTX(0), FI_RECV | FI_MSG, &c,
				      "recv of %zu B", size))
				EXPECT_PAT(n->rx, size, seed, "recv of %zu B",
					   size);
		} else if (!got) {
			EXPECT_OK(&n->e1, CTX(1), FI_SEND | FI_MSG, &c,
				  "the %zu B send once the receiver took it",
				  size);
		}
		SYNC(n);
	}
	EXPECT_NONE(&n->e1, 0, "after the boundary sends");
}

static void t_iov(struct node *n, bool ps)
{
	static const size_t sizes[] = { 3000, 100000 };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. fi_sendv/fi_recvv with 3 iovs split differently (eager and RTS), %s",
		      dir(ps)));
	for (size_t k = 0; k < 2; k++) {
		size_t size = sizes[k];
		uint64_t seed = 1000 + size + ps;
		struct iovec iov[3];
		void *desc[3];

		if (snd) {
			size_t s[3] = { 17, size / 2, size - 17 - size / 2 };
			uint8_t *stream = n->tx + 8 * MiB, *at = stream;

			fill(stream, size, seed);
			for (int i = 0; i < 3; i++) {
				iov[i].iov_base = n->tx + (size_t)i * MiB;
				iov[i].iov_len = s[i];
				desc[i] = n->txd;
				memcpy(iov[i].iov_base, at, s[i]);
				at += s[i];
			}
		} else {
			size_t s[3] = { size / 3, 1, size - size / 3 - 1 };

			for (int i = 0; i < 3; i++) {
				iov[i].iov_base = n->rx + (size_t)i * MiB;
				iov[i].iov_len = s[i];
				desc[i] = n->rxd;
				memset(iov[i].iov_base, POISON, s[i] + 64);
			}
			POST(&n->e1,
			     fi_recvv(n->e1.ep, iov, desc, 3, FI_ADDR_UNSPEC,
				      CTX(2)),
			     "recvv of %zu B", size);
		}
		SYNC(n);
		if (snd) {
			POST(&n->e1,
			     fi_sendv(n->e1.ep, iov, desc, 3, n->peer, CTX(3)),
			     "sendv of %zu B", size);
			EXPECT_OK(&n->e1, CTX(3), FI_SEND | FI_MSG, &c,
				  "sendv of %zu B", size);
		} else if (EXPECT_OK(&n->e1, CTX(2), FI_RECV | FI_MSG, &c,
				     "recvv of %zu B", size)) {
			uint8_t *stream = n->rx + 8 * MiB, *at = stream;

			EXPECT_EQ(c.e.len, size);
			for (int i = 0; i < 3; i++) {
				memcpy(at, iov[i].iov_base, iov[i].iov_len);
				at += iov[i].iov_len;
				EXPECT_BYTES((uint8_t *)iov[i].iov_base +
						     iov[i].iov_len,
					     64, POISON,
					     "recvv of %zu B: bytes after iov %d",
					     size, i);
			}
			EXPECT_PAT(stream, size, seed,
				   "recvv of %zu B (iovs concatenated)", size);
		}
		SYNC(n);
	}
}

static void t_data(struct node *n, bool ps)
{
	static const size_t sizes[] = { 64, 20000 };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. fi_senddata: FI_REMOTE_CQ_DATA and the data at the receiver, %s",
		      dir(ps)));
	for (size_t k = 0; k < 2; k++) {
		size_t size = sizes[k];
		uint64_t seed = 2000 + size + ps;
		uint64_t data = 0xC0DA000000000000ULL | (size << 8) | ps;

		if (!snd) {
			memset(n->rx, POISON, size);
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx, 32 * KiB, n->rxd,
				     FI_ADDR_UNSPEC, CTX(4)),
			     "recv");
		} else {
			fill(n->tx, size, seed);
		}
		SYNC(n);
		if (snd) {
			POST(&n->e1,
			     fi_senddata(n->e1.ep, n->tx, size, n->txd, data,
					 n->peer, CTX(5)),
			     "senddata of %zu B", size);
			EXPECT_OK(&n->e1, CTX(5), FI_SEND | FI_MSG, &c,
				  "senddata of %zu B", size);
		} else if (EXPECT_OK(&n->e1, CTX(4),
				     FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, &c,
				     "recv of senddata %zu B", size)) {
			EXPECT_EQ(c.e.data, data);
			EXPECT_EQ(c.e.len, size);
			EXPECT_PAT(n->rx, size, seed, "senddata %zu B", size);
		}
		SYNC(n);
	}
}

static void t_inject(struct node *n, bool ps)
{
	static const size_t sizes[] = { 0, 64, 4096 };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. fi_inject: data arrives, no completion, buffer reusable at return, %s",
		      dir(ps)));
	if (!snd) {
		memset(n->rx, POISON, 3 * 8192);
		for (int i = 0; i < 3; i++)
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx + i * 8192, 4096, n->rxd,
				     FI_ADDR_UNSPEC, CTX(10 + i)),
			     "recv %d", i);
	}
	SYNC(n);
	if (snd) {
		char rc[160];

		for (int i = 0; i < 3; i++) {
			uint8_t *b = n->tx + i * 8192;
			ssize_t r;

			fill(b, sizes[i], 3000 + i + ps);
			do
				r = fi_inject(n->e1.ep, b, sizes[i], n->peer);
			while (r == -FI_EAGAIN);
			EXPECT(r == 0, "fi_inject of %zu B: expected 0, got %s",
			       sizes[i], oxt_rcstr(r, rc, sizeof rc));
			memset(b, 0, sizes[i]); /* the buffer is ours again */
		}
	}
	SYNC(n);
	if (!snd) {
		for (int i = 0; i < 3; i++) {
			if (!EXPECT_OK(&n->e1, CTX(10 + i), FI_RECV | FI_MSG,
				       &c, "inject %d (%zu B) at the receiver",
				       i, sizes[i]))
				break;
			EXPECT_EQ(c.e.len, sizes[i]);
			EXPECT_PAT(n->rx + i * 8192, sizes[i], 3000 + i + ps,
				   "inject of %zu B", sizes[i]);
		}
	}
	SYNC(n);
	if (snd)
		EXPECT_NONE(&n->e1, 50, "fi_inject made a completion");
}

static void t_delivery(struct node *n, bool ps)
{
	static const size_t sizes[] = { 100, 100000 };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("1. fi_sendmsg FI_DELIVERY_COMPLETE completes only after the receiver's buffer got the data, %s",
		      dir(ps)));
	for (size_t k = 0; k < 2; k++) {
		size_t size = sizes[k];
		uint64_t seed = 4000 + size + ps;

		if (snd) {
			struct iovec iov = { n->tx, size };
			void *desc = n->txd;
			struct fi_msg m = { .msg_iov = &iov,
					    .desc = &desc,
					    .iov_count = 1,
					    .addr = n->peer,
					    .context = CTX(20) };

			fill(n->tx, size, seed);
			POST(&n->e1,
			     fi_sendmsg(n->e1.ep, &m,
					FI_DELIVERY_COMPLETE | FI_COMPLETION),
			     "sendmsg of %zu B", size);
		}
		SYNC(n);
		/* the receiver progresses (the message arrives, unexpected) */
		if (!snd)
			EXPECT_NONE(&n->e1, 200,
				    "receiver before posting (%zu B)", size);
		SYNC(n);
		if (snd)
			EXPECT_NONE(&n->e1, 100,
				    "FI_DELIVERY_COMPLETE send of %zu B before the receiver posted a receive",
				    size);
		SYNC(n);
		if (!snd) {
			memset(n->rx, POISON, size);
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx, size, n->rxd,
				     FI_ADDR_UNSPEC, CTX(21)),
			     "recv");
			if (EXPECT_OK(&n->e1, CTX(21), FI_RECV | FI_MSG, &c,
				      "recv of the delivery-complete message of %zu B",
				      size))
				EXPECT_PAT(n->rx, size, seed,
					   "delivery-complete message");
		} else {
			EXPECT_OK(&n->e1, CTX(20), FI_SEND | FI_MSG, &c,
				  "FI_DELIVERY_COMPLETE send of %zu B after the receive was posted",
				  size);
		}
		SYNC(n);
	}
}

/* --------------------------------------- 2. unexpected, FI_SOURCE */

static void t_unexpected(struct node *n, bool ps)
{
	static const size_t sizes[] = { 100, 20000, 7 };
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("2. unexpected: 3 messages (eager, RTS, eager) before the receives, received in order, %s",
		      dir(ps)));
	if (snd) {
		for (int i = 0; i < 3; i++) {
			fill(n->tx + i * 32 * KiB, sizes[i], 5000 + i + ps);
			POST(&n->e1,
			     fi_send(n->e1.ep, n->tx + i * 32 * KiB, sizes[i],
				     n->txd, n->peer, CTX(30 + i)),
			     "send %d", i);
		}
	}
	SYNC(n);
	if (snd) {
		bool seen[3] = { false, false, false };

		for (int i = 0; i < 3; i++) {
			if (!next_comp(&n->e1, &c, TMO_MS)) {
				EXPECT(false, "send completion %d of 3: none within %d ms",
				       i, TMO_MS);
				break;
			}
			int k = c.err ? -1 :
				(int)((struct fi_context2 *)c.e.op_context -
				      (struct fi_context2 *)CTX(30));
			if (k < 0 || k > 2 || seen[k]) {
				EXPECT(false, "send completion %d: unexpected %s", i,
				       describe(&c));
				continue;
			}
			seen[k] = true;
			EXPECT_EQ(c.e.flags, FI_SEND | FI_MSG);
		}
	} else {
		EXPECT_NONE(&n->e1, 50, "receiver with nothing posted");
		for (int i = 0; i < 3; i++) {
			memset(n->rx + i * 32 * KiB, POISON, 32 * KiB);
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx + i * 32 * KiB, 32 * KiB,
				     n->rxd, FI_ADDR_UNSPEC, CTX(33 + i)),
			     "recv %d", i);
		}
		for (int i = 0; i < 3; i++) {
			if (!EXPECT_OK(&n->e1, CTX(33 + i), FI_RECV | FI_MSG, &c,
				       "unexpected message %d (%zu B)", i,
				       sizes[i]))
				break;
			EXPECT(c.e.len == sizes[i],
			       "unexpected message %d: len: expected %zu, got %zu",
			       i, sizes[i], c.e.len);
			EXPECT_EQ(c.src, n->peer);
			EXPECT_PAT(n->rx + i * 32 * KiB, sizes[i], 5000 + i + ps,
				   "unexpected message %d", i);
		}
	}
	SYNC(n);
	EXPECT_NONE(&n->e1, 0, "after the unexpected messages");
}

/* Messages queued behind a copy the receiver keeps for later (protocol/engine
 * take_message: rendezvous sends under FI_OXMR_SHM_SHARE_MIN are served
 * after the control messages behind them) still complete in the order
 * sent, each in its own buffer. The receiver posts first, then does not
 * poll until all six sit in its queue. */
/*
 * Messages of `sizes` (each in its own `slot` of the buffers) posted before
 * the receiver polls complete in order with intact data. Kept copies (RTS
 * under FI_OXMR_SHM_SHARE_MIN, served after the control messages) and
 * shared copies left open while the next one starts must not let a later
 * message overtake an earlier one.
 */
static void in_order(struct node *n, bool ps, const size_t *sizes, int count, size_t slot)
{
	bool snd = n->parent == ps;
	struct comp c;

	if (!snd) {
		for (int i = 0; i < count; i++) {
			memset(n->rx + i * slot, POISON, slot);
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx + i * slot, slot,
				     n->rxd, FI_ADDR_UNSPEC, CTX(40 + i)),
			     "recv %d", i);
		}
	}
	SYNC(n);
	if (snd) {
		for (int i = 0; i < count; i++) {
			fill(n->tx + i * slot, sizes[i], 6000 + i + ps);
			POST(&n->e1,
			     fi_send(n->e1.ep, n->tx + i * slot, sizes[i],
				     n->txd, n->peer, CTX(60 + i)),
			     "send %d", i);
		}
	}
	SYNC(n);
	if (snd) {
		for (int i = 0; i < count; i++)
			if (!next_comp(&n->e1, &c, TMO_MS) || c.err)
				EXPECT(false, "send completion %d of %d: none or an error", i, count);
	} else {
		for (int i = 0; i < count; i++) {
			if (!EXPECT_OK(&n->e1, CTX(40 + i), FI_RECV | FI_MSG, &c,
				       "message %d (%zu B)", i, sizes[i]))
				break;
			EXPECT(c.e.len == sizes[i], "message %d: len: expected %zu, got %zu",
			       i, sizes[i], c.e.len);
			EXPECT_PAT(n->rx + i * slot, sizes[i], 6000 + i + ps,
				   "message %d", i);
		}
	}
	SYNC(n);
	EXPECT_NONE(&n->e1, 0, "after the %d messages", count);
}

static void t_kept(struct node *n, bool ps)
{
	static const size_t kept[] = { 60000, 100, 60000, 7, 30000, 9 };
	static const size_t shared[] = { 100000, 9, 200000, 300000, 70000, 5, 131072, 65536, 1 };
	/* docs/wire-shm.md "Paired receives": pairs of equal even sizes from one
	 * peer; 65537 is odd (never paired), 9 is eager (ends a pair). */
	static const size_t paired[] = { 65536, 65536, 65536, 100000, 100000, 65537,
					 65537, 9, 131072, 131072, 131072, 200000,
					 70000, 70000, 65536 };

	OXT_GROUP(gname("2. RTS, eager, RTS, eager, RTS, eager queued before the receiver polls: received in order, %s",
			dir(ps)));
	in_order(n, ps, kept, 6, 64 * KiB);
	OXT_GROUP(gname("2. shared copies (64-300 KiB) between eager messages, queued before the receiver polls: "
			"received in order, %s",
			dir(ps)));
	in_order(n, ps, shared, 9, 512 * KiB);
	OXT_GROUP(gname("2. paired receives (equal sizes 64-200 KiB in a row, odd sizes and eager messages between), "
			"queued before the receiver polls: received in order, %s",
			dir(ps)));
	in_order(n, ps, paired, 15, 256 * KiB);
}

/* The parent receives from the child's second endpoint. */
static void t_source(struct node *n, const struct hello *peer)
{
	static const size_t sizes[] = { 64, 20000 };
	struct comp c;

	OXT_GROUP("2. FI_SOURCE: src is FI_ADDR_NOTAVAIL for a sender not in the AV, its fi_addr once inserted");
	for (int round = 0; round < 2; round++) {
		if (round == 1 && n->parent) {
			n->peer2 = av_insert(&n->e1, peer->name2);
			EXPECT(n->peer2 != n->peer,
			       "the second endpoint got the first one's fi_addr %llu",
			       (unsigned long long)n->peer);
		}
		for (size_t k = 0; k < 2; k++) {
			size_t size = sizes[k];
			uint64_t seed = 6000 + size + round;

			if (n->parent) {
				memset(n->rx, POISON, size);
				POST(&n->e1,
				     fi_recv(n->e1.ep, n->rx, 32 * KiB, n->rxd,
					     FI_ADDR_UNSPEC, CTX(40)),
				     "recv");
			}
			SYNC(n);
			if (n->parent) {
				fi_addr_t want = round ? n->peer2 : FI_ADDR_NOTAVAIL;

				if (EXPECT_OK(&n->e1, CTX(40), FI_RECV | FI_MSG,
					      &c, "recv of %zu B from the child's second endpoint",
					      size)) {
					EXPECT(c.src == want,
					       "%zu B from a sender %s the AV: fi_cq_readfrom src: expected %llu, got %llu",
					       size, round ? "in" : "not in",
					       (unsigned long long)want,
					       (unsigned long long)c.src);
					EXPECT_PAT(n->rx, size, seed,
						   "from the second endpoint");
				}
			} else {
				fill(n->tx, size, seed);
				POST(&n->e2,
				     fi_send(n->e2.ep, n->tx, size, n->txd,
					     n->peer2, CTX(41)),
				     "send from ep2");
				EXPECT_OK(&n->e2, CTX(41), FI_SEND | FI_MSG, &c,
					  "send of %zu B from ep2", size);
			}
			SYNC(n);
		}
	}
}

/* ------------------------------------------------------ 3. tagged */

/* The sender sends `count` tagged messages; the receiver has posted. */
struct tmsg {
	uint64_t tag;
	size_t size;
	bool tagged;
	uint64_t seed;
};

static void tsend_all(struct node *n, const struct tmsg *m, int count)
{
	struct comp c;

	for (int i = 0; i < count; i++) {
		uint8_t *b = n->tx + (size_t)i * 32 * KiB;

		fill(b, m[i].size, m[i].seed);
		if (m[i].tagged)
			POST(&n->e1,
			     fi_tsend(n->e1.ep, b, m[i].size, n->txd, n->peer,
				      m[i].tag, CTX(50 + i)),
			     "tsend tag 0x%llx", (unsigned long long)m[i].tag);
		else
			POST(&n->e1,
			     fi_send(n->e1.ep, b, m[i].size, n->txd, n->peer,
				     CTX(50 + i)),
			     "send");
		/* one at a time: each lands in the queue in this order */
		EXPECT_OK(&n->e1, CTX(50 + i),
			  FI_SEND | (m[i].tagged ? FI_TAGGED : FI_MSG), &c,
			  "send %d (tag 0x%llx)", i,
			  (unsigned long long)m[i].tag);
	}
}

/* The receiver expects completion of ctx with message m in buffer b. */
static void trecv_expect(struct node *n, int ctx, uint8_t *b,
			 const struct tmsg *m, const char *what)
{
	struct comp c;

	if (!EXPECT_OK(&n->e1, CTX(ctx),
		       FI_RECV | (m->tagged ? FI_TAGGED : FI_MSG), &c, "%s",
		       what))
		return;
	if (m->tagged)
		EXPECT(c.e.tag == m->tag, "%s: tag: expected 0x%llx, got 0x%llx",
		       what, (unsigned long long)m->tag,
		       (unsigned long long)c.e.tag);
	EXPECT(c.e.len == m->size, "%s: len: expected %zu, got %zu", what,
	       m->size, c.e.len);
	EXPECT_PAT(b, m->size, m->seed, "%s", what);
}

static void t_tags(struct node *n, bool ps)
{
	bool snd = n->parent == ps;
	uint8_t *r0 = n->rx, *r1 = n->rx + 64 * KiB;
	struct comp c;

	OXT_GROUP(gname("3. tagged matching: tags, ignore masks, tagged/untagged kept apart, unexpected tagged, tsenddata, %s",
		      dir(ps)));

	/* tags A and B: B is sent first and lands in B's buffer */
	{
		struct tmsg m[2] = { { 0x2222, 200, true, 7001 + ps },
				     { 0x1111, 20000, true, 7002 + ps } };
		if (!snd) {
			POST(&n->e1, fi_trecv(n->e1.ep, r0, 32 * KiB, n->rxd,
					      FI_ADDR_UNSPEC, 0x1111, 0, CTX(60)),
			     "trecv A");
			POST(&n->e1, fi_trecv(n->e1.ep, r1, 32 * KiB, n->rxd,
					      FI_ADDR_UNSPEC, 0x2222, 0, CTX(61)),
			     "trecv B");
		}
		SYNC(n);
		if (snd) {
			tsend_all(n, m, 2);
		} else {
			trecv_expect(n, 61, r1, &m[0], "tag B into B's receive");
			trecv_expect(n, 60, r0, &m[1], "tag A into A's receive");
		}
		SYNC(n);
	}

	/* ignore mask: 0xAB00/0xFF takes 0xAB42 but not 0xCD42 */
	{
		struct tmsg m[2] = { { 0xCD42, 100, true, 7003 + ps },
				     { 0xAB42, 100, true, 7004 + ps } };
		if (!snd) {
			POST(&n->e1, fi_trecv(n->e1.ep, r0, 256, n->rxd,
					      FI_ADDR_UNSPEC, 0xAB00, 0xFF, CTX(62)),
			     "trecv 0xAB00/0xFF");
			POST(&n->e1, fi_trecv(n->e1.ep, r1, 256, n->rxd,
					      FI_ADDR_UNSPEC, 0, ~0ULL, CTX(63)),
			     "trecv any tag");
		}
		SYNC(n);
		if (snd) {
			tsend_all(n, m, 2);
		} else {
			trecv_expect(n, 63, r1, &m[0],
				     "tag 0xCD42 skips 0xAB00/0xFF, lands in the match-all receive");
			trecv_expect(n, 62, r0, &m[1],
				     "tag 0xAB42 matches 0xAB00 ignoring 0xFF");
		}
		SYNC(n);
	}

	/* tagged and untagged are kept apart */
	{
		struct tmsg m[2] = { { 7, 50, true, 7005 + ps },
				     { 0, 60, false, 7006 + ps } };
		if (!snd) {
			POST(&n->e1, fi_recv(n->e1.ep, r0, 256, n->rxd,
					     FI_ADDR_UNSPEC, CTX(64)),
			     "recv");
			POST(&n->e1, fi_trecv(n->e1.ep, r1, 256, n->rxd,
					      FI_ADDR_UNSPEC, 7, 0, CTX(65)),
			     "trecv 7");
		}
		SYNC(n);
		if (snd) {
			tsend_all(n, m, 2);
		} else {
			trecv_expect(n, 65, r1, &m[0],
				     "tagged message skips the earlier untagged receive");
			trecv_expect(n, 64, r0, &m[1],
				     "untagged message into the untagged receive");
		}
		SYNC(n);
	}

	/* unexpected tagged messages are matched by tag, not arrival */
	{
		struct tmsg m[2] = { { 0x55, 30, true, 7007 + ps },
				     { 0x66, 40, true, 7008 + ps } };
		if (snd)
			tsend_all(n, m, 2);
		SYNC(n);
		if (!snd) {
			EXPECT_NONE(&n->e1, 30, "nothing posted yet");
			POST(&n->e1, fi_trecv(n->e1.ep, r0, 256, n->rxd,
					      FI_ADDR_UNSPEC, 0x66, 0, CTX(66)),
			     "trecv 0x66");
			trecv_expect(n, 66, r0, &m[1],
				     "unexpected tag 0x66 (sent second)");
			POST(&n->e1, fi_trecv(n->e1.ep, r1, 256, n->rxd,
					      FI_ADDR_UNSPEC, 0x55, 0, CTX(67)),
			     "trecv 0x55");
			trecv_expect(n, 67, r1, &m[0],
				     "unexpected tag 0x55 (sent first)");
		}
		SYNC(n);
	}

	/* fi_tsenddata */
	{
		uint64_t data = 0xDA7A0000ULL + ps;

		if (!snd)
			POST(&n->e1, fi_trecv(n->e1.ep, r0, 256, n->rxd,
					      FI_ADDR_UNSPEC, 0x77, 0, CTX(68)),
			     "trecv 0x77");
		SYNC(n);
		if (snd) {
			fill(n->tx, 90, 7009 + ps);
			POST(&n->e1,
			     fi_tsenddata(n->e1.ep, n->tx, 90, n->txd, data,
					  n->peer, 0x77, CTX(69)),
			     "tsenddata");
			EXPECT_OK(&n->e1, CTX(69), FI_SEND | FI_TAGGED, &c,
				  "tsenddata");
		} else if (EXPECT_OK(&n->e1, CTX(68),
				     FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA,
				     &c, "trecv of tsenddata")) {
			EXPECT_EQ(c.e.tag, 0x77);
			EXPECT_EQ(c.e.data, data);
			EXPECT_PAT(r0, 90, 7009 + ps, "tsenddata");
		}
		SYNC(n);
	}
	EXPECT_NONE(&n->e1, 0, "after the tagged tests");
}

/* Child: send `size` bytes of `seed` from e1 or e2 (tagged or not). */
static void child_send_from(struct node *n, bool from2, bool tagged,
			    uint64_t tag, uint64_t seed, int ctx)
{
	struct ept *p = from2 ? &n->e2 : &n->e1;
	fi_addr_t to = from2 ? n->peer2 : n->peer;
	struct comp c;

	fill(n->tx, 100, seed);
	if (tagged)
		POST(p, fi_tsend(p->ep, n->tx, 100, n->txd, to, tag, CTX(ctx)),
		     "tsend from %s", p->label);
	else
		POST(p, fi_send(p->ep, n->tx, 100, n->txd, to, CTX(ctx)),
		     "send from %s", p->label);
	EXPECT_OK(p, CTX(ctx), FI_SEND | (tagged ? FI_TAGGED : FI_MSG), &c,
		  "send from %s", p->label);
}

static void parent_expect_from(struct node *n, int ctx, uint8_t *b,
			       bool tagged, fi_addr_t src, uint64_t seed,
			       const char *what)
{
	struct comp c;

	if (!EXPECT_OK(&n->e1, CTX(ctx),
		       FI_RECV | (tagged ? FI_TAGGED : FI_MSG), &c, "%s", what))
		return;
	EXPECT(c.src == src, "%s: src: expected %llu, got %llu", what,
	       (unsigned long long)src, (unsigned long long)c.src);
	EXPECT_PAT(b, 100, seed, "%s", what);
}

static void t_directed(struct node *n)
{
	uint8_t *r0 = n->rx, *r1 = n->rx + 64 * KiB;

	OXT_GROUP("3. FI_DIRECTED_RECV: a receive for one peer takes only that peer's messages (tagged and untagged)");

	/* two directed receives, same tag; the second peer sends first */
	if (n->parent) {
		POST(&n->e1, fi_trecv(n->e1.ep, r0, 256, n->rxd, n->peer, 0x99, 0,
				      CTX(70)),
		     "trecv from ep1");
		POST(&n->e1, fi_trecv(n->e1.ep, r1, 256, n->rxd, n->peer2, 0x99,
				      0, CTX(71)),
		     "trecv from ep2");
	}
	SYNC(n);
	if (!n->parent)
		child_send_from(n, true, true, 0x99, 8002, 72);
	if (over_tcp()) {
		/* (Two endpoints' messages travel on two connections, with no
		 * order between them: ep2's is taken before ep1's is sent.) */
		if (n->parent)
			parent_expect_from(n, 71, r1, true, n->peer2, 8002,
					   "ep2's message into the receive directed at ep2");
		SYNC(n);
	}
	if (!n->parent)
		child_send_from(n, false, true, 0x99, 8001, 73);
	SYNC(n);
	if (n->parent) {
		if (!over_tcp())
			parent_expect_from(n, 71, r1, true, n->peer2, 8002,
					   "ep2's message into the receive directed at ep2");
		parent_expect_from(n, 70, r0, true, n->peer, 8001,
				   "ep1's message into the receive directed at ep1");
	}
	SYNC(n);

	/* a directed receive waits while another peer's message arrives */
	if (n->parent)
		POST(&n->e1, fi_trecv(n->e1.ep, r0, 256, n->rxd, n->peer, 0x9A, 0,
				      CTX(74)),
		     "trecv from ep1");
	SYNC(n);
	if (!n->parent)
		child_send_from(n, true, true, 0x9A, 8003, 75);
	SYNC(n);
	if (n->parent)
		EXPECT_NONE(&n->e1, 200,
			    "a tagged receive directed at the child's ep1 after ep2 sent");
	SYNC(n);
	if (!n->parent)
		child_send_from(n, false, true, 0x9A, 8004, 76);
	SYNC(n);
	if (n->parent) {
		parent_expect_from(n, 74, r0, true, n->peer, 8004,
				   "the directed receive gets ep1's message");
		POST(&n->e1, fi_trecv(n->e1.ep, r1, 256, n->rxd, FI_ADDR_UNSPEC,
				      0x9A, 0, CTX(77)),
		     "trecv from anyone");
		parent_expect_from(n, 77, r1, true, n->peer2, 8003,
				   "an undirected receive gets ep2's waiting message");
	}
	SYNC(n);

	/* untagged: ep1 sends first; the receive directed at ep2 waits for it */
	if (n->parent)
		POST(&n->e1, fi_recv(n->e1.ep, r0, 256, n->rxd, n->peer2, CTX(78)),
		     "recv from ep2");
	SYNC(n);
	if (!n->parent) {
		child_send_from(n, false, false, 0, 8005, 79);
		child_send_from(n, true, false, 0, 8006, 80);
	}
	SYNC(n);
	if (n->parent) {
		parent_expect_from(n, 78, r0, false, n->peer2, 8006,
				   "an untagged receive directed at ep2 skips ep1's earlier message");
		POST(&n->e1, fi_recv(n->e1.ep, r1, 256, n->rxd, FI_ADDR_UNSPEC,
				     CTX(81)),
		     "recv from anyone");
		parent_expect_from(n, 81, r1, false, n->peer, 8005,
				   "ep1's message, waiting unexpected");
	}
	SYNC(n);
	if (n->parent)
		EXPECT_NONE(&n->e1, 0, "after the directed receives");
	else
		EXPECT_NONE(&n->e2, 0, "ep2 after the directed receives");
}

/* ------------------------------------------------- 4. truncation */

static void t_trunc(struct node *n, bool ps)
{
	static const struct {
		size_t size, room;
		bool tagged;
	} cases[] = {
		{ 100, 40, false },
		{ 100, 40, true },
		{ MiB, 512 * KiB, false },
		{ 20000, 100, true },
		{ 8081, 8080, false },
	};
	bool snd = n->parent == ps;
	struct comp c;

	OXT_GROUP(gname("4. truncation: FI_ETRUNC with olen at the receiver, first bytes delivered, success at the sender (eager and RTS), %s",
		      dir(ps)));
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		size_t size = cases[k].size, room = cases[k].room;
		bool tg = cases[k].tagged;
		uint64_t seed = 9000 + k * 2 + ps;
		const char *what = fmt("%zu B %s into a %zu B receive", size,
				       tg ? "tagged" : "untagged", room);
		uint64_t fl = tg ? FI_TAGGED : FI_MSG;

		if (!snd) {
			memset(n->rx, POISON, room + 64);
			if (tg)
				POST(&n->e1,
				     fi_trecv(n->e1.ep, n->rx, room, n->rxd,
					      FI_ADDR_UNSPEC, 0x44, 0, CTX(90)),
				     "%s", what);
			else
				POST(&n->e1,
				     fi_recv(n->e1.ep, n->rx, room, n->rxd,
					     FI_ADDR_UNSPEC, CTX(90)),
				     "%s", what);
		} else {
			fill(n->tx, size, seed);
		}
		SYNC(n);
		if (snd) {
			if (tg)
				POST(&n->e1,
				     fi_tsend(n->e1.ep, n->tx, size, n->txd,
					      n->peer, 0x44, CTX(91)),
				     "%s", what);
			else
				POST(&n->e1,
				     fi_send(n->e1.ep, n->tx, size, n->txd,
					     n->peer, CTX(91)),
				     "%s", what);
			EXPECT_OK(&n->e1, CTX(91), FI_SEND | fl, &c,
				  "sender of %s", what);
		} else if (EXPECT_ERR(&n->e1, CTX(90), FI_ETRUNC, FI_RECV | fl,
				      &c, "receiver of %s", what)) {
			EXPECT(c.ee.olen == size - room,
			       "%s: olen: expected %zu, got %zu", what,
			       size - room, c.ee.olen);
			EXPECT(c.ee.len == room,
			       "%s: len: expected %zu (the bytes delivered), got %zu",
			       what, room, c.ee.len);
			if (tg)
				EXPECT_EQ(c.ee.tag, 0x44);
			EXPECT_PAT(n->rx, room, seed, "%s: the first bytes", what);
			EXPECT_BYTES(n->rx + room, 64, POISON,
				     "%s: bytes past the receive buffer", what);
		}
		SYNC(n);
	}
	/* the endpoint still works */
	if (!snd)
		POST(&n->e1, fi_recv(n->e1.ep, n->rx, 64, n->rxd, FI_ADDR_UNSPEC,
				     CTX(92)),
		     "recv after truncation");
	SYNC(n);
	if (snd) {
		fill(n->tx, 64, 9100 + ps);
		POST(&n->e1, fi_send(n->e1.ep, n->tx, 64, n->txd, n->peer, CTX(93)),
		     "send after truncation");
		EXPECT_OK(&n->e1, CTX(93), FI_SEND | FI_MSG, &c,
			  "send after truncation");
	} else if (EXPECT_OK(&n->e1, CTX(92), FI_RECV | FI_MSG, &c,
			     "recv after truncation")) {
		EXPECT_PAT(n->rx, 64, 9100 + ps, "message after truncation");
	}
	SYNC(n);
}

/* ------------------------------------------------------------ 5/6. RMA */

enum { R_MAIN, R_ERR, R_RO, R_WO, R_CLOSED, R_COUNT };

static const struct {
	const char *name;
	size_t len;
	uint64_t access;
} rdef[R_COUNT] = {
	[R_MAIN] = { "1 MiB FI_REMOTE_READ|FI_REMOTE_WRITE", MiB,
		     FI_REMOTE_READ | FI_REMOTE_WRITE },
	[R_ERR] = { "64 KiB FI_REMOTE_READ|FI_REMOTE_WRITE", 64 * KiB,
		    FI_REMOTE_READ | FI_REMOTE_WRITE },
	[R_RO] = { "64 KiB FI_REMOTE_READ only", 64 * KiB, FI_REMOTE_READ },
	[R_WO] = { "64 KiB FI_REMOTE_WRITE only", 64 * KiB, FI_REMOTE_WRITE },
	[R_CLOSED] = { "64 KiB, closed before use", 64 * KiB,
		       FI_REMOTE_READ | FI_REMOTE_WRITE },
};

/* The child's side of a region. */
struct treg {
	uint8_t *map, *buf;
	struct fid_mr *mr;
};

/* What the parent knows of a region. */
struct rinfo {
	uint64_t addr, key, len;
};

static void reply(struct node *n, uint32_t op, bool ok, const char *text)
{
	struct cmsg m = { .op = OP_REPLY, .id = op, .a = ok };

	snprintf(m.text, sizeof m.text, "%s", text ? text : "");
	ctl_put(n, &m);
}

/* Child: serve RMA commands, progressing its endpoint all the while. */
static void child_serve(struct node *n, struct treg *r)
{
	double end = oxt_now_ms() + 40000;
	struct cmsg m;
	struct comp c;

	for (;;) {
		REQUIRE(oxt_now_ms() < end, "the parent's RMA tests did not end");
		progress(&n->e1);
		if (!ctl_get_tmo(n, &m, 1))
			continue;
		/* messages sent before the command are in our queue now */
		progress(&n->e1);
		switch (m.op) {
		case CMD_VERIFY: {
			long d = pat_diff(r[m.a].buf + m.b, m.c, m.d);
			reply(n, m.op, d < 0,
			      d < 0 ? "" :
				      fmt("%s at offset %llu, %llu B: byte %ld: expected 0x%02x, got 0x%02x",
					  rdef[m.a].name, (unsigned long long)m.b,
					  (unsigned long long)m.c, d,
					  pat(m.d, (size_t)d),
					  r[m.a].buf[m.b + (size_t)d]));
			break;
		}
		case CMD_FILL:
			fill(r[m.a].buf + m.b, m.c, m.d);
			reply(n, m.op, true, "");
			break;
		case CMD_INTACT: {
			long g1 = bytes_diff(r[m.a].map, GUARD, GUARD_BYTE);
			long g2 = bytes_diff(r[m.a].buf + rdef[m.a].len, GUARD,
					     GUARD_BYTE);
			long b = m.b ? bytes_diff(r[m.a].buf, rdef[m.a].len,
						  FILL_BYTE) :
				       -1;
			if (g1 >= 0)
				reply(n, m.op, false,
				      fmt("%s: the guard before the region was written (byte %ld of %d)",
					  rdef[m.a].name, g1, GUARD));
			else if (g2 >= 0)
				reply(n, m.op, false,
				      fmt("%s: the guard after the region was written (byte %ld of %d)",
					  rdef[m.a].name, g2, GUARD));
			else if (b >= 0)
				reply(n, m.op, false,
				      fmt("%s: the region was written by a refused access (byte %ld)",
					  rdef[m.a].name, b));
			else
				reply(n, m.op, true, "");
			break;
		}
		case CMD_CQDATA:
			if (!next_comp(&n->e1, &c, TMO_MS))
				reply(n, m.op, false,
				      fmt("no completion at the target for the remote CQ data 0x%llx",
					  (unsigned long long)m.a));
			else if (c.err)
				reply(n, m.op, false,
				      fmt("target: expected the remote CQ data completion, got an %s",
					  describe(&c)));
			else if (c.e.flags != (FI_RMA | FI_REMOTE_WRITE |
					       FI_REMOTE_CQ_DATA))
				reply(n, m.op, false,
				      fmt("target: remote CQ data completion flags: expected 0x%llx (FI_RMA|FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA), got 0x%llx",
					  (unsigned long long)(FI_RMA |
							       FI_REMOTE_WRITE |
							       FI_REMOTE_CQ_DATA),
					  (unsigned long long)c.e.flags));
			else if (c.e.data != m.a)
				reply(n, m.op, false,
				      fmt("target: remote CQ data: expected 0x%llx, got 0x%llx",
					  (unsigned long long)m.a,
					  (unsigned long long)c.e.data));
			else if (c.e.len != m.b)
				reply(n, m.op, false,
				      fmt("target: remote CQ data completion len: expected %llu, got %zu",
					  (unsigned long long)m.b, c.e.len));
			else if (c.src != n->peer)
				reply(n, m.op, false,
				      fmt("target: remote CQ data completion src (fi_cq_readfrom): expected %llu (the initiator), got %llu",
					  (unsigned long long)n->peer,
					  (unsigned long long)c.src));
			else
				reply(n, m.op, true, "");
			break;
		case CMD_QUIET:
			if (next_comp(&n->e1, &c, 50))
				reply(n, m.op, false,
				      fmt("target: expected no completion, got a %s",
					  describe(&c)));
			else
				reply(n, m.op, true, "");
			break;
		case CMD_CLOSE: {
			int rc = fi_close(&r[m.a].mr->fid);
			r[m.a].mr = NULL;
			reply(n, m.op, rc == 0,
			      fmt("fi_close(mr) of %s: %d", rdef[m.a].name, rc));
			break;
		}
		case CMD_HOLD:
			reply(n, m.op, true, "");
			usleep((useconds_t)m.a * 1000);
			break;
		case CMD_END:
			reply(n, m.op, true, "");
			return;
		default:
			REQUIRE(false, "unknown command %u from the parent", m.op);
		}
	}
}

static struct cmsg cmd_at(const char *file, int line, struct node *n,
			  uint32_t op, uint64_t a, uint64_t b, uint64_t c,
			  uint64_t d)
{
	struct cmsg m = { .op = op, .a = a, .b = b, .c = c, .d = d };

	ctl_put(n, &m);
	ctl_get(n, &m);
	REQUIRE(m.op == OP_REPLY && m.id == op,
		"expected the child's reply to command %u, got op %u id %u", op,
		m.op, m.id);
	if (!m.a)
		oxt_fail(file, line, "%s", m.text);
	return m;
}
#define CMD(n, op, a, b, c, d) cmd_at(__FILE__, __LINE__, (n), (op), (a), (b), (c), (d))

static void child_regions(struct node *n, struct treg *r)
{
	struct cmsg m = { .op = OP_DATA };
	struct rinfo ri[R_COUNT];

	for (int i = 0; i < R_COUNT; i++) {
		size_t len = rdef[i].len;

		r[i].map = mmap(NULL, len + 2 * GUARD, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		REQUIRE(r[i].map != MAP_FAILED, "mmap: %s", strerror(errno));
		r[i].buf = r[i].map + GUARD;
		memset(r[i].map, GUARD_BYTE, len + 2 * GUARD);
		memset(r[i].buf, FILL_BYTE, len);
		REQUIRE_RC(fi_mr_reg(n->domain, r[i].buf, len, rdef[i].access,
				     0, 0, 0, &r[i].mr, NULL),
			   0);
		ri[i].addr = (uint64_t)(uintptr_t)r[i].buf;
		ri[i].key = fi_mr_key(r[i].mr);
		ri[i].len = len;
		REQUIRE(ri[i].key != FI_KEY_NOTAVAIL, "fi_mr_key: FI_KEY_NOTAVAIL");
	}
	_Static_assert(sizeof ri <= sizeof m.text, "region table fits");
	memcpy(m.text, ri, sizeof ri);
	ctl_put(n, &m);
}

static void child_regions_close(struct treg *r)
{
	for (int i = 0; i < R_COUNT; i++) {
		if (r[i].mr)
			EXPECT_RC(fi_close(&r[i].mr->fid), 0);
		munmap(r[i].map, rdef[i].len + 2 * GUARD);
	}
}

static ssize_t rma_post(struct node *n, bool read, size_t len, uint64_t addr,
			uint64_t key, void *ctx)
{
	if (read)
		return fi_read(n->e1.ep, n->rx, len, n->rxd, n->peer, addr, key,
			       ctx);
	return fi_write(n->e1.ep, n->tx, len, n->txd, n->peer, addr, key, ctx);
}

static void t_rma(struct node *n, const struct rinfo *ri)
{
	/* 100000 B: a lone shared copy of two chunks, split at a page
	 * boundary of the target's buffer, which starts inside a page. */
	static const size_t sizes[] = { 8, 8080, 8081, 100000, MiB };
	const size_t nsizes = sizeof sizes / sizeof sizes[0];
	const struct rinfo *m = &ri[R_MAIN];
	struct comp c;

	OXT_GROUP("5. RMA: fi_write and fi_read of 8 B .. 1 MiB, fi_writedata (target CQ data), fi_inject_write, fi_readmsg with write-only flags");
	for (size_t k = 0; k < nsizes; k++) {
		size_t size = sizes[k], off = size == MiB ? 0 : 4096 + 13;
		uint64_t seed = 11000 + k;

		fill(n->tx, size, seed);
		POST(&n->e1, rma_post(n, false, size, m->addr + off, m->key, CTX(100)),
		     "fi_write of %zu B", size);
		if (EXPECT_OK(&n->e1, CTX(100), FI_RMA | FI_WRITE, &c,
			      "fi_write of %zu B", size)) {
			CMD(n, CMD_VERIFY, R_MAIN, off, size, seed);
			EXPECT_PAT(n->tx, size, seed,
				   "fi_write of %zu B: the source afterwards", size);
		}
	}
	CMD(n, CMD_INTACT, R_MAIN, 0, 0, 0);
	for (size_t k = 0; k < nsizes; k++) {
		size_t size = sizes[k], off = size == MiB ? 0 : 2 * 4096 + 5;
		uint64_t seed = 12000 + k;

		CMD(n, CMD_FILL, R_MAIN, off, size, seed);
		memset(n->rx, POISON, size + 64);
		POST(&n->e1, rma_post(n, true, size, m->addr + off, m->key, CTX(101)),
		     "fi_read of %zu B", size);
		if (EXPECT_OK(&n->e1, CTX(101), FI_RMA | FI_READ, &c,
			      "fi_read of %zu B", size)) {
			EXPECT_PAT(n->rx, size, seed, "fi_read of %zu B", size);
			EXPECT_BYTES(n->rx + size, 64, POISON,
				     "fi_read of %zu B: bytes past the buffer", size);
		}
	}
	for (size_t size = 64; size <= 20000; size += 20000 - 64) {
		uint64_t data = 0xDA7A5000ULL + size, seed = 13000 + size;

		fill(n->tx, size, seed);
		POST(&n->e1,
		     fi_writedata(n->e1.ep, n->tx, size, n->txd, data, n->peer,
				  m->addr + 512, m->key, CTX(102)),
		     "fi_writedata of %zu B", size);
		if (EXPECT_OK(&n->e1, CTX(102), FI_RMA | FI_WRITE, &c,
			      "fi_writedata of %zu B", size)) {
			CMD(n, CMD_CQDATA, data, size, 0, 0);
			CMD(n, CMD_VERIFY, R_MAIN, 512, size, seed);
		}
	}
	for (size_t size = 8; size <= 4096; size *= 512) {
		uint64_t seed = 14000 + size;
		char rc[160];
		ssize_t r;

		fill(n->tx, size, seed);
		do
			r = fi_inject_write(n->e1.ep, n->tx, size, n->peer,
					    m->addr + 8192, m->key);
		while (r == -FI_EAGAIN);
		EXPECT(r == 0, "fi_inject_write of %zu B: expected 0, got %s",
		       size, oxt_rcstr(r, rc, sizeof rc));
		memset(n->tx, 0, size); /* ours again at return */
		CMD(n, CMD_VERIFY, R_MAIN, 8192, size, seed);
	}
	EXPECT_NONE(&n->e1, 50, "fi_inject_write made a completion at the initiator");
	/* fi_readmsg with FI_INJECT and FI_REMOTE_CQ_DATA: both apply to
	 * writes only (fi_rma(3)), so the read works as a plain one and raises
	 * nothing at the target (CMD_QUIET below) */
	{
		struct iovec iov = { .iov_base = n->rx, .iov_len = 64 };
		struct fi_rma_iov rma = { .addr = m->addr + 3 * 4096, .len = 64, .key = m->key };
		struct fi_msg_rma msg = {
			.msg_iov = &iov, .desc = &n->rxd, .iov_count = 1, .addr = n->peer,
			.rma_iov = &rma, .rma_iov_count = 1, .context = CTX(103), .data = 0xDA7A,
		};

		CMD(n, CMD_FILL, R_MAIN, 3 * 4096, 64, 14500);
		memset(n->rx, POISON, 128);
		POST(&n->e1, fi_readmsg(n->e1.ep, &msg, FI_INJECT | FI_REMOTE_CQ_DATA | FI_COMPLETION),
		     "fi_readmsg with FI_INJECT | FI_REMOTE_CQ_DATA");
		if (EXPECT_OK(&n->e1, CTX(103), FI_RMA | FI_READ, &c,
			      "fi_readmsg with FI_INJECT | FI_REMOTE_CQ_DATA"))
			EXPECT_PAT(n->rx, 64, 14500, "fi_readmsg with FI_INJECT | FI_REMOTE_CQ_DATA");
	}
	CMD(n, CMD_INTACT, R_MAIN, 0, 0, 0);
	CMD(n, CMD_QUIET, 0, 0, 0, 0);
}

static void good_write(struct node *n, const struct rinfo *ri, const char *after)
{
	struct comp c;

	fill(n->tx, 8, 15000);
	POST(&n->e1, rma_post(n, false, 8, ri[R_MAIN].addr, ri[R_MAIN].key, CTX(111)),
	     "good fi_write after %s", after);
	if (EXPECT_OK(&n->e1, CTX(111), FI_RMA | FI_WRITE, &c,
		      "a good fi_write after %s", after))
		CMD(n, CMD_VERIFY, R_MAIN, 0, 8, 15000);
}

static void t_rma_err(struct node *n, const struct rinfo *ri)
{
	enum { REL, ABS };
	static const struct {
		const char *what;
		int reg;
		bool keyplus;
		int how;
		int64_t off; /* REL: from the region's start; negative: from its end */
		uint64_t abs;
		size_t len;
		bool read;
	} cases[] = {
		{ "wrong key (key + 1), write 8 B", R_ERR, true, REL, 0, 0, 8, false },
		{ "wrong key (key + 1), write 20000 B", R_ERR, true, REL, 0, 0, 20000, false },
		{ "wrong key (key + 1), read 8 B", R_ERR, true, REL, 0, 0, 8, true },
		{ "wrong key (key + 1), read 20000 B", R_ERR, true, REL, 0, 0, 20000, true },
		{ "one byte before the region, write 8 B", R_ERR, false, REL, -1, 0, 8, false },
		{ "one byte before the region, write 20000 B", R_ERR, false, REL, -1, 0, 20000, false },
		{ "one byte before the region, read 8 B", R_ERR, false, REL, -1, 0, 8, true },
		{ "past the end (addr = base + len - 4, len 8), write", R_ERR, false, ABS, 0, 0, 8, false },
		{ "past the end (4 B over), write 20000 B", R_ERR, false, ABS, 0, 1, 20000, false },
		{ "past the end (addr = base + len - 4, len 8), read", R_ERR, false, ABS, 0, 0, 8, true },
		{ "overflowing address (UINT64_MAX - 3, len 8), write", R_ERR, false, ABS, 0, 2, 8, false },
		{ "overflowing address (UINT64_MAX - 9999, len 20000), write", R_ERR, false, ABS, 0, 3, 20000, false },
		{ "overflowing address (UINT64_MAX - 3, len 8), read", R_ERR, false, ABS, 0, 2, 8, true },
		{ "FI_REMOTE_READ-only region, write 8 B", R_RO, false, REL, 0, 0, 8, false },
		{ "FI_REMOTE_READ-only region, write 20000 B", R_RO, false, REL, 0, 0, 20000, false },
		{ "FI_REMOTE_WRITE-only region, read 8 B", R_WO, false, REL, 0, 0, 8, true },
		{ "FI_REMOTE_WRITE-only region, read 20000 B", R_WO, false, REL, 0, 0, 20000, true },
		{ "closed MR's key, write 8 B", R_CLOSED, false, REL, 0, 0, 8, false },
		{ "closed MR's key, write 20000 B", R_CLOSED, false, REL, 0, 0, 20000, false },
		{ "closed MR's key, read 8 B", R_CLOSED, false, REL, 0, 0, 8, true },
	};
	bool printed = false, closed = false;
	struct comp c;

	/* Every case answers FI_EACCES: a refused remote access has one code
	 * whatever was wrong (a wrong address answering otherwise than a wrong
	 * key would let a peer search for each apart); the target's log names
	 * the reason. */
	OXT_GROUP("6. refused RMA (key, bounds, overflow, rights, closed key): error completion FI_EACCES whatever was wrong, guards untouched, endpoint keeps working");
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const struct rinfo *r = &ri[cases[k].reg];
		size_t len = cases[k].len;
		uint64_t key = r->key + (cases[k].keyplus ? 1 : 0), addr;
		bool rd = cases[k].read;
		const char *what = cases[k].what;

		if (cases[k].reg == R_CLOSED && !closed) {
			CMD(n, CMD_CLOSE, R_CLOSED, 0, 0, 0);
			closed = true;
		}
		if (cases[k].how == REL)
			addr = r->addr + (uint64_t)cases[k].off;
		else if (cases[k].abs == 0)
			addr = r->addr + r->len - 4;
		else if (cases[k].abs == 1)
			addr = r->addr + r->len - (len - 4);
		else if (cases[k].abs == 2)
			addr = UINT64_MAX - 3;
		else
			addr = UINT64_MAX - 9999;
		if (rd)
			memset(n->rx, POISON, len + 64);
		else
			fill(n->tx, len, 16000 + k);
		POST(&n->e1, rma_post(n, rd, len, addr, key, CTX(110)), "%s", what);
		if (EXPECT_ERR(&n->e1, CTX(110), FI_EACCES,
			       FI_RMA | (rd ? FI_READ : FI_WRITE), &c, "%s", what)) {
			if (!printed && c.err) {
				char buf[256];
				const char *s = fi_cq_strerror(n->e1.cq, c.ee.prov_errno,
							       c.ee.err_data, buf,
							       sizeof buf);
				printf("# e.g. %s: err %d, fi_cq_strerror: \"%s\"\n",
				       what, c.ee.err, s ? s : "(null)");
				printed = true;
			}
		}
		if (rd)
			EXPECT_BYTES(n->rx, len + 64, POISON,
				     "%s: the initiator's buffer after a refused read", what);
		CMD(n, CMD_INTACT, cases[k].reg, 1, 0, 0);
		good_write(n, ri, what);
	}

	/* a refused fi_writedata raises nothing at the target */
	{
		const struct rinfo *r = &ri[R_ERR];

		fill(n->tx, 8, 17000);
		POST(&n->e1,
		     fi_writedata(n->e1.ep, n->tx, 8, n->txd, 0xBAD, n->peer,
				  r->addr, r->key + 1, CTX(112)),
		     "fi_writedata with a wrong key");
		EXPECT_ERR(&n->e1, CTX(112), FI_EACCES, FI_RMA | FI_WRITE,
			   &c, "fi_writedata with a wrong key");
		CMD(n, CMD_INTACT, R_ERR, 1, 0, 0);
		CMD(n, CMD_QUIET, 0, 0, 0, 0);
	}
	/* a refused fi_inject_write: no completion on success, but its failure
	 * is an error completion with a NULL context (fi_cq(3): "error
	 * completions are generated for all operations, including those for
	 * which a completion was not requested"); nothing written */
	{
		const struct rinfo *r = &ri[R_ERR];
		char rc[160];
		ssize_t ret;

		fill(n->tx, 8, 17001);
		do
			ret = fi_inject_write(n->e1.ep, n->tx, 8, n->peer,
					      r->addr - 1, r->key);
		while (ret == -FI_EAGAIN);
		EXPECT(ret == 0, "fi_inject_write out of bounds: expected 0 (refused at the target), got %s",
		       oxt_rcstr(ret, rc, sizeof rc));
		EXPECT_ERR(&n->e1, NULL, FI_EACCES, FI_RMA | FI_WRITE, &c,
			   "a refused fi_inject_write");
		CMD(n, CMD_INTACT, R_ERR, 1, 0, 0);
		EXPECT_NONE(&n->e1, 50, "after a refused fi_inject_write's error");
		good_write(n, ri, "a refused fi_inject_write");
	}
	/* positive controls: the rights that were granted work */
	{
		memset(n->rx, POISON, 16);
		POST(&n->e1, rma_post(n, true, 8, ri[R_RO].addr, ri[R_RO].key, CTX(113)),
		     "read of the read-only region");
		if (EXPECT_OK(&n->e1, CTX(113), FI_RMA | FI_READ, &c,
			      "fi_read of the FI_REMOTE_READ-only region"))
			EXPECT_BYTES(n->rx, 8, FILL_BYTE, "fi_read of the read-only region");
		fill(n->tx, 8, 17002);
		POST(&n->e1, rma_post(n, false, 8, ri[R_WO].addr, ri[R_WO].key, CTX(114)),
		     "write of the write-only region");
		if (EXPECT_OK(&n->e1, CTX(114), FI_RMA | FI_WRITE, &c,
			      "fi_write of the FI_REMOTE_WRITE-only region"))
			CMD(n, CMD_VERIFY, R_WO, 0, 8, 17002);
		CMD(n, CMD_INTACT, R_WO, 0, 0, 0);
	}
	CMD(n, CMD_QUIET, 0, 0, 0, 0);
	EXPECT_NONE(&n->e1, 0, "after the RMA errors");
}

/*
 * RMA writes that reach the target while it makes no progress are served
 * together (a run of one peer's writes is copied with one
 * process_vm_readv, FI_OXMR_SHM_WRITE_BATCH): each is still checked alone
 * (a wrong key and a read-only region in the middle are refused, the
 * writes around them land), inline and shared writes end a run, and every
 * write completes exactly once (in any order: comp_order is
 * FI_ORDER_NONE) with its bytes in place.
 */
static void t_rma_queued(struct node *n, const struct rinfo *ri)
{
	static const struct {
		int reg;
		bool badkey, data;
		size_t off, len;
		int err;
		/* Bytes of it a later write of the run leaves in place (from
		 * its start; 0: all of it); `gone`: none. */
		size_t keep;
		bool gone;
	} w[] = {
		{ R_MAIN, false, false, 0, 20000, 0, 0, false },
		{ R_MAIN, false, false, 20000 + 7, 30000, 0, 0, false },
		{ R_MAIN, false, true, 60000, 9000, 0, 0, false },
		{ R_MAIN, false, false, 70000, 50000, 0, 0, false },
		{ R_ERR, true, false, 0, 20000, FI_EACCES, 0, false },
		{ R_MAIN, false, false, 130000, 40000, 0, 0, false },
		{ R_MAIN, false, false, 180000, 100, 0, 0, false },
		{ R_MAIN, false, false, 190000, 60000, 0, 0, false },
		{ R_RO, false, false, 0, 10000, FI_EACCES, 0, false },
		{ R_MAIN, false, false, 260000, 65536, 0, 0, false },
		{ R_MAIN, false, false, 330000, 12345, 0, 0, false },
		{ R_MAIN, false, false, 350000, 20000, 0, 0, false },
		{ R_MAIN, false, false, 380000, 64000, 0, 0, false },
		{ R_MAIN, false, false, 450000, 8081, 0, 0, false },
		/* The same range twice (the later write's bytes win), two
		 * apart, then two overlapping in part (a run holding them is
		 * not split in halves between the two processes: the later
		 * write's bytes still win). */
		{ R_MAIN, false, false, 600000, 65536, 0, 0, true },
		{ R_MAIN, false, false, 600000, 65536, 0, 0, false },
		{ R_MAIN, false, false, 700000, 65536, 0, 0, false },
		{ R_MAIN, false, false, 800000, 65536, 0, 0, false },
		{ R_MAIN, false, false, 900000, 40000, 0, 20000, false },
		{ R_MAIN, false, false, 920000, 40000, 0, 0, false },
	};
	enum { COUNT = sizeof w / sizeof w[0], CTX0 = 200 };
	bool seen[COUNT] = { false };
	size_t at[COUNT], tx = 0;
	struct comp c;

	OXT_GROUP("5. RMA writes queued at the target before it polls (runs copied with one process_vm_readv, "
		  "or shared in halves with the idle initiator): refused ones in the middle refused, every write "
		  "completes once, its bytes in place, a later write's bytes over an earlier one's");
	CMD(n, CMD_HOLD, 300, 0, 0, 0);
	for (int i = 0; i < COUNT; i++) {
		const struct rinfo *r = &ri[w[i].reg];
		uint64_t key = r->key + (w[i].badkey ? 1 : 0);

		at[i] = tx;
		tx += (w[i].len + 4095) & ~(size_t)4095;
		fill(n->tx + at[i], w[i].len, 18000 + i);
		if (w[i].data)
			POST(&n->e1,
			     fi_writedata(n->e1.ep, n->tx + at[i], w[i].len, n->txd,
					  0xDA7A0000ULL + i, n->peer, r->addr + w[i].off,
					  key, CTX(CTX0 + i)),
			     "queued fi_writedata %d", i);
		else
			POST(&n->e1,
			     fi_write(n->e1.ep, n->tx + at[i], w[i].len, n->txd,
				      n->peer, r->addr + w[i].off, key, CTX(CTX0 + i)),
			     "queued fi_write %d", i);
	}
	for (int k = 0; k < COUNT; k++) {
		if (!next_comp(&n->e1, &c, TMO_MS)) {
			EXPECT(false, "queued writes: %d of %d completed, then none within %d ms",
			       k, COUNT, TMO_MS);
			break;
		}
		void *ctx = c.err ? c.ee.op_context : c.e.op_context;
		int i = (int)((struct fi_context2 *)ctx - ctxs) - CTX0;

		if (i < 0 || i >= COUNT || seen[i]) {
			EXPECT(false, "queued writes: unexpected or repeated %s", describe(&c));
			continue;
		}
		seen[i] = true;
		if (w[i].err == 0 && c.err)
			EXPECT(false, "queued write %d (%zu B): expected success, got an %s", i,
			       w[i].len, describe(&c));
		else if (w[i].err != 0 && !c.err)
			EXPECT(false, "queued write %d: expected err %s, got a successful %s", i,
			       oxt_errname(w[i].err), describe(&c));
		else if (w[i].err != 0 && c.ee.err != w[i].err)
			EXPECT(false, "queued write %d: err: expected %s, got %s", i,
			       oxt_errname(w[i].err), oxt_errname(c.ee.err));
		else if (!c.err && c.e.flags != (FI_RMA | FI_WRITE))
			EXPECT(false, "queued write %d: flags: expected FI_RMA|FI_WRITE, got 0x%llx", i,
			       (unsigned long long)c.e.flags);
	}
	for (int i = 0; i < COUNT; i++) {
		if (w[i].err == 0 && !w[i].gone)
			CMD(n, CMD_VERIFY, w[i].reg, w[i].off, w[i].keep ? w[i].keep : w[i].len,
			    18000 + i);
		if (w[i].data)
			CMD(n, CMD_CQDATA, 0xDA7A0000ULL + i, w[i].len, 0, 0);
	}
	CMD(n, CMD_INTACT, R_MAIN, 0, 0, 0);
	CMD(n, CMD_INTACT, R_ERR, 1, 0, 0);
	CMD(n, CMD_INTACT, R_RO, 1, 0, 0);
	CMD(n, CMD_QUIET, 0, 0, 0, 0);
	EXPECT_NONE(&n->e1, 0, "after the queued writes");
}

/* ------------------------------------------------- 8. flow control */

static void t_flow(struct node *n, bool ps)
{
	enum { EXTRA = 64 };
	bool snd = n->parent == ps;
	struct comp c;
	uint64_t total;

	OXT_GROUP(gname("8. flow control: fi_inject into a queue nobody drains gives -FI_EAGAIN; after draining, all arrive in order, %s",
		      dir(ps)));
	if (!snd)
		EXPECT_NONE(&n->e1, 20, "receiver before the flood");
	SYNC(n);
	if (snd) {
		uint64_t i, sent = 0;
		ssize_t r = 0;
		char rc[160];

		/* at most what the receiver can post receives for */
		for (i = 0; i < NCTX - EXTRA - 1; i++) {
			uint64_t msg[2] = { 0xF10F10F1ULL, i };

			r = fi_inject(n->e1.ep, msg, sizeof msg, n->peer);
			if (r != 0)
				break;
			sent++;
		}
		if (over_tcp()) {
			/* (The flood fits in the link's queue and the socket
			 * buffers: no -FI_EAGAIN to see; the order is checked.) */
			printf("# %s: over TCP, %llu injects into an undrained peer were all taken (socket buffers and the 4 MiB link queue)\n",
			       oxt_prog, (unsigned long long)sent);
		} else {
			EXPECT(r == -FI_EAGAIN,
			       "fi_inject after %llu messages into an undrained queue: expected -FI_EAGAIN, got %s",
			       (unsigned long long)sent, oxt_rcstr(r, rc, sizeof rc));
			EXPECT(sent == RING_CELLS,
			       "fi_inject succeeded %llu times before -FI_EAGAIN; docs/wire-shm.md: a queue of %d cells",
			       (unsigned long long)sent, RING_CELLS);
		}
		if (r == -FI_EAGAIN) {
			uint64_t msg[2] = { 0xF10F10F1ULL, sent };

			r = fi_inject(n->e1.ep, msg, sizeof msg, n->peer);
			EXPECT(r == -FI_EAGAIN, "fi_inject again, still undrained: expected -FI_EAGAIN, got %s",
			       oxt_rcstr(r, rc, sizeof rc));
			if (r == 0)
				sent++;
		}
		total = sent + EXTRA;
		put_num(n, total);
		/* the rest, retrying -FI_EAGAIN while the receiver drains */
		double end = oxt_now_ms() + TMO_MS;
		for (i = sent; i < total; i++) {
			uint64_t msg[2] = { 0xF10F10F1ULL, i };

			while ((r = fi_inject(n->e1.ep, msg, sizeof msg,
					      n->peer)) == -FI_EAGAIN &&
			       oxt_now_ms() < end) {
				progress(&n->e1);
				usleep(20);
			}
			if (r != 0) {
				EXPECT(false, "fi_inject of message %llu while the receiver drains: expected 0, got %s",
				       (unsigned long long)i,
				       oxt_rcstr(r, rc, sizeof rc));
				break;
			}
		}
	} else {
		total = get_num(n);
		REQUIRE(total <= NCTX, "too many messages for the test: %llu",
			(unsigned long long)total);
		memset(n->rx, POISON, total * 64);
		for (uint64_t i = 0; i < total; i++)
			POST(&n->e1,
			     fi_recv(n->e1.ep, n->rx + i * 64, 64, n->rxd,
				     FI_ADDR_UNSPEC, CTX(i)),
			     "recv %llu", (unsigned long long)i);
		for (uint64_t i = 0; i < total; i++) {
			const uint64_t *got = (const uint64_t *)(n->rx + i * 64);

			if (!EXPECT_OK(&n->e1, CTX(i), FI_RECV | FI_MSG, &c,
				       "message %llu of %llu",
				       (unsigned long long)i,
				       (unsigned long long)total))
				break;
			if (c.e.len != 16 || got[0] != 0xF10F10F1ULL ||
			    got[1] != i) {
				EXPECT(false, "message %llu: expected sequence number %llu (16 B), got %llu (%zu B)",
				       (unsigned long long)i,
				       (unsigned long long)i,
				       (unsigned long long)got[1], c.e.len);
				break;
			}
		}
	}
	SYNC(n);
	EXPECT_NONE(&n->e1, 0, "after the flood");
}

/* ------------------------------------------------- 7. dead peer */

/* A fresh process (exec'd) that opens one endpoint and exits. */
static int open_endpoint_main(void)
{
	struct fi_info *hints = xfer_hints(), *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_ep *ep = NULL;
	int rc;

	alarm(20);
	rc = fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &info);
	fi_freeinfo(hints);
	if (!rc)
		rc = fi_fabric(info->fabric_attr, &fabric, NULL);
	if (!rc)
		rc = fi_domain(fabric, info, &domain, NULL);
	if (!rc)
		rc = fi_endpoint(domain, info, &ep, NULL);
	if (ep)
		fi_close(&ep->fid);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	if (info)
		fi_freeinfo(info);
	if (rc)
		printf("    open-endpoint helper: %d (%s)\n", rc, fi_strerror(-rc));
	return rc ? 1 : 0;
}

static bool shm_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/*
 * The queue file of the endpoint named `name`, made at or after `since`:
 * its first name, or one of its others (~1..~3) when something else holds
 * the first (docs/wire-shm.md: a queue of another wire version, which no
 * sweep removes, left in this user's directory by another build, say).
 * False (and the first name in `path`) when none is that recent.
 */
static bool peer_queue_path(char *path, size_t size, const void *name, time_t since)
{
	const struct sockaddr_in *sin = name;
	char cand[128];
	time_t best = 0;
	bool found = false;

	snprintf(path, size, "/dev/shm/oxmr-u%u/q-%s-%u", (unsigned)geteuid(), inet_ntoa(sin->sin_addr),
		 port_of(name));
	for (int i = 0; i < 4; i++) {
		struct stat st;

		if (i == 0)
			snprintf(cand, sizeof cand, "/dev/shm/oxmr-u%u/q-%s-%u", (unsigned)geteuid(),
				 inet_ntoa(sin->sin_addr), port_of(name));
		else
			snprintf(cand, sizeof cand, "/dev/shm/oxmr-u%u/q-%s-%u~%d", (unsigned)geteuid(),
				 inet_ntoa(sin->sin_addr), port_of(name), i);
		if (stat(cand, &st) == 0 && st.st_mtime >= since && (!found || st.st_mtime >= best)) {
			snprintf(path, size, "%s", cand);
			best = st.st_mtime;
			found = true;
		}
	}
	return found;
}

/* Fork (and optionally exec) a process that opens an endpoint; its exit status. */
static int run_opener(const char *self, bool exec)
{
	int status = 0;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (exec) {
			/* (The diagnosis run: oxmr's debug lines say what its
			 * sweep found at each queue name it left.) */
			setenv("FI_LOG_LEVEL", "debug", 1);
			execl(self, self, "--open-endpoint", (char *)NULL);
			_exit(127);
		}
		alarm(20);
		/* _exit: never run atexit handlers over the parent's copies */
		_exit(open_endpoint_main());
	}
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	return status;
}

static void d_child(int fd)
{
	struct node *d = calloc(1, sizeof *d);
	struct hello peer;
	struct cmsg m;

	REQUIRE(d != NULL, "calloc");
	alarm(30);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	oxt_become_peer();
	d->ctl = fd;
	node_open(d, false, MiB + 4096);
	exchange(d, &peer);
	d->peer = av_insert(&d->e1, peer.name1);
	ctl_get(d, &m);
	REQUIRE(m.op == CMD_SEND_RTS, "dying child: expected CMD_SEND_RTS, got %u",
		m.op);
	fill(d->tx, MiB, 19000);
	{
		ssize_t r = fi_send(d->e1.ep, d->tx, MiB, d->txd, d->peer, CTX(0));
		reply(d, m.op, r == 0, fmt("fi_send of 1 MiB from the dying child: %zd", r));
	}
	/*
	 * Progress for 200 ms, then never again; wait to be killed. (Over
	 * TCP, the first frame to a peer leaves once that peer's endpoint
	 * answered our connection, when we next progress: docs/wire-tcp.md,
	 * "Connections and frames". The parent answers while it waits, within these 200 ms.)
	 */
	{
		double t0 = oxt_now_ms();
		struct fi_cq_tagged_entry e;

		while (oxt_now_ms() - t0 < 200)
			(void)fi_cq_read(d->e1.cq, &e, 1);
	}
	for (;;)
		pause();
}

static void t_dead(struct node *n, const char *self)
{
	struct hello dh;
	struct comp c;
	char path[128];
	int sv[2], status = 0;
	fi_addr_t dfa, me;
	time_t born;
	pid_t pid;

	OXT_GROUP("7. dead peer: its pending RTS send fails with FI_ECONNABORTED in seconds, a receive of its data with FI_EIO, the endpoint keeps working");
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s",
		strerror(errno));
	fflush(stdout);
	/* (A second back: file times are whole seconds.) */
	born = time(NULL) - 1;
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		oxt_prog = "xfer[dying child]";
		d_child(sv[1]);
		_exit(1);
	}
	close(sv[1]);
	{
		struct cmsg m;

		n->ctl = sv[0]; /* the parent, talking to the new child */
		exchange(n, &dh);
		dfa = av_insert(&n->e1, dh.name1);
		/* (docs/wire-shm.md "Addressing": this user's directory) */
		EXPECT(peer_queue_path(path, sizeof path, dh.name1, born),
		       "%s: the live peer's queue file is missing (no file at that name or its others made since it started)",
		       path);

		/* it sends 1 MiB (RTS) to us and never progresses */
		m = cmd_at(__FILE__, __LINE__, n, CMD_SEND_RTS, 0, 0, 0, 0);
		(void)m;
	}
	EXPECT_NONE(&n->e1, 50, "the peer's RTS arrives, unexpected");
	fill(n->tx, MiB, 19001);
	POST(&n->e1, fi_send(n->e1.ep, n->tx, MiB, n->txd, dfa, CTX(120)),
	     "1 MiB send to the peer");
	EXPECT_NONE(&n->e1, 300, "a 1 MiB send to a peer that never receives");
	/*
	 * Killed and not yet reaped (a zombie until waitpid, as any dead
	 * child of a process that is busy polling its CQ): it is gone all the
	 * same, and can never answer.
	 */
	kill(pid, SIGKILL);
	close(sv[0]);
	n->ctl = -1;
	{
		double t0 = oxt_now_ms();

		if (next_comp(&n->e1, &c, 5000)) {
			printf("# the send to the dead (unreaped) peer ended %.0f ms after the kill\n",
			       oxt_now_ms() - t0);
			stash_unpop(&n->e1); /* checked below */
		} else {
			EXPECT(false, "a pending 1 MiB send to a SIGKILLed peer (not yet reaped by waitpid): no completion within 5 s");
		}
		REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
		t0 = oxt_now_ms();
		if (err_at(__FILE__, __LINE__, &n->e1, CTX(120), FI_ECONNABORTED,
			   FI_SEND | FI_MSG, &c, 5000,
			   "a pending 1 MiB send to a peer that was SIGKILLed"))
			printf("# the send to the dead peer failed (at most) %.0f ms after it was reaped\n",
			       oxt_now_ms() - t0);
	}
	memset(n->rx, POISON, MiB);
	POST(&n->e1, fi_recv(n->e1.ep, n->rx, MiB, n->rxd, FI_ADDR_UNSPEC, CTX(121)),
	     "recv of the dead peer's RTS");
	EXPECT_ERR(&n->e1, CTX(121), FI_EIO, FI_RECV | FI_MSG, &c,
		   "a receive matching the RTS of a peer that died before its data was copied");

	/* Its queue file is still there (no process has reclaimed it yet): a
	 * new send to it fails at once, rather than landing in a queue nobody
	 * reads (and, once that is full, -FI_EAGAIN for ever). */
	EXPECT(shm_exists(path), "%s: the dead peer's queue file is already gone", path);
	{
		char rc[160];
		ssize_t r;

		fill(n->tx, 64, 19002);
		r = fi_send(n->e1.ep, n->tx, 64, n->txd, dfa, CTX(124));
		/* (Over TCP its listener is gone with it: the kernel refuses
		 * the connect at once on loopback.) */
		EXPECT(r == (over_tcp() ? -FI_ECONNREFUSED : -FI_EHOSTUNREACH),
		       "a send to the dead peer whose queue file is left: expected %s, got %s",
		       over_tcp() ? "-FI_ECONNREFUSED" : "-FI_EHOSTUNREACH", oxt_rcstr(r, rc, sizeof rc));
		EXPECT_NONE(&n->e1, 50, "after the refused send to the dead peer");
	}

	/* the endpoint keeps working: send to itself */
	me = av_insert(&n->e1, n->e1.name);
	for (size_t size = 100; size <= MiB; size = size == 100 ? MiB : MiB + 1) {
		bool got_send = false, got_recv = false;

		memset(n->rx, POISON, size);
		fill(n->tx, size, 19100 + size);
		POST(&n->e1, fi_recv(n->e1.ep, n->rx, size, n->rxd, FI_ADDR_UNSPEC,
				     CTX(122)),
		     "recv from itself");
		POST(&n->e1, fi_send(n->e1.ep, n->tx, size, n->txd, me, CTX(123)),
		     "send of %zu B to itself", size);
		for (int i = 0; i < 2; i++) {
			if (!next_comp(&n->e1, &c, TMO_MS)) {
				EXPECT(false, "send to itself (%zu B): completion %d of 2 missing",
				       size, i);
				break;
			}
			if (!c.err && c.e.op_context == CTX(122)) {
				got_recv = true;
				EXPECT_EQ(c.e.len, size);
				EXPECT_EQ(c.src, me);
			} else if (!c.err && c.e.op_context == CTX(123)) {
				got_send = true;
			} else {
				EXPECT(false, "send to itself (%zu B): unexpected %s", size,
				       describe(&c));
			}
		}
		if (got_recv && got_send)
			EXPECT_PAT(n->rx, size, 19100 + size, "send of %zu B to itself", size);
	}
	EXPECT_NONE(&n->e1, 0, "after the self sends");

	OXT_GROUP("7. the dead peer's /dev/shm queue file is removed when another process opens an endpoint");
	EXPECT(shm_exists(path),
	       "%s vanished before any process opened an endpoint (nothing to reclaim)",
	       path);
	status = run_opener(self, false);
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "the forked process that opens an endpoint: status 0x%x", status);
	if (shm_exists(path)) {
		EXPECT(false, "%s (owner SIGKILLed) is still there after a forked process opened an endpoint",
		       path);
		status = run_opener(self, true);
		printf("# diagnosis: after a freshly exec'd process opened an endpoint (status 0x%x), %s is %s\n",
		       status, path, shm_exists(path) ? "still there" : "gone");
	}
}

/* --------------------------------------------- TCP sends from registered memory */

/* The domain's counters (fi_ext_oxmr.h, oxmr_mr_ops.stats). */
static struct oxmr_mr_stats dom_stats(struct node *n)
{
	struct oxmr_mr_ops *ops = NULL;
	struct oxmr_mr_stats s;

	memset(&s, 0, sizeof s);
	s.size = sizeof s;
	REQUIRE_RC(fi_open_ops(&n->domain->fid, OXMR_MR_OPS_NAME, 0,
			       (void **)&ops, NULL),
		   0);
	EXPECT_RC(ops->stats(n->domain, &s), 0);
	return s;
}

/* FI_OXMR_TCP_IO_URING as the provider reads it (a boolean, default 1). */
static bool tcp_io_uring(void)
{
	const char *v = getenv("FI_OXMR_TCP_IO_URING");

	return !v || !(!strcmp(v, "0") || !strcasecmp(v, "no") ||
		       !strcasecmp(v, "false") || !strcasecmp(v, "off"));
}

/* FI_OXMR_TCP_ZC_COPIED as the provider reads it (a count, default 4). */
static unsigned long tcp_zc_copied_off(void)
{
	const char *v = getenv("FI_OXMR_TCP_ZC_COPIED");

	return v && *v ? strtoul(v, NULL, 10) : 4;
}

/*
 * 1z. Over TCP, the parent's sends of group 1 (up to 16 MiB, from its
 * registered, io_uring-pinned buffer) went out with io_uring SEND_ZC under
 * FI_OXMR_TCP_IO_URING=1: the push path's DATA frames carry the payload as
 * a slice of the source buffer, and every part of 32 KiB or more in a
 * pinned slot is sent zero-copy; under FI_OXMR_TCP_IO_URING=0 (or another
 * pin mode: no ring) none is, and the bytes are copied with writev. The
 * peer is on this machine (loopback, veth), so the kernel copies every
 * zero-copy send: unless FI_OXMR_TCP_ZC_COPIED=0, the link stops using
 * SEND_ZC once that many notifications in a row said so, and fewer than
 * the 16 MiB's frames go zero-copy.
 */
static void t_zc_counted(struct node *n, const struct oxmr_mr_stats *b)
{
	struct oxmr_mr_stats a = dom_stats(n);
	bool zc = tcp_io_uring() && a.pin_mode == 1;
	uint64_t zc_sends = a.tcp_zc_sends - b->tcp_zc_sends;
	uint64_t zc_bytes = a.tcp_zc_bytes - b->tcp_zc_bytes;
	uint64_t copied = a.tcp_copied_bytes - b->tcp_copied_bytes;

	OXT_GROUP(gname("1z. TCP: the parent's sends of 1. from registered memory %s SEND_ZC (FI_OXMR_TCP_IO_URING=%d, pin mode %u)",
			zc ? "went with" : "did not use", tcp_io_uring(),
			a.pin_mode));
	printf("# parent's domain over 1.: tcp_zc_sends %" PRIu64
	       ", tcp_zc_bytes %" PRIu64 ", tcp_zc_copied %" PRIu64
	       " (all so far), tcp_copied_frames %" PRIu64
	       ", tcp_copied_bytes %" PRIu64 "\n",
	       zc_sends, zc_bytes, a.tcp_zc_copied,
	       a.tcp_copied_frames - b->tcp_copied_frames, copied);
	EXPECT(a.size == sizeof a, "stats: size %zu, expected %zu", a.size,
	       sizeof a);
	if (zc && tcp_zc_copied_off() != 0) {
		EXPECT(zc_sends >= 1, "no send went with SEND_ZC");
		EXPECT(zc_bytes + copied >= BIG, "tcp_zc_bytes + tcp_copied_bytes grew by %" PRIu64
		       ", expected at least the 16 MiB sent", zc_bytes + copied);
		/* (Both processes are on this machine: the kernel copies
		 * every zero-copy send, and says so; the link stops using
		 * SEND_ZC, so the rest of the 16 MiB went by writev: more than
		 * a frame's worth, 1 MiB at most, where a link that kept
		 * using it copies only its small control frames.) */
		EXPECT(copied >= MiB,
		       "the kernel copied %" PRIu64 " zero-copy sends, yet the link kept "
		       "using SEND_ZC for %" PRIu64 " frames: only %" PRIu64
		       " bytes went by writev (FI_OXMR_TCP_ZC_COPIED=%lu)",
		       a.tcp_zc_copied, zc_sends, copied, tcp_zc_copied_off());
	} else if (zc) {
		/* (16 MiB in DATA frames of at most 1 MiB, 512 KiB across
		 * the veth pair; only the last, shorter one may be under
		 * 32 KiB, and the bytes below say every other went so.) */
		EXPECT(zc_sends >= BIG / MiB,
		       "tcp_zc_sends grew by %" PRIu64
		       ", expected at least %lu for the 16 MiB send",
		       zc_sends, BIG / MiB);
		EXPECT(zc_bytes >= BIG - 32 * KiB,
		       "tcp_zc_bytes grew by %" PRIu64 ", expected at least %lu",
		       zc_bytes, BIG - 32 * KiB);
		EXPECT(a.tcp_zc_copied <= a.tcp_zc_sends,
		       "more notifications said copied (%" PRIu64
		       ") than sends were made (%" PRIu64 ")",
		       a.tcp_zc_copied, a.tcp_zc_sends);
	} else {
		EXPECT(zc_sends == 0 && zc_bytes == 0 && a.tcp_zc_copied == 0,
		       "SEND_ZC used without the ring: tcp_zc_sends +%" PRIu64
		       ", tcp_zc_bytes +%" PRIu64 ", tcp_zc_copied %" PRIu64,
		       zc_sends, zc_bytes, a.tcp_zc_copied);
		EXPECT(copied >= BIG, "tcp_copied_bytes grew by %" PRIu64
		       ", expected at least the 16 MiB sent", copied);
	}
}

/* ------------------------------------------------------------- main */

static void run_groups(struct node *n, const struct hello *peer)
{
	struct treg regs[R_COUNT];
	struct rinfo ri[R_COUNT];
	struct cmsg m;

	struct oxmr_mr_stats before = dom_stats(n);

	t_sizes(n, 1);
	if (n->parent && over_tcp())
		t_zc_counted(n, &before);
	t_sizes(n, 0);
	for (int ps = 1; ps >= 0; ps--)
		t_offsets(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_boundary(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_iov(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_data(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_inject(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_delivery(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_unexpected(n, ps);
	for (int ps = 1; ps >= 0; ps--)
		t_kept(n, ps);
	t_source(n, peer);
	for (int ps = 1; ps >= 0; ps--)
		t_tags(n, ps);
	t_directed(n);
	for (int ps = 1; ps >= 0; ps--)
		t_trunc(n, ps);

	/* 5, 6: the child is the RMA target */
	if (n->parent) {
		ctl_get(n, &m);
		REQUIRE(m.op == OP_DATA, "expected the child's regions, got op %u", m.op);
		memcpy(ri, m.text, sizeof ri);
		t_rma(n, ri);
		t_rma_err(n, ri);
		t_rma_queued(n, ri);
		CMD(n, CMD_END, 0, 0, 0, 0);
	} else {
		OXT_GROUP("5/6. RMA target: serving the parent's accesses");
		child_regions(n, regs);
		child_serve(n, regs);
		child_regions_close(regs);
	}
	SYNC(n);

	for (int ps = 1; ps >= 0; ps--)
		t_flow(n, ps);
	SYNC(n);
}

/* Two hosts: whether this network namespace has a TCP connection to the
 * endpoint named `name` (/proc/net/tcp, any state but LISTEN): proof that
 * the transfers crossed the veth pair over TCP rather than through
 * /dev/shm, which the namespaces share. */
static bool tcp_connection_to(const void *name)
{
	const struct sockaddr_in *s = name;
	char line[256], want[32];
	bool found = false;
	FILE *f = fopen("/proc/net/tcp", "r");

	if (!f)
		return false;
	/* (rem_address: the IPv4 address as the 32-bit word in host order,
	 * then the port, both in hex) */
	snprintf(want, sizeof want, "%08X:%04X", s->sin_addr.s_addr, ntohs(s->sin_port));
	while (!found && fgets(line, sizeof line, f)) {
		char local[32], rem[32];
		unsigned st;

		if (sscanf(line, " %*s %31s %31s %x", local, rem, &st) == 3 && !strcmp(rem, want) && st != 0x0A)
			found = true;
	}
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	static struct node n;
	struct hello peer;
	int sv[2], status = 0;
	pid_t pid;

	if (argc == 2 && !strcmp(argv[1], "--open-endpoint"))
		return open_endpoint_main();
	oxt_init(argv[0]);
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s",
		strerror(errno));
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	n.parent = pid != 0;
	if (!n.parent) {
		oxt_prog = "xfer[child]";
		alarm(OXT_WATCHDOG_S);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		oxt_become_peer();
		close(sv[0]);
		n.ctl = sv[1];
	} else {
		close(sv[1]);
		n.ctl = sv[0];
	}

	/* both: own fabric, domain, endpoint(s), after the fork */
	node_open(&n, !n.parent, BUFLEN);
	exchange(&n, &peer);
	n.peer = av_insert(&n.e1, peer.name1);
	if (!n.parent)
		n.peer2 = av_insert(&n.e2, peer.name1);

	run_groups(&n, &peer);

	if (n.parent && oxt_two_hosts()) {
		OXT_GROUP("two hosts: the transfers crossed a TCP connection to the child's endpoint");
		EXPECT(tcp_connection_to(peer.name1), "no TCP connection to %s:%u in /proc/net/tcp",
		       inet_ntoa(((const struct sockaddr_in *)peer.name1)->sin_addr), port_of(peer.name1));
	}

	if (!n.parent) {
		OXT_GROUP("child: close");
		node_close(&n);
		close(n.ctl);
		return oxt_done();
	}

	OXT_GROUP("the child's checks passed (its exit status)");
	{
		double end = oxt_now_ms() + 15000;
		pid_t w;

		while ((w = waitpid(pid, &status, WNOHANG)) == 0 && oxt_now_ms() < end)
			oxt_sleep_ms(5);
		if (w == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			EXPECT(false, "the child did not exit within 15 s");
		} else {
			EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			       "child exit status 0x%x (its failures are printed above as xfer[child])",
			       status);
		}
	}
	close(n.ctl);

	t_dead(&n, "/proc/self/exe");

	OXT_GROUP("parent: close");
	node_close(&n);
	return oxt_done();
}
