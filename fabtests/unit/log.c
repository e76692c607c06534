/*
 * log.c: oxmr's log lines follow FI_LOG_LEVEL both ways: the receive
 * path's debug line is written when debug is asked for, and nothing below
 * the level asked for is. (oxmr asks libfabric per call site; a level fixed
 * when oxmr loads was tried and dropped, since an application may import
 * its own logger afterwards, fi_import_log, and a fixed level would hide
 * what that logger asks for.)
 *
 * The level is read once per process, when libfabric starts, so each
 * level gets its own run of this program (re-executed with the level set
 * and stderr in a file): one endpoint sends an 8-byte tagged message to
 * itself, which logs a debug line on the receive path ("message op").
 */
#include "oxt.h"

#include <fcntl.h>
#include <rdma/fi_tagged.h>
#include <sys/wait.h>

/* The run under test: one message to itself, then exit. */
static int child_run(void)
{
	struct oxt_ep x;
	fi_addr_t self;
	char sbuf[8] = "loglevel", rbuf[8] = { 0 };
	struct fi_context ctx;
	void *got = NULL;

	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	self = oxt_ep_insert(&x, &x);
	REQUIRE_RC(fi_trecv(x.ep, rbuf, sizeof rbuf, NULL, self, 7, 0, &ctx), 0);
	REQUIRE_RC(fi_tinject(x.ep, sbuf, sizeof sbuf, self, 7), 0);
	EXPECT(oxt_next_completion(x.cq, 10000, &got) == 0 && got == &ctx, "the receive completes");
	EXPECT(memcmp(rbuf, sbuf, sizeof rbuf) == 0, "the message arrived");
	oxt_ep_close(&x);
	return oxt_done();
}

/* Run this program at `level`; its stderr (libfabric's log) into *log
 * (static buffer). Returns the exit status. */
static int run_at(const char *self, const char *level, const char **log)
{
	static char buf[1 << 20];
	char path[] = "/tmp/oxmr-log-XXXXXX";
	int fd = mkstemp(path), status = -1;
	ssize_t n;
	pid_t pid;

	REQUIRE(fd >= 0, "mkstemp: %s", strerror(errno));
	unlink(path);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		setenv("FI_LOG_LEVEL", level, 1);
		setenv("FI_LOG_PROV", "oxmr", 1);
		setenv("OXMR_LOG_CHILD", "1", 1);
		execl(self, self, (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	*log = buf;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv)
{
	const char *log;
	int rc;

	(void)argc;
	if (getenv("OXMR_LOG_CHILD"))
		return child_run();
	oxt_init(argv[0]);

	OXT_GROUP("FI_LOG_LEVEL=debug: the receive path's debug line is written");
	rc = run_at("/proc/self/exe", "debug", &log);
	EXPECT(rc == 0, "the debug run exited with %d:\n%.2000s", rc, log);
	EXPECT(strstr(log, "<debug>") && strstr(log, "message op"), "no debug line for the message:\n%.2000s", log);

	OXT_GROUP("FI_LOG_LEVEL=info: info lines, and no debug line");
	rc = run_at("/proc/self/exe", "info", &log);
	EXPECT(rc == 0, "the info run exited with %d:\n%.2000s", rc, log);
	EXPECT(strstr(log, "<info>") != NULL, "no info line at all:\n%.2000s", log);
	EXPECT(!strstr(log, "<debug>") && !strstr(log, "message op"), "a debug line at info:\n%.2000s", log);

	OXT_GROUP("FI_LOG_LEVEL=warn: no info or debug line from oxmr");
	rc = run_at("/proc/self/exe", "warn", &log);
	EXPECT(rc == 0, "the warn run exited with %d:\n%.2000s", rc, log);
	EXPECT(!strstr(log, "<debug>") && !strstr(log, "<info>"), "a line under warn:\n%.2000s", log);
	return oxt_done();
}
