/*
 * mrc_allreduce: a ring all-reduce of floats over the OCP MRC API (mrc.h) and libibverbs, run by
 * every rank on its own testbed host, checking the reduced values.
 *
 *   for h in h0 h1 h2 h3; do
 *     mrc-testbed exec $h -- mrc_allreduce -n $h -H h0,h1,h2,h3 &
 *   done; wait
 *
 * The ranks are the hosts of -H in that order, in a ring: each rank writes to the next one and
 * receives from the one before, over two QPs (one connected to each neighbour). They swap their
 * QP details as applications for real MRC NICs do, over TCP/IPv4 on the management network,
 * naming each other by host name (resolved through /etc/hosts): each rank listens on TCP port
 * PORT, connects to its right neighbour and accepts its left one. On each connection both ends
 * send one line, "MRC_ALLREDUCE NAME QPN GID ADDR RKEY" (the host's name, its QP towards that
 * neighbour, the GID of index GID_INDEX, its receive buffer's address and rkey), then "rts"
 * once both their QPs are in RTS; a rank writes to its right neighbour only after that one's
 * "rts".
 *
 * One all-reduce is 2(n-1) steps, each a WRITE_IMM of one chunk (COUNT / n floats) into the
 * right neighbour's buffer, in a slot of its own per step; the immediate says the iteration and
 * the step. Reduce-scatter: at step s rank r sends chunk (r - s) mod n, and when the immediate
 * of step s arrives from the left it adds the received chunk (r - s - 1) mod n to its own and
 * sends that at step s + 1. All-gather: at step n - 1 + g it sends chunk (r + 1 - g) mod n and
 * copies the received chunk (r - g) mod n into place. Completions drive the ring: a chunk goes
 * out when the previous step's immediate has arrived. The immediates may complete in any
 * order: a step is handled once its immediate and those of every step before it have come.
 * Every chunk is copied into a send slot of its step before it is written, so a
 * retransmission reads what was sent.
 *
 * The next iteration reuses the slots without a handshake. A rank writes step s of iteration
 * i + 1 into its right neighbour's receive slot s only after that neighbour has handled step s
 * of iteration i. Follow the ring back from the write: it waited for step s - 1 from the left,
 * which waited for step s - 2 from its left, and so on back to a rank that began iteration
 * i + 1 and so had received all of iteration i. Each step of iteration i it received was sent
 * by a rank that had handled the step before, which puts the right neighbour at step n - 2 + s
 * of iteration i or later (for s >= n - 1, in iteration i + 1 already); steps are handled in
 * order. A send slot is written again only after its WRITE_IMM completed: an iteration ends
 * when all its sends completed.
 *
 * Rank r starts with value (r + 1) + (i mod 13) at element i, so every element must end as
 * n(n + 1)/2 + n (i mod 13): each iteration starts again from these values and checks them.
 *
 * Options: -n NAME (this rank's host), -H HOSTS (comma-separated, the ring), -p PORT (TCP,
 * default 18516), -d DEVICE (default: the first), -x GID_INDEX (default 3), -c COUNT (floats
 * per rank, a multiple of the ranks, default 262144), -i ITERS (default 5), -t SECONDS (give
 * up after, default 200).
 *
 * At the end each rank sends "done" to its right neighbour and keeps its QPs until its left
 * neighbour's "done" has come (that one's last WRITE_IMM completes when this rank acknowledges
 * it).
 *
 * Each iteration prints "NAME: allreduce SIZE B: TIME us algbw A GB/s busbw B GB/s" (busbw =
 * algbw x 2(n-1)/n, as nccl-tests); the last line is "NAME: done, reduced values checked".
 */
#define _GNU_SOURCE
#define EXAMPLE "mrc_allreduce"
#include "mrc_example.h"

#define MAX_RANKS 64

/* A neighbour as its line on our connection tells it */
struct neighbour {
	uint32_t qpn; /* its QP towards us */
	union ibv_gid gid;
	uint64_t addr; /* its receive buffer */
	uint32_t rkey;
	int sock; /* our TCP connection */
};

struct rank {
	const char *name;
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
	union ibv_gid gid;
	double deadline;
	uint64_t early; /* steps of the next iteration whose immediate came before this one ended */
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

/* One all-reduce of k->data over the ring (iteration `iter` goes in the immediates). The
 * immediates may complete in any order (a message completes when its last packet is placed,
 * and the packets of a transport that sprays take different paths): each step has a receive
 * slot of its own, so a step is handled when it and every step before it have arrived. */
static void allreduce(struct rank *k, uint32_t iter)
{
	int n = k->n, r = k->me, steps = 2 * (n - 1), sent = 1, received = 0, completed = 0;
	uint64_t arrived = k->early; /* this iteration's steps whose immediate has come */
	struct ibv_wc wc;

	CHECK(steps <= 64, "%s: %d ranks: at most 33", k->name, n);
	k->early = 0;
	send_chunk(k, 0, mod(r, n), iter << 16);
	while (received < steps || completed < sent) {
		if (poll_one(k, k->scq, &wc))
			completed++;
		if (received < steps && !(arrived >> received & 1)) {
			if (!poll_one(k, k->rcq, &wc))
				continue;
			uint32_t imm = be32toh(wc.imm_data), it = imm >> 16, step = imm & 0xffff;

			CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "%s: completion opcode %d",
			      k->name, wc.opcode);
			CHECK((it == iter || it == iter + 1) && step < (uint32_t)steps &&
				      !((it == iter ? arrived : k->early) >> step & 1) &&
				      wc.byte_len == k->chunk * sizeof(float),
			      "%s: waiting for step %d of iteration %u: immediate %#x, %u bytes",
			      k->name, received, iter, imm, wc.byte_len);
			post_recv(k);
			if (it == iter)
				arrived |= (uint64_t)1 << step;
			else
				k->early |= (uint64_t)1 << step;
			continue;
		}
		if (received == steps)
			continue;
		int s = received;
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

/* Our line to the neighbour at the other end of `nb->sock` (`qp`: our QP towards it) */
static void tell(struct rank *k, struct neighbour *nb, struct mrc_qp *qp)
{
	char hex[40];
	uint32_t mine;

	CHECK(mrc_get_qpn(qp, &mine) == 0, "mrc_get_qpn");
	gid_to_hex(&k->gid, hex);
	send_line(nb->sock, "MRC_ALLREDUCE %s %06x %s %016llx %08x\n", k->name, mine, hex,
		  (unsigned long long)(uintptr_t)k->rbuf, k->rmr->rkey);
}

/* The line of the neighbour at the other end of `nb->sock`, who must be `host` (both ends
 * tell before they hear, so that no rank waits for one that waits in turn) */
static void hear(struct rank *k, struct neighbour *nb, const char *host)
{
	char line[256], name[128], hex[40];
	unsigned int qpn, rkey;
	unsigned long long addr;

	recv_line(nb->sock, line, sizeof(line), k->deadline);
	CHECK(sscanf(line, "MRC_ALLREDUCE %127s %x %39s %llx %x", name, &qpn, hex, &addr,
		     &rkey) == 5 && strlen(hex) == 32, "%s's details: '%s'", host, line);
	CHECK(strcmp(name, host) == 0, "%s: the neighbour on this connection is %s, not %s",
	      k->name, name, host);
	nb->qpn = qpn;
	hex_to_gid(hex, &nb->gid);
	nb->addr = addr;
	nb->rkey = rkey;
}

/* The neighbour at the other end of `nb->sock` says `word` */
static void expect_line(struct rank *k, struct neighbour *nb, const char *host, const char *word)
{
	char line[64];

	recv_line(nb->sock, line, sizeof(line), k->deadline);
	CHECK(strcmp(line, word) == 0, "%s: %s said '%s', not '%s'", k->name, host, line, word);
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
	int iters = 5, port = 18516, gid_index = 3, op;
	double timeout = 200;
	struct rank k = {.count = 262144, .me = -1};

	while ((op = getopt(argc, argv, "n:H:p:d:x:c:i:t:")) != -1) {
		switch (op) {
		case 'n': k.name = optarg; break;
		case 'H': list = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'd': device = optarg; break;
		case 'x': gid_index = atoi(optarg); break;
		case 'c': k.count = strtoull(optarg, NULL, 0); break;
		case 'i': iters = atoi(optarg); break;
		case 't': timeout = atof(optarg); break;
		default:
			fprintf(stderr, "usage: %s -n NAME -H HOST,HOST,... [-p PORT] [-d DEVICE] "
				"[-x GID_INDEX] [-c COUNT] [-i ITERS] [-t SECONDS]\n", argv[0]);
			return 2;
		}
	}
	for (char *save = NULL, *h = list ? strtok_r(list, ",", &save) : NULL; h && k.n < MAX_RANKS;
	     h = strtok_r(NULL, ",", &save)) {
		if (k.name && strcmp(h, k.name) == 0)
			k.me = k.n;
		hosts[k.n++] = h;
	}
	if (!k.name || k.me < 0 || k.n < 2 || iters < 1 || k.count % k.n || k.count == 0 ||
	    port <= 0 || port > 65535) {
		fprintf(stderr, "mrc_allreduce: -n NAME is required, one of -H (at least two "
			"hosts); -c a multiple of the ranks, -i >= 1, -p a TCP port\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	k.deadline = now() + timeout;
	k.chunk = k.count / k.n;
	int n = k.n, steps = 2 * (n - 1);
	const char *left_host = hosts[(k.me + n - 1) % n], *right_host = hosts[(k.me + 1) % n];

	/* device, its GID, PD, memory */
	k.ibv = open_mrc_device(device);
	query_gid(k.ibv, 1, gid_index, &k.gid);
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

	/* the exchange over TCP: connect to the right neighbour by name, accept the left one */
	char addr_text[INET_ADDRSTRLEN] = "";
	int listener = tcp_listen(port);

	k.rnb.sock = tcp_connect(right_host, port, k.deadline, addr_text);
	k.lnb.sock = tcp_accept(listener, k.deadline);
	close(listener);
	tell(&k, &k.rnb, k.right);
	tell(&k, &k.lnb, k.left);
	hear(&k, &k.rnb, right_host);
	hear(&k, &k.lnb, left_host);
	connect_qp(k.left, k.lnb.qpn, &k.lnb.gid);
	connect_qp(k.right, k.rnb.qpn, &k.rnb.gid);
	send_line(k.rnb.sock, "rts\n");
	send_line(k.lnb.sock, "rts\n");
	/* the right neighbour's QP from us is in RTR: our writes will be taken */
	expect_line(&k, &k.rnb, right_host, "rts");
	expect_line(&k, &k.lnb, left_host, "rts");
	printf("%s: rank %d of %d, writes to %s (%s, QP %#x), receives from %s\n", k.name, k.me,
	       n, right_host, addr_text, k.rnb.qpn, left_host);

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
	send_line(k.rnb.sock, "done\n");
	expect_line(&k, &k.lnb, left_host, "done");

	CHECK(mrc_destroy_qp(k.left) == 0 && mrc_destroy_qp(k.right) == 0, "mrc_destroy_qp");
	close_all(k.mrc, k.scq, k.rcq, k.smr, k.rmr, k.pd, k.ibv);
	close(k.rnb.sock);
	close(k.lnb.sock);
	free(k.data);
	return 0;
}
