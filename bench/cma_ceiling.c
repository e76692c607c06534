/*
 * The copy ceiling of this machine for same-host transfers: how fast
 * process_vm_readv (or process_vm_writev) moves SIZE bytes when nothing
 * else happens (no queue, no protocol, no key check). "one-way": one
 * process copies from (or into) another's buffer in a loop; "two-way": two
 * processes do so to each other at the same time (what fi_rma_bw does,
 * since both sides post RMA); "two-way-same": two-way, each process
 * copying the other's buffer into its own buffer at the same address
 * (what `fi_rma_bw -o read` does: each side reads the peer's rx_buf into
 * its own rx_buf, so every line one core writes is a line the other core
 * reads, and moves between the cores on every pass). Each process copies
 * the same buffers again and again, as fabtests does. Prints MB/s per
 * copying process (1e6 bytes/s, as fabtests prints).
 *
 * "memcpy" instead of read or write: each copying process copies its own
 * buffer into its own other buffer with memcpy, no kernel and no other
 * process's memory involved (two-way-same counts as two-way): the speed
 * of memory itself with one or both cores copying, above which no
 * single-copy transfer between processes can go.
 *
 *   cc -O2 -o /tmp/cma_ceiling bench/cma_ceiling.c
 *   /tmp/cma_ceiling SIZE one-way|two-way|two-way-same [read|write|memcpy] [seconds]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int use_write, use_memcpy;

/* Copy `peer`'s `src` into our `dst` (read), or our `src` into `peer`'s
 * `dst` (write), or (memcpy) our `src` into our `dst`, for `secs`
 * seconds; returns MB/s. */
static double read_loop(pid_t peer, char *dst, char *src, size_t size, double secs)
{
	double t0 = now(), t;
	size_t n = 0;

	do {
		if (use_memcpy) {
			memcpy(dst, src, size);
			/* (Keeps the compiler from dropping repeated copies.) */
			__asm__ volatile("" : : "r"(dst), "r"(src) : "memory");
			n++;
			t = now() - t0;
			continue;
		}
		struct iovec l = { use_write ? src : dst, size };
		struct iovec r = { use_write ? dst : src, size };
		ssize_t got = use_write ? process_vm_writev(peer, &l, 1, &r, 1, 0)
					: process_vm_readv(peer, &l, 1, &r, 1, 0);

		if (got != (ssize_t)size) {
			perror(use_write ? "process_vm_writev" : "process_vm_readv");
			exit(1);
		}
		n++;
		t = now() - t0;
	} while (t < secs);
	return n * (double)size / t / 1e6;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SIZE one-way|two-way|two-way-same [read|write|memcpy] [seconds]\n",
			argv[0]);
		return 2;
	}
	size_t size = strtoull(argv[1], NULL, 0);
	int same = !strcmp(argv[2], "two-way-same");
	int two = same || !strcmp(argv[2], "two-way");
	double secs = argc > 4 ? atof(argv[4]) : 1.0;

	use_write = argc > 3 && !strcmp(argv[3], "write");
	use_memcpy = argc > 3 && !strcmp(argv[3], "memcpy");
	/* Same addresses in both processes after fork: each reads the other's
	 * `src` into its own `dst`. */
	char *src = aligned_alloc(4096, size), *dst = aligned_alloc(4096, size);
	volatile int *go = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int fd[2];

	if (!src || !dst || go == MAP_FAILED || pipe(fd)) {
		perror("setup");
		return 1;
	}
	memset(src, 1, size);
	memset(dst, 2, size);
	if (same && !use_memcpy)
		src = dst;
	pid_t parent = getpid(), child = fork();

	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		__sync_fetch_and_add(go, 1);
		while (*go < 2)
			;
		if (two) {
			double mb = read_loop(parent, dst, src, size, secs);

			if (write(fd[1], &mb, sizeof mb) != sizeof mb)
				return 1;
			/* Stay alive until the parent is done reading us. */
			while (*go < 3)
				usleep(1000);
		} else {
			while (*go < 3)
				usleep(1000);
		}
		return 0;
	}
	__sync_fetch_and_add(go, 1);
	while (*go < 2)
		;
	double mine = read_loop(child, dst, src, size, secs), theirs = 0;

	if (two && read(fd[0], &theirs, sizeof theirs) != sizeof theirs)
		return 1;
	*go = 3;
	waitpid(child, NULL, 0);
	if (two)
		printf("%.2f\n", (mine + theirs) / 2);
	else
		printf("%.2f\n", mine);
	return 0;
}
