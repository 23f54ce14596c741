/*
 * mrc-testbed: lib_mrc.so, the OCP MRC controller API (mrc_ctl.h) on the testbed.
 *
 * What the testbed honours: versions, device attributes, port administrative state (a
 * disabled port is a plane whose EVs are DENIED on every QP of the host), EV events of the
 * host's EVs, and queries of the host's own EV and CC profile (id 0, the agent's --ev-count
 * and --cc). Configurable EV format, EV and CC profiles and endpoint probes are not offered:
 * the device advertises none (ev_max_profiles = 0, cc_max_profiles = 0, no
 * MRC_CTL_OPT_CAP_EP_OP_EV_PROBE), and the calls fail with the errors mrc_ctl.h documents for
 * that. docs/ocp-api.md has the table.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrc_ctl.h"
#include "mrc_int.h"

#define EXPORT __attribute__((visibility("default")))

static const char *algorithms[] = {"uet-1.0-nscc", "nscc", "ecn-delay", "fixed", NULL};

static int fail(int err, const char *fmt, const char *what)
{
	mtb_set_error(err, fmt, what);
	return -1;
}

EXPORT void mrc_ctl_query_version(uint32_t *current_version, uint32_t *last_supported_version,
				  uint32_t *vendor_version,
				  uint32_t *last_supported_vendor_version)
{
	if (current_version)
		*current_version = MRC_CTL_API_CURRENT_VERSION;
	if (last_supported_version)
		*last_supported_version = MRC_CTL_API_LAST_SUPPORTED_VERSION;
	if (vendor_version)
		*vendor_version = MRC_CTL_VENDOR_API_CURRENT_VERSION;
	if (last_supported_vendor_version)
		*last_supported_vendor_version = MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION;
}

static int ctl_query_device(struct ibv_context *context, struct mrc_ctl_device_attr *attr,
			    int *supported)
{
	struct mtb_context *m;
	struct mtb_sb sb;
	char *reply;
	uint64_t ev_count = 0;

	if (!context || !attr)
		return fail(EINVAL, "%s: context and ctl_attr are required", "mrc_ctl_query_device");
	memset(attr, 0, sizeof(*attr));
	m = mtb_from_ibv(context);
	if (!m) {
		if (supported) {
			*supported = 0;
			return 0;
		}
		return -1;
	}
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"query_device\"}");
	reply = mtb_call(m, &sb);
	mtb_sb_free(&sb);
	if (!reply)
		return -1;
	mtb_json_u64(reply, "ev_count", &ev_count);
	attr->mrc_ctl_protocol_version = MRC_CTL_PROTOCOL_VERSION_1;
	attr->ev.ev_max_fmt_profiles = 0;
	attr->ev.ev_max_profiles = 0;	/* only the host's own profile 0 */
	attr->ev.ev_max_count = (uint32_t)ev_count;
	attr->ev.ev_free_count = 0;
	attr->ev.ev_max_count_profile = (uint32_t)ev_count;
	attr->ev.ev_count_align = 1;
	attr->ev.ev_max_width = 32;
	attr->ev.ev_fmt_mode_mask = MRC_CTL_EV_FMT_MODE_STEV | MRC_CTL_EV_FMT_MODE_SRV6;
	attr->ev.ev_mode_mask = MRC_CTL_EV_MODE_GEN;
	attr->ev.ev_op_max_entries = 0;
	attr->cc.cc_max_profiles = 0;
	attr->cc.algorithms = algorithms;
	for (int p = 1; p <= m->nports && p < 32; p++)
		attr->phy_port_mask |= 1U << p;
	attr->opt_attr = MRC_CTL_OPT_CAP_EV_EVENT | MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT;
	if (supported)
		*supported = 1;
	return 0;
}

EXPORT int mrc_ctl_query_device(struct ibv_context *context, struct mrc_ctl_device_attr *ctl_attr)
{
	return ctl_query_device(context, ctl_attr, NULL);
}

EXPORT int mrc_ctl_query_device_ex(struct ibv_context *context, struct mrc_context *mcontext,
				   struct mrc_ctl_device_attr *ctl_attr, int *supported)
{
	if (mcontext && !mrc_ctx_check(mcontext, "mrc_ctl_query_device_ex"))
		return -1;
	if (!supported)
		return fail(EINVAL, "%s: supported is required", "mrc_ctl_query_device_ex");
	return ctl_query_device(context ? context : (mcontext ? mcontext->ibv : NULL), ctl_attr,
				supported);
}

/* -- ports ------------------------------------------------------------------------------------- */

EXPORT int mrc_ctl_query_port(struct mrc_context *context, uint8_t port_num,
			      struct mrc_ctl_port_attr *attr, int attr_mask)
{
	struct mtb_sb sb;
	char *reply;
	int active = 1;

	if (!mrc_ctx_check(context, "mrc_ctl_query_port"))
		return -1;
	if (!attr || attr_mask & ~MRC_CTL_PORT_ADMIN_STATE)
		return fail(EINVAL, "%s: expected attr and mask MRC_CTL_PORT_ADMIN_STATE",
			    "mrc_ctl_query_port");
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"query_port\",\"port\":%u}", port_num);
	reply = mtb_call(context->mtb, &sb);
	mtb_sb_free(&sb);
	if (!reply)
		return -1;
	mtb_json_bool(reply, "active", &active);
	if (attr_mask & MRC_CTL_PORT_ADMIN_STATE)
		attr->port_admin_state = active ? MRC_CTL_PORT_ADMIN_ENABLED
						: MRC_CTL_PORT_ADMIN_DISABLED;
	return 0;
}

EXPORT int mrc_ctl_modify_port(struct mrc_context *context, uint8_t port_num,
			       struct mrc_ctl_port_attr *attr, int attr_mask)
{
	struct mtb_sb sb;

	if (!mrc_ctx_check(context, "mrc_ctl_modify_port"))
		return -1;
	if (!attr || attr_mask & ~MRC_CTL_PORT_ADMIN_STATE)
		return fail(EINVAL, "%s: expected attr and mask MRC_CTL_PORT_ADMIN_STATE",
			    "mrc_ctl_modify_port");
	if (!(attr_mask & MRC_CTL_PORT_ADMIN_STATE))
		return 0;
	if (attr->port_admin_state != MRC_CTL_PORT_ADMIN_ENABLED &&
	    attr->port_admin_state != MRC_CTL_PORT_ADMIN_DISABLED)
		return fail(EINVAL, "%s: port_admin_state must be ENABLED or DISABLED",
			    "mrc_ctl_modify_port");
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"modify_port\",\"port\":%u,\"enabled\":%d}", port_num,
		      attr->port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED ? 1 : 0);
	if (!mtb_call(context->mtb, &sb)) {
		mtb_sb_free(&sb);
		return -1;
	}
	mtb_sb_free(&sb);
	return 0;
}

/* -- EV format, EV and CC profiles -------------------------------------------------------------- */

EXPORT int mrc_ctl_modify_ev_fmt_profile(struct mrc_context *mrc_ctx, uint64_t ev_fmt_profile_id,
					 struct mrc_ctl_ev_fmt_profile_attr *attr, int attr_mask)
{
	(void)ev_fmt_profile_id;
	(void)attr;
	(void)attr_mask;
	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_modify_ev_fmt_profile"))
		return -1;
	return fail(EINVAL, "%s: the testbed device has no configurable EV format profiles "
		    "(ev_max_fmt_profiles = 0)", "mrc_ctl_modify_ev_fmt_profile");
}

EXPORT int mrc_ctl_query_ev_fmt_profile(struct mrc_context *mrc_ctx, uint64_t ev_fmt_profile_id,
					struct mrc_ctl_ev_fmt_profile_attr *attr, int attr_mask)
{
	(void)ev_fmt_profile_id;
	(void)attr;
	(void)attr_mask;
	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_query_ev_fmt_profile"))
		return -1;
	return fail(EINVAL, "%s: the testbed device has no EV format profiles "
		    "(ev_max_fmt_profiles = 0)", "mrc_ctl_query_ev_fmt_profile");
}

EXPORT int mrc_ctl_modify_ev_profile(struct mrc_context *mrc_ctx, uint64_t ev_profile_id,
				     struct mrc_ctl_ev_profile_attr *attr, int attr_mask)
{
	(void)attr;
	(void)attr_mask;
	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_modify_ev_profile"))
		return -1;
	if (ev_profile_id == 0)
		return fail(EBUSY, "%s: profile 0 is the host's own and in use; the testbed has no "
			    "other EV profiles (ev_max_profiles = 0)", "mrc_ctl_modify_ev_profile");
	return fail(EINVAL, "%s: the testbed device has no configurable EV profiles "
		    "(ev_max_profiles = 0)", "mrc_ctl_modify_ev_profile");
}

EXPORT int mrc_ctl_query_ev_profile(struct mrc_context *mrc_ctx, uint64_t ev_profile_id,
				    struct mrc_ctl_ev_profile_attr *attr, int attr_mask)
{
	struct mtb_sb sb;
	char *reply;
	uint64_t ev_count = 0;
	const int plain = MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_CUR_STATE |
			  MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_COUNT |
			  MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK;

	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_query_ev_profile"))
		return -1;
	if (!attr)
		return fail(EINVAL, "%s: attr is required", "mrc_ctl_query_ev_profile");
	if (ev_profile_id != 0)
		return fail(EINVAL, "%s: only profile 0 (the host's own) exists",
			    "mrc_ctl_query_ev_profile");
	if ((attr_mask & MRC_CTL_EV_PROFILE_EV_OP) && (attr_mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP))
		return fail(EINVAL, "%s: EV_OP and EV_FIELDS_OP are mutually exclusive",
			    "mrc_ctl_query_ev_profile");
	if (attr_mask & ~plain)
		return fail(EINVAL, "%s: profile 0 answers STATE, CUR_STATE, MODE, COUNT, "
			    "MIN_ACTIVE and EVENT_MASK only", "mrc_ctl_query_ev_profile");
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"query_device\"}");
	reply = mtb_call(mrc_ctx->mtb, &sb);
	mtb_sb_free(&sb);
	if (!reply)
		return -1;
	mtb_json_u64(reply, "ev_count", &ev_count);
	if (attr_mask & MRC_CTL_EV_PROFILE_STATE)
		attr->profile_state = MRC_CTL_PROFILE_ONLINE;
	if (attr_mask & MRC_CTL_EV_PROFILE_CUR_STATE)
		attr->cur_profile_state = MRC_CTL_PROFILE_ONLINE;
	if (attr_mask & MRC_CTL_EV_PROFILE_MODE)
		attr->ev_mode = MRC_CTL_EV_MODE_GEN;
	if (attr_mask & MRC_CTL_EV_PROFILE_COUNT)
		attr->ev_count = (uint32_t)ev_count;
	if (attr_mask & MRC_CTL_EV_PROFILE_MIN_ACTIVE)
		attr->ev_min_active = 1;
	if (attr_mask & MRC_CTL_EV_PROFILE_EVENT_MASK)
		attr->ev_event_mask = MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD;
	return 0;
}

EXPORT int mrc_ctl_modify_cc_profile(struct mrc_context *mrc_ctx, uint64_t cc_profile_id,
				     struct mrc_ctl_cc_profile_attr *attr, int attr_mask)
{
	(void)attr;
	(void)attr_mask;
	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_modify_cc_profile"))
		return -1;
	if (cc_profile_id == 0)
		return fail(EBUSY, "%s: profile 0 is the host's own and in use (set it with "
			    "'mrc-host cc-profile'); the testbed has no other CC profiles",
			    "mrc_ctl_modify_cc_profile");
	return fail(EINVAL, "%s: the testbed device has no configurable CC profiles "
		    "(cc_max_profiles = 0)", "mrc_ctl_modify_cc_profile");
}

EXPORT int mrc_ctl_query_cc_profile(struct mrc_context *mrc_ctx, uint64_t cc_profile_id,
				    struct mrc_ctl_cc_profile_attr *attr, int attr_mask)
{
	static __thread char name[32];
	struct mtb_sb sb;
	char *reply;

	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_query_cc_profile"))
		return -1;
	if (!attr)
		return fail(EINVAL, "%s: attr is required", "mrc_ctl_query_cc_profile");
	if (cc_profile_id != 0)
		return fail(EINVAL, "%s: only profile 0 (the host's own) exists",
			    "mrc_ctl_query_cc_profile");
	if (attr_mask & ~(MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CUR_STATE |
			  MRC_CTL_CC_PROFILE_ALGORITHM))
		return fail(EINVAL, "%s: profile 0 answers STATE, CUR_STATE and ALGORITHM only",
			    "mrc_ctl_query_cc_profile");
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"query_device\"}");
	reply = mtb_call(mrc_ctx->mtb, &sb);
	mtb_sb_free(&sb);
	if (!reply)
		return -1;
	if (mtb_json_str(reply, "cc", name, sizeof(name)))
		snprintf(name, sizeof(name), "unknown");
	if (attr_mask & MRC_CTL_CC_PROFILE_STATE)
		attr->profile_state = MRC_CTL_PROFILE_ONLINE;
	if (attr_mask & MRC_CTL_CC_PROFILE_CUR_STATE)
		attr->cur_profile_state = MRC_CTL_PROFILE_ONLINE;
	if (attr_mask & MRC_CTL_CC_PROFILE_ALGORITHM) {
		attr->algorithm = NULL;
		for (int i = 0; algorithms[i]; i++)
			if (strcmp(algorithms[i], name) == 0)
				attr->algorithm = algorithms[i];
	}
	return 0;
}

/* -- EV events and endpoint operations ----------------------------------------------------------- */

EXPORT struct mrc_cq *mrc_ctl_create_ev_event_cq(struct mrc_context *mrc_ctx, int cqe,
						 void *cq_context,
						 struct mrc_comp_channel *channel, int comp_vector)
{
	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_create_ev_event_cq"))
		return NULL;
	return mrc_cq_create(mrc_ctx, cqe, cq_context, channel, comp_vector, 1);
}

/*
 * EV events of profile 0: state changes of the host's EVs to GOOD or ASSUMED_BAD. The EV value
 * is the 32-bit EV in network byte order in the first four bytes of val; port is the plane's
 * (1-based). drop_count is exact (MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT).
 */
EXPORT int mrc_ctl_poll_ev_event(struct mrc_cq *ev_cq, int num_entries,
				 struct mrc_ctl_ev_event *ev_event)
{
	struct mtb_sb sb;
	const char *cursor, *entry;
	char *reply;
	size_t stride;
	int n = 0;

	if (!ev_cq || ev_cq->magic != MRC_CQ_MAGIC || !ev_cq->ev_cq) {
		mtb_set_error(EINVAL, "mrc_ctl_poll_ev_event: not an EV event CQ");
		return -EINVAL;
	}
	if (num_entries < 0 || (num_entries > 0 && !ev_event)) {
		mtb_set_error(EINVAL, "mrc_ctl_poll_ev_event: expected num_entries >= 0 and an array");
		return -EINVAL;
	}
	if (num_entries == 0)
		return 0;
	/* an application built for API 1.0.0 has no state field in its events */
	stride = ev_cq->ctx->api_version >= MRC_API_VER(1, 0, 1)
			 ? sizeof(*ev_event)
			 : offsetof(struct mrc_ctl_ev_event, state);
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"poll_cq\",\"cq\":%llu,\"n\":%d}",
		      (unsigned long long)ev_cq->id, num_entries);
	reply = mtb_call(ev_cq->ctx->mtb, &sb);
	mtb_sb_free(&sb);
	if (!reply)
		return -errno;
	cursor = mtb_json_get(reply, "wc");
	if (!cursor)
		return -EPROTO;
	while (n < num_entries && (entry = mtb_json_next(&cursor))) {
		unsigned long long v[5] = {0};
		const char *p = entry;
		struct mrc_ctl_ev_event *out =
			(struct mrc_ctl_ev_event *)((char *)ev_event + (size_t)n * stride);
		uint32_t ev;

		for (int i = 0; i < 5; i++) {
			char *end;

			while (*p == '[' || *p == ',' || *p == ' ')
				p++;
			v[i] = strtoull(p, &end, 10);
			p = end;
		}
		memset(out, 0, stride);
		out->profile_id = v[0];
		ev = htobe32((uint32_t)v[1]);
		memcpy(out->ev.val, &ev, sizeof(ev));
		out->ev.port = (uint8_t)v[2];
		out->drop_count = (uint32_t)v[3];
		if (stride == sizeof(*ev_event))
			out->state = (enum mrc_ctl_ev_state)v[4];
		n++;
	}
	return n;
}

EXPORT int mrc_ctl_ep_batch_send_wait(struct mrc_context *mrc_ctx, uint8_t req_tc,
				      enum mrc_ctl_ep_op_type op_type,
				      struct mrc_ctl_ep_req *req, int num_req,
				      uint32_t rsp_timeout, struct mrc_ctl_ep_rsp *rsp,
				      int *num_rsp)
{
	(void)req_tc;
	(void)req;
	(void)rsp_timeout;
	(void)rsp;
	if (!mrc_ctx_check(mrc_ctx, "mrc_ctl_ep_batch_send_wait"))
		return -1;
	if (num_rsp)
		*num_rsp = 0;
	if (num_req < 0 || (unsigned int)op_type > MRC_CTL_EP_OP_PORT_STATUS_UPDATE)
		return fail(EINVAL, "%s: bad op_type or num_req", "mrc_ctl_ep_batch_send_wait");
	return fail(ENOTSUP, "%s: endpoint operations (EV probes, port status updates) are not "
		    "offered (no MRC_CTL_OPT_CAP_EP_OP_EV_PROBE); the transport probes EVs itself",
		    "mrc_ctl_ep_batch_send_wait");
}
