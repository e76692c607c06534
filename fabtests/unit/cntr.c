/*
 * cntr: counter values, blocking waits with thresholds, timeouts, errors
 * and wakeups from other threads, wait fds (fi_cntr(3)).
 */
#include "oxt.h"

static struct oxt_env env;

static struct fid_cntr *cntr_open(enum fi_wait_obj wait)
{
	struct fi_cntr_attr a = { .events = FI_CNTR_EVENTS_COMP,
				  .wait_obj = wait };
	struct fid_cntr *c = NULL;

	REQUIRE_RC(fi_cntr_open(env.domain, &a, &c, NULL), 0);
	return c;
}

static void test_values(void)
{
	struct fid_cntr *c = cntr_open(FI_WAIT_NONE);

	OXT_GROUP("fi_cntr_set/add/read and seterr/adderr/readerr");
	EXPECT_EQ(fi_cntr_read(c), 0);
	EXPECT_EQ(fi_cntr_readerr(c), 0);
	EXPECT_RC(fi_cntr_add(c, 5), 0);
	EXPECT_EQ(fi_cntr_read(c), 5);
	EXPECT_RC(fi_cntr_add(c, 3), 0);
	EXPECT_EQ(fi_cntr_read(c), 8);
	EXPECT_RC(fi_cntr_set(c, 2), 0);
	EXPECT_EQ(fi_cntr_read(c), 2);
	EXPECT_RC(fi_cntr_adderr(c, 4), 0);
	EXPECT_EQ(fi_cntr_readerr(c), 4);
	EXPECT_RC(fi_cntr_adderr(c, 1), 0);
	EXPECT_EQ(fi_cntr_readerr(c), 5);
	EXPECT_RC(fi_cntr_seterr(c, 1), 0);
	EXPECT_EQ(fi_cntr_readerr(c), 1);
	EXPECT_EQ(fi_cntr_read(c), 2); /* errors leave the count alone */
	EXPECT_RC(fi_cntr_set(c, 0), 0);
	EXPECT_EQ(fi_cntr_read(c), 0);
	EXPECT_EQ(fi_cntr_readerr(c), 1); /* and the count leaves errors */
	EXPECT_RC(fi_cntr_set(c, UINT64_MAX - 1), 0);
	EXPECT_EQ(fi_cntr_read(c), UINT64_MAX - 1);
	EXPECT_RC(fi_close(&c->fid), 0);
}

static void *add_later(void *arg)
{
	oxt_sleep_ms(100);
	if (fi_cntr_add(arg, 5))
		printf("    fi_cntr_add from a thread failed\n");
	return NULL;
}

static void *adderr_later(void *arg)
{
	oxt_sleep_ms(100);
	if (fi_cntr_adderr(arg, 1))
		printf("    fi_cntr_adderr from a thread failed\n");
	return NULL;
}

static void expect_timeout(struct fid_cntr *c, uint64_t threshold)
{
	uint64_t errs = fi_cntr_readerr(c);
	double t0 = oxt_now_ms(), dt;

	EXPECT_RC(fi_cntr_wait(c, threshold, 100), -FI_ETIMEDOUT);
	dt = oxt_now_ms() - t0;
	EXPECT(dt >= 90, "fi_cntr_wait(100 ms) returned after %.1f ms", dt);
	EXPECT(dt < 5000, "fi_cntr_wait(100 ms) took %.1f ms", dt);
	EXPECT_EQ(fi_cntr_readerr(c), errs);
}

static void test_wait(void)
{
	struct fid_cntr *c = cntr_open(FI_WAIT_UNSPEC);
	pthread_t th;
	double t0, dt;

	OXT_GROUP("fi_cntr_wait with the threshold already reached returns 0");
	EXPECT_RC(fi_cntr_set(c, 10), 0);
	t0 = oxt_now_ms();
	EXPECT_RC(fi_cntr_wait(c, 10, 100), 0);
	EXPECT_RC(fi_cntr_wait(c, 3, 10000), 0);
	dt = oxt_now_ms() - t0;
	EXPECT(dt < 5000, "satisfied waits took %.1f ms", dt);

	OXT_GROUP("fi_cntr_wait times out with -FI_ETIMEDOUT (100 ms)");
	expect_timeout(c, 11);

	OXT_GROUP("fi_cntr_add from another thread wakes fi_cntr_wait");
	REQUIRE(pthread_create(&th, NULL, add_later, c) == 0,
		"pthread_create");
	t0 = oxt_now_ms();
	EXPECT_RC(fi_cntr_wait(c, 15, 10000), 0);
	dt = oxt_now_ms() - t0;
	pthread_join(th, NULL);
	EXPECT_EQ(fi_cntr_read(c), 15);
	EXPECT(dt >= 50, "fi_cntr_wait returned after %.1f ms, before the add",
	       dt);
	EXPECT(dt < 5000, "fi_cntr_wait(10 s) woke after %.1f ms", dt);

	OXT_GROUP("fi_cntr_adderr during fi_cntr_wait gives -FI_EAVAIL");
	REQUIRE(pthread_create(&th, NULL, adderr_later, c) == 0,
		"pthread_create");
	t0 = oxt_now_ms();
	EXPECT_RC(fi_cntr_wait(c, 100, 10000), -FI_EAVAIL);
	dt = oxt_now_ms() - t0;
	pthread_join(th, NULL);
	EXPECT_EQ(fi_cntr_readerr(c), 1);
	EXPECT_EQ(fi_cntr_read(c), 15);
	EXPECT(dt < 5000, "fi_cntr_wait(10 s) woke after %.1f ms", dt);
	EXPECT_RC(fi_close(&c->fid), 0);

	OXT_GROUP("FI_WAIT_YIELD counter: fi_cntr_wait times out");
	c = cntr_open(FI_WAIT_YIELD);
	expect_timeout(c, 1);
	EXPECT_RC(fi_cntr_add(c, 1), 0);
	EXPECT_RC(fi_cntr_wait(c, 1, 100), 0);
	EXPECT_RC(fi_close(&c->fid), 0);
}

static void test_wait_fd(void)
{
	struct fid_cntr *c = cntr_open(FI_WAIT_FD);
	int fd = -1;

	OXT_GROUP("FI_GETWAIT on an FI_WAIT_FD counter gives an fd");
	EXPECT_RC(fi_control(&c->fid, FI_GETWAIT, &fd), 0);
	EXPECT(fd >= 0, "FI_GETWAIT gave fd %d", fd);
	if (fd >= 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		EXPECT_RC(fi_cntr_add(c, 1), 0);
		EXPECT(poll(&p, 1, 0) == 1,
		       "wait fd not readable after fi_cntr_add");
	}
	EXPECT_RC(fi_cntr_wait(c, 1, 100), 0);
	EXPECT_RC(fi_close(&c->fid), 0);
}

int main(int argc, char **argv)
{
	(void)argc;
	oxt_init(argv[0]);
	oxt_open(&env);
	test_values();
	test_wait();
	test_wait_fd();
	OXT_GROUP("close domain and fabric");
	oxt_close(&env);
	return oxt_done();
}
