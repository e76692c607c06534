/*
 * line_pp.c: the hardware's floor under a one-host ping-pong. Two threads,
 * pinned to two cores, bounce one cache line: each waits until the other
 * has written the line, then writes it back. No provider, no queue, no
 * completion: what one 8-byte message costs at the least, a cache line's
 * trip from one core to the other and back (a ping-pong's round trip
 * moves at least two, its one-way latency at least one). Prints ns per
 * round trip, the best of 5 runs of N (the runs of a quiet machine agree;
 * a virtual machine's vCPU placement moves it between sittings, which is
 * why bench/hotpaths.sh prints it beside the latency rows).
 *
 * usage: line_pp [N] [core-a] [core-b]   (defaults 1000000, 0, 1)
 * Build: gcc -O2 -pthread -o line_pp bench/line_pp.c
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(128) _Atomic uint64_t line;
static long n = 1000000;

static void pin(int core)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(core, &s);
	if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
		fprintf(stderr, "line_pp: cannot pin to core %d\n", core);
		exit(1);
	}
}

static int core_b;

/* The other side: answers each odd value with the next even one. */
static void *pong(void *arg)
{
	uint64_t runs = (uint64_t)(uintptr_t)arg;

	pin(core_b);
	for (uint64_t r = 0; r < runs; r++) {
		for (long i = 0; i < n; i++) {
			uint64_t want = (r * n + i) * 2 + 1;

			while (atomic_load_explicit(&line, memory_order_acquire) != want)
				;
			atomic_store_explicit(&line, want + 1, memory_order_release);
		}
	}
	return NULL;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int core_a = argc > 2 ? atoi(argv[2]) : 0;
	const uint64_t runs = 5;
	double best = 1e30;
	pthread_t t;

	n = argc > 1 ? atol(argv[1]) : n;
	core_b = argc > 3 ? atoi(argv[3]) : 1;
	if (n <= 0) {
		fprintf(stderr, "usage: %s [N] [core-a] [core-b]\n", argv[0]);
		return 2;
	}
	if (pthread_create(&t, NULL, pong, (void *)(uintptr_t)runs) != 0)
		return 1;
	pin(core_a);
	for (uint64_t r = 0; r < runs; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++) {
			uint64_t v = (r * n + i) * 2;

			atomic_store_explicit(&line, v + 1, memory_order_release);
			while (atomic_load_explicit(&line, memory_order_acquire) != v + 2)
				;
		}
		if ((now_ns() - t0) / n < best)
			best = (now_ns() - t0) / n;
	}
	pthread_join(t, NULL);
	printf("cache line round trip between cores %d and %d: %.1f ns\n", core_a, core_b, best);
	return 0;
}
