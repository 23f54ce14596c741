/*
 * What the OCP MRC API examples share: a fatal check, the clock, opening the verbs device that
 * supports MRC, registered buffers, the MRC context with its CQs, the QP's state changes
 * (RESET -> INIT with the host's profiles, INIT -> RTR -> RTS towards a peer QP) and the
 * rendezvous files through which the ends meet (testbed hosts
 * share the file system).
 *
 * An example defines EXAMPLE (its name, the prefix of its error lines) before including this
 * header; every function is static inline, so each example stays one translation unit and
 * need not use them all.
 */
#ifndef MRC_EXAMPLE_H
#define MRC_EXAMPLE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mrc.h"

#ifndef EXAMPLE
#error "define EXAMPLE (the program's name) before including mrc_example.h"
#endif

#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, EXAMPLE ": " __VA_ARGS__);              \
			fprintf(stderr, " (%s)\n", strerror(errno));             \
			exit(1);                                                 \
		}                                                                \
	} while (0)

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The verbs device named `name` (NULL: the first), opened; it must support MRC. */
static inline struct ibv_context *open_mrc_device(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);

	CHECK(list && n > 0, "no verbs device (run inside a testbed host: mrc-testbed exec)");
	struct ibv_device *dev = list[0];

	for (int i = 0; name && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			dev = list[i];
	struct ibv_context *ibv = ibv_open_device(dev);

	CHECK(ibv, "ibv_open_device %s", ibv_get_device_name(dev));
	ibv_free_device_list(list);
	struct mrc_device_attr dattr;
	int supported = 0;

	CHECK(mrc_query_device(ibv, &dattr, &supported) == 0 && supported,
	      "the device does not support MRC");
	return ibv;
}

/* A send and a receive buffer of `size` bytes, page-aligned, registered in `pd` (the receive
 * one zeroed and remotely writable) */
static inline void open_buffers(struct ibv_pd *pd, size_t size, void **sbuf, void **rbuf,
				struct ibv_mr **smr, struct ibv_mr **rmr)
{
	size_t pages = (size + 4095) / 4096 * 4096;

	*sbuf = aligned_alloc(4096, pages);
	*rbuf = aligned_alloc(4096, pages);
	CHECK(*sbuf && *rbuf, "buffers of %zu bytes", size);
	memset(*rbuf, 0, size);
	*smr = ibv_reg_mr(pd, *sbuf, size, IBV_ACCESS_LOCAL_WRITE);
	*rmr = ibv_reg_mr(pd, *rbuf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(*smr && *rmr, "ibv_reg_mr");
}

/* The MRC context of `ibv`, with a send and a receive CQ */
static inline struct mrc_context *open_mrc_context(struct ibv_context *ibv, int send_cqe,
						   int recv_cqe, struct mrc_cq **scq,
						   struct mrc_cq **rcq)
{
	struct mrc_context_attr cattr = {.mrc_api_version_used = MRC_API_CURRENT_VERSION};
	struct mrc_context *mrc = mrc_create_context(ibv, &cattr);

	CHECK(mrc, "mrc_create_context");
	*scq = mrc_create_cq(mrc, send_cqe, NULL, NULL, 0);
	*rcq = mrc_create_cq(mrc, recv_cqe, NULL, NULL, 0);
	CHECK(*scq && *rcq, "mrc_create_cq");
	return mrc;
}

/* Undo open_mrc_context, open_buffers (the buffers freed too), the PD and open_mrc_device;
 * the QPs must be destroyed first */
static inline void close_all(struct mrc_context *mrc, struct mrc_cq *scq, struct mrc_cq *rcq,
			     struct ibv_mr *smr, struct ibv_mr *rmr, struct ibv_pd *pd,
			     struct ibv_context *ibv)
{
	void *sbuf = smr->addr, *rbuf = rmr->addr;

	CHECK(mrc_destroy_cq(scq) == 0 && mrc_destroy_cq(rcq) == 0, "mrc_destroy_cq");
	CHECK(mrc_destroy_context(mrc) == 0, "mrc_destroy_context");
	CHECK(ibv_dereg_mr(smr) == 0 && ibv_dereg_mr(rmr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ibv) == 0, "ibv_close_device");
	free(sbuf);
	free(rbuf);
}

/* RESET -> INIT: the host's own EV and CC profiles (0), no hint */
static inline void init_qp(struct mrc_qp *qp)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_INIT};
	struct mrc_qp_attr ma = {.qp_hint = NULL};
	int rc;

	rc = mrc_modify_qp(qp, &va, IBV_QP_STATE, &ma,
			   MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID | MRC_QP_HINT);
	errno = rc;
	CHECK(rc == 0, "RESET -> INIT");
}

/* INIT -> RTR -> RTS towards the peer's QP `qpn` at `gid` */
static inline void connect_qp(struct mrc_qp *qp, uint32_t qpn, const union ibv_gid *gid)
{
	struct ibv_qp_attr va = {.qp_state = IBV_QPS_RTR, .dest_qp_num = qpn};
	struct mrc_qp_attr ma = {.wimm.max_wimm_dest = 64};
	int rc;

	va.ah_attr.is_global = 1;
	va.ah_attr.grh.dgid = *gid;
	rc = mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
			   &ma, MRC_QP_MAX_WIMM_DEST);
	errno = rc;
	CHECK(rc == 0, "INIT -> RTR");

	/* ACK timeout 1.024 us x 2^7 = 131 us: tens of round trips of a fabric whose RTT is a few
	 * microseconds (the testbed honours it in real-fabric time); retries without limit */
	va = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	ma = (struct mrc_qp_attr){.wimm.max_wimm = 64, .timeout = 7,
				  .retry = {.linear_cnt = 7, .exp_cnt = 25}};
	rc = mrc_modify_qp(qp, &va, IBV_QP_STATE | IBV_QP_SQ_PSN, &ma,
			   MRC_QP_MAX_WIMM | MRC_QP_TIMEOUT | MRC_QP_RETRY_CNT);
	errno = rc;
	CHECK(rc == 0, "RTR -> RTS");
}

/* DIR/NAME.SUFFIX holding `text`, written whole (through a temporary file and a rename) */
static inline void write_file(const char *dir, const char *name, const char *suffix,
			      const char *text)
{
	char path[512], tmp[520];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.%s", dir, name, suffix);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	CHECK(f, "cannot write %s", tmp);
	fputs(text, f);
	fclose(f);
	CHECK(rename(tmp, path) == 0, "rename %s", tmp);
}

/* Wait until DIR/NAME.SUFFIX exists (give up at `deadline`); with `line`, read its first line
 * (at most `size` bytes) once it has one. */
static inline void wait_file(const char *dir, const char *name, const char *suffix,
			     double deadline, char *line, size_t size)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s.%s", dir, name, suffix);
	for (;;) {
		FILE *f = fopen(path, "r");

		if (f) {
			int ok = !line || fgets(line, (int)size, f) != NULL;

			fclose(f);
			if (ok)
				return;
		}
		CHECK(now() < deadline, "%s never came (no %s)", name, path);
		usleep(10000);
	}
}

/* The next completion of `cq` (polled every 50 us; a completion in error or `deadline` passed
 * ends the program) */
static inline struct ibv_wc next_wc(struct mrc_cq *cq, double deadline)
{
	struct ibv_wc wc;

	for (;;) {
		int n = mrc_poll_cq(cq, 1, &wc);

		CHECK(n >= 0, "mrc_poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, EXAMPLE ": completion of wr %llu: %s\n",
					(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
				exit(1);
			}
			return wc;
		}
		CHECK(now() < deadline, "timed out waiting for a completion");
		usleep(50);
	}
}

/* A GID as 32 hex digits (`hex` holds at least 33 bytes), and back */
static inline void gid_to_hex(const union ibv_gid *gid, char *hex)
{
	for (int i = 0; i < 16; i++)
		sprintf(hex + 2 * i, "%02x", gid->raw[i]);
}

static inline void hex_to_gid(const char *hex, union ibv_gid *gid)
{
	for (int i = 0; i < 16; i++) {
		unsigned int b;

		sscanf(hex + 2 * i, "%2x", &b);
		gid->raw[i] = (uint8_t)b;
	}
}

#endif /* MRC_EXAMPLE_H */
