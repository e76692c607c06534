/*
 * oxt.h - tiny shared helpers for oxmr's own conformance tests
 * (the programs in fabtests/unit).
 *
 * Every program:
 *   - calls oxt_init() first: line-buffered output and a 60 s watchdog
 *     (alarm) so that no test can hang;
 *   - groups its checks with OXT_GROUP("name"): one line per group,
 *     "ok - prog: name" or "FAIL - prog: name", with each failed check
 *     printed above it as "file:line: what: expected ..., got ...";
 *   - skips a group with oxt_skip("reason"), or the whole program with
 *     oxt_skip_all("reason"), only where this machine cannot do what it
 *     checks (a kernel facility missing, not root), never for a check that
 *     could run: "skip - prog: name: reason", counted;
 *   - returns oxt_done() from main: a summary line (groups passed, failed,
 *     skipped) and the exit status: 1 when a check failed, else 77
 *     (automake's SKIP; fabtests/run.sh's SKIP, a failure there under
 *     OXMR_TEST_STRICT=1) when the program skipped as a whole or every
 *     group skipped, after a last "skip - prog: reason" line, else 0.
 *
 * EXPECT_* record a failure and go on; REQUIRE_* also stop the program
 * (for setup steps whose failure would make later checks meaningless or
 * crash).
 */
#ifndef OXT_H
#define OXT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_atomic.h>

/* The API version the tests ask for: the installed headers' own. */
#define OXT_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

/*
 * Names libfabric 2.0 deprecated: its headers still define them, but each
 * use warns (and -Werror fails). Their values are ABI, and oxmr still
 * honours them for applications asking API 1.x, so the tests spell them out
 * (the values of fabric.h 1.17, and of libfabric's own OFI_MR_BASIC...).
 */
#define OXT_MR_UNSPEC 0
#define OXT_MR_BASIC (1 << 0)
#define OXT_MR_SCALABLE (1 << 1)
#define OXT_ORDER_STRICT 0x1FFULL

/* fi_av_bind (an AV's EQ for asynchronous inserts), deprecated in 2.0 but
 * still in its API. */
static inline int oxt_av_bind(struct fid_av *av, struct fid *eq, uint64_t flags)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	return fi_av_bind(av, eq, flags);
#pragma GCC diagnostic pop
}

/* Seconds before the watchdog kills a test program. */
#define OXT_WATCHDOG_S 60

/* Exit status of a program that skipped (automake's convention). */
#define OXT_EXIT_SKIP 77

static int oxt_failed_total;
static int oxt_groups_failed;
static int oxt_groups_skipped;
static int oxt_groups_total;
static int oxt_group_failed;
static const char *oxt_group_name;
static const char *oxt_prog = "test";
/* Why the whole program skipped (oxt_skip_all), else the first group skip
 * ("group: reason"). */
static char oxt_skip_why[512];
static bool oxt_skipped_all;

/* ---------------------------------------------------------------- output */

/* Symbolic name of a (negative or positive) libfabric return code. */
static inline const char *oxt_errname(long long rc)
{
	switch (rc < 0 ? -rc : rc) {
	case 0: return "0";
	case FI_EPERM: return "FI_EPERM";
	case FI_ENOENT: return "FI_ENOENT";
	case FI_EINTR: return "FI_EINTR";
	case FI_EIO: return "FI_EIO";
	case FI_E2BIG: return "FI_E2BIG";
	case FI_EBADF: return "FI_EBADF";
	case FI_EAGAIN: return "FI_EAGAIN";
	case FI_ENOMEM: return "FI_ENOMEM";
	case FI_EACCES: return "FI_EACCES";
	case FI_EFAULT: return "FI_EFAULT";
	case FI_EBUSY: return "FI_EBUSY";
	case FI_ENODEV: return "FI_ENODEV";
	case FI_EINVAL: return "FI_EINVAL";
	case FI_EMFILE: return "FI_EMFILE";
	case FI_ENOSPC: return "FI_ENOSPC";
	case FI_ENOSYS: return "FI_ENOSYS";
	case FI_ENOMSG: return "FI_ENOMSG";
	case FI_ENODATA: return "FI_ENODATA";
	case FI_EOVERFLOW: return "FI_EOVERFLOW";
	case FI_EMSGSIZE: return "FI_EMSGSIZE";
	case FI_ENOPROTOOPT: return "FI_ENOPROTOOPT";
	case FI_EOPNOTSUPP: return "FI_EOPNOTSUPP";
	case FI_EADDRINUSE: return "FI_EADDRINUSE";
	case FI_EADDRNOTAVAIL: return "FI_EADDRNOTAVAIL";
	case FI_ENETDOWN: return "FI_ENETDOWN";
	case FI_ENETUNREACH: return "FI_ENETUNREACH";
	case FI_ECONNABORTED: return "FI_ECONNABORTED";
	case FI_ECONNRESET: return "FI_ECONNRESET";
	case FI_ENOBUFS: return "FI_ENOBUFS";
	case FI_EISCONN: return "FI_EISCONN";
	case FI_ENOTCONN: return "FI_ENOTCONN";
	case FI_ESHUTDOWN: return "FI_ESHUTDOWN";
	case FI_ETIMEDOUT: return "FI_ETIMEDOUT";
	case FI_ECONNREFUSED: return "FI_ECONNREFUSED";
	case FI_EHOSTDOWN: return "FI_EHOSTDOWN";
	case FI_EHOSTUNREACH: return "FI_EHOSTUNREACH";
	case FI_EALREADY: return "FI_EALREADY";
	case FI_EINPROGRESS: return "FI_EINPROGRESS";
	case FI_EREMOTEIO: return "FI_EREMOTEIO";
	case FI_ECANCELED: return "FI_ECANCELED";
	case FI_ENOKEY: return "FI_ENOKEY";
	case FI_EKEYREJECTED: return "FI_EKEYREJECTED";
	case FI_EOTHER: return "FI_EOTHER";
	case FI_ETOOSMALL: return "FI_ETOOSMALL";
	case FI_EOPBADSTATE: return "FI_EOPBADSTATE";
	case FI_EAVAIL: return "FI_EAVAIL";
	case FI_EBADFLAGS: return "FI_EBADFLAGS";
	case FI_ENOEQ: return "FI_ENOEQ";
	case FI_EDOMAIN: return "FI_EDOMAIN";
	case FI_ENOCQ: return "FI_ENOCQ";
	case FI_ECRC: return "FI_ECRC";
	case FI_ETRUNC: return "FI_ETRUNC";
	case FI_ENORX: return "FI_ENORX";
	case FI_ENOAV: return "FI_ENOAV";
	case FI_EOVERRUN: return "FI_EOVERRUN";
	default: return "?";
	}
}

/* "-11 (-FI_EAGAIN: Resource temporarily unavailable)" */
static inline const char *oxt_rcstr(long long rc, char *buf, size_t len)
{
	if (rc == 0)
		snprintf(buf, len, "0");
	else if (rc < 0 && rc > -100000)
		snprintf(buf, len, "%lld (-%s: %s)", rc, oxt_errname(rc),
			 fi_strerror((int)-rc));
	else
		snprintf(buf, len, "%lld", rc);
	return buf;
}

static inline void oxt_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline void oxt_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	printf("    %s:%d: ", file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	oxt_failed_total++;
	oxt_group_failed++;
}

static inline void oxt_group_end(void)
{
	if (!oxt_group_name)
		return;
	oxt_groups_total++;
	if (oxt_group_failed)
		oxt_groups_failed++;
	printf("%s - %s: %s\n", oxt_group_failed ? "FAIL" : "ok", oxt_prog,
	       oxt_group_name);
	fflush(stdout);
	oxt_group_name = NULL;
	oxt_group_failed = 0;
}

/* Start a new check group (ends the previous one). */
#define OXT_GROUP(name)                                                        \
	do {                                                                   \
		oxt_group_end();                                               \
		oxt_group_name = (name);                                       \
		oxt_group_failed = 0;                                          \
	} while (0)

/*
 * End the current group as skipped: this machine cannot do what it checks
 * (say what is missing). The caller checks nothing more in the group. A
 * group with a failed check stays a failure.
 */
static inline void oxt_skip(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static inline void oxt_skip(const char *fmt, ...)
{
	char why[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (!oxt_group_name) {
		printf("    oxt_skip outside a group (a bug in the test): %s\n", why);
		oxt_failed_total++;
		return;
	}
	if (oxt_group_failed) {
		printf("    (then skipped: %s)\n", why);
		oxt_group_end();
		return;
	}
	oxt_groups_total++;
	oxt_groups_skipped++;
	if (!oxt_skip_why[0])
		snprintf(oxt_skip_why, sizeof oxt_skip_why, "%s: %s",
			 oxt_group_name, why);
	printf("skip - %s: %s: %s\n", oxt_prog, oxt_group_name, why);
	fflush(stdout);
	oxt_group_name = NULL;
	oxt_group_failed = 0;
}

/* Forget the counts (a forked child that reports only its own checks). */
static inline void oxt_reset_counts(void)
{
	oxt_group_name = NULL;
	oxt_group_failed = 0;
	oxt_groups_total = oxt_groups_failed = oxt_groups_skipped = 0;
	oxt_failed_total = 0;
	oxt_skip_why[0] = 0;
	oxt_skipped_all = false;
}

/* End the program: summary line and exit status (0, 1, or 77: skipped). */
static inline int oxt_done(void)
{
	oxt_group_end();
	printf("%s: %d group(s): %d passed, %d failed, %d skipped; %d failed check(s)\n",
	       oxt_prog, oxt_groups_total,
	       oxt_groups_total - oxt_groups_failed - oxt_groups_skipped,
	       oxt_groups_failed, oxt_groups_skipped, oxt_failed_total);
	fflush(stdout);
	if (oxt_failed_total)
		return 1;
	if (oxt_skipped_all) {
		printf("skip - %s: %s\n", oxt_prog, oxt_skip_why);
		return OXT_EXIT_SKIP;
	}
	if (oxt_groups_total && oxt_groups_skipped == oxt_groups_total) {
		printf("skip - %s: every group skipped (the first: %s)\n",
		       oxt_prog, oxt_skip_why);
		return OXT_EXIT_SKIP;
	}
	return 0;
}

/*
 * Skip the whole program and exit: this machine lacks what every group
 * needs (say what). Exit status 77, or 1 if a check already failed.
 */
static inline void oxt_skip_all(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

static inline void oxt_skip_all(const char *fmt, ...)
{
	va_list ap;

	oxt_group_end();
	va_start(ap, fmt);
	vsnprintf(oxt_skip_why, sizeof oxt_skip_why, fmt, ap);
	va_end(ap);
	oxt_skipped_all = true;
	exit(oxt_done());
}

/* Stop now (after a failed REQUIRE). */
static inline void oxt_abort(void)
{
	printf("    (aborting %s: a required step failed)\n", oxt_prog);
	oxt_done();
	exit(1);
}

/* ------------------------------------------------------------ assertions */

#define EXPECT(cond, ...)                                                      \
	do {                                                                   \
		if (!(cond))                                                   \
			oxt_fail(__FILE__, __LINE__, __VA_ARGS__);             \
	} while (0)

#define REQUIRE(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond)) {                                                 \
			oxt_fail(__FILE__, __LINE__, __VA_ARGS__);             \
			oxt_abort();                                           \
		}                                                              \
	} while (0)

/* Compare a libfabric return code; evaluates to whether it matched. */
static inline bool oxt_check_rc(const char *file, int line, const char *expr,
				long long got, long long exp)
{
	char g[160], e[160];

	if (got == exp)
		return true;
	oxt_fail(file, line, "%s: expected %s, got %s", expr,
		 oxt_rcstr(exp, e, sizeof e), oxt_rcstr(got, g, sizeof g));
	return false;
}

#define EXPECT_RC(expr, exp)                                                   \
	((void)oxt_check_rc(__FILE__, __LINE__, #expr, (long long)(expr),      \
			    (long long)(exp)))

#define REQUIRE_RC(expr, exp)                                                  \
	do {                                                                   \
		if (!oxt_check_rc(__FILE__, __LINE__, #expr,                  \
				  (long long)(expr), (long long)(exp)))        \
			oxt_abort();                                           \
	} while (0)

/* Equality of two integers (printed in decimal and hex). */
static inline bool oxt_check_eq(const char *file, int line, const char *expr,
				unsigned long long got, unsigned long long exp)
{
	if (got == exp)
		return true;
	oxt_fail(file, line, "%s: expected %llu (0x%llx), got %llu (0x%llx)",
		 expr, exp, exp, got, got);
	return false;
}

#define EXPECT_EQ(expr, exp)                                                   \
	((void)oxt_check_eq(__FILE__, __LINE__, #expr,                         \
			    (unsigned long long)(expr),                        \
			    (unsigned long long)(exp)))

#define REQUIRE_EQ(expr, exp)                                                  \
	do {                                                                   \
		if (!oxt_check_eq(__FILE__, __LINE__, #expr,                  \
				  (unsigned long long)(expr),                  \
				  (unsigned long long)(exp)))                  \
			oxt_abort();                                           \
	} while (0)

static inline bool oxt_check_str(const char *file, int line, const char *expr,
				 const char *got, const char *exp)
{
	if (got && exp && !strcmp(got, exp))
		return true;
	if (!got && !exp)
		return true;
	oxt_fail(file, line, "%s: expected \"%s\", got \"%s\"", expr,
		 exp ? exp : "(null)", got ? got : "(null)");
	return false;
}

#define EXPECT_STR(expr, exp)                                                  \
	((void)oxt_check_str(__FILE__, __LINE__, #expr, (expr), (exp)))

/* ------------------------------------------------------------ utilities */

static void oxt_on_alarm(int sig)
{
	static const char msg[] =
		"FAIL - watchdog: test did not finish within the time limit\n";
	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof msg - 1) < 0) {
		/* nothing more can be done from a signal handler */
	}
	_exit(2);
}

/* First call of every test program. */
static inline void oxt_init(const char *argv0)
{
	struct sigaction sa;
	const char *slash = strrchr(argv0, '/');

	oxt_prog = slash ? slash + 1 : argv0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = oxt_on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	alarm(OXT_WATCHDOG_S);
}

/* Monotonic time in milliseconds. */
static inline double oxt_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Fork a child that runs `fn` on its end of a socketpair and exits with
 * its result; returns the child's pid and puts the parent's end in *sock.
 * (Output is flushed first, so nothing buffered is printed twice.) */
static inline pid_t oxt_fork(int (*fn)(int sock), int *sock)
{
	int sv[2];
	pid_t pid;

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		exit(fn(sv[1]));
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

/* One command byte over a test's socketpair, each way. */
static inline void oxt_put(int sock, char c)
{
	REQUIRE(write(sock, &c, 1) == 1, "socketpair write");
}

static inline char oxt_get(int sock)
{
	char c;
	REQUIRE(read(sock, &c, 1) == 1, "socketpair read");
	return c;
}

/* Capture what oxmr logs (stderr) between begin and end; end returns it
 * (the first 8 KiB), to check a refusal's log line. */
static FILE *oxt_cap_file;
static int oxt_cap_saved = -1;
static inline void oxt_capture_begin(void)
{
	fflush(stderr);
	oxt_cap_file = tmpfile();
	REQUIRE(oxt_cap_file, "tmpfile for the log capture: %s", strerror(errno));
	oxt_cap_saved = dup(2);
	dup2(fileno(oxt_cap_file), 2);
}

static inline const char *oxt_capture_end(void)
{
	static char log[8192];
	ssize_t n;

	fflush(stderr);
	dup2(oxt_cap_saved, 2);
	close(oxt_cap_saved);
	n = pread(fileno(oxt_cap_file), log, sizeof log - 1, 0);
	log[n > 0 ? n : 0] = 0;
	fclose(oxt_cap_file);
	return log;
}

static inline void oxt_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* A sockaddr_in for ip:port (host order port). */
static inline struct sockaddr_in oxt_sin(const char *ip, uint16_t port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof s);
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &s.sin_addr) != 1) {
		printf("oxt_sin: bad IPv4 literal %s\n", ip);
		exit(1);
	}
	return s;
}

static inline struct sockaddr_in6 oxt_sin6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 s;

	memset(&s, 0, sizeof s);
	s.sin6_family = AF_INET6;
	s.sin6_port = htons(port);
	if (inet_pton(AF_INET6, ip, &s.sin6_addr) != 1) {
		printf("oxt_sin6: bad IPv6 literal %s\n", ip);
		exit(1);
	}
	return s;
}

/*
 * Two hosts (fabtests/netns.sh, run from fabtests/run.sh): the program runs
 * in one network namespace and its peer process enters another one,
 * OXT_NETNS_PEER (setns: root), so that every transfer between them crosses
 * the veth pair over TCP. OXT_ADDR_SELF and OXT_ADDR_PEER are the addresses
 * each side opens its endpoint on. Unset: one host, both on 127.0.0.1.
 */
static bool oxt_peer_side;
static inline bool oxt_two_hosts(void)
{
	const char *v = getenv("OXT_NETNS_PEER");

	return v && *v;
}

/* The address this side's endpoint opens on. */
static inline const char *oxt_addr(void)
{
	const char *v = getenv(oxt_peer_side ? "OXT_ADDR_PEER" : "OXT_ADDR_SELF");

	return oxt_two_hosts() && v && *v ? v : "127.0.0.1";
}

/* In a peer process, before it opens anything: be the peer host (enter its
 * network namespace when there are two). */
static inline void oxt_become_peer(void)
{
	const char *ns = getenv("OXT_NETNS_PEER");
	char path[256];
	int fd;

	oxt_peer_side = true;
	if (!oxt_two_hosts())
		return;
	snprintf(path, sizeof path, "/run/netns/%s", ns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0, "open %s (OXT_NETNS_PEER): %s", path, strerror(errno));
	/* (CLONE_NEWNET: sched.h names it only under _GNU_SOURCE.) */
	REQUIRE(syscall(SYS_setns, fd, 0x40000000) == 0, "setns %s: %s", path, strerror(errno));
	close(fd);
}

/* Hints that select oxmr (also without FI_PROVIDER) and an endpoint type. */
static inline struct fi_info *oxt_hints(enum fi_ep_type type)
{
	struct fi_info *h = fi_allocinfo();

	REQUIRE(h != NULL, "fi_allocinfo returned NULL");
	h->ep_attr->type = type;
	h->fabric_attr->prov_name = strdup("oxmr");
	return h;
}

/*
 * The first oxmr info of `type` for node "127.0.0.1" with FI_SOURCE (an
 * ephemeral port, so tests never collide on a port). REQUIREs success.
 */
static inline struct fi_info *oxt_getinfo_local(enum fi_ep_type type)
{
	struct fi_info *hints = oxt_hints(type), *info = NULL;
	int ret;

	ret = fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints,
			 &info);
	fi_freeinfo(hints);
	REQUIRE_RC(ret, 0);
	REQUIRE(info != NULL, "fi_getinfo returned 0 but no info");
	REQUIRE(info->ep_attr->type == type,
		"first info has ep type %d, asked %d", info->ep_attr->type,
		type);
	if (info->next) {
		fi_freeinfo(info->next);
		info->next = NULL;
	}
	return info;
}

/* A "Key:   N kB" line of /proc/self/status, in kB; -1 if absent. */
static inline long oxt_status_kb(const char *key)
{
	char line[256];
	size_t n = strlen(key);
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

/* Pages pinned (FOLL_PIN) and locked (mlock) by this process, in kB. */
static inline long vm_pin(void) { return oxt_status_kb("VmPin"); }
static inline long vm_lck(void) { return oxt_status_kb("VmLck"); }

/* A byte pattern for `seed` (tests check that a transfer carried it). */
static inline void oxt_fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 13 + seed);
}

/* Whether p[0..n) holds oxt_fill's pattern for `seed`. */
static inline bool oxt_same(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 13 + seed))
			return false;
	return true;
}

/* The first index of p[0..n) whose byte is not `v` (n: none). */
static inline size_t oxt_first_not(const unsigned char *p, size_t n, unsigned char v)
{
	size_t i = 0;

	while (i < n && p[i] == v)
		i++;
	return i;
}

/* A fabric and domain opened over one info. */
struct oxt_env {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
};

static inline void oxt_open_type(struct oxt_env *e, enum fi_ep_type type)
{
	memset(e, 0, sizeof *e);
	e->info = oxt_getinfo_local(type);
	REQUIRE_RC(fi_fabric(e->info->fabric_attr, &e->fabric, NULL), 0);
	REQUIRE_RC(fi_domain(e->fabric, e->info, &e->domain, NULL), 0);
}

/* The first oxmr RDM info for 127.0.0.1 (FI_SOURCE), its fabric and domain. */
static inline void oxt_open(struct oxt_env *e)
{
	oxt_open_type(e, FI_EP_RDM);
}

static inline void oxt_close(struct oxt_env *e)
{
	if (e->domain)
		EXPECT_RC(fi_close(&e->domain->fid), 0);
	if (e->fabric)
		EXPECT_RC(fi_close(&e->fabric->fid), 0);
	fi_freeinfo(e->info);
	memset(e, 0, sizeof *e);
}

/* One side of a two-process test: an RDM endpoint on 127.0.0.1 with a CQ
 * and an AV holding the peer, whose name came over a socketpair. */
struct oxt_side {
	struct oxt_env e;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	fi_addr_t peer;
	/* FI_MR_VIRT_ADDR: peers name a region's byte 0 by its address. */
	bool virt;
};

static inline void oxt_side_open(struct oxt_side *s, int sock)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	char me[64], them[64];
	size_t len = sizeof me;

	oxt_open(&s->e);
	s->virt = (s->e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	REQUIRE_RC(fi_cq_open(s->e.domain, &ca, &s->cq, NULL), 0);
	REQUIRE_RC(fi_av_open(s->e.domain, &aa, &s->av, NULL), 0);
	REQUIRE_RC(fi_endpoint(s->e.domain, s->e.info, &s->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(s->ep, &s->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(s->ep), 0);
	REQUIRE_RC(fi_getname(&s->ep->fid, me, &len), 0);
	REQUIRE(write(sock, me, sizeof me) == sizeof me, "socketpair write");
	REQUIRE(read(sock, them, sizeof them) == sizeof them, "socketpair read");
	REQUIRE_RC(fi_av_insert(s->av, them, 1, &s->peer, 0, NULL), 1);
}

static inline void oxt_side_close(struct oxt_side *s)
{
	fi_close(&s->ep->fid);
	fi_close(&s->av->fid);
	fi_close(&s->cq->fid);
	oxt_close(&s->e);
}

/*
 * The error completion fi_cq_read announced (-FI_EAVAIL): its error code
 * (positive) and context. A failing fi_cq_readerr (anything but 1), or an
 * error entry with err 0, is a failed check; then -2 and a NULL context.
 */
static inline int oxt_readerr_at(const char *file, int line, struct fid_cq *cq,
				 void **ctx)
{
	struct fi_cq_err_entry err = { 0 };
	ssize_t n = fi_cq_readerr(cq, &err, 0);
	char rc[160];

	*ctx = NULL;
	if (n != 1) {
		oxt_fail(file, line,
			 "fi_cq_readerr after -FI_EAVAIL: expected 1, got %s",
			 oxt_rcstr(n, rc, sizeof rc));
		return -2;
	}
	if (err.err <= 0) {
		oxt_fail(file, line,
			 "fi_cq_readerr: an error completion with err %d (prov_errno %d)",
			 err.err, err.prov_errno);
		return -2;
	}
	*ctx = err.op_context;
	return err.err;
}

#define OXT_READERR(cq, ctx) oxt_readerr_at(__FILE__, __LINE__, (cq), (ctx))

/* One completion for `ctx` within 10 s; its error code (0: success; -1
 * none, -2 fi_cq_readerr failed: both failed checks). */
static inline int oxt_wait_one(struct oxt_side *s, void *ctx)
{
	struct fi_cq_tagged_entry ent;
	double until = oxt_now_ms() + 10000;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(s->cq, &ent, 1);
		if (n == 1) {
			EXPECT(ent.op_context == ctx, "completion for another operation");
			return 0;
		}
		if (n == -FI_EAVAIL) {
			void *ectx;
			int rc = OXT_READERR(s->cq, &ectx);

			if (rc > 0)
				EXPECT(ectx == ctx, "error completion for another operation");
			return rc;
		}
	}
	EXPECT(0, "no completion within 10 s");
	return -1;
}

struct oxt_ep {
	struct oxt_env e;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	char name[64];
};

/* An RDM endpoint on 127.0.0.1 (two hosts: this side's `oxt_addr`; `port`
 * 0: an ephemeral one) with a fabric and
 * domain of its own, a CQ (wait object `wait`) and an AV. */
static inline void oxt_ep_open(struct oxt_ep *x, uint16_t port, enum fi_wait_obj wait)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64, .wait_obj = wait };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	char service[16];
	size_t len = sizeof x->name;

	memset(x, 0, sizeof *x);
	snprintf(service, sizeof service, "%u", port);
	REQUIRE_RC(fi_getinfo(OXT_VERSION, oxt_addr(), port ? service : NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	if (info->next) {
		fi_freeinfo(info->next);
		info->next = NULL;
	}
	x->e.info = info;
	REQUIRE_RC(fi_fabric(info->fabric_attr, &x->e.fabric, NULL), 0);
	REQUIRE_RC(fi_domain(x->e.fabric, info, &x->e.domain, NULL), 0);
	REQUIRE_RC(fi_cq_open(x->e.domain, &ca, &x->cq, NULL), 0);
	REQUIRE_RC(fi_av_open(x->e.domain, &aa, &x->av, NULL), 0);
	REQUIRE_RC(fi_endpoint(x->e.domain, info, &x->ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(x->ep, &x->av->fid, 0), 0);
	REQUIRE_RC(fi_enable(x->ep), 0);
	REQUIRE_RC(fi_getname(&x->ep->fid, x->name, &len), 0);
}

static inline void oxt_ep_close(struct oxt_ep *x)
{
	EXPECT_RC(fi_close(&x->ep->fid), 0);
	EXPECT_RC(fi_close(&x->av->fid), 0);
	EXPECT_RC(fi_close(&x->cq->fid), 0);
	oxt_close(&x->e);
}

static inline fi_addr_t oxt_ep_insert(struct oxt_ep *x, const struct oxt_ep *peer)
{
	fi_addr_t a = FI_ADDR_NOTAVAIL;

	REQUIRE_RC(fi_av_insert(x->av, peer->name, 1, &a, 0, NULL), 1);
	return a;
}

/* Trade endpoint names with the other process over `sock` (a socketpair
 * from oxt_fork) and insert the peer's into our AV as `*peer`. */
static inline void oxt_exchange(struct oxt_ep *x, int sock, fi_addr_t *peer)
{
	char them[64];

	REQUIRE(write(sock, x->name, sizeof x->name) == sizeof x->name, "socketpair write");
	REQUIRE(read(sock, them, sizeof them) == sizeof them, "socketpair read");
	REQUIRE_RC(fi_av_insert(x->av, them, 1, peer, 0, NULL), 1);
}

/* The next completion of `cq` within `ms`: 0 success, a positive FI_E*
 * code for an error completion (its context in *ctx), -1 none, -2 a
 * failing fi_cq_readerr (a failed check, *ctx NULL). */
static inline int oxt_next_completion(struct fid_cq *cq, int ms, void **ctx)
{
	struct fi_cq_tagged_entry ent;
	double until = oxt_now_ms() + ms;

	while (oxt_now_ms() < until) {
		ssize_t n = fi_cq_read(cq, &ent, 1);

		if (n == 1) {
			*ctx = ent.op_context;
			return 0;
		}
		if (n == -FI_EAVAIL)
			return OXT_READERR(cq, ctx);
	}
	return -1;
}

#endif /* OXT_H */
