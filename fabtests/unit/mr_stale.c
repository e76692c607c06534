/*
 * Stale memory through the wire: the owner registers a buffer, closes it
 * (the cache keeps its pin), unmaps it, maps new memory at the same address
 * with new bytes and registers that; the peer's RMA read with the new key
 * must return the new bytes, never the old pages the cache once held, and
 * the old key must be rejected. Twice: munmap + mmap, and mmap MAP_FIXED
 * straight over the closed registration's memory.
 *
 * Two real processes over whatever wire FI_OXMR_WIRE picks: shared memory
 * by default (the peer reads with process_vm_readv from the owner's
 * mapping), and run.sh's mr_stale[FI_OXMR_WIRE=tcp], where the owner's
 * engine reads the registration and pushes it through a TCP connection.
 *
 * What can fail here: oxmr's data path always reads through the owner's
 * current mapping (by virtual address), never through the pages a pin
 * holds, so a stale cache entry would not by itself return the old bytes
 * the way a NIC's DMA would. The owner therefore also checks that the new
 * registration is a new cache entry (a hit on the stale one is the bug that
 * would matter to hardware), and the old key must be rejected.
 */
#include "oxt.h"

#include <rdma/fi_ext_oxmr.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define LEN (64UL << 10)

struct keys {
	uint64_t addr, key;
};

static struct oxmr_mr_ops *mr_ops(struct fid_domain *d)
{
	struct oxmr_mr_ops *ops = NULL;

	REQUIRE_RC(fi_open_ops(&d->fid, OXMR_MR_OPS_NAME, 0, (void **)&ops, NULL), 0);
	return ops;
}

static uint64_t entry_of(struct oxmr_mr_ops *ops, struct fid_mr *mr)
{
	struct oxmr_mr_info in = { .size = sizeof in };

	EXPECT_RC(ops->query(mr, &in), 0);
	return in.cache_entry;
}

static int owner(int sock)
{
	struct oxt_side s;
	struct oxmr_mr_ops *ops;
	struct fid_mr *mr = NULL;
	struct keys k;
	uint64_t first = 0;
	unsigned seed = 1;
	char *a;

	oxt_side_open(&s, sock);
	ops = mr_ops(s.e.domain);
	a = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(a != MAP_FAILED, "mmap");
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		struct fi_cq_tagged_entry ent;
		char c;

		(void)fi_cq_read(s.cq, &ent, 1);
		if (poll(&p, 1, 0) != 1)
			continue;
		c = oxt_get(sock);
		if (c == 'D')
			break;
		if (c == 'U') { /* close (cached), munmap, mmap at the same address */
			EXPECT_RC(fi_close(&mr->fid), 0);
			REQUIRE(munmap(a, LEN) == 0, "munmap");
			REQUIRE(mmap(a, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == a,
				"mmap at the old address");
		} else if (c == 'F') { /* close (cached), MAP_FIXED over it */
			EXPECT_RC(fi_close(&mr->fid), 0);
			REQUIRE(mmap(a, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == a,
				"mmap MAP_FIXED over the buffer");
		}
		/* 'R', 'U', 'F': fill with the next bytes, register, send the key */
		oxt_fill((unsigned char *)a, LEN, seed++);
		REQUIRE_RC(fi_mr_reg(s.e.domain, a, LEN, FI_REMOTE_READ, 0, 0x9000 + seed, 0, &mr, NULL), 0);
		if (c == 'R') {
			first = entry_of(ops, mr);
			EXPECT(first != 0, "the registration is not cached (nothing stale to test)");
		} else {
			uint64_t now = entry_of(ops, mr);
			EXPECT(now != first && now != 0, "the new memory's registration uses cache entry %llu (the old one: %llu)",
			       (unsigned long long)now, (unsigned long long)first);
			first = now;
		}
		k.addr = s.virt ? (uint64_t)(uintptr_t)a : 0;
		k.key = fi_mr_key(mr);
		REQUIRE(write(sock, &k, sizeof k) == sizeof k, "keys");
	}
	if (mr)
		fi_close(&mr->fid);
	munmap(a, LEN);
	oxt_side_close(&s);
	return 0;
}

/* Ask the owner for `cmd`, read what its new key names, compare with
 * `seed`'s bytes; the previous key must be rejected. */
static void round_(struct oxt_side *s, int sock, char cmd, unsigned seed, struct keys *k, unsigned char *buf)
{
	struct fi_context ctx;
	struct keys old = *k;

	oxt_put(sock, cmd);
	REQUIRE(read(sock, k, sizeof *k) == sizeof *k, "keys");
	memset(buf, 0, LEN);
	EXPECT_RC(fi_read(s->ep, buf, LEN, NULL, s->peer, k->addr, k->key, &ctx), 0);
	EXPECT_RC(oxt_wait_one(s, &ctx), 0);
	EXPECT(oxt_same(buf, LEN, seed), "the read returned other bytes than the memory mapped there now");
	if (cmd != 'R') {
		EXPECT_RC(fi_read(s->ep, buf, 64, NULL, s->peer, old.addr, old.key, &ctx), 0);
		EXPECT_RC(oxt_wait_one(s, &ctx), FI_EACCES);
	}
}

static void driver(int sock)
{
	struct oxt_side s;
	struct keys k = { 0, 0 };
	unsigned char *buf = malloc(LEN);

	oxt_side_open(&s, sock);
	OXT_GROUP("RMA read of a registered 64 KiB buffer returns its bytes");
	round_(&s, sock, 'R', 1, &k, buf);
	OXT_GROUP("closed (cached), munmap, new memory mapped at the same address and registered: the peer reads the new bytes");
	round_(&s, sock, 'U', 2, &k, buf);
	OXT_GROUP("closed (cached), mmap MAP_FIXED over it, registered: the peer reads the new bytes");
	round_(&s, sock, 'F', 3, &k, buf);
	oxt_put(sock, 'D');
	oxt_side_close(&s);
	free(buf);
}

int main(int argc, char **argv)
{
	int sv[2], status;
	pid_t pid;

	(void)argc;
	setenv("FI_LOG_LEVEL", "warn", 0);
	oxt_init(argv[0]);
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		oxt_reset_counts();
		oxt_prog = "mr_stale[owner]";
		OXT_GROUP("the owner's side: its registrations, each a new cache entry");
		exit(owner(sv[1]) || oxt_done());
	}
	close(sv[1]);
	driver(sv[0]);
	waitpid(pid, &status, 0);
	OXT_GROUP("the owner process");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "owner failed (status %d)", status);
	return oxt_done();
}
