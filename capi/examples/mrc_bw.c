/*
 * mrc_bw: an RDMA WRITE bandwidth benchmark written the way applications for MRC NICs are
 * written (a perftest-style server and client), checking every byte that arrives.
 *
 *   mrc-testbed exec h2 -- mrc_bw &            # the server
 *   mrc-testbed exec h0 -- mrc_bw h2           # the client names the server by host name
 *
 * The two ends exchange their QP numbers, PSNs, rkeys, buffer addresses and GIDs over TCP/IPv4
 * (the management network: the server's name resolves through /etc/hosts), use GID index 3 as
 * a RoCEv2 NIC's applications do, move the QP to INIT without EV or CC profile ids (the
 * device's defaults), set the verbs path MTU at RTR and the verbs timeout and retry counts at
 * RTS. The client sweeps sizes from 1 byte to 64 MiB, doubling: each size is ITERS WRITEs
 * (fewer for large sizes: at least one, VOLUME bytes at most beyond that), in rounds that fit
 * both ends' buffers, each message with a pattern of its own; after every round the server
 * checks every byte of it and answers over TCP before the next round starts. Only the WRITEs
 * are timed (from the round's first post to its last completion).
 *
 * Results, one line a size, in perftest's columns: #bytes, #iterations, BW peak[MB/sec] (the
 * best eighth of the size's messages, by their completions), BW average[MB/sec] and
 * MsgRate[Mpps]; MB is 2^20 bytes, as perftest counts.
 *
 * Options: -p PORT (TCP, default 18515), -d DEVICE (default: the first), -i IB_PORT (default 1),
 * -x GID_INDEX (default 3), -m MAX (largest size, default 64 MiB), -n ITERS (default 1000),
 * -v VOLUME (bytes a size moves at most once it has one message, default 16 MiB), -T TIMEOUT
 * (verbs ACK timeout exponent, 4.096 us x 2^T, default 14), -r RETRY (verbs retry count,
 * default 7), -t SECONDS (give up after, default 600).
 */
#define _GNU_SOURCE
#define EXAMPLE "mrc_bw"
#include "mrc_example.h"

#define MIB (1024.0 * 1024.0)
#define IN_FLIGHT 128 /* WRITEs posted and not yet completed */

struct dest {
	uint32_t qpn, psn, rkey;
	uint64_t addr, size;
	union ibv_gid gid;
};

struct bw {
	struct ibv_context *ibv;
	struct ibv_pd *pd;
	struct mrc_context *mrc;
	struct mrc_cq *scq, *rcq;
	struct mrc_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t size;
	int sock;
	int ib_port, gid_index;
	struct dest me, peer;
	double deadline;
};

/* the byte at offset i of message m of size s */
static uint8_t pattern(size_t s, size_t m, size_t i)
{
	uint32_t x = (uint32_t)s * 2654435761u + (uint32_t)m * 40503u + (uint32_t)i * 2246822519u;

	return (uint8_t)(x ^ (x >> 13) ^ (x >> 24));
}

/* -- the TCP exchange ---------------------------------------------------------------------- */

static void exchange(struct bw *b)
{
	char line[256], gid[33];
	unsigned int qpn, psn, rkey;
	unsigned long long addr, size;

	gid_to_hex(&b->me.gid, gid);
	send_line(b->sock, "MRC_BW %06x %06x %08x %016llx %llu %s\n", b->me.qpn, b->me.psn,
		  b->me.rkey, (unsigned long long)b->me.addr, (unsigned long long)b->me.size, gid);
	recv_line(b->sock, line, sizeof(line), b->deadline);
	CHECK(sscanf(line, "MRC_BW %x %x %x %llx %llu %32s", &qpn, &psn, &rkey, &addr, &size,
		     gid) == 6 && strlen(gid) == 32, "the peer's details: '%s'", line);
	b->peer = (struct dest){.qpn = qpn, .psn = psn, .rkey = rkey, .addr = addr, .size = size};
	hex_to_gid(gid, &b->peer.gid);
}

/* -- the QP --------------------------------------------------------------------------------- */

static void modify(struct bw *b, struct ibv_qp_attr *va, int mask, const char *what)
{
	int rc = mrc_modify_qp(b->qp, va, mask, NULL, 0);

	errno = rc;
	CHECK(rc == 0, "%s", what);
}

/* RESET -> INIT -> RTR -> RTS as verbs applications do it: no MRC attribute at all */
static void verbs_connect(struct bw *b, int timeout, int retry)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				 .port_num = (uint8_t)b->ib_port,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};

	modify(b, &va, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
	       "RESET -> INIT");
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
				  .dest_qp_num = b->peer.qpn, .rq_psn = b->peer.psn,
				  .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
	va.ah_attr.is_global = 1;
	va.ah_attr.grh.dgid = b->peer.gid;
	va.ah_attr.grh.sgid_index = (uint8_t)b->gid_index;
	va.ah_attr.grh.hop_limit = 64;
	va.ah_attr.port_num = (uint8_t)b->ib_port;
	modify(b, &va, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "INIT -> RTR");
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = (uint8_t)timeout,
				  .retry_cnt = (uint8_t)retry, .rnr_retry = 7,
				  .sq_psn = b->me.psn, .max_rd_atomic = 1};
	modify(b, &va, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, "RTR -> RTS");
}

static void post_write(struct bw *b, size_t offset, size_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)b->buf + offset, .length = (uint32_t)len,
			      .lkey = b->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	int rc;

	wr.wr.rdma.remote_addr = b->peer.addr + offset;
	wr.wr.rdma.rkey = b->peer.rkey;
	rc = mrc_post_send(b->qp, &wr, &bad);
	errno = rc;
	CHECK(rc == 0, "mrc_post_send of %zu bytes", len);
}

/* -- the sweep ------------------------------------------------------------------------------ */

/* one size on the client: its rounds, each checked by the server; BW peak and average. A
 * round is written from this end's buffer into the server's at the same offsets, so it fits
 * the smaller of the two (the ends may be given different -m) */
static void client_size(struct bw *b, size_t size, size_t count, double *peak, double *avg)
{
	size_t room = b->size < b->peer.size ? b->size : b->peer.size;
	size_t per_round = room / size, window = count / 8 ? count / 8 : 1;
	double *done_at = malloc((count + 1) * sizeof(double)), busy = 0;
	char line[64];

	CHECK(done_at, "memory for %zu timestamps", count);
	*peak = 0;
	for (size_t first = 0; first < count; first += per_round) {
		size_t n = count - first < per_round ? count - first : per_round;
		size_t posted = 0, completed = 0;

		for (size_t m = 0; m < n; m++)
			for (size_t i = 0; i < size; i++)
				b->buf[m * size + i] = pattern(size, first + m, i);
		double start = now();

		if (first == 0)
			done_at[0] = start;
		while (completed < n) {
			while (posted < n && posted - completed < IN_FLIGHT) {
				post_write(b, posted * size, size, first + posted);
				posted++;
			}
			next_wc(b->scq, b->deadline);
			done_at[first + ++completed] = now();
		}
		busy += done_at[first + n] - start;
		/* the server checks every byte of the round before the next one */
		send_line(b->sock, "check %zu %zu %zu\n", size, first, n);
		recv_line(b->sock, line, sizeof(line), b->deadline);
		CHECK(strcmp(line, "ok") == 0, "size %zu: the server says '%s'", size, line);
	}
	/* windows of messages i .. i + window - 1 within one round (done_at[i] is the completion
	 * before message i: a round's start for i = 0 only, the previous round's end otherwise) */
	for (size_t i = 0; i + window <= count; i++) {
		double dt = done_at[i + window] - done_at[i];

		if ((i == 0 || i % per_round) && i / per_round == (i + window - 1) / per_round &&
		    dt > 0 && window * size / dt > *peak)
			*peak = window * size / dt;
	}
	*avg = count * size / busy;
	if (*peak < *avg)
		*peak = *avg;
	free(done_at);
}

static void server(struct bw *b)
{
	char line[128];
	size_t sizes = 0, bytes = 0;

	for (;;) {
		size_t size, first, n;

		recv_line(b->sock, line, sizeof(line), b->deadline);
		if (strcmp(line, "done") == 0)
			break;
		CHECK(sscanf(line, "check %zu %zu %zu", &size, &first, &n) == 3 &&
		      size * n <= b->size, "a request '%s'", line);
		for (size_t m = 0; m < n; m++)
			for (size_t i = 0; i < size; i++)
				if (b->buf[m * size + i] != pattern(size, first + m, i)) {
					send_line(b->sock, "bad byte %zu of message %zu\n", i, first + m);
					fprintf(stderr, "mrc_bw: size %zu message %zu byte %zu is %#x, "
						"expected %#x\n", size, first + m, i,
						b->buf[m * size + i], pattern(size, first + m, i));
					exit(1);
				}
		memset(b->buf, 0, size * n); /* a lost WRITE of the next round shows */
		if (first == 0)
			sizes++;
		bytes += size * n;
		send_line(b->sock, "ok\n");
	}
	printf(" %zu sizes, %zu bytes received, every byte checked\n", sizes, bytes);
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [-p PORT] [-d DEVICE] [-i IB_PORT] [-x GID_INDEX] [-m MAX] "
		"[-n ITERS] [-v VOLUME] [-T TIMEOUT] [-r RETRY] [-t SECONDS] [SERVER]\n", argv0);
	exit(2);
}

static void print_gid(const char *what, const struct dest *d)
{
	char text[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, d->gid.raw, text, sizeof(text));
	printf(" %s address: QPN %#06x PSN %#06x RKey %#08x VAddr %#016llx GID %s\n", what,
	       d->qpn, d->psn, d->rkey, (unsigned long long)d->addr, text);
}

int main(int argc, char **argv)
{
	const char *device = NULL, *name = NULL;
	size_t max = 64u << 20, iters = 1000, volume = 16u << 20;
	int port = 18515, timeout = 14, retry = 7, op;
	double seconds = 600;
	struct bw b = {.ib_port = 1, .gid_index = 3};

	while ((op = getopt(argc, argv, "p:d:i:x:m:n:v:T:r:t:h")) != -1) {
		switch (op) {
		case 'p': port = atoi(optarg); break;
		case 'd': device = optarg; break;
		case 'i': b.ib_port = atoi(optarg); break;
		case 'x': b.gid_index = atoi(optarg); break;
		case 'm': max = strtoull(optarg, NULL, 0); break;
		case 'n': iters = strtoull(optarg, NULL, 0); break;
		case 'v': volume = strtoull(optarg, NULL, 0); break;
		case 'T': timeout = atoi(optarg); break;
		case 'r': retry = atoi(optarg); break;
		case 't': seconds = atof(optarg); break;
		default: usage(argv[0]);
		}
	}
	if (optind < argc)
		name = argv[optind++];
	if (optind < argc || max < 1 || iters < 1 || timeout < 0 || timeout > 31 || retry < 0 ||
	    retry > 7)
		usage(argv[0]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	b.deadline = now() + seconds;

	/* the device, its GID, memory */
	b.ibv = open_mrc_device(device);

	query_gid(b.ibv, b.ib_port, b.gid_index, &b.me.gid);
	b.pd = ibv_alloc_pd(b.ibv);
	CHECK(b.pd, "ibv_alloc_pd");
	b.size = max;
	b.buf = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
	CHECK(b.buf, "a buffer of %zu bytes", max);
	memset(b.buf, 0, max);
	b.mr = ibv_reg_mr(b.pd, b.buf, max, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(b.mr, "ibv_reg_mr");

	/* MRC context, CQs, QP */
	struct mrc_context_attr cattr = {.mrc_api_version_used = MRC_API_CURRENT_VERSION};

	b.mrc = mrc_create_context(b.ibv, &cattr);
	CHECK(b.mrc, "mrc_create_context");
	b.scq = mrc_create_cq(b.mrc, 2 * IN_FLIGHT, NULL, NULL, 0);
	b.rcq = mrc_create_cq(b.mrc, 16, NULL, NULL, 0);
	CHECK(b.scq && b.rcq, "mrc_create_cq");
	struct mrc_qp_init_attr qattr = {
		.send_cq = b.scq, .recv_cq = b.rcq, .pd = b.pd,
		.cap = {.max_send_wr = 2 * IN_FLIGHT, .max_recv_wr = 1, .max_send_sge = 1,
			.max_recv_sge = 1},
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
	};
	b.qp = mrc_create_qp(b.mrc, &qattr);
	CHECK(b.qp, "mrc_create_qp");
	CHECK(mrc_get_qpn(b.qp, &b.me.qpn) == 0, "mrc_get_qpn");
	srand48(getpid() * now());
	b.me.psn = (uint32_t)lrand48() & 0xffffff;
	b.me.rkey = b.mr->rkey;
	b.me.addr = (uintptr_t)b.buf;
	b.me.size = max;

	/* the exchange over TCP, then both QPs to RTS before the first WRITE */
	char addr_text[INET_ADDRSTRLEN] = "";
	char line[64];

	printf("---------------------------------------------------------------------------------------\n");
	printf("                    RDMA_Write BW Test (MRC)\n");
	printf(" Device         : %s\t\tIB port        : %d\n",
	       ibv_get_device_name(b.ibv->device), b.ib_port);
	printf(" GID index      : %d\t\tTimeout        : %d\tRetry count : %d\n", b.gid_index,
	       timeout, retry);
	if (name) {
		b.sock = tcp_connect(name, port, b.deadline, addr_text);
	} else {
		int listener = tcp_listen(port);

		printf(" Waiting for a client on TCP port %d\n", port);
		b.sock = tcp_accept(listener, b.deadline);
		close(listener);
	}
	if (name)
		printf(" Server         : %s (%s, TCP port %d)\n", name, addr_text, port);
	exchange(&b);
	verbs_connect(&b, timeout, retry);
	send_line(b.sock, "rts\n");
	recv_line(b.sock, line, sizeof(line), b.deadline);
	CHECK(strcmp(line, "rts") == 0, "the peer's QP: '%s'", line);
	print_gid("local", &b.me);
	print_gid("remote", &b.peer);
	printf("---------------------------------------------------------------------------------------\n");
	if (!name) {
		server(&b);
	} else {
		if (max > b.peer.size)
			max = b.peer.size;
		printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   "
		       "MsgRate[Mpps]\n");
		for (size_t size = 1; size <= max; size *= 2) {
			size_t count = volume / size < iters ? volume / size : iters;
			double peak, avg;

			if (count < 1)
				count = 1;
			client_size(&b, size, count, &peak, &avg);
			printf(" %-10zu %-14zu %-18.2f %-20.2f %.6f\n", size, count, peak / MIB,
			       avg / MIB, avg / size / 1e6);
		}
		send_line(b.sock, "done\n");
		printf("---------------------------------------------------------------------------------------\n");
		printf(" every byte checked by the server\n");
	}

	/* clean up */
	CHECK(mrc_destroy_qp(b.qp) == 0, "mrc_destroy_qp");
	CHECK(mrc_destroy_cq(b.scq) == 0 && mrc_destroy_cq(b.rcq) == 0, "mrc_destroy_cq");
	CHECK(mrc_destroy_context(b.mrc) == 0, "mrc_destroy_context");
	CHECK(ibv_dereg_mr(b.mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(b.pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(b.ibv) == 0, "ibv_close_device");
	close(b.sock);
	free(b.buf);
	return 0;
}
