/*
 * mr_endpoint: under FI_MR_ENDPOINT a registration serves no remote access
 * until it is bound to an endpoint and enabled (fi_mr(3): "the MR must be
 * bound to an endpoint and enabled before it can be used").
 *
 * The parent is the target: an RDM endpoint in a domain with FI_MR_ENDPOINT
 * and a 64 KiB registration of 'p' it has not enabled. A child (another
 * process, an endpoint of its own) writes 'W' and reads through the key:
 * both must fail with -FI_EACCES, and the buffer must still hold
 * 'p'. The parent then binds the registration to its endpoint and enables
 * it: the child's next write and read work. The parent reads its CQ the
 * whole time (its endpoint's progress serves or refuses the accesses).
 */
#include "oxt.h"

#include <linux/perf_event.h>
#include <poll.h>
#include <rdma/fi_ext_oxmr.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define LEN (64UL << 10)
#define PIECE 4096UL

struct target {
	char name[64];
	uint64_t key;
	uint64_t addr;
};

/* Child exit codes. */
enum {
	C_OK = 0,
	C_SOCK = 10,      /* the socket to the parent failed */
	C_POST = 11,      /* a write or read could not be posted */
	C_NOT_REFUSED = 12, /* a disabled MR's access did not fail */
	C_WRONG_ERR = 13, /* it failed, but not with FI_EACCES */
	C_FAILED = 14,    /* an enabled MR's access failed */
	C_DATA = 15,      /* the read after enabling did not bring 'W' */
};

/* One RMA and its completion: 0, a positive FI_E* code, or -1 none. */
static int one_rma(struct oxt_ep *x, fi_addr_t peer, bool read, char *buf, const struct target *t)
{
	void *ctx = NULL;
	int me = 0;
	ssize_t rc = read ? fi_read(x->ep, buf, PIECE, NULL, peer, t->addr, t->key, &me)
			  : fi_write(x->ep, buf, PIECE, NULL, peer, t->addr, t->key, &me);

	if (rc != 0)
		return -2;
	rc = oxt_next_completion(x->cq, 10000, &ctx);
	if (rc < 0)
		return (int)rc;
	/* (A completion of another operation: none of ours.) */
	return ctx == &me ? (int)rc : -1;
}

static int child(int sock)
{
	static char src[PIECE], back[PIECE];
	struct target t;
	struct oxt_ep x;
	fi_addr_t peer = FI_ADDR_NOTAVAIL;
	char go;
	int rc;

	alarm(30);
	if (read(sock, &t, sizeof t) != (ssize_t)sizeof t)
		return C_SOCK;
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	REQUIRE_RC(fi_av_insert(x.av, t.name, 1, &peer, 0, NULL), 1);
	memset(src, 'W', sizeof src);
	for (int read_ = 0; read_ < 2; read_++) {
		rc = one_rma(&x, peer, read_, read_ ? back : src, &t);
		if (rc == -2)
			return C_POST;
		if (rc == 0)
			return C_NOT_REFUSED;
		if (rc != FI_EACCES)
			return C_WRONG_ERR;
	}
	if (write(sock, "1", 1) != 1 || read(sock, &go, 1) != 1)
		return C_SOCK;
	if (one_rma(&x, peer, false, src, &t) != 0 || one_rma(&x, peer, true, back, &t) != 0)
		return C_FAILED;
	if (oxt_first_not((unsigned char *)back, PIECE, 'W') != PIECE)
		return C_DATA;
	oxt_ep_close(&x);
	return C_OK;
}

/* Read our CQ (progress) until `sock` has a byte or the child exits. */
static bool serve_until(struct fid_cq *cq, int sock, pid_t pid, int *status, bool *exited)
{
	struct fi_cq_tagged_entry ent;
	double until = oxt_now_ms() + 20000;
	char c;

	while (oxt_now_ms() < until) {
		struct pollfd p = { .fd = sock, .events = POLLIN };

		(void)fi_cq_read(cq, &ent, 1);
		if (poll(&p, 1, 0) == 1 && recv(sock, &c, 1, MSG_DONTWAIT) == 1)
			return true;
		if (waitpid(pid, status, WNOHANG) == pid) {
			*exited = true;
			return false;
		}
	}
	return false;
}

int main(int argc, char **argv)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints, *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_ep *ep = NULL;
	struct fid_cq *cq = NULL;
	struct fid_av *av = NULL;
	struct fid_mr *mr = NULL;
	struct target t;
	size_t nlen = sizeof t.name;
	int sock, status = 0;
	bool exited = false;
	char *buf;
	pid_t pid;

	(void)argc;
	oxt_init(argv[0]);
	memset(&t, 0, sizeof t);
	hints = oxt_hints(FI_EP_RDM);
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	REQUIRE(info->domain_attr->mr_mode & FI_MR_ENDPOINT, "FI_MR_ENDPOINT asked for and not granted");
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	REQUIRE_RC(fi_domain(fabric, info, &domain, NULL), 0);
	REQUIRE_RC(fi_cq_open(domain, &ca, &cq, NULL), 0);
	REQUIRE_RC(fi_av_open(domain, &aa, &av, NULL), 0);
	REQUIRE_RC(fi_endpoint(domain, info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	REQUIRE_RC(fi_getname(&ep->fid, t.name, &nlen), 0);

	OXT_GROUP("FI_MR_ENDPOINT: a registration not yet bound and enabled refuses another process's write and read (-FI_EACCES), its memory untouched");
	buf = aligned_alloc(4096, LEN);
	REQUIRE(buf, "aligned_alloc");
	memset(buf, 'p', LEN);
	REQUIRE_RC(fi_mr_reg(domain, buf, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL), 0);
	t.key = fi_mr_key(mr);
	t.addr = (uint64_t)(uintptr_t)buf;
	pid = oxt_fork(child, &sock);
	REQUIRE(write(sock, &t, sizeof t) == (ssize_t)sizeof t, "socket write");
	EXPECT(serve_until(cq, sock, pid, &status, &exited), "the child did not finish its refused accesses (%s, status %#x)",
	       exited ? "exited" : "no word in 20 s", status);
	EXPECT(oxt_first_not((unsigned char *)buf, LEN, 'p') == LEN, "the disabled registration's memory was written");

	OXT_GROUP("bound to the endpoint and enabled, it serves the same write and read");
	EXPECT_RC(fi_mr_bind(mr, &ep->fid, 0), 0);
	EXPECT_RC(fi_mr_enable(mr), 0);
	REQUIRE(exited || write(sock, "g", 1) == 1, "socket write");
	if (!exited) {
		(void)serve_until(cq, sock, pid, &status, &exited);
		if (!exited) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
		}
	}
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == C_OK,
	       "child: status %#x (exit 10 socket, 11 not posted, 12 a disabled MR served, 13 refused with another code, 14 an enabled MR refused, 15 the read brought other bytes)",
	       status);
	EXPECT(oxt_first_not((unsigned char *)buf, PIECE, 'W') == PIECE, "the enabled registration did not take the write");
	EXPECT(oxt_first_not((unsigned char *)buf + PIECE, LEN - PIECE, 'p') == LEN - PIECE, "bytes past the write changed");

	/* A closed cache hit that nothing else holds is kept whole for the
	 * next registration of the same buffer (docs/registration.md,
	 * invariant 8, "Parked registrations are closed"), which must find it
	 * new: a new key, no binding, disabled. The buffer's first
	 * registration (`mr`) was a miss, which is not parked; the hit after
	 * it is. Parking needs the cache's mprotect watch (perf events). */
	OXT_GROUP("a closed cache hit, kept whole for the buffer's next registration (cache_parked), comes back under a new key, unbound, disabled until bound and enabled again");
	{
		struct perf_event_attr pa = { .type = PERF_TYPE_SOFTWARE, .size = sizeof pa,
					      .config = PERF_COUNT_SW_DUMMY, .disabled = 1,
					      .exclude_kernel = 1, .exclude_hv = 1 };
		struct oxmr_mr_stats st = { .size = sizeof st };
		struct oxmr_mr_ops *ops = NULL;
		struct fid_mr *hit = NULL, *again = NULL;
		int pfd = (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
		uint64_t old;

		if (pfd < 0) {
			oxt_skip("perf_event_open(SW_DUMMY) failed (%s): no mprotect watch, so nothing is parked",
				 strerror(errno));
		} else {
			close(pfd);
			REQUIRE_RC(fi_open_ops(&domain->fid, OXMR_MR_OPS_NAME, 0, (void **)&ops, NULL), 0);
			EXPECT_RC(fi_close(&mr->fid), 0);
			mr = NULL;
			REQUIRE_RC(fi_mr_reg(domain, buf, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &hit, NULL), 0);
			EXPECT_RC(fi_mr_bind(hit, &ep->fid, 0), 0);
			EXPECT_RC(fi_mr_enable(hit), 0);
			old = fi_mr_key(hit);
			EXPECT_RC(fi_close(&hit->fid), 0);
			EXPECT_RC(ops->stats(domain, &st), 0);
			EXPECT(st.cache_parked == 1, "after closing a cache hit: %" PRIu64 " parked, expected 1",
			       st.cache_parked);
			REQUIRE_RC(fi_mr_reg(domain, buf, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &again, NULL), 0);
			mr = again;
			EXPECT_RC(ops->stats(domain, &st), 0);
			EXPECT(st.cache_parked == 0, "after registering the buffer again: %" PRIu64 " parked, expected 0",
			       st.cache_parked);
			EXPECT(again == hit, "the registration was not the parked one (%p, parked %p)", (void *)again,
			       (void *)hit);
			EXPECT(fi_mr_key(again) != old, "the registration after close has the closed one's key %#" PRIx64,
			       old);
			EXPECT_RC(fi_mr_enable(again), -FI_EINVAL);
			EXPECT_RC(fi_mr_bind(again, &ep->fid, 0), 0);
			EXPECT_RC(fi_mr_enable(again), 0);
		}
	}

	OXT_GROUP("close");
	EXPECT_RC(fi_close(&mr->fid), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	EXPECT_RC(fi_close(&domain->fid), 0);
	EXPECT_RC(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	free(buf);
	close(sock);
	return oxt_done();
}
