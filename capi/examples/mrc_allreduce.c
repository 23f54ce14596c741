/*
 * mrc_allreduce: a ring all-reduce of floats over the OCP MRC API (mrc.h) and libibverbs, run by
 * every rank on its own testbed host, checking the reduced values.
 *
 *   for h in h0 h1 h2 h3; do
 *     mrc-testbed exec $h -- mrc_allreduce -n $h -H h0,h1,h2,h3 -r /tmp/rv &
 *   done; wait
 *
 * The ranks are the hosts of -H in that order, in a ring: each rank writes to the next one and
 * receives from the one before, over two QPs (one connected to each neighbour). They meet
 * through files in a rendezvous folder every host can read: each writes DIR/NAME.qp (the QP
 * numbers towards its left and right neighbours, its GID, receive buffer address and rkey),
 * reads its neighbours', and writes DIR/NAME.ready once both QPs are in RTS; it writes to its
 * right neighbour only once that one is ready.
 *
 * One all-reduce is 2(n-1) steps, each a WRITE_IMM of one chunk (COUNT / n floats) into the
 * right neighbour's buffer, in a slot of its own per step; the immediate says the iteration and
 * the step. Reduce-scatter: at step s rank r sends chunk (r - s) mod n, and when the immediate
 * of step s arrives from the left it adds the received chunk (r - s - 1) mod n to its own and
 * sends that at step s + 1. All-gather: at step n - 1 + g it sends chunk (r + 1 - g) mod n and
 * copies the received chunk (r - g) mod n into place. Completions drive the ring: a chunk goes
 * out when the previous step's immediate has arrived. Every chunk is copied into a send slot
 * of its step before it is written, so a retransmission reads what was sent.
 *
 * Rank r starts with value (r + 1) + (i mod 13) at element i, so every element must end as
 * n(n + 1)/2 + n (i mod 13): each iteration starts again from these values and checks them.
 *
 * Options: -n NAME (this rank), -H HOSTS (comma-separated, the ring), -r DIR, -d DEVICE
 * (default: the first), -c COUNT (floats per rank, a multiple of the ranks, default 262144),
 * -i ITERS (default 5), -t SECONDS (give up after, default 200).
 *
 * At the end each rank writes DIR/NAME.done and keeps its QPs until its left neighbour's is
 * there (that one's last WRITE_IMM completes when this rank acknowledges it).
 *
 * Each iteration prints "NAME: allreduce SIZE B: TIME us algbw A GB/s busbw B GB/s" (busbw =
 * algbw x 2(n-1)/n, as nccl-tests); the last line is "NAME: done, reduced values checked".
 */
#define _GNU_SOURCE
#define EXAMPLE "mrc_allreduce"
#include "mrc_example.h"

#define MAX_RANKS 64

struct neighbour {
	uint32_t qpn_left, qpn_right; /* its QPs towards its own left and right neighbours */
	union ibv_gid gid;
	uint64_t addr;
	uint32_t rkey;
};

struct rank {
	const char *name, *dir;
	int me, n;
	struct ibv_context *ibv;
	struct ibv_pd *pd;
	struct mrc_context *mrc;
	struct mrc_cq *scq, *rcq;
	struct mrc_qp *left, *right; /* receives from the left, writes to the right */
	float *data, *sbuf, *rbuf; /* the vector; one send and one receive slot per step */
	struct ibv_mr *smr, *rmr;
	size_t count, chunk; /* floats per rank and per chunk */
	struct neighbour lnb, rnb;
	double deadline;
};

static void post_recv(struct rank *k)
{
	struct ibv_recv_wr wr = {.wr_id = 1}, *bad;

	CHECK(mrc_post_recv(k->left, &wr, &bad) == 0, "mrc_post_recv");
}

/* WRITE_IMM of chunk `index` of the vector, through send slot `step`, into the right
 * neighbour's receive slot `step` */
static void send_chunk(struct rank *k, int step, size_t index, uint32_t imm)
{
	float *slot = k->sbuf + (size_t)step * k->chunk;

	memcpy(slot, k->data + index * k->chunk, k->chunk * sizeof(float));
	struct ibv_sge sge = {
		.addr = (uintptr_t)slot, .length = (uint32_t)(k->chunk * sizeof(float)),
		.lkey = k->smr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = (uint64_t)step, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(imm),
	}, *bad;
	int rc;

	wr.wr.rdma.remote_addr = k->rnb.addr + (uint64_t)step * k->chunk * sizeof(float);
	wr.wr.rdma.rkey = k->rnb.rkey;
	rc = mrc_post_send(k->right, &wr, &bad);
	errno = rc;
	CHECK(rc == 0, "mrc_post_send of step %d", step);
}

/* One completion of a CQ, or 0 when none is there yet; a failed one ends the program. */
static int poll_one(struct rank *k, struct mrc_cq *cq, struct ibv_wc *wc)
{
	int n = mrc_poll_cq(cq, 1, wc);

	CHECK(n >= 0, "mrc_poll_cq");
	if (n == 1 && wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "mrc_allreduce: %s: completion of wr %llu: %s\n", k->name,
			(unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status));
		exit(1);
	}
	CHECK(now() < k->deadline, "%s: timed out in the ring", k->name);
	return n;
}

static size_t mod(long a, int n)
{
	return (size_t)(((a % n) + n) % n);
}

/* One all-reduce of k->data over the ring (iteration `iter` goes in the immediates). */
static void allreduce(struct rank *k, uint32_t iter)
{
	int n = k->n, r = k->me, steps = 2 * (n - 1), sent = 1, received = 0, completed = 0;
	struct ibv_wc wc;

	send_chunk(k, 0, mod(r, n), iter << 16);
	while (received < steps || completed < sent) {
		if (poll_one(k, k->scq, &wc))
			completed++;
		if (received == steps || !poll_one(k, k->rcq, &wc))
			continue;
		int s = received;

		CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "%s: completion opcode %d", k->name,
		      wc.opcode);
		CHECK(be32toh(wc.imm_data) == (iter << 16 | (uint32_t)s) &&
			      wc.byte_len == k->chunk * sizeof(float),
		      "%s: step %d of iteration %u: immediate %#x, %u bytes", k->name, s, iter,
		      be32toh(wc.imm_data), wc.byte_len);
		post_recv(k);
		const float *in = k->rbuf + (size_t)s * k->chunk;

		if (s < n - 1) { /* reduce-scatter: add the left's partial sum to ours */
			float *mine = k->data + mod(r - s - 1, n) * k->chunk;

			for (size_t i = 0; i < k->chunk; i++)
				mine[i] += in[i];
		} else { /* all-gather: a reduced chunk, in place */
			memcpy(k->data + mod(r - (s - (n - 1)), n) * k->chunk, in,
			       k->chunk * sizeof(float));
		}
		received++;
		if (s + 1 < steps) { /* the next chunk goes when this step's immediate arrived */
			int g = s + 1 - (n - 1);
			size_t index = s + 1 < n - 1 ? mod(r - s - 1, n) : mod(r + 1 - g, n);

			send_chunk(k, s + 1, index, iter << 16 | (uint32_t)(s + 1));
			sent++;
		}
	}
}

static void read_neighbour(struct rank *k, const char *host, struct neighbour *nb)
{
	char line[256], hex[40];
	unsigned long long addr;

	wait_file(k->dir, host, "qp", k->deadline, line, sizeof(line));
	CHECK(sscanf(line, "%u %u %32s %llu %u", &nb->qpn_left, &nb->qpn_right, hex, &addr,
		     &nb->rkey) == 5, "%s's rendezvous file: %s", host, line);
	hex_to_gid(hex, &nb->gid);
	nb->addr = addr;
}

static struct mrc_qp *make_qp(struct rank *k)
{
	struct mrc_qp_init_attr qattr = {
		.send_cq = k->scq, .recv_cq = k->rcq, .sq_sig_all = 1, .pd = k->pd,
		.cap = {.max_send_wr = 256, .max_recv_wr = 256, .max_send_sge = 1, .max_recv_sge = 1},
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	};
	struct mrc_qp *qp = mrc_create_qp(k->mrc, &qattr);

	CHECK(qp, "mrc_create_qp");
	init_qp(qp);
	return qp;
}

static void fill(struct rank *k)
{
	for (size_t i = 0; i < k->count; i++)
		k->data[i] = (float)(k->me + 1) + (float)(i % 13);
}

static void check(struct rank *k, uint32_t iter)
{
	int n = k->n;

	for (size_t i = 0; i < k->count; i++) {
		float want = (float)(n * (n + 1) / 2) + (float)n * (float)(i % 13);

		if (k->data[i] != want) {
			fprintf(stderr, "mrc_allreduce: %s: iteration %u: element %zu is %g, "
				"expected %g\n", k->name, iter, i, k->data[i], want);
			exit(1);
		}
	}
}

int main(int argc, char **argv)
{
	const char *device = NULL, *hosts[MAX_RANKS];
	char *list = NULL;
	int iters = 5, op;
	double timeout = 200;
	struct rank k = {.count = 262144, .me = -1};

	while ((op = getopt(argc, argv, "n:H:r:d:c:i:t:")) != -1) {
		switch (op) {
		case 'n': k.name = optarg; break;
		case 'H': list = optarg; break;
		case 'r': k.dir = optarg; break;
		case 'd': device = optarg; break;
		case 'c': k.count = strtoull(optarg, NULL, 0); break;
		case 'i': iters = atoi(optarg); break;
		case 't': timeout = atof(optarg); break;
		default:
			fprintf(stderr, "usage: %s -n NAME -H HOST,HOST,... -r DIR [-d DEVICE] "
				"[-c COUNT] [-i ITERS] [-t SECONDS]\n", argv[0]);
			return 2;
		}
	}
	for (char *save = NULL, *h = list ? strtok_r(list, ",", &save) : NULL; h && k.n < MAX_RANKS;
	     h = strtok_r(NULL, ",", &save)) {
		if (k.name && strcmp(h, k.name) == 0)
			k.me = k.n;
		hosts[k.n++] = h;
	}
	if (!k.name || !k.dir || k.me < 0 || k.n < 2 || iters < 1 || k.count % k.n ||
	    k.count == 0) {
		fprintf(stderr, "mrc_allreduce: -n NAME (one of -H, at least two hosts) and -r DIR "
			"are required; -c a multiple of the ranks, -i >= 1\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	k.deadline = now() + timeout;
	k.chunk = k.count / k.n;
	int n = k.n, steps = 2 * (n - 1);
	const char *left_host = hosts[(k.me + n - 1) % n], *right_host = hosts[(k.me + 1) % n];

	/* device, PD, memory */
	k.ibv = open_mrc_device(device);
	k.pd = ibv_alloc_pd(k.ibv);
	CHECK(k.pd, "ibv_alloc_pd");
	size_t slots = (size_t)steps * k.chunk * sizeof(float);

	k.data = malloc(k.count * sizeof(float));
	CHECK(k.data, "a vector of %zu floats", k.count);
	open_buffers(k.pd, slots, (void **)&k.sbuf, (void **)&k.rbuf, &k.smr, &k.rmr);

	/* MRC context, CQs, a QP per neighbour */
	k.mrc = open_mrc_context(k.ibv, 1024, 1024, &k.scq, &k.rcq);
	k.left = make_qp(&k);
	k.right = make_qp(&k);
	for (int i = 0; i < steps; i++) /* receives before the left neighbour can write */
		post_recv(&k);

	/* rendezvous: our QPs, GID and receive buffer; then the neighbours' */
	union ibv_gid gid;
	uint32_t qpn_left, qpn_right;
	char text[256], hex[33];

	CHECK(ibv_query_gid(k.ibv, 1, 0, &gid) == 0, "ibv_query_gid");
	CHECK(mrc_get_qpn(k.left, &qpn_left) == 0 && mrc_get_qpn(k.right, &qpn_right) == 0,
	      "mrc_get_qpn");
	gid_to_hex(&gid, hex);
	snprintf(text, sizeof(text), "%u %u %s %llu %u\n", qpn_left, qpn_right, hex,
		 (unsigned long long)(uintptr_t)k.rbuf, k.rmr->rkey);
	write_file(k.dir, k.name, "qp", text);
	read_neighbour(&k, left_host, &k.lnb);
	read_neighbour(&k, right_host, &k.rnb);
	connect_qp(k.left, k.lnb.qpn_right, &k.lnb.gid);
	connect_qp(k.right, k.rnb.qpn_left, &k.rnb.gid);
	write_file(k.dir, k.name, "ready", "");
	/* the right neighbour's QP from us is in RTR: our writes will be taken */
	wait_file(k.dir, right_host, "ready", k.deadline, NULL, 0);
	printf("%s: rank %d of %d, writes to %s (QP %#x -> %#x), receives from %s (QP %#x)\n",
	       k.name, k.me, n, right_host, qpn_right, k.rnb.qpn_left, left_host, qpn_left);

	double bus = 2.0 * (n - 1) / n, size = (double)(k.count * sizeof(float));

	for (int it = 0; it < iters; it++) {
		fill(&k);
		double start = now();

		allreduce(&k, (uint32_t)it);
		double took = now() - start;

		check(&k, (uint32_t)it);
		printf("%s: allreduce %zu B: %.1f us algbw %.4f GB/s busbw %.4f GB/s\n", k.name,
		       k.count * sizeof(float), took * 1e6, size / took / 1e9,
		       size / took / 1e9 * bus);
	}
	printf("%s: done, reduced values checked\n", k.name);
	/* the left neighbour's last WRITE_IMM completes when we acknowledge it: keep our QPs
	 * until it says it is done */
	write_file(k.dir, k.name, "done", "");
	wait_file(k.dir, left_host, "done", k.deadline, NULL, 0);

	CHECK(mrc_destroy_qp(k.left) == 0 && mrc_destroy_qp(k.right) == 0, "mrc_destroy_qp");
	close_all(k.mrc, k.scq, k.rcq, k.smr, k.rmr, k.pd, k.ibv);
	free(k.data);
	return 0;
}
