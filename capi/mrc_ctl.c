/*
 * mrc-testbed: lib_mrc.so, the OCP MRC controller API (mrc_ctl.h) on the testbed.
 *
 * What the testbed honours: versions, device attributes, port administrative state (a
 * disabled port is a plane whose EVs are DENIED on every QP of the host), EV events, EV
 * format, EV and CC profiles (kept by the agent, host/agent/ocp_profiles.py; id 0 is the
 * host's own), and endpoint requests (connectionless EV probes on any EV and port status
 * updates, sent by the transport's endpoint). docs/ocp-api.md has the table.
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
	reply = mtb_query_device(m);
	if (!reply)
		return -1;
	mtb_json_u64(reply, "ev_count", &ev_count);
	attr->mrc_ctl_protocol_version = MRC_CTL_PROTOCOL_VERSION_1;
	attr->ev.ev_max_fmt_profiles = 64;
	attr->ev.ev_max_profiles = 64;	/* besides the host's own profile 0 */
	attr->ev.ev_max_count = 64 * 4096;
	attr->ev.ev_free_count = 64 * 4096;
	attr->ev.ev_max_count_profile = 4096;
	attr->ev.ev_count_align = 1;
	/* the widest EV of any format: SRV6 with an SRH (a carrier and a segment, 256 bits);
	 * STEV EVs are at most 32 bits, UDP 16, plain SRV6 128 (checked per format) */
	attr->ev.ev_max_width = MRC_CTL_EV_MAX_BYTES * 8;
	attr->ev.ev_fmt_mode_mask = MRC_CTL_EV_FMT_MODE_STEV | MRC_CTL_EV_FMT_MODE_SRV6 |
				    MRC_CTL_EV_FMT_MODE_UDP;
	attr->ev.ev_mode_mask = MRC_CTL_EV_MODE_AUTO | MRC_CTL_EV_MODE_EXP | MRC_CTL_EV_MODE_GEN;
	(void)ev_count;
	attr->ev.ev_op_max_entries = 0;
	attr->cc.cc_max_profiles = 64;	/* besides the host's own profile 0 */
	attr->cc.algorithms = algorithms;
	for (int p = 1; p <= m->nports && p < 32; p++)
		attr->phy_port_mask |= 1U << p;
	attr->opt_attr = MRC_CTL_OPT_CAP_EV_EVENT | MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT |
			 MRC_CTL_OPT_CAP_EP_OP_EV_PROBE;
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
	char *reply;
	int active = 1;

	if (!mrc_ctx_check(context, "mrc_ctl_query_port"))
		return -1;
	if (!attr || attr_mask & ~MRC_CTL_PORT_ADMIN_STATE)
		return fail(EINVAL, "%s: expected attr and mask MRC_CTL_PORT_ADMIN_STATE",
			    "mrc_ctl_query_port");
	reply = mtb_callf(context->mtb, "{\"cmd\":\"query_port\",\"port\":%u}", port_num);
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
	return mtb_callf(context->mtb, "{\"cmd\":\"modify_port\",\"port\":%u,\"enabled\":%d}",
			 port_num, attr->port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED ? 1 : 0) ? 0 : -1;
}

/* -- EV format and EV profiles (host/agent/ocp_profiles.py keeps them) ------------------------- */

static int vendor_cfg_set(const uint8_t *cfg, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (cfg[i])
			return 1;
	return 0;
}

/*
 * EVs cross to the agent as hex strings of the whole mrc_ctl_ev_t (MRC_CTL_EV_MAX_BYTES): the
 * agent reads as many bytes as the EV's format fills (STEV / UDP: a 32-bit value in network
 * byte order in the first four; SRV6: 16, a uSID carrier; SRV6+SRH: 32, the carrier then the
 * SRH's single segment) and answers with 16 or 32 bytes (get_ev), the rest zero.
 */
static void put_ev(struct mtb_sb *sb, const struct mrc_ctl_ev *ev)
{
	char hex[2 * MRC_CTL_EV_MAX_BYTES + 1];

	mtb_hex_encode(ev->val, MRC_CTL_EV_MAX_BYTES, hex);
	mtb_sb_printf(sb, "\"%s\",%u", hex, ev->port);
}

/* The EV of a JSON string starting at or after p: 32 or 64 hex digits into val (zero-filled);
 * returns where the string's closing quote is (NULL when there is none). */
static const char *get_ev(const char *p, mrc_ctl_ev_t val)
{
	char hex[2 * MRC_CTL_EV_MAX_BYTES + 1];
	size_t len;

	memset(val, 0, MRC_CTL_EV_MAX_BYTES);
	while (*p && *p != '"' && *p != ']')
		p++;
	if (*p != '"')
		return NULL;
	if (sscanf(p + 1, "%64[0-9a-f]", hex) == 1) {
		len = strlen(hex);
		if (len == 32 || len == 2 * MRC_CTL_EV_MAX_BYTES)
			mtb_hex_decode(hex, val, len / 2);
	}
	return strchr(p + 1, '"');
}

static int fmt_call(struct mrc_context *ctx, uint64_t id, struct mrc_ctl_ev_fmt_profile_attr *attr,
		    int mask, int modify, const char *fn)
{
	struct mtb_sb sb;
	const char *cursor, *item;
	char *reply;
	uint64_t v;
	int n = 0;

	if (!mrc_ctx_check(ctx, fn))
		return -1;
	if (!attr)
		return fail(EINVAL, "%s: attr is required", fn);
	if (mask & MRC_CTL_EV_FMT_VENDOR_CFG && modify &&
	    vendor_cfg_set(attr->vendor_cfg, sizeof(attr->vendor_cfg)))
		return fail(EINVAL, "%s: the testbed has no vendor-specific configuration", fn);
	if (mask & MRC_CTL_EV_FMT_PROFILE_OP && !modify &&
	    attr->ev_fmt_op.op != MRC_CTL_EV_FMT_OP_QUERY_FIELDS)
		return fail(EINVAL, "%s: a query takes MRC_CTL_EV_FMT_OP_QUERY_FIELDS only", fn);
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"ev_fmt_profile\",\"op\":\"%s\",\"id\":%llu,\"mask\":%u",
		      modify ? "modify" : "query", (unsigned long long)id,
		      (unsigned int)mask & 0x7fffffffu);
	if (modify && mask & MRC_CTL_EV_FMT_PROFILE_STATE)
		mtb_sb_printf(&sb, ",\"state\":%d", (int)attr->profile_state);
	if (modify && mask & MRC_CTL_EV_FMT_PROFILE_CUR_STATE)
		mtb_sb_printf(&sb, ",\"cur_state\":%d", (int)attr->cur_profile_state);
	if (modify && mask & MRC_CTL_EV_FMT_PROFILE_MODE)
		mtb_sb_printf(&sb, ",\"mode\":%u", (unsigned int)attr->ev_fmt_mode);
	if (mask & MRC_CTL_EV_FMT_PROFILE_OP) {
		mtb_sb_printf(&sb, ",\"fields_op\":%d", (int)attr->ev_fmt_op.op);
		if (attr->ev_fmt_op.op == MRC_CTL_EV_FMT_OP_MODIFY_FIELDS) {
			if (attr->ev_fmt_op.fmt_field_count < 0 ||
			    (attr->ev_fmt_op.fmt_field_count > 0 && !attr->ev_fmt_op.fmt_fields)) {
				mtb_sb_free(&sb);
				return fail(EINVAL, "%s: fmt_fields and fmt_field_count disagree", fn);
			}
			mtb_sb_printf(&sb, ",\"fields\":[");
			for (int i = 0; i < attr->ev_fmt_op.fmt_field_count; i++)
				mtb_sb_printf(&sb, "%s%u", i ? "," : "",
					      attr->ev_fmt_op.fmt_fields[i].width);
			mtb_sb_printf(&sb, "]");
		}
	}
	mtb_sb_printf(&sb, "}");
	reply = mtb_call(ctx->mtb, &sb);
	mtb_sb_free(&sb);
	if (!reply)
		return -1;
	if (!modify) {
		if (mask & MRC_CTL_EV_FMT_PROFILE_STATE && !mtb_json_u64(reply, "state", &v))
			attr->profile_state = (enum mrc_ctl_profile_state)v;
		if (mask & MRC_CTL_EV_FMT_PROFILE_CUR_STATE && !mtb_json_u64(reply, "state", &v))
			attr->cur_profile_state = (enum mrc_ctl_profile_state)v;
		if (mask & MRC_CTL_EV_FMT_PROFILE_MODE && !mtb_json_u64(reply, "mode", &v))
			attr->ev_fmt_mode = (enum mrc_ctl_ev_fmt_mode)v;
		if (mask & MRC_CTL_EV_FMT_VENDOR_CFG)
			memset(attr->vendor_cfg, 0, sizeof(attr->vendor_cfg));
	}
	if (mask & MRC_CTL_EV_FMT_PROFILE_OP &&
	    attr->ev_fmt_op.op == MRC_CTL_EV_FMT_OP_QUERY_FIELDS) {
		cursor = mtb_json_get(reply, "fields");
		int total = 0;

		for (const char *c = cursor; c && mtb_json_next(&c);)
			total++;
		if (total > attr->ev_fmt_op.fmt_field_count || (total && !attr->ev_fmt_op.fmt_fields)) {
			attr->ev_fmt_op.fmt_field_count = total;
			return fail(E2BIG, "%s: more format fields than the array holds", fn);
		}
		while (cursor && (item = mtb_json_next(&cursor)))
			attr->ev_fmt_op.fmt_fields[n++].width = (uint8_t)strtoul(item, NULL, 10);
		attr->ev_fmt_op.fmt_field_count = n;
	}
	return 0;
}

EXPORT int mrc_ctl_modify_ev_fmt_profile(struct mrc_context *mrc_ctx, uint64_t ev_fmt_profile_id,
					 struct mrc_ctl_ev_fmt_profile_attr *attr, int attr_mask)
{
	return fmt_call(mrc_ctx, ev_fmt_profile_id, attr, attr_mask, 1,
			"mrc_ctl_modify_ev_fmt_profile");
}

EXPORT int mrc_ctl_query_ev_fmt_profile(struct mrc_context *mrc_ctx, uint64_t ev_fmt_profile_id,
					struct mrc_ctl_ev_fmt_profile_attr *attr, int attr_mask)
{
	return fmt_call(mrc_ctx, ev_fmt_profile_id, attr, attr_mask, 0,
			"mrc_ctl_query_ev_fmt_profile");
}

static int ev_call(struct mrc_context *ctx, uint64_t id, struct mrc_ctl_ev_profile_attr *attr,
		   int mask, int modify, const char *fn)
{
	struct mtb_sb sb;
	const char *cursor, *item;
	char *reply;
	uint64_t v;
	int n;

	if (!mrc_ctx_check(ctx, fn))
		return -1;
	if (!attr)
		return fail(EINVAL, "%s: attr is required", fn);
	if ((mask & MRC_CTL_EV_PROFILE_EV_OP) && (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP))
		return fail(EINVAL, "%s: EV_OP and EV_FIELDS_OP are mutually exclusive", fn);
	if (mask & MRC_CTL_EV_PROFILE_VENDOR_CFG && modify &&
	    vendor_cfg_set(attr->vendor_cfg, sizeof(attr->vendor_cfg)))
		return fail(EINVAL, "%s: the testbed has no vendor-specific configuration", fn);
	if (mask & MRC_CTL_EV_PROFILE_EV_OP &&
	    (attr->ev_op.entry_count < 0 || (attr->ev_op.entry_count > 0 && !attr->ev_op.entries)))
		return fail(EINVAL, "%s: ev_op.entries and entry_count disagree", fn);
	if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP &&
	    (attr->ev_fields_op.field_count < 0 ||
	     (attr->ev_fields_op.field_count > 0 && !attr->ev_fields_op.fields)))
		return fail(EINVAL, "%s: ev_fields_op.fields and field_count disagree", fn);
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"ev_profile\",\"op\":\"%s\",\"id\":%llu,\"mask\":%u",
		      modify ? "modify" : "query", (unsigned long long)id,
		      (unsigned int)mask & 0x7fffffffu);
	if (modify) {
		if (mask & MRC_CTL_EV_PROFILE_STATE)
			mtb_sb_printf(&sb, ",\"state\":%d", (int)attr->profile_state);
		if (mask & MRC_CTL_EV_PROFILE_CUR_STATE)
			mtb_sb_printf(&sb, ",\"cur_state\":%d", (int)attr->cur_profile_state);
		if (mask & MRC_CTL_EV_PROFILE_MODE)
			mtb_sb_printf(&sb, ",\"mode\":%u", (unsigned int)attr->ev_mode);
		if (mask & MRC_CTL_EV_PROFILE_FMT_ID)
			mtb_sb_printf(&sb, ",\"fmt_id\":%llu",
				      (unsigned long long)attr->ev_fmt_profile_id);
		if (mask & MRC_CTL_EV_PROFILE_COUNT)
			mtb_sb_printf(&sb, ",\"count\":%u", attr->ev_count);
		if (mask & MRC_CTL_EV_PROFILE_MIN_ACTIVE)
			mtb_sb_printf(&sb, ",\"min_active\":%u", attr->ev_min_active);
		if (mask & MRC_CTL_EV_PROFILE_EVENT_MASK)
			mtb_sb_printf(&sb, ",\"event_mask\":%u", (unsigned int)attr->ev_event_mask);
	}
	if (mask & MRC_CTL_EV_PROFILE_EV_OP) {
		mtb_sb_printf(&sb, ",\"ev_op\":%d,\"capacity\":%d,\"entries\":[", (int)attr->ev_op.op,
			      attr->ev_op.entry_count);
		if (attr->ev_op.op != MRC_CTL_EV_OP_QUERY_EV_ARRAY)
			for (int i = 0; i < attr->ev_op.entry_count; i++) {
				struct mrc_ctl_ev_op_entry *e = &attr->ev_op.entries[i];

				mtb_sb_printf(&sb, "%s[", i ? "," : "");
				put_ev(&sb, &e->ev);
				mtb_sb_printf(&sb, ",");
				put_ev(&sb, &e->ev_new);
				mtb_sb_printf(&sb, ",%u,%u]", (unsigned int)e->state, e->flags);
			}
		mtb_sb_printf(&sb, "]");
	}
	if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP) {
		mtb_sb_printf(&sb, ",\"fields_op\":%d", (int)attr->ev_fields_op.op);
		if (attr->ev_fields_op.op == MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS) {
			mtb_sb_printf(&sb, ",\"fields\":[");
			for (int i = 0; i < attr->ev_fields_op.field_count; i++) {
				struct mrc_ctl_ev_field *f = &attr->ev_fields_op.fields[i];

				mtb_sb_printf(&sb, "%s[%u,%u,%u,%u,%u]", i ? "," : "", f->width,
					      f->init_val, f->min_val, f->max_val, f->mask);
			}
			mtb_sb_printf(&sb, "]");
		}
	}
	mtb_sb_printf(&sb, "}");
	reply = mtb_call(ctx->mtb, &sb);
	mtb_sb_free(&sb);
	if (!reply) {
		int err = errno;
		int64_t needed;

		if (err == E2BIG && !mtb_last_error_i64("needed", &needed) &&
		    mask & MRC_CTL_EV_PROFILE_EV_OP)
			attr->ev_op.entry_count = (int)needed;
		errno = err;
		return -1;
	}
	if (!modify) {
		if (mask & MRC_CTL_EV_PROFILE_STATE && !mtb_json_u64(reply, "state", &v))
			attr->profile_state = (enum mrc_ctl_profile_state)v;
		if (mask & MRC_CTL_EV_PROFILE_CUR_STATE && !mtb_json_u64(reply, "state", &v))
			attr->cur_profile_state = (enum mrc_ctl_profile_state)v;
		if (mask & MRC_CTL_EV_PROFILE_MODE && !mtb_json_u64(reply, "mode", &v))
			attr->ev_mode = (enum mrc_ctl_ev_mode)v;
		if (mask & MRC_CTL_EV_PROFILE_FMT_ID && !mtb_json_u64(reply, "fmt_id", &v))
			attr->ev_fmt_profile_id = v;
		if (mask & MRC_CTL_EV_PROFILE_COUNT && !mtb_json_u64(reply, "count", &v))
			attr->ev_count = (uint32_t)v;
		if (mask & MRC_CTL_EV_PROFILE_MIN_ACTIVE && !mtb_json_u64(reply, "min_active", &v))
			attr->ev_min_active = (uint32_t)v;
		if (mask & MRC_CTL_EV_PROFILE_EVENT_MASK && !mtb_json_u64(reply, "event_mask", &v))
			attr->ev_event_mask = (int)v;
		if (mask & MRC_CTL_EV_PROFILE_VENDOR_CFG)
			memset(attr->vendor_cfg, 0, sizeof(attr->vendor_cfg));
	}
	if (mask & MRC_CTL_EV_PROFILE_EV_OP && attr->ev_op.op == MRC_CTL_EV_OP_QUERY_EV_ARRAY) {
		cursor = mtb_json_get(reply, "array");
		n = 0;
		while (cursor && n < attr->ev_op.entry_count && (item = mtb_json_next(&cursor))) {
			struct mrc_ctl_ev_op_entry *e = &attr->ev_op.entries[n++];
			const char *p;

			memset(e, 0, sizeof(*e));
			p = get_ev(item, e->ev.val);
			if (p)
				e->ev.port = (uint8_t)strtoul(p + 2, NULL, 10);
			e->state = MRC_CTL_EV_UNKNOWN;
		}
		attr->ev_op.entry_count = n;
	}
	if (mask & MRC_CTL_EV_PROFILE_EV_OP && attr->ev_op.op == MRC_CTL_EV_OP_QUERY_EV_STATE) {
		cursor = mtb_json_get(reply, "states");
		n = 0;
		while (cursor && n < attr->ev_op.entry_count && (item = mtb_json_next(&cursor)))
			attr->ev_op.entries[n++].state =
				(enum mrc_ctl_ev_state)strtoul(item, NULL, 10);
	}
	if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP &&
	    attr->ev_fields_op.op == MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS) {
		int total = 0;

		cursor = mtb_json_get(reply, "fields");
		for (const char *c = cursor; c && mtb_json_next(&c);)
			total++;
		if (total > attr->ev_fields_op.field_count) {
			attr->ev_fields_op.field_count = total;
			return fail(E2BIG, "%s: more EV fields than the array holds", fn);
		}
		n = 0;
		while (cursor && (item = mtb_json_next(&cursor))) {
			uint64_t f[5];

			mtb_json_u64s(item, f, 5);
			attr->ev_fields_op.fields[n++] = (struct mrc_ctl_ev_field){
				.width = (uint32_t)f[0], .init_val = (uint32_t)f[1],
				.min_val = (uint32_t)f[2], .max_val = (uint32_t)f[3],
				.mask = (uint32_t)f[4],
			};
		}
		attr->ev_fields_op.field_count = n;
	}
	return 0;
}

EXPORT int mrc_ctl_modify_ev_profile(struct mrc_context *mrc_ctx, uint64_t ev_profile_id,
				     struct mrc_ctl_ev_profile_attr *attr, int attr_mask)
{
	return ev_call(mrc_ctx, ev_profile_id, attr, attr_mask, 1, "mrc_ctl_modify_ev_profile");
}

EXPORT int mrc_ctl_query_ev_profile(struct mrc_context *mrc_ctx, uint64_t ev_profile_id,
				    struct mrc_ctl_ev_profile_attr *attr, int attr_mask)
{
	return ev_call(mrc_ctx, ev_profile_id, attr, attr_mask, 0, "mrc_ctl_query_ev_profile");
}

/* -- CC profiles --------------------------------------------------------------------------------- */

static int is_nscc(const char *name)
{
	return name && (strcmp(name, "nscc") == 0 || strcmp(name, "uet-1.0-nscc") == 0);
}

/* The NSCC fields, as the agent names them (host/transport/cc/nscc.py). */
static void put_nscc(struct mtb_sb *sb, const struct mrc_ctl_cc_nscc_cfg *c)
{
	mtb_sb_printf(sb, ",\"config\":{\"disable_qa\":%u,\"adjust_bytes_threshold\":%u,"
		      "\"adjust_period_threshold\":%u,\"base_rtt\":%u,\"eta\":%.9g,\"fi\":%.9g,"
		      "\"fi_scale\":%.9g,\"gamma\":%.9g,\"max_md_jump\":%.9g,\"max_cwnd\":%u,"
		      "\"qa_gate\":%u,\"qa_threshold\":%u,\"target_delay\":%u}",
		      c->disable_qa, c->adjust_bytes_threshold, c->adjust_period_threshold,
		      c->base_rtt, (double)c->eta, (double)c->fi, (double)c->fi_scale,
		      (double)c->gamma, (double)c->max_md_jump, c->max_cwnd, c->qa_gate,
		      c->qa_threshold, c->target_delay);
}

static double num(const char *obj, const char *key)
{
	const char *v = mtb_json_get(obj, key);

	return v ? strtod(v, NULL) : 0.0;
}

static char *cc_call(struct mrc_context *ctx, uint64_t id, const char *op, int mask,
		     struct mtb_sb *extra)
{
	char *reply;

	reply = mtb_callf(ctx->mtb, "{\"cmd\":\"cc_profile\",\"op\":\"%s\",\"id\":%llu,\"mask\":%u%s}",
			  op, (unsigned long long)id, (unsigned int)mask & 0x7fffffffu,
			  extra && extra->p ? extra->p : "");
	return reply;
}

EXPORT int mrc_ctl_modify_cc_profile(struct mrc_context *mrc_ctx, uint64_t cc_profile_id,
				     struct mrc_ctl_cc_profile_attr *attr, int attr_mask)
{
	const char *fn = "mrc_ctl_modify_cc_profile";
	struct mtb_sb extra;
	char algorithm[32] = "";
	char *reply;

	if (!mrc_ctx_check(mrc_ctx, fn))
		return -1;
	if (!attr)
		return fail(EINVAL, "%s: attr is required", fn);
	if (attr_mask & MRC_CTL_CC_PROFILE_VENDOR_CFG &&
	    vendor_cfg_set(attr->vendor_cfg, sizeof(attr->vendor_cfg)))
		return fail(EINVAL, "%s: the testbed has no vendor-specific configuration", fn);
	if (attr_mask & MRC_CTL_CC_PROFILE_ALGORITHM) {
		if (attr->algorithm && strlen(attr->algorithm) >= sizeof(algorithm))
			return fail(EINVAL, "%s: unknown algorithm", fn);
		snprintf(algorithm, sizeof(algorithm), "%s", attr->algorithm ? attr->algorithm : "");
		for (const char *c = algorithm; *c; c++)
			if (*c == '"' || *c == '\\')
				return fail(EINVAL, "%s: unknown algorithm", fn);
	} else if (attr_mask & MRC_CTL_CC_PROFILE_CONFIG) {
		/* the configuration's structure is the profile's algorithm's: ask which it is */
		reply = cc_call(mrc_ctx, cc_profile_id, "query", 0, NULL);
		if (!reply)
			return -1;
		mtb_json_str(reply, "algorithm", algorithm, sizeof(algorithm));
	}
	mtb_sb_init(&extra);
	mtb_sb_printf(&extra, "%s", "");
	if (attr_mask & MRC_CTL_CC_PROFILE_STATE)
		mtb_sb_printf(&extra, ",\"state\":%d", (int)attr->profile_state);
	if (attr_mask & MRC_CTL_CC_PROFILE_CUR_STATE)
		mtb_sb_printf(&extra, ",\"cur_state\":%d", (int)attr->cur_profile_state);
	if (attr_mask & MRC_CTL_CC_PROFILE_ALGORITHM)
		mtb_sb_printf(&extra, ",\"algorithm\":\"%s\"", algorithm);
	if (attr_mask & MRC_CTL_CC_PROFILE_CONFIG) {
		if (is_nscc(algorithm)) {
			if (!attr->cc_config) {
				mtb_sb_free(&extra);
				return fail(EINVAL, "%s: NSCC needs its struct mrc_ctl_cc_nscc_cfg", fn);
			}
			put_nscc(&extra, attr->cc_config);
		} else {
			/* no public configuration structure: the algorithm's defaults */
			mtb_sb_printf(&extra, ",\"config\":{}");
		}
	}
	reply = cc_call(mrc_ctx, cc_profile_id, "modify", attr_mask, &extra);
	mtb_sb_free(&extra);
	return reply ? 0 : -1;
}

EXPORT int mrc_ctl_query_cc_profile(struct mrc_context *mrc_ctx, uint64_t cc_profile_id,
				    struct mrc_ctl_cc_profile_attr *attr, int attr_mask)
{
	static __thread struct mrc_ctl_cc_nscc_cfg nscc;
	const char *fn = "mrc_ctl_query_cc_profile";
	char name[32] = "", *reply;
	const char *config;
	uint64_t v;

	if (!mrc_ctx_check(mrc_ctx, fn))
		return -1;
	if (!attr)
		return fail(EINVAL, "%s: attr is required", fn);
	reply = cc_call(mrc_ctx, cc_profile_id, "query", attr_mask, NULL);
	if (!reply)
		return -1;
	mtb_json_str(reply, "algorithm", name, sizeof(name));
	if (attr_mask & MRC_CTL_CC_PROFILE_STATE && !mtb_json_u64(reply, "state", &v))
		attr->profile_state = (enum mrc_ctl_profile_state)v;
	if (attr_mask & MRC_CTL_CC_PROFILE_CUR_STATE && !mtb_json_u64(reply, "state", &v))
		attr->cur_profile_state = (enum mrc_ctl_profile_state)v;
	if (attr_mask & MRC_CTL_CC_PROFILE_ALGORITHM) {
		attr->algorithm = NULL; /* a string of the device's algorithm list, or NULL */
		for (int i = 0; algorithms[i]; i++)
			if (strcmp(algorithms[i], name) == 0)
				attr->algorithm = algorithms[i];
	}
	if (attr_mask & MRC_CTL_CC_PROFILE_CONFIG) {
		/* NSCC: a structure of the library's (one per thread, valid until the next query) */
		attr->cc_config = NULL;
		config = mtb_json_get(reply, "config");
		if (config && is_nscc(name)) {
			nscc = (struct mrc_ctl_cc_nscc_cfg){
				.disable_qa = (uint8_t)num(config, "disable_qa"),
				.adjust_bytes_threshold = (uint32_t)num(config, "adjust_bytes_threshold"),
				.adjust_period_threshold = (uint32_t)num(config, "adjust_period_threshold"),
				.base_rtt = (uint32_t)num(config, "base_rtt"),
				.eta = (float)num(config, "eta"),
				.fi = (float)num(config, "fi"),
				.fi_scale = (float)num(config, "fi_scale"),
				.gamma = (float)num(config, "gamma"),
				.max_md_jump = (float)num(config, "max_md_jump"),
				.max_cwnd = (uint32_t)num(config, "max_cwnd"),
				.qa_gate = (uint8_t)num(config, "qa_gate"),
				.qa_threshold = (uint32_t)num(config, "qa_threshold"),
				.target_delay = (uint32_t)num(config, "target_delay"),
			};
			attr->cc_config = &nscc;
		}
	}
	if (attr_mask & MRC_CTL_CC_PROFILE_VENDOR_CFG)
		memset(attr->vendor_cfg, 0, sizeof(attr->vendor_cfg));
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
 * is the EV's mrc_ctl_ev_t as the agent gives it after the numbers (a uSID carrier in 16 bytes,
 * 32 with an SRH; any other EV 32 bits in network byte order in the first four bytes); port is
 * the plane's (1-based). drop_count is exact (MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT).
 */
EXPORT int mrc_ctl_poll_ev_event(struct mrc_cq *ev_cq, int num_entries,
				 struct mrc_ctl_ev_event *ev_event)
{
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
	reply = mtb_callf(ev_cq->ctx->mtb, "{\"cmd\":\"poll_cq\",\"cq\":%llu,\"n\":%d}",
			  (unsigned long long)ev_cq->id, num_entries);
	if (!reply)
		return -errno;
	cursor = mtb_json_get(reply, "wc");
	if (!cursor)
		return -EPROTO;
	while (n < num_entries && (entry = mtb_json_next(&cursor))) {
		uint64_t v[5];
		struct mrc_ctl_ev_event *out =
			(struct mrc_ctl_ev_event *)((char *)ev_event + (size_t)n * stride);
		uint32_t ev;

		mtb_json_u64s(entry, v, 5);
		memset(out, 0, stride);
		out->profile_id = v[0];
		if (!get_ev(entry, out->ev.val)) { /* an agent giving the 32-bit value only */
			ev = htobe32((uint32_t)v[1]);
			memcpy(out->ev.val, &ev, sizeof(ev));
		}
		out->ev.port = (uint8_t)v[2];
		out->drop_count = (uint32_t)v[3];
		if (stride == sizeof(*ev_event))
			out->state = (enum mrc_ctl_ev_state)v[4];
		n++;
	}
	return n;
}

static int parse_responses(const char *obj, struct mrc_ctl_ep_rsp *rsp, int room)
{
	const char *cursor = mtb_json_get(obj, "responses"), *item;
	int n = 0;

	while (cursor && n < room && (item = mtb_json_next(&cursor))) {
		uint64_t v[4];

		mtb_json_u64s(item, v, 4);
		rsp[n++] = (struct mrc_ctl_ep_rsp){
			.req_id = (uint16_t)v[0], .port = (uint8_t)v[1],
			.rtt = (unsigned int)(v[2] > 0xffffffffULL ? 0xffffffffULL : v[2]),
			.adj_svc_time = (uint8_t)v[3],
		};
	}
	return n;
}

/*
 * Endpoint requests are connectionless: each goes from its source GID (one of the host's) to
 * its destination GID (another testbed host's) on the EV named, in traffic class req_tc, with
 * no QP involved. Responses come back in arrival order, RTTs in ns of real-fabric time with the
 * responder's service time taken off; rsp_timeout is real-fabric time too.
 */
EXPORT int mrc_ctl_ep_batch_send_wait(struct mrc_context *mrc_ctx, uint8_t req_tc,
				      enum mrc_ctl_ep_op_type op_type,
				      struct mrc_ctl_ep_req *req, int num_req,
				      uint32_t rsp_timeout, struct mrc_ctl_ep_rsp *rsp,
				      int *num_rsp)
{
	const char *fn = "mrc_ctl_ep_batch_send_wait";
	struct mtb_sb sb;
	char *reply;

	if (!mrc_ctx_check(mrc_ctx, fn))
		return -1;
	if (num_rsp)
		*num_rsp = 0;
	if (num_req < 0 || (num_req > 0 && (!req || !rsp)) || !num_rsp ||
	    (unsigned int)op_type > MRC_CTL_EP_OP_PORT_STATUS_UPDATE)
		return fail(EINVAL, "%s: bad op_type, num_req, req, rsp or num_rsp", fn);
	if (num_req == 0)
		return 0;
	mtb_sb_init(&sb);
	mtb_sb_printf(&sb, "{\"cmd\":\"ep_probe\",\"op\":%u,\"tc\":%u,\"timeout\":%u,\"reqs\":[",
		      (unsigned int)op_type, (unsigned int)req_tc, rsp_timeout);
	for (int i = 0; i < num_req; i++) {
		char sgid[33], dgid[33], ev[2 * MRC_CTL_EV_MAX_BYTES + 1];

		mtb_hex_encode(req[i].sgid.raw, 16, sgid);
		mtb_hex_encode(req[i].dgid.raw, 16, dgid);
		mtb_hex_encode(req[i].req_ev.val, MRC_CTL_EV_MAX_BYTES, ev);
		mtb_sb_printf(&sb, "%s[%u,\"%s\",\"%s\",%u,\"%s\",%u,%u]", i ? "," : "",
			      req[i].req_id, sgid, dgid, (unsigned int)req[i].ev_fmt_mode, ev,
			      req[i].req_ev.port,
			      op_type == MRC_CTL_EP_OP_PORT_STATUS_UPDATE ?
				      req[i].op.port_status_update.port_status : 0U);
	}
	mtb_sb_printf(&sb, "]}");
	reply = mtb_call(mrc_ctx->mtb, &sb);
	mtb_sb_free(&sb);
	if (reply) {
		*num_rsp = parse_responses(reply, rsp, num_req);
		return 0;
	}
	int err = errno;

	if (err == ETIMEDOUT)
		*num_rsp = parse_responses(mtb_last_error_reply(), rsp, num_req);
	errno = err;
	return -1;
}
