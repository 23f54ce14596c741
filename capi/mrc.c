/*
 * mrc-testbed: lib_mrc.so, the OCP MRC application API (mrc.h) on the testbed.
 *
 * Every call becomes a request to the host agent's OCP API socket (docs/ocp-api.md), sent on
 * the session of the ibv_context the application opened with the testbed's libibverbs.so.1.
 * Completion channels and asynchronous events have a connection each, on which the agent
 * pushes one line per event; their file descriptors are those connections.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrc.h"
#include "mrc_int.h"

#define EXPORT __attribute__((visibility("default")))

/* -- helpers ---------------------------------------------------------------------------------- */

static int fail(int err, const char *fmt, const char *what)
{
	mtb_set_error(err, fmt, what);
	return -1;
}

struct mrc_context *mrc_ctx_check(struct mrc_context *ctx, const char *fn)
{
	if (!ctx || ctx->magic != MRC_CTX_MAGIC) {
		fail(EINVAL, "%s: not an MRC context (NULL or destroyed)", fn);
		return NULL;
	}
	return ctx;
}

static struct mrc_cq *cq_check(struct mrc_cq *cq, const char *fn)
{
	if (!cq || cq->magic != MRC_CQ_MAGIC) {
		fail(EINVAL, "%s: not an MRC CQ (NULL or destroyed)", fn);
		return NULL;
	}
	return cq;
}

static struct mrc_qp *qp_check(struct mrc_qp *qp, const char *fn)
{
	if (!qp || qp->magic != MRC_QP_MAGIC) {
		fail(EINVAL, "%s: not an MRC QP (NULL or destroyed)", fn);
		return NULL;
	}
	return qp;
}

static char *call(struct mrc_context *ctx, struct mtb_sb *sb)
{
	char *reply = mtb_call(ctx->mtb, sb);

	mtb_sb_free(sb);
	return reply;
}

/* -- work requests held for a flush ----------------------------------------------------------- */
/*
 * The agent holds a QP's work requests; when it dies they die with it. So the library keeps
 * each WR it posted (wr_id, signaled) until its completion is polled, and when the agent is
 * lost, polling a CQ returns every WR still held by its QPs as IBV_WC_WR_FLUSH_ERR, as a QP
 * in ERR flushes them (docs/host-agent.md, "Failure behaviour").
 */

static void wrq_push(struct mrc_wr_queue *q, uint64_t wr_id, int signaled)
{
	if (q->len == q->cap && q->head) {
		memmove(q->wrs, q->wrs + q->head, (q->len - q->head) * sizeof(*q->wrs));
		q->len -= q->head;
		q->head = 0;
	}
	if (q->len == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 64;
		struct mrc_wr *p = realloc(q->wrs, cap * sizeof(*p));

		if (!p)
			return; /* posted all the same: only its flush would be missing */
		q->wrs = p;
		q->cap = cap;
	}
	q->wrs[q->len++] = (struct mrc_wr){.wr_id = wr_id, .signaled = (uint8_t)signaled};
}

/* The first WR held with wr_id completed; on a send queue (in_order), with the unsignaled ones
 * before it, which complete silently in order. A successful send completion is a signaled WR's;
 * a failed one may be an unsignaled WR's too (failed, as ibv_post_send(3) has it). */
static void wrq_done(struct mrc_wr_queue *q, uint64_t wr_id, int in_order, int failed)
{
	size_t i;

	for (i = q->head; i < q->len; i++)
		if (!q->wrs[i].done && q->wrs[i].wr_id == wr_id &&
		    (!in_order || failed || q->wrs[i].signaled))
			break;
	if (i == q->len)
		return;
	q->wrs[i].done = 1;
	for (size_t j = q->head; in_order && j < i; j++)
		if (!q->wrs[j].signaled)
			q->wrs[j].done = 1;
	while (q->head < q->len && q->wrs[q->head].done)
		q->head++;
	if (q->head == q->len)
		q->head = q->len = 0;
}

static void wrq_free(struct mrc_wr_queue *q)
{
	free(q->wrs);
	memset(q, 0, sizeof(*q));
}

/* Up to n WRs still held in q, as flushed completions of qpn into wc; returns how many. */
static int wrq_flush(struct mrc_wr_queue *q, uint32_t qpn, enum ibv_wc_opcode opcode,
		     struct ibv_wc *wc, int n)
{
	int k = 0;

	for (; q->head < q->len && k < n; q->head++) {
		if (q->wrs[q->head].done)
			continue;
		memset(&wc[k], 0, sizeof(wc[k]));
		wc[k].wr_id = q->wrs[q->head].wr_id;
		wc[k].status = IBV_WC_WR_FLUSH_ERR;
		wc[k].opcode = opcode;
		wc[k].qp_num = qpn;
		k++;
	}
	if (q->head == q->len)
		q->head = q->len = 0;
	return k;
}

/* The agent is gone: up to n WRs held by the QPs of cq, flushed. */
static int flush_held(struct mrc_cq *cq, int n, struct ibv_wc *wc)
{
	struct mrc_context *ctx = cq->ctx;
	int k = 0;

	pthread_mutex_lock(&ctx->lock);
	for (struct mrc_qp *q = ctx->qps; q && k < n; q = q->next) {
		if (q->init.send_cq == cq)
			k += wrq_flush(&q->sq, q->qpn, IBV_WC_RDMA_WRITE, wc + k, n - k);
		if (q->init.recv_cq == cq)
			k += wrq_flush(&q->rq, q->qpn, IBV_WC_RECV_RDMA_WITH_IMM, wc + k, n - k);
	}
	pthread_mutex_unlock(&ctx->lock);
	return k;
}

/* Does any QP of cq still hold a WR? (under ctx->lock) */
static int holds_wrs(struct mrc_cq *cq)
{
	int held = 0;

	for (struct mrc_qp *q = cq->ctx->qps; q && !held; q = q->next)
		held = (q->init.send_cq == cq && q->sq.head < q->sq.len) ||
		       (q->init.recv_cq == cq && q->rq.head < q->rq.len);
	return held;
}

/* Completions polled from the agent: their WRs are no longer held. */
static void held_completed(struct mrc_context *ctx, const struct ibv_wc *wc, int n)
{
	struct mrc_qp *q = NULL;

	pthread_mutex_lock(&ctx->lock);
	for (int i = 0; i < n; i++) {
		if (!q || q->qpn != wc[i].qp_num)
			for (q = ctx->qps; q && q->qpn != wc[i].qp_num; q = q->next)
				;
		if (!q)
			continue;
		if (wc[i].opcode & IBV_WC_RECV)
			wrq_done(&q->rq, wc[i].wr_id, 0, 1);
		else
			wrq_done(&q->sq, wc[i].wr_id, 1, wc[i].status != IBV_WC_SUCCESS);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* -- versions, device ------------------------------------------------------------------------- */

EXPORT void mrc_query_version(uint32_t *current_version, uint32_t *last_supported_version,
			      uint32_t *vendor_version, uint32_t *last_supported_vendor_version)
{
	if (current_version)
		*current_version = MRC_API_CURRENT_VERSION;
	if (last_supported_version)
		*last_supported_version = MRC_API_LAST_SUPPORTED_VERSION;
	if (vendor_version)
		*vendor_version = MRC_VENDOR_API_CURRENT_VERSION;
	if (last_supported_vendor_version)
		*last_supported_vendor_version = MRC_VENDOR_API_LAST_SUPPORTED_VERSION;
}

static int query_device(struct ibv_context *context, struct mrc_device_attr *attr, int *supported)
{
	struct mtb_context *m;
	char *reply;
	uint64_t v;

	if (!context || !attr || !supported)
		return fail(EINVAL, "%s: context, attr and supported are required", "mrc_query_device");
	memset(attr, 0, sizeof(*attr));
	m = mtb_from_ibv(context);
	if (!m) { /* another provider's device: no MRC there */
		*supported = 0;
		return 0;
	}
	reply = mtb_query_device(m);
	if (!reply)
		return -1;
	if (!mtb_json_u64(reply, "protocol_version", &v))
		attr->mrc_protocol_version = (uint32_t)v;
	if (!mtb_json_u64(reply, "max_wimm", &v))
		attr->wimm_attr.max_wimm = (uint16_t)v;
	if (!mtb_json_u64(reply, "max_wimm_dest", &v))
		attr->wimm_attr.max_wimm_dest = (uint16_t)v;
	if (!mtb_json_u64(reply, "max_mpr", &v))
		attr->mpr_attr.max_mpr = (uint8_t)v;
	if (!mtb_json_u64(reply, "mpr_resolution", &v))
		attr->mpr_attr.mpr_resolution = (uint8_t)v;
	if (!mtb_json_u64(reply, "cap", &v))
		attr->cap = (uint32_t)v;
	attr->qp_attr.max_qp_hint = MRC_MAX_QP_HINTS;
	*supported = 1;
	return 0;
}

EXPORT int mrc_query_device(struct ibv_context *context, struct mrc_device_attr *attr,
			    int *supported)
{
	return query_device(context, attr, supported);
}

EXPORT int mrc_query_device_ex(struct ibv_context *context, struct mrc_context *mcontext,
			       struct mrc_device_attr *attr, int *supported)
{
	if (mcontext && !mrc_ctx_check(mcontext, "mrc_query_device_ex"))
		return -1;
	if (mcontext && context && mcontext->ibv != context)
		return fail(EINVAL, "%s: the MRC context belongs to another verbs context",
			    "mrc_query_device_ex");
	return query_device(context ? context : (mcontext ? mcontext->ibv : NULL), attr,
			    supported);
}

/* -- context ------------------------------------------------------------------------------------ */

static int attach(struct mrc_context *ctx, struct mtb_conn *conn, const char *role,
		  uint64_t *id)
{
	struct mtb_sb sb;
	char *reply;

	if (mtb_connect(conn, ctx->mtb->sock_path) < 0)
		return -1;
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"attach\",\"session\":%llu,\"token\":%llu,\"role\":\"%s\"}",
		      (unsigned long long)ctx->mtb->session, (unsigned long long)ctx->mtb->token,
		      role);
	reply = mtb_call_conn(conn, &sb);
	mtb_sb_free(&sb);
	if (!reply) {
		int err = errno;

		mtb_close(conn);
		errno = err;
		return -1;
	}
	if (id && mtb_json_u64(reply, "channel", id)) {
		mtb_close(conn);
		return fail(EPROTO, "%s: no channel number in the agent's reply", "attach");
	}
	return 0;
}

EXPORT struct mrc_context *mrc_create_context(struct ibv_context *vcontext,
					      struct mrc_context_attr *context_attr)
{
	struct mtb_context *m = mtb_from_ibv(vcontext);
	struct mrc_context *ctx;
	uint32_t used = MRC_API_CURRENT_VERSION;

	if (!m)
		return NULL;
	if (context_attr && context_attr->mrc_api_version_used) {
		used = context_attr->mrc_api_version_used;
		if (used > MRC_API_CURRENT_VERSION) { /* the oldest supported is 0.0.0 */
			mtb_set_error(EPROTONOSUPPORT, "mrc_create_context: API version %#x: the "
				      "library supports up to %#x", used, MRC_API_CURRENT_VERSION);
			return NULL;
		}
	}
	if (context_attr && context_attr->mrc_vendor_api_version_used >
				    MRC_VENDOR_API_CURRENT_VERSION) {
		mtb_set_error(EPROTONOSUPPORT, "mrc_create_context: vendor API version %#x: the "
			      "library supports up to %#x", context_attr->mrc_vendor_api_version_used,
			      MRC_VENDOR_API_CURRENT_VERSION);
		return NULL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->magic = MRC_CTX_MAGIC;
	ctx->ibv = vcontext;
	ctx->mtb = m;
	ctx->api_version = used;
	ctx->async.fd = -1;
	pthread_mutex_init(&ctx->lock, NULL);
	if (attach(ctx, &ctx->async, "async", NULL) < 0) {
		int err = errno;

		pthread_mutex_destroy(&ctx->lock);
		free(ctx);
		errno = err;
		return NULL;
	}
	if (vcontext->async_fd < 0)
		vcontext->async_fd = ctx->async.fd; /* what an application polls before
						     * mrc_get_async_event, as with verbs */
	return ctx;
}

EXPORT int mrc_destroy_context(struct mrc_context *mrc_ctx)
{
	if (!mrc_ctx_check(mrc_ctx, "mrc_destroy_context"))
		return -1;
	if (mrc_ctx->qps || mrc_ctx->cqs || mrc_ctx->channels || mrc_ctx->hints) {
		mtb_set_error(EBUSY, "mrc_destroy_context: destroy its QPs (%d), CQs (%d), channels "
			      "(%d) and QP hints (%d) first", mrc_ctx->nqps, mrc_ctx->ncqs,
			      mrc_ctx->channels, mrc_ctx->hints);
		return -1;
	}
	if (mrc_ctx->ibv->async_fd == mrc_ctx->async.fd)
		mrc_ctx->ibv->async_fd = -1;
	mtb_close(&mrc_ctx->async);
	mrc_ctx->magic = 0;
	pthread_mutex_destroy(&mrc_ctx->lock);
	free(mrc_ctx);
	return 0;
}

/* -- completion channels ------------------------------------------------------------------------ */

EXPORT int mrc_create_comp_channel(struct mrc_context *mrc_ctx, struct mrc_comp_channel **channel)
{
	struct mrc_comp_channel *ch;
	uint64_t id;

	if (!mrc_ctx_check(mrc_ctx, "mrc_create_comp_channel"))
		return -1;
	if (!channel)
		return fail(EINVAL, "%s: channel is required", "mrc_create_comp_channel");
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return -1;
	}
	if (attach(mrc_ctx, &ch->conn, "channel", &id) < 0) {
		int err = errno;

		free(ch);
		errno = err;
		return -1;
	}
	ch->magic = MRC_CH_MAGIC;
	ch->ctx = mrc_ctx;
	ch->id = id;
	pthread_mutex_lock(&mrc_ctx->lock);
	mrc_ctx->channels++;
	pthread_mutex_unlock(&mrc_ctx->lock);
	*channel = ch;
	return 0;
}

EXPORT int mrc_get_comp_channel_fd(struct mrc_comp_channel *channel, int *fd)
{
	if (!channel || channel->magic != MRC_CH_MAGIC || !fd)
		return fail(EINVAL, "%s: not a completion channel, or fd is NULL",
			    "mrc_get_comp_channel_fd");
	*fd = channel->conn.fd;
	return 0;
}

EXPORT int mrc_destroy_comp_channel(struct mrc_comp_channel *channel)
{
	if (!channel || channel->magic != MRC_CH_MAGIC)
		return fail(EINVAL, "%s: not a completion channel", "mrc_destroy_comp_channel");
	if (channel->refs)
		return fail(EBUSY, "%s: CQs still use the channel", "mrc_destroy_comp_channel");
	pthread_mutex_lock(&channel->ctx->lock);
	channel->ctx->channels--;
	pthread_mutex_unlock(&channel->ctx->lock);
	mtb_close(&channel->conn);
	channel->magic = 0;
	free(channel);
	return 0;
}

/* -- CQs -------------------------------------------------------------------------------------------- */

struct mrc_cq *mrc_cq_create(struct mrc_context *ctx, int cqe, void *cq_context,
			     struct mrc_comp_channel *channel, int comp_vector, int ev_cq)
{
	struct mrc_cq *cq;
	char *reply;
	uint64_t id;

	if (cqe < 1) {
		fail(EINVAL, "%s: cqe must be at least 1", "mrc_create_cq");
		return NULL;
	}
	if (channel && channel->magic != MRC_CH_MAGIC) {
		fail(EINVAL, "%s: not a completion channel", "mrc_create_cq");
		return NULL;
	}
	if (channel && channel->ctx != ctx) {
		fail(EINVAL, "%s: the channel belongs to another MRC context", "mrc_create_cq");
		return NULL;
	}
	if (comp_vector != 0) {
		fail(EINVAL, "%s: the device has one completion vector (0)", "mrc_create_cq");
		return NULL;
	}
	reply = mtb_callf(ctx->mtb, "{\"cmd\":\"%s\",\"cqe\":%d,\"channel\":%llu}",
			  ev_cq ? "create_ev_cq" : "create_cq", cqe,
			  channel ? (unsigned long long)channel->id : 0ULL);
	if (!reply)
		return NULL;
	if (mtb_json_u64(reply, "cq", &id)) {
		fail(EPROTO, "%s: no CQ number in the agent's reply", "mrc_create_cq");
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	cq->magic = MRC_CQ_MAGIC;
	cq->ctx = ctx;
	cq->id = id;
	cq->cq_context = cq_context;
	cq->channel = channel;
	cq->cqe = cqe;
	cq->ev_cq = ev_cq;
	pthread_mutex_lock(&ctx->lock);
	cq->next = ctx->cqs;
	ctx->cqs = cq;
	ctx->ncqs++;
	if (channel)
		channel->refs++;
	pthread_mutex_unlock(&ctx->lock);
	return cq;
}

EXPORT struct mrc_cq *mrc_create_cq(struct mrc_context *mrc_ctx, int cqe, void *cq_context,
				    struct mrc_comp_channel *channel, int comp_vector)
{
	if (!mrc_ctx_check(mrc_ctx, "mrc_create_cq"))
		return NULL;
	return mrc_cq_create(mrc_ctx, cqe, cq_context, channel, comp_vector, 0);
}

EXPORT int mrc_poll_cq(struct mrc_cq *cq, int num_entries, struct ibv_wc *wc)
{
	const char *cursor, *entry;
	char *reply;
	int n = 0;

	if (!cq_check(cq, "mrc_poll_cq"))
		return -1;
	if (cq->ev_cq)
		return fail(EINVAL, "%s: an EV event CQ is polled with mrc_ctl_poll_ev_event",
			    "mrc_poll_cq");
	if (num_entries < 0 || (num_entries > 0 && !wc))
		return fail(EINVAL, "%s: expected num_entries >= 0 and a wc array", "mrc_poll_cq");
	if (num_entries == 0)
		return 0;
	reply = mtb_callf(cq->ctx->mtb, "{\"cmd\":\"poll_cq\",\"cq\":%llu,\"n\":%d}",
			  (unsigned long long)cq->id, num_entries);
	if (!reply) {
		int err = errno;

		if (mtb_lost(cq->ctx->mtb))
			return flush_held(cq, num_entries, wc);
		errno = err;
		return -1;
	}
	cursor = mtb_json_get(reply, "wc");
	if (!cursor)
		return fail(EPROTO, "%s: no completions in the agent's reply", "mrc_poll_cq");
	while (n < num_entries && (entry = mtb_json_next(&cursor))) {
		uint64_t v[7];

		mtb_json_u64s(entry, v, 7);
		memset(&wc[n], 0, sizeof(wc[n]));
		wc[n].wr_id = v[0];
		wc[n].status = (enum ibv_wc_status)v[1];
		wc[n].opcode = (enum ibv_wc_opcode)v[2];
		wc[n].byte_len = (uint32_t)v[3];
		wc[n].imm_data = (__be32)v[4];
		wc[n].qp_num = (uint32_t)v[5];
		wc[n].wc_flags = (unsigned int)v[6];
		n++;
	}
	held_completed(cq->ctx, wc, n);
	return n;
}

EXPORT int mrc_destroy_cq(struct mrc_cq *cq)
{
	struct mrc_context *ctx;

	if (!cq_check(cq, "mrc_destroy_cq"))
		return -1;
	if (cq->events_got != cq->events_acked)
		return fail(EBUSY, "%s: acknowledge every CQ event (mrc_ack_cq_events) first",
			    "mrc_destroy_cq");
	ctx = cq->ctx;
	if (!mtb_callf(ctx->mtb, "{\"cmd\":\"destroy_cq\",\"cq\":%llu}", (unsigned long long)cq->id) &&
	    !mtb_lost(ctx->mtb))
		return -1;
	pthread_mutex_lock(&ctx->lock);
	for (struct mrc_cq **p = &ctx->cqs; *p; p = &(*p)->next)
		if (*p == cq) {
			*p = cq->next;
			break;
		}
	ctx->ncqs--;
	if (cq->channel)
		cq->channel->refs--;
	pthread_mutex_unlock(&ctx->lock);
	cq->magic = 0;
	free(cq);
	return 0;
}

EXPORT int mrc_req_notify_cq(struct mrc_cq *cq, int solicited_only)
{

	if (!cq_check(cq, "mrc_req_notify_cq"))
		return EINVAL;
	return mtb_callf(cq->ctx->mtb, "{\"cmd\":\"req_notify_cq\",\"cq\":%llu,\"solicited\":%d}",
			 (unsigned long long)cq->id, solicited_only ? 1 : 0) ? 0 : errno;
}

EXPORT int mrc_get_cq_event(struct mrc_comp_channel *channel, struct mrc_cq **cq,
			    void **cq_context)
{
	struct mrc_context *ctx;
	char *line;
	uint64_t id;

	if (!channel || channel->magic != MRC_CH_MAGIC || !cq || !cq_context)
		return fail(EINVAL, "%s: expected a completion channel, cq and cq_context",
			    "mrc_get_cq_event");
	ctx = channel->ctx;
	for (;;) {
		line = mtb_read_line(&channel->conn);
		if (!line && channel->conn.lost) {
			/* the agent is gone: each CQ of the channel holding WRs gets one event, for
			 * the flushed completions mrc_poll_cq returns */
			struct mrc_cq *found = NULL;

			pthread_mutex_lock(&ctx->lock);
			for (struct mrc_cq *c = ctx->cqs; c && !found; c = c->next)
				if (c->channel == channel && !c->flush_told && holds_wrs(c))
					found = c;
			if (found) {
				found->flush_told = 1;
				found->events_got++;
				*cq = found;
				*cq_context = found->cq_context;
			}
			pthread_mutex_unlock(&ctx->lock);
			if (found)
				return 0;
			return fail(EIO, "%s: the device is lost (the mrc-host agent is gone)",
				    "mrc_get_cq_event");
		}
		if (!line)
			return -1;
		if (mtb_json_u64(line, "cq", &id))
			continue;
		pthread_mutex_lock(&ctx->lock);
		for (struct mrc_cq *c = ctx->cqs; c; c = c->next)
			if (c->id == id) {
				c->events_got++;
				*cq = c;
				*cq_context = c->cq_context;
				pthread_mutex_unlock(&ctx->lock);
				return 0;
			}
		pthread_mutex_unlock(&ctx->lock);
	}
}

EXPORT void mrc_ack_cq_events(struct mrc_cq *cq, unsigned int nevents)
{
	if (cq && cq->magic == MRC_CQ_MAGIC)
		__atomic_add_fetch(&cq->events_acked, nevents, __ATOMIC_RELAXED);
}

/* -- asynchronous events ------------------------------------------------------------------------ */

EXPORT int mrc_get_async_event(struct mrc_context *mrc_ctx, struct mrc_async_event *event)
{
	char *line;
	int64_t type, v;

	if (!mrc_ctx_check(mrc_ctx, "mrc_get_async_event"))
		return -1;
	if (!event)
		return fail(EINVAL, "%s: event is required", "mrc_get_async_event");
	for (;;) {
		line = mrc_ctx->fatal_told ? NULL : mtb_read_line(&mrc_ctx->async);
		if (!line && mrc_ctx->async.lost && !mrc_ctx->fatal_told) {
			/* the agent is gone: the device is lost, once (what it held is flushed) */
			mrc_ctx->fatal_told = 1;
			memset(event, 0, sizeof(*event));
			event->event_type = IBV_EVENT_DEVICE_FATAL;
			return 0;
		}
		if (!line)
			return mrc_ctx->fatal_told ? fail(EIO, "%s: the device is lost (the mrc-host "
							  "agent is gone)", "mrc_get_async_event") : -1;
		if (mtb_json_i64(line, "type", &type))
			continue;
		memset(event, 0, sizeof(*event));
		event->event_type = (enum ibv_event_type)type;
		if (!mtb_json_i64(line, "qpn", &v)) {
			pthread_mutex_lock(&mrc_ctx->lock);
			for (struct mrc_qp *q = mrc_ctx->qps; q; q = q->next)
				if (q->qpn == (uint32_t)v)
					event->element.qp = q;
			pthread_mutex_unlock(&mrc_ctx->lock);
			if (!event->element.qp)
				continue; /* destroyed meanwhile */
		} else if (!mtb_json_i64(line, "cq", &v)) {
			pthread_mutex_lock(&mrc_ctx->lock);
			for (struct mrc_cq *c = mrc_ctx->cqs; c; c = c->next)
				if (c->id == (uint64_t)v)
					event->element.cq = c;
			pthread_mutex_unlock(&mrc_ctx->lock);
			if (!event->element.cq)
				continue;
		} else if (!mtb_json_i64(line, "port", &v)) {
			event->element.port_num = (int)v;
		}
		return 0;
	}
}

EXPORT void mrc_ack_async_event(struct mrc_async_event *event)
{
	(void)event; /* nothing is held for an event */
}

/* -- QP hints (kept by the library: advice the emulated device has no use for) ---------------------- */

#define HINT_MASK_ALL (MRC_QP_HINT_NUM_QPS_PER_PEER | MRC_QP_HINT_NUM_SEND_PEERS | \
		       MRC_QP_HINT_NUM_REMOTE_RECV_PEERS | MRC_QP_HINT_VENDOR_CFG)

static int vendor_cfg_empty(const uint8_t *cfg, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (cfg[i])
			return 0;
	return 1;
}

static int hint_set(struct mrc_qp_hint *hint, const struct mrc_qp_hint_attr *attr, int mask,
		    const char *fn)
{
	if (mask & ~HINT_MASK_ALL)
		return fail(EINVAL, "%s: unknown bits in the attribute mask", fn);
	if ((mask & MRC_QP_HINT_NUM_QPS_PER_PEER && attr->num_qps_per_peer < 0) ||
	    (mask & MRC_QP_HINT_NUM_SEND_PEERS && attr->num_send_peers < 0) ||
	    (mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS && attr->num_remote_recv_peers < 0))
		return fail(EINVAL, "%s: hint counts must be >= 0", fn);
	if (mask & MRC_QP_HINT_VENDOR_CFG &&
	    !vendor_cfg_empty(attr->vendor_cfg, sizeof(attr->vendor_cfg)))
		return fail(EINVAL, "%s: the testbed has no vendor-specific hints", fn);
	if (mask & MRC_QP_HINT_NUM_QPS_PER_PEER)
		hint->attr.num_qps_per_peer = attr->num_qps_per_peer;
	if (mask & MRC_QP_HINT_NUM_SEND_PEERS)
		hint->attr.num_send_peers = attr->num_send_peers;
	if (mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS)
		hint->attr.num_remote_recv_peers = attr->num_remote_recv_peers;
	return 0;
}

EXPORT struct mrc_qp_hint *mrc_create_qp_hint(struct mrc_context *mrc_ctx,
					      struct mrc_qp_hint_init_attr *init_attr)
{
	struct mrc_qp_hint *hint;

	if (!mrc_ctx_check(mrc_ctx, "mrc_create_qp_hint"))
		return NULL;
	if (!init_attr) {
		fail(EINVAL, "%s: init_attr is required", "mrc_create_qp_hint");
		return NULL;
	}
	if (mrc_ctx->hints >= MRC_MAX_QP_HINTS) {
		fail(ENOMEM, "%s: at most max_qp_hint hints", "mrc_create_qp_hint");
		return NULL;
	}
	hint = calloc(1, sizeof(*hint));
	if (!hint) {
		errno = ENOMEM;
		return NULL;
	}
	hint->magic = MRC_HINT_MAGIC;
	hint->ctx = mrc_ctx;
	if (hint_set(hint, &init_attr->attr, MRC_QP_HINT_NUM_QPS_PER_PEER |
		     MRC_QP_HINT_NUM_SEND_PEERS | MRC_QP_HINT_NUM_REMOTE_RECV_PEERS |
		     MRC_QP_HINT_VENDOR_CFG, "mrc_create_qp_hint")) {
		int err = errno;

		free(hint);
		errno = err;
		return NULL;
	}
	pthread_mutex_lock(&mrc_ctx->lock);
	hint->id = ++mrc_ctx->next_hint;
	mrc_ctx->hints++;
	pthread_mutex_unlock(&mrc_ctx->lock);
	return hint;
}

static struct mrc_qp_hint *hint_check(struct mrc_qp_hint *hint, const char *fn)
{
	if (!hint || hint->magic != MRC_HINT_MAGIC) {
		fail(EINVAL, "%s: not a QP hint (NULL or destroyed)", fn);
		return NULL;
	}
	return hint;
}

EXPORT int mrc_destroy_qp_hint(struct mrc_qp_hint *qp_hint)
{
	if (!hint_check(qp_hint, "mrc_destroy_qp_hint"))
		return -1;
	if (qp_hint->refs)
		return fail(EBUSY, "%s: QPs still use the hint", "mrc_destroy_qp_hint");
	pthread_mutex_lock(&qp_hint->ctx->lock);
	qp_hint->ctx->hints--;
	pthread_mutex_unlock(&qp_hint->ctx->lock);
	qp_hint->magic = 0;
	free(qp_hint);
	return 0;
}

EXPORT int mrc_query_qp_hint(struct mrc_qp_hint *qp_hint, struct mrc_qp_hint_attr *qp_hint_attr,
			     int qp_hint_attr_mask)
{
	if (!hint_check(qp_hint, "mrc_query_qp_hint"))
		return -1;
	if (!qp_hint_attr || qp_hint_attr_mask & ~HINT_MASK_ALL)
		return fail(EINVAL, "%s: expected attr and a valid mask", "mrc_query_qp_hint");
	if (qp_hint_attr_mask & MRC_QP_HINT_NUM_QPS_PER_PEER)
		qp_hint_attr->num_qps_per_peer = qp_hint->attr.num_qps_per_peer;
	if (qp_hint_attr_mask & MRC_QP_HINT_NUM_SEND_PEERS)
		qp_hint_attr->num_send_peers = qp_hint->attr.num_send_peers;
	if (qp_hint_attr_mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS)
		qp_hint_attr->num_remote_recv_peers = qp_hint->attr.num_remote_recv_peers;
	if (qp_hint_attr_mask & MRC_QP_HINT_VENDOR_CFG)
		memset(qp_hint_attr->vendor_cfg, 0, sizeof(qp_hint_attr->vendor_cfg));
	return 0;
}

EXPORT int mrc_modify_qp_hint(struct mrc_qp_hint *qp_hint, struct mrc_qp_hint_attr *qp_hint_attr,
			      int qp_hint_attr_mask)
{
	if (!hint_check(qp_hint, "mrc_modify_qp_hint"))
		return -1;
	if (!qp_hint_attr)
		return fail(EINVAL, "%s: attr is required", "mrc_modify_qp_hint");
	return hint_set(qp_hint, qp_hint_attr, qp_hint_attr_mask, "mrc_modify_qp_hint");
}

/* -- QPs ---------------------------------------------------------------------------------------- */

EXPORT struct mrc_qp *mrc_create_qp(struct mrc_context *mrc_ctx,
				    struct mrc_qp_init_attr *attr)
{
	struct mrc_qp *qp;
	char *reply;
	uint64_t qpn;

	if (!mrc_ctx_check(mrc_ctx, "mrc_create_qp"))
		return NULL;
	if (!attr) {
		fail(EINVAL, "%s: init attributes are required", "mrc_create_qp");
		return NULL;
	}
	if (!cq_check(attr->send_cq, "mrc_create_qp (send_cq)") ||
	    !cq_check(attr->recv_cq, "mrc_create_qp (recv_cq)"))
		return NULL;
	if (attr->send_cq->ctx != mrc_ctx || attr->recv_cq->ctx != mrc_ctx ||
	    attr->send_cq->ev_cq || attr->recv_cq->ev_cq) {
		fail(EINVAL, "%s: send_cq and recv_cq must be completion CQs of this context",
		     "mrc_create_qp");
		return NULL;
	}
	if (!attr->pd || attr->pd->context != mrc_ctx->ibv) {
		fail(EINVAL, "%s: pd must be a protection domain of the context's device",
		     "mrc_create_qp");
		return NULL;
	}
	if (attr->cap.max_send_wr < 1) {
		fail(EINVAL, "%s: cap.max_send_wr must be at least 1", "mrc_create_qp");
		return NULL;
	}
	reply = mtb_callf(mrc_ctx->mtb, "{\"cmd\":\"create_qp\",\"send_cq\":%llu,\"recv_cq\":%llu,"
			  "\"max_send_wr\":%u,\"max_recv_wr\":%u,\"max_send_sge\":%u,"
			  "\"max_recv_sge\":%u,\"max_inline\":%u,\"sq_sig_all\":%d,"
			  "\"send_ops\":%llu,\"protocol_version\":%u,\"pd\":%u}",
			  (unsigned long long)attr->send_cq->id, (unsigned long long)attr->recv_cq->id,
			  attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
			  attr->cap.max_recv_sge, attr->cap.max_inline_data, attr->sq_sig_all ? 1 : 0,
			  (unsigned long long)attr->send_ops_flags, (unsigned int)attr->protocol_version,
			  attr->pd->handle);
	if (!reply)
		return NULL;
	if (mtb_json_u64(reply, "qpn", &qpn)) {
		fail(EPROTO, "%s: no QP number in the agent's reply", "mrc_create_qp");
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->magic = MRC_QP_MAGIC;
	qp->ctx = mrc_ctx;
	qp->qpn = (uint32_t)qpn;
	qp->init = *attr;
	pthread_mutex_lock(&mrc_ctx->lock);
	qp->next = mrc_ctx->qps;
	mrc_ctx->qps = qp;
	mrc_ctx->nqps++;
	pthread_mutex_unlock(&mrc_ctx->lock);
	return qp;
}

EXPORT int mrc_destroy_qp(struct mrc_qp *qp)
{
	struct mrc_context *ctx;

	if (!qp_check(qp, "mrc_destroy_qp"))
		return -1;
	ctx = qp->ctx;
	if (!mtb_callf(ctx->mtb, "{\"cmd\":\"destroy_qp\",\"qpn\":%u}", qp->qpn) &&
	    !mtb_lost(ctx->mtb))
		return -1; /* with the agent gone, what is left is freed here */
	pthread_mutex_lock(&ctx->lock);
	for (struct mrc_qp **p = &ctx->qps; *p; p = &(*p)->next)
		if (*p == qp) {
			*p = qp->next;
			break;
		}
	ctx->nqps--;
	if (qp->hint)
		qp->hint->refs--;
	pthread_mutex_unlock(&ctx->lock);
	wrq_free(&qp->sq);
	wrq_free(&qp->rq);
	qp->magic = 0;
	free(qp);
	return 0;
}

EXPORT int mrc_get_qpn(struct mrc_qp *qp, uint32_t *qpn)
{
	if (!qp_check(qp, "mrc_get_qpn"))
		return -1;
	if (!qpn)
		return fail(EINVAL, "%s: qpn is required", "mrc_get_qpn");
	*qpn = qp->qpn;
	return 0;
}

/* verbs attributes MRC QPs refuse; those MRC leaves unused (port, access flags, P_Key, path
 * MTU, RNR, RD_ATOMIC, timeout and retry count) go to the agent, which maps IBV_QP_TIMEOUT and
 * IBV_QP_RETRY_CNT to their MRC counterparts and ignores the others with a line in its log */
#define IBV_UNSUPPORTED (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_QKEY | IBV_QP_CAP | \
			 IBV_QP_EN_SQD_ASYNC_NOTIFY)
#define IBV_ACCEPTED (IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | \
		      IBV_QP_RQ_PSN | IBV_QP_SQ_PSN | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | \
		      IBV_QP_PATH_MTU | IBV_QP_PORT | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | \
		      IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_QP_RD_ATOMIC | \
		      IBV_QP_MAX_DEST_RD_ATOMIC)
#define MRC_MASK_ALL (MRC_QP_MAX_WIMM | MRC_QP_MAX_WIMM_DEST | MRC_QP_MPR | MRC_QP_MPR_DEST | \
		      MRC_QP_TIMEOUT | MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID | MRC_QP_HINT | \
		      MRC_QP_RETRY_CNT | MRC_QP_CAP | MRC_QP_VENDOR_CFG)

EXPORT int mrc_modify_qp(struct mrc_qp *qp, struct ibv_qp_attr *vattr, int vattr_mask,
			 struct mrc_qp_attr *mrc_attr, int mrc_attr_mask)
{
	struct mtb_sb sb;
	char gid[33];

	if (!qp_check(qp, "mrc_modify_qp"))
		return EINVAL;
	if ((vattr_mask && !vattr) || (mrc_attr_mask && !mrc_attr)) {
		fail(EINVAL, "%s: a mask without its attribute structure", "mrc_modify_qp");
		return EINVAL;
	}
	if (vattr_mask & IBV_UNSUPPORTED) {
		mtb_set_error(EINVAL, "mrc_modify_qp: ibv attribute mask %#x not supported by MRC "
			      "QPs (IBV_QP_ALT_PATH, PATH_MIG_STATE, QKEY, CAP)",
			      vattr_mask & IBV_UNSUPPORTED);
		return EINVAL;
	}
	if (vattr_mask & ~(IBV_ACCEPTED | IBV_UNSUPPORTED)) {
		mtb_set_error(EINVAL, "mrc_modify_qp: unknown ibv attribute mask bits %#x",
			      vattr_mask & ~(IBV_ACCEPTED | IBV_UNSUPPORTED));
		return EINVAL;
	}
	if (mrc_attr_mask & ~MRC_MASK_ALL) {
		mtb_set_error(EINVAL, "mrc_modify_qp: unknown MRC attribute mask bits %#x",
			      mrc_attr_mask & ~MRC_MASK_ALL);
		return EINVAL;
	}
	if (mrc_attr_mask & MRC_QP_VENDOR_CFG &&
	    !vendor_cfg_empty(mrc_attr->vendor_cfg, sizeof(mrc_attr->vendor_cfg))) {
		fail(EINVAL, "%s: the testbed has no vendor-specific QP configuration",
		     "mrc_modify_qp");
		return EINVAL;
	}
	if (mrc_attr_mask & MRC_QP_HINT && mrc_attr->qp_hint &&
	    (!hint_check(mrc_attr->qp_hint, "mrc_modify_qp") ||
	     mrc_attr->qp_hint->ctx != qp->ctx)) {
		fail(EINVAL, "%s: qp_hint is not a hint of this context", "mrc_modify_qp");
		return EINVAL;
	}
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"modify_qp\",\"qpn\":%u", qp->qpn);
	if (vattr_mask & IBV_QP_STATE)
		mtb_sb_printf(&sb, ",\"state\":%d", (int)vattr->qp_state);
	if (vattr_mask & IBV_QP_CUR_STATE)
		mtb_sb_printf(&sb, ",\"cur_state\":%d", (int)vattr->cur_qp_state);
	if (vattr_mask & IBV_QP_AV) {
		if (!vattr->ah_attr.is_global) {
			mtb_sb_free(&sb);
			fail(EINVAL, "%s: IBV_QP_AV needs is_global = 1 and the peer's GID (RoCEv2)",
			     "mrc_modify_qp");
			return EINVAL;
		}
		mtb_hex_encode(vattr->ah_attr.grh.dgid.raw, 16, gid);
		mtb_sb_printf(&sb, ",\"dgid\":\"%s\"", gid);
	}
	if (vattr_mask & IBV_QP_DEST_QPN)
		mtb_sb_printf(&sb, ",\"dest_qpn\":%u", vattr->dest_qp_num);
	if (vattr_mask & IBV_QP_RQ_PSN)
		mtb_sb_printf(&sb, ",\"rq_psn\":%u", vattr->rq_psn);
	if (vattr_mask & IBV_QP_SQ_PSN)
		mtb_sb_printf(&sb, ",\"sq_psn\":%u", vattr->sq_psn);
	if (vattr_mask & IBV_QP_PORT)
		mtb_sb_printf(&sb, ",\"ibv_port\":%u", vattr->port_num);
	if (vattr_mask & IBV_QP_ACCESS_FLAGS)
		mtb_sb_printf(&sb, ",\"ibv_access_flags\":%u", vattr->qp_access_flags);
	if (vattr_mask & IBV_QP_PKEY_INDEX)
		mtb_sb_printf(&sb, ",\"ibv_pkey_index\":%u", vattr->pkey_index);
	if (vattr_mask & IBV_QP_PATH_MTU)
		mtb_sb_printf(&sb, ",\"ibv_path_mtu\":%d", (int)vattr->path_mtu);
	if (vattr_mask & IBV_QP_MIN_RNR_TIMER)
		mtb_sb_printf(&sb, ",\"ibv_min_rnr_timer\":%u", vattr->min_rnr_timer);
	if (vattr_mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		mtb_sb_printf(&sb, ",\"ibv_max_dest_rd_atomic\":%u", vattr->max_dest_rd_atomic);
	if (vattr_mask & IBV_QP_TIMEOUT)
		mtb_sb_printf(&sb, ",\"ibv_timeout\":%u", vattr->timeout);
	if (vattr_mask & IBV_QP_RETRY_CNT)
		mtb_sb_printf(&sb, ",\"ibv_retry_cnt\":%u", vattr->retry_cnt);
	if (vattr_mask & IBV_QP_RNR_RETRY)
		mtb_sb_printf(&sb, ",\"ibv_rnr_retry\":%u", vattr->rnr_retry);
	if (vattr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
		mtb_sb_printf(&sb, ",\"ibv_max_rd_atomic\":%u", vattr->max_rd_atomic);
	if (mrc_attr_mask & MRC_QP_MAX_WIMM)
		mtb_sb_printf(&sb, ",\"max_wimm\":%u", mrc_attr->wimm.max_wimm);
	if (mrc_attr_mask & MRC_QP_MAX_WIMM_DEST)
		mtb_sb_printf(&sb, ",\"max_wimm_dest\":%u", mrc_attr->wimm.max_wimm_dest);
	if (mrc_attr_mask & MRC_QP_MPR)
		mtb_sb_printf(&sb, ",\"mpr\":%u", mrc_attr->mpr.mpr);
	if (mrc_attr_mask & MRC_QP_MPR_DEST)
		mtb_sb_printf(&sb, ",\"mpr_dest\":%u", mrc_attr->mpr.mpr_dest);
	if (mrc_attr_mask & MRC_QP_TIMEOUT)
		mtb_sb_printf(&sb, ",\"timeout\":%u", mrc_attr->timeout);
	if (mrc_attr_mask & MRC_QP_EV_PROFILE_ID)
		mtb_sb_printf(&sb, ",\"ev_profile\":%llu",
			      (unsigned long long)mrc_attr->profile.ev_profile_id);
	if (mrc_attr_mask & MRC_QP_CC_PROFILE_ID)
		mtb_sb_printf(&sb, ",\"cc_profile\":%llu",
			      (unsigned long long)mrc_attr->profile.cc_profile_id);
	if (mrc_attr_mask & MRC_QP_RETRY_CNT)
		mtb_sb_printf(&sb, ",\"retry_linear\":%u,\"retry_exp\":%u",
			      mrc_attr->retry.linear_cnt, mrc_attr->retry.exp_cnt);
	if (mrc_attr_mask & MRC_QP_CAP)
		mtb_sb_printf(&sb, ",\"cap\":%u", mrc_attr->cap);
	if (mrc_attr_mask & MRC_QP_HINT)
		mtb_sb_printf(&sb, ",\"hint\":%llu",
			      mrc_attr->qp_hint ? (unsigned long long)mrc_attr->qp_hint->id : 0ULL);
	mtb_sb_printf(&sb, "}");
	if (!call(qp->ctx, &sb))
		return errno;
	if (mrc_attr_mask & MRC_QP_HINT) {
		pthread_mutex_lock(&qp->ctx->lock);
		if (qp->hint)
			qp->hint->refs--;
		qp->hint = mrc_attr->qp_hint;
		if (qp->hint)
			qp->hint->refs++;
		pthread_mutex_unlock(&qp->ctx->lock);
	}
	return 0;
}

EXPORT int mrc_query_qp(struct mrc_qp *qp, struct ibv_qp_attr *vattr, int vattr_mask,
			struct mrc_qp_attr *mrc_attr, int mrc_attr_mask,
			struct mrc_qp_init_attr *init_attr)
{
	char *reply, gid[40] = "";
	uint64_t v;

	if (!qp_check(qp, "mrc_query_qp"))
		return EINVAL;
	if ((vattr_mask && !vattr) || (mrc_attr_mask && !mrc_attr)) {
		fail(EINVAL, "%s: a mask without its attribute structure", "mrc_query_qp");
		return EINVAL;
	}
	reply = mtb_callf(qp->ctx->mtb, "{\"cmd\":\"query_qp\",\"qpn\":%u}", qp->qpn);
	if (!reply)
		return errno;
	if (vattr) {
		memset(vattr, 0, sizeof(*vattr));
		if (!mtb_json_u64(reply, "state", &v))
			vattr->qp_state = vattr->cur_qp_state = (enum ibv_qp_state)v;
		if (!mtb_json_u64(reply, "dest_qpn", &v))
			vattr->dest_qp_num = (uint32_t)v;
		if (!mtb_json_u64(reply, "rq_psn", &v))
			vattr->rq_psn = (uint32_t)v;
		if (!mtb_json_u64(reply, "sq_psn", &v))
			vattr->sq_psn = (uint32_t)v;
		if (!mtb_json_str(reply, "dgid", gid, sizeof(gid)) && strlen(gid) == 32) {
			vattr->ah_attr.is_global = 1;
			mtb_hex_decode(gid, vattr->ah_attr.grh.dgid.raw, 16);
		}
		vattr->path_mtu = IBV_MTU_4096;
		vattr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
		vattr->cap = qp->init.cap;
	}
	if (mrc_attr) {
		memset(mrc_attr, 0, sizeof(*mrc_attr));
		if (mrc_attr_mask & MRC_QP_MAX_WIMM && !mtb_json_u64(reply, "max_wimm", &v))
			mrc_attr->wimm.max_wimm = (uint16_t)v;
		if (mrc_attr_mask & MRC_QP_MAX_WIMM_DEST && !mtb_json_u64(reply, "max_wimm_dest", &v))
			mrc_attr->wimm.max_wimm_dest = (uint16_t)v;
		if (mrc_attr_mask & MRC_QP_MPR && !mtb_json_u64(reply, "mpr", &v))
			mrc_attr->mpr.mpr = (uint8_t)v;
		if (mrc_attr_mask & MRC_QP_MPR_DEST && !mtb_json_u64(reply, "mpr_dest", &v))
			mrc_attr->mpr.mpr_dest = (uint8_t)v;
		if (mrc_attr_mask & MRC_QP_TIMEOUT && !mtb_json_u64(reply, "timeout", &v))
			mrc_attr->timeout = (uint8_t)v;
		if (mrc_attr_mask & MRC_QP_EV_PROFILE_ID && !mtb_json_u64(reply, "ev_profile", &v))
			mrc_attr->profile.ev_profile_id = v;
		if (mrc_attr_mask & MRC_QP_CC_PROFILE_ID && !mtb_json_u64(reply, "cc_profile", &v))
			mrc_attr->profile.cc_profile_id = v;
		if (mrc_attr_mask & MRC_QP_RETRY_CNT) {
			if (!mtb_json_u64(reply, "retry_linear", &v))
				mrc_attr->retry.linear_cnt = (uint8_t)v;
			if (!mtb_json_u64(reply, "retry_exp", &v))
				mrc_attr->retry.exp_cnt = (uint8_t)v;
		}
		if (mrc_attr_mask & MRC_QP_CAP && !mtb_json_u64(reply, "cap", &v))
			mrc_attr->cap = (uint32_t)v;
		if (mrc_attr_mask & MRC_QP_HINT)
			mrc_attr->qp_hint = qp->hint;
	}
	if (init_attr)
		*init_attr = qp->init;
	return 0;
}

/* -- work requests ------------------------------------------------------------------------------- */

static void put_sges(struct mtb_sb *sb, const struct ibv_sge *sg, int n)
{
	mtb_sb_printf(sb, "[");
	for (int i = 0; i < n; i++)
		mtb_sb_printf(sb, "%s[%llu,%u,%u]", i ? "," : "", (unsigned long long)sg[i].addr,
			      sg[i].length, sg[i].lkey);
	mtb_sb_printf(sb, "]");
}

/* The WRs of a chain from wr up to end (excluded) were posted: hold them until completed. */
static void held_sends(struct mrc_qp *qp, void *chain, void *end)
{
	const struct ibv_send_wr *wr = chain;

	pthread_mutex_lock(&qp->ctx->lock);
	for (; wr && wr != end; wr = wr->next)
		wrq_push(&qp->sq, wr->wr_id,
			 qp->init.sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED));
	pthread_mutex_unlock(&qp->ctx->lock);
}

static void held_recvs(struct mrc_qp *qp, void *chain, void *end)
{
	const struct ibv_recv_wr *wr = chain;

	pthread_mutex_lock(&qp->ctx->lock);
	for (; wr && wr != end; wr = wr->next)
		wrq_push(&qp->rq, wr->wr_id, 1);
	pthread_mutex_unlock(&qp->ctx->lock);
}

/* What posting a chain needs of a kind of work request (send or receive). */
struct wr_kind {
	const char *fn;	 /* the API function, in errors */
	const char *cmd; /* the agent's command */
	size_t next, sg_list, num_sge; /* where the WR's fields are (offsetof) */
	void (*put)(struct mtb_sb *sb, void *wr); /* the WR up to its SGE list */
	void (*hold)(struct mrc_qp *qp, void *wr, void *end);
};

#define WR_FIELD(wr, offset, type) (*(type *)((char *)(wr) + (offset)))
#define WR_LAYOUT(type) offsetof(type, next), offsetof(type, sg_list), offsetof(type, num_sge)

/* *bad_wr = wr, for a bad_wr of either kind of work request (NULL: nothing to set). */
static void set_bad(void *bad_wr, void *wr)
{
	if (bad_wr)
		memcpy(bad_wr, &wr, sizeof(wr));
}

/*
 * Post the chain from wr. It goes to the agent in requests of at most MTB_POST_BATCH work
 * requests (a request line has a size limit, and a chain may be as long as the queue): the WRs
 * before a refused one are posted, those after it are not, as ibv_post_send(3) has it. 0 when
 * every WR was posted; else the errno value, *bad_wr the first WR not posted.
 */
static int post_chain(struct mrc_qp *qp, void *wr, const struct wr_kind *kind, void *bad_wr)
{
	struct mtb_sb sb;
	void *first = wr; /* the first WR of the request being written */
	int n = 0;

	set_bad(bad_wr, wr);
	if (!qp_check(qp, kind->fn))
		return EINVAL;
	if (!wr) {
		fail(EINVAL, "%s: no work request", kind->fn);
		return EINVAL;
	}
	for (void *w = wr; w; w = WR_FIELD(w, kind->next, void *)) {
		int num = WR_FIELD(w, kind->num_sge, int);

		if (num < 0 || (num > 0 && !WR_FIELD(w, kind->sg_list, struct ibv_sge *))) {
			set_bad(bad_wr, w);
			fail(EINVAL, "%s: a work request with a bad SGE list", kind->fn);
			return EINVAL;
		}
	}
	mtb_sb_init(&sb);
	for (void *w = wr; w; w = WR_FIELD(w, kind->next, void *)) {
		void *next = WR_FIELD(w, kind->next, void *);

		if (!n)
			mtb_sb_printf(&sb, "{\"cmd\":\"%s\",\"qpn\":%u,\"wrs\":[", kind->cmd, qp->qpn);
		mtb_sb_printf(&sb, "%s", n ? "," : "");
		kind->put(&sb, w);
		put_sges(&sb, WR_FIELD(w, kind->sg_list, struct ibv_sge *),
			 WR_FIELD(w, kind->num_sge, int));
		mtb_sb_printf(&sb, "]");
		if (++n < MTB_POST_BATCH && next)
			continue;
		mtb_sb_printf(&sb, "]}");
		char *reply = call(qp->ctx, &sb);
		int err = errno;

		mtb_sb_free(&sb);
		if (!reply) {
			int64_t refused = mtb_last_bad();
			void *b = first;

			for (int64_t i = 0; i < refused && b; i++)
				b = WR_FIELD(b, kind->next, void *);
			if (!mtb_lost(qp->ctx->mtb))
				kind->hold(qp, first, b); /* the agent took those before it */
			set_bad(bad_wr, b ? b : first);
			errno = err;
			return err;
		}
		kind->hold(qp, first, next);
		first = next;
		n = 0;
	}
	set_bad(bad_wr, NULL);
	return 0;
}

static void put_recv(struct mtb_sb *sb, void *wr)
{
	mtb_sb_printf(sb, "[%llu,", (unsigned long long)((struct ibv_recv_wr *)wr)->wr_id);
}

static const struct wr_kind recv_kind = {
	"mrc_post_recv", "post_recv", WR_LAYOUT(struct ibv_recv_wr), put_recv, held_recvs,
};

EXPORT int mrc_post_recv(struct mrc_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	int err = post_chain(qp, wr, &recv_kind, bad_wr);

	if (!err)
		return 0;
	errno = err;
	return -1; /* as mrc.h has it */
}

static void put_send(struct mtb_sb *sb, void *wr)
{
	struct ibv_send_wr *w = wr;

	mtb_sb_printf(sb, "[%llu,%d,%u,%u,%llu,%u,", (unsigned long long)w->wr_id, (int)w->opcode,
		      w->send_flags, (unsigned int)w->imm_data,
		      (unsigned long long)w->wr.rdma.remote_addr, w->wr.rdma.rkey);
}

static const struct wr_kind send_kind = {
	"mrc_post_send", "post_send", WR_LAYOUT(struct ibv_send_wr), put_send, held_sends,
};

EXPORT int mrc_post_send(struct mrc_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	return post_chain(qp, wr, &send_kind, bad_wr); /* the errno value, as ibv_post_send */
}
