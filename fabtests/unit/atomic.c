/*
 * atomic: FI_ATOMIC between processes (fi_atomic(3)). run.sh runs it on
 * shared memory, again with FI_OXMR_WIRE=tcp, and across two hosts.
 *
 * 1. Every (call, operation, datatype): fi_atomicvalid,
 *    fi_fetch_atomicvalid, fi_compare_atomicvalid and fi_query_atomic
 *    agree with fi_atomic(3)'s table (the long double types are not
 *    offered), and every valid one runs on three elements at the target:
 *    the target's new values (read back with fi_read) and the old values a
 *    fetch or compare returns are compared with this file's own reference
 *    computation; completions say FI_ATOMIC and FI_WRITE or FI_READ.
 * 2. The v, msg and inject forms, remote CQ data (FI_REMOTE_CQ_DATA at the
 *    target as FI_ATOMIC|FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA), and the target's
 *    remote counters (FI_REMOTE_WRITE, FI_REMOTE_READ) counting exactly the
 *    accesses made.
 * 3. Refusals: a read-only region, a wrong key, out of bounds (error
 *    completions, FI_EACCES); an operation a type does not have, long
 *    double, count 0 or above the valid count, FI_INJECT on a fetch
 *    (-FI_EOPNOTSUPP / -FI_EINVAL at the call).
 * 4. Four processes hammer one target: fetch-and-add on one 64-bit
 *    location (the old values they get back are each of 0..N*K-1 once),
 *    a counter built on compare-and-swap, injected adds on a misaligned
 *    32-bit location; the final values, the endpoint's remote counters and
 *    a counter bound to the region (FI_RMA_EVENT) are all exact.
 */
#include "oxt.h"

#include <complex.h>
#include <poll.h>
#include <sys/wait.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

typedef __int128 i128;
typedef unsigned __int128 u128;

#define N_ELEM 3
#define REGION 4096
#define N_PROC 4
#define K_OPS 300

enum call { C_WRITE, C_FETCH, C_COMPARE };
static const char *call_name[] = { "fi_atomic", "fi_fetch_atomic", "fi_compare_atomic" };

static size_t dt_size(int dt)
{
	switch (dt) {
	case FI_INT8: case FI_UINT8: return 1;
	case FI_INT16: case FI_UINT16: return 2;
	case FI_INT32: case FI_UINT32: case FI_FLOAT: return 4;
	case FI_INT64: case FI_UINT64: case FI_DOUBLE: case FI_FLOAT_COMPLEX: return 8;
	case FI_DOUBLE_COMPLEX: case FI_INT128: case FI_UINT128: return 16;
	case FI_LONG_DOUBLE: return sizeof(long double);
	case FI_LONG_DOUBLE_COMPLEX: return sizeof(long double complex);
	}
	return 0;
}

static bool is_int(int dt) { return dt <= FI_UINT64 || dt == FI_INT128 || dt == FI_UINT128; }
static bool is_complex(int dt) { return dt == FI_FLOAT_COMPLEX || dt == FI_DOUBLE_COMPLEX; }

/* fi_atomic(3): which call takes which operation, on which types. */
static bool expect_valid(enum call call, int op, int dt)
{
	bool in_call;

	if (dt == FI_LONG_DOUBLE || dt == FI_LONG_DOUBLE_COMPLEX)
		return false; /* not offered by oxmr (compiler-specific format) */
	switch (call) {
	case C_WRITE: in_call = op <= FI_BXOR || op == FI_ATOMIC_WRITE; break;
	case C_FETCH: in_call = op <= FI_ATOMIC_WRITE; break;
	default: in_call = op >= FI_CSWAP && op <= FI_MSWAP; break;
	}
	switch (op) {
	case FI_MIN: case FI_MAX: case FI_CSWAP_LE: case FI_CSWAP_LT: case FI_CSWAP_GE: case FI_CSWAP_GT:
		return in_call && !is_complex(dt);
	case FI_BOR: case FI_BAND: case FI_BXOR: case FI_MSWAP:
		return in_call && is_int(dt);
	}
	return in_call;
}

/* The reference: the target's new value of one element. */
#define REF_INT(T, U)                                                          \
	do {                                                                   \
		T A, B, C, R;                                                  \
		memcpy(&A, a, sizeof A); memcpy(&B, b, sizeof B); memcpy(&C, c, sizeof C); \
		R = A;                                                         \
		switch (op) {                                                  \
		case FI_MIN: if (B < A) R = B; break;                         \
		case FI_MAX: if (B > A) R = B; break;                         \
		case FI_SUM: R = (T)((U)A + (U)B); break;                     \
		case FI_PROD: R = (T)((U)A * (U)B); break;                    \
		case FI_LOR: R = A || B; break;                                \
		case FI_LAND: R = A && B; break;                               \
		case FI_BOR: R = A | B; break;                                 \
		case FI_BAND: R = A & B; break;                                \
		case FI_LXOR: R = (A && !B) || (!A && B); break;               \
		case FI_BXOR: R = A ^ B; break;                                \
		case FI_ATOMIC_WRITE: R = B; break;                            \
		case FI_CSWAP: if (C == A) R = B; break;                       \
		case FI_CSWAP_NE: if (C != A) R = B; break;                    \
		case FI_CSWAP_LE: if (C <= A) R = B; break;                    \
		case FI_CSWAP_LT: if (C < A) R = B; break;                     \
		case FI_CSWAP_GE: if (C >= A) R = B; break;                    \
		case FI_CSWAP_GT: if (C > A) R = B; break;                     \
		case FI_MSWAP: R = (B & C) | (A & ~C); break;                  \
		}                                                              \
		memcpy(out, &R, sizeof R);                                     \
	} while (0)

#define REF_REAL(T)                                                            \
	do {                                                                   \
		T A, B, C, R;                                                  \
		memcpy(&A, a, sizeof A); memcpy(&B, b, sizeof B); memcpy(&C, c, sizeof C); \
		R = A;                                                         \
		switch (op) {                                                  \
		case FI_MIN: if (B < A) R = B; break;                         \
		case FI_MAX: if (B > A) R = B; break;                         \
		case FI_SUM: R = A + B; break;                                 \
		case FI_PROD: R = A * B; break;                                \
		case FI_LOR: R = A || B; break;                                \
		case FI_LAND: R = A && B; break;                               \
		case FI_LXOR: R = (A && !B) || (!A && B); break;               \
		case FI_ATOMIC_WRITE: R = B; break;                            \
		case FI_CSWAP: if (C == A) R = B; break;                       \
		case FI_CSWAP_NE: if (C != A) R = B; break;                    \
		case FI_CSWAP_LE: if (C <= A) R = B; break;                    \
		case FI_CSWAP_LT: if (C < A) R = B; break;                     \
		case FI_CSWAP_GE: if (C >= A) R = B; break;                    \
		case FI_CSWAP_GT: if (C > A) R = B; break;                     \
		}                                                              \
		memcpy(out, &R, sizeof R);                                     \
	} while (0)

#define REF_CPLX(T)                                                            \
	do {                                                                   \
		T A, B, C, R;                                                  \
		memcpy(&A, a, sizeof A); memcpy(&B, b, sizeof B); memcpy(&C, c, sizeof C); \
		R = A;                                                         \
		switch (op) {                                                  \
		case FI_SUM: R = A + B; break;                                 \
		case FI_PROD: R = A * B; break;                                \
		case FI_LOR: R = (A != 0) || (B != 0); break;                  \
		case FI_LAND: R = (A != 0) && (B != 0); break;                 \
		case FI_LXOR: R = (A != 0) != (B != 0); break;                 \
		case FI_ATOMIC_WRITE: R = B; break;                            \
		case FI_CSWAP: if (C == A) R = B; break;                       \
		case FI_CSWAP_NE: if (C != A) R = B; break;                    \
		}                                                              \
		memcpy(out, &R, sizeof R);                                     \
	} while (0)

static void ref(int op, int dt, const void *a, const void *b, const void *c, void *out)
{
	switch (dt) {
	case FI_INT8: REF_INT(int8_t, uint8_t); break;
	case FI_UINT8: REF_INT(uint8_t, uint8_t); break;
	case FI_INT16: REF_INT(int16_t, uint16_t); break;
	case FI_UINT16: REF_INT(uint16_t, uint16_t); break;
	case FI_INT32: REF_INT(int32_t, uint32_t); break;
	case FI_UINT32: REF_INT(uint32_t, uint32_t); break;
	case FI_INT64: REF_INT(int64_t, uint64_t); break;
	case FI_UINT64: REF_INT(uint64_t, uint64_t); break;
	case FI_INT128: REF_INT(i128, u128); break;
	case FI_UINT128: REF_INT(u128, u128); break;
	case FI_FLOAT: REF_REAL(float); break;
	case FI_DOUBLE: REF_REAL(double); break;
	case FI_FLOAT_COMPLEX: REF_CPLX(float complex); break;
	case FI_DOUBLE_COMPLEX: REF_CPLX(double complex); break;
	}
}

/* One value `x` (and, for wide integers, high bits `hi`) as datatype `dt`. */
static void val(int dt, double x, uint64_t hi, void *out)
{
	switch (dt) {
	case FI_INT8: { int8_t v = (int8_t)x; memcpy(out, &v, 1); break; }
	case FI_UINT8: { uint8_t v = (uint8_t)(int)x; memcpy(out, &v, 1); break; }
	case FI_INT16: { int16_t v = (int16_t)x; memcpy(out, &v, 2); break; }
	case FI_UINT16: { uint16_t v = (uint16_t)(int)x; memcpy(out, &v, 2); break; }
	case FI_INT32: { int32_t v = (int32_t)x; memcpy(out, &v, 4); break; }
	case FI_UINT32: { uint32_t v = (uint32_t)(int64_t)x; memcpy(out, &v, 4); break; }
	case FI_INT64: { int64_t v = (int64_t)x + (int64_t)(hi << 32); memcpy(out, &v, 8); break; }
	case FI_UINT64: { uint64_t v = (uint64_t)(int64_t)x + (hi << 32); memcpy(out, &v, 8); break; }
	case FI_INT128: { i128 v = (i128)(int64_t)x + ((i128)hi << 80); memcpy(out, &v, 16); break; }
	case FI_UINT128: { u128 v = (u128)(i128)(int64_t)x + ((u128)hi << 80); memcpy(out, &v, 16); break; }
	case FI_FLOAT: { float v = (float)x; memcpy(out, &v, 4); break; }
	case FI_DOUBLE: { double v = x; memcpy(out, &v, 8); break; }
	case FI_FLOAT_COMPLEX: { float complex v = (float)x + (float)(x / 2) * I; memcpy(out, &v, 8); break; }
	case FI_DOUBLE_COMPLEX: { double complex v = x + (x / 4) * I; memcpy(out, &v, 16); break; }
	}
}

static const char *dt_name(int dt)
{
	static const char *n[] = { "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64",
				   "UINT64", "FLOAT", "DOUBLE", "FLOAT_COMPLEX", "DOUBLE_COMPLEX",
				   "LONG_DOUBLE", "LONG_DOUBLE_COMPLEX", "INT128", "UINT128" };
	return dt >= 0 && dt < 16 ? n[dt] : "?";
}

/* ---- the target process ---- */

struct target_info {
	char name[64];
	uint64_t addr;   /* byte 0 of the region as peers name it */
	uint64_t key_rw; /* FI_REMOTE_READ|FI_REMOTE_WRITE */
	uint64_t key_ro; /* FI_REMOTE_READ only */
	uint64_t addr_ro;
};

struct target {
	struct oxt_ep x;
	struct fid_cntr *rw, *rr, *mrc;
	struct fid_mr *mr_rw, *mr_ro;
	unsigned char *buf, *ro;
	uint64_t cq_data_seen, cq_data_last, cq_data_flags;
};

/* An endpoint with remote counters bound before it is enabled. */
static void target_open(struct target *t)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA, .size = 256 };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	size_t len = sizeof t->x.name;
	uint64_t acc = FI_REMOTE_READ | FI_REMOTE_WRITE;

	memset(t, 0, sizeof *t);
	hints->caps |= FI_ATOMIC | FI_RMA | FI_RMA_EVENT;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	t->x.e.info = info;
	REQUIRE_RC(fi_fabric(info->fabric_attr, &t->x.e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(t->x.e.fabric, info, &t->x.e.domain, NULL), 0);
	REQUIRE_RC(fi_cq_open(t->x.e.domain, &ca, &t->x.cq, NULL), 0);
	REQUIRE_RC(fi_av_open(t->x.e.domain, &aa, &t->x.av, NULL), 0);
	REQUIRE_RC(fi_cntr_open(t->x.e.domain, &na, &t->rw, NULL), 0);
	REQUIRE_RC(fi_cntr_open(t->x.e.domain, &na, &t->rr, NULL), 0);
	REQUIRE_RC(fi_cntr_open(t->x.e.domain, &na, &t->mrc, NULL), 0);
	REQUIRE_RC(fi_endpoint(t->x.e.domain, info, &t->x.ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(t->x.ep, &t->x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(t->x.ep, &t->x.av->fid, 0), 0);
	REQUIRE_RC(fi_ep_bind(t->x.ep, &t->rw->fid, FI_REMOTE_WRITE), 0);
	REQUIRE_RC(fi_ep_bind(t->x.ep, &t->rr->fid, FI_REMOTE_READ), 0);
	REQUIRE_RC(fi_enable(t->x.ep), 0);
	REQUIRE_RC(fi_getname(&t->x.ep->fid, t->x.name, &len), 0);
	t->buf = aligned_alloc(4096, REGION);
	t->ro = aligned_alloc(4096, REGION);
	REQUIRE(t->buf && t->ro, "aligned_alloc");
	memset(t->buf, 0, REGION);
	memset(t->ro, 0x5a, REGION);
	REQUIRE_RC(fi_mr_reg(t->x.e.domain, t->buf, REGION, acc, 0, 0xa1, FI_RMA_EVENT, &t->mr_rw, NULL), 0);
	REQUIRE_RC(fi_mr_bind(t->mr_rw, &t->mrc->fid, FI_REMOTE_WRITE), 0);
	REQUIRE_RC(fi_mr_enable(t->mr_rw), 0);
	REQUIRE_RC(fi_mr_reg(t->x.e.domain, t->ro, REGION, FI_REMOTE_READ, 0, 0xa2, 0, &t->mr_ro, NULL), 0);
}

static struct target_info target_info(const struct target *t)
{
	struct target_info ti = { .key_rw = fi_mr_key(t->mr_rw), .key_ro = fi_mr_key(t->mr_ro) };
	bool virt = (t->x.e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;

	memcpy(ti.name, t->x.name, sizeof ti.name);
	ti.addr = virt ? (uint64_t)(uintptr_t)t->buf : 0;
	ti.addr_ro = virt ? (uint64_t)(uintptr_t)t->ro : 0;
	return ti;
}

/* Progress: drain the CQ (remote CQ data entries are noted). */
static void target_poll(struct target *t)
{
	struct fi_cq_data_entry e[16];
	ssize_t n = fi_cq_read(t->x.cq, e, 16);

	for (ssize_t i = 0; i < n; i++) {
		if (e[i].flags & FI_REMOTE_CQ_DATA) {
			t->cq_data_seen++;
			t->cq_data_last = e[i].data;
			t->cq_data_flags = e[i].flags;
		}
	}
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };
		fi_cq_readerr(t->x.cq, &err, 0);
	}
}

static void target_close(struct target *t)
{
	EXPECT_RC(fi_close(&t->mr_rw->fid), 0);
	EXPECT_RC(fi_close(&t->mr_ro->fid), 0);
	EXPECT_RC(fi_close(&t->x.ep->fid), 0);
	EXPECT_RC(fi_close(&t->rw->fid), 0);
	EXPECT_RC(fi_close(&t->rr->fid), 0);
	EXPECT_RC(fi_close(&t->mrc->fid), 0);
	EXPECT_RC(fi_close(&t->x.av->fid), 0);
	EXPECT_RC(fi_close(&t->x.cq->fid), 0);
	oxt_close(&t->x.e);
	free(t->buf);
	free(t->ro);
}

/* What the target reports when asked ('c'). */
struct target_report {
	uint64_t rw, rr, mrc, cq_data_seen, cq_data_last, cq_data_flags;
};

/* The target of groups 1-3: serves until told to quit ('q'), answering
 * 'c' with its counters. */
static int target_main(int sock)
{
	struct target t;
	struct target_info ti;

	oxt_reset_counts();
	oxt_become_peer();
	target_open(&t);
	ti = target_info(&t);
	REQUIRE(write(sock, &ti, sizeof ti) == sizeof ti, "socketpair write");
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		char c;

		target_poll(&t);
		if (poll(&p, 1, 0) != 1)
			continue;
		c = oxt_get(sock);
		if (c == 'q')
			break;
		if (c == 'c') {
			struct target_report r = {
				.rw = fi_cntr_read(t.rw), .rr = fi_cntr_read(t.rr), .mrc = fi_cntr_read(t.mrc),
				.cq_data_seen = t.cq_data_seen, .cq_data_last = t.cq_data_last,
				.cq_data_flags = t.cq_data_flags,
			};
			REQUIRE(write(sock, &r, sizeof r) == sizeof r, "socketpair write");
		}
	}
	target_close(&t);
	return oxt_done();
}

/* ---- the initiator ---- */

struct origin {
	struct oxt_ep x;
	fi_addr_t peer;
	struct target_info ti;
	uint64_t rw, rr; /* the remote writes and reads made so far */
};

static void origin_open(struct origin *o, int sock)
{
	oxt_ep_open(&o->x, 0, FI_WAIT_NONE);
	REQUIRE(read(sock, &o->ti, sizeof o->ti) == sizeof o->ti, "socketpair read");
	REQUIRE_RC(fi_av_insert(o->x.av, o->ti.name, 1, &o->peer, 0, NULL), 1);
}

/* Post `expr` again while it says -FI_EAGAIN (progressing the CQ). */
#define POST(o, expr)                                                          \
	({                                                                     \
		ssize_t rc__;                                                  \
		double until__ = oxt_now_ms() + 10000;                        \
		while ((rc__ = (expr)) == -FI_EAGAIN && oxt_now_ms() < until__) \
			fi_cq_read((o)->x.cq, NULL, 0);                        \
		rc__;                                                          \
	})

/* The next completion: 0 and its flags, or a positive error code. */
static int wait_flags(struct origin *o, void *ctx, uint64_t *flags)
{
	struct fi_cq_tagged_entry e;
	double until = oxt_now_ms() + 10000;

	*flags = 0;
	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(o->x.cq, &e, 1);
		if (n == 1) {
			EXPECT(e.op_context == ctx, "completion for another operation");
			*flags = e.flags;
			return 0;
		}
		if (n == -FI_EAVAIL) {
			void *ectx;
			int rc = OXT_READERR(o->x.cq, &ectx);
			if (rc > 0)
				EXPECT(ectx == ctx, "error completion for another operation");
			return rc;
		}
	}
	EXPECT(0, "no completion within 10 s");
	return -1;
}

static void rma(struct origin *o, bool read, void *buf, size_t len, uint64_t off)
{
	uint64_t f;
	ssize_t rc = read ? POST(o, fi_read(o->x.ep, buf, len, NULL, o->peer, o->ti.addr + off, o->ti.key_rw, buf))
			  : POST(o, fi_write(o->x.ep, buf, len, NULL, o->peer, o->ti.addr + off, o->ti.key_rw, buf));
	REQUIRE_RC(rc, 0);
	REQUIRE_EQ(wait_flags(o, buf, &f), 0);
	if (read)
		o->rr++;
	else
		o->rw++;
}

static struct target_report ask_target(int sock)
{
	struct target_report r;

	oxt_put(sock, 'c');
	REQUIRE(read(sock, &r, sizeof r) == sizeof r, "socketpair read");
	return r;
}

/* Group 1: one (call, op, dt) against the reference. */
static void one_case(struct origin *o, enum call call, int op, int dt)
{
	size_t s = dt_size(dt), n = N_ELEM * s;
	unsigned char init[N_ELEM * 16], b[N_ELEM * 16], c[N_ELEM * 16], res[N_ELEM * 16];
	unsigned char back[N_ELEM * 16], want[N_ELEM * 16];
	static const double A[N_ELEM] = { 10, -3, 7 }, B[N_ELEM] = { 5, 20, -2 };
	uint64_t flags, want_flags;
	ssize_t rc;
	int e;

	for (int i = 0; i < N_ELEM; i++) {
		val(dt, A[i], 0x9e37 + i, init + i * s);
		val(dt, B[i], 0x7f4a + i, b + i * s);
		/* compare operands: equal, below and above the target */
		val(dt, A[i] + (i == 0 ? 0 : i == 1 ? -1 : 1), 0x9e37 + i, c + i * s);
		if (op == FI_MSWAP)
			val(dt, 0x5a + i, 0x0ff0, c + i * s);
		ref(op, dt, init + i * s, b + i * s, c + i * s, want + i * s);
	}
	memset(res, 0xee, sizeof res);
	rma(o, false, init, n, 0);
	switch (call) {
	case C_WRITE:
		rc = POST(o, fi_atomic(o->x.ep, b, N_ELEM, NULL, o->peer, o->ti.addr, o->ti.key_rw, dt, op, res));
		want_flags = FI_ATOMIC | FI_WRITE;
		break;
	case C_FETCH:
		rc = POST(o, fi_fetch_atomic(o->x.ep, op == FI_ATOMIC_READ ? NULL : b, N_ELEM, NULL, res, NULL,
					      o->peer, o->ti.addr, o->ti.key_rw, dt, op, res));
		want_flags = FI_ATOMIC | FI_READ;
		break;
	default:
		rc = POST(o, fi_compare_atomic(o->x.ep, b, N_ELEM, NULL, c, NULL, res, NULL, o->peer, o->ti.addr,
						o->ti.key_rw, dt, op, res));
		want_flags = FI_ATOMIC | FI_READ;
		break;
	}
	if (rc != 0) {
		EXPECT_RC(rc, 0);
		return;
	}
	e = wait_flags(o, res, &flags);
	EXPECT(e == 0, "%s op %d %s: completion error %d", call_name[call], op, dt_name(dt), e);
	EXPECT(flags == want_flags, "%s op %d %s: completion flags 0x%llx, expected 0x%llx", call_name[call], op,
	       dt_name(dt), (unsigned long long)flags, (unsigned long long)want_flags);
	if (op == FI_ATOMIC_READ)
		o->rr++;
	else
		o->rw++;
	rma(o, true, back, n, 0);
	EXPECT(memcmp(back, want, n) == 0, "%s op %d %s: the target holds other values than the reference",
	       call_name[call], op, dt_name(dt));
	if (call != C_WRITE)
		EXPECT(memcmp(res, init, n) == 0, "%s op %d %s: the fetched values are not the target's old ones",
		       call_name[call], op, dt_name(dt));
}

static void group_table(struct origin *o, int sock)
{
	int ran = 0, offered = 0;

	OXT_GROUP("every (call, op, datatype): valid calls follow fi_atomic(3), each valid one matches the reference");
	for (int call = C_WRITE; call <= C_COMPARE; call++) {
		for (int op = 0; op < FI_ATOMIC_OP_LAST; op++) {
			for (int dt = 0; dt <= FI_UINT128; dt++) {
				size_t count = 0;
				struct fi_atomic_attr attr = { 0 };
				uint64_t qf = call == C_FETCH ? FI_FETCH_ATOMIC : call == C_COMPARE ? FI_COMPARE_ATOMIC : 0;
				int rc = call == C_WRITE ? fi_atomicvalid(o->x.ep, dt, op, &count)
					 : call == C_FETCH ? fi_fetch_atomicvalid(o->x.ep, dt, op, &count)
							   : fi_compare_atomicvalid(o->x.ep, dt, op, &count);
				int q = fi_query_atomic(o->x.e.domain, dt, op, &attr, qf);
				bool want = expect_valid(call, op, dt);

				EXPECT(rc == (want ? 0 : -FI_EOPNOTSUPP), "%s valid op %d %s: %d, expected %s",
				       call_name[call], op, dt_name(dt), rc, want ? "0" : "-FI_EOPNOTSUPP");
				EXPECT(q == rc, "fi_query_atomic op %d %s: %d, the valid call said %d", op, dt_name(dt), q, rc);
				if (!want || rc)
					continue;
				offered++;
				EXPECT(count >= N_ELEM && count * dt_size(dt) == 2048, "valid count %zu for %s", count,
				       dt_name(dt));
				EXPECT(attr.size == dt_size(dt) && attr.count == count, "fi_query_atomic %s: size %zu count %zu",
				       dt_name(dt), attr.size, attr.count);
				one_case(o, call, op, dt);
				ran++;
			}
		}
	}
	printf("# %d (call, op, datatype) triples offered, %d run against the reference\n", offered, ran);
	EXPECT(ran > 300, "only %d triples ran", ran);
	{
		struct target_report r = ask_target(sock);
		EXPECT_EQ(r.rw, o->rw);
		EXPECT_EQ(r.rr, o->rr);
		EXPECT_EQ(r.mrc, o->rw);
	}
}

static void group_forms(struct origin *o, int sock)
{
	uint64_t v[4] = { 1, 2, 3, 4 }, add[4] = { 10, 20, 30, 40 }, back[4], res[4], cmp[4], flags;
	struct fi_ioc ioc[2] = { { add, 1 }, { add + 1, 3 } };
	struct fi_ioc rioc[2] = { { res, 2 }, { res + 2, 2 } };
	struct fi_ioc cioc[1] = { { cmp, 4 } };
	struct fi_rma_ioc r = { o->ti.addr, 4, o->ti.key_rw };
	struct fi_msg_atomic m = {
		.msg_iov = ioc, .iov_count = 2, .addr = o->peer, .rma_iov = &r, .rma_iov_count = 1,
		.datatype = FI_UINT64, .op = FI_SUM, .context = back, .data = 0xda7a,
	};
	struct target_report rep;

	OXT_GROUP("fi_atomicv, fi_atomicmsg with remote CQ data, fi_inject_atomic, fi_fetch_atomicv, fi_compare_atomicmsg");
	rma(o, false, v, sizeof v, 0);
	REQUIRE_RC(POST(o, fi_atomicv(o->x.ep, ioc, NULL, 2, o->peer, o->ti.addr, o->ti.key_rw, FI_UINT64, FI_SUM, v)), 0);
	EXPECT_EQ(wait_flags(o, v, &flags), 0);
	REQUIRE_RC(POST(o, fi_atomicmsg(o->x.ep, &m, FI_REMOTE_CQ_DATA)), 0);
	EXPECT_EQ(wait_flags(o, back, &flags), 0);
	REQUIRE_RC(POST(o, fi_inject_atomic(o->x.ep, add, 4, o->peer, o->ti.addr, o->ti.key_rw, FI_UINT64, FI_SUM)), 0);
	o->rw += 3;
	/* (The inject has no completion; the fetch behind it, on the same
	 * peer, sees it: atomics from one peer take effect in order.) */
	REQUIRE_RC(POST(o, fi_fetch_atomicv(o->x.ep, NULL, NULL, 0, rioc, NULL, 2, o->peer, o->ti.addr, o->ti.key_rw,
					     FI_UINT64, FI_ATOMIC_READ, res)), 0);
	EXPECT_EQ(wait_flags(o, res, &flags), 0);
	o->rr++;
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(res[i], v[i] + 3 * add[i]);
	memcpy(cmp, res, sizeof cmp);
	cmp[1]++; /* element 1 does not match: stays */
	{
		uint64_t nv[4] = { 100, 200, 300, 400 };
		struct fi_ioc nioc[1] = { { nv, 4 } };
		struct fi_msg_atomic cm = {
			.msg_iov = nioc, .iov_count = 1, .addr = o->peer, .rma_iov = &r, .rma_iov_count = 1,
			.datatype = FI_UINT64, .op = FI_CSWAP, .context = cmp,
		};
		uint64_t old[4];
		struct fi_ioc oioc[1] = { { old, 4 } };

		REQUIRE_RC(POST(o, fi_compare_atomicmsg(o->x.ep, &cm, cioc, NULL, 1, oioc, NULL, 1, 0)), 0);
		EXPECT_EQ(wait_flags(o, cmp, &flags), 0);
		EXPECT_EQ(flags, (uint64_t)(FI_ATOMIC | FI_READ));
		o->rw++;
		rma(o, true, back, sizeof back, 0);
		for (int i = 0; i < 4; i++) {
			EXPECT_EQ(old[i], res[i]);
			EXPECT_EQ(back[i], i == 1 ? res[i] : nv[i]);
		}
	}
	rep = ask_target(sock);
	EXPECT_EQ(rep.rw, o->rw);
	EXPECT_EQ(rep.rr, o->rr);
	EXPECT_EQ(rep.cq_data_seen, 1);
	EXPECT_EQ(rep.cq_data_last, 0xda7a);
	EXPECT_EQ(rep.cq_data_flags, (uint64_t)(FI_ATOMIC | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
}

static void group_refusals(struct origin *o, int sock)
{
	uint64_t one = 1, res = 0, flags;
	long double ld = 1;
	struct fi_msg_atomic m;
	struct fi_ioc ioc = { &one, 1 };
	struct fi_rma_ioc r = { o->ti.addr, 1, o->ti.key_rw };
	struct target_report rep;

	OXT_GROUP("refusals: read-only region, wrong key, out of bounds; bad operations at the call");
	REQUIRE_RC(POST(o, fi_atomic(o->x.ep, &one, 1, NULL, o->peer, o->ti.addr_ro, o->ti.key_ro, FI_UINT64, FI_SUM,
				      &one)), 0);
	EXPECT_EQ(wait_flags(o, &one, &flags), FI_EACCES);
	/* (FI_ATOMIC_READ needs remote read only: allowed there.) */
	REQUIRE_RC(POST(o, fi_fetch_atomic(o->x.ep, NULL, 1, NULL, &res, NULL, o->peer, o->ti.addr_ro, o->ti.key_ro,
					    FI_UINT64, FI_ATOMIC_READ, &res)), 0);
	EXPECT_EQ(wait_flags(o, &res, &flags), 0);
	EXPECT_EQ(res, 0x5a5a5a5a5a5a5a5aULL);
	o->rr++;
	/* (A fetch that would also write needs remote write too.) */
	REQUIRE_RC(POST(o, fi_fetch_atomic(o->x.ep, &one, 1, NULL, &res, NULL, o->peer, o->ti.addr_ro, o->ti.key_ro,
					    FI_UINT64, FI_SUM, &res)), 0);
	EXPECT_EQ(wait_flags(o, &res, &flags), FI_EACCES);
	REQUIRE_RC(POST(o, fi_atomic(o->x.ep, &one, 1, NULL, o->peer, o->ti.addr, o->ti.key_rw ^ 0x10, FI_UINT64,
				      FI_SUM, &one)), 0);
	EXPECT_EQ(wait_flags(o, &one, &flags), FI_EACCES);
	REQUIRE_RC(POST(o, fi_atomic(o->x.ep, &one, 1, NULL, o->peer, o->ti.addr + REGION - 4, o->ti.key_rw,
				      FI_UINT64, FI_SUM, &one)), 0);
	EXPECT_EQ(wait_flags(o, &one, &flags), FI_EACCES);
	EXPECT_RC(fi_atomic(o->x.ep, &one, 1, NULL, o->peer, o->ti.addr, o->ti.key_rw, FI_DOUBLE, FI_BOR, &one),
		  -FI_EOPNOTSUPP);
	EXPECT_RC(fi_atomic(o->x.ep, &ld, 1, NULL, o->peer, o->ti.addr, o->ti.key_rw, FI_LONG_DOUBLE, FI_SUM, &ld),
		  -FI_EOPNOTSUPP);
	EXPECT_RC(fi_compare_atomic(o->x.ep, &one, 1, NULL, &one, NULL, &res, NULL, o->peer, o->ti.addr,
				    o->ti.key_rw, FI_UINT64, FI_SUM, &res), -FI_EOPNOTSUPP);
	EXPECT_RC(fi_atomic(o->x.ep, &one, 0, NULL, o->peer, o->ti.addr, o->ti.key_rw, FI_UINT64, FI_SUM, &one),
		  -FI_EINVAL);
	{
		static uint64_t big[257];
		EXPECT_RC(fi_atomic(o->x.ep, big, 257, NULL, o->peer, o->ti.addr, o->ti.key_rw, FI_UINT64, FI_SUM, big),
			  -FI_EINVAL);
	}
	memset(&m, 0, sizeof m);
	m.msg_iov = &ioc;
	m.iov_count = 1;
	m.addr = o->peer;
	m.rma_iov = &r;
	m.rma_iov_count = 1;
	m.datatype = FI_UINT64;
	m.op = FI_SUM;
	{
		struct fi_ioc rioc = { &res, 1 };
		EXPECT_RC(fi_fetch_atomicmsg(o->x.ep, &m, &rioc, NULL, 1, FI_INJECT), -FI_EINVAL);
	}
	m.rma_iov_count = 2;
	EXPECT_RC(fi_atomicmsg(o->x.ep, &m, 0), -FI_EINVAL);
	rep = ask_target(sock);
	EXPECT_EQ(rep.rw, o->rw);
	EXPECT_EQ(rep.rr, o->rr);
}

/* ---- group 4: several initiators on one target ---- */

struct hammer_report {
	uint64_t fetched[K_OPS];
	uint64_t cas_tries, reads;
};

static int hammer_main(int sock)
{
	struct origin o;
	static struct hammer_report rep;
	uint64_t one = 1, flags;
	uint32_t two = 2;

	oxt_reset_counts();
	oxt_become_peer();
	memset(&o, 0, sizeof o);
	origin_open(&o, sock);
	for (int i = 0; i < K_OPS; i++) {
		REQUIRE_RC(POST(&o, fi_fetch_atomic(o.x.ep, &one, 1, NULL, &rep.fetched[i], NULL, o.peer, o.ti.addr,
						     o.ti.key_rw, FI_UINT64, FI_SUM, &one)), 0);
		REQUIRE_EQ(wait_flags(&o, &one, &flags), 0);
		/* a counter on compare-and-swap: read, then swap old -> old+1 */
		for (;;) {
			uint64_t cur, next, old;

			REQUIRE_RC(POST(&o, fi_fetch_atomic(o.x.ep, NULL, 1, NULL, &cur, NULL, o.peer, o.ti.addr + 8,
							     o.ti.key_rw, FI_INT64, FI_ATOMIC_READ, &cur)), 0);
			REQUIRE_EQ(wait_flags(&o, &cur, &flags), 0);
			rep.reads++;
			next = cur + 1;
			REQUIRE_RC(POST(&o, fi_compare_atomic(o.x.ep, &next, 1, NULL, &cur, NULL, &old, NULL, o.peer,
							       o.ti.addr + 8, o.ti.key_rw, FI_INT64, FI_CSWAP, &old)), 0);
			REQUIRE_EQ(wait_flags(&o, &old, &flags), 0);
			rep.cas_tries++;
			if (old == cur)
				break;
		}
		/* injected adds on a misaligned 32-bit location (the lock path) */
		REQUIRE_RC(POST(&o, fi_inject_atomic(o.x.ep, &two, 1, o.peer, o.ti.addr + 17, o.ti.key_rw, FI_UINT32,
						      FI_SUM)), 0);
	}
	/* (Behind the injects: they have all taken effect when it completes.) */
	{
		uint32_t seen;
		REQUIRE_RC(POST(&o, fi_fetch_atomic(o.x.ep, NULL, 1, NULL, &seen, NULL, o.peer, o.ti.addr + 17,
						     o.ti.key_rw, FI_UINT32, FI_ATOMIC_READ, &seen)), 0);
		REQUIRE_EQ(wait_flags(&o, &seen, &flags), 0);
		rep.reads++;
	}
	REQUIRE(write(sock, &rep, sizeof rep) == sizeof rep, "socketpair write");
	(void)oxt_get(sock); /* stay until the target has read everything */
	oxt_ep_close(&o.x);
	return oxt_done();
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void group_hammer(void)
{
	struct target t;
	struct target_info ti;
	int sock[N_PROC];
	pid_t pid[N_PROC];
	static struct hammer_report rep[N_PROC];
	static uint64_t all[N_PROC * K_OPS];
	bool got[N_PROC] = { 0 };
	int have = 0;
	uint64_t tries = 0, reads = 0, v64;
	uint32_t v32;
	double until;

	OXT_GROUP("4 processes on one target: fetch-add, a CAS counter, misaligned injected adds; counters exact");
	target_open(&t);
	ti = target_info(&t);
	for (int i = 0; i < N_PROC; i++) {
		pid[i] = oxt_fork(hammer_main, &sock[i]);
		REQUIRE(write(sock[i], &ti, sizeof ti) == sizeof ti, "socketpair write");
	}
	until = oxt_now_ms() + 50000;
	while (have < N_PROC && oxt_now_ms() < until) {
		target_poll(&t);
		for (int i = 0; i < N_PROC; i++) {
			struct pollfd p = { .fd = sock[i], .events = POLLIN };
			if (got[i] || poll(&p, 1, 0) != 1)
				continue;
			size_t off = 0;
			while (off < sizeof rep[i]) {
				ssize_t n = read(sock[i], (char *)&rep[i] + off, sizeof rep[i] - off);
				REQUIRE(n > 0, "a hammer process went away");
				off += n;
			}
			got[i] = true;
			have++;
		}
	}
	REQUIRE_EQ(have, N_PROC);
	for (int i = 0; i < N_PROC; i++) {
		memcpy(all + i * K_OPS, rep[i].fetched, sizeof rep[i].fetched);
		tries += rep[i].cas_tries;
		reads += rep[i].reads;
		oxt_put(sock[i], 'q');
	}
	qsort(all, N_PROC * K_OPS, sizeof all[0], cmp_u64);
	for (uint64_t i = 0; i < N_PROC * K_OPS; i++) {
		if (all[i] != i) {
			EXPECT_EQ(all[i], i);
			break;
		}
	}
	memcpy(&v64, t.buf, 8);
	EXPECT_EQ(v64, (uint64_t)N_PROC * K_OPS);
	memcpy(&v64, t.buf + 8, 8);
	EXPECT_EQ(v64, (uint64_t)N_PROC * K_OPS);
	memcpy(&v32, t.buf + 17, 4);
	EXPECT_EQ(v32, (uint32_t)(2 * N_PROC * K_OPS));
	printf("# %d processes x %d: %llu CAS tries for %d increments\n", N_PROC, K_OPS, (unsigned long long)tries,
	       N_PROC * K_OPS);
	EXPECT_EQ(fi_cntr_read(t.rw), (uint64_t)(2 * N_PROC * K_OPS) + tries);
	EXPECT_EQ(fi_cntr_read(t.rr), reads);
	EXPECT_EQ(fi_cntr_read(t.mrc), (uint64_t)(2 * N_PROC * K_OPS) + tries);
	for (int i = 0; i < N_PROC; i++) {
		int st;
		REQUIRE(waitpid(pid[i], &st, 0) == pid[i], "waitpid");
		EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "hammer process %d failed", i);
		close(sock[i]);
	}
	target_close(&t);
}

int main(int argc, char **argv)
{
	struct origin o;
	int sock, st;
	pid_t pid;

	(void)argc;
	oxt_init(argv[0]);
	pid = oxt_fork(target_main, &sock);
	memset(&o, 0, sizeof o);
	origin_open(&o, sock);
	group_table(&o, sock);
	group_forms(&o, sock);
	group_refusals(&o, sock);
	oxt_put(sock, 'q');
	oxt_ep_close(&o.x);
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the target process failed");
	close(sock);
	group_hammer();
	return oxt_done();
}
