/*
 * pp_phases.c: a two-process, two-core 8-byte ping-pong that prints its
 * one-way latency in 20 consecutive chunks of the run, not one figure.
 * On this project's 2-core VM the latency of every one-host provider
 * switches between two levels in the middle of a run (the VM's vCPU
 * placement: bench/line_pp.c sees the same switch), so one run of
 * fi_rdm_pingpong can report either level or anything between them. The
 * chunks show which level each part of a run was at, and so which runs
 * of two providers are comparable.
 *
 * The parent (core 0) and a forked child (core 1) each open their own
 * fabric, domain, RDM endpoint and CQ, swap addresses over a pipe, then
 * ping-pong: each side posts its receive, then the parent injects and
 * waits for the answer; the child waits, then injects back. Receives are
 * tagged and share the endpoint's one CQ (fi_tinject, fi_trecv: what
 * Open MPI's ofi MTL asks of a provider), or, with MSG=1, untagged with a
 * separate transmit CQ (fi_inject, fi_recv: fi_rdm_pingpong's shape).
 * The completion loop is a bare fi_cq_read spin, as fi_rdm_pingpong's.
 * Asserts nothing.
 *
 * usage: [PROV=oxmr|shm] [MSG=1] FI_PROVIDER_PATH=<dir> pp_phases [N]
 *   (N round trips, default 400000; prints ns one-way per chunk, then
 *   the whole run's)
 * Build: gcc -O2 -o pp_phases bench/pp_phases.c $(pkg-config --cflags --libs libfabric)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include "bench.h"

#define CHUNKS 20

static void full_io(ssize_t r, size_t want)
{
	if (r != (ssize_t)want) {
		fprintf(stderr, "pp_phases: the address exchange over a pipe failed\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *prov = getenv("PROV") ? getenv("PROV") : "oxmr";
	int msg = getenv("MSG") && atoi(getenv("MSG"));
	long n = argc > 1 ? atol(argv[1]) : 400000, chunk;
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_cq *cq, *txcq;
	struct fi_cq_tagged_entry c;
	struct fi_context ctx;
	char name[64] = { 0 }, other[64], sbuf[8] = "pingpong", rbuf[8];
	size_t namelen = sizeof name;
	int to_child[2], to_parent[2], child, shm = !strcmp(prov, "shm");
	double t0, tc;
	fi_addr_t peer;
	cpu_set_t cpus;
	pid_t pid;
	ssize_t r;

	if (n < CHUNKS)
		n = CHUNKS;
	chunk = n / CHUNKS;
	if (pipe(to_child) || pipe(to_parent)) {
		perror("pipe");
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	child = pid == 0;
	CPU_ZERO(&cpus);
	CPU_SET(child, &cpus);
	if (sched_setaffinity(0, sizeof cpus, &cpus))
		perror("sched_setaffinity (running unpinned)");

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = msg ? FI_MSG : FI_TAGGED;
	hints->fabric_attr->prov_name = strdup(prov);
	/* (shm names its queue after the source address: two processes
	 * asking for the same one would collide; oxmr takes a free port.) */
	CHECK(fi_getinfo(FI_VERSION(1, 17), shm ? NULL : "127.0.0.1", NULL, shm ? 0 : FI_SOURCE, hints,
			 &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	CHECK(fi_av_open(dom, &ava, &av, NULL));
	CHECK(fi_endpoint(dom, info, &ep, NULL));
	CHECK(fi_cq_open(dom, &cqa, &cq, NULL));
	if (msg) {
		CHECK(fi_cq_open(dom, &cqa, &txcq, NULL));
		CHECK(fi_ep_bind(ep, &cq->fid, FI_RECV));
		CHECK(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT));
	} else {
		txcq = cq;
		CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	}
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_enable(ep));
	CHECK(fi_getname(&ep->fid, name, &namelen));
	if (child) {
		full_io(write(to_parent[1], name, sizeof name), sizeof name);
		full_io(read(to_child[0], other, sizeof other), sizeof other);
	} else {
		full_io(read(to_parent[0], other, sizeof other), sizeof other);
		full_io(write(to_child[1], name, sizeof name), sizeof name);
	}
	if (fi_av_insert(av, other, 1, &peer, 0, NULL) != 1) {
		fprintf(stderr, "pp_phases: fi_av_insert of the peer's address failed\n");
		return 1;
	}

	t0 = tc = now_ns();
	for (long i = 0; i < n; i++) {
		if (msg)
			CHECK(fi_recv(ep, rbuf, sizeof rbuf, NULL, peer, &ctx));
		else
			CHECK(fi_trecv(ep, rbuf, sizeof rbuf, NULL, peer, 1, 0, &ctx));
		for (int turn = 0; turn < 2; turn++) {
			if (turn == child) {
				while ((r = msg ? fi_inject(ep, sbuf, 8, peer) : fi_tinject(ep, sbuf, 8, peer, 1)) ==
				       -FI_EAGAIN)
					fi_cq_read(txcq, NULL, 0);
				CHECK(r);
			} else {
				while ((r = fi_cq_read(cq, &c, 1)) == -FI_EAGAIN)
					;
				if (r != 1) {
					fprintf(stderr, "pp_phases: fi_cq_read: %s\n", fi_strerror((int)-r));
					return 1;
				}
			}
		}
		if (!child && (i + 1) % chunk == 0 && (i + 1) / chunk <= CHUNKS) {
			double t = now_ns();

			printf("%.0f ", (t - tc) / chunk / 2);
			tc = t;
		}
	}
	if (child)
		return 0;
	printf("| %.1f ns one-way (%s%s)\n", (now_ns() - t0) / n / 2, prov, msg ? ", untagged" : "");
	wait(NULL);
	return 0;
}
