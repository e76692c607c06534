/*
 * onesided: a data-checked MPI one-sided (RMA) program, run over oxmr by
 * fabtests/mpi.sh (Open MPI's osc rdma over btl ofi, and osc pt2pt over the
 * cm PML and ofi MTL), on one host and with the ranks in two network
 * namespaces. Two ranks or more.
 *
 * For an MPI_Win_allocate window and an MPI_Win_create window (whose memory
 * osc rdma reaches through the btl even on one host; an allocated window of
 * ranks on one host is shared memory there):
 *   - MPI_Put and MPI_Get of 1 B, 8 B, 16 B .. 4 MiB (powers of 4) and an
 *     odd 12345 B, from every rank to every rank (itself too), every byte
 *     checked, the pattern a function of origin, target, size and round:
 *     under MPI_Win_fence, under MPI_Win_lock exclusive (puts) and shared
 *     (gets), and under MPI_Win_lock_all with MPI_Win_flush after each op
 *     (the origin reads back what it wrote);
 *   - MPI_Accumulate with MPI_SUM on int and double, MPI_MAX on int and
 *     double and MPI_REPLACE, counts 1, 32 (osc rdma's network atomics) and
 *     1000, under a fence and under lock_all + flush;
 *   - MPI_Get_accumulate (MPI_SUM on int64 with the fetched values checked,
 *     MPI_REPLACE as a swap, MPI_NO_OP as a read);
 *   - MPI_Fetch_and_op MPI_SUM on int64 and on int: every rank adds 1 to one
 *     location N times (flush after each); the final value is N * ranks and
 *     the fetched values of all ranks together are 0 .. N*ranks-1 each once;
 *     MPI_NO_OP reads the final value;
 *   - MPI_Compare_and_swap: a lock-free counter built on CAS by every rank,
 *     K increments each; final value K * ranks, the values each successful
 *     CAS replaced together 0 .. K*ranks-1 each once.
 *
 * Every failed check prints a "rank R: FAIL ..." line; the program exits
 * non-zero if any check failed on any rank, and rank 0 prints
 * "onesided: F of C checks failed (...)". OXMR_MPI_CHECK_BREAK=1 corrupts
 * one checked byte (fabtests/mpi.sh's control run: the checks must catch it).
 * OXMR_OSC_SKIP, a comma-separated list, leaves out what a known bug of
 * Open MPI 4.1.4's osc rdma stack cannot do (fabtests/mpi.sh says when):
 *   int_max       MPI_MAX on int (btl ofi aborts on any network atomic
 *                 but SUM and SWAP: "Unknown or unsupported atomic op.");
 *   cas_allocate  MPI_Compare_and_swap on the MPI_Win_allocate window
 *                 (ranks all on one host: osc rdma calls the btl's cswap
 *                 with no endpoint and crashes; fixed in 4.1.5);
 *   cas_create    the same on the MPI_Win_create window (ranks all on one
 *                 host: a CAS on the rank's own memory reaches the btl
 *                 with no registration handle, or with vader no endpoint).
 * The summary line names what was left out.
 * OXMR_OSC_ATOMIC_N sets N (default 500; K is N/2). OXMR_OSC_TRACE=1 prints
 * a line per phase to stderr (which one hangs).
 *
 * Timing mode (OXMR_OSC_BENCH=1, or the argument "bench"): no checks; rank 0
 * against rank 1 through an MPI_Win_create window (OXMR_OSC_BENCH_FLAVOR=
 * allocate for MPI_Win_allocate), passive target (lock_all), one line each:
 *   osc put_lat_8B <us> us      8 B MPI_Put + MPI_Win_flush, averaged
 *   osc get_lat_8B <us> us      8 B MPI_Get + MPI_Win_flush
 *   osc put_bw_1MiB <MB/s> MB/s 1 MiB MPI_Puts, a flush after every 4
 *   osc fop_lat <us> us         MPI_Fetch_and_op (MPI_SUM, int64) + flush
 * OXMR_OSC_ITERS sets the latency iterations (default 2000).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

static int rank, nranks, fails, checks;
static int break_once; /* OXMR_MPI_CHECK_BREAK=1 and not yet done */
static int trace;      /* OXMR_OSC_TRACE=1: a line per phase (to find a hang) */


#define MAXSIZE (4u << 20)
/* The window: an area for atomics and accumulates, then one 4 MiB slot per
 * origin rank (origin o puts into slot o of every target). */
#define ATOM_AREA (1u << 20)
#define ACC_N 1000
#define NCOUNTS 3
static const int acc_counts[NCOUNTS] = { 1, 32, ACC_N };
/* Offsets (bytes) in the atomics area; ACC_TOTAL elements per array. */
#define ACC_TOTAL (1 + 32 + ACC_N)
#define OFF_ISUM 0
#define OFF_DSUM (OFF_ISUM + 8 * ACC_TOTAL)
#define OFF_IMAX (OFF_DSUM + 8 * ACC_TOTAL)
#define OFF_DMAX (OFF_IMAX + 8 * ACC_TOTAL)
#define OFF_GSUM (OFF_DMAX + 8 * ACC_TOTAL)   /* int64 [ACC_N], shared */
#define OFF_FOP64 (OFF_GSUM + 8 * ACC_N)      /* int64 */
#define OFF_FOP32 (OFF_FOP64 + 8)             /* int */
#define OFF_CAS (OFF_FOP64 + 16)              /* int64 */
#define OFF_PER (OFF_FOP64 + 64)              /* per-origin areas from here */
/* Per origin o: REPLACE int64 [ACC_TOTAL], get-acc int64 [ACC_N]. */
#define PER_SIZE (8 * ACC_TOTAL + 8 * ACC_N)
#define OFF_REPL(o) (OFF_PER + (size_t)(o)*PER_SIZE)
#define OFF_GOWN(o) (OFF_REPL(o) + 8 * ACC_TOTAL)

static const size_t sizes[] = { 1, 8, 16, 64, 256, 1024, 4096, 12345, 16384, 65536, 262144, 1 << 20, 4 << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static size_t slot_off(int origin)
{
	return ATOM_AREA + (size_t)origin * MAXSIZE;
}

/* A seed for the data origin o sends target t in round r, size index s. */
static unsigned seed_of(int o, int t, unsigned r, size_t s)
{
	return (unsigned)(o * 7919 + t * 104729 + r * 613 + s * 31 + 1);
}


/* The control run's corruption: once, on the last rank, at 4096 B. */
static void maybe_break(unsigned char *p, size_t n)
{
	if (break_once && n == 4096 && rank == nranks - 1) {
		p[n / 2] ^= 0x40;
		break_once = 0;
	}
}

/* Is `what` in the comma-separated OXMR_OSC_SKIP? */
static int skipped(const char *what)
{
	const char *v = getenv("OXMR_OSC_SKIP");
	size_t n = strlen(what);

	while (v && *v) {
		if (strncmp(v, what, n) == 0 && (v[n] == ',' || v[n] == 0))
			return 1;
		v = strchr(v, ',');
		if (v)
			v++;
	}
	return 0;
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : dflt;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

struct win {
	MPI_Win w;
	unsigned char *base; /* this rank's window memory */
	const char *name;    /* "allocate" or "create" */
	void *own;           /* the memory of a created window */
};

static void phase(const struct win *w, const char *what)
{
	if (trace) {
		fprintf(stderr, "rank %d: %s window: %s\n", rank, w->name, what);
		fflush(stderr);
	}
}

static size_t win_bytes(void)
{
	return ATOM_AREA + (size_t)nranks * MAXSIZE;
}

static void win_open(struct win *w, int create)
{
	MPI_Aint n = (MPI_Aint)win_bytes();

	memset(w, 0, sizeof *w);
	if (create) {
		w->name = "create";
		if (posix_memalign(&w->own, 4096, (size_t)n) != 0) {
			fprintf(stderr, "rank %d: posix_memalign of %zu B failed\n", rank, (size_t)n);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		w->base = w->own;
		memset(w->base, 0, (size_t)n);
		MPI_Win_create(w->base, n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w->w);
	} else {
		w->name = "allocate";
		MPI_Win_allocate(n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w->base, &w->w);
		/* (Local stores before the first synchronisation.) */
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, w->w);
		memset(w->base, 0, (size_t)n);
		MPI_Win_unlock(rank, w->w);
		MPI_Barrier(MPI_COMM_WORLD);
	}
}

static void win_close(struct win *w)
{
	MPI_Win_free(&w->w);
	free(w->own);
}

/* Local access to this rank's own window memory, between passive-target
 * epochs of others: under a lock on itself. */
static void self_lock(struct win *w, int exclusive)
{
	MPI_Win_lock(exclusive ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, rank, 0, w->w);
	MPI_Win_sync(w->w);
}

static void self_unlock(struct win *w)
{
	MPI_Win_sync(w->w);
	MPI_Win_unlock(rank, w->w);
}

/* This rank's slots: what every origin o put there for size index s, round r. */
static void check_slots(struct win *w, size_t s, unsigned r, const char *how)
{
	size_t n = sizes[s];

	for (int o = 0; o < nranks; o++) {
		unsigned char *p = w->base + slot_off(o);
		unsigned seed = seed_of(o, rank, r, s);

		maybe_break(p, n);
		size_t bad = first_bad(p, n, seed);
		CHECK(bad == n, "%s window, %s: %zu B put by rank %d differs at byte %zu (0x%02x, want 0x%02x)",
		      w->name, how, n, o, bad, bad < n ? p[bad] : 0, bad < n ? byte_at(bad, seed) : 0);
	}
}

/* This rank fills its slots with what origin o is to get in round r. */
static void fill_slots(struct win *w, size_t s, unsigned r)
{
	for (int o = 0; o < nranks; o++)
		fill(w->base + slot_off(o), sizes[s], seed_of(rank, o, r, s) ^ 0x5a5a);
}

/* What this rank got from target t (in buf) for size index s, round r. */
static void check_got(struct win *w, const unsigned char *buf, int t, size_t s, unsigned r, const char *how)
{
	size_t n = sizes[s];
	unsigned seed = seed_of(t, rank, r, s) ^ 0x5a5a;
	size_t bad = first_bad(buf, n, seed);

	CHECK(bad == n, "%s window, %s: %zu B got from rank %d differ at byte %zu", w->name, how, n, t, bad);
}

static void put_get_fence(struct win *w, unsigned char *buf)
{
	MPI_Win_fence(MPI_MODE_NOPRECEDE, w->w);
	for (size_t s = 0; s < NSIZES; s++) {
		size_t n = sizes[s];
		unsigned r = 1;

		if (s > 0)
			MPI_Win_fence(0, w->w);
		for (int t = 0; t < nranks; t++) {
			unsigned char *src = buf + (size_t)t * MAXSIZE;

			fill(src, n, seed_of(rank, t, r, s));
			MPI_Put(src, (int)n, MPI_BYTE, t, (MPI_Aint)slot_off(rank), (int)n, MPI_BYTE, w->w);
		}
		MPI_Win_fence(0, w->w);
		check_slots(w, s, r, "MPI_Put under fence");

		/* Gets: each rank fills its slots, then all read. */
		r = 2;
		fill_slots(w, s, r);
		MPI_Win_fence(0, w->w);
		for (int t = 0; t < nranks; t++)
			memset(buf + (size_t)t * MAXSIZE, 0xee, n);
		for (int t = 0; t < nranks; t++)
			MPI_Get(buf + (size_t)t * MAXSIZE, (int)n, MPI_BYTE, t, (MPI_Aint)slot_off(rank), (int)n,
				MPI_BYTE, w->w);
		MPI_Win_fence(0, w->w);
		for (int t = 0; t < nranks; t++)
			check_got(w, buf + (size_t)t * MAXSIZE, t, s, r, "MPI_Get under fence");
	}
	/* (Closed for good: passive-target epochs follow.) */
	MPI_Win_fence(MPI_MODE_NOSUCCEED, w->w);
}

static void put_get_lock(struct win *w, unsigned char *buf)
{
	for (size_t s = 0; s < NSIZES; s++) {
		size_t n = sizes[s];
		unsigned r = 3;

		/* Puts, each target under an exclusive lock of its own. */
		for (int i = 0; i < nranks; i++) {
			int t = (rank + i) % nranks;

			fill(buf, n, seed_of(rank, t, r, s));
			MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, w->w);
			MPI_Put(buf, (int)n, MPI_BYTE, t, (MPI_Aint)slot_off(rank), (int)n, MPI_BYTE, w->w);
			MPI_Win_unlock(t, w->w);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		self_lock(w, 0);
		check_slots(w, s, r, "MPI_Put under MPI_Win_lock exclusive");
		self_unlock(w);
		MPI_Barrier(MPI_COMM_WORLD);

		/* Gets under shared locks. */
		r = 4;
		self_lock(w, 1);
		fill_slots(w, s, r);
		self_unlock(w);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < nranks; i++) {
			int t = (rank + i) % nranks;

			memset(buf, 0xee, n);
			MPI_Win_lock(MPI_LOCK_SHARED, t, 0, w->w);
			MPI_Get(buf, (int)n, MPI_BYTE, t, (MPI_Aint)slot_off(rank), (int)n, MPI_BYTE, w->w);
			MPI_Win_unlock(t, w->w);
			check_got(w, buf, t, s, r, "MPI_Get under MPI_Win_lock shared");
		}
		MPI_Barrier(MPI_COMM_WORLD);
	}
}

static void put_get_lock_all(struct win *w, unsigned char *buf)
{
	unsigned char *back = buf + MAXSIZE;

	MPI_Win_lock_all(0, w->w);
	for (size_t s = 0; s < NSIZES; s++) {
		size_t n = sizes[s];
		unsigned r = 5;

		for (int i = 0; i < nranks; i++) {
			int t = (rank + i) % nranks;
			unsigned seed = seed_of(rank, t, r, s);

			fill(buf, n, seed);
			MPI_Put(buf, (int)n, MPI_BYTE, t, (MPI_Aint)slot_off(rank), (int)n, MPI_BYTE, w->w);
			MPI_Win_flush(t, w->w);
			/* (After the flush the put is complete at the target: read it back.) */
			memset(back, 0xee, n);
			MPI_Get(back, (int)n, MPI_BYTE, t, (MPI_Aint)slot_off(rank), (int)n, MPI_BYTE, w->w);
			MPI_Win_flush(t, w->w);
			size_t bad = first_bad(back, n, seed);
			CHECK(bad == n, "%s window, lock_all: %zu B put to rank %d then got back differ at byte %zu",
			      w->name, n, t, bad);
		}
	}
	MPI_Win_unlock_all(w->w);
	MPI_Barrier(MPI_COMM_WORLD);
	/* The last size's data is in every slot of every target. */
	self_lock(w, 0);
	check_slots(w, NSIZES - 1, 5, "MPI_Put under lock_all + flush");
	self_unlock(w);
	MPI_Barrier(MPI_COMM_WORLD);
}

/* Accumulate values: origin o, element i, round r. Integers stay small; the
 * doubles are multiples of 1/4, so every sum is exact. */
static int ival(int o, int i, int r)
{
	return o * 1000 + i * 3 + r * 7 - 500;
}

static double dval(int o, int i, int r)
{
	return (o + 1) * 0.5 + i * 0.25 + r - 100.0;
}

static int imax_val(int o, int i, int r)
{
	return (i * 37 + o * 101 + r * 13) % 1000 - 500;
}

static double dmax_val(int o, int i, int r)
{
	return ((i * 53 + o * 211 + r * 17) % 997) * 0.5 - 250.0;
}

static int64_t rval(int o, int i, int r)
{
	return ((int64_t)o << 40) + ((int64_t)r << 32) + (int64_t)i * 1000003 + 17;
}

/* Initial values of target t's accumulate arrays. */
static int iinit(int t, int i)
{
	return i * 5 + t;
}

static double dinit(int t, int i)
{
	return i * 0.75 + t;
}

static void acc_init(struct win *w)
{
	self_lock(w, 1);
	for (int i = 0; i < ACC_TOTAL; i++) {
		((int *)(w->base + OFF_ISUM))[i] = iinit(rank, i);
		((double *)(w->base + OFF_DSUM))[i] = dinit(rank, i);
		((int *)(w->base + OFF_IMAX))[i] = -100000;
		((double *)(w->base + OFF_DMAX))[i] = -100000.0;
	}
	for (int o = 0; o < nranks; o++)
		for (int i = 0; i < ACC_TOTAL; i++)
			((int64_t *)(w->base + OFF_REPL(o)))[i] = -1;
	self_unlock(w);
	MPI_Barrier(MPI_COMM_WORLD);
}

/* One round of accumulates from this rank to every target (elements
 * [first, first+count) of each array, count one of acc_counts). */
static void acc_round(struct win *w, int r, int int_max, int flush)
{
	static int iv[ACC_N];
	static double dv[ACC_N];
	static int64_t rv[ACC_N];
	int first = 0;

	for (int c = 0; c < NCOUNTS; c++) {
		int count = acc_counts[c];

		for (int i = 0; i < count; i++) {
			iv[i] = ival(rank, first + i, r);
			dv[i] = dval(rank, first + i, r);
			rv[i] = rval(rank, first + i, r);
		}
		for (int k = 0; k < nranks; k++) {
			int t = (rank + k) % nranks;

			MPI_Accumulate(iv, count, MPI_INT, t, OFF_ISUM + 4 * first, count, MPI_INT, MPI_SUM, w->w);
			MPI_Accumulate(dv, count, MPI_DOUBLE, t, OFF_DSUM + 8 * first, count, MPI_DOUBLE, MPI_SUM,
				       w->w);
			MPI_Accumulate(rv, count, MPI_INT64_T, t, OFF_REPL(rank) + 8 * first, count, MPI_INT64_T,
				       MPI_REPLACE, w->w);
			if (flush)
				MPI_Win_flush(t, w->w);
		}
		/* MAX: values of their own, computed per element. */
		for (int i = 0; i < count; i++) {
			iv[i] = imax_val(rank, first + i, r);
			dv[i] = dmax_val(rank, first + i, r);
		}
		for (int k = 0; k < nranks; k++) {
			int t = (rank + k) % nranks;

			if (int_max)
				MPI_Accumulate(iv, count, MPI_INT, t, OFF_IMAX + 4 * first, count, MPI_INT, MPI_MAX,
					       w->w);
			MPI_Accumulate(dv, count, MPI_DOUBLE, t, OFF_DMAX + 8 * first, count, MPI_DOUBLE, MPI_MAX,
				       w->w);
			if (flush)
				MPI_Win_flush(t, w->w);
		}
		first += count;
	}
}

/* This rank's arrays after rounds rs[0..nr) of every origin. */
static void acc_check(struct win *w, const int *rs, int nr, int int_max, const char *how)
{
	int bad_isum = 0, bad_dsum = 0, bad_imax = 0, bad_dmax = 0, bad_repl = 0, first_i = -1;

	self_lock(w, 0);
	for (int i = 0; i < ACC_TOTAL; i++) {
		long long isum = iinit(rank, i);
		double dsum = dinit(rank, i);
		int imax = -100000;
		double dmax = -100000.0;

		for (int k = 0; k < nr; k++)
			for (int o = 0; o < nranks; o++) {
				isum += ival(o, i, rs[k]);
				dsum += dval(o, i, rs[k]);
				if (imax_val(o, i, rs[k]) > imax)
					imax = imax_val(o, i, rs[k]);
				if (dmax_val(o, i, rs[k]) > dmax)
					dmax = dmax_val(o, i, rs[k]);
			}
		if (((int *)(w->base + OFF_ISUM))[i] != (int)isum) {
			bad_isum++;
			if (first_i < 0)
				first_i = i;
		}
		bad_dsum += ((double *)(w->base + OFF_DSUM))[i] != dsum;
		if (int_max)
			bad_imax += ((int *)(w->base + OFF_IMAX))[i] != imax;
		bad_dmax += ((double *)(w->base + OFF_DMAX))[i] != dmax;
		for (int o = 0; o < nranks; o++)
			bad_repl += ((int64_t *)(w->base + OFF_REPL(o)))[i] != rval(o, i, rs[nr - 1]);
	}
	self_unlock(w);
	CHECK(bad_isum == 0, "%s window, %s: MPI_SUM int: %d of %d elements wrong (first %d: %d)", w->name, how,
	      bad_isum, ACC_TOTAL, first_i, first_i >= 0 ? ((int *)(w->base + OFF_ISUM))[first_i] : 0);
	CHECK(bad_dsum == 0, "%s window, %s: MPI_SUM double: %d of %d elements wrong", w->name, how, bad_dsum,
	      ACC_TOTAL);
	CHECK(bad_imax == 0, "%s window, %s: MPI_MAX int: %d of %d elements wrong", w->name, how, bad_imax,
	      ACC_TOTAL);
	CHECK(bad_dmax == 0, "%s window, %s: MPI_MAX double: %d of %d elements wrong", w->name, how, bad_dmax,
	      ACC_TOTAL);
	CHECK(bad_repl == 0, "%s window, %s: MPI_REPLACE int64: %d of %d elements wrong", w->name, how, bad_repl,
	      ACC_TOTAL * nranks);
}

static void accumulates(struct win *w, int int_max)
{
	acc_init(w);
	/* Round 1 under a fence. */
	MPI_Win_fence(MPI_MODE_NOPRECEDE, w->w);
	acc_round(w, 1, int_max, 0);
	MPI_Win_fence(MPI_MODE_NOSUCCEED, w->w);
	acc_check(w, (const int[]){ 1 }, 1, int_max, "MPI_Accumulate under fence");
	MPI_Barrier(MPI_COMM_WORLD);
	/* Round 2 on top, under lock_all with flushes. */
	MPI_Win_lock_all(0, w->w);
	acc_round(w, 2, int_max, 1);
	MPI_Win_unlock_all(w->w);
	MPI_Barrier(MPI_COMM_WORLD);
	acc_check(w, (const int[]){ 1, 2 }, 2, int_max, "MPI_Accumulate under lock_all + flush");
	MPI_Barrier(MPI_COMM_WORLD);
}

static int64_t ginit(int t, int o, int i)
{
	return (int64_t)t * 1000000 + o * 10000 + i;
}

static int64_t gval(int o, int i, int k)
{
	return (int64_t)(o + 1) * 1000 + i * 7 + k;
}

static void get_accumulates(struct win *w)
{
	static int64_t src[ACC_N], res[ACC_N];
	const int count = 32;

	self_lock(w, 1);
	for (int o = 0; o < nranks; o++)
		for (int i = 0; i < ACC_N; i++)
			((int64_t *)(w->base + OFF_GOWN(o)))[i] = ginit(rank, o, i);
	for (int i = 0; i < ACC_N; i++)
		((int64_t *)(w->base + OFF_GSUM))[i] = i;
	self_unlock(w);
	MPI_Barrier(MPI_COMM_WORLD);

	MPI_Win_lock_all(0, w->w);
	for (int k = 0; k < nranks; k++) {
		int t = (rank + k) % nranks;
		int bad = 0;

		/* SUM twice into this rank's own area of t: the first fetches
		 * the initial values, the second those plus the first's. */
		for (int pass = 0; pass < 2; pass++) {
			for (int i = 0; i < ACC_N; i++) {
				src[i] = gval(rank, i, pass);
				res[i] = -7;
			}
			MPI_Get_accumulate(src, count, MPI_INT64_T, res, count, MPI_INT64_T, t, OFF_GOWN(rank), count,
					   MPI_INT64_T, MPI_SUM, w->w);
			MPI_Get_accumulate(src + count, ACC_N - count, MPI_INT64_T, res + count, ACC_N - count,
					   MPI_INT64_T, t, OFF_GOWN(rank) + 8 * count, ACC_N - count, MPI_INT64_T,
					   MPI_SUM, w->w);
			MPI_Win_flush(t, w->w);
			bad = 0;
			for (int i = 0; i < ACC_N; i++)
				bad += res[i] != ginit(t, rank, i) + (pass ? gval(rank, i, 0) : 0);
			CHECK(bad == 0, "%s window: MPI_Get_accumulate MPI_SUM pass %d at rank %d: %d of %d fetched "
			      "values wrong", w->name, pass, t, bad, ACC_N);
		}
		/* MPI_NO_OP reads; MPI_REPLACE swaps. */
		MPI_Get_accumulate(NULL, 0, MPI_INT64_T, res, ACC_N, MPI_INT64_T, t, OFF_GOWN(rank), ACC_N,
				   MPI_INT64_T, MPI_NO_OP, w->w);
		MPI_Win_flush(t, w->w);
		bad = 0;
		for (int i = 0; i < ACC_N; i++)
			bad += res[i] != ginit(t, rank, i) + gval(rank, i, 0) + gval(rank, i, 1);
		CHECK(bad == 0, "%s window: MPI_Get_accumulate MPI_NO_OP at rank %d: %d of %d values wrong", w->name,
		      t, bad, ACC_N);
		for (int i = 0; i < ACC_N; i++)
			src[i] = -gval(rank, i, 9);
		MPI_Get_accumulate(src, 1, MPI_INT64_T, res, 1, MPI_INT64_T, t, OFF_GOWN(rank), 1, MPI_INT64_T,
				   MPI_REPLACE, w->w);
		MPI_Get_accumulate(src + 1, ACC_N - 1, MPI_INT64_T, res + 1, ACC_N - 1, MPI_INT64_T, t,
				   OFF_GOWN(rank) + 8, ACC_N - 1, MPI_INT64_T, MPI_REPLACE, w->w);
		MPI_Win_flush(t, w->w);
		MPI_Get(res + ACC_N / 2, 1, MPI_INT64_T, t, OFF_GOWN(rank), 1, MPI_INT64_T, w->w);
		MPI_Win_flush(t, w->w);
		CHECK(res[0] == ginit(t, rank, 0) + gval(rank, 0, 0) + gval(rank, 0, 1) &&
			      res[ACC_N / 2] == -gval(rank, 0, 9),
		      "%s window: MPI_Get_accumulate MPI_REPLACE at rank %d: fetched %lld, then read %lld", w->name, t,
		      (long long)res[0], (long long)res[ACC_N / 2]);

		/* Every rank adds into the shared array of t (count 1 and 32). */
		for (int i = 0; i < 33; i++)
			src[i] = rank + 1;
		MPI_Get_accumulate(src, 1, MPI_INT64_T, res, 1, MPI_INT64_T, t, OFF_GSUM, 1, MPI_INT64_T, MPI_SUM,
				   w->w);
		MPI_Get_accumulate(src + 1, 32, MPI_INT64_T, res + 1, 32, MPI_INT64_T, t, OFF_GSUM + 8, 32,
				   MPI_INT64_T, MPI_SUM, w->w);
		MPI_Win_flush(t, w->w);
		bad = 0;
		for (int i = 0; i < 33; i++)
			bad += res[i] < i || res[i] > i + (int64_t)nranks * (nranks + 1) / 2;
		CHECK(bad == 0, "%s window: MPI_Get_accumulate MPI_SUM, shared, at rank %d: %d fetched values out of "
		      "range", w->name, t, bad);
	}
	MPI_Win_unlock_all(w->w);
	MPI_Barrier(MPI_COMM_WORLD);
	self_lock(w, 0);
	int bad = 0;
	for (int i = 0; i < 33; i++)
		bad += ((int64_t *)(w->base + OFF_GSUM))[i] != i + (int64_t)nranks * (nranks + 1) / 2;
	self_unlock(w);
	CHECK(bad == 0, "%s window: MPI_Get_accumulate MPI_SUM, shared: %d of 33 final values wrong", w->name, bad);
	MPI_Barrier(MPI_COMM_WORLD);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* vals[0..n) of every rank, gathered at rank 0: 0 .. n*nranks-1, each once? */
static void check_permutation(int64_t *vals, int n, const char *what, struct win *w)
{
	int64_t *all = NULL;
	int bad = 0;

	if (rank == 0)
		all = malloc(sizeof *all * (size_t)n * nranks);
	MPI_Gather(vals, n, MPI_INT64_T, all, n, MPI_INT64_T, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		qsort(all, (size_t)n * nranks, sizeof *all, cmp_i64);
		for (int64_t i = 0; i < (int64_t)n * nranks; i++)
			if (all[i] != i) {
				if (!bad)
					fprintf(stderr, "rank 0: %s: sorted value %lld is %lld\n", what, (long long)i,
						(long long)all[i]);
				bad++;
			}
		CHECK(bad == 0, "%s window: %s: %d of %d fetched values are not 0..%d each once", w->name, what, bad,
		      n * nranks, n * nranks - 1);
		free(all);
	}
}

/* Every rank adds 1 to one int64 location (on rank 0) n times and to one int
 * location (on the last rank) n times, a flush after each. */
static void fetch_ops(struct win *w, int n)
{
	int64_t *got64 = malloc(sizeof *got64 * (size_t)n), *got32 = malloc(sizeof *got32 * (size_t)n);
	int64_t one = 1, v = -1;
	int32_t one32 = 1, v32 = -1, r32 = -1;
	int t64 = 0, t32 = nranks - 1;

	self_lock(w, 1);
	*(int64_t *)(w->base + OFF_FOP64) = 0;
	*(int32_t *)(w->base + OFF_FOP32) = 0;
	self_unlock(w);
	MPI_Barrier(MPI_COMM_WORLD);

	MPI_Win_lock_all(0, w->w);
	for (int i = 0; i < n; i++) {
		MPI_Fetch_and_op(&one, &got64[i], MPI_INT64_T, t64, OFF_FOP64, MPI_SUM, w->w);
		MPI_Win_flush(t64, w->w);
		MPI_Fetch_and_op(&one32, &r32, MPI_INT32_T, t32, OFF_FOP32, MPI_SUM, w->w);
		MPI_Win_flush(t32, w->w);
		got32[i] = r32;
	}
	MPI_Win_unlock_all(w->w);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_lock_all(0, w->w);
	MPI_Fetch_and_op(NULL, &v, MPI_INT64_T, t64, OFF_FOP64, MPI_NO_OP, w->w);
	MPI_Fetch_and_op(NULL, &v32, MPI_INT32_T, t32, OFF_FOP32, MPI_NO_OP, w->w);
	MPI_Win_flush_all(w->w);
	MPI_Win_unlock_all(w->w);
	CHECK(v == (int64_t)n * nranks, "%s window: MPI_Fetch_and_op MPI_SUM int64, %d ranks x %d: final %lld, want %lld",
	      w->name, nranks, n, (long long)v, (long long)n * nranks);
	CHECK(v32 == n * nranks, "%s window: MPI_Fetch_and_op MPI_SUM int, %d ranks x %d: final %d, want %d", w->name,
	      nranks, n, v32, n * nranks);
	check_permutation(got64, n, "MPI_Fetch_and_op MPI_SUM int64", w);
	check_permutation(got32, n, "MPI_Fetch_and_op MPI_SUM int", w);
	MPI_Barrier(MPI_COMM_WORLD);
	free(got64);
	free(got32);
}

static void cas_counter(struct win *w, int k)
{
	int64_t *won = malloc(sizeof *won * (size_t)k), guess = 0, res = -1, v = -1;
	int t = nranks - 1, tries = 0;

	self_lock(w, 1);
	*(int64_t *)(w->base + OFF_CAS) = 0;
	self_unlock(w);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_lock_all(0, w->w);
	for (int i = 0; i < k;) {
		int64_t next = guess + 1;

		MPI_Compare_and_swap(&next, &guess, &res, MPI_INT64_T, t, OFF_CAS, w->w);
		MPI_Win_flush(t, w->w);
		tries++;
		if (res == guess)
			won[i++] = guess;
		guess = res == guess ? next : res;
		if (tries > 100 * k * nranks)
			break;
	}
	MPI_Win_unlock_all(w->w);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_lock_all(0, w->w);
	MPI_Fetch_and_op(NULL, &v, MPI_INT64_T, t, OFF_CAS, MPI_NO_OP, w->w);
	MPI_Win_unlock_all(w->w);
	CHECK(tries <= 100 * k * nranks, "%s window: CAS counter: no progress after %d tries", w->name, tries);
	CHECK(v == (int64_t)k * nranks, "%s window: CAS counter, %d ranks x %d: final %lld, want %lld", w->name,
	      nranks, k, (long long)v, (long long)k * nranks);
	check_permutation(won, k, "MPI_Compare_and_swap counter", w);
	free(won);
}

static void bench(void)
{
	struct win w;
	int iters = env_int("OXMR_OSC_ITERS", 2000), warm = iters / 10 + 10, bw_iters = iters / 10 + 20;
	const char *fl = getenv("OXMR_OSC_BENCH_FLAVOR");
	unsigned char *buf = malloc(MAXSIZE);
	int64_t one = 1, res = 0;
	double t0 = 0, us;

	if (nranks < 2) {
		fprintf(stderr, "onesided: the timing mode needs 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	memset(buf, 0x11, MAXSIZE);
	win_open(&w, !(fl && strcmp(fl, "allocate") == 0));
	MPI_Win_lock_all(0, w.w);
	if (rank == 0) {
		for (int i = 0; i < warm + iters; i++) {
			if (i == warm)
				t0 = now_s();
			MPI_Put(buf, 8, MPI_BYTE, 1, (MPI_Aint)slot_off(0), 8, MPI_BYTE, w.w);
			MPI_Win_flush(1, w.w);
		}
		us = (now_s() - t0) * 1e6 / iters;
		printf("osc put_lat_8B %.2f us\n", us);
		for (int i = 0; i < warm + iters; i++) {
			if (i == warm)
				t0 = now_s();
			MPI_Get(buf, 8, MPI_BYTE, 1, (MPI_Aint)slot_off(0), 8, MPI_BYTE, w.w);
			MPI_Win_flush(1, w.w);
		}
		us = (now_s() - t0) * 1e6 / iters;
		printf("osc get_lat_8B %.2f us\n", us);
		for (int i = 0; i < 8 + bw_iters; i++) {
			if (i == 8)
				t0 = now_s();
			for (int j = 0; j < 4; j++)
				MPI_Put(buf + (size_t)j * (1u << 20), 1 << 20, MPI_BYTE, 1,
					(MPI_Aint)(slot_off(0) + (size_t)j * (1u << 20)), 1 << 20, MPI_BYTE, w.w);
			MPI_Win_flush(1, w.w);
		}
		printf("osc put_bw_1MiB %.1f MB/s\n", 4.0 * (1 << 20) * bw_iters / (now_s() - t0) / 1e6);
		for (int i = 0; i < warm + iters; i++) {
			if (i == warm)
				t0 = now_s();
			MPI_Fetch_and_op(&one, &res, MPI_INT64_T, 1, OFF_FOP64, MPI_SUM, w.w);
			MPI_Win_flush(1, w.w);
		}
		us = (now_s() - t0) * 1e6 / iters;
		printf("osc fop_lat %.2f us\n", us);
		fflush(stdout);
	}
	MPI_Win_unlock_all(w.w);
	MPI_Barrier(MPI_COMM_WORLD);
	win_close(&w);
	free(buf);
}

int main(int argc, char **argv)
{
	int all_fails = 0, all_checks = 0, int_max, cas_allocate, cas_create, n;
	unsigned char *buf;
	const char *b = getenv("OXMR_MPI_CHECK_BREAK");

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if ((getenv("OXMR_OSC_BENCH") && strcmp(getenv("OXMR_OSC_BENCH"), "1") == 0) ||
	    (argc > 1 && strcmp(argv[1], "bench") == 0)) {
		bench();
		MPI_Finalize();
		return 0;
	}
	break_once = b && strcmp(b, "1") == 0;
	trace = env_int("OXMR_OSC_TRACE", 0);
	int_max = !skipped("int_max");
	cas_allocate = !skipped("cas_allocate");
	cas_create = !skipped("cas_create");
	n = env_int("OXMR_OSC_ATOMIC_N", 500);
	if (n < 1)
		n = 1;
	/* (One 4 MiB source per target, plus one to read back into.) */
	buf = malloc((size_t)(nranks > 2 ? nranks : 2) * MAXSIZE);
	if (!buf) {
		fprintf(stderr, "rank %d: malloc failed\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (int create = 0; create < 2; create++) {
		struct win w;

		win_open(&w, create);
		phase(&w, "put/get under fence");
		put_get_fence(&w, buf);
		phase(&w, "put/get under lock");
		put_get_lock(&w, buf);
		phase(&w, "put/get under lock_all");
		put_get_lock_all(&w, buf);
		phase(&w, "accumulate");
		accumulates(&w, int_max);
		phase(&w, "get_accumulate");
		get_accumulates(&w);
		phase(&w, "fetch_and_op");
		fetch_ops(&w, n);
		phase(&w, "compare_and_swap");
		if (create ? cas_create : cas_allocate)
			cas_counter(&w, n / 2 > 0 ? n / 2 : 1);
		phase(&w, "free");
		win_close(&w);
	}
	MPI_Allreduce(&fails, &all_fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&checks, &all_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("onesided: %d of %d checks failed (%d ranks, windows allocate and create, put/get %zu sizes "
		       "1 B..4 MiB under fence/lock/lock_all, accumulate, get_accumulate, fetch_and_op x %d, "
		       "compare_and_swap x %d)%s%s%s\n",
		       all_fails, all_checks, nranks, NSIZES, n, n / 2 > 0 ? n / 2 : 1,
		       int_max ? "" : "; skipped: MPI_MAX on int", cas_allocate ? "" : "; skipped: CAS on allocate window",
		       cas_create ? "" : "; skipped: CAS on create window");
	free(buf);
	MPI_Finalize();
	return all_fails ? 1 : 0;
}
