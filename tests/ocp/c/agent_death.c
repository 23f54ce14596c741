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
#include <poll.h>
#include <unistd.h>

#include "checks.h"

#define RECVS 4
#define SENDS 3

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

	open_host(&h0, 16);
	open_host(&h1, 16);
	connect_qp_to("h0", h0.qp, h1.qp, &h1.gid);
	connect_qp_to("h1", h1.qp, h0.qp, &h0.gid);
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
	close_host(&h1);
	if (failures)
		return 1;
	printf("ALL OK\n");
	return 0;
}
