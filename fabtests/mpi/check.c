/*
 * check: a data-checked MPI program for two ranks, run over oxmr by
 * fabtests/mpi.sh (Open MPI's cm PML and ofi MTL, on one host and with the
 * ranks in two network namespaces).
 *
 * Point-to-point both ways across sizes 0 B .. 4 MiB (blocking and
 * nonblocking, every byte checked), MPI_ANY_SOURCE/MPI_ANY_TAG receives,
 * MPI_Probe and MPI_Iprobe (FI_PEEK underneath), MPI_Mprobe/MPI_Improbe and
 * MPI_Mrecv (FI_PEEK|FI_CLAIM, then FI_CLAIM), and MPI_Allreduce and
 * MPI_Bcast. Every failed check prints a line; the program exits non-zero
 * if any check failed on any rank, and prints the number of checks.
 * OXMR_MPI_CHECK_BREAK=1 corrupts one received byte (fabtests/mpi.sh's
 * control run: the checks must catch it).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

static int rank, fails, checks;



static const size_t sizes[] = { 0, 1, 7, 64, 1000, 4096, 8191, 8192, 8193, 65536, 100000, 1 << 20, 4 << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAXSIZE (4u << 20)

/* Blocking ping-pong: rank 0 sends `seed`, rank 1 checks and answers seed+1. */
static void pingpong(unsigned char *buf, size_t n, int tag, unsigned seed)
{
	MPI_Status st;
	int count = -1;
	int peer = 1 - rank;

	if (rank == 0) {
		fill(buf, n, seed);
		MPI_Send(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
		memset(buf, 0xee, n);
		MPI_Recv(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		CHECK((size_t)count == n && st.MPI_SOURCE == peer && st.MPI_TAG == tag,
		      "answer of %zu B: count %d source %d tag %d", n, count, st.MPI_SOURCE, st.MPI_TAG);
		CHECK(first_bad(buf, n, seed + 1) == n, "answer of %zu B differs at byte %zu", n,
		      first_bad(buf, n, seed + 1));
	} else {
		memset(buf, 0xee, n);
		MPI_Recv(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		CHECK((size_t)count == n && st.MPI_SOURCE == peer && st.MPI_TAG == tag,
		      "message of %zu B: count %d source %d tag %d", n, count, st.MPI_SOURCE, st.MPI_TAG);
		/* (The test of the test, fabtests/mpi.sh: a byte corrupted on
		 * purpose must be caught.) */
		if (n == 4096 && getenv("OXMR_MPI_CHECK_BREAK") && strcmp(getenv("OXMR_MPI_CHECK_BREAK"), "1") == 0)
			buf[n / 2] ^= 0x40;
		CHECK(first_bad(buf, n, seed) == n, "message of %zu B differs at byte %zu", n, first_bad(buf, n, seed));
		fill(buf, n, seed + 1);
		MPI_Send(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
	}
}

/* Both ranks send to each other at once (nonblocking), any source/tag. */
static void exchange(unsigned char *out, unsigned char *in, size_t n, int tag)
{
	MPI_Request rq[2];
	MPI_Status st[2];
	int count = -1;
	int peer = 1 - rank;

	fill(out, n, 1000 + rank);
	memset(in, 0xee, n);
	MPI_Irecv(in, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[0]);
	MPI_Isend(out, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq[1]);
	MPI_Waitall(2, rq, st);
	MPI_Get_count(&st[0], MPI_BYTE, &count);
	CHECK((size_t)count == n && st[0].MPI_SOURCE == peer && st[0].MPI_TAG == tag,
	      "exchange of %zu B: count %d source %d tag %d", n, count, st[0].MPI_SOURCE, st[0].MPI_TAG);
	CHECK(first_bad(in, n, 1000 + peer) == n, "exchange of %zu B differs at byte %zu", n,
	      first_bad(in, n, 1000 + peer));
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void probes(unsigned char *buf)
{
	MPI_Status st;
	MPI_Message m;
	int count = -1, flag = 0;
	const size_t probe_n = 12345, iprobe_n = 100, mp_small = 200, mp_big = 2u << 20;

	if (rank == 0) {
		fill(buf, probe_n, 7);
		MPI_Send(buf, (int)probe_n, MPI_BYTE, 1, 77, MPI_COMM_WORLD);
		fill(buf, iprobe_n, 8);
		MPI_Send(buf, (int)iprobe_n, MPI_BYTE, 1, 78, MPI_COMM_WORLD);
		fill(buf, mp_small, 9);
		MPI_Send(buf, (int)mp_small, MPI_BYTE, 1, 79, MPI_COMM_WORLD);
		fill(buf, mp_big, 10);
		MPI_Send(buf, (int)mp_big, MPI_BYTE, 1, 80, MPI_COMM_WORLD);
		return;
	}
	/* MPI_Probe from rank 0 for tag 77: its size, then the message. */
	MPI_Probe(0, 77, MPI_COMM_WORLD, &st);
	MPI_Get_count(&st, MPI_BYTE, &count);
	CHECK((size_t)count == probe_n && st.MPI_SOURCE == 0 && st.MPI_TAG == 77,
	      "MPI_Probe: count %d source %d tag %d", count, st.MPI_SOURCE, st.MPI_TAG);
	/* (Probed again: a probe does not consume the message.) */
	MPI_Probe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &st);
	MPI_Get_count(&st, MPI_BYTE, &count);
	CHECK((size_t)count == probe_n, "MPI_Probe again: count %d", count);
	memset(buf, 0xee, probe_n);
	MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
	CHECK(first_bad(buf, probe_n, 7) == probe_n, "probed message differs at byte %zu", first_bad(buf, probe_n, 7));

	/* MPI_Iprobe until tag 78 is there (bounded). */
	for (double until = now_s() + 20; !flag && now_s() < until;)
		MPI_Iprobe(0, 78, MPI_COMM_WORLD, &flag, &st);
	CHECK(flag, "MPI_Iprobe never found tag 78 in 20 s");
	if (flag) {
		MPI_Get_count(&st, MPI_BYTE, &count);
		CHECK((size_t)count == iprobe_n && st.MPI_SOURCE == 0, "MPI_Iprobe: count %d source %d", count,
		      st.MPI_SOURCE);
		memset(buf, 0xee, iprobe_n);
		MPI_Recv(buf, count, MPI_BYTE, 0, 78, MPI_COMM_WORLD, &st);
		CHECK(first_bad(buf, iprobe_n, 8) == iprobe_n, "iprobed message differs");
	}
	MPI_Iprobe(0, 78, MPI_COMM_WORLD, &flag, &st);
	CHECK(!flag, "MPI_Iprobe found tag 78 after it was received");

	/* MPI_Mprobe/MPI_Mrecv, then MPI_Improbe/MPI_Mrecv of 2 MiB. */
	MPI_Mprobe(0, 79, MPI_COMM_WORLD, &m, &st);
	MPI_Get_count(&st, MPI_BYTE, &count);
	CHECK((size_t)count == mp_small && st.MPI_TAG == 79, "MPI_Mprobe: count %d tag %d", count, st.MPI_TAG);
	MPI_Iprobe(0, 79, MPI_COMM_WORLD, &flag, &st);
	CHECK(!flag, "MPI_Iprobe found a message MPI_Mprobe had claimed");
	memset(buf, 0xee, mp_small);
	MPI_Mrecv(buf, (int)mp_small, MPI_BYTE, &m, &st);
	CHECK(m == MPI_MESSAGE_NULL, "MPI_Mrecv left the message handle set");
	CHECK(first_bad(buf, mp_small, 9) == mp_small, "mprobed message differs");
	flag = 0;
	for (double until = now_s() + 20; !flag && now_s() < until;)
		MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m, &st);
	CHECK(flag, "MPI_Improbe never found the 2 MiB message in 20 s");
	if (flag) {
		MPI_Get_count(&st, MPI_BYTE, &count);
		CHECK((size_t)count == mp_big && st.MPI_TAG == 80 && st.MPI_SOURCE == 0,
		      "MPI_Improbe: count %d tag %d source %d", count, st.MPI_TAG, st.MPI_SOURCE);
		memset(buf, 0xee, mp_big);
		MPI_Mrecv(buf, (int)mp_big, MPI_BYTE, &m, &st);
		CHECK(first_bad(buf, mp_big, 10) == mp_big, "improbed 2 MiB message differs at byte %zu",
		      first_bad(buf, mp_big, 10));
	}
}

static void collectives(void)
{
	enum { N = 1000 };
	double v[N], sum[N];
	int size, root_val = 0;

	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int i = 0; i < N; i++)
		v[i] = i * 0.5 + rank * 1000;
	MPI_Allreduce(v, sum, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		double want = size * (i * 0.5) + 1000.0 * size * (size - 1) / 2;
		if (sum[i] != want)
			bad++;
	}
	CHECK(bad == 0, "MPI_Allreduce: %d of %d sums wrong", bad, N);
	if (rank == 0)
		root_val = 424242;
	MPI_Bcast(&root_val, 1, MPI_INT, 0, MPI_COMM_WORLD);
	CHECK(root_val == 424242, "MPI_Bcast gave %d", root_val);
}

int main(int argc, char **argv)
{
	int size, all_fails = 0, all_checks = 0;
	unsigned char *a, *b;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "check: run with exactly 2 ranks (got %d)\n", size);
		MPI_Finalize();
		return 2;
	}
	a = malloc(MAXSIZE);
	b = malloc(MAXSIZE);
	if (!a || !b) {
		fprintf(stderr, "rank %d: malloc failed\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (size_t i = 0; i < NSIZES; i++)
		pingpong(a, sizes[i], (int)i, (unsigned)i + 1);
	for (size_t i = 0; i < NSIZES; i++)
		exchange(a, b, sizes[i], 100 + (int)i);
	probes(a);
	collectives();
	MPI_Allreduce(&fails, &all_fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&checks, &all_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("check: %d of %d checks failed (2 ranks, %zu sizes 0 B..4 MiB, probes, collectives)\n",
		       all_fails, all_checks, NSIZES);
	free(a);
	free(b);
	MPI_Finalize();
	return all_fails ? 1 : 0;
}
