/*
 * Hostile names on the same-host wire (docs/security.md, "The
 * shared-memory wire"; docs/wire-shm.md, "Addressing"): another user, and
 * stray files of our own, at the names oxmr uses under /dev/shm.
 *
 *  1. Another user (uid 65534) cannot create a file or a FIFO in the
 *     directory /dev/shm/oxmr-u<euid> of a user who is not root (uid
 *     65533 here: root could remove another user's file from /dev/shm);
 *     the names it can take in /dev/shm itself (oxmr-<ip>-<port>, where
 *     queues used to live) do not stop that user's fi_endpoint at that
 *     port, and the endpoint works with a peer.
 *  2. Another user made /dev/shm/oxmr-u<euid> first (a directory anyone
 *     may write, or a link to a directory of its own), with a
 *     world-writable queue inside (a valid header, a live owner) at the
 *     name of an address the test sends to, and one at the old name too:
 *     the directory is refused with a log line, fi_endpoint succeeds, two
 *     endpoints still talk (over TCP), and neither fake queue receives a
 *     byte of the message sent to that address.
 *  3. Files of our own at an endpoint's queue names, a FIFO at one port's
 *     and a file that is no queue at another's (and at the old names):
 *     fi_endpoint succeeds at both ports without blocking, neither file
 *     is removed or changed, each endpoint's queue takes the next name
 *     (q-<ip>-<port>~1), and a peer in another process reaches both.
 *  4. A process of the same user that cuts short every file in the
 *     directory and every queue memfd it can open through two talking
 *     endpoints' /proc/<pid>/fd cannot crash either (a queue cut under its
 *     mapper faults it, SIGBUS): the queues are sealed, and the two keep
 *     talking.
 *
 * Needs root: it runs in a mount namespace of its own with a fresh tmpfs
 * on /dev/shm for each group (so nothing it places is seen by any other
 * process), and becomes uid 65534 in forked children. Each group runs in
 * a process of its own that has not used oxmr yet (oxmr checks the
 * per-user directory once per process), and the peers it talks to are
 * its forked children.
 */
#include "oxt.h"

#include <sched.h>
#include <grp.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define NOBODY 65534
/* The user that is not root in group 1. */
#define VICTIM 65533
#define SECRET "oxmr-shm-squat: a message no fake queue may hold"
/* Bytes of a fake queue: more than a queue of any wire version needs. */
#define FAKE_SIZE (4u << 20)

/* This process's per-user directory (after any change of uid). */
static char user_dir[64];

static void set_user_dir(void)
{
	snprintf(user_dir, sizeof user_dir, "/dev/shm/oxmr-u%u", (unsigned)geteuid());
}

/* A fresh, empty tmpfs on /dev/shm (over the previous one). */
static void fresh_shm(void)
{
	REQUIRE(mount("oxt-shm", "/dev/shm", "tmpfs", 0, "mode=1777,size=64m") == 0, "mount tmpfs on /dev/shm: %s",
		strerror(errno));
}

static void drop_shm(void)
{
	EXPECT(umount2("/dev/shm", MNT_DETACH) == 0, "umount /dev/shm: %s", strerror(errno));
}

/* Become uid/gid `id` with no supplementary groups (in a child). */
static void become(uid_t id)
{
	REQUIRE(setgroups(0, NULL) == 0 && setresgid(id, id, id) == 0 && setresuid(id, id, id) == 0,
		"becoming uid %u: %s", (unsigned)id, strerror(errno));
	/* (A change of uid makes a process undumpable: then no other process
	 * of the uid could read its fds or copy its memory, as a user's
	 * processes normally can.) */
	REQUIRE(prctl(PR_SET_DUMPABLE, 1) == 0, "PR_SET_DUMPABLE: %s", strerror(errno));
}

static void become_nobody(void)
{
	become(NOBODY);
}

/* A TCP port of 127.0.0.1 that nothing holds now. */
static uint16_t free_port(void)
{
	struct sockaddr_in a = oxt_sin("127.0.0.1", 0);
	socklen_t len = sizeof a;
	int s = socket(AF_INET, SOCK_STREAM, 0);

	REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
			getsockname(s, (struct sockaddr *)&a, &len) == 0,
		"a free port: %s", strerror(errno));
	close(s);
	return ntohs(a.sin_port);
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Whether the file at `path` holds the bytes `what`. */
static bool holds(const char *path, const char *what)
{
	FILE *f = fopen(path, "rb");
	size_t n = strlen(what), len;
	char *buf;
	bool found;

	if (!f)
		return false;
	buf = malloc(FAKE_SIZE);
	REQUIRE(buf, "malloc");
	len = fread(buf, 1, FAKE_SIZE, f);
	fclose(f);
	found = memmem(buf, len, what, n) != NULL;
	free(buf);
	return found;
}

/*
 * A queue file as oxmr's shm wire version 12 (files straight in /dev/shm)
 * laid it out (magic, version, owner, cells, cell size, ready, epoch),
 * owned by `owner` (alive: it looks like a live endpoint's), mode 0666.
 */
static void fake_queue(const char *path, pid_t owner)
{
	unsigned char h[128] = { 0 };
	uint64_t magic = 0x6f786d7273686d31ULL;
	uint32_t w[] = { 12, (uint32_t)owner, 256, 8192, 1, 1 };
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);

	REQUIRE(fd >= 0, "create %s: %s", path, strerror(errno));
	REQUIRE(ftruncate(fd, FAKE_SIZE) == 0, "size %s: %s", path, strerror(errno));
	memcpy(h, &magic, 8);
	memcpy(h + 8, w, sizeof w);
	REQUIRE(pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h, "write %s", path);
	fchmod(fd, 0666);
	close(fd);
}

/* The peer: an endpoint of its own; receives one message, answers it. */
static int peer(int sock)
{
	struct oxt_ep y;
	fi_addr_t them;
	char buf[128];
	struct fi_context c;
	void *ctx;

	alarm(20);
	oxt_reset_counts();
	oxt_prog = "shm_squat[peer]";
	oxt_ep_open(&y, 0, FI_WAIT_NONE);
	oxt_exchange(&y, sock, &them);
	REQUIRE_RC(fi_recv(y.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, &c), 0);
	EXPECT(oxt_next_completion(y.cq, 10000, &ctx) == 0 && ctx == &c, "the peer receives the message");
	EXPECT(!strcmp(buf, "ping"), "the peer got \"%.8s\"", buf);
	REQUIRE_RC(fi_send(y.ep, "pong", 5, NULL, them, &c), 0);
	EXPECT(oxt_next_completion(y.cq, 10000, &ctx) == 0 && ctx == &c, "the peer's answer completes");
	EXPECT(read(sock, buf, 1) == 1, "the end of the test");
	oxt_ep_close(&y);
	return oxt_failed_total ? 1 : 0;
}

/* Whether the endpoint x and a peer in a forked process trade a message
 * each way. */
static bool talks(struct oxt_ep *x)
{
	int sock, status = 0;
	pid_t pid = oxt_fork(peer, &sock);
	fi_addr_t them;
	struct fi_context c;
	char buf[128] = { 0 };
	void *ctx;
	bool ok;

	oxt_exchange(x, sock, &them);
	REQUIRE_RC(fi_recv(x->ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, &c), 0);
	REQUIRE_RC(fi_send(x->ep, "ping", 5, NULL, them, &c), 0);
	ok = oxt_next_completion(x->cq, 10000, &ctx) == 0;
	ok = ok && oxt_next_completion(x->cq, 10000, &ctx) == 0;
	ok = ok && !strcmp(buf, "pong");
	oxt_put(sock, 'q');
	waitpid(pid, &status, 0);
	close(sock);
	return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Run `fn` in a process of its own; whether it passed (its failed checks
 * are printed by it). */
static bool in_process(void (*fn)(void))
{
	int status = 0;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		alarm(40);
		/* (Its own failures only, not its parent's so far.) */
		oxt_reset_counts();
		fn();
		exit(oxt_failed_total ? 1 : 0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* ------------------------------------------------------------- group 1 */

static uint16_t g1_port;

/* As uid 65534: what it may not and may do. */
static void g1_nobody(void)
{
	char path[160];
	int fd;

	become_nobody();
	snprintf(path, sizeof path, "%s/q-127.0.0.1-%u", user_dir, g1_port);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
	EXPECT(fd < 0 && errno == EACCES, "uid %d creating %s: expected EACCES, got %s", NOBODY, path,
	       fd >= 0 ? "a file" : strerror(errno));
	snprintf(path, sizeof path, "%s/q-127.0.0.1-%u~1", user_dir, g1_port);
	EXPECT(mkfifo(path, 0666) != 0 && errno == EACCES, "uid %d making a FIFO %s: expected EACCES, got %s", NOBODY,
	       path, errno == EACCES ? "success" : strerror(errno));
	/* What it can take: the names in /dev/shm itself. */
	snprintf(path, sizeof path, "/dev/shm/oxmr-127.0.0.1-%u", g1_port);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
	EXPECT(fd >= 0, "uid %d creating %s: %s", NOBODY, path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* As the user that is not root: its directory, made by its first
 * endpoint. */
static void g1_first(void)
{
	struct oxt_ep first;

	become(VICTIM);
	oxt_ep_open(&first, 0, FI_WAIT_NONE);
	oxt_ep_close(&first);
}

/* As that user: an endpoint at the port whose names uid 65534 tried. */
static void g1_victim(void)
{
	struct oxt_ep x;

	become(VICTIM);
	oxt_ep_open(&x, g1_port, FI_WAIT_NONE);
	EXPECT(talks(&x), "the endpoint at the port whose old name uid %d took talks with a peer", NOBODY);
	oxt_ep_close(&x);
}

static void g1(void)
{
	snprintf(user_dir, sizeof user_dir, "/dev/shm/oxmr-u%u", (unsigned)VICTIM);
	g1_port = free_port();
	EXPECT(in_process(g1_first), "uid %d's first endpoint (above)", VICTIM);
	EXPECT(in_process(g1_nobody), "uid %d's attempts (above)", NOBODY);
	EXPECT(in_process(g1_victim), "uid %d's endpoint (above)", VICTIM);
}

/* ------------------------------------------------------------- group 2 */

static uint16_t g2_port;
static bool g2_link;
static char g2_fake[160], g2_fake_old[160];

/* As uid 65534: this user's directory, made first, with fake queues for
 * 127.0.0.1:g2_port owned by this very process (alive until killed). */
static void g2_nobody(int sock)
{
	char dir[128];

	become_nobody();
	if (g2_link) {
		snprintf(dir, sizeof dir, "/dev/shm/nobodys");
		REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
		REQUIRE(symlink(dir, user_dir) == 0, "symlink %s: %s", user_dir, strerror(errno));
	} else {
		snprintf(dir, sizeof dir, "%s", user_dir);
		REQUIRE(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0, "mkdir %s: %s", dir, strerror(errno));
	}
	snprintf(g2_fake, sizeof g2_fake, "%s/q-127.0.0.1-%u", dir, g2_port);
	fake_queue(g2_fake, getpid());
	/* (Where queues used to be.) */
	fake_queue(g2_fake_old, getpid());
	oxt_put(sock, 'r');
	for (;;)
		pause();
}

static void g2(void)
{
	struct oxt_ep x;
	struct sockaddr_in to;
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	struct fi_context c;
	const char *log;
	void *ctx;
	int sv[2];
	pid_t pid;

	g2_port = free_port();
	snprintf(g2_fake_old, sizeof g2_fake_old, "/dev/shm/oxmr-127.0.0.1-%u", g2_port);
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		g2_nobody(sv[1]);
		exit(1);
	}
	close(sv[1]);
	REQUIRE(oxt_get(sv[0]) == 'r', "uid %d's fake queues", NOBODY);
	snprintf(g2_fake, sizeof g2_fake, "%s/q-127.0.0.1-%u", g2_link ? "/dev/shm/nobodys" : user_dir, g2_port);

	oxt_capture_begin();
	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	log = oxt_capture_end();
	fputs(log, stderr);
	EXPECT(strstr(log, "the shared-memory wire is off") && strstr(log, user_dir),
	       "no log line says the shared-memory wire is off for %s", user_dir);
	EXPECT(talks(&x), "two endpoints of this user talk (over TCP) while another user holds its directory");

	/* A send to the address whose queue uid 65534 faked. (Its outcome
	 * does not matter: nothing listens there. Where it goes does.) */
	{
		char buf[128];

		to = oxt_sin("127.0.0.1", g2_port);
		snprintf(buf, sizeof buf, "%s", SECRET);
		REQUIRE_RC(fi_av_insert(x.av, &to, 1, &fa, 0, NULL), 1);
		if (fi_send(x.ep, buf, sizeof buf, NULL, fa, &c) == 0)
			(void)oxt_next_completion(x.cq, 2000, &ctx);
	}
	EXPECT(exists(g2_fake) && exists(g2_fake_old), "the fake queues are gone");
	EXPECT(!holds(g2_fake, SECRET), "the message went into %s, another user's fake queue", g2_fake);
	EXPECT(!holds(g2_fake_old, SECRET), "the message went into %s, another user's fake queue", g2_fake_old);
	oxt_ep_close(&x);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(sv[0]);
}

/* ------------------------------------------------------------- group 3 */

static void g3(void)
{
	uint16_t p_fifo = free_port(), p_file = free_port();
	char fifo[160], fifo_old[160], file[160], file_old[160], next[176], junk[256];
	struct oxt_ep a, b;
	double t0;

	REQUIRE(mkdir(user_dir, 0700) == 0, "mkdir %s: %s", user_dir, strerror(errno));
	snprintf(fifo, sizeof fifo, "%s/q-127.0.0.1-%u", user_dir, p_fifo);
	snprintf(fifo_old, sizeof fifo_old, "/dev/shm/oxmr-127.0.0.1-%u", p_fifo);
	REQUIRE(mkfifo(fifo, 0600) == 0 && mkfifo(fifo_old, 0600) == 0, "mkfifo: %s", strerror(errno));
	snprintf(file, sizeof file, "%s/q-127.0.0.1-%u", user_dir, p_file);
	snprintf(file_old, sizeof file_old, "/dev/shm/oxmr-127.0.0.1-%u", p_file);
	memset(junk, 'j', sizeof junk);
	junk[sizeof junk - 1] = 0;
	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(i ? file_old : file, "w");

		REQUIRE(f && fputs(junk, f) >= 0 && fclose(f) == 0, "write %s", i ? file_old : file);
		chmod(i ? file_old : file, 0600);
	}

	t0 = oxt_now_ms();
	oxt_ep_open(&a, p_fifo, FI_WAIT_NONE);
	oxt_ep_open(&b, p_file, FI_WAIT_NONE);
	EXPECT(oxt_now_ms() - t0 < 5000, "opening the endpoints took %.0f ms", oxt_now_ms() - t0);
	snprintf(next, sizeof next, "%s~1", fifo);
	EXPECT(exists(next), "%s: the queue of the endpoint whose name a FIFO holds is not at the next name", next);
	snprintf(next, sizeof next, "%s~1", file);
	EXPECT(exists(next), "%s: the queue of the endpoint whose name a file holds is not at the next name", next);
	EXPECT(talks(&a), "the endpoint whose queue name a FIFO holds talks with a peer");
	EXPECT(talks(&b), "the endpoint whose queue name a file that is no queue holds talks with a peer");
	oxt_ep_close(&a);
	oxt_ep_close(&b);
	for (int i = 0; i < 2; i++) {
		struct stat st;
		const char *f = i ? fifo_old : fifo;

		EXPECT(lstat(f, &st) == 0 && S_ISFIFO(st.st_mode), "%s: the FIFO was removed or replaced", f);
		f = i ? file_old : file;
		EXPECT(holds(f, junk), "%s: the file that is no queue was removed or changed", f);
	}
}

/* ------------------------------------------------------------- group 4 */

static pid_t g4_pids[2];

/* Cut `path` to 0 bytes; whether that worked. */
static bool cut(const char *path)
{
	return truncate(path, 0) == 0;
}

/* As a process of the same user: cut every file of the wire it finds. */
static void g4_cutter(void)
{
	char path[320], target[256];
	int cuts = 0, tries = 0;
	DIR *d;
	struct dirent *e;

	/* Every file in the directory, and where queues used to be. */
	const char *dirs[] = { user_dir, "/dev/shm" };
	for (int i = 0; i < 2; i++) {
		if ((d = opendir(dirs[i])) == NULL)
			continue;
		while ((e = readdir(d)) != NULL) {
			struct stat st;

			snprintf(path, sizeof path, "%s/%s", dirs[i], e->d_name);
			if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && cut(path))
				printf("# cut %s\n", path);
		}
		closedir(d);
	}
	/* Every queue memfd of the two endpoints' processes. */
	for (int i = 0; i < 2; i++) {
		char fds[64];

		snprintf(fds, sizeof fds, "/proc/%d/fd", (int)g4_pids[i]);
		REQUIRE((d = opendir(fds)) != NULL, "opendir %s: %s", fds, strerror(errno));
		while ((e = readdir(d)) != NULL) {
			ssize_t n;

			snprintf(path, sizeof path, "%s/%s", fds, e->d_name);
			n = readlink(path, target, sizeof target - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strncmp(target, "/memfd:oxmr", 11))
				continue;
			tries++;
			if (cut(path)) {
				cuts++;
				printf("# cut %s (%s)\n", path, target);
			} else {
				EXPECT(errno == EPERM, "cutting %s (%s): expected EPERM, got %s", path, target,
				       strerror(errno));
			}
		}
		closedir(d);
	}
	/* (Where the queues are memfds: each endpoint's own.) */
	EXPECT(tries == 0 || tries >= 2, "%d queue memfds found in two processes with an endpoint each", tries);
	EXPECT(cuts == 0, "%d queue memfds were cut short", cuts);
	printf("# %d queue memfds found, none cut\n", tries);
}

/* The peer of group 4: a message each way, then (after the cutter ran)
 * another. */
static int g4_peer(int sock)
{
	struct oxt_ep y;
	fi_addr_t them;
	char buf[128];
	struct fi_context c;
	void *ctx;
	pid_t me = getpid();

	alarm(20);
	oxt_reset_counts();
	oxt_prog = "shm_squat[peer]";
	oxt_ep_open(&y, 0, FI_WAIT_NONE);
	oxt_exchange(&y, sock, &them);
	REQUIRE(write(sock, &me, sizeof me) == sizeof me, "socketpair write");
	for (int round = 0; round < 2; round++) {
		REQUIRE_RC(fi_recv(y.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, &c), 0);
		EXPECT(oxt_next_completion(y.cq, 10000, &ctx) == 0 && ctx == &c, "round %d: the peer receives", round);
		REQUIRE_RC(fi_send(y.ep, "pong", 5, NULL, them, &c), 0);
		EXPECT(oxt_next_completion(y.cq, 10000, &ctx) == 0 && ctx == &c, "round %d: the answer completes",
		       round);
	}
	EXPECT(read(sock, buf, 1) == 1, "the end of the test");
	oxt_ep_close(&y);
	return oxt_failed_total ? 1 : 0;
}

static void g4(void)
{
	struct oxt_ep x;
	int sock, status = 0;
	pid_t pid;
	fi_addr_t them;
	struct fi_context c;
	char buf[128];
	void *ctx;

	oxt_ep_open(&x, 0, FI_WAIT_NONE);
	pid = oxt_fork(g4_peer, &sock);
	oxt_exchange(&x, sock, &them);
	REQUIRE(read(sock, &g4_pids[1], sizeof(pid_t)) == sizeof(pid_t), "socketpair read");
	g4_pids[0] = getpid();
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			EXPECT(in_process(g4_cutter), "the cutter (above)");
		memset(buf, 0, sizeof buf);
		REQUIRE_RC(fi_recv(x.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, &c), 0);
		REQUIRE_RC(fi_send(x.ep, "ping", 5, NULL, them, &c), 0);
		EXPECT(oxt_next_completion(x.cq, 10000, &ctx) == 0 && oxt_next_completion(x.cq, 10000, &ctx) == 0 &&
			       !strcmp(buf, "pong"),
		       "round %d: a message each way", round);
	}
	oxt_put(sock, 'q');
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the peer: status 0x%x", status);
	close(sock);
	oxt_ep_close(&x);
}

int main(int argc, char **argv)
{
	(void)argc;
	setenv("FI_LOG_LEVEL", "warn", 0);
	oxt_init(argv[0]);
	if (geteuid() != 0)
		oxt_skip_all("needs root (a mount namespace with its own /dev/shm, and uid %d for another user)", NOBODY);
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		oxt_skip_all("no mount namespace of its own (unshare: %s)", strerror(errno));
	if (oxt_skipped_all)
		return oxt_done();
	set_user_dir();

	OXT_GROUP("1. another user cannot put a file or FIFO in a user's directory; a name it takes in /dev/shm does not stop that user's fi_endpoint, and the endpoint talks with a peer");
	fresh_shm();
	g1();
	drop_shm();
	set_user_dir();

	OXT_GROUP("2. a world-writable directory another user made at this user's name is refused with a log line: fi_endpoint succeeds, endpoints talk over TCP, and its fake queue (and one at the old name) never gets the message");
	fresh_shm();
	g2_link = false;
	EXPECT(in_process(g2), "group 2's process (above)");
	drop_shm();

	OXT_GROUP("2b. the same with a link at this user's name to another user's directory");
	fresh_shm();
	g2_link = true;
	EXPECT(in_process(g2), "group 2b's process (above)");
	drop_shm();

	OXT_GROUP("3. a FIFO, and a file of ours that is no queue, at two endpoints' queue names: fi_endpoint succeeds without blocking, neither is removed or changed, each queue takes the next name, and a peer reaches both");
	fresh_shm();
	EXPECT(in_process(g3), "group 3's process (above)");
	drop_shm();

	OXT_GROUP("4. a process of the same user that cuts short every file of the wire and every queue memfd it can open cannot crash two talking endpoints (no SIGBUS): the queues are sealed, and the two keep talking");
	fresh_shm();
	EXPECT(in_process(g4), "group 4's process (above; a process killed by a signal says nothing)");
	drop_shm();

	return oxt_done();
}
