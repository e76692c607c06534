/*
 * msg: FI_EP_MSG connections between two processes (fi_cm(3), fi_eq(3)).
 *
 * The parent listens on a passive endpoint; the child connects to it:
 * - a request with cm_data is rejected with cm_data: the connector gets an
 *   FI_ECONNREFUSED error event whose err_data is the reject's cm_data;
 * - garbage sent to the passive endpoint's port closes that connection
 *   and nothing else;
 * - a request with cm_data is accepted with cm_data: FI_CONNECTED on both
 *   EQs, the connector's with the accept's cm_data, the acceptor's with
 *   the request's cm_data in its FI_CONNREQ; fi_getpeer works on both;
 * - send/recv, tagged (inline and 1 MiB rendezvous, both ways) and RMA
 *   write and read (4 KiB and 256 KiB) over the connection, data checked;
 * - fi_shutdown: FI_SHUTDOWN on the peer's EQ and on our own, once each,
 *   and a send after it is -FI_ENOTCONN;
 * - connects that fail give error events: nothing listening
 *   (FI_ECONNREFUSED), a listener that never answers (FI_ETIMEDOUT, with
 *   FI_OXMR_CM_TIMEOUT_MS=500 set here), one that drops the connection
 *   (FI_ECONNRESET); cm_data over FI_OPT_CM_DATA_SIZE is -FI_EINVAL.
 * Run by fabtests/run.sh on the default wire (shared memory for the data
 * between these processes) and with FI_OXMR_WIRE=tcp.
 */
#include "oxt.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>

#define BIG (1UL << 20)
#define RMA_LEN (260UL << 10)
#define CM_MAX 256

struct side {
	struct oxt_env e;
	struct fid_eq *eq;
	struct fid_cq *cq;
	bool virt;
};

static union {
	struct fi_eq_cm_entry cm;
	unsigned char bytes[sizeof(struct fi_eq_cm_entry) + CM_MAX];
} ev;

static void side_open(struct side *s)
{
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC, .size = 64 };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };

	oxt_open_type(&s->e, FI_EP_MSG);
	s->virt = (s->e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	REQUIRE_RC(fi_eq_open(s->e.fabric, &ea, &s->eq, NULL), 0);
	REQUIRE_RC(fi_cq_open(s->e.domain, &ca, &s->cq, NULL), 0);
}

static void side_close(struct side *s)
{
	EXPECT_RC(fi_close(&s->cq->fid), 0);
	EXPECT_RC(fi_close(&s->eq->fid), 0);
	oxt_close(&s->e);
}

/* An active endpoint of `info` bound to the side's CQ and EQ, enabled. */
static struct fid_ep *ep_open(struct side *s, struct fi_info *info)
{
	struct fid_ep *ep = NULL;

	REQUIRE_RC(fi_endpoint(s->e.domain, info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &s->eq->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	return ep;
}

/* The next EQ event within 10 s: its length (the event in *event), or the
 * negative return of fi_eq_sread. */
static ssize_t next_event(struct side *s, uint32_t *event)
{
	memset(&ev, 0, sizeof ev);
	*event = 0;
	return fi_eq_sread(s->eq, event, &ev, sizeof ev, 10000, 0);
}

/* Expect an error event of `err` for `fid`; its err_data in *data. */
static void expect_error_event(struct side *s, struct fid *fid, int err, const char *what,
			       void *data, size_t *len)
{
	struct fi_eq_err_entry ee;
	uint32_t event;
	ssize_t n = next_event(s, &event);

	EXPECT(n == -FI_EAVAIL, "%s: fi_eq_sread gave %zd (event %u), not -FI_EAVAIL", what, n, event);
	if (n != -FI_EAVAIL)
		return;
	memset(&ee, 0, sizeof ee);
	EXPECT_EQ(fi_eq_readerr(s->eq, &ee, 0), (ssize_t)sizeof ee);
	EXPECT(ee.err == err, "%s: error event %d (%s), expected %d (%s)", what, ee.err,
	       fi_strerror(ee.err), err, fi_strerror(err));
	EXPECT(ee.fid == fid, "%s: the error event names another fid", what);
	if (data && len) {
		size_t n2 = ee.err_data_size < *len ? ee.err_data_size : *len;

		if (n2 && ee.err_data)
			memcpy(data, ee.err_data, n2);
		*len = ee.err_data_size;
	}
}

static int wait_cq(struct side *s, int want)
{
	struct fi_cq_tagged_entry ent;
	double until = oxt_now_ms() + 20000;
	int got = 0;

	while (got < want && oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(s->cq, &ent, 1);

		if (n == 1) {
			got++;
		} else if (n == -FI_EAVAIL) {
			void *ctx;

			EXPECT(0, "an operation failed: %s", fi_strerror(OXT_READERR(s->cq, &ctx)));
			got++;
		}
	}
	EXPECT(got == want, "%d of %d completions within 20 s", got, want);
	return got;
}

/* A TCP listener on 127.0.0.1 (never accepting unless asked): its port. */
static int raw_listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof *a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	REQUIRE(fd >= 0, "socket: %s", strerror(errno));
	*a = oxt_sin("127.0.0.1", 0);
	REQUIRE(bind(fd, (struct sockaddr *)a, sizeof *a) == 0, "bind: %s", strerror(errno));
	REQUIRE(listen(fd, 4) == 0, "listen: %s", strerror(errno));
	REQUIRE(getsockname(fd, (struct sockaddr *)a, &len) == 0, "getsockname");
	return fd;
}

static int child(int sock)
{
	struct side s;
	struct fid_ep *ep;
	struct sockaddr_in pep_name, a;
	unsigned char cm[CM_MAX + 1], got[CM_MAX], *big = malloc(BIG), *small = malloc(4096);
	unsigned char *rma = malloc(RMA_LEN), *back = malloc(RMA_LEN);
	struct fi_context ctx[8];
	uint64_t key, base;
	size_t len;
	char peer[64];
	int fd, fd2;

	oxt_reset_counts();
	oxt_prog = "msg[connector]";
	REQUIRE(big && small && rma && back, "malloc");
	side_open(&s);
	REQUIRE(read(sock, &pep_name, sizeof pep_name) == sizeof pep_name, "socketpair read");

	OXT_GROUP("a rejected request: FI_ECONNREFUSED with the reject's cm_data as err_data");
	ep = ep_open(&s, s.e.info);
	oxt_fill(cm, 100, 1);
	EXPECT_RC(fi_connect(ep, &pep_name, cm, 100), 0);
	memset(got, 0, sizeof got);
	len = sizeof got;
	expect_error_event(&s, &ep->fid, FI_ECONNREFUSED, "reject", got, &len);
	EXPECT_EQ(len, 50);
	EXPECT(oxt_same(got, 50, 2), "the err_data is not the reject's cm_data");
	len = sizeof peer;
	EXPECT_RC(fi_getpeer(ep, peer, &len), -FI_ENOTCONN);
	EXPECT_RC(fi_connect(ep, &pep_name, NULL, 0), -FI_EISCONN);
	EXPECT_RC(fi_close(&ep->fid), 0);

	OXT_GROUP("garbage to the passive endpoint's port: that connection is closed");
	fd = socket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(fd >= 0, "socket");
	REQUIRE(connect(fd, (struct sockaddr *)&pep_name, sizeof pep_name) == 0, "connect: %s", strerror(errno));
	{
		struct timeval tv = { .tv_sec = 10 };
		char junk[64] = "GET / HTTP/1.0\r\n\r\nthis is not an oxmr connection request";
		ssize_t r;

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		REQUIRE(write(fd, junk, sizeof junk) == sizeof junk, "write");
		r = read(fd, junk, sizeof junk);
		EXPECT(r == 0 || (r < 0 && errno == ECONNRESET), "read after garbage: %zd (%s), expected the end",
		       r, r < 0 ? strerror(errno) : "data");
	}
	close(fd);

	OXT_GROUP("an accepted request: FI_CONNECTED with the accept's cm_data; fi_getpeer");
	ep = ep_open(&s, s.e.info);
	EXPECT_RC(fi_recv(ep, big, BIG, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
	oxt_fill(cm, CM_MAX, 3);
	EXPECT_RC(fi_send(ep, small, 8, NULL, 0, &ctx[1]), -FI_ENOTCONN);
	EXPECT_RC(fi_connect(ep, &pep_name, cm, CM_MAX), 0);
	{
		uint32_t event;
		ssize_t n = next_event(&s, &event);

		EXPECT_EQ(n, (ssize_t)(sizeof(struct fi_eq_cm_entry) + 77));
		EXPECT_EQ(event, FI_CONNECTED);
		EXPECT(ev.cm.fid == &ep->fid, "FI_CONNECTED names another fid");
		EXPECT(oxt_same(ev.cm.data, 77, 4), "FI_CONNECTED does not carry the accept's cm_data");
	}
	len = sizeof peer;
	EXPECT_RC(fi_getpeer(ep, peer, &len), 0);
	EXPECT_EQ(len, sizeof(struct sockaddr_in));

	OXT_GROUP("data over the connection: msg, tagged inline and rendezvous, both ways");
	oxt_fill(small, 64, 5);
	oxt_fill(big, BIG, 6);
	EXPECT_RC(fi_send(ep, small, 64, NULL, 0, &ctx[1]), 0);
	EXPECT_RC(fi_tsend(ep, big, BIG, NULL, 0, 8, &ctx[2]), 0);
	EXPECT_RC(fi_tsend(ep, small, 64, NULL, 0, 7, &ctx[3]), 0);
	wait_cq(&s, 3);
	/* The parent's 1 MiB send into the receive posted before connecting
	 * (our big buffer is no longer read: its sends completed). */
	memset(big, 0, BIG);
	oxt_put(sock, 's');
	wait_cq(&s, 1);
	EXPECT(oxt_same(big, BIG, 9), "the 1 MiB message arrived wrong");

	OXT_GROUP("RMA over the connection: writes of 4 KiB and 256 KiB, read back");
	REQUIRE(read(sock, &key, sizeof key) == sizeof key, "socketpair read");
	REQUIRE(read(sock, &base, sizeof base) == sizeof base, "socketpair read");
	oxt_fill(rma, RMA_LEN, 10);
	EXPECT_RC(fi_write(ep, rma, 4096, NULL, 0, base, key, &ctx[4]), 0);
	EXPECT_RC(fi_write(ep, rma + 4096, RMA_LEN - 4096, NULL, 0, base + 4096, key, &ctx[5]), 0);
	wait_cq(&s, 2);
	memset(back, 0, RMA_LEN);
	EXPECT_RC(fi_read(ep, back, RMA_LEN, NULL, 0, base, key, &ctx[6]), 0);
	wait_cq(&s, 1);
	EXPECT(oxt_same(back, RMA_LEN, 10), "RMA read back other bytes than were written");
	oxt_put(sock, 'r');

	OXT_GROUP("fi_shutdown: FI_SHUTDOWN on our EQ, once; then sends are -FI_ENOTCONN");
	EXPECT_RC(fi_shutdown(ep, 0), 0);
	{
		uint32_t event;
		ssize_t n = next_event(&s, &event);

		EXPECT_EQ(n, (ssize_t)sizeof(struct fi_eq_cm_entry));
		EXPECT_EQ(event, FI_SHUTDOWN);
		EXPECT(ev.cm.fid == &ep->fid, "FI_SHUTDOWN names another fid");
		EXPECT_RC(fi_eq_read(s.eq, &event, &ev, sizeof ev, 0), -FI_EAGAIN);
	}
	EXPECT_RC(fi_send(ep, small, 8, NULL, 0, &ctx[1]), -FI_ENOTCONN);
	EXPECT(oxt_get(sock) == 'k', "the acceptor's checks");
	EXPECT_RC(fi_close(&ep->fid), 0);

	OXT_GROUP("fi_connect to a port nobody listens on: FI_ECONNREFUSED error event");
	fd = raw_listener(&a);
	close(fd);
	ep = ep_open(&s, s.e.info);
	EXPECT_RC(fi_connect(ep, &a, NULL, 0), 0);
	expect_error_event(&s, &ep->fid, FI_ECONNREFUSED, "no listener", NULL, NULL);
	EXPECT_RC(fi_close(&ep->fid), 0);

	OXT_GROUP("fi_connect to a listener that never answers: FI_ETIMEDOUT error event");
	fd = raw_listener(&a);
	ep = ep_open(&s, s.e.info);
	EXPECT_RC(fi_connect(ep, &a, cm, 10), 0);
	{
		double t0 = oxt_now_ms();

		expect_error_event(&s, &ep->fid, FI_ETIMEDOUT, "no answer", NULL, NULL);
		EXPECT(oxt_now_ms() - t0 >= 400, "timed out after %.0f ms, FI_OXMR_CM_TIMEOUT_MS is 500",
		       oxt_now_ms() - t0);
	}
	EXPECT_RC(fi_close(&ep->fid), 0);
	close(fd);

	OXT_GROUP("fi_connect to a listener that drops the connection: FI_ECONNRESET error event");
	fd = raw_listener(&a);
	ep = ep_open(&s, s.e.info);
	EXPECT_RC(fi_connect(ep, &a, cm, 10), 0);
	fd2 = accept(fd, NULL, NULL);
	EXPECT(fd2 >= 0, "accept: %s", strerror(errno));
	if (fd2 >= 0)
		close(fd2);
	expect_error_event(&s, &ep->fid, FI_ECONNRESET, "dropped", NULL, NULL);
	EXPECT_RC(fi_close(&ep->fid), 0);
	close(fd);

	OXT_GROUP("cm_data over FI_OPT_CM_DATA_SIZE: -FI_EINVAL");
	ep = ep_open(&s, s.e.info);
	len = sizeof key;
	EXPECT_RC(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &key, &len), 0);
	EXPECT_EQ(key, CM_MAX);
	EXPECT_RC(fi_connect(ep, &pep_name, cm, CM_MAX + 1), -FI_EINVAL);
	EXPECT_RC(fi_close(&ep->fid), 0);

	side_close(&s);
	free(big);
	free(small);
	free(rma);
	free(back);
	return oxt_done();
}

/* The next FI_CONNREQ: checks its cm_data (`n` bytes of pattern `seed`);
 * returns its info (NULL if there was none). */
static struct fi_info *connreq(struct side *s, struct fid_pep *pep, size_t n, unsigned seed)
{
	uint32_t event;
	ssize_t r = next_event(s, &event);

	EXPECT_EQ(r, (ssize_t)(sizeof(struct fi_eq_cm_entry) + n));
	EXPECT_EQ(event, FI_CONNREQ);
	if (event != FI_CONNREQ || r < 0)
		return NULL;
	EXPECT(ev.cm.fid == &pep->fid, "FI_CONNREQ names another fid");
	EXPECT(oxt_same(ev.cm.data, n, seed), "FI_CONNREQ does not carry the request's cm_data");
	EXPECT(ev.cm.info && ev.cm.info->handle, "FI_CONNREQ info without a handle");
	EXPECT(ev.cm.info && ev.cm.info->dest_addr, "FI_CONNREQ info without the connector's address");
	return ev.cm.info;
}

int main(int argc, char **argv)
{
	struct side s;
	struct fid_pep *pep = NULL;
	struct fid_ep *ep = NULL;
	struct fid_mr *mr = NULL;
	struct fi_info *info;
	struct sockaddr_in name;
	unsigned char cm[CM_MAX], *big, *small, *tbig, *rma;
	struct fi_context ctx[4];
	size_t len = sizeof name;
	uint64_t key, base;
	char peer[64];
	int sock, status;
	pid_t pid;

	(void)argc;
	/* Read at the first fi_getinfo, in both processes. */
	setenv("FI_OXMR_CM_TIMEOUT_MS", "500", 1);
	oxt_init(argv[0]);
	big = malloc(BIG);
	tbig = malloc(BIG);
	small = malloc(4096);
	rma = calloc(1, RMA_LEN);
	REQUIRE(big && tbig && small && rma, "malloc");
	/* (Forked before anything of libfabric is opened.) */
	pid = oxt_fork(child, &sock);
	side_open(&s);
	OXT_GROUP("a passive endpoint listens");
	REQUIRE_RC(fi_passive_ep(s.e.fabric, s.e.info, &pep, NULL), 0);
	EXPECT_RC(fi_listen(pep), -FI_ENOEQ);
	REQUIRE_RC(fi_pep_bind(pep, &s.eq->fid, 0), 0);
	REQUIRE_RC(fi_listen(pep), 0);
	REQUIRE_RC(fi_getname(&pep->fid, &name, &len), 0);
	REQUIRE(write(sock, &name, sizeof name) == sizeof name, "socketpair write");

	OXT_GROUP("FI_CONNREQ with the request's cm_data; fi_reject with cm_data");
	info = connreq(&s, pep, 100, 1);
	if (info) {
		struct fid_pep *other = NULL;

		/* A request answered on a passive endpoint it did not arrive
		 * at is refused, and stays unanswered for its own. */
		oxt_fill(cm, 50, 2);
		EXPECT_RC(fi_passive_ep(s.e.fabric, s.e.info, &other, NULL), 0);
		if (other) {
			EXPECT_RC(fi_reject(other, info->handle, cm, 50), -FI_EINVAL);
			EXPECT_RC(fi_close(&other->fid), 0);
		}
		EXPECT_RC(fi_reject(pep, info->handle, cm, 50), 0);
		fi_freeinfo(info);
	}

	OXT_GROUP("FI_CONNREQ after the garbage; fi_accept with cm_data; FI_CONNECTED without data");
	info = connreq(&s, pep, CM_MAX, 3);
	REQUIRE(info != NULL, "no connection request to accept");
	ep = ep_open(&s, info);
	fi_freeinfo(info);
	EXPECT_RC(fi_recv(ep, big, 64, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
	EXPECT_RC(fi_trecv(ep, small, 64, NULL, FI_ADDR_UNSPEC, 7, 0, &ctx[1]), 0);
	EXPECT_RC(fi_trecv(ep, tbig, BIG, NULL, FI_ADDR_UNSPEC, 8, 0, &ctx[2]), 0);
	oxt_fill(cm, 77, 4);
	EXPECT_RC(fi_accept(ep, cm, 77), 0);
	{
		uint32_t event;
		ssize_t n = next_event(&s, &event);

		EXPECT_EQ(n, (ssize_t)sizeof(struct fi_eq_cm_entry));
		EXPECT_EQ(event, FI_CONNECTED);
		EXPECT(ev.cm.fid == &ep->fid, "FI_CONNECTED names another fid");
	}
	len = sizeof peer;
	EXPECT_RC(fi_getpeer(ep, peer, &len), 0);
	{
		struct sockaddr_in mine;

		/* As an accepted socket: the address the connector reached. */
		memset(&mine, 0, sizeof mine);
		len = sizeof mine;
		EXPECT_RC(fi_getname(&ep->fid, &mine, &len), 0);
		EXPECT(mine.sin_port == name.sin_port && mine.sin_addr.s_addr == name.sin_addr.s_addr,
		       "the accepted endpoint's name is not the passive endpoint's");
	}

	OXT_GROUP("data over the accepted connection, both ways");
	REQUIRE_RC(fi_mr_reg(s.e.domain, rma, RMA_LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0x5150, 0, &mr,
			     NULL),
		   0);
	key = fi_mr_key(mr);
	base = s.virt ? (uint64_t)(uintptr_t)rma : 0;
	wait_cq(&s, 3);
	EXPECT(oxt_same(big, 64, 5), "the message arrived wrong");
	EXPECT(oxt_same(small, 64, 5), "the tag-7 message arrived wrong");
	EXPECT(oxt_same(tbig, BIG, 6), "the tag-8 1 MiB message arrived wrong");
	EXPECT(oxt_get(sock) == 's', "the connector's receive");
	oxt_fill(big, BIG, 9);
	EXPECT_RC(fi_send(ep, big, BIG, NULL, 0, &ctx[3]), 0);
	wait_cq(&s, 1);
	REQUIRE(write(sock, &key, sizeof key) == sizeof key, "socketpair write");
	REQUIRE(write(sock, &base, sizeof base) == sizeof base, "socketpair write");
	/* (RMA needs the target's progress: our EQ and CQ reads.) */
	{
		char c = 0;
		double until = oxt_now_ms() + 20000;
		struct fi_cq_tagged_entry ent;

		fcntl(sock, F_SETFL, O_NONBLOCK);
		while (oxt_now_ms() < until && read(sock, &c, 1) != 1)
			(void)fi_cq_read(s.cq, &ent, 1);
		fcntl(sock, F_SETFL, 0);
		EXPECT(c == 'r', "the connector's RMA");
	}
	EXPECT(oxt_same(rma, RMA_LEN, 10), "the RMA writes did not land");

	OXT_GROUP("the connector's fi_shutdown: FI_SHUTDOWN on our EQ, once");
	{
		uint32_t event;
		ssize_t n = next_event(&s, &event);

		EXPECT_EQ(n, (ssize_t)sizeof(struct fi_eq_cm_entry));
		EXPECT_EQ(event, FI_SHUTDOWN);
		EXPECT(ev.cm.fid == &ep->fid, "FI_SHUTDOWN names another fid");
		EXPECT_RC(fi_shutdown(ep, 0), 0);
		EXPECT_RC(fi_eq_read(s.eq, &event, &ev, sizeof ev, 0), -FI_EAGAIN);
	}
	EXPECT_RC(fi_send(ep, small, 8, NULL, 0, &ctx[3]), -FI_ENOTCONN);
	oxt_put(sock, 'k');

	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the connector failed (status %#x)", status);
	EXPECT_RC(fi_close(&mr->fid), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&pep->fid), 0);
	side_close(&s);
	free(big);
	free(tbig);
	free(small);
	free(rma);
	return oxt_done();
}
