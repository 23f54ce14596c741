/*
 * Long work request chains through lib_mrc.so, run by tests/ocp/test_ocp_limits.py against a
 * provider served in the test process (MRC_TESTBED_OCP_SOCKET): a chain of 13000 WRITEs (two
 * SGEs each, some 1.4 MB as one request) on a QP of max_send_wr 16384 is posted whole; a
 * chain past the send queue's room fails with ENOMEM at the first WR that does not fit
 * (bad_wr), the WRs before it posted; the context stays usable.
 *
 * usage: wr_chain PEER_GID_HEX   (32 hex digits: the peer host's plane address)
 * Prints "ok NAME" or "FAIL NAME: why" per check; exits 1 when any failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrc.h"

#define QUEUE 16384
#define CHAIN 13000
#define MORE 4000

static int failures;

static void check(const char *name, int cond, const char *why)
{
	if (cond) {
		printf("ok %s\n", name);
	} else {
		printf("FAIL %s: %s (errno %d %s)\n", name, why, errno, strerror(errno));
		failures++;
	}
	fflush(stdout);
}

static void die(const char *what)
{
	printf("FAIL setup: %s (errno %d %s)\n", what, errno, strerror(errno));
	exit(1);
}

static struct ibv_send_wr *chain(int n, struct ibv_sge *sges, uint64_t base)
{
	struct ibv_send_wr *wrs = calloc((size_t)n, sizeof(*wrs));

	if (!wrs)
		die("calloc");
	for (int i = 0; i < n; i++) {
		wrs[i].wr_id = base + (uint64_t)i;
		wrs[i].opcode = IBV_WR_RDMA_WRITE;
		wrs[i].sg_list = sges;
		wrs[i].num_sge = 2;
		wrs[i].wr.rdma.remote_addr = 0x7f0000000000ULL + (uint64_t)i * 64;
		wrs[i].wr.rdma.rkey = 0xfedcba98;
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	return wrs;
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	union ibv_gid gid;

	if (argc != 2 || strlen(argv[1]) != 32)
		die("usage: wr_chain PEER_GID_HEX");
	for (int i = 0; i < 16; i++)
		if (sscanf(argv[1] + 2 * i, "%2hhx", &gid.raw[i]) != 1)
			die("bad GID");
	if (!list || !list[0])
		die("no device");
	struct ibv_context *ibv = ibv_open_device(list[0]);
	struct ibv_pd *pd = ibv ? ibv_alloc_pd(ibv) : NULL;
	struct mrc_context *mrc = ibv ? mrc_create_context(ibv, NULL) : NULL;
	static char buf[4096];

	if (!pd || !mrc)
		die("open the device");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct mrc_cq *cq = mrc_create_cq(mrc, 1024, NULL, NULL, 0);

	if (!mr || !cq)
		die("memory region and CQ");
	struct mrc_qp_init_attr attr = {
		.send_cq = cq, .recv_cq = cq, .pd = pd,
		.cap = {.max_send_wr = QUEUE, .max_recv_wr = 1, .max_send_sge = 2, .max_recv_sge = 1},
	};
	struct mrc_qp *qp = mrc_create_qp(mrc, &attr);
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {0};

	if (!qp || mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma, 0))
		die("QP to INIT");
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .dest_qp_num = 0x4321};
	va.ah_attr.is_global = 1;
	va.ah_attr.grh.dgid = gid;
	if (mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &ma, 0))
		die("QP to RTR");
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	if (mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma, 0))
		die("QP to RTS");

	struct ibv_sge sges[2] = {
		{.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey},
		{.addr = (uintptr_t)buf + 64, .length = 8, .lkey = mr->lkey},
	};
	struct ibv_send_wr *first = chain(CHAIN, sges, 0xdead000000000000ULL);
	struct ibv_send_wr *bad = NULL;
	int rc = mrc_post_send(qp, first, &bad);

	check("long_chain_posted", rc == 0 && bad == NULL, "a chain of 13000 WRs was refused");

	/* the queue has QUEUE - CHAIN places left: the chain fails at the first WR past them */
	struct ibv_send_wr *more = chain(MORE, sges, 0xbeef000000000000ULL);

	bad = NULL;
	rc = mrc_post_send(qp, more, &bad);
	check("past_the_queue_enomem", rc == ENOMEM, "expected ENOMEM");
	check("bad_wr_is_the_first_that_does_not_fit", bad == &more[QUEUE - CHAIN],
	      "bad_wr is not the first WR past the send queue");

	struct ibv_device_attr dev;

	check("context_still_usable", ibv_query_device(ibv, &dev) == 0 && dev.max_qp_wr == QUEUE,
	      "the context no longer answers");
	free(first);
	free(more);
	printf(failures ? "FAILED\n" : "ALL OK\n");
	return failures ? 1 : 0;
}
