/*
 * Checks of lib_mrc.so and the emulated verbs device through the C API, run by
 * tests/ocp/test_capi_netns.py: one process opens the devices of two testbed hosts (h0 and h1,
 * found in MRC_TESTBED_RUN_DIR) and connects a QP of each to the other.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; exits 1 when any failed.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "mrc_ctl.h"

#define BUF HOST_BUF /* a host's buffer: here only the first half is registered */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int poll_one(struct mrc_cq *cq, struct ibv_wc *wc, double seconds)
{
	double end = now() + seconds;

	while (now() < end) {
		int n = mrc_poll_cq(cq, 1, wc);

		if (n != 0)
			return n;
		usleep(200);
	}
	return 0;
}

/* h opened, half its buffer registered, its CQs without a channel, no QP yet (new_qp) */
static void open_half(struct host *h, struct ibv_device **list)
{
	for (int i = 0; list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), h->name) == 0)
			h->ibv = ibv_open_device(list[i]);
	if (!h->ibv)
		DIE("no device %s", h->name);
	h->pd = ibv_alloc_pd(h->ibv);
	h->mrc = mrc_create_context(h->ibv, NULL);
	h->buf = aligned_alloc(4096, BUF);
	if (!h->pd || !h->mrc || !h->buf)
		DIE("open %s", h->name);
	memset(h->buf, 0x5a, BUF);
	h->mr = ibv_reg_mr(h->pd, h->buf, BUF / 2, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!h->mr || ibv_query_gid(h->ibv, 1, 0, &h->gid))
		DIE("memory or GID of %s", h->name);
	h->scq = mrc_create_cq(h->mrc, 64, NULL, NULL, 0);
	h->rcq = mrc_create_cq(h->mrc, 64, NULL, NULL, 0);
	if (!h->scq || !h->rcq)
		DIE("CQs of %s", h->name);
}

static uint64_t ev_profile_id; /* the EV profile of h0's next QP (0: the host's own) */
static uint64_t cc_profile_id; /* its CC profile */

static struct mrc_qp *new_qp(struct host *h, uint64_t profile, uint64_t cc)
{
	struct mrc_qp_init_attr attr = {
		.send_cq = h->scq, .recv_cq = h->rcq, .pd = h->pd, .sq_sig_all = 1,
		.cap = {.max_send_wr = 32, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct mrc_qp *qp = mrc_create_qp(h->mrc, &attr);

	if (!qp)
		DIE("mrc_create_qp on %s", h->name);
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {.profile.ev_profile_id = profile, .profile.cc_profile_id = cc};

	if (mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma, MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID))
		DIE("INIT on %s", h->name);
	return qp;
}

static void connect_qp(struct host *h, struct host *peer)
{
	connect_qp_to(h->name, h->qp, peer->qp, &peer->gid);
}

static void pair(struct host *a, struct host *b)
{
	a->qp = new_qp(a, ev_profile_id, cc_profile_id);
	b->qp = new_qp(b, 0, 0);
	connect_qp(a, b);
	connect_qp(b, a);
}

static int post_write(struct host *h, struct host *peer, uint64_t wr_id, size_t off, size_t len,
		      uint64_t remote_off, uint32_t lkey, int imm, struct ibv_send_wr **bad)
{
	struct ibv_sge sge = {.addr = (uintptr_t)h->buf + off, .length = (uint32_t)len, .lkey = lkey};
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
		.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
		.imm_data = htobe32(0xC0DE0000u | (uint32_t)wr_id),
	};

	wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + remote_off;
	wr.wr.rdma.rkey = peer->mr->rkey;
	return mrc_post_send(h->qp, &wr, bad);
}

/* A pair whose h0 QP is on EV profile `ev` and CC profile `cc` moves `len` bytes intact. */
static void profile_data(const char *name, struct host *h0, struct host *h1, uint64_t ev,
			 uint64_t cc, uint64_t wr_id, size_t len)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	int rc, n;

	ev_profile_id = ev;
	cc_profile_id = cc;
	pair(h0, h1);
	ev_profile_id = 0;
	cc_profile_id = 0;
	memset(h1->buf, 0x5a, BUF);
	rc = post_write(h0, h1, wr_id, 0, len, 0, h0->mr->lkey, 0, &bad);
	n = poll_one(h0->scq, &wc, 30);
	CHECK(name, rc == 0 && n == 1 && wc.status == IBV_WC_SUCCESS &&
	      memcmp(h1->buf, h0->buf, len) == 0, "rc %d n %d status %d", rc, n, wc.status);
}

static int untouched(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0x5a)
			return 0;
	return 1;
}

static void on_alarm(int sig)
{
	(void)sig;
	printf("FAIL timeout: a blocking call did not return\n");
	exit(1);
}

int main(void)
{
	struct host h0 = {.name = "h0"}, h1 = {.name = "h1"};
	struct ibv_wc wc;
	struct ibv_send_wr *bad = NULL;
	struct ibv_recv_wr rwr = {.wr_id = 77}, *rbad = NULL;
	int n, rc;

	signal(SIGALRM, on_alarm);
	alarm(60);

	/* the device */
	struct ibv_device **list = ibv_get_device_list(&n);

	CHECK("device_list", list && n >= 2, "%d devices", n);
	if (!list || n < 2)
		return 1;
	open_half(&h0, list);
	open_half(&h1, list);
	ibv_free_device_list(list);
	union ibv_gid gid;

	errno = 0;
	CHECK("query_gid_bad_index", ibv_query_gid(h0.ibv, 1, 4, &gid) == -1 && errno == EINVAL,
	      "index 4 (past gid_tbl_len) accepted");
	CHECK("query_gid_bad_port", ibv_query_gid(h0.ibv, 9, 0, &gid) == -1, "port 9 accepted");
	struct ibv_port_attr pattr;

	CHECK("query_port", ibv_query_port(h0.ibv, 1, &pattr) == 0 && pattr.state == IBV_PORT_ACTIVE &&
	      pattr.link_layer == IBV_LINK_LAYER_ETHERNET, "port 1 not active");
	CHECK("query_port_bad", ibv_query_port(h0.ibv, 0, &pattr) == EINVAL, "port 0 accepted");
	CHECK("wc_status_str", strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0, "?");

	/* bad handles */
	errno = 0;
	CHECK("context_of_null", mrc_create_context(NULL, NULL) == NULL && errno == ENODEV, "accepted");
	struct mrc_context_attr future = {.mrc_api_version_used = MRC_API_VER(2, 0, 0)};

	errno = 0;
	CHECK("context_newer_api", mrc_create_context(h0.ibv, &future) == NULL &&
	      errno == EPROTONOSUPPORT, "API 2.0.0 accepted");
	errno = 0;
	CHECK("poll_null_cq", mrc_poll_cq(NULL, 1, &wc) == -1 && errno == EINVAL, "accepted");
	CHECK("post_null_qp", post_write(&h0, &h1, 1, 0, 8, 0, h0.mr->lkey, 0, &bad) == EINVAL,
	      "accepted");
	uint32_t qpn;

	errno = 0;
	CHECK("qpn_null_qp", mrc_get_qpn(NULL, &qpn) == -1 && errno == EINVAL, "accepted");
	struct mrc_device_attr dattr;
	int supported = 0;

	CHECK("query_device", mrc_query_device(h0.ibv, &dattr, &supported) == 0 && supported &&
	      dattr.wimm_attr.max_wimm > 0, "not supported");

	/* state machine through the library */
	struct mrc_qp_init_attr qattr = {.send_cq = h0.scq, .recv_cq = h0.rcq, .pd = h0.pd,
					 .cap = {.max_send_wr = 4}};
	struct mrc_qp *qp = mrc_create_qp(h0.mrc, &qattr);
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_RTS};
	struct mrc_qp_attr ma = {0};

	CHECK("reset_to_rts", qp && mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma, 0) == EINVAL,
	      "RESET -> RTS accepted");
	va.qp_state = IBV_QPS_INIT;
	CHECK("ibv_qp_alt_path", mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_ALT_PATH, &ma,
					       MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID) == EINVAL,
	      "IBV_QP_ALT_PATH accepted");
	ma.profile.ev_profile_id = 42;
	CHECK("unknown_profile", mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma,
					       MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID) == EINVAL,
	      "EV profile 42 accepted");
	ma.vendor_cfg[0] = 1;
	CHECK("vendor_cfg", mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma, MRC_QP_VENDOR_CFG) == EINVAL,
	      "vendor configuration accepted");
	struct ibv_qp_attr qa;
	struct mrc_qp_attr qm;
	struct mrc_qp_init_attr qi;

	CHECK("query_qp_reset", mrc_query_qp(qp, &qa, IBV_QP_STATE, &qm, MRC_QP_MAX_WIMM, &qi) == 0 &&
	      qa.qp_state == IBV_QPS_RESET && qi.cap.max_send_wr == 4, "state %d", qa.qp_state);
	errno = 0;
	CHECK("destroy_busy_context", mrc_destroy_context(h0.mrc) == -1 && errno == EBUSY, "destroyed");
	CHECK("destroy_busy_cq", mrc_destroy_cq(h0.scq) == -1, "destroyed");
	CHECK("dealloc_busy_pd", ibv_dealloc_pd(h0.pd) == EBUSY, "freed");
	CHECK("destroy_qp", mrc_destroy_qp(qp) == 0, "failed");

	/* data: WRITE_IMM into a posted receive */
	pair(&h0, &h1);
	for (int i = 0; i < 256; i++)
		h0.buf[i] = (uint8_t)(i * 7 + 1);
	CHECK("post_recv", mrc_post_recv(h1.qp, &rwr, &rbad) == 0 && rbad == NULL, "refused");
	rc = post_write(&h0, &h1, 5, 0, 256, 1024, h0.mr->lkey, 1, &bad);
	CHECK("post_write_imm", rc == 0 && bad == NULL, "rc %d", rc);
	n = poll_one(h1.rcq, &wc, 20);
	CHECK("recv_completion", n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 77 &&
	      wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wc_flags & IBV_WC_WITH_IMM &&
	      be32toh(wc.imm_data) == 0xC0DE0005u && wc.byte_len == 256,
	      "n %d status %d wr_id %llu imm %#x", n, wc.status, (unsigned long long)wc.wr_id,
	      be32toh(wc.imm_data));
	CHECK("data_placed", memcmp(h1.buf + 1024, h0.buf, 256) == 0 && untouched(h1.buf, 1024) &&
	      untouched(h1.buf + 1280, BUF - 1280), "bytes differ");
	n = poll_one(h0.scq, &wc, 20);
	CHECK("send_completion", n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 5 &&
	      wc.opcode == IBV_WC_RDMA_WRITE, "n %d status %d", n, wc.status);

	/* unregistered and out-of-bounds local memory: refused at post, nothing sent */
	memset(h1.buf, 0x5a, BUF);
	struct ibv_sge sge = {.addr = (uintptr_t)h0.buf, .length = 64, .lkey = 0xdead};
	struct ibv_send_wr w1 = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE};
	struct ibv_sge sge_ok = {.addr = (uintptr_t)h0.buf, .length = 64, .lkey = h0.mr->lkey};
	struct ibv_send_wr w0 = {.wr_id = 0, .sg_list = &sge_ok, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .next = &w1};

	w0.wr.rdma.remote_addr = w1.wr.rdma.remote_addr = (uintptr_t)h1.buf;
	w0.wr.rdma.rkey = w1.wr.rdma.rkey = h1.mr->rkey;
	rc = mrc_post_send(h0.qp, &w0, &bad);
	CHECK("unregistered_lkey", rc == EINVAL && bad == &w1, "rc %d bad %p", rc, (void *)bad);
	rc = post_write(&h0, &h1, 2, BUF / 2 - 10, 100, 0, h0.mr->lkey, 0, &bad);
	CHECK("local_out_of_bounds", rc == EINVAL, "rc %d", rc);
	struct ibv_send_wr wread = w0;

	wread.next = NULL;
	wread.opcode = IBV_WR_RDMA_READ;
	CHECK("rdma_read_refused", mrc_post_send(h0.qp, &wread, &bad) == EINVAL, "accepted");
	n = poll_one(h0.scq, &wc, 20); /* w0, posted before w1 was refused */
	CHECK("first_wr_completed", n == 1 && wc.wr_id == 0 && wc.status == IBV_WC_SUCCESS,
	      "n %d wr %llu", n, (unsigned long long)wc.wr_id);
	CHECK("nothing_written", memcmp(h1.buf, h0.buf, 64) == 0 && untouched(h1.buf + 64, BUF - 64),
	      "bytes beyond the first WR's changed");

	/* out of the peer's region: a remote access error, nothing written beyond */
	memset(h1.buf, 0x5a, BUF);
	rc = post_write(&h0, &h1, 3, 0, 100, BUF / 2 - 10, h0.mr->lkey, 0, &bad);
	n = poll_one(h0.scq, &wc, 30);
	CHECK("remote_out_of_bounds", rc == 0 && n == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "rc %d n %d status %s", rc, n, ibv_wc_status_str(wc.status));
	CHECK("remote_nothing_written", untouched(h1.buf, BUF), "the peer's buffer changed");
	memset(&qa, 0, sizeof(qa));
	mrc_query_qp(h0.qp, &qa, IBV_QP_STATE, NULL, 0, NULL);
	CHECK("qp_error_after_failure", qa.qp_state == IBV_QPS_ERR, "state %d", qa.qp_state);
	mrc_destroy_qp(h0.qp);
	mrc_destroy_qp(h1.qp);

	/* WRITE_IMM with no receive posted: the responder's QP fails, an async event says so */
	pair(&h0, &h1);
	rc = post_write(&h0, &h1, 9, 0, 32, 0, h0.mr->lkey, 1, &bad);
	n = poll_one(h1.rcq, &wc, 20);
	CHECK("imm_without_receive", rc == 0 && n == 1 && wc.status == IBV_WC_LOC_QP_OP_ERR,
	      "rc %d n %d status %d", rc, n, wc.status);
	struct mrc_async_event event;

	rc = mrc_get_async_event(h1.mrc, &event);
	CHECK("async_qp_fatal", rc == 0 && event.event_type == IBV_EVENT_QP_FATAL &&
	      event.element.qp == h1.qp, "rc %d type %d", rc, event.event_type);
	mrc_ack_async_event(&event);
	poll_one(h0.scq, &wc, 20);
	mrc_destroy_qp(h0.qp);
	mrc_destroy_qp(h1.qp);

	/* completion channel */
	struct mrc_comp_channel *ch;
	int fd = -1;

	CHECK("comp_channel", mrc_create_comp_channel(h0.mrc, &ch) == 0 &&
	      mrc_get_comp_channel_fd(ch, &fd) == 0 && fd >= 0, "no channel");
	struct mrc_cq *ccq = mrc_create_cq(h0.mrc, 8, (void *)&h0, ch, 0);
	struct mrc_cq *keep = h0.scq;

	h0.scq = ccq;
	pair(&h0, &h1);
	CHECK("req_notify", mrc_req_notify_cq(ccq, 0) == 0, "refused");
	post_write(&h0, &h1, 11, 0, 16, 0, h0.mr->lkey, 0, &bad);
	struct mrc_cq *ev_cq = NULL;
	void *ev_ctx = NULL;

	rc = mrc_get_cq_event(ch, &ev_cq, &ev_ctx);
	CHECK("cq_event", rc == 0 && ev_cq == ccq && ev_ctx == &h0, "rc %d", rc);
	CHECK("destroy_unacked_cq", mrc_destroy_cq(ccq) == -1, "destroyed with an unacked event");
	mrc_ack_cq_events(ccq, 1);
	n = poll_one(ccq, &wc, 20);
	CHECK("cq_after_event", n == 1 && wc.wr_id == 11, "n %d", n);
	mrc_destroy_qp(h0.qp);
	mrc_destroy_qp(h1.qp);
	CHECK("destroy_cq", mrc_destroy_cq(ccq) == 0, "failed");
	CHECK("destroy_channel", mrc_destroy_comp_channel(ch) == 0, "failed");
	h0.scq = keep;

	/* QP hints */
	struct mrc_qp_hint_init_attr hinit = {.attr = {.num_qps_per_peer = 2, .num_send_peers = 3}};
	struct mrc_qp_hint *hint = mrc_create_qp_hint(h0.mrc, &hinit);
	struct mrc_qp_hint_attr hattr = {0};

	CHECK("qp_hint", hint && mrc_query_qp_hint(hint, &hattr, MRC_QP_HINT_NUM_SEND_PEERS) == 0 &&
	      hattr.num_send_peers == 3, "hint");
	CHECK("qp_hint_destroy", mrc_destroy_qp_hint(hint) == 0, "failed");

	/* controller API */
	struct mrc_ctl_device_attr cattr;

	CHECK("ctl_query_device", mrc_ctl_query_device(h0.ibv, &cattr) == 0 &&
	      cattr.phy_port_mask == 0x6 && cattr.cc.algorithms && cattr.cc.algorithms[0] &&
	      (cattr.opt_attr & MRC_CTL_OPT_CAP_EP_OP_EV_PROBE),
	      "mask %#x opt_attr %#x", cattr.phy_port_mask, (unsigned int)cattr.opt_attr);
	struct mrc_ctl_ev_profile_attr evp = {.profile_state = MRC_CTL_PROFILE_OFFLINE};

	errno = 0;
	CHECK("ctl_ev_profile_no_mode", mrc_ctl_modify_ev_profile(h0.mrc, 3, &evp,
	      MRC_CTL_EV_PROFILE_STATE) == -1 && errno == EINVAL, "accepted");
	memset(&evp, 0, sizeof(evp));
	CHECK("ctl_ev_profile_0", mrc_ctl_query_ev_profile(h0.mrc, 0, &evp,
	      MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_COUNT) == 0 &&
	      evp.ev_mode == MRC_CTL_EV_MODE_GEN && evp.ev_count > 0, "profile 0");

	/* an EV format profile (STEV, 16 + 16 bits) and a generated EV profile on it */
	struct mrc_ctl_ev_fmt_field ff[2] = {{.width = 16}, {.width = 16}};
	struct mrc_ctl_ev_fmt_profile_attr fa = {
		.profile_state = MRC_CTL_PROFILE_OFFLINE, .ev_fmt_mode = MRC_CTL_EV_FMT_MODE_STEV,
		.ev_fmt_op = {.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS, .fmt_fields = ff,
			      .fmt_field_count = 2},
	};

	CHECK("ev_fmt_offline", mrc_ctl_modify_ev_fmt_profile(h0.mrc, 11, &fa,
	      MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE |
	      MRC_CTL_EV_FMT_PROFILE_OP) == 0, "refused");
	fa.profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK("ev_fmt_online", mrc_ctl_modify_ev_fmt_profile(h0.mrc, 11, &fa,
	      MRC_CTL_EV_FMT_PROFILE_STATE) == 0, "refused");
	struct mrc_ctl_ev_fmt_field got[2] = {0};

	fa = (struct mrc_ctl_ev_fmt_profile_attr){
		.ev_fmt_op = {.op = MRC_CTL_EV_FMT_OP_QUERY_FIELDS, .fmt_fields = got,
			      .fmt_field_count = 1}};
	errno = 0;
	rc = mrc_ctl_query_ev_fmt_profile(h0.mrc, 11, &fa, MRC_CTL_EV_FMT_PROFILE_OP);
	CHECK("ev_fmt_query_e2big", rc == -1 && errno == E2BIG && fa.ev_fmt_op.fmt_field_count == 2,
	      "rc %d count %d", rc, fa.ev_fmt_op.fmt_field_count);
	rc = mrc_ctl_query_ev_fmt_profile(h0.mrc, 11, &fa, MRC_CTL_EV_FMT_PROFILE_OP |
					  MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE);
	CHECK("ev_fmt_query", rc == 0 && got[0].width == 16 && got[1].width == 16 &&
	      fa.profile_state == MRC_CTL_PROFILE_ONLINE &&
	      fa.ev_fmt_mode == MRC_CTL_EV_FMT_MODE_STEV, "rc %d", rc);

	struct mrc_ctl_ev_field ef[2] = {{.width = 16, .init_val = 0x4242},
					 {.width = 16, .min_val = 1, .max_val = 8, .mask = 0xffff}};

	evp = (struct mrc_ctl_ev_profile_attr){
		.profile_state = MRC_CTL_PROFILE_OFFLINE, .ev_mode = MRC_CTL_EV_MODE_GEN,
		.ev_fmt_profile_id = 11, .ev_count = 8,
		.ev_fields_op = {.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS, .fields = ef,
				 .field_count = 2},
	};
	CHECK("ev_profile_offline", mrc_ctl_modify_ev_profile(h0.mrc, 12, &evp,
	      MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_FMT_ID |
	      MRC_CTL_EV_PROFILE_COUNT | MRC_CTL_EV_PROFILE_EV_FIELDS_OP) == 0, "refused");
	evp.profile_state = MRC_CTL_PROFILE_ONLINE;
	evp.ev_min_active = 1;
	evp.ev_event_mask = MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD;
	CHECK("ev_profile_online", mrc_ctl_modify_ev_profile(h0.mrc, 12, &evp,
	      MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MIN_ACTIVE |
	      MRC_CTL_EV_PROFILE_EVENT_MASK) == 0, "refused");
	struct mrc_ctl_ev_op_entry entries[8];

	memset(&evp, 0, sizeof(evp));
	evp.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	evp.ev_op.entries = entries;
	evp.ev_op.entry_count = 4;
	errno = 0;
	rc = mrc_ctl_query_ev_profile(h0.mrc, 12, &evp, MRC_CTL_EV_PROFILE_EV_OP);
	CHECK("ev_array_e2big", rc == -1 && errno == E2BIG && evp.ev_op.entry_count == 8,
	      "rc %d count %d", rc, evp.ev_op.entry_count);

	/* QPs on the profile: data moves with its EVs, which the array then lists */
	profile_data("ev_profile_data", &h0, &h1, 12, 0, 21, 20000);
	evp.ev_op.entry_count = 8;
	rc = mrc_ctl_query_ev_profile(h0.mrc, 12, &evp, MRC_CTL_EV_PROFILE_EV_OP);
	uint32_t first_ev = 0;

	if (rc == 0)
		memcpy(&first_ev, entries[0].ev.val, 4);
	CHECK("ev_array", rc == 0 && evp.ev_op.entry_count == 8 &&
	      (be32toh(first_ev) >> 16) == 0x4242 && entries[0].ev.port >= 1, "rc %d ev %#x", rc,
	      be32toh(first_ev));
	struct mrc_ctl_ev_op_entry deny = {.state = MRC_CTL_EV_DENIED};
	uint32_t target = htobe32(0x42420002);

	memcpy(deny.ev.val, &target, 4);
	evp.ev_op = (typeof(evp.ev_op)){.op = MRC_CTL_EV_OP_MODIFY_EV_STATE, .entries = &deny,
					.entry_count = 1};
	CHECK("ev_deny", mrc_ctl_modify_ev_profile(h0.mrc, 12, &evp, MRC_CTL_EV_PROFILE_EV_OP) == 0,
	      "refused");
	deny.state = 0;
	evp.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_STATE;
	CHECK("ev_query_state", mrc_ctl_query_ev_profile(h0.mrc, 12, &evp,
	      MRC_CTL_EV_PROFILE_EV_OP) == 0 && deny.state == MRC_CTL_EV_DENIED, "state %#x",
	      deny.state);
	evp.profile_state = MRC_CTL_PROFILE_OFFLINE;
	errno = 0;
	CHECK("ev_profile_busy", mrc_ctl_modify_ev_profile(h0.mrc, 12, &evp,
	      MRC_CTL_EV_PROFILE_STATE) == -1 && errno == EBUSY, "taken offline under a QP");
	mrc_destroy_qp(h0.qp);
	mrc_destroy_qp(h1.qp);
	CHECK("ev_profile_offline_again", mrc_ctl_modify_ev_profile(h0.mrc, 12, &evp,
	      MRC_CTL_EV_PROFILE_STATE) == 0, "refused");

	/* a CC profile (UET NSCC with a window cap of the controller's) for a QP */
	struct mrc_ctl_cc_nscc_cfg ncfg = {.max_cwnd = 200000};
	struct mrc_ctl_cc_profile_attr cca = {.profile_state = MRC_CTL_PROFILE_OFFLINE};

	errno = 0;
	CHECK("cc_null_algorithm", mrc_ctl_modify_cc_profile(h0.mrc, 21, &cca,
	      MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM) == -1 && errno == EINVAL,
	      "accepted");
	cca.algorithm = "uet-1.0-nscc";
	CHECK("cc_offline", mrc_ctl_modify_cc_profile(h0.mrc, 21, &cca,
	      MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM) == 0, "refused");
	cca.profile_state = MRC_CTL_PROFILE_ONLINE;
	cca.cc_config = &ncfg;
	CHECK("cc_online", mrc_ctl_modify_cc_profile(h0.mrc, 21, &cca,
	      MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CONFIG) == 0, "refused");
	memset(&cca, 0, sizeof(cca));
	rc = mrc_ctl_query_cc_profile(h0.mrc, 21, &cca, MRC_CTL_CC_PROFILE_STATE |
				      MRC_CTL_CC_PROFILE_ALGORITHM | MRC_CTL_CC_PROFILE_CONFIG);
	const struct mrc_ctl_cc_nscc_cfg *got_cfg = cca.cc_config;

	CHECK("cc_query", rc == 0 && cca.profile_state == MRC_CTL_PROFILE_ONLINE && cca.algorithm &&
	      strcmp(cca.algorithm, "uet-1.0-nscc") == 0 && got_cfg && got_cfg->max_cwnd == 200000,
	      "rc %d", rc);
	profile_data("cc_profile_data", &h0, &h1, 0, 21, 22, 30000);
	cca.profile_state = MRC_CTL_PROFILE_OFFLINE;
	errno = 0;
	CHECK("cc_profile_busy", mrc_ctl_modify_cc_profile(h0.mrc, 21, &cca,
	      MRC_CTL_CC_PROFILE_STATE) == -1 && errno == EBUSY, "taken offline under a QP");
	mrc_destroy_qp(h0.qp);
	mrc_destroy_qp(h1.qp);
	struct mrc_ctl_cc_profile_attr ccp = {0};

	CHECK("ctl_cc_profile_query", mrc_ctl_query_cc_profile(h0.mrc, 0, &ccp,
	      MRC_CTL_CC_PROFILE_ALGORITHM) == 0, "profile 0");
	/* connectionless EV probes on EVs no QP uses: from each port of h0 to h1's port on the
	 * same plane, an STEV EV and a UDP one */
	int nrsp = 5;
	struct mrc_ctl_ep_req reqs[2] = {{.req_id = 41, .ev_fmt_mode = MRC_CTL_EV_FMT_MODE_STEV},
					 {.req_id = 42, .ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP}};
	struct mrc_ctl_ep_rsp rsps[2];
	uint32_t ev_be;

	for (int i = 0; i < 2; i++) {
		if (ibv_query_gid(h0.ibv, (uint8_t)(i + 1), 0, &reqs[i].sgid) ||
		    ibv_query_gid(h1.ibv, (uint8_t)(i + 1), 0, &reqs[i].dgid))
			DIE("GIDs of port %d", i + 1);
		ev_be = htobe32(i == 0 ? 0x12345678u : 0x0000beefu);
		memcpy(reqs[i].req_ev.val, &ev_be, 4);
		reqs[i].req_ev.port = (uint8_t)(i + 1);
	}
	rc = mrc_ctl_ep_batch_send_wait(h0.mrc, 0, MRC_CTL_EP_OP_EV_PROBE, reqs, 2, 2000000000u,
					rsps, &nrsp);
	CHECK("ctl_ep_probe", rc == 0 && nrsp == 2 && rsps[0].req_id + rsps[1].req_id == 83 &&
	      rsps[0].rtt > 0 && rsps[0].port >= 1, "rc %d responses %d", rc, nrsp);
	union ibv_gid peer = reqs[0].dgid;

	reqs[0].dgid = reqs[0].sgid; /* the host itself: no destination */
	errno = 0;
	CHECK("ctl_ep_probe_unknown_dgid", mrc_ctl_ep_batch_send_wait(h0.mrc, 0,
	      MRC_CTL_EP_OP_EV_PROBE, reqs, 1, 1000000, rsps, &nrsp) == -1 && errno == EINVAL &&
	      nrsp == 0, "accepted");
	reqs[0].dgid = peer;
	reqs[0].op.port_status_update.port_status = 0x6; /* both ports up */
	rc = mrc_ctl_ep_batch_send_wait(h0.mrc, 0, MRC_CTL_EP_OP_PORT_STATUS_UPDATE, reqs, 1,
					2000000000u, rsps, &nrsp);
	CHECK("ctl_ep_port_status", rc == 0 && nrsp == 1 && rsps[0].req_id == 41,
	      "rc %d responses %d", rc, nrsp);
	struct mrc_ctl_port_attr port = {0};

	CHECK("ctl_query_port", mrc_ctl_query_port(h0.mrc, 2, &port, MRC_CTL_PORT_ADMIN_STATE) == 0 &&
	      port.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED, "port 2");

	/* EV events: disable plane 0's port (its EVs DENIED on every QP), enable it again (UNKNOWN,
	 * probed), and the EVs that answer come back GOOD as events */
	struct mrc_cq *evq = mrc_ctl_create_ev_event_cq(h0.mrc, 4096, NULL, NULL, 0);
	struct mrc_ctl_ev_event events[64];

	CHECK("ctl_ev_event_cq", evq && mrc_ctl_poll_ev_event(evq, 64, events) == 0, "no EV CQ");
	CHECK("poll_cq_on_ev_cq", evq && mrc_poll_cq(evq, 1, &wc) == -1, "accepted");
	port.port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED;
	CHECK("ctl_port_disable", mrc_ctl_modify_port(h0.mrc, 1, &port, MRC_CTL_PORT_ADMIN_STATE) == 0 &&
	      mrc_ctl_query_port(h0.mrc, 1, &port, MRC_CTL_PORT_ADMIN_STATE) == 0 &&
	      port.port_admin_state == MRC_CTL_PORT_ADMIN_DISABLED &&
	      ibv_query_port(h0.ibv, 1, &pattr) == 0 && pattr.state == IBV_PORT_DOWN, "still up");
	port.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
	CHECK("ctl_port_enable", mrc_ctl_modify_port(h0.mrc, 1, &port, MRC_CTL_PORT_ADMIN_STATE) == 0 &&
	      ibv_query_port(h0.ibv, 1, &pattr) == 0 && pattr.state == IBV_PORT_ACTIVE, "still down");
	int good = 0;
	double until = now() + 15;

	while (!good && now() < until) {
		n = evq ? mrc_ctl_poll_ev_event(evq, 64, events) : -1;
		for (int i = 0; i < n; i++)
			if (events[i].state == MRC_CTL_EV_GOOD && events[i].ev.port == 1 &&
			    events[i].profile_id == 0 && memcmp(events[i].ev.val, "\0\0\0\0", 4) != 0)
				good = 1;
		usleep(20000);
	}
	CHECK("ctl_ev_event_good", good, "no GOOD event for plane 0's EVs");
	CHECK("ctl_ev_cq_destroy", evq && mrc_destroy_cq(evq) == 0, "failed");

	/* clean up in order */
	CHECK("dereg", ibv_dereg_mr(h0.mr) == 0 && ibv_dereg_mr(h1.mr) == 0, "failed");
	CHECK("teardown", mrc_destroy_cq(h0.scq) == 0 && mrc_destroy_cq(h0.rcq) == 0 &&
	      mrc_destroy_cq(h1.scq) == 0 && mrc_destroy_cq(h1.rcq) == 0 &&
	      mrc_destroy_context(h0.mrc) == 0 && mrc_destroy_context(h1.mrc) == 0 &&
	      ibv_dealloc_pd(h0.pd) == 0 && ibv_dealloc_pd(h1.pd) == 0 &&
	      ibv_close_device(h0.ibv) == 0 && ibv_close_device(h1.ibv) == 0, "failed");
	free(h0.buf); /* nothing left for LeakSanitizer to find (tests/ocp/test_capi_sanitizers.py) */
	free(h1.buf);
	printf("%s\n", failures ? "FAILED" : "ALL OK");
	return failures ? 1 : 0;
}
