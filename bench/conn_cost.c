/*
 * conn_cost.c: what a TCP connection costs oxmr, in one process, two RDM
 * endpoints on 127.0.0.1 over the TCP wire (FI_OXMR_WIRE=tcp):
 *
 *   first N       N times: open two fresh endpoints, post one receive, and
 *                 time one 8-byte tagged send from the first fi_tsend to the
 *                 receive's completion (connect, hello, with a job key the
 *                 challenge and proofs, the frame): median, min, max in us.
 *                 Run it with and without FI_OXMR_AUTH_KEY.
 *   idle K        K raw connections to one endpoint that never say a word,
 *                 then an 8-byte pingpong between the two endpoints
 *                 (median round trip, us) and how many fi_cq_read calls the
 *                 endpoint with the idle connections makes in one second
 *                 alone. Compare K = 0 and K = 2000, and two builds.
 *   peers K       K real peers: a second process opens K endpoints (one
 *                 fabric, domain, CQ and AV) and each sends one 8-byte
 *                 tagged message to the target endpoint, then they stay
 *                 connected and quiet; then the same pingpong as `idle`
 *                 between the target and a busy endpoint of this process,
 *                 and what the peers cost in memory: the target process's
 *                 resident set grown per peer, and the peers' process's per
 *                 endpoint. PROV=tcp runs it over libfabric's tcp provider
 *                 (the anchor), default oxmr (its TCP wire).
 *
 * usage: FI_PROVIDER_PATH=<dir> conn_cost first <N> | idle <K> | peers <K>
 * Build: gcc -O2 -o conn_cost bench/conn_cost.c $(pkg-config --cflags --libs libfabric)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#define CHECK(x)                                                                                      \
	do {                                                                                          \
		int rc_ = (int)(x);                                                                   \
		if (rc_ < 0) {                                                                        \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, fi_strerror(-rc_)); \
			exit(1);                                                                      \
		}                                                                                     \
	} while (0)

struct ep {
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct sockaddr_in name;
	fi_addr_t peer;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void ep_open(struct ep *e)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	size_t len = sizeof e->name;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	hints->fabric_attr->prov_name = strdup(getenv("PROV") ? getenv("PROV") : "oxmr");
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &e->info));
	fi_freeinfo(hints);
	CHECK(fi_fabric(e->info->fabric_attr, &e->fab, NULL));
	CHECK(fi_domain(e->fab, e->info, &e->dom, NULL));
	CHECK(fi_endpoint(e->dom, e->info, &e->ep, NULL));
	CHECK(fi_cq_open(e->dom, &cqa, &e->cq, NULL));
	CHECK(fi_av_open(e->dom, &ava, &e->av, NULL));
	CHECK(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(e->ep, &e->av->fid, 0));
	CHECK(fi_enable(e->ep));
	CHECK(fi_getname(&e->ep->fid, &e->name, &len));
}

static void ep_close(struct ep *e)
{
	fi_close(&e->ep->fid);
	fi_close(&e->av->fid);
	fi_close(&e->cq->fid);
	fi_close(&e->dom->fid);
	fi_close(&e->fab->fid);
	fi_freeinfo(e->info);
}

static void pair(struct ep *a, struct ep *b)
{
	ep_open(a);
	ep_open(b);
	CHECK(fi_av_insert(a->av, &b->name, 1, &a->peer, 0, NULL));
	CHECK(fi_av_insert(b->av, &a->name, 1, &b->peer, 0, NULL));
}

/* Progress both until `cq` completes one. */
static void wait_one(struct ep *a, struct ep *b, struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;

	for (;;) {
		ssize_t n = fi_cq_read(cq, &e, 1);

		if (n == 1)
			return;
		if (n != -FI_EAGAIN) {
			fprintf(stderr, "fi_cq_read: %s\n", fi_strerror((int)-n));
			exit(1);
		}
		fi_cq_read(a->cq == cq ? b->cq : a->cq, &e, 0);
	}
}

static int cmp(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* A send, retried (with progress on both) while the provider says EAGAIN
 * (libfabric's tcp does until its connection is up). */
static void tsend(struct ep *a, struct ep *b, struct ep *from, void *buf, size_t len, uint64_t tag)
{
	ssize_t r;

	while ((r = fi_tsend(from->ep, buf, len, NULL, from->peer, tag, NULL)) == -FI_EAGAIN) {
		fi_cq_read(a->cq, NULL, 0);
		fi_cq_read(b->cq, NULL, 0);
	}
	CHECK(r);
}

static void report(const char *what, double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	printf("%s: median %.1f us (min %.1f, max %.1f, %d runs)\n", what, v[n / 2], v[0], v[n - 1], n);
}

/* The 8-byte round trip between a and b, and b's progress calls per
 * second alone, with `n` `what` on b. */
static void pingpong(struct ep *a, struct ep *b, int n, const char *what)
{
	char buf[8] = "12345678", rb[8];
	struct fi_context c1, c2;
	double t[2001], end;
	long calls = 0;

	end = now_us() + 200e3;
	while (now_us() < end)
		fi_cq_read(b->cq, NULL, 0);
	for (int i = 0; i < 2001; i++) {
		double t0 = now_us();

		CHECK(fi_trecv(b->ep, rb, sizeof rb, NULL, b->peer, 1, 0, &c1));
		CHECK(fi_trecv(a->ep, rb, sizeof rb, NULL, a->peer, 2, 0, &c2));
		tsend(a, b, a, buf, sizeof buf, 1);
		wait_one(a, b, b->cq);
		tsend(a, b, b, buf, sizeof buf, 2);
		wait_one(a, b, a->cq);
		t[i] = now_us() - t0;
		/* (The sends' completions.) */
		wait_one(a, b, a->cq);
		wait_one(a, b, b->cq);
	}
	end = now_us() + 1e6;
	while (now_us() < end) {
		fi_cq_read(b->cq, NULL, 0);
		calls++;
	}
	printf("%d %s: %ld progress calls/s on their endpoint\n", n, what, calls);
	report("8-byte round trip", t + 1, 2000);
}

static long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* The `peers` child: K endpoints on one domain, each sends one message to
 * `to`, reports its resident set growth per endpoint on `out`, then holds
 * everything until `hold` closes. */
static void peers_child(int k, struct sockaddr_in *to, int out, int hold)
{
	struct ep e;
	struct fid_ep **eps = calloc((size_t)k, sizeof *eps);
	fi_addr_t *dst = calloc((size_t)k, sizeof *dst);
	struct fi_context *ctx = calloc((size_t)k, sizeof *ctx);
	struct fi_cq_tagged_entry ce[16];
	char buf[8] = "quietpee", c;
	long before, per;
	int done = 0;

	ep_open(&e);
	before = rss_kib();
	for (int i = 0; i < k; i++) {
		CHECK(fi_endpoint(e.dom, e.info, &eps[i], NULL));
		CHECK(fi_ep_bind(eps[i], &e.cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_ep_bind(eps[i], &e.av->fid, 0));
		CHECK(fi_enable(eps[i]));
	}
	per = (rss_kib() - before) * 1024 / (k ? k : 1);
	CHECK(fi_av_insert(e.av, to, 1, dst, 0, NULL));
	/* (Completions are read as the sends go: the CQ holds 64, and a
	 * provider may hold sends back until there is room for theirs.) */
	for (int i = 0; done < k;) {
		ssize_t n;

		if (i < k) {
			ssize_t r = fi_tsend(eps[i], buf, sizeof buf, NULL, dst[0], 7, &ctx[i]);

			if (r != -FI_EAGAIN) {
				CHECK(r);
				i++;
				continue;
			}
		}
		n = fi_cq_read(e.cq, ce, 16);
		if (n > 0)
			done += (int)n;
		else if (n != -FI_EAGAIN) {
			fprintf(stderr, "peers: fi_cq_read: %s\n", fi_strerror((int)-n));
			exit(1);
		}
	}
	if (write(out, &per, sizeof per) != sizeof per)
		exit(1);
	/* Quiet from here: no progress, as an idle peer of a real job. */
	if (read(hold, &c, 1) < 0)
		exit(1);
	_exit(0);
}

static int peers(int k)
{
	struct ep a, b;
	struct fi_context *ctx = calloc((size_t)k + 1, sizeof *ctx);
	char (*rb)[8] = calloc((size_t)k + 1, 8);
	int res[2], hold[2], got = 0, posted = 0;
	long before, per_ep = 0;
	pid_t child;

	pair(&a, &b);
	before = rss_kib();
	if (pipe(res) || pipe(hold))
		return 1;
	child = fork();
	if (child == 0) {
		close(res[0]);
		close(hold[1]);
		peers_child(k, &b.name, res[1], hold[0]);
	}
	close(res[1]);
	close(hold[0]);
	/* (Receives posted as the queue takes them: a provider's receive
	 * queue may hold fewer than K.) */
	while (got < k) {
		struct fi_cq_tagged_entry ce[16];
		ssize_t n;

		while (posted < k) {
			ssize_t r = fi_trecv(b.ep, rb[posted], 8, NULL, FI_ADDR_UNSPEC, 7, 0, &ctx[posted]);

			if (r == -FI_EAGAIN)
				break;
			CHECK(r);
			posted++;
		}
		n = fi_cq_read(b.cq, ce, 16);

		if (n > 0)
			got += (int)n;
		else if (n != -FI_EAGAIN) {
			fprintf(stderr, "target: fi_cq_read: %s\n", fi_strerror((int)-n));
			return 1;
		}
	}
	if (read(res[0], &per_ep, sizeof per_ep) != sizeof per_ep)
		return 1;
	printf("%d peers: %ld bytes resident per peer on the target, %ld per endpoint in the peers' process\n", k,
	       k ? (rss_kib() - before) * 1024 / k : 0, per_ep);
	pingpong(&a, &b, k, "connected quiet peers");
	close(hold[1]);
	waitpid(child, NULL, 0);
	ep_close(&a);
	ep_close(&b);
	return 0;
}

int main(int argc, char **argv)
{
	char buf[8] = "12345678", rb[8];
	struct fi_context c1, c2;
	struct ep a, b;
	int n;

	setenv("FI_OXMR_WIRE", "tcp", 1);
	if (argc != 3 || (strcmp(argv[1], "first") && strcmp(argv[1], "idle") && strcmp(argv[1], "peers"))) {
		fprintf(stderr, "usage: %s first <N> | idle <K> | peers <K>\n", argv[0]);
		return 2;
	}
	n = atoi(argv[2]);
	if (!strcmp(argv[1], "peers")) {
		struct rlimit rl;

		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		return peers(n);
	}
	if (!strcmp(argv[1], "first")) {
		double *t = calloc((size_t)n, sizeof *t);

		for (int i = 0; i < n; i++) {
			double t0;

			pair(&a, &b);
			CHECK(fi_trecv(b.ep, rb, sizeof rb, NULL, b.peer, 1, 0, &c1));
			t0 = now_us();
			CHECK(fi_tsend(a.ep, buf, sizeof buf, NULL, a.peer, 1, &c2));
			wait_one(&a, &b, b.cq);
			t[i] = now_us() - t0;
			wait_one(&a, &b, a.cq);
			ep_close(&a);
			ep_close(&b);
		}
		report(getenv("FI_OXMR_AUTH_KEY") ? "first message, with a job key" : "first message, no key", t, n);
		return 0;
	}
	{
		struct rlimit rl;
		int *idle = calloc((size_t)n + 1, sizeof *idle);

		/* (Each idle connection is two descriptors here: ours and the
		 * one the endpoint accepted.) */
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		pair(&a, &b);
		for (int i = 0; i < n; i++) {
			idle[i] = socket(AF_INET, SOCK_STREAM, 0);
			if (idle[i] < 0 || connect(idle[i], (struct sockaddr *)&b.name, sizeof b.name)) {
				fprintf(stderr, "idle connection %d: %s\n", i, strerror(errno));
				return 1;
			}
			if (i % 64 == 63)
				fi_cq_read(b.cq, NULL, 0);
		}
		pingpong(&a, &b, n, "idle connections");
		ep_close(&a);
		ep_close(&b);
	}
	return 0;
}
