/*
 * Threads sharing one device's connections to the agent, run under ThreadSanitizer by
 * tests/ocp/test_capi_sanitizers.py: one process opens the devices of h0 and h1 (found in
 * MRC_TESTBED_RUN_DIR) and connects a QP of each to the other. On h0, three threads at once poll
 * the send CQ, query the port and the QP, and post and poll WRITE_WITH_IMMs to h1, every
 * request on the one session connection of h0's context; on h1 a thread waits for completion
 * events on a channel while another keeps receives posted. ThreadSanitizer reports any access
 * to the shared connection, the held work requests or the lists outside their locks.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check, then "ALL OK" when none failed.
 */
#define _GNU_SOURCE
#include <unistd.h>

#include "checks.h"

#define WRITES 40

static struct host h0 = {.name = "h0"}, h1 = {.name = "h1"};
static int received; /* WRITE_WITH_IMMs h1 completed (the event thread's) */

static int post_recv(struct host *h, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)h->buf, .length = 64, .lkey = h->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;

	return mrc_post_recv(h->qp, &wr, &bad);
}

/* h0: WRITE_WITH_IMMs to h1, one at a time, each polled from the send CQ */
static void *writer(void *arg)
{
	int ok = 0;

	(void)arg;
	for (int i = 0; i < WRITES; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)h0.buf + 4096, .length = 1024,
				      .lkey = h0.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1000 + (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .imm_data = htobe32((uint32_t)i)};
		struct ibv_send_wr *bad;
		struct ibv_wc wc;
		int n = 0;

		wr.wr.rdma.remote_addr = (uintptr_t)h1.buf + 4096;
		wr.wr.rdma.rkey = h1.mr->rkey;
		if (mrc_post_send(h0.qp, &wr, &bad))
			break;
		for (int tries = 0; tries < 20000 && n == 0; tries++) {
			n = mrc_poll_cq(h0.scq, 1, &wc);
			if (n == 0)
				usleep(500);
		}
		if (n != 1 || wc.status != IBV_WC_SUCCESS)
			break;
		ok++;
	}
	CHECK("writes_from_a_thread", ok == WRITES, "%d of %d WRITE_WITH_IMMs completed", ok,
	      WRITES);
	return NULL;
}

/* h0: requests of other kinds on the same session connection meanwhile */
static void *querier(void *arg)
{
	int ok = 1;

	(void)arg;
	for (int i = 0; i < 200 && ok; i++) {
		struct ibv_port_attr port;
		struct ibv_qp_attr qa;
		struct mrc_qp_attr ma;
		struct mrc_qp_init_attr init;
		struct ibv_wc wc;

		ok = ibv_query_port(h0.ibv, 1, &port) == 0 &&
		     mrc_query_qp(h0.qp, &qa, IBV_QP_STATE, &ma, 0, &init) == 0 &&
		     qa.qp_state == IBV_QPS_RTS && mrc_poll_cq(h0.rcq, 1, &wc) == 0;
	}
	CHECK("queries_from_a_thread", ok, "a query failed");
	return NULL;
}

/* h1: completion events on the channel, each re-armed, every receive replaced */
static void *events(void *arg)
{
	int got = 0;

	(void)arg;
	while (got < WRITES) {
		struct mrc_cq *cq;
		void *ctx;
		struct ibv_wc wc[8];
		int n;

		if (mrc_get_cq_event(h1.channel, &cq, &ctx) || cq != h1.rcq)
			break;
		mrc_ack_cq_events(cq, 1);
		if (mrc_req_notify_cq(cq, 0))
			break;
		while ((n = mrc_poll_cq(cq, 8, wc)) > 0)
			for (int i = 0; i < n; i++) {
				if (wc[i].status == IBV_WC_SUCCESS)
					got++;
				post_recv(&h1, wc[i].wr_id);
			}
		if (n < 0)
			break;
	}
	received = got;
	return NULL;
}

int main(void)
{
	pthread_t t[3], ev;

	alarm(180); /* a thread that never returns ends the program, not the test run */

	open_host(&h0, 64);
	open_host(&h1, 64);
	connect_qp_to("h0", h0.qp, h1.qp, &h1.gid);
	connect_qp_to("h1", h1.qp, h0.qp, &h0.gid);
	for (int i = 0; i < 32; i++)
		if (post_recv(&h1, 100 + (uint64_t)i))
			DIE("post_recv on h1");
	if (mrc_req_notify_cq(h1.rcq, 0))
		DIE("req_notify_cq on h1");
	printf("set up: QPs connected, receives posted\n");
	fflush(stdout);
	pthread_create(&ev, NULL, events, NULL);
	pthread_create(&t[0], NULL, writer, NULL);
	pthread_create(&t[1], NULL, querier, NULL);
	pthread_create(&t[2], NULL, querier, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	pthread_join(ev, NULL);
	CHECK("events_on_the_channel_from_a_thread", received == WRITES, "%d of %d received",
	      received, WRITES);
	close_host(&h0);
	close_host(&h1);
	if (failures)
		return 1;
	printf("ALL OK\n");
	return 0;
}
