/*
 * What the C check programs of tests/ocp/c share: one line per check ("ok NAME", or
 * "FAIL NAME: why" with errno), a fatal setup error, and two testbed hosts' devices opened in one
 * process (found in MRC_TESTBED_RUN_DIR) with a QP of each connected to the other.
 *
 * A header of static functions, included by one program each: nothing to link.
 */
#ifndef MRC_TESTBED_CHECKS_H
#define MRC_TESTBED_CHECKS_H

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrc.h"

static int failures;
static pthread_mutex_t checks_out = PTHREAD_MUTEX_INITIALIZER; /* threads may check at once */

#define CHECK(name, cond, ...)                                              \
	do {                                                                \
		pthread_mutex_lock(&checks_out);                            \
		if (cond) {                                                 \
			printf("ok %s\n", name);                            \
		} else {                                                    \
			printf("FAIL %s: ", name);                          \
			printf(__VA_ARGS__);                                \
			printf(" (errno %d %s)\n", errno, strerror(errno)); \
			failures++;                                         \
		}                                                           \
		fflush(stdout);                                             \
		pthread_mutex_unlock(&checks_out);                          \
	} while (0)

#define DIE(...)                                                    \
	do {                                                        \
		printf("FAIL setup: " __VA_ARGS__);                 \
		printf(" (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);                                            \
	} while (0)

#define HOST_BUF 65536

/* A host's device with a QP: send CQ, receive CQ on a completion channel, HOST_BUF bytes
 * registered for local and remote writes. */
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

/* The device named name, opened (NULL when there is none). */
static inline struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

/* h (its name set) opened, with its QP at INIT taking wrs WRs each way; dies on failure. */
static inline void open_host(struct host *h, uint32_t wrs)
{
	struct mrc_qp_init_attr attr = {
		.sq_sig_all = 1,
		.cap = {.max_send_wr = wrs, .max_recv_wr = wrs, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {0};

	h->ibv = open_device(h->name);
	if (!h->ibv)
		DIE("no device %s", h->name);
	h->pd = ibv_alloc_pd(h->ibv);
	h->mrc = mrc_create_context(h->ibv, NULL);
	h->buf = aligned_alloc(4096, HOST_BUF);
	if (!h->pd || !h->mrc || !h->buf || mrc_create_comp_channel(h->mrc, &h->channel))
		DIE("open %s", h->name);
	memset(h->buf, 0x5a, HOST_BUF);
	h->mr = ibv_reg_mr(h->pd, h->buf, HOST_BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!h->mr || ibv_query_gid(h->ibv, 1, 0, &h->gid))
		DIE("memory or GID of %s", h->name);
	h->scq = mrc_create_cq(h->mrc, 2 * (int)wrs, NULL, NULL, 0);
	h->rcq = mrc_create_cq(h->mrc, 2 * (int)wrs, h, h->channel, 0);
	if (!h->scq || !h->rcq)
		DIE("CQs of %s", h->name);
	attr.send_cq = h->scq;
	attr.recv_cq = h->rcq;
	attr.pd = h->pd;
	h->qp = mrc_create_qp(h->mrc, &attr);
	if (!h->qp || mrc_modify_qp(h->qp, &va, IBV_QP_STATE, &ma, 0))
		DIE("QP of %s", h->name);
}

/* qp of host name (at INIT) to RTR and RTS towards peer_qp at peer_gid; dies on failure. */
static inline void connect_qp_to(const char *name, struct mrc_qp *qp, struct mrc_qp *peer_qp,
				 const union ibv_gid *peer_gid)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_RTR};
	struct mrc_qp_attr ma = {0};
	uint32_t qpn;

	mrc_get_qpn(peer_qp, &qpn);
	va.dest_qp_num = qpn;
	va.ah_attr.is_global = 1;
	va.ah_attr.grh.dgid = *peer_gid;
	if (mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &ma, 0))
		DIE("RTR on %s", name);
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	if (mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma, 0))
		DIE("RTS on %s", name);
}

/* Everything of an open host destroyed, in order (errors ignored: the checks are done). */
static inline void close_host(struct host *h)
{
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

#endif /* MRC_TESTBED_CHECKS_H */
