/*
 * self_pp.c: the software cost of a small message, without the cost of
 * moving it between cores: one process, one thread, two RDM endpoints on
 * 127.0.0.1 (for oxmr: its shared-memory wire), an 8-byte tagged
 * ping-pong between them, each side's receive posted before the send.
 * Everything stays in one core's caches, so the time per round trip is
 * what the provider's code costs for two sends, two receives and their
 * completions (four fi_cq_read calls that find an entry, plus the empty
 * ones between). Compare with a two-process ping-pong on two cores
 * (fi_rdm_tagged_pingpong) to see how much of that latency is the cache
 * lines crossing between the cores.
 *
 * LATE=1: each receive is posted after its message arrived and a read of
 * the CQ (which drives progress) took the message in, so every message
 * is unexpected: kept by the provider, then matched by the receive
 * posted for it (what an MPI rank that sends before its peer posts the
 * receive costs that peer). The read that takes it in finds no entry and
 * is counted as empty.
 *
 * usage: [PROV=oxmr|shm] [LATE=1] FI_PROVIDER_PATH=<dir> self_pp [N]
 * Build: gcc -O2 -o self_pp bench/self_pp.c $(pkg-config --cflags --libs libfabric)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include "bench.h"

struct ep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
	char name[64];
	size_t namelen;
};

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;
static long empty;

static void open_ep(struct ep *e)
{
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };

	CHECK(fi_endpoint(dom, info, &e->ep, NULL));
	CHECK(fi_cq_open(dom, &cqa, &e->cq, NULL));
	CHECK(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(e->ep, &av->fid, 0));
	CHECK(fi_enable(e->ep));
	e->namelen = sizeof e->name;
	CHECK(fi_getname(&e->ep->fid, e->name, &e->namelen));
}

/* An inject, retried (reading both CQs, which drives progress) while the
 * provider says EAGAIN (shm does until its peer is mapped). */
static void inject(struct ep *from, struct ep *other, char *buf, uint64_t tag)
{
	ssize_t r;

	while ((r = fi_tinject(from->ep, buf, 8, from->peer, tag)) == -FI_EAGAIN) {
		fi_cq_read(from->cq, NULL, 0);
		fi_cq_read(other->cq, NULL, 0);
	}
	CHECK(r);
}

/* Read `cq` until it yields one entry. */
static void one(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry c;
	ssize_t n;

	while ((n = fi_cq_read(cq, &c, 1)) == -FI_EAGAIN)
		empty++;
	if (n != 1) {
		fprintf(stderr, "fi_cq_read: %s\n", fi_strerror((int)-n));
		exit(1);
	}
}

/* LATE=1: a read of `cq` before the receive is posted, so that the
 * message that arrived is taken in unmatched (it yields no entry: there
 * is no receive for it yet). */
static void take_in(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry c;
	ssize_t n = fi_cq_read(cq, &c, 1);

	if (n != -FI_EAGAIN) {
		fprintf(stderr, "fi_cq_read before the receive: %s\n", n < 0 ? fi_strerror((int)-n) : "an entry");
		exit(1);
	}
	empty++;
}

int main(int argc, char **argv)
{
	int late = getenv("LATE") != NULL && strcmp(getenv("LATE"), "0") != 0;
	const char *prov = getenv("PROV") ? getenv("PROV") : "oxmr";
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	struct fi_info *hints = fi_allocinfo();
	long n = argc > 1 ? atol(argv[1]) : 200000;
	char sbuf[8] = "pingpong", rbuf[8];
	struct fi_context ctx[4];
	struct ep a, b;
	double best = 1e30;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	open_ep(&a);
	open_ep(&b);
	CHECK(fi_av_insert(av, b.name, 1, &a.peer, 0, NULL));
	CHECK(fi_av_insert(av, a.name, 1, &b.peer, 0, NULL));
	for (int run = 0; run < 6; run++) {
		double t0 = now_ns(), t;

		empty = 0;
		for (long i = 0; i < n; i++) {
			if (late) {
				inject(&a, &b, sbuf, 1);
				take_in(b.cq);
				CHECK(fi_trecv(b.ep, rbuf, sizeof rbuf, NULL, b.peer, 1, 0, &ctx[0]));
				one(b.cq);
				inject(&b, &a, sbuf, 2);
				take_in(a.cq);
				CHECK(fi_trecv(a.ep, rbuf, sizeof rbuf, NULL, a.peer, 2, 0, &ctx[1]));
				one(a.cq);
				continue;
			}
			CHECK(fi_trecv(b.ep, rbuf, sizeof rbuf, NULL, b.peer, 1, 0, &ctx[0]));
			CHECK(fi_trecv(a.ep, rbuf, sizeof rbuf, NULL, a.peer, 2, 0, &ctx[1]));
			inject(&a, &b, sbuf, 1);
			one(b.cq);
			inject(&b, &a, sbuf, 2);
			one(a.cq);
		}
		t = (now_ns() - t0) / n;
		/* (Run 0 warms up.) */
		if (run > 0 && t < best)
			best = t;
	}
	printf("%s: %.1f ns per round trip (two tagged injects, two receives%s and their completions), %.2f empty reads per round trip in the last run\n",
	       prov, best, late ? " posted late (unexpected)" : "", (double)empty / n);
	return 0;
}
