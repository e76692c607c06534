/*
 * mpi_self.c: one MPI rank sends 8 bytes to itself, N times: MPI_Irecv,
 * MPI_Send, MPI_Wait. One process, one thread, nothing crosses between
 * cores and nothing waits on a peer, so each message costs what the
 * software of both sides costs, once: Open MPI's layers (the MPI call,
 * the PML, the MTL or BTL) and, under `--mca pml cm --mca mtl ofi`, the
 * libfabric provider below them. bench/mpi_layers.sh runs it timed and
 * under callgrind, where it splits each MPI call's instructions between
 * Open MPI and the provider. Prints ns per message, the best of 5 runs
 * of N.
 *
 * usage: mpirun -np 1 ... mpi_self [N]   (default 200000)
 * Build: mpicc -O2 -o mpi_self bench/mpi_self.c
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	char sbuf[8] = "abcdefg", rbuf[8];
	double best = 1e30;

	MPI_Init(&argc, &argv);
	if (n <= 0) {
		fprintf(stderr, "usage: mpi_self [N]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (int run = 0; run < 5; run++) {
		double t0 = MPI_Wtime(), t;

		for (long i = 0; i < n; i++) {
			MPI_Request rq;

			MPI_Irecv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &rq);
			MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
			MPI_Wait(&rq, MPI_STATUS_IGNORE);
		}
		t = (MPI_Wtime() - t0) / n;
		if (t < best)
			best = t;
	}
	printf("self %.1f ns per 8 B message (MPI_Irecv + MPI_Send + MPI_Wait)\n", best * 1e9);
	MPI_Finalize();
	return 0;
}
