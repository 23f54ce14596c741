/*
 * mrc-testbed: the objects behind lib_mrc.so's opaque handles (private to the library).
 */
#ifndef MRC_INT_H
#define MRC_INT_H

#include <pthread.h>
#include <stdint.h>

#include "mtb.h"

#define MRC_CTX_MAGIC 0x4d5243435458ULL	/* MRCCTX */
#define MRC_CQ_MAGIC 0x4d5243435151ULL	/* MRCCQQ */
#define MRC_QP_MAGIC 0x4d5243515050ULL	/* MRCQPP */
#define MRC_CH_MAGIC 0x4d5243434348ULL	/* MRCCCH */
#define MRC_HINT_MAGIC 0x4d5243484e54ULL	/* MRCHNT */
#define MRC_MAX_QP_HINTS 64

struct mrc_qp_hint {
	uint64_t magic;
	struct mrc_context *ctx;
	uint64_t id;
	int refs;
	struct mrc_qp_hint_attr attr;
};

struct mrc_comp_channel {
	uint64_t magic;
	struct mrc_context *ctx;
	struct mtb_conn conn;	/* the agent pushes {"event":"cq","cq":N} lines here */
	uint64_t id;
	int refs;
};

struct mrc_cq {
	uint64_t magic;
	struct mrc_context *ctx;
	struct mrc_cq *next;
	uint64_t id;
	void *cq_context;
	struct mrc_comp_channel *channel;
	int cqe;
	int ev_cq;		/* an EV event CQ of the controller API */
	unsigned int events_got;
	unsigned int events_acked;
	int flush_told;		/* its channel announced the flush of a lost agent */
};

/* A work request posted and not yet completed: kept to flush it when the agent is lost. */
struct mrc_wr {
	uint64_t wr_id;
	uint8_t signaled;
	uint8_t done;
};

/* The work requests of one queue of a QP, oldest first: entries [head, len) of wrs. */
struct mrc_wr_queue {
	struct mrc_wr *wrs;
	size_t head;
	size_t len;
	size_t cap;
};

struct mrc_qp {
	uint64_t magic;
	struct mrc_context *ctx;
	struct mrc_qp *next;
	uint32_t qpn;
	struct mrc_qp_init_attr init;
	struct mrc_qp_hint *hint;
	struct mrc_wr_queue sq;	/* under ctx->lock */
	struct mrc_wr_queue rq;
};

struct mrc_context {
	uint64_t magic;
	struct ibv_context *ibv;
	struct mtb_context *mtb;
	uint32_t api_version;
	pthread_mutex_t lock;	/* the lists and counts below */
	struct mtb_conn async;	/* the agent pushes asynchronous events here */
	struct mrc_cq *cqs;
	struct mrc_qp *qps;
	int ncqs;
	int nqps;
	int channels;
	int hints;
	uint64_t next_hint;
	int fatal_told;		/* IBV_EVENT_DEVICE_FATAL was handed out (the agent is gone) */
};

MTB_HIDDEN struct mrc_context *mrc_ctx_check(struct mrc_context *ctx, const char *fn);
MTB_HIDDEN struct mrc_cq *mrc_cq_create(struct mrc_context *ctx, int cqe, void *cq_context,
					struct mrc_comp_channel *channel, int comp_vector,
					int ev_cq);

#endif /* MRC_INT_H */
