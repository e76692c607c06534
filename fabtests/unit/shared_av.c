/*
 * shared_av: named AVs shared between processes (fi_av(3) fi_av_attr.name,
 * FI_READ, map_addr; getinfo's FI_SHARED_AV).
 *
 * The parent creates a named FI_AV_MAP AV and inserts addresses (one of
 * them its endpoint A); the child opens the name with FI_READ and must
 * see the same fi_addr -> address mapping (fi_av_lookup), through
 * map_addr too, and the address the parent inserts after it opened (its
 * endpoint B); it sends to A and B through its read-only AV and the
 * parent checks the data. The read-only AV refuses inserts and removes
 * (-FI_EPERM); FI_READ of a name nobody created is -FI_ENOENT; a second
 * creator of a live name is -FI_EBUSY (from the child and from the
 * creator's own process); a removal by the creator reaches the reader;
 * the creator's close removes the AV's file, the reader keeps the
 * addresses it had, a new FI_READ open is -FI_ENOENT and the name is free
 * for a new creator. Run by fabtests/run.sh on the default wire and over
 * TCP.
 */
#include "oxt.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define COUNT 8
#define SMALL 1000
#define LARGE (100 * 1024)

static char av_name[64];

struct name {
	size_t len;
	char bytes[64];
};

static const struct sockaddr_in *dummy4(void)
{
	static struct sockaddr_in s;

	s = oxt_sin("10.1.2.3", 4567);
	return &s;
}

static const struct sockaddr_in6 *dummy6(void)
{
	static struct sockaddr_in6 s;

	s = oxt_sin6("::1", 999);
	return &s;
}

static void put_name(int sock, const struct name *n)
{
	REQUIRE(write(sock, n, sizeof *n) == sizeof *n, "socketpair write");
}

static void get_name(int sock, struct name *n)
{
	REQUIRE(read(sock, n, sizeof *n) == sizeof *n, "socketpair read");
}

/* fi_av_lookup of `fa` is `len` bytes equal to `want`. */
static void expect_lookup(struct fid_av *av, fi_addr_t fa, const void *want, size_t len, int line)
{
	char got[128];
	size_t glen = sizeof got;
	int rc = fi_av_lookup(av, fa, got, &glen);

	if (rc) {
		oxt_fail(__FILE__, line, "fi_av_lookup(%llu): %s", (unsigned long long)fa, fi_strerror(-rc));
		return;
	}
	if (glen != len || memcmp(got, want, len))
		oxt_fail(__FILE__, line, "fi_av_lookup(%llu): %zu bytes, not the %zu bytes inserted",
			 (unsigned long long)fa, glen, len);
}

#define EXPECT_LOOKUP(av, fa, want, len) expect_lookup((av), (fa), (want), (len), __LINE__)

static void av_path(char *buf, size_t len)
{
	snprintf(buf, len, "/dev/shm/oxmr-u%u/av-%s", (unsigned)geteuid(), av_name);
}

/* Wait for `cq`'s one completion (10 s): 0, or an error code. */
static int one_completion(struct fid_cq *cq)
{
	void *ctx;

	return oxt_next_completion(cq, 10000, &ctx);
}

static int child(int sock)
{
	struct oxt_env e;
	struct fi_av_attr aa = { .type = FI_AV_UNSPEC, .name = av_name, .flags = FI_READ };
	struct fi_av_attr other;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fid_av *av = NULL, *av2 = NULL;
	struct fid_cq *cq = NULL;
	struct fid_ep *ep = NULL;
	struct name a, b;
	fi_addr_t fa = 0, *map;
	unsigned char *small = malloc(SMALL), *large = malloc(LARGE);
	struct fi_context ctx[2];
	struct sockaddr_in sin = oxt_sin("127.0.0.1", 5000);

	oxt_reset_counts();
	oxt_prog = "shared_av[child]";
	REQUIRE(small && large, "malloc");
	oxt_open(&e);
	REQUIRE(oxt_get(sock) == 'c', "the parent's go");
	get_name(sock, &a);

	OXT_GROUP("FI_READ opens the creator's AV: its type, map_addr, the same addresses at the same fi_addrs");
	REQUIRE_RC(fi_av_open(e.domain, &aa, &av, NULL), 0);
	EXPECT_EQ(aa.type, FI_AV_MAP);
	map = aa.map_addr;
	REQUIRE(map != NULL, "map_addr was not returned");
	for (int i = 0; i < COUNT; i++)
		EXPECT_EQ(map[i], (fi_addr_t)i);
	EXPECT_LOOKUP(av, map[0], dummy4(), sizeof(struct sockaddr_in));
	EXPECT_LOOKUP(av, map[1], a.bytes, a.len);
	EXPECT_LOOKUP(av, map[2], dummy6(), sizeof(struct sockaddr_in6));
	{
		char buf[64];
		size_t len = sizeof buf;

		EXPECT_RC(fi_av_lookup(av, 3, buf, &len), -FI_EINVAL);
	}

	OXT_GROUP("the FI_READ AV refuses inserts and removes; a second creator -FI_EBUSY; another type -FI_EINVAL");
	EXPECT_RC(fi_av_insert(av, &sin, 1, &fa, 0, NULL), -FI_EPERM);
	EXPECT_RC(fi_av_insertsvc(av, "127.0.0.1", "5000", &fa, 0, NULL), -FI_EPERM);
	fa = 0;
	EXPECT_RC(fi_av_remove(av, &fa, 1, 0), -FI_EPERM);
	other = (struct fi_av_attr){ .type = FI_AV_MAP, .count = COUNT, .name = av_name };
	EXPECT_RC(fi_av_open(e.domain, &other, &av2, NULL), -FI_EBUSY);
	other = (struct fi_av_attr){ .type = FI_AV_TABLE, .name = av_name, .flags = FI_READ };
	EXPECT_RC(fi_av_open(e.domain, &other, &av2, NULL), -FI_EINVAL);
	EXPECT_LOOKUP(av, map[0], dummy4(), sizeof(struct sockaddr_in));

	oxt_put(sock, 'r');
	REQUIRE(oxt_get(sock) == 'i', "the parent's insert");
	get_name(sock, &b);

	OXT_GROUP("an address inserted after the reader opened is seen; sends through the reader arrive");
	EXPECT_LOOKUP(av, map[3], b.bytes, b.len);
	REQUIRE_RC(fi_cq_open(e.domain, &ca, &cq, NULL), 0);
	REQUIRE_RC(fi_endpoint(e.domain, e.info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	oxt_fill(small, SMALL, 1);
	oxt_fill(large, LARGE, 2);
	EXPECT_RC(fi_send(ep, small, SMALL, NULL, map[1], &ctx[0]), 0);
	EXPECT_RC(one_completion(cq), 0);
	EXPECT_RC(fi_send(ep, large, LARGE, NULL, map[3], &ctx[1]), 0);
	EXPECT_RC(one_completion(cq), 0);
	oxt_put(sock, 's');

	REQUIRE(oxt_get(sock) == 'd', "the parent's removal");
	OXT_GROUP("a removal by the creator reaches the reader");
	{
		char buf[64];
		size_t len = sizeof buf;

		EXPECT_RC(fi_av_lookup(av, map[0], buf, &len), -FI_EINVAL);
	}
	EXPECT_LOOKUP(av, map[1], a.bytes, a.len);
	oxt_put(sock, 'e');

	REQUIRE(oxt_get(sock) == 'x', "the parent's close");
	OXT_GROUP("after the creator's close: the reader keeps its addresses, FI_READ of the name -FI_ENOENT");
	EXPECT_LOOKUP(av, map[1], a.bytes, a.len);
	EXPECT_LOOKUP(av, map[3], b.bytes, b.len);
	other = (struct fi_av_attr){ .type = FI_AV_UNSPEC, .name = av_name, .flags = FI_READ };
	EXPECT_RC(fi_av_open(e.domain, &other, &av2, NULL), -FI_ENOENT);

	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	oxt_close(&e);
	free(small);
	free(large);
	oxt_put(sock, 'z');
	return oxt_done();
}

struct rx {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct name name;
};

static void rx_open(struct oxt_env *e, struct fid_av *av, struct rx *r)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };

	memset(r, 0, sizeof *r);
	REQUIRE_RC(fi_cq_open(e->domain, &ca, &r->cq, NULL), 0);
	REQUIRE_RC(fi_endpoint(e->domain, e->info, &r->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(r->ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(r->ep), 0);
	r->name.len = sizeof r->name.bytes;
	REQUIRE_RC(fi_getname(&r->ep->fid, r->name.bytes, &r->name.len), 0);
}

/* Read `r`'s CQ once: 1 for a receive of `len` bytes, 0 nothing, -1 error. */
static int rx_poll(struct rx *r, size_t *len)
{
	struct fi_cq_tagged_entry ent;
	ssize_t n = fi_cq_read(r->cq, &ent, 1);
	void *ectx;

	if (n == 1) {
		*len = ent.len;
		return 1;
	}
	if (n == -FI_EAVAIL) {
		EXPECT(0, "a receive failed: %s", fi_strerror(OXT_READERR(r->cq, &ectx)));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct oxt_env e;
	struct fi_info *hints, *info = NULL;
	struct fi_av_attr aa = { .type = FI_AV_MAP, .count = COUNT };
	struct fi_av_attr other;
	struct fid_av *av = NULL, *av2 = NULL;
	struct rx ra, rb;
	unsigned char *small = malloc(SMALL), *large = malloc(LARGE);
	struct fi_context ctx[2];
	fi_addr_t fa[3] = { 9, 9, 9 }, fb = 9, *map;
	char path[256], c;
	struct stat st;
	size_t la = 0, lb = 0;
	int sock, status, got_a = 0, got_b = 0, sent = 0;
	pid_t pid;
	double until;

	oxt_init(argv[0]);
	(void)argc;
	REQUIRE(small && large, "malloc");
	snprintf(av_name, sizeof av_name, "oxt-sav-%d", (int)getpid());
	aa.name = av_name;
	av_path(path, sizeof path);
	pid = oxt_fork(child, &sock);
	oxt_open(&e);

	OXT_GROUP("getinfo offers FI_SHARED_AV for RDM endpoints and their domain");
	EXPECT(e.info->caps & FI_SHARED_AV, "caps %#llx", (unsigned long long)e.info->caps);
	EXPECT(e.info->domain_attr->caps & FI_SHARED_AV, "domain caps %#llx",
	       (unsigned long long)e.info->domain_attr->caps);
	hints = oxt_hints(FI_EP_RDM);
	hints->caps = FI_MSG | FI_SHARED_AV;
	EXPECT_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(info);
	fi_freeinfo(hints);

	OXT_GROUP("FI_READ of a name nobody created -FI_ENOENT; FI_READ without a name -FI_EINVAL");
	other = (struct fi_av_attr){ .type = FI_AV_MAP, .name = "oxt-sav-nobody-made-this", .flags = FI_READ };
	EXPECT_RC(fi_av_open(e.domain, &other, &av2, NULL), -FI_ENOENT);
	other.name = NULL;
	EXPECT_RC(fi_av_open(e.domain, &other, &av2, NULL), -FI_EINVAL);

	OXT_GROUP("the creator: a named FI_AV_MAP AV, its map_addr, its file, inserts; a second creator -FI_EBUSY");
	REQUIRE_RC(fi_av_open(e.domain, &aa, &av, NULL), 0);
	map = aa.map_addr;
	REQUIRE(map != NULL, "map_addr was not returned");
	for (int i = 0; i < COUNT; i++)
		EXPECT_EQ(map[i], (fi_addr_t)i);
	EXPECT(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
	       "%s: %s", path, strerror(errno));
	rx_open(&e, av, &ra);
	rx_open(&e, av, &rb);
	EXPECT_RC(fi_av_insert(av, dummy4(), 1, &fa[0], 0, NULL), 1);
	EXPECT_RC(fi_av_insert(av, ra.name.bytes, 1, &fa[1], 0, NULL), 1);
	EXPECT_RC(fi_av_insert(av, dummy6(), 1, &fa[2], 0, NULL), 1);
	for (int i = 0; i < 3; i++)
		EXPECT_EQ(fa[i], map[i]);
	other = (struct fi_av_attr){ .type = FI_AV_MAP, .name = av_name };
	EXPECT_RC(fi_av_open(e.domain, &other, &av2, NULL), -FI_EBUSY);

	oxt_put(sock, 'c');
	put_name(sock, &ra.name);
	REQUIRE(oxt_get(sock) == 'r', "the child's reader checks");
	oxt_fill(small, SMALL, 0);
	oxt_fill(large, LARGE, 0);
	REQUIRE_RC(fi_recv(ra.ep, small, SMALL, NULL, FI_ADDR_UNSPEC, &ctx[0]), 0);
	REQUIRE_RC(fi_recv(rb.ep, large, LARGE, NULL, FI_ADDR_UNSPEC, &ctx[1]), 0);

	OXT_GROUP("the child's sends through its FI_READ AV reach both endpoints, data intact");
	EXPECT_RC(fi_av_insert(av, rb.name.bytes, 1, &fb, 0, NULL), 1);
	EXPECT_EQ(fb, map[3]);
	oxt_put(sock, 'i');
	put_name(sock, &rb.name);
	until = oxt_now_ms() + 20000;
	while ((!got_a || !got_b || !sent) && oxt_now_ms() < until) {
		struct pollfd p = { .fd = sock, .events = POLLIN };

		if (!got_a)
			got_a = rx_poll(&ra, &la);
		if (!got_b)
			got_b = rx_poll(&rb, &lb);
		if (!sent && poll(&p, 1, 0) == 1)
			sent = oxt_get(sock) == 's' ? 1 : -1;
	}
	EXPECT(got_a == 1 && la == SMALL && oxt_same(small, SMALL, 1), "A: %d, %zu bytes, %s", got_a, la,
	       oxt_same(small, SMALL, 1) ? "data intact" : "data wrong");
	EXPECT(got_b == 1 && lb == LARGE && oxt_same(large, LARGE, 2), "B: %d, %zu bytes, %s", got_b, lb,
	       oxt_same(large, LARGE, 2) ? "data intact" : "data wrong");
	REQUIRE(sent == 1, "the child did not report its sends");

	OXT_GROUP("a removal: the reader sees it (checked in the child)");
	EXPECT_RC(fi_av_remove(av, &fa[0], 1, 0), 0);
	oxt_put(sock, 'd');
	REQUIRE(oxt_get(sock) == 'e', "the child's removal check");

	OXT_GROUP("the creator's close removes the AV's file; the name is free for a new creator");
	EXPECT_RC(fi_close(&ra.ep->fid), 0);
	EXPECT_RC(fi_close(&rb.ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT(lstat(path, &st) != 0 && errno == ENOENT, "%s is still there", path);
	oxt_put(sock, 'x');
	c = oxt_get(sock);
	EXPECT(c == 'z', "the child's last checks");
	other = (struct fi_av_attr){ .type = FI_AV_TABLE, .name = av_name };
	if (fi_av_open(e.domain, &other, &av2, NULL) == 0) {
		EXPECT(lstat(path, &st) == 0, "%s: %s", path, strerror(errno));
		EXPECT_RC(fi_close(&av2->fid), 0);
	} else {
		EXPECT(0, "a new creator of the closed name was refused");
	}
	EXPECT_RC(fi_close(&ra.cq->fid), 0);
	EXPECT_RC(fi_close(&rb.cq->fid), 0);

	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's checks failed (status %#x)", status);
	oxt_close(&e);
	free(small);
	free(large);
	return oxt_done();
}
