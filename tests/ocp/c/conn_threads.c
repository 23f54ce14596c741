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
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrc.h"

#define WRITES 40
#define BUF 65536

static int failures;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(name, cond, ...)                                              \
	do {                                                                \
		pthread_mutex_lock(&out_lock);                              \
		if (cond) {                                                 \
			printf("ok %s\n", name);                            \
		} else {                                                    \
			printf("FAIL %s: ", name);                          \
			printf(__VA_ARGS__);                                \
			printf(" (errno %d %s)\n", errno, strerror(errno)); \
			failures++;                                         \
		}                                                           \
		fflush(stdout);                                             \
		pthread_mutex_unlock(&out_lock);                            \
	} while (0)

#define DIE(...)                                                    \
	do {                                                        \
		printf("FAIL setup: " __VA_ARGS__);                 \
		printf(" (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);                                            \
	} while (0)

struct host {
	const char *name;
	struct ibv_context *ibv;
	struct ibv_pd *pd;
	struct mrc_context *mrc;
	struct mrc_comp_channel *channel;
	struct mrc_cq *scq, *rcq;
	struct mrc_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
	union ibv_gid gid;
};

static struct host h0 = {.name = "h0"}, h1 = {.name = "h1"};
static int received; /* WRITE_WITH_IMMs h1 completed (the event thread's) */

static void open_host(struct host *h)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct mrc_qp_init_attr attr = {
		.sq_sig_all = 1,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {0};

	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), h->name) == 0)
			h->ibv = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!h->ibv)
		DIE("no device %s", h->name);
	h->pd = ibv_alloc_pd(h->ibv);
	h->mrc = mrc_create_context(h->ibv, NULL);
	h->buf = aligned_alloc(4096, BUF);
	if (!h->pd || !h->mrc || !h->buf || mrc_create_comp_channel(h->mrc, &h->channel))
		DIE("open %s", h->name);
	memset(h->buf, 0, BUF);
	h->mr = ibv_reg_mr(h->pd, h->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!h->mr || ibv_query_gid(h->ibv, 1, 0, &h->gid))
		DIE("memory or GID of %s", h->name);
	h->scq = mrc_create_cq(h->mrc, 128, NULL, NULL, 0);
	h->rcq = mrc_create_cq(h->mrc, 128, h, h->channel, 0);
	if (!h->scq || !h->rcq)
		DIE("CQs of %s", h->name);
	attr.send_cq = h->scq;
	attr.recv_cq = h->rcq;
	attr.pd = h->pd;
	h->qp = mrc_create_qp(h->mrc, &attr);
	if (!h->qp || mrc_modify_qp(h->qp, &va, IBV_QP_STATE, &ma, 0))
		DIE("QP of %s", h->name);
}

static void connect_qp(struct host *h, struct host *peer)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_RTR};
	struct mrc_qp_attr ma = {0};
	uint32_t qpn;

	mrc_get_qpn(peer->qp, &qpn);
	va.dest_qp_num = qpn;
	va.ah_attr.is_global = 1;
	va.ah_attr.grh.dgid = peer->gid;
	if (mrc_modify_qp(h->qp, &va, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &ma, 0))
		DIE("RTR on %s", h->name);
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	if (mrc_modify_qp(h->qp, &va, IBV_QP_STATE, &ma, 0))
		DIE("RTS on %s", h->name);
}

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

	open_host(&h0);
	open_host(&h1);
	connect_qp(&h0, &h1);
	connect_qp(&h1, &h0);
	for (int i = 0; i < 32; i++)
		if (post_recv(&h1, 100 + (uint64_t)i))
			DIE("post_recv on h1");
	if (mrc_req_notify_cq(h1.rcq, 0))
		DIE("req_notify_cq on h1");
	pthread_create(&ev, NULL, events, NULL);
	pthread_create(&t[0], NULL, writer, NULL);
	pthread_create(&t[1], NULL, querier, NULL);
	pthread_create(&t[2], NULL, querier, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	pthread_join(ev, NULL);
	CHECK("events_on_the_channel_from_a_thread", received == WRITES, "%d of %d received",
	      received, WRITES);
	for (struct host *h = &h0; h; h = h == &h0 ? &h1 : NULL) {
		mrc_destroy_qp(h->qp);
		mrc_destroy_cq(h->scq);
		mrc_destroy_cq(h->rcq);
		mrc_destroy_comp_channel(h->channel);
		mrc_destroy_context(h->mrc);
		ibv_dereg_mr(h->mr);
		ibv_dealloc_pd(h->pd);
		ibv_close_device(h->ibv);
		free(h->buf);
	}
	if (failures)
		return 1;
	printf("ALL OK\n");
	return 0;
}
