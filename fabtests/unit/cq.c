/*
 * cq: completion queue open attributes, empty reads, blocking reads with
 * timeouts and signals, wait fds, fi_trywait, strerror (fi_cq(3),
 * fi_trywait(3)).
 */
#include "oxt.h"

static struct oxt_env env;

static int cq_open(enum fi_cq_format format, enum fi_wait_obj wait,
		   struct fid_cq **cq)
{
	struct fi_cq_attr a = { .format = format, .wait_obj = wait };

	*cq = NULL;
	return fi_cq_open(env.domain, &a, cq, NULL);
}

static struct fid_cq *cq_open_ok(enum fi_cq_format format,
				 enum fi_wait_obj wait)
{
	struct fid_cq *cq;

	REQUIRE_RC(cq_open(format, wait, &cq), 0);
	return cq;
}

static void test_open(void)
{
	static const struct {
		enum fi_cq_format f;
		const char *name;
	} formats[] = {
		{ FI_CQ_FORMAT_UNSPEC, "FI_CQ_FORMAT_UNSPEC" },
		{ FI_CQ_FORMAT_CONTEXT, "FI_CQ_FORMAT_CONTEXT" },
		{ FI_CQ_FORMAT_MSG, "FI_CQ_FORMAT_MSG" },
		{ FI_CQ_FORMAT_DATA, "FI_CQ_FORMAT_DATA" },
		{ FI_CQ_FORMAT_TAGGED, "FI_CQ_FORMAT_TAGGED" },
	};
	struct fid_cq *cq = NULL;
	size_t i;
	int ret;

	OXT_GROUP("CQ formats CONTEXT/MSG/DATA/TAGGED/UNSPEC open and close");
	for (i = 0; i < sizeof formats / sizeof formats[0]; i++) {
		ret = cq_open(formats[i].f, FI_WAIT_NONE, &cq);
		EXPECT(ret == 0, "fi_cq_open(%s): %d (%s)", formats[i].name,
		       ret, fi_strerror(-ret));
		if (ret == 0)
			EXPECT_RC(fi_close(&cq->fid), 0);
	}

	OXT_GROUP("fi_cq_open refuses bad attributes");
	EXPECT_RC(cq_open((enum fi_cq_format)99, FI_WAIT_NONE, &cq),
		  -FI_EINVAL);
	EXPECT_RC(fi_cq_open(env.domain, NULL, &cq, NULL), -FI_EINVAL);
	/* (FI_WAIT_SET without a wait_set: wait_set.c tests the sets.) */
	EXPECT_RC(cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_SET, &cq), -FI_EINVAL);
	EXPECT_RC(cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_MUTEX_COND, &cq),
		  -FI_ENOSYS);
}

static void test_empty(void)
{
	struct fid_cq *cq = cq_open_ok(FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE);
	struct fi_cq_tagged_entry ent[4];
	struct fi_cq_err_entry err;
	fi_addr_t src[4];

	OXT_GROUP("empty CQ: fi_cq_read/readfrom/readerr give -FI_EAGAIN");
	EXPECT_RC(fi_cq_read(cq, ent, 4), -FI_EAGAIN);
	EXPECT_RC(fi_cq_readfrom(cq, ent, 4, src), -FI_EAGAIN);
	memset(&err, 0, sizeof err);
	EXPECT_RC(fi_cq_readerr(cq, &err, 0), -FI_EAGAIN);
	EXPECT_RC(fi_close(&cq->fid), 0);
}

/* sread with `timeout` on an empty CQ: -FI_EAGAIN after >= timeout - 10. */
static void expect_sread_timeout(struct fid_cq *cq, int timeout)
{
	struct fi_cq_tagged_entry ent;
	double t0 = oxt_now_ms(), dt;

	EXPECT_RC(fi_cq_sread(cq, &ent, 1, NULL, timeout), -FI_EAGAIN);
	dt = oxt_now_ms() - t0;
	EXPECT(dt >= timeout - 10, "fi_cq_sread(%d ms) returned after %.1f ms",
	       timeout, dt);
	EXPECT(dt < 5000, "fi_cq_sread(%d ms) took %.1f ms", timeout, dt);
}

static void *signal_later(void *arg)
{
	oxt_sleep_ms(100);
	if (fi_cq_signal(arg))
		printf("    fi_cq_signal from a thread failed\n");
	return NULL;
}

static void test_sread(void)
{
	struct fid_cq *cq = cq_open_ok(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC);
	struct fi_cq_entry ent;
	pthread_t th;
	double t0, dt;

	OXT_GROUP("fi_cq_sread on an empty CQ times out with -FI_EAGAIN (100 ms)");
	expect_sread_timeout(cq, 100);

	OXT_GROUP("fi_cq_signal before fi_cq_sread: it returns -FI_EAGAIN promptly");
	EXPECT_RC(fi_cq_signal(cq), 0);
	t0 = oxt_now_ms();
	EXPECT_RC(fi_cq_sread(cq, &ent, 1, NULL, 10000), -FI_EAGAIN);
	dt = oxt_now_ms() - t0;
	EXPECT(dt < 5000, "signalled fi_cq_sread took %.1f ms", dt);

	OXT_GROUP("fi_cq_signal from another thread wakes a blocked fi_cq_sread");
	REQUIRE(pthread_create(&th, NULL, signal_later, cq) == 0,
		"pthread_create");
	t0 = oxt_now_ms();
	EXPECT_RC(fi_cq_sread(cq, &ent, 1, NULL, 10000), -FI_EAGAIN);
	dt = oxt_now_ms() - t0;
	EXPECT(dt < 5000, "fi_cq_sread(10 s) woke after %.1f ms", dt);
	/* the thread signals after 100 ms: an earlier return did not block */
	EXPECT(dt >= 50, "fi_cq_sread(10 s) returned after %.1f ms, before the signal",
	       dt);
	pthread_join(th, NULL);
	EXPECT_RC(fi_close(&cq->fid), 0);

	OXT_GROUP("FI_WAIT_YIELD CQ: fi_cq_sread times out with -FI_EAGAIN");
	cq = cq_open_ok(FI_CQ_FORMAT_CONTEXT, FI_WAIT_YIELD);
	expect_sread_timeout(cq, 100);
	EXPECT_RC(fi_close(&cq->fid), 0);
}

static int poll_fd(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0);
}

static void check_wait_fd(enum fi_wait_obj wait, const char *name)
{
	struct fid_cq *cq = cq_open_ok(FI_CQ_FORMAT_CONTEXT, wait);
	struct fid *fids[1] = { &cq->fid };
	int fd = -1;

	EXPECT_RC(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
	EXPECT(fd >= 0, "%s: FI_GETWAIT gave fd %d", name, fd);
	EXPECT_RC(fi_trywait(env.fabric, fids, 1), 0);
	if (fd >= 0) {
		EXPECT(poll_fd(fd) == 0,
		       "%s: wait fd readable on an empty CQ after fi_trywait",
		       name);
		EXPECT_RC(fi_cq_signal(cq), 0);
		EXPECT(poll_fd(fd) == 1,
		       "%s: wait fd not readable after fi_cq_signal", name);
	}
	EXPECT_RC(fi_close(&cq->fid), 0);
}

static void test_wait_fd(void)
{
	struct fid_cq *cq;
	int fd = -1;

	OXT_GROUP("FI_GETWAIT on FI_WAIT_FD/UNSPEC CQs: fd follows fi_cq_signal");
	check_wait_fd(FI_WAIT_FD, "FI_WAIT_FD");
	check_wait_fd(FI_WAIT_UNSPEC, "FI_WAIT_UNSPEC");

	OXT_GROUP("FI_GETWAIT on an FI_WAIT_NONE CQ is -FI_ENODATA");
	cq = cq_open_ok(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE);
	EXPECT_RC(fi_control(&cq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	EXPECT_RC(fi_close(&cq->fid), 0);
}

static void test_strerror(void)
{
	struct fid_cq *cq = cq_open_ok(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE);
	char buf[128], tiny[4];
	const char *s;

	OXT_GROUP("fi_cq_strerror returns text and fills a user buffer");
	s = fi_cq_strerror(cq, FI_EINVAL, NULL, NULL, 0);
	EXPECT(s != NULL && s[0] != '\0', "fi_cq_strerror gave %s",
	       s ? "\"\"" : "NULL");
	memset(buf, 0, sizeof buf);
	s = fi_cq_strerror(cq, FI_EINVAL, NULL, buf, sizeof buf);
	EXPECT(s != NULL, "fi_cq_strerror with a buffer returned NULL");
	EXPECT(buf[0] != '\0', "user buffer left empty");
	memset(tiny, 'x', sizeof tiny);
	s = fi_cq_strerror(cq, FI_EINVAL, NULL, tiny, sizeof tiny);
	EXPECT(s != NULL, "fi_cq_strerror with a 4-byte buffer returned NULL");
	EXPECT(memchr(tiny, '\0', sizeof tiny) != NULL,
	       "4-byte buffer not NUL-terminated");
	EXPECT_RC(fi_close(&cq->fid), 0);
}

int main(int argc, char **argv)
{
	(void)argc;
	oxt_init(argv[0]);
	oxt_open(&env);
	test_open();
	test_empty();
	test_sread();
	test_wait_fd();
	test_strerror();
	OXT_GROUP("close domain and fabric");
	oxt_close(&env);
	return oxt_done();
}
