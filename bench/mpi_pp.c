/*
 * Two-rank MPI latency and bandwidth, for bench/compare_mpi.sh.
 *
 * Latency: ping-pong, half the round trip, at 8 B and 4 KiB.
 * Bandwidth: rank 0 posts a window of 16 MPI_Isend, rank 1 16 MPI_Irecv,
 * then a zero-byte answer; bytes moved per second, at 64 KiB, 1 MiB and
 * 16 MiB. The first round of every size checks the bytes received (a
 * transport that loses data does not get a figure).
 *
 * Prints "lat <bytes> <us>" and "bw <bytes> <MB/s>" lines from rank 0.
 *
 * `mpi_pp sweep [iters]` (for bench/sweep.sh) instead runs the ping-pong at
 * every power of two from 1 B to 4 MiB, checking the bytes of the first
 * round of each size, and prints "pp <bytes> <us> <MB/s>": half the round
 * trip, and the bytes over that time (as fi_pingpong's MB/sec). `iters`
 * (default 2000) is the round trips per size up to 64 KiB, fewer above.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 16

static void fill(unsigned char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + (size_t)seed);
}

static int same(const unsigned char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 31 + (size_t)seed))
			return 0;
	return 1;
}

/* Ping-pong of `sz` bytes between ranks 0 and 1, `iters` round trips
 * after `warm`; rank 0 returns half the round trip in seconds. The first
 * warm-up round checks the bytes (counted in *bad on rank 1). */
static double pingpong(unsigned char *buf, size_t sz, int iters, int warm, int rank, int *bad)
{
	double t0 = 0;

	for (int i = -warm; i < iters; i++) {
		if (i == 0) {
			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
		}
		if (rank == 0) {
			if (i == -warm)
				fill(buf, sz, 1);
			MPI_Send(buf, (int)sz, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)sz, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(buf, (int)sz, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (i == -warm && !same(buf, sz, 1))
				(*bad)++;
			MPI_Send(buf, (int)sz, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	return (MPI_Wtime() - t0) / iters / 2;
}

/* The sweep mode: see the top of this file. */
static int sweep(int rank, int iters)
{
	const size_t max = 4 << 20;
	unsigned char *buf = malloc(max);
	int bad = 0;

	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (size_t sz = 1; sz <= max; sz *= 2) {
		/* Fewer round trips for large sizes: each takes longer. */
		int it = sz <= 65536 ? iters : (int)(iters * 65536 / sz);
		double t;

		if (it < 10)
			it = 10;
		t = pingpong(buf, sz, it, it / 10 + 1, rank, &bad);
		if (rank == 0)
			printf("pp %zu %.3f %.2f\n", sz, t * 1e6, (double)sz / t / 1e6);
		fflush(stdout);
	}
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && bad)
		printf("data errors %d\n", bad);
	free(buf);
	return bad;
}

int main(int argc, char **argv)
{
	static const size_t lat_sizes[] = { 8, 4096 };
	static const size_t bw_sizes[] = { 65536, 1 << 20, 16 << 20 };
	int rank, n, bad = 0;
	unsigned char *buf;
	MPI_Request req[WINDOW];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (n != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_pp: run with 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (argc > 1 && strcmp(argv[1], "sweep") == 0) {
		int bad = sweep(rank, argc > 2 ? atoi(argv[2]) : 2000);

		MPI_Finalize();
		return bad ? 1 : 0;
	}
	buf = malloc((size_t)WINDOW * (16 << 20));
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 2);

	for (size_t s = 0; s < sizeof lat_sizes / sizeof lat_sizes[0]; s++) {
		size_t sz = lat_sizes[s];
		double t = pingpong(buf, sz, 20000, 1000, rank, &bad);

		if (rank == 0)
			printf("lat %zu %.2f\n", sz, t * 1e6);
	}

	for (size_t s = 0; s < sizeof bw_sizes / sizeof bw_sizes[0]; s++) {
		size_t sz = bw_sizes[s];
		int iters = sz >= (16 << 20) ? 6 : sz >= (1 << 20) ? 40 : 400, warm = 2;
		double t0 = 0;

		for (int i = -warm; i < iters; i++) {
			if (i == 0) {
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = MPI_Wtime();
			}
			for (int w = 0; w < WINDOW; w++) {
				unsigned char *p = buf + (size_t)w * sz;
				if (rank == 0) {
					if (i == -warm)
						fill(p, sz, w + 2);
					MPI_Isend(p, (int)sz, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
				} else {
					MPI_Irecv(p, (int)sz, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
				}
			}
			MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
			if (rank == 1 && i == -warm)
				for (int w = 0; w < WINDOW; w++)
					bad += !same(buf + (size_t)w * sz, sz, w + 2);
			if (rank == 0)
				MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			else
				MPI_Send(NULL, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
		}
		if (rank == 0)
			printf("bw %zu %.1f\n", sz, (double)sz * WINDOW * iters / (MPI_Wtime() - t0) / 1e6);
	}

	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && bad)
		printf("data errors %d\n", bad);
	free(buf);
	MPI_Finalize();
	return bad ? 1 : 0;
}
