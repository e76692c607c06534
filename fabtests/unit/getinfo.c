/*
 * getinfo: what fi_getinfo answers for oxmr, what it refuses, and how it
 * reflects hints (fi_getinfo(3)).
 */
#include "oxt.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define ALL_PRIMARY                                                            \
	(FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_MULTICAST |              \
	 FI_NAMED_RX_CTX | FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_HMEM |      \
	 FI_COLLECTIVE | FI_READ | FI_WRITE | FI_RECV | FI_SEND |              \
	 FI_REMOTE_READ | FI_REMOTE_WRITE)

/* oxmr's secondary capabilities (added to every RDM answer). */
#define OXMR_SECONDARY_RDM                                                     \
	(FI_SOURCE | FI_RMA_EVENT | FI_FENCE | FI_TRIGGER | FI_LOCAL_COMM |    \
	 FI_MULTI_RECV)

static int count(const struct fi_info *i)
{
	int n = 0;

	for (; i; i = i->next)
		n++;
	return n;
}

static bool is_loopback(const struct fi_info *i)
{
	if (i->src_addr && i->src_addrlen == sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s = i->src_addr;
		return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
	}
	if (i->src_addr && i->src_addrlen == sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s = i->src_addr;
		return IN6_IS_ADDR_LOOPBACK(&s->sin6_addr);
	}
	return false;
}

/* Check that `addr`/`len` is the sockaddr_in ip:port. */
static void expect_sin(int line, const char *what, const void *addr,
		       size_t len, const char *ip, uint16_t port)
{
	const struct sockaddr_in *s = addr;
	char got[INET_ADDRSTRLEN] = "?";

	if (!addr || len != sizeof(struct sockaddr_in)) {
		oxt_fail(__FILE__, line,
			 "%s: expected a %zu-byte sockaddr_in %s:%u, got %p/%zu",
			 what, sizeof(struct sockaddr_in), ip, port, addr, len);
		return;
	}
	inet_ntop(AF_INET, &s->sin_addr, got, sizeof got);
	if (s->sin_family != AF_INET || strcmp(got, ip) ||
	    ntohs(s->sin_port) != port)
		oxt_fail(__FILE__, line,
			 "%s: expected AF_INET %s:%u, got family %u %s:%u", what,
			 ip, port, s->sin_family, got, ntohs(s->sin_port));
}

/* fi_getinfo must give -FI_ENODATA and no list. Frees `hints`. */
static void expect_refused(int line, const char *what, const char *node,
			   const char *service, uint64_t flags,
			   struct fi_info *hints)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(OXT_VERSION, node, service, flags, hints, &info);

	if (oxt_check_rc(__FILE__, line, what, ret, -FI_ENODATA))
		EXPECT(info == NULL, "%s: info list returned with an error",
		       what);
	if (ret == 0)
		fi_freeinfo(info);
	fi_freeinfo(hints);
}

#define REFUSED(what, node, service, flags, hints)                             \
	expect_refused(__LINE__, what, node, service, flags, hints)

/* fi_getinfo (RDM, node 127.0.0.1, FI_SOURCE) must succeed. */
static struct fi_info *ask_ok(int line, const char *what,
			      struct fi_info *hints)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, hints,
			     &info);

	fi_freeinfo(hints);
	if (!oxt_check_rc(__FILE__, line, what, ret, 0))
		return NULL;
	if (!info)
		oxt_fail(__FILE__, line, "%s: success but no info", what);
	return info;
}

#define ASK_OK(what, hints) ask_ok(__LINE__, what, hints)

/* Whether a socket can bind ::1 here; if not, why (in `why`). */
static bool have_ipv6_loopback(char *why, size_t len)
{
	struct sockaddr_in6 s = oxt_sin6("::1", 0);
	int fd = socket(AF_INET6, SOCK_DGRAM, 0);
	bool ok;

	if (fd < 0) {
		snprintf(why, len, "no IPv6 sockets (socket(AF_INET6): %s)", strerror(errno));
		return false;
	}
	ok = bind(fd, (struct sockaddr *)&s, sizeof s) == 0;
	if (!ok)
		snprintf(why, len, "::1 is not configured (bind: %s)", strerror(errno));
	close(fd);
	return ok;
}

/* An RDM endpoint on ::1 (an ephemeral port) names itself with a 28-byte
 * ::1 address, takes that name into its AV and sends to itself. */
static void ipv6_endpoint(void)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fi_info *hints = oxt_hints(FI_EP_RDM), *info = NULL;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct sockaddr_in6 name;
	struct fi_context c1, c2;
	char sbuf[32] = "over ::1", rbuf[32] = { 0 };
	size_t len = sizeof name;
	fi_addr_t self = FI_ADDR_NOTAVAIL;
	int got = 0, rc;
	void *ctx;

	REQUIRE_RC(fi_getinfo(OXT_VERSION, "::1", NULL, FI_SOURCE, hints, &info), 0);
	fi_freeinfo(hints);
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	REQUIRE_RC(fi_domain(fabric, info, &domain, NULL), 0);
	REQUIRE_RC(fi_cq_open(domain, &ca, &cq, NULL), 0);
	REQUIRE_RC(fi_av_open(domain, &aa, &av, NULL), 0);
	REQUIRE_RC(fi_endpoint(domain, info, &ep, NULL), 0);
	REQUIRE_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	REQUIRE_RC(fi_ep_bind(ep, &av->fid, 0), 0);
	REQUIRE_RC(fi_enable(ep), 0);
	memset(&name, 0, sizeof name);
	EXPECT_RC(fi_getname(&ep->fid, &name, &len), 0);
	EXPECT_EQ(len, sizeof(struct sockaddr_in6));
	EXPECT_EQ(name.sin6_family, AF_INET6);
	EXPECT(ntohs(name.sin6_port) != 0, "the endpoint's name has port 0");
	EXPECT(IN6_IS_ADDR_LOOPBACK(&name.sin6_addr), "the endpoint's name is not ::1");
	EXPECT_RC(fi_av_insert(av, &name, 1, &self, 0, NULL), 1);
	EXPECT_RC(fi_recv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, &c1), 0);
	EXPECT_RC(fi_send(ep, sbuf, sizeof sbuf, NULL, self, &c2), 0);
	while (got < 2 && (rc = oxt_next_completion(cq, 5000, &ctx)) >= 0) {
		EXPECT(rc == 0 && (ctx == &c1 || ctx == &c2), "completion %d (%s)", rc,
		       rc > 0 ? fi_strerror(rc) : "success, another context");
		got++;
	}
	EXPECT(got == 2, "%d of 2 completions within 5 s", got);
	EXPECT(!memcmp(rbuf, sbuf, sizeof sbuf), "received \"%.31s\"", rbuf);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&av->fid), 0);
	EXPECT_RC(fi_close(&cq->fid), 0);
	EXPECT_RC(fi_close(&domain->fid), 0);
	EXPECT_RC(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
}

static void check_side_caps(const struct fi_info *i)
{
	uint64_t tx_never = FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE |
			    FI_LOCAL_COMM | FI_REMOTE_COMM;
	uint64_t rx_never = FI_SEND | FI_READ | FI_WRITE | FI_LOCAL_COMM |
			    FI_REMOTE_COMM;

	EXPECT((i->tx_attr->caps & tx_never) == 0,
	       "tx_attr->caps 0x%llx has receive-side/domain bits 0x%llx",
	       (unsigned long long)i->tx_attr->caps,
	       (unsigned long long)(i->tx_attr->caps & tx_never));
	EXPECT((i->rx_attr->caps & rx_never) == 0,
	       "rx_attr->caps 0x%llx has transmit-side/domain bits 0x%llx",
	       (unsigned long long)i->rx_attr->caps,
	       (unsigned long long)(i->rx_attr->caps & rx_never));
	EXPECT((i->tx_attr->caps & ~i->caps) == 0,
	       "tx_attr->caps 0x%llx not a subset of caps 0x%llx",
	       (unsigned long long)i->tx_attr->caps,
	       (unsigned long long)i->caps);
	EXPECT((i->rx_attr->caps & ~i->caps) == 0,
	       "rx_attr->caps 0x%llx not a subset of caps 0x%llx",
	       (unsigned long long)i->rx_attr->caps,
	       (unsigned long long)i->caps);
}

static void test_no_hints(void)
{
	struct fi_info *hints = oxt_hints(FI_EP_UNSPEC), *info = NULL, *i;
	int ret, n_rdm = 0, n_msg = 0, n_dgram = 0;
	bool seen_msg = false, seen_dgram = false, seen_lo_rdm = false, lo_ok = false;

	OXT_GROUP("no hints: one RDM, then one MSG, then one DGRAM info per local address");
	ret = fi_getinfo(OXT_VERSION, NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	REQUIRE_RC(ret, 0);
	REQUIRE(info != NULL, "no info");
	EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
	for (i = info; i; i = i->next) {
		EXPECT(i->ep_attr->type == FI_EP_RDM ||
			       i->ep_attr->type == FI_EP_MSG ||
			       i->ep_attr->type == FI_EP_DGRAM,
		       "ep type %d", i->ep_attr->type);
		if (i->ep_attr->type == FI_EP_RDM) {
			n_rdm++;
			EXPECT(!seen_msg && !seen_dgram, "an RDM info follows a MSG or DGRAM info");
		} else if (i->ep_attr->type == FI_EP_MSG) {
			n_msg++;
			seen_msg = true;
			EXPECT(!seen_dgram, "a MSG info follows a DGRAM info");
		} else {
			n_dgram++;
			seen_dgram = true;
			EXPECT(i->ep_attr->max_msg_size == 8080, "DGRAM max_msg_size %zu", i->ep_attr->max_msg_size);
			EXPECT((i->caps & (FI_RMA | FI_ATOMIC | FI_TAGGED)) == 0, "DGRAM caps 0x%llx",
			       (unsigned long long)i->caps);
		}
		EXPECT_STR(i->fabric_attr->prov_name, "oxmr");
		EXPECT(i->domain_attr->name != NULL, "NULL domain name");
		EXPECT(i->fabric_attr->name != NULL, "NULL fabric name");
		EXPECT(i->addr_format == FI_SOCKADDR_IN ||
			       i->addr_format == FI_SOCKADDR_IN6,
		       "addr_format %u", i->addr_format);
		EXPECT_EQ(i->src_addrlen, i->addr_format == FI_SOCKADDR_IN6 ?
						  sizeof(struct sockaddr_in6) :
						  sizeof(struct sockaddr_in));
		EXPECT(i->dest_addr == NULL, "dest_addr set without a node");
		/* non-loopback addresses first, per endpoint type */
		if (i->ep_attr->type == FI_EP_RDM) {
			if (is_loopback(i))
				seen_lo_rdm = true;
			else
				EXPECT(!seen_lo_rdm,
				       "non-loopback RDM info after a loopback one (domain %s)",
				       i->domain_attr->name);
		}
		if (i->ep_attr->type == FI_EP_RDM &&
		    i->addr_format == FI_SOCKADDR_IN && is_loopback(i) &&
		    i->domain_attr->name && i->fabric_attr->name &&
		    !strcmp(i->domain_attr->name, "lo") &&
		    !strcmp(i->fabric_attr->name, "127.0.0.0/8"))
			lo_ok = true;
		check_side_caps(i);
	}
	EXPECT(n_rdm == n_msg && n_msg == n_dgram, "%d RDM infos, %d MSG infos, %d DGRAM infos", n_rdm, n_msg,
	       n_dgram);
	EXPECT(lo_ok,
	       "no RDM info with domain \"lo\", fabric \"127.0.0.0/8\" and a 127.x source");
	fi_freeinfo(info);
}

static void test_addresses(void)
{
	struct fi_info *hints, *info = NULL;
	char why[160];
	int ret;

	OXT_GROUP("FI_SOURCE 127.0.0.1:9228 gives that src_addr, domain lo");
	hints = oxt_hints(FI_EP_RDM);
	ret = fi_getinfo(OXT_VERSION, "127.0.0.1", "9228", FI_SOURCE, hints,
			 &info);
	fi_freeinfo(hints);
	EXPECT_RC(ret, 0);
	if (ret == 0 && info) {
		EXPECT_EQ(count(info), 1);
		EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
		EXPECT_EQ(info->addr_format, FI_SOCKADDR_IN);
		expect_sin(__LINE__, "src_addr", info->src_addr,
			   info->src_addrlen, "127.0.0.1", 9228);
		EXPECT(info->dest_addr == NULL, "dest_addr set with FI_SOURCE");
		EXPECT_STR(info->domain_attr->name, "lo");
		EXPECT_STR(info->fabric_attr->name, "127.0.0.0/8");
		fi_freeinfo(info);
	}

	OXT_GROUP("node 127.0.0.1:9228 without FI_SOURCE is the destination");
	info = NULL;
	hints = oxt_hints(FI_EP_RDM);
	ret = fi_getinfo(OXT_VERSION, "127.0.0.1", "9228", 0, hints, &info);
	fi_freeinfo(hints);
	EXPECT_RC(ret, 0);
	if (ret == 0 && info) {
		expect_sin(__LINE__, "dest_addr", info->dest_addr,
			   info->dest_addrlen, "127.0.0.1", 9228);
		expect_sin(__LINE__, "src_addr", info->src_addr,
			   info->src_addrlen, "127.0.0.1", 0);
		EXPECT_STR(info->domain_attr->name, "lo");
		fi_freeinfo(info);
	}

	OXT_GROUP("FI_SOURCE without node or service fails");
	info = NULL;
	hints = oxt_hints(FI_EP_RDM);
	ret = fi_getinfo(OXT_VERSION, NULL, NULL, FI_SOURCE, hints, &info);
	fi_freeinfo(hints);
	EXPECT(ret < 0, "fi_getinfo(NULL, NULL, FI_SOURCE) returned %d", ret);
	EXPECT(ret < 0 || info == NULL, "info returned");
	if (ret == 0)
		fi_freeinfo(info);

	OXT_GROUP("FI_SOURCE with only a service binds every local address");
	info = NULL;
	hints = oxt_hints(FI_EP_RDM);
	ret = fi_getinfo(OXT_VERSION, NULL, "9228", FI_SOURCE, hints, &info);
	fi_freeinfo(hints);
	EXPECT_RC(ret, 0);
	if (ret == 0) {
		struct fi_info *i;

		for (i = info; i; i = i->next) {
			const struct sockaddr_in *s = i->src_addr;

			EXPECT(s != NULL, "no src_addr");
			if (s)
				EXPECT_EQ(ntohs(s->sin_port), 9228);
		}
		fi_freeinfo(info);
	}

	OXT_GROUP("addr_format FI_SOCKADDR_IN restricts answers to IPv4");
	info = NULL;
	hints = oxt_hints(FI_EP_UNSPEC);
	hints->addr_format = FI_SOCKADDR_IN;
	ret = fi_getinfo(OXT_VERSION, NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	EXPECT_RC(ret, 0);
	if (ret == 0) {
		struct fi_info *i;

		for (i = info; i; i = i->next) {
			EXPECT_EQ(i->addr_format, FI_SOCKADDR_IN);
			EXPECT_EQ(i->src_addrlen, sizeof(struct sockaddr_in));
		}
		fi_freeinfo(info);
	}

	OXT_GROUP("IPv6: FI_SOURCE ::1 gives a 28-byte FI_SOCKADDR_IN6 name");
	if (!have_ipv6_loopback(why, sizeof why)) {
		oxt_skip("%s", why);
	} else {
		info = NULL;
		hints = oxt_hints(FI_EP_RDM);
		ret = fi_getinfo(OXT_VERSION, "::1", "9228", FI_SOURCE, hints,
				 &info);
		fi_freeinfo(hints);
		EXPECT_RC(ret, 0);
		if (ret == 0 && info) {
			const struct sockaddr_in6 *s = info->src_addr;

			EXPECT_EQ(info->addr_format, FI_SOCKADDR_IN6);
			EXPECT_EQ(info->src_addrlen,
				  sizeof(struct sockaddr_in6));
			if (s && info->src_addrlen == sizeof *s) {
				EXPECT_EQ(s->sin6_family, AF_INET6);
				EXPECT_EQ(ntohs(s->sin6_port), 9228);
				EXPECT(IN6_IS_ADDR_LOOPBACK(&s->sin6_addr),
				       "src_addr is not ::1");
			}
			fi_freeinfo(info);
		}
	}

	OXT_GROUP("IPv6: an RDM endpoint on ::1 names itself with a 28-byte ::1 address and sends to itself");
	if (!have_ipv6_loopback(why, sizeof why))
		oxt_skip("%s", why);
	else
		ipv6_endpoint();
}

static void test_refusals(void)
{
	struct fi_info *h;

	OXT_GROUP("hints oxmr cannot honour give -FI_ENODATA");

	h = oxt_hints(FI_EP_SOCK_DGRAM);
	REFUSED("ep_type FI_EP_SOCK_DGRAM", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_MSG | FI_COLLECTIVE;
	REFUSED("caps FI_COLLECTIVE", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_MSG);
	h->caps = FI_TAGGED | FI_DIRECTED_RECV;
	REFUSED("caps FI_DIRECTED_RECV with FI_EP_MSG (one peer)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_MSG | FI_RMA_PMEM;
	REFUSED("secondary cap FI_RMA_PMEM (not offered)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_DGRAM);
	h->caps = FI_MSG | FI_TRIGGER;
	REFUSED("FI_TRIGGER with FI_EP_DGRAM (RDM and MSG only)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_UNSPEC);
	h->addr_format = FI_SOCKADDR_IB;
	REFUSED("addr_format FI_SOCKADDR_IB", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	REFUSED("unresolvable node g00n13s.invalid", "g00n13s.invalid", "9228",
		0, h);

	h = oxt_hints(FI_EP_RDM);
	REFUSED("FI_NUMERICHOST with node localhost", "localhost", NULL,
		FI_NUMERICHOST, h);

	h = oxt_hints(FI_EP_RDM);
	REFUSED("FI_SOURCE with non-local 10.255.255.254", "10.255.255.254",
		"1", FI_SOURCE, h);

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->size = 1025;
	REFUSED("tx_attr->size 1025 (> 1024)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->rx_attr->size = 1025;
	REFUSED("rx_attr->size 1025 (> 1024)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->inject_size = 4097;
	REFUSED("inject_size 4097 (> 4096)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->iov_limit = 5;
	REFUSED("tx iov_limit 5 (> 4)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->rx_attr->iov_limit = 5;
	REFUSED("rx iov_limit 5 (> 4)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RAW;
	REFUSED("tx msg_order SAS|RAW", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->rx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_WAW;
	REFUSED("rx msg_order SAS|WAW", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->comp_order = OXT_ORDER_STRICT;
	REFUSED("tx comp_order FI_ORDER_STRICT", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	REFUSED("data_progress FI_PROGRESS_AUTO", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->control_progress = FI_PROGRESS_AUTO;
	REFUSED("control_progress FI_PROGRESS_AUTO", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->cq_data_size = 9;
	REFUSED("cq_data_size 9 (> 8)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->mr_key_size = 9;
	REFUSED("mr_key_size 9 (> 8)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->name = strdup("no-such-oxmr-domain0");
	REFUSED("domain name that does not exist", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->fabric_attr->name = strdup("10.99.0.0/16");
	REFUSED("fabric name that does not exist", NULL, NULL, 0, h);

	/* (Several contexts are a scalable endpoint's: RDM, at most 16.) */
	h = oxt_hints(FI_EP_MSG);
	h->ep_attr->tx_ctx_cnt = 2;
	REFUSED("ep_attr->tx_ctx_cnt 2 on FI_EP_MSG", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->ep_attr->rx_ctx_cnt = 17;
	REFUSED("ep_attr->rx_ctx_cnt 17", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->ep_attr->auth_key_size = 8;
	REFUSED("ep_attr->auth_key_size 8", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->mr_mode = OXT_MR_BASIC | OXT_MR_SCALABLE;
	REFUSED("mr_mode FI_MR_BASIC|FI_MR_SCALABLE", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->threading = FI_THREAD_ENDPOINT + 1;
	REFUSED("threading FI_THREAD_ENDPOINT + 1 (no such value)", NULL, NULL, 0, h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->max_err_data = 4096;
	REFUSED("domain max_err_data 4096 (oxmr's error data is a reject's cm_data, at most 256 bytes)", NULL, NULL,
		0, h);
}

static void test_echoed(void)
{
	struct fi_info *h, *info;

	OXT_GROUP("hints oxmr can honour are reflected in the answer");

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->size = 64;
	h->rx_attr->size = 64;
	info = ASK_OK("tx/rx size 64", h);
	if (info) {
		EXPECT_EQ(info->tx_attr->size, 64);
		EXPECT_EQ(info->rx_attr->size, 64);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	info = ASK_OK("tx op_flags FI_DELIVERY_COMPLETE", h);
	if (info) {
		EXPECT_EQ(info->tx_attr->op_flags, FI_DELIVERY_COMPLETE);
		fi_freeinfo(info);
	}

	/* (What fi_multi_recv asks: multi-receive buffers by default.) */
	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_MSG | FI_MULTI_RECV;
	h->rx_attr->op_flags = FI_MULTI_RECV;
	info = ASK_OK("caps FI_MSG|FI_MULTI_RECV, rx op_flags FI_MULTI_RECV", h);
	if (info) {
		EXPECT_EQ(info->caps & FI_MULTI_RECV, FI_MULTI_RECV);
		EXPECT_EQ(info->rx_attr->caps & FI_MULTI_RECV, FI_MULTI_RECV);
		EXPECT_EQ(info->tx_attr->caps & FI_MULTI_RECV, 0);
		EXPECT_EQ(info->rx_attr->op_flags, FI_MULTI_RECV);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	info = ASK_OK("threading FI_THREAD_DOMAIN", h);
	if (info) {
		EXPECT_EQ(info->domain_attr->threading, FI_THREAD_DOMAIN);
		fi_freeinfo(info);
	}

	/* tx/rx caps beyond the info's caps: the answer's stay a subset of
	 * them (fi_getinfo(3)) */
	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_MSG;
	h->tx_attr->caps = FI_MSG | FI_RMA;
	h->rx_attr->caps = FI_MSG | FI_TAGGED;
	info = ASK_OK("caps FI_MSG, tx caps FI_MSG|FI_RMA, rx caps FI_MSG|FI_TAGGED", h);
	if (info) {
		EXPECT(!(info->tx_attr->caps & ~info->caps), "tx caps %#llx not a subset of caps %#llx",
		       (unsigned long long)info->tx_attr->caps, (unsigned long long)info->caps);
		EXPECT(!(info->rx_attr->caps & ~info->caps), "rx caps %#llx not a subset of caps %#llx",
		       (unsigned long long)info->rx_attr->caps, (unsigned long long)info->caps);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->av_type = FI_AV_TABLE;
	info = ASK_OK("av_type FI_AV_TABLE", h);
	if (info) {
		EXPECT_EQ(info->domain_attr->av_type, FI_AV_TABLE);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->av_type = FI_AV_MAP;
	info = ASK_OK("av_type FI_AV_MAP", h);
	if (info) {
		EXPECT_EQ(info->domain_attr->av_type, FI_AV_MAP);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	info = ASK_OK("msg_order FI_ORDER_SAS", h);
	if (info) {
		EXPECT((info->tx_attr->msg_order & FI_ORDER_SAS) != 0,
		       "tx msg_order 0x%llx lacks FI_ORDER_SAS",
		       (unsigned long long)info->tx_attr->msg_order);
		EXPECT((info->rx_attr->msg_order & FI_ORDER_SAS) != 0,
		       "rx msg_order 0x%llx lacks FI_ORDER_SAS",
		       (unsigned long long)info->rx_attr->msg_order);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->tx_attr->size = 1024;
	h->tx_attr->inject_size = 4096;
	h->tx_attr->iov_limit = 4;
	h->domain_attr->cq_data_size = 8;
	h->domain_attr->mr_key_size = 8;
	info = ASK_OK("limits exactly at oxmr's maximum", h);
	if (info) {
		EXPECT_EQ(info->tx_attr->size, 1024);
		EXPECT(info->tx_attr->inject_size >= 4096, "inject_size %zu",
		       info->tx_attr->inject_size);
		EXPECT(info->domain_attr->cq_data_size >= 8,
		       "cq_data_size %zu", info->domain_attr->cq_data_size);
		fi_freeinfo(info);
	}
}

static void test_caps(void)
{
	struct fi_info *h, *info = NULL, *i;
	int ret;

	OXT_GROUP("caps: hinted primary caps plus oxmr's secondary caps");
	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_MSG | FI_TAGGED;
	info = ASK_OK("caps FI_MSG|FI_TAGGED", h);
	if (info) {
		EXPECT_EQ(info->caps & ALL_PRIMARY, FI_MSG | FI_TAGGED);
		EXPECT_EQ(info->caps & OXMR_SECONDARY_RDM,
			  OXMR_SECONDARY_RDM);
		check_side_caps(info);
		EXPECT_EQ(info->tx_attr->caps & ALL_PRIMARY,
			  FI_MSG | FI_TAGGED);
		EXPECT_EQ(info->rx_attr->caps & ALL_PRIMARY,
			  FI_MSG | FI_TAGGED);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_MSG | FI_SEND;
	info = ASK_OK("caps FI_MSG|FI_SEND", h);
	if (info) {
		EXPECT_EQ(info->caps & ALL_PRIMARY, FI_MSG | FI_SEND);
		check_side_caps(info);
		fi_freeinfo(info);
	}

	h = oxt_hints(FI_EP_RDM);
	h->caps = FI_RMA | FI_RMA_EVENT | FI_SOURCE;
	info = ASK_OK("caps FI_RMA with secondary FI_RMA_EVENT|FI_SOURCE",
		      h);
	if (info) {
		EXPECT_EQ(info->caps & ALL_PRIMARY, FI_RMA);
		EXPECT_EQ(info->caps & (FI_RMA_EVENT | FI_SOURCE),
			  FI_RMA_EVENT | FI_SOURCE);
		check_side_caps(info);
		fi_freeinfo(info);
	}

	OXT_GROUP("caps FI_TAGGED with any ep type gives RDM and MSG infos, all tagged");
	info = NULL;
	h = oxt_hints(FI_EP_UNSPEC);
	h->caps = FI_TAGGED;
	ret = fi_getinfo(OXT_VERSION, NULL, NULL, 0, h, &info);
	fi_freeinfo(h);
	EXPECT_RC(ret, 0);
	if (ret == 0) {
		int n_msg = 0;

		for (i = info; i; i = i->next) {
			EXPECT(i->ep_attr->type == FI_EP_RDM || i->ep_attr->type == FI_EP_MSG, "ep type %d",
			       i->ep_attr->type);
			n_msg += i->ep_attr->type == FI_EP_MSG;
			EXPECT((i->caps & FI_TAGGED) != 0, "caps 0x%llx",
			       (unsigned long long)i->caps);
		}
		EXPECT(n_msg > 0, "no MSG info");
		fi_freeinfo(info);
	}

	OXT_GROUP("MSG infos: connected caps, FI_TAGGED, both wires");
	info = NULL;
	h = oxt_hints(FI_EP_MSG);
	ret = fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, h, &info);
	fi_freeinfo(h);
	EXPECT_RC(ret, 0);
	if (ret == 0 && info) {
		EXPECT_EQ(info->ep_attr->type, FI_EP_MSG);
		EXPECT((info->caps & FI_MSG) != 0, "caps 0x%llx lack FI_MSG",
		       (unsigned long long)info->caps);
		EXPECT((info->caps & FI_TAGGED) != 0, "caps 0x%llx lack FI_TAGGED",
		       (unsigned long long)info->caps);
		EXPECT((info->caps & FI_DIRECTED_RECV) == 0, "caps 0x%llx have FI_DIRECTED_RECV",
		       (unsigned long long)info->caps);
		EXPECT((info->caps & FI_LOCAL_COMM) != 0, "caps 0x%llx lack FI_LOCAL_COMM",
		       (unsigned long long)info->caps);
		if (!getenv("FI_OXMR_WIRE") || strcmp(getenv("FI_OXMR_WIRE"), "shm"))
			EXPECT((info->caps & FI_REMOTE_COMM) != 0, "caps 0x%llx lack FI_REMOTE_COMM",
			       (unsigned long long)info->caps);
		check_side_caps(info);
		fi_freeinfo(info);
	}
}

static struct fi_info *ask_mr(uint32_t version, int mr_mode, int *ret)
{
	struct fi_info *h = oxt_hints(FI_EP_RDM), *info = NULL;

	h->domain_attr->mr_mode = mr_mode;
	*ret = fi_getinfo(version, "127.0.0.1", NULL, FI_SOURCE, h, &info);
	fi_freeinfo(h);
	return *ret ? NULL : info;
}

static void test_mr_mode(void)
{
	int all = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR |
		  FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_MMU_NOTIFY |
		  FI_MR_RMA_EVENT | FI_MR_ENDPOINT | FI_MR_HMEM;
	int ret, m;
	struct fi_info *info;

	OXT_GROUP("mr_mode: a subset of the hinted bits, legacy modes in kind");

	info = ask_mr(OXT_VERSION, all, &ret);
	EXPECT_RC(ret, 0);
	if (info) {
		m = info->domain_attr->mr_mode;
		EXPECT((m & ~all) == 0,
		       "mr_mode 0x%x has bits the hints did not allow (0x%x)",
		       m, m & ~all);
		EXPECT((m & (FI_MR_RAW | FI_MR_HMEM)) == 0,
		       "mr_mode 0x%x grants FI_MR_RAW/FI_MR_HMEM", m);
		fi_freeinfo(info);
	}

	info = ask_mr(OXT_VERSION, FI_MR_LOCAL, &ret);
	EXPECT_RC(ret, 0);
	if (info) {
		m = info->domain_attr->mr_mode;
		EXPECT((m & ~FI_MR_LOCAL) == 0,
		       "hint FI_MR_LOCAL answered with mr_mode 0x%x", m);
		fi_freeinfo(info);
	}

	info = ask_mr(OXT_VERSION, OXT_MR_BASIC, &ret);
	EXPECT_RC(ret, 0);
	if (info) {
		EXPECT_EQ(info->domain_attr->mr_mode, OXT_MR_BASIC);
		fi_freeinfo(info);
	}

	info = ask_mr(OXT_VERSION, OXT_MR_SCALABLE, &ret);
	EXPECT_RC(ret, 0);
	if (info) {
		EXPECT_EQ(info->domain_attr->mr_mode, OXT_MR_SCALABLE);
		fi_freeinfo(info);
	}

	info = ask_mr(FI_VERSION(1, 4), 0, &ret);
	EXPECT_RC(ret, 0);
	if (info) {
		EXPECT_EQ(info->domain_attr->mr_mode, OXT_MR_BASIC);
		fi_freeinfo(info);
	}
}

/*
 * Peers on other hosts: FI_REMOTE_COMM (with FI_LOCAL_COMM) is offered and a
 * destination elsewhere resolves, unless FI_OXMR_WIRE=shm (this host only:
 * both get -FI_ENODATA). The destination is asked from an explicit source
 * (127.0.0.1), so the answer does not depend on this machine's routes.
 */
static void test_remote_comm(void)
{
	struct fi_info *hints, *info = NULL;
	const char *wire = getenv("FI_OXMR_WIRE");
	int shm_only = wire && strcmp(wire, "shm") == 0;
	struct sockaddr_in src = { .sin_family = AF_INET };
	const struct sockaddr_in *dest;

	OXT_GROUP(shm_only ? "FI_OXMR_WIRE=shm: FI_REMOTE_COMM and a destination elsewhere get -FI_ENODATA; a local one works"
			   : "FI_REMOTE_COMM offered with FI_LOCAL_COMM; a destination on another host resolves");
	hints = oxt_hints(FI_EP_RDM);
	hints->caps = FI_MSG | FI_TAGGED | FI_REMOTE_COMM;
	EXPECT_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", "4000", 0, hints, &info), shm_only ? -FI_ENODATA : 0);
	for (struct fi_info *i = info; i; i = i->next) {
		EXPECT((i->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM)) == (FI_LOCAL_COMM | FI_REMOTE_COMM),
		       "an answer to FI_REMOTE_COMM has caps 0x%llx", (unsigned long long)i->caps);
		EXPECT(i->domain_attr->caps & FI_REMOTE_COMM, "its domain lacks FI_REMOTE_COMM");
	}
	fi_freeinfo(info);
	info = NULL;
	hints->caps = FI_MSG;
	src.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	hints->src_addr = malloc(sizeof(src));
	memcpy(hints->src_addr, &src, sizeof(src));
	hints->src_addrlen = sizeof(src);
	hints->addr_format = FI_SOCKADDR_IN;
	/* 198.51.100.1: TEST-NET-2, never an address of a test machine. */
	EXPECT_RC(fi_getinfo(OXT_VERSION, "198.51.100.1", "4000", 0, hints, &info), shm_only ? -FI_ENODATA : 0);
	if (info && !shm_only) {
		dest = info->dest_addr;
		EXPECT(dest && info->dest_addrlen == sizeof(*dest) && dest->sin_family == AF_INET &&
			       dest->sin_addr.s_addr == htonl(0xc6336401) && dest->sin_port == htons(4000),
		       "the answer's dest_addr is not 198.51.100.1:4000");
	}
	fi_freeinfo(info);
	info = NULL;
	free(hints->src_addr);
	hints->src_addr = NULL;
	hints->src_addrlen = 0;
	EXPECT_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", "4000", 0, hints, &info), 0);
	if (info) {
		EXPECT(!!(info->caps & FI_REMOTE_COMM) == !shm_only, "FI_REMOTE_COMM %s offered",
		       shm_only ? "is" : "is not");
		EXPECT(info->caps & FI_LOCAL_COMM, "an answer lacks FI_LOCAL_COMM");
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
}

/* libfabric's auth_key: a job key (docs/security.md). */
static void test_auth_key(void)
{
	static uint8_t key[32] = "getinfo.c: a job key of 32 bytes";
	struct fi_info *h, *info = NULL;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;

	OXT_GROUP("auth_key: a job key of 16 bytes or more is offered back, a shorter one refused; fi_domain and fi_endpoint take it");
	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->auth_key = malloc(8);
	memcpy(h->domain_attr->auth_key, key, 8);
	h->domain_attr->auth_key_size = 8;
	EXPECT_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, h, &info), -FI_ENODATA);
	fi_freeinfo(h);

	h = oxt_hints(FI_EP_RDM);
	h->domain_attr->auth_key = malloc(sizeof key);
	memcpy(h->domain_attr->auth_key, key, sizeof key);
	h->domain_attr->auth_key_size = sizeof key;
	info = NULL;
	REQUIRE_RC(fi_getinfo(OXT_VERSION, "127.0.0.1", NULL, FI_SOURCE, h, &info), 0);
	fi_freeinfo(h);
	EXPECT(info->domain_attr->auth_key_size == sizeof key && info->domain_attr->auth_key &&
		       !memcmp(info->domain_attr->auth_key, key, sizeof key),
	       "the answer carries the key given (size %zu)", info->domain_attr->auth_key_size);
	REQUIRE_RC(fi_fabric(info->fabric_attr, &fab, NULL), 0);
	EXPECT_RC(fi_domain(fab, info, &dom, NULL), 0);
	EXPECT_RC(fi_endpoint(dom, info, &ep, NULL), 0);
	EXPECT_RC(fi_close(&ep->fid), 0);
	EXPECT_RC(fi_close(&dom->fid), 0);
	/* A key cut short after fi_getinfo: fi_domain refuses it. */
	info->domain_attr->auth_key_size = 8;
	EXPECT_RC(fi_domain(fab, info, &dom, NULL), -FI_EINVAL);
	info->domain_attr->auth_key_size = sizeof key;
	EXPECT_RC(fi_close(&fab->fid), 0);
	fi_freeinfo(info);
}

/* `getinfo --domain`: open a domain with this process's environment; exit 0
 * if fi_domain succeeds, 2 if it says -FI_EINVAL, 1 otherwise. */
static int domain_main(void)
{
	struct fi_info *info = oxt_getinfo_local(FI_EP_RDM);
	struct fid_fabric *fab;
	struct fid_domain *dom;
	int rc;

	if (fi_fabric(info->fabric_attr, &fab, NULL))
		return 1;
	rc = fi_domain(fab, info, &dom, NULL);
	if (rc == 0)
		fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	return rc == 0 ? 0 : rc == -FI_EINVAL ? 2 : 1;
}

/* Run `getinfo --domain` with `var` (FI_OXMR_AUTH_KEY or _FILE; NULL: both)
 * set to `v` (NULL: unset): its exit status. */
static int domain_with(const char *self, const char *var, const char *v)
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		unsetenv("FI_OXMR_AUTH_KEY");
		unsetenv("FI_OXMR_AUTH_KEY_FILE");
		if (v && var)
			setenv(var, v, 1);
		if (v && !var) {
			setenv("FI_OXMR_AUTH_KEY", v, 1);
			setenv("FI_OXMR_AUTH_KEY_FILE", v, 1);
		}
		execl(self, self, "--domain", (char *)NULL);
		_exit(1);
	}
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_env_key(const char *self)
{
	char path[] = "/tmp/oxmr-getinfo-key-XXXXXX";
	int fd;

	OXT_GROUP("FI_OXMR_AUTH_KEY / _FILE: a usable key opens domains; a short one, a file others may read, or both set: fi_domain -FI_EINVAL");
	EXPECT(domain_with(self, "FI_OXMR_AUTH_KEY", NULL) == 0, "no key: fi_domain opens");
	EXPECT(domain_with(self, "FI_OXMR_AUTH_KEY", "getinfo.c: a good job key") == 0, "a key of 25 bytes: opens");
	EXPECT(domain_with(self, "FI_OXMR_AUTH_KEY", "short key") == 2, "a key of 9 bytes: -FI_EINVAL");
	EXPECT(domain_with(self, NULL, "getinfo.c: a good job key") == 2, "both variables set: -FI_EINVAL");
	fd = mkstemp(path);
	REQUIRE(fd >= 0, "mkstemp");
	REQUIRE(write(fd, "getinfo.c: a job key in a file\n", 31) == 31, "write the key file");
	close(fd);
	REQUIRE(chmod(path, 0600) == 0, "chmod 600");
	EXPECT(domain_with(self, "FI_OXMR_AUTH_KEY_FILE", path) == 0, "a private key file: opens");
	REQUIRE(chmod(path, 0644) == 0, "chmod 644");
	EXPECT(domain_with(self, "FI_OXMR_AUTH_KEY_FILE", path) == 2, "a key file others may read: -FI_EINVAL");
	unlink(path);
	EXPECT(domain_with(self, "FI_OXMR_AUTH_KEY_FILE", path) == 2, "a key file that is not there: -FI_EINVAL");
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--domain"))
		return domain_main();
	oxt_init(argv[0]);
	test_remote_comm();
	test_no_hints();
	test_addresses();
	test_refusals();
	test_echoed();
	test_caps();
	test_mr_mode();
	test_auth_key();
	test_env_key(argv[0]);
	return oxt_done();
}
