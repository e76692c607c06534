/*
 * One process, two oxmr RDM endpoints: a send (or inject) of 8 bytes from
 * the first to a receive posted on the second, the receive's completion
 * read, and (for fi_tsend) the send's. Prints nanoseconds per round: the
 * provider's software path for a small message without a second core or
 * cache-line transfers between cores (what fi_rdm_pingpong adds on top).
 *
 *   cc -O2 -o /tmp/round bench/round.c -lfabric
 *   FI_PROVIDER_PATH=build /tmp/round [rounds] [inject: 0|1]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#define CK(x)                                                                  \
	do {                                                                   \
		int rc_ = (int)(x);                                            \
		if (rc_) {                                                     \
			fprintf(stderr, "%s: %d (%s)\n", #x, rc_,              \
				fi_strerror(-rc_));                            \
			exit(1);                                               \
		}                                                              \
	} while (0)

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 1000000;
	int inject = argc > 2 ? atoi(argv[2]) : 0;
	int warmup = 10000;
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	fi_addr_t addr[2];
	char sbuf[64] = { 0 }, rbuf[64];
	struct fi_context2 sctx, rctx;
	struct fi_cq_tagged_entry e;
	double t0 = 0;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_MSG;
	hints->fabric_attr->prov_name = strdup("oxmr");
	CK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CK(fi_fabric(info->fabric_attr, &fab, NULL));
	CK(fi_domain(fab, info, &dom, NULL));
	CK(fi_av_open(dom, &aa, &av, NULL));
	for (int i = 0; i < 2; i++) {
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 128 };
		char name[64];
		size_t len = sizeof name;

		CK(fi_cq_open(dom, &ca, &cq[i], NULL));
		CK(fi_endpoint(dom, info, &ep[i], NULL));
		CK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
		CK(fi_ep_bind(ep[i], &av->fid, 0));
		CK(fi_enable(ep[i]));
		CK(fi_getname(&ep[i]->fid, name, &len));
		if (fi_av_insert(av, name, 1, &addr[i], 0, NULL) != 1) {
			fprintf(stderr, "fi_av_insert failed\n");
			return 1;
		}
	}
	for (int i = 0; i < rounds + warmup; i++) {
		if (i == warmup)
			t0 = now_ns();
		CK(fi_trecv(ep[1], rbuf, sizeof rbuf, NULL, addr[0], 7, 0, &rctx));
		if (inject)
			CK(fi_tinject(ep[0], sbuf, 8, addr[1], 7));
		else
			CK(fi_tsend(ep[0], sbuf, 8, NULL, addr[1], 7, &sctx));
		while (fi_cq_read(cq[1], &e, 1) != 1)
			;
		if (!inject)
			while (fi_cq_read(cq[0], &e, 1) != 1)
				;
	}
	printf("%.1f ns per round (%s)\n", (now_ns() - t0) / rounds,
	       inject ? "fi_tinject" : "fi_tsend");
	for (int i = 0; i < 2; i++) {
		fi_close(&ep[i]->fid);
		fi_close(&cq[i]->fid);
	}
	fi_close(&av->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
