/*
 * What an application sees when the host agent behind its device dies, run by
 * tests/host/test_agent_death.py: one process opens the devices of h0 and h1 (found in
 * MRC_TESTBED_RUN_DIR) and connects a QP of each to the other. h0 posts receives and, while
 * the test holds h1's agent stopped, WRITEs that cannot complete; then the test kills h0's
 * agent (and starts a new one). The program must then see IBV_EVENT_DEVICE_FATAL on its
 * asynchronous event fd (the ibv_context's async_fd), a completion event for the CQ holding the receives, and every WR
 * posted on h0 complete with IBV_WC_WR_FLUSH_ERR; later calls fail with EIO, the objects can
 * still be destroyed, and the restarted agent opens a new session.
 *
 * The test and the program take turns over stdin/stdout: the program prints "READY n" and
 * reads a line before going on. Prints "ok NAME" or "FAIL NAME: why" per check, then
 * "ALL OK" when none failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrc.h"

static int failures;

#define CHECK(name, cond, ...)                                              \
	do {                                                                \
		if (cond) {                                                 \
			printf("ok %s\n", name);                            \
		} else {                                                    \
			printf("FAIL %s: ", name);                          \
			printf(__VA_ARGS__);                                \
			printf(" (errno %d %s)\n", errno, strerror(errno)); \
			failures++;                                         \
		}                                                           \
		fflush(stdout);                                             \
	} while (0)

#define DIE(...)                                                    \
	do {                                                        \
		printf("FAIL setup: " __VA_ARGS__);                 \
		printf(" (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);                                            \
	} while (0)

#define BUF 65536
#define RECVS 4
#define SENDS 3

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

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

static void open_host(struct host *h)
{
	struct mrc_qp_init_attr attr = {
		.pd = NULL, .sq_sig_all = 1,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {0};

	h->ibv = open_device(h->name);
	if (!h->ibv)
		DIE("no device %s", h->name);
	h->pd = ibv_alloc_pd(h->ibv);
	h->mrc = mrc_create_context(h->ibv, NULL);
	h->buf = aligned_alloc(4096, BUF);
	if (!h->pd || !h->mrc || !h->buf || mrc_create_comp_channel(h->mrc, &h->channel))
		DIE("open %s", h->name);
	memset(h->buf, 0x5a, BUF);
	h->mr = ibv_reg_mr(h->pd, h->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!h->mr || ibv_query_gid(h->ibv, 1, 0, &h->gid))
		DIE("memory or GID of %s", h->name);
	h->scq = mrc_create_cq(h->mrc, 64, NULL, NULL, 0);
	h->rcq = mrc_create_cq(h->mrc, 64, h, h->channel, 0);
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

static void turn(int n)
{
	char line[64];

	printf("READY %d\n", n);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		DIE("no go-ahead from the test at turn %d", n);
}

/* Every completion of cq, up to max, waiting up to 10 s for the first. */
static int drain(struct mrc_cq *cq, struct ibv_wc *wc, int max)
{
	int n = 0;

	for (int tries = 0; tries < 10000 && n < max; tries++) {
		int got = mrc_poll_cq(cq, max - n, wc + n);

		if (got < 0)
			return -1;
		if (got == 0 && n > 0)
			break;
		n += got;
		if (got == 0)
			usleep(1000);
	}
	return n;
}

static int all_flushed(const struct ibv_wc *wc, int n, uint64_t first_id, uint32_t qpn)
{
	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_WR_FLUSH_ERR || wc[i].wr_id != first_id + (uint64_t)i ||
		    wc[i].qp_num != qpn)
			return 0;
	return 1;
}

int main(void)
{
	struct host h0 = {.name = "h0"}, h1 = {.name = "h1"};
	struct ibv_wc wc[16];
	struct mrc_async_event event;
	struct ibv_send_wr *bad = NULL;
	struct ibv_recv_wr *rbad = NULL;
	struct pollfd pfd = {.events = POLLIN};
	struct mrc_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	uint32_t qpn;
	int n;

	open_host(&h0);
	open_host(&h1);
	connect_qp(&h0, &h1);
	connect_qp(&h1, &h0);
	mrc_get_qpn(h0.qp, &qpn);

	for (int i = 0; i < RECVS; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)h0.buf, .length = 64, .lkey = h0.mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 100 + (uint64_t)i, .sg_list = &sge, .num_sge = 1};

		if (mrc_post_recv(h0.qp, &wr, &rbad))
			DIE("post_recv on h0");
	}
	if (mrc_req_notify_cq(h0.rcq, 0))
		DIE("req_notify_cq on h0");
	turn(1); /* the test stops h1's agent: nothing h0 sends is acknowledged */
	for (int i = 0; i < SENDS; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)h0.buf, .length = 4096, .lkey = h0.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1 + (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE};

		wr.wr.rdma.remote_addr = (uintptr_t)h1.buf;
		wr.wr.rdma.rkey = h1.mr->rkey;
		if (mrc_post_send(h0.qp, &wr, &bad))
			DIE("post_send on h0");
	}
	n = mrc_poll_cq(h0.scq, 16, wc);
	CHECK("writes_pending_while_the_peer_is_stopped", n == 0, "%d completions", n);
	turn(2); /* the test kills h0's agent and starts a new one */

	pfd.fd = h0.ibv->async_fd; /* the MRC context's event connection */
	n = poll(&pfd, 1, 10000);
	CHECK("async_fd_readable", n == 1, "poll returned %d", n);
	n = mrc_get_async_event(h0.mrc, &event);
	CHECK("device_fatal_event", n == 0 && event.event_type == IBV_EVENT_DEVICE_FATAL,
	      "rc %d event %d", n, n == 0 ? (int)event.event_type : -1);
	if (n == 0)
		mrc_ack_async_event(&event);
	n = mrc_get_cq_event(h0.channel, &ev_cq, &ev_ctx);
	CHECK("completion_event_for_the_flushed_cq", n == 0 && ev_cq == h0.rcq && ev_ctx == &h0,
	      "rc %d cq %p", n, (void *)ev_cq);
	if (n == 0)
		mrc_ack_cq_events(ev_cq, 1);

	n = drain(h0.scq, wc, 16);
	CHECK("every_write_flushed", n == SENDS && all_flushed(wc, n, 1, qpn),
	      "%d completions, first status %d wr_id %llu", n, n > 0 ? (int)wc[0].status : -1,
	      n > 0 ? (unsigned long long)wc[0].wr_id : 0ULL);
	n = drain(h0.rcq, wc, 16);
	CHECK("every_receive_flushed", n == RECVS && all_flushed(wc, n, 100, qpn),
	      "%d completions, first status %d wr_id %llu", n, n > 0 ? (int)wc[0].status : -1,
	      n > 0 ? (unsigned long long)wc[0].wr_id : 0ULL);
	n = mrc_poll_cq(h0.scq, 16, wc) + mrc_poll_cq(h0.rcq, 16, wc);
	CHECK("flushed_once", n == 0, "%d more completions", n);

	{
		struct ibv_sge sge = {.addr = (uintptr_t)h0.buf, .length = 64, .lkey = h0.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE};

		n = mrc_post_send(h0.qp, &wr, &bad);
		CHECK("post_after_the_loss_fails", n == EIO, "rc %d", n);
	}
	n = mrc_get_async_event(h0.mrc, &event);
	CHECK("fatal_event_once", n == -1 && errno == EIO, "rc %d", n);

	n = mrc_destroy_qp(h0.qp) || mrc_destroy_cq(h0.scq) || mrc_destroy_cq(h0.rcq) ||
	    mrc_destroy_comp_channel(h0.channel) || mrc_destroy_context(h0.mrc) ||
	    ibv_dereg_mr(h0.mr) || ibv_dealloc_pd(h0.pd) || ibv_close_device(h0.ibv);
	CHECK("objects_destroyed_after_the_loss", n == 0, "a destroy call failed");

	h0.ibv = open_device("h0");
	CHECK("restarted_agent_opens_a_new_session", h0.ibv != NULL, "ibv_open_device failed");
	if (h0.ibv)
		ibv_close_device(h0.ibv);
	free(h0.buf);
	turn(3); /* the test resumes h1's agent */
	mrc_destroy_qp(h1.qp);
	mrc_destroy_cq(h1.scq);
	mrc_destroy_cq(h1.rcq);
	mrc_destroy_comp_channel(h1.channel);
	mrc_destroy_context(h1.mrc);
	ibv_dereg_mr(h1.mr);
	ibv_dealloc_pd(h1.pd);
	ibv_close_device(h1.ibv);
	free(h1.buf);
	if (failures)
		return 1;
	printf("ALL OK\n");
	return 0;
}
