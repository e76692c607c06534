/*
 * mr_hit.c: what a registration-cache hit costs through libfabric, one
 * process: fi_mr_reg of the same buffer followed by fi_close, N times
 * (after the first, oxmr serves the pin from its cache; shm and tcp only
 * record the range, so they are the bookkeeping floor). Prints ns per
 * fi_mr_reg + fi_close pair for each size, the best of 5 runs of N (the
 * runs of a quiet machine agree; the best is the least disturbed).
 *
 * usage: FI_PROVIDER_PATH=<dir> mr_hit <provider> [N]
 * Build: gcc -O2 -o mr_hit bench/mr_hit.c $(pkg-config --cflags --libs libfabric)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#define CHECK(x)                                                                          \
	do {                                                                              \
		int rc_ = (int)(x);                                                       \
		if (rc_ < 0) {                                                            \
			fprintf(stderr, "%s: %s\n", #x, fi_strerror(-rc_));               \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 4096, 2 << 20 };
	struct fi_info *hints, *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	long n = argc > 2 ? atol(argv[2]) : 200000;

	if (argc < 2 || n <= 0) {
		fprintf(stderr, "usage: %s <provider> [N]\n", argv[0]);
		return 2;
	}
	hints = fi_allocinfo();
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_LOCAL;
	hints->fabric_attr->prov_name = strdup(argv[1]);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		size_t len = sizes[s];
		char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		double best = 1e30;

		if (buf == MAP_FAILED)
			return 1;
		memset(buf, 1, len);
		for (int run = 0; run < 5; run++) {
			double t0 = now_ns();

			for (long i = 0; i < n; i++) {
				struct fid_mr *mr;

				CHECK(fi_mr_reg(dom, buf, len, FI_SEND | FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ, 0,
						0, 0, &mr, NULL));
				CHECK(fi_close(&mr->fid));
			}
			if ((now_ns() - t0) / n < best)
				best = (now_ns() - t0) / n;
		}
		printf("%s %zu B: %.1f ns per fi_mr_reg + fi_close\n", argv[1], len, best);
		munmap(buf, len);
	}
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
