/*
 * eq: event queue writes and reads, FI_PEEK, FIFO order, size limits,
 * blocking reads, wait fds and fi_trywait (fi_eq(3), fi_trywait(3)).
 * Error entries are produced by asynchronous AV inserts (see av.c).
 */
#include "oxt.h"

static struct oxt_env env;

static struct fid_eq *eq_open(size_t size, enum fi_wait_obj wait)
{
	struct fi_eq_attr a = { .size = size, .flags = FI_WRITE,
				.wait_obj = wait };
	struct fid_eq *eq = NULL;

	REQUIRE_RC(fi_eq_open(env.fabric, &a, &eq, NULL), 0);
	return eq;
}

static struct fi_eq_entry entry(struct fid_eq *eq, uint64_t data)
{
	struct fi_eq_entry e;

	memset(&e, 0, sizeof e);
	e.fid = &eq->fid;
	e.context = (void *)(uintptr_t)(0x1000 + data);
	e.data = data;
	return e;
}

/* Write one FI_NOTIFY entry carrying `data`; expect 24 bytes written. */
static void put(struct fid_eq *eq, uint64_t data)
{
	struct fi_eq_entry e = entry(eq, data);

	EXPECT_RC(fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, 0), sizeof e);
}

/* Read one entry (flags: 0 or FI_PEEK) and expect it to carry `data`. */
static void get(int line, struct fid_eq *eq, uint64_t data, uint64_t flags)
{
	struct fi_eq_entry e;
	uint32_t event = ~0u;
	ssize_t ret;

	memset(&e, 0, sizeof e);
	ret = fi_eq_read(eq, &event, &e, sizeof e, flags);
	if (!oxt_check_rc(__FILE__, line, "fi_eq_read", ret, sizeof e))
		return;
	oxt_check_eq(__FILE__, line, "event", event, FI_NOTIFY);
	oxt_check_eq(__FILE__, line, "entry.fid", (uintptr_t)e.fid,
		     (uintptr_t)&eq->fid);
	oxt_check_eq(__FILE__, line, "entry.context", (uintptr_t)e.context,
		     0x1000 + data);
	oxt_check_eq(__FILE__, line, "entry.data", e.data, data);
}

#define GET(eq, data, flags) get(__LINE__, eq, data, flags)

static void test_write_read(void)
{
	struct fid_eq *eq = eq_open(8, FI_WAIT_UNSPEC);
	struct fi_eq_entry e;
	struct fi_eq_err_entry err;
	uint32_t event;
	char small[8];

	OXT_GROUP("empty EQ: fi_eq_read and fi_eq_readerr give -FI_EAGAIN");
	EXPECT_RC(fi_eq_read(eq, &event, &e, sizeof e, 0), -FI_EAGAIN);
	EXPECT_RC(fi_eq_read(eq, &event, &e, sizeof e, FI_PEEK), -FI_EAGAIN);
	memset(&err, 0, sizeof err);
	EXPECT_RC(fi_eq_readerr(eq, &err, 0), -FI_EAGAIN);

	OXT_GROUP("fi_eq_write of a 24-byte FI_NOTIFY entry returns 24");
	EXPECT_EQ(sizeof(struct fi_eq_entry), 24);
	put(eq, 7);

	OXT_GROUP("FI_PEEK returns the event without consuming it");
	GET(eq, 7, FI_PEEK);
	GET(eq, 7, FI_PEEK);

	OXT_GROUP("a plain fi_eq_read consumes the event");
	GET(eq, 7, 0);
	EXPECT_RC(fi_eq_read(eq, &event, &e, sizeof e, 0), -FI_EAGAIN);

	OXT_GROUP("events are read in FIFO order");
	put(eq, 1);
	put(eq, 2);
	put(eq, 3);
	GET(eq, 1, 0);
	GET(eq, 2, FI_PEEK);
	GET(eq, 2, 0);
	GET(eq, 3, 0);
	EXPECT_RC(fi_eq_read(eq, &event, &e, sizeof e, 0), -FI_EAGAIN);

	OXT_GROUP("a buffer smaller than the event gives -FI_ETOOSMALL");
	put(eq, 9);
	EXPECT_RC(fi_eq_read(eq, &event, small, sizeof small, 0),
		  -FI_ETOOSMALL);
	GET(eq, 9, 0); /* still there */

	OXT_GROUP("unknown flags give -FI_EBADFLAGS");
	put(eq, 5);
	EXPECT_RC(fi_eq_read(eq, &event, &e, sizeof e, FI_SEND),
		  -FI_EBADFLAGS);
	EXPECT_RC(fi_eq_readerr(eq, &err, FI_SEND), -FI_EBADFLAGS);
	e = entry(eq, 6);
	EXPECT_RC(fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, FI_SEND),
		  -FI_EBADFLAGS);
	GET(eq, 5, 0);
	EXPECT_RC(fi_eq_read(eq, &event, &e, sizeof e, 0), -FI_EAGAIN);

	EXPECT_RC(fi_close(&eq->fid), 0);
}

static void test_size(void)
{
	struct fid_eq *eq = eq_open(4, FI_WAIT_NONE);
	struct fi_eq_entry e = entry(eq, 0);
	int i;

	OXT_GROUP("an EQ of size 4 takes 4 writes; the 5th is -FI_EAGAIN");
	for (i = 0; i < 4; i++)
		put(eq, i);
	EXPECT_RC(fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, 0), -FI_EAGAIN);
	GET(eq, 0, 0);
	put(eq, 4); /* room again after a read */
	for (i = 1; i < 5; i++)
		GET(eq, i, 0);
	EXPECT_RC(fi_close(&eq->fid), 0);
}

static void *write_later(void *arg)
{
	struct fid_eq *eq = arg;
	struct fi_eq_entry e = entry(eq, 77);

	oxt_sleep_ms(100);
	if (fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, 0) != sizeof e)
		printf("    fi_eq_write from a thread failed\n");
	return NULL;
}

static void test_sread(void)
{
	struct fid_eq *eq = eq_open(8, FI_WAIT_UNSPEC);
	struct fi_eq_entry e;
	uint32_t event;
	pthread_t th;
	double t0, dt;

	OXT_GROUP("fi_eq_sread on an empty EQ times out with -FI_EAGAIN (100 ms)");
	t0 = oxt_now_ms();
	EXPECT_RC(fi_eq_sread(eq, &event, &e, sizeof e, 100, 0), -FI_EAGAIN);
	dt = oxt_now_ms() - t0;
	EXPECT(dt >= 90, "fi_eq_sread(100 ms) returned after %.1f ms", dt);
	EXPECT(dt < 5000, "fi_eq_sread(100 ms) took %.1f ms", dt);

	OXT_GROUP("fi_eq_sread returns a queued event at once");
	put(eq, 11);
	t0 = oxt_now_ms();
	memset(&e, 0, sizeof e);
	EXPECT_RC(fi_eq_sread(eq, &event, &e, sizeof e, 10000, 0), sizeof e);
	dt = oxt_now_ms() - t0;
	EXPECT_EQ(e.data, 11);
	EXPECT(dt < 5000, "fi_eq_sread with an event queued took %.1f ms", dt);

	OXT_GROUP("a write from another thread wakes a blocked fi_eq_sread");
	REQUIRE(pthread_create(&th, NULL, write_later, eq) == 0,
		"pthread_create");
	t0 = oxt_now_ms();
	memset(&e, 0, sizeof e);
	EXPECT_RC(fi_eq_sread(eq, &event, &e, sizeof e, 10000, 0), sizeof e);
	dt = oxt_now_ms() - t0;
	EXPECT_EQ(event, FI_NOTIFY);
	EXPECT_EQ(e.data, 77);
	EXPECT(dt < 5000, "fi_eq_sread(10 s) woke after %.1f ms", dt);
	EXPECT(dt >= 50, "fi_eq_sread(10 s) returned after %.1f ms, before the write",
	       dt);
	pthread_join(th, NULL);

	EXPECT_RC(fi_close(&eq->fid), 0);

	OXT_GROUP("FI_WAIT_YIELD EQ: fi_eq_sread times out with -FI_EAGAIN");
	eq = eq_open(8, FI_WAIT_YIELD);
	t0 = oxt_now_ms();
	EXPECT_RC(fi_eq_sread(eq, &event, &e, sizeof e, 100, 0), -FI_EAGAIN);
	dt = oxt_now_ms() - t0;
	EXPECT(dt >= 90, "fi_eq_sread(100 ms) returned after %.1f ms", dt);
	EXPECT(dt < 5000, "fi_eq_sread(100 ms) took %.1f ms", dt);
	EXPECT_RC(fi_close(&eq->fid), 0);
}

static int poll_fd(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0);
}

static void test_wait_fd(void)
{
	struct fid_eq *eq = eq_open(8, FI_WAIT_FD);
	struct fid *fids[1] = { &eq->fid };
	int fd = -1;

	OXT_GROUP("FI_WAIT_FD EQ: poll() 0 when empty, 1 after a write");
	EXPECT_RC(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	EXPECT(fd >= 0, "FI_GETWAIT gave fd %d", fd);
	EXPECT_RC(fi_trywait(env.fabric, fids, 1), 0);
	if (fd >= 0) {
		EXPECT_EQ(poll_fd(fd), 0);
		put(eq, 1);
		EXPECT_EQ(poll_fd(fd), 1);
	}

	OXT_GROUP("fi_trywait: -FI_EAGAIN with an event pending, 0 when empty");
	EXPECT_RC(fi_trywait(env.fabric, fids, 1), -FI_EAGAIN);
	GET(eq, 1, 0);
	EXPECT_RC(fi_trywait(env.fabric, fids, 1), 0);
	if (fd >= 0)
		EXPECT_EQ(poll_fd(fd), 0);
	EXPECT_RC(fi_close(&eq->fid), 0);

	OXT_GROUP("FI_GETWAIT on an FI_WAIT_NONE EQ fails");
	eq = eq_open(8, FI_WAIT_NONE);
	EXPECT(fi_control(&eq->fid, FI_GETWAIT, &fd) < 0,
	       "FI_GETWAIT on FI_WAIT_NONE succeeded");
	EXPECT_RC(fi_close(&eq->fid), 0);
}

static void test_strerror(void)
{
	struct fid_eq *eq = eq_open(8, FI_WAIT_NONE);
	char buf[128];
	const char *s;

	OXT_GROUP("fi_eq_strerror returns text and fills a user buffer");
	s = fi_eq_strerror(eq, FI_EINVAL, NULL, NULL, 0);
	EXPECT(s != NULL && s[0] != '\0', "fi_eq_strerror gave %s",
	       s ? "\"\"" : "NULL");
	memset(buf, 0, sizeof buf);
	s = fi_eq_strerror(eq, FI_EINVAL, NULL, buf, sizeof buf);
	EXPECT(s != NULL, "fi_eq_strerror with a buffer returned NULL");
	EXPECT(buf[0] != '\0', "user buffer left empty");
	EXPECT_RC(fi_close(&eq->fid), 0);
}

int main(int argc, char **argv)
{
	(void)argc;
	oxt_init(argv[0]);
	oxt_open(&env);
	test_write_read();
	test_size();
	test_sread();
	test_wait_fd();
	test_strerror();
	OXT_GROUP("close domain and fabric");
	oxt_close(&env);
	return oxt_done();
}
