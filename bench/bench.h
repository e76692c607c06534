/*
 * bench.h: what the one-host ping-pong benchmarks share (self_pp.c,
 * pp_phases.c): a libfabric call checked, and a monotonic clock in ns.
 */
#ifndef OXMR_BENCH_H
#define OXMR_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <rdma/fabric.h>

/* A libfabric call that must succeed: its file, line, text and error, then exit 1. */
#define CHECK(x)                                                                            \
	do {                                                                                \
		int rc_ = (int)(x);                                                         \
		if (rc_ < 0) {                                                              \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,          \
				fi_strerror(-rc_));                                         \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

static inline double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

#endif
