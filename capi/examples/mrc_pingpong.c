/*
 * mrc_pingpong: WRITE_IMM ping-pong and a bandwidth sweep between two testbed hosts, written
 * against the OCP MRC API (mrc.h) and libibverbs, checking every byte that arrives.
 *
 *   mrc-testbed exec h0 -- mrc_pingpong -n h0 -p h2 -r /tmp/rv &
 *   mrc-testbed exec h2 -- mrc_pingpong -n h2 -p h0 -r /tmp/rv
 *
 * The two ends meet through files in a rendezvous folder both can read (testbed hosts share
 * the file system): each writes its QP number, GID, receive buffer address and rkey to
 * DIR/NAME.qp and reads the peer's, then DIR/NAME.ready once its QP is in RTS and waits for the
 * peer's. The end whose name sorts first starts the ping-pong.
 *
 * Options: -n NAME (this end), -p PEER, -r DIR, -d DEVICE (default: the first), -i ITERS
 * (ping-pong round trips, default 100), -s MAX (largest sweep size in bytes, default 1 MiB),
 * -v VOLUME (bytes each sweep size moves, at least one message; default MAX), -t SECONDS
 * (give up after, default 120).
 *
 * Every sweep size prints one line, "sweep SIZE B x COUNT: RATE MB/s", RATE counted from the
 * first WRITE to the peer's answer that it checked every byte.
 */
#define _GNU_SOURCE
#define EXAMPLE "mrc_pingpong"
#include "mrc_example.h"

struct peer_info {
	uint32_t qpn;
	union ibv_gid gid;
	uint64_t addr;
	uint32_t rkey;
};

struct end {
	struct ibv_context *ibv;
	struct ibv_pd *pd;
	struct mrc_context *mrc;
	struct mrc_cq *scq, *rcq; /* sends and receives complete independently */
	struct mrc_qp *qp;
	struct ibv_mr *smr, *rmr;
	uint8_t *sbuf, *rbuf;
	size_t size;
	struct peer_info peer;
	double deadline;
	int recvs_posted;
};

/* the byte at offset i of message (tag) from side (who) */
static uint8_t pattern(uint32_t tag, int who, size_t i)
{
	uint32_t x = tag * 2654435761u + (uint32_t)who * 40503u + (uint32_t)i * 2246822519u;

	return (uint8_t)(x ^ (x >> 13) ^ (x >> 24));
}

static void fill(uint8_t *buf, size_t n, uint32_t tag, int who)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pattern(tag, who, i);
}

static void verify(const uint8_t *buf, size_t n, uint32_t tag, int who, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pattern(tag, who, i)) {
			fprintf(stderr, "mrc_pingpong: %s: byte %zu of %zu is %#x, expected %#x\n",
				what, i, n, buf[i], pattern(tag, who, i));
			exit(1);
		}
}

static void post_recv(struct end *e)
{
	struct ibv_recv_wr wr = {.wr_id = 0x7000 + (uint64_t)e->recvs_posted}, *bad;

	CHECK(mrc_post_recv(e->qp, &wr, &bad) == 0, "mrc_post_recv");
	e->recvs_posted++;
}

static void post_write(struct end *e, size_t offset, size_t len, int imm, uint32_t imm_value,
		       uint64_t wr_id)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)e->sbuf + offset, .length = (uint32_t)len, .lkey = e->smr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
		.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm_value),
	}, *bad;
	int rc;

	wr.wr.rdma.remote_addr = e->peer.addr + offset;
	wr.wr.rdma.rkey = e->peer.rkey;
	rc = mrc_post_send(e->qp, &wr, &bad);
	errno = rc;
	CHECK(rc == 0, "mrc_post_send of %zu bytes at offset %zu", len, offset);
}

/* Wait for one completion of the given opcode (sends on the send CQ, in posting order). */
static struct ibv_wc wait_wc(struct end *e, enum ibv_wc_opcode opcode)
{
	struct ibv_wc wc = next_wc(opcode == IBV_WC_RECV_RDMA_WITH_IMM ? e->rcq : e->scq,
				   e->deadline);

	if (wc.opcode != opcode) {
		fprintf(stderr, "mrc_pingpong: unexpected completion opcode %d\n", wc.opcode);
		exit(1);
	}
	return wc;
}

static void rendezvous(struct end *e, const char *dir, const char *name, const char *peer)
{
	char text[256], line[256], hex[40];
	unsigned long long addr;
	union ibv_gid gid;
	uint32_t qpn;

	CHECK(ibv_query_gid(e->ibv, 1, 0, &gid) == 0, "ibv_query_gid");
	CHECK(mrc_get_qpn(e->qp, &qpn) == 0, "mrc_get_qpn");
	gid_to_hex(&gid, hex);
	snprintf(text, sizeof(text), "%u %s %llu %u\n", qpn, hex,
		 (unsigned long long)(uintptr_t)e->rbuf, e->rmr->rkey);
	write_file(dir, name, "qp", text);
	wait_file(dir, peer, "qp", e->deadline, line, sizeof(line));
	CHECK(sscanf(line, "%u %32s %llu %u", &e->peer.qpn, hex, &addr, &e->peer.rkey) == 4,
	      "%s's rendezvous file: %s", peer, line);
	hex_to_gid(hex, &e->peer.gid);
	e->peer.addr = addr;
}

/* After RTS: say so in DIR/NAME.ready and wait for the peer's. A WRITE that reaches a QP not
 * yet in RTR is dropped (as on any RDMA NIC) and only its ACK timeout would send it again. */
static void barrier(struct end *e, const char *dir, const char *name, const char *peer)
{
	write_file(dir, name, "ready", "");
	wait_file(dir, peer, "ready", e->deadline, NULL, 0);
}

int main(int argc, char **argv)
{
	const char *name = NULL, *peer = NULL, *dir = NULL, *device = NULL;
	size_t max = 1 << 20, volume = 0;
	int iters = 100, op;
	double timeout = 120;
	struct end e = {0};

	while ((op = getopt(argc, argv, "n:p:r:d:i:s:v:t:")) != -1) {
		switch (op) {
		case 'n': name = optarg; break;
		case 'p': peer = optarg; break;
		case 'r': dir = optarg; break;
		case 'd': device = optarg; break;
		case 'i': iters = atoi(optarg); break;
		case 's': max = strtoull(optarg, NULL, 0); break;
		case 'v': volume = strtoull(optarg, NULL, 0); break;
		case 't': timeout = atof(optarg); break;
		default:
			fprintf(stderr, "usage: %s -n NAME -p PEER -r DIR [-d DEVICE] [-i ITERS] "
				"[-s MAX_BYTES] [-v VOLUME_BYTES] [-t SECONDS]\n", argv[0]);
			return 2;
		}
	}
	if (!name || !peer || !dir || iters < 1 || max < 4096) {
		fprintf(stderr, "mrc_pingpong: -n NAME, -p PEER and -r DIR are required "
			"(-i >= 1, -s >= 4096)\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* a line per result, also into a pipe */
	if (volume == 0 || volume > max)
		volume = max;
	e.deadline = now() + timeout;
	int first = strcmp(name, peer) < 0;

	/* device, PD, memory */
	e.ibv = open_mrc_device(device);
	e.pd = ibv_alloc_pd(e.ibv);
	CHECK(e.pd, "ibv_alloc_pd");
	e.size = max;
	open_buffers(e.pd, max, (void **)&e.sbuf, (void **)&e.rbuf, &e.smr, &e.rmr);

	/* MRC context, CQ, QP */
	e.mrc = open_mrc_context(e.ibv, 1024, 64, &e.scq, &e.rcq);
	struct mrc_qp_init_attr qattr = {
		.send_cq = e.scq, .recv_cq = e.rcq, .sq_sig_all = 1, .pd = e.pd,
		.cap = {.max_send_wr = 256, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1},
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	};
	e.qp = mrc_create_qp(e.mrc, &qattr);
	CHECK(e.qp, "mrc_create_qp");
	init_qp(e.qp);
	for (int i = 0; i < 4; i++) /* receives before the peer can write */
		post_recv(&e);
	rendezvous(&e, dir, name, peer);
	connect_qp(e.qp, e.peer.qpn, &e.peer.gid);
	barrier(&e, dir, name, peer);
	uint32_t qpn;

	CHECK(mrc_get_qpn(e.qp, &qpn) == 0, "mrc_get_qpn");
	printf("%s: QP %#x connected to %s QP %#x\n", name, qpn, peer, e.peer.qpn);

	/* ping-pong: 64-byte WRITE_IMMs, the immediate carries the round number */
	double start = now();

	for (int i = 0; i < iters; i++) {
		struct ibv_wc wc;
		size_t len = 64;

		if (first) {
			fill(e.sbuf, len, (uint32_t)i, 0);
			post_write(&e, 0, len, 1, (uint32_t)i, (uint64_t)i);
			wait_wc(&e, IBV_WC_RDMA_WRITE);
		}
		wc = wait_wc(&e, IBV_WC_RECV_RDMA_WITH_IMM);
		post_recv(&e);
		CHECK(be32toh(wc.imm_data) == (uint32_t)i && wc.byte_len == len,
		      "round %d: immediate %u, %u bytes", i, be32toh(wc.imm_data), wc.byte_len);
		verify(e.rbuf, len, (uint32_t)i, first ? 1 : 0, "ping-pong");
		if (!first) {
			fill(e.sbuf, len, (uint32_t)i, 1);
			post_write(&e, 0, len, 1, (uint32_t)i, (uint64_t)i);
			wait_wc(&e, IBV_WC_RDMA_WRITE);
		}
	}
	double elapsed = now() - start;

	printf("%s: ping-pong %d round trips, %.1f us per round trip\n", name, iters,
	       elapsed / iters * 1e6);

	/* bandwidth sweep: the first end writes; every size fills the peer's buffer with WRITEs,
	 * waits for their completions (each placed), then a WRITE_IMM names the size; the peer
	 * checks every byte and answers with a 64-byte WRITE_IMM */
	for (size_t size = 4096; size <= max; size *= 2) {
		size_t count = volume / size ? volume / size : 1;
		uint32_t tag = (uint32_t)size;

		if (first) {
			fill(e.sbuf, count * size, tag, 0);
			start = now();
			size_t posted = 0, done = 0;

			while (done < count) {
				while (posted < count && posted - done < 128) {
					post_write(&e, posted * size, size, 0, 0, posted);
					posted++;
				}
				wait_wc(&e, IBV_WC_RDMA_WRITE);
				done++;
			}
			post_write(&e, 0, 64, 1, tag, 1 << 30);
			wait_wc(&e, IBV_WC_RDMA_WRITE);
			struct ibv_wc wc = wait_wc(&e, IBV_WC_RECV_RDMA_WITH_IMM);

			post_recv(&e);
			elapsed = now() - start;
			CHECK(be32toh(wc.imm_data) == tag, "sweep %zu: answer %u", size,
			      be32toh(wc.imm_data));
			verify(e.rbuf, 64, tag, 1, "sweep answer");
			printf("%s: sweep %8zu B x %4zu: %8.2f MB/s (every byte checked by %s)\n", name,
			       size, count, count * size / elapsed / 1e6, peer);
		} else {
			struct ibv_wc wc = wait_wc(&e, IBV_WC_RECV_RDMA_WITH_IMM);

			post_recv(&e);
			CHECK(be32toh(wc.imm_data) == tag, "sweep %zu: immediate %u", size,
			      be32toh(wc.imm_data));
			/* the WRITE_IMM rewrote the first 64 bytes from the same pattern */
			verify(e.rbuf, count * size, tag, 0, "sweep");
			fill(e.sbuf, 64, tag, 1);
			post_write(&e, 0, 64, 1, tag, 1 << 30);
			wait_wc(&e, IBV_WC_RDMA_WRITE);
		}
	}
	printf("%s: done, every byte checked\n", name);

	/* clean up */
	CHECK(mrc_destroy_qp(e.qp) == 0, "mrc_destroy_qp");
	close_all(e.mrc, e.scq, e.rcq, e.smr, e.rmr, e.pd, e.ibv);
	return 0;
}
