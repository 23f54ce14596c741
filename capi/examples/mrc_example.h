/*
 * What the OCP MRC API examples share: a fatal check, the clock, opening the verbs device that
 * supports MRC and reading its GID, registered buffers, the MRC context with its CQs, the QP's
 * state changes (RESET -> INIT with the host's profiles, INIT -> RTR -> RTS towards a peer QP),
 * and the two ways ends meet to swap their QP details: TCP on the management network, peers
 * named by host name (as applications for real MRC NICs do: mrc_bw, mrc_allreduce), and
 * rendezvous files in a folder every testbed host can read (mrc_pingpong).
 *
 * An example defines EXAMPLE (its name, the prefix of its error lines) before including this
 * header; every function is static inline, so each example stays one translation unit and
 * need not use them all.
 */
#ifndef MRC_EXAMPLE_H
#define MRC_EXAMPLE_H

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mrc.h"

#ifndef EXAMPLE
#error "define EXAMPLE (the program's name) before including mrc_example.h"
#endif

#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, EXAMPLE ": " __VA_ARGS__);              \
			fprintf(stderr, " (%s)\n", strerror(errno));             \
			exit(1);                                                 \
		}                                                                \
	} while (0)

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The verbs device named `name` (NULL: the first), opened; it must support MRC. */
static inline struct ibv_context *open_mrc_device(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);

	CHECK(list && n > 0, "no verbs device (run inside a testbed host: mrc-testbed exec)");
	struct ibv_device *dev = list[0];

	for (int i = 0; name && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			dev = list[i];
	struct ibv_context *ibv = ibv_open_device(dev);

	CHECK(ibv, "ibv_open_device %s", ibv_get_device_name(dev));
	ibv_free_device_list(list);
	struct mrc_device_attr dattr;
	int supported = 0;

	CHECK(mrc_query_device(ibv, &dattr, &supported) == 0 && supported,
	      "the device does not support MRC");
	return ibv;
}

/* The GID at `index` of port `port`, after checking that the port's table (gid_tbl_len) has
 * it: index 3 is what applications for RoCEv2 NICs use by default */
static inline void query_gid(struct ibv_context *ibv, int port, int index, union ibv_gid *gid)
{
	struct ibv_port_attr pattr;

	CHECK(ibv_query_port(ibv, (uint8_t)port, &pattr) == 0, "ibv_query_port %d", port);
	CHECK(index >= 0 && index < pattr.gid_tbl_len, "GID index %d: port %d has %d GIDs", index,
	      port, pattr.gid_tbl_len);
	CHECK(ibv_query_gid(ibv, (uint8_t)port, index, gid) == 0, "ibv_query_gid index %d", index);
}

/* A send and a receive buffer of `size` bytes, page-aligned, registered in `pd` (the receive
 * one zeroed and remotely writable) */
static inline void open_buffers(struct ibv_pd *pd, size_t size, void **sbuf, void **rbuf,
				struct ibv_mr **smr, struct ibv_mr **rmr)
{
	size_t pages = (size + 4095) / 4096 * 4096;

	*sbuf = aligned_alloc(4096, pages);
	*rbuf = aligned_alloc(4096, pages);
	CHECK(*sbuf && *rbuf, "buffers of %zu bytes", size);
	memset(*rbuf, 0, size);
	*smr = ibv_reg_mr(pd, *sbuf, size, IBV_ACCESS_LOCAL_WRITE);
	*rmr = ibv_reg_mr(pd, *rbuf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(*smr && *rmr, "ibv_reg_mr");
}

/* The MRC context of `ibv`, with a send and a receive CQ */
static inline struct mrc_context *open_mrc_context(struct ibv_context *ibv, int send_cqe,
						   int recv_cqe, struct mrc_cq **scq,
						   struct mrc_cq **rcq)
{
	struct mrc_context_attr cattr = {.mrc_api_version_used = MRC_API_CURRENT_VERSION};
	struct mrc_context *mrc = mrc_create_context(ibv, &cattr);

	CHECK(mrc, "mrc_create_context");
	*scq = mrc_create_cq(mrc, send_cqe, NULL, NULL, 0);
	*rcq = mrc_create_cq(mrc, recv_cqe, NULL, NULL, 0);
	CHECK(*scq && *rcq, "mrc_create_cq");
	return mrc;
}

/* Undo open_mrc_context, open_buffers (the buffers freed too), the PD and open_mrc_device;
 * the QPs must be destroyed first */
static inline void close_all(struct mrc_context *mrc, struct mrc_cq *scq, struct mrc_cq *rcq,
			     struct ibv_mr *smr, struct ibv_mr *rmr, struct ibv_pd *pd,
			     struct ibv_context *ibv)
{
	void *sbuf = smr->addr, *rbuf = rmr->addr;

	CHECK(mrc_destroy_cq(scq) == 0 && mrc_destroy_cq(rcq) == 0, "mrc_destroy_cq");
	CHECK(mrc_destroy_context(mrc) == 0, "mrc_destroy_context");
	CHECK(ibv_dereg_mr(smr) == 0 && ibv_dereg_mr(rmr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ibv) == 0, "ibv_close_device");
	free(sbuf);
	free(rbuf);
}

/* RESET -> INIT: the host's own EV and CC profiles (0), no hint */
static inline void init_qp(struct mrc_qp *qp)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {.qp_hint = NULL};
	int rc;

	rc = mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma,
			   MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID | MRC_QP_HINT);
	errno = rc;
	CHECK(rc == 0, "RESET -> INIT");
}

/* INIT -> RTR -> RTS towards the peer's QP `qpn` at `gid` */
static inline void connect_qp(struct mrc_qp *qp, uint32_t qpn, const union ibv_gid *gid)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_RTR, .dest_qp_num = qpn};
	struct mrc_qp_attr ma = {.wimm.max_wimm_dest = 64};
	int rc;

	va.ah_attr.is_global = 1;
	va.ah_attr.grh.dgid = *gid;
	rc = mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
			   &ma, MRC_QP_MAX_WIMM_DEST);
	errno = rc;
	CHECK(rc == 0, "INIT -> RTR");

	/* ACK timeout 1.024 us x 2^7 = 131 us: tens of round trips of a fabric whose RTT is a few
	 * microseconds (the testbed honours it in real-fabric time); retries without limit */
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	ma = (struct mrc_qp_attr){.wimm.max_wimm = 64, .timeout = 7,
				  .retry = {.linear_cnt = 7, .exp_cnt = 25}};
	rc = mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_SQ_PSN, &ma,
			   MRC_QP_MAX_WIMM | MRC_QP_TIMEOUT | MRC_QP_RETRY_CNT);
	errno = rc;
	CHECK(rc == 0, "RTR -> RTS");
}

/* -- the exchange over TCP (the management network) ------------------------------------------ */

/* Wait until `fd` is readable; give up at `deadline` */
static inline void wait_readable(int fd, double deadline, const char *what)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		double left = deadline - now();

		CHECK(left > 0, "timed out waiting for %s", what);
		int n = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);

		if (n > 0)
			return;
		CHECK(n == 0 || errno == EINTR, "poll");
	}
}

/* One line, formatted, to the peer at the other end of `fd` */
static inline void send_line(int fd, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	CHECK(n > 0 && (size_t)n < sizeof(line) && write(fd, line, n) == n, "TCP send");
}

/* The peer's next line (without its newline; at most `len` - 1 bytes), by `deadline` */
static inline void recv_line(int fd, char *line, size_t len, double deadline)
{
	size_t n = 0;

	while (n + 1 < len) {
		wait_readable(fd, deadline, "the peer's line");
		ssize_t r = read(fd, line + n, 1);

		CHECK(r == 1, "TCP receive (the peer closed the connection)");
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
}

/* A TCP socket listening on `port` on every IPv4 address of the host */
static inline int tcp_listen(int port)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				   .sin_addr.s_addr = htonl(INADDR_ANY)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "bind TCP port %d", port);
	CHECK(listen(fd, 8) == 0, "listen");
	return fd;
}

/* The next connection to the listening socket `fd`, by `deadline` */
static inline int tcp_accept(int fd, double deadline)
{
	int one = 1, conn;

	wait_readable(fd, deadline, "a connection");
	conn = accept(fd, NULL, NULL);
	CHECK(conn >= 0, "accept");
	setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return conn;
}

/* A TCP connection to `host` (a host name, resolved through /etc/hosts, or an IPv4 address)
 * on `port`, tried again until the peer listens or `deadline` passes; the address it resolved
 * to in `addr_text` (at least INET_ADDRSTRLEN bytes) */
static inline int tcp_connect(const char *host, int port, double deadline, char *addr_text)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	char service[16];
	int one = 1, rc;

	snprintf(service, sizeof(service), "%d", port);
	rc = getaddrinfo(host, service, &hints, &res);
	if (rc) {
		fprintf(stderr, EXAMPLE ": cannot resolve %s: %s\n", host, gai_strerror(rc));
		exit(1);
	}
	inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, addr_text,
		  INET_ADDRSTRLEN);
	for (;;) { /* the peer may not listen yet */
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		CHECK(fd >= 0, "socket");
		if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
			freeaddrinfo(res);
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			return fd;
		}
		close(fd);
		CHECK(now() < deadline, "cannot connect to %s (%s) port %d", host, addr_text, port);
		usleep(100000);
	}
}

/* -- rendezvous files (a folder every testbed host can read) ---------------------------------- */

/* DIR/NAME.SUFFIX holding `text`, written whole (through a temporary file and a rename) */
static inline void write_file(const char *dir, const char *name, const char *suffix,
			      const char *text)
{
	char path[512], tmp[520];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.%s", dir, name, suffix);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	CHECK(f, "cannot write %s", tmp);
	fputs(text, f);
	fclose(f);
	CHECK(rename(tmp, path) == 0, "rename %s", tmp);
}

/* Wait until DIR/NAME.SUFFIX exists (give up at `deadline`); with `line`, read its first line
 * (at most `size` bytes) once it has one. */
static inline void wait_file(const char *dir, const char *name, const char *suffix,
			     double deadline, char *line, size_t size)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s.%s", dir, name, suffix);
	for (;;) {
		FILE *f = fopen(path, "r");

		if (f) {
			int ok = !line || fgets(line, (int)size, f) != NULL;

			fclose(f);
			if (ok)
				return;
		}
		CHECK(now() < deadline, "%s never came (no %s)", name, path);
		usleep(10000);
	}
}

/* The next completion of `cq` (polled every 50 us; a completion in error or `deadline` passed
 * ends the program) */
static inline struct ibv_wc next_wc(struct mrc_cq *cq, double deadline)
{
	struct ibv_wc wc;

	for (;;) {
		int n = mrc_poll_cq(cq, 1, &wc);

		CHECK(n >= 0, "mrc_poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, EXAMPLE ": completion of wr %llu: %s\n",
					(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
				exit(1);
			}
			return wc;
		}
		CHECK(now() < deadline, "timed out waiting for a completion");
		usleep(50);
	}
}

/* A GID as 32 hex digits (`hex` holds at least 33 bytes), and back */
static inline void gid_to_hex(const union ibv_gid *gid, char *hex)
{
	for (int i = 0; i < 16; i++)
		sprintf(hex + 2 * i, "%02x", gid->raw[i]);
}

static inline void hex_to_gid(const char *hex, union ibv_gid *gid)
{
	for (int i = 0; i < 16; i++) {
		unsigned int b;

		sscanf(hex + 2 * i, "%2x", &b);
		gid->raw[i] = (uint8_t)b;
	}
}

#endif /* MRC_EXAMPLE_H */
