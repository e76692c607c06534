/*
 * common.h: what the MPI test programs (check.c, onesided.c) share: the
 * CHECK macro (it counts into the program's `checks` and `fails` and names
 * its `rank`), and the byte pattern buffers are filled with and checked
 * against: byte i of the pattern of `seed` depends on both, so a byte from
 * another message, another offset or another round does not pass for the
 * right one.
 */
#ifndef OXMR_MPI_COMMON_H
#define OXMR_MPI_COMMON_H

#include <stddef.h>
#include <stdio.h>

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		checks++;                                                      \
		if (!(cond)) {                                                 \
			fails++;                                               \
			fprintf(stderr, "rank %d: FAIL %s:%d: ", rank,         \
				__FILE__, __LINE__);                           \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
		}                                                              \
	} while (0)

static unsigned char byte_at(size_t i, unsigned seed)
{
	return (unsigned char)(i * 131 + seed * 17 + (i >> 11) + (seed >> 8));
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = byte_at(i, seed);
}

/* The first byte of p[0..n) that is not the pattern of `seed`; n if none. */
static size_t first_bad(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != byte_at(i, seed))
			return i;
	return n;
}

#endif
