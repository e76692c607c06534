/*
 * The TCP ceiling of this machine: how fast SIZE-byte messages go from one
 * process to another over K TCP connections when nothing else happens (no
 * framing, no matching, no completion queue): what any TCP provider can
 * reach on the path compare_tcp.sh measures. The sender writes SIZE bytes
 * from one buffer again and again, the receiver reads them into one
 * buffer (cache-hot, as fabtests' bandwidth tests do).
 *
 * The same process drives K non-blocking connections in turn, each
 * message's bytes spread over them in 256 KiB pieces, both sides polling:
 * what a polling provider does with one connection per peer (K = 1) or
 * with several. With "block" (K = 1 only), one blocking connection
 * instead, the receiver asleep until data is queued: what a sleeping
 * reader gets, and on loopback and veth less than a polled one at 16 MiB
 * (compare the two before reading K = 2 against K = 1). With "duplex"
 * (both sides say it), each side sends COUNT messages and receives as
 * many at once, polled: what fabtests' two-way fi_rma_bw -o write moves
 * with nothing else. Prints MB/s (1e6 bytes/s, as fabtests prints; one
 * direction's) at the sender.
 *
 *   cc -O2 -o /tmp/tcp_ceiling bench/tcp_ceiling.c
 *   server: /tmp/tcp_ceiling recv ADDR PORT SIZE COUNT K [block|duplex]
 *   client: /tmp/tcp_ceiling send ADDR PORT SIZE COUNT K [block|duplex]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_K 8
#define PIECE (256 << 10)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int blocking, duplex;

/* Either side's step on connection `fd`: move up to one piece of
 * [*off, end) of buf; the bytes moved. */
static size_t step(int sending, int fd, char *buf, size_t *off, size_t end)
{
	size_t n = end - *off;
	ssize_t r;

	if (n == 0)
		return 0;
	if (n > PIECE && !blocking)
		n = PIECE;
	r = sending ? send(fd, buf + *off, n, MSG_NOSIGNAL) : recv(fd, buf + *off, n, 0);
	if (r > 0) {
		*off += r;
		return r;
	}
	if (r == 0 || (errno != EAGAIN && errno != EINTR))
		die(sending ? "send" : "recv");
	return 0;
}

/* Move COUNT messages of SIZE bytes over the K connections in fd (and,
 * duplex, as many the other way into rbuf). */
static void run(int sender, int *fd, int k, char *buf, char *rbuf, size_t size, long count)
{
	size_t off[MAX_K], roff[MAX_K];
	long m;
	int i;

	for (m = 0; m < count; m++) {
		size_t share = size / k, left = size, rleft = duplex ? size : 0;

		/* Connection i carries bytes [i * share, next) of the message. */
		for (i = 0; i < k; i++)
			off[i] = roff[i] = i * share;
		while (left > 0 || rleft > 0) {
			for (i = 0; i < k; i++) {
				size_t end = i == k - 1 ? size : (i + 1) * share;

				left -= step(sender || duplex, fd[i], buf, &off[i], end);
				if (duplex)
					rleft -= step(0, fd[i], rbuf, &roff[i], end);
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd[MAX_K], one = 1, sender, k, i;
	size_t size;
	long count;
	double t0, t;
	char *buf, *rbuf, c = 0;

	if ((argc != 7 && argc != 8) || (strcmp(argv[1], "send") && strcmp(argv[1], "recv")) ||
	    (argc == 8 && strcmp(argv[7], "block") && strcmp(argv[7], "duplex"))) {
		fprintf(stderr, "usage: %s send|recv ADDR PORT SIZE COUNT K [block|duplex]\n", argv[0]);
		return 2;
	}
	blocking = argc == 8 && !strcmp(argv[7], "block");
	duplex = argc == 8 && !strcmp(argv[7], "duplex");
	sender = !strcmp(argv[1], "send");
	size = strtoul(argv[4], NULL, 0);
	count = strtol(argv[5], NULL, 0);
	k = atoi(argv[6]);
	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1 || size < (size_t)k || count < 1 || k < 1 ||
	    k > MAX_K || (blocking && k != 1)) {
		fprintf(stderr, "%s: bad address, size, count or K (1 to %d; 1 with block)\n", argv[0], MAX_K);
		return 2;
	}
	a.sin_port = htons(atoi(argv[3]));
	buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	rbuf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	if (!buf || !rbuf)
		die("aligned_alloc");
	memset(buf, 1, size);
	memset(rbuf, 0, size);
	if (sender) {
		for (i = 0; i < k; i++) {
			int tries = 0;

			fd[i] = socket(AF_INET, SOCK_STREAM, 0);
			while (connect(fd[i], (struct sockaddr *)&a, sizeof(a)) != 0) {
				if (++tries > 500)
					die("connect");
				usleep(10000);
			}
		}
	} else {
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, MAX_K) != 0)
			die("bind/listen");
		for (i = 0; i < k; i++)
			if ((fd[i] = accept(l, NULL, NULL)) < 0)
				die("accept");
		close(l);
	}
	for (i = 0; i < k; i++) {
		setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!blocking)
			fcntl(fd[i], F_SETFL, O_NONBLOCK);
	}
	t0 = now();
	run(sender, fd, k, buf, rbuf, size, count);
	/* The receiver's one byte says every byte arrived. */
	fcntl(fd[0], F_SETFL, 0);
	if (sender ? read(fd[0], &c, 1) != 1 : write(fd[0], &c, 1) != 1)
		die("final byte");
	t = now() - t0;
	if (sender)
		printf("%zu %ld %d %.2f\n", size, count, k, (double)size * count / t / 1e6);
	return 0;
}
