/*
 * mrc-testbed: the emulated verbs device, built as libibverbs.so.1.
 *
 * Inside a testbed host there is no kernel RDMA device for Debian's libibverbs to find (it
 * discovers devices through /sys/class/infiniband_verbs and loads the provider that matches
 * one). So the testbed ships its own libibverbs.so.1 with the small part of the verbs API that
 * MRC applications use, and `mrc-testbed exec` puts it first on LD_LIBRARY_PATH: a program
 * linked with -libverbs against Debian's library loads this one unchanged. The symbols carry
 * libibverbs' version names (libibverbs.map), so references bound at link time resolve.
 *
 * One device per testbed host, named after the host; one port per plane NIC; each port's GID
 * table is a RoCEv2 NIC's length (the agent's gid_tbl_len) and every index holds the plane
 * address of its NIC, so the index an application uses by default (0, 1 or 3) resolves. Memory registration goes to the host's
 * agent, which reads and writes the registered buffer in place (docs/ocp-api.md).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mtb.h"

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mtb_device *devices[MTB_MAX_PORTS * 8];
static int ndevices;

struct mtb_pd {
	struct ibv_pd pd;
	int mrs;
};

/* The device of a socket path, made once and kept (an open context may outlive the list). */
static struct mtb_device *device_for(const char *name, const char *path)
{
	for (int i = 0; i < ndevices; i++)
		if (strcmp(devices[i]->sock_path, path) == 0)
			return devices[i];
	if (ndevices == (int)(sizeof(devices) / sizeof(devices[0])))
		return NULL;
	struct mtb_device *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->dev.node_type = IBV_NODE_RNIC;
	d->dev.transport_type = IBV_TRANSPORT_UNSPECIFIED;
	snprintf(d->dev.name, sizeof(d->dev.name), "%s", name);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "mrc-%s", name);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s", path);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s", path);
	snprintf(d->sock_path, sizeof(d->sock_path), "%s", path);
	devices[ndevices++] = d;
	return d;
}

/*
 * MRC_TESTBED_OCP_SOCKET (set by `mrc-testbed exec`) names this host's agent socket, and
 * MRC_TESTBED_HOST the device; without them every agent socket in MRC_TESTBED_RUN_DIR
 * (default /run/mrc-testbed) is a device, named after its host.
 */
EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(MTB_MAX_PORTS * 8 + 1, sizeof(*list));
	const char *sock = getenv("MRC_TESTBED_OCP_SOCKET");
	const char *host = getenv("MRC_TESTBED_HOST");
	int n = 0;

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&devices_lock);
	if (sock && *sock) {
		char name[64];

		if (host && *host) {
			snprintf(name, sizeof(name), "%s", host);
		} else {
			const char *base = strrchr(sock, '/');

			snprintf(name, sizeof(name), "%s", base ? base + 1 : sock);
			char *dot = strchr(name, '.');

			if (dot)
				*dot = '\0';
		}
		struct mtb_device *d = device_for(name, sock);

		if (d)
			list[n++] = &d->dev;
	} else {
		const char *dir = getenv("MRC_TESTBED_RUN_DIR");
		struct dirent **names;
		int count;

		if (!dir || !*dir)
			dir = MTB_DEFAULT_DIR;
		count = scandir(dir, &names, NULL, alphasort);
		for (int i = 0; i < count; i++) {
			const char *f = names[i]->d_name;
			size_t len = strlen(f);
			const char *suffix = ".ocp.sock";

			if (len > strlen(suffix) && strcmp(f + len - strlen(suffix), suffix) == 0 &&
			    n < MTB_MAX_PORTS * 8) {
				char name[64], path[256];

				snprintf(name, sizeof(name), "%.*s", (int)(len - strlen(suffix)), f);
				int full = snprintf(path, sizeof(path), "%s/%s", dir, f);
				/* a path too long for a Unix socket is no device */
				struct mtb_device *d = full > 0 && (size_t)full < sizeof(path)
						       ? device_for(name, path) : NULL;

				if (d)
					list[n++] = &d->dev;
			}
			free(names[i]);
		}
		if (count >= 0)
			free(names);
	}
	pthread_mutex_unlock(&devices_lock);
	if (num_devices)
		*num_devices = n;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list); /* the devices stay: contexts opened from them remain valid */
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	(void)device;
	return 0;
}

static int parse_ports(struct mtb_context *m, const char *reply)
{
	const char *cursor = mtb_json_get(reply, "ports");
	const char *port;

	m->nports = 0;
	if (!cursor)
		return -1;
	while ((port = mtb_json_next(&cursor)) && m->nports < MTB_MAX_PORTS) {
		struct mtb_port *p = &m->ports[m->nports];
		char gid[40];
		int64_t v = 0;
		int active = 1;

		if (mtb_json_str(port, "gid", gid, sizeof(gid)) || mtb_hex_decode(gid, p->gid, 16))
			return -1;
		mtb_json_i64(port, "plane", &v);
		p->plane = (int)v;
		v = 4096;
		mtb_json_i64(port, "mtu", &v);
		p->mtu = (int)v;
		v = 1;
		mtb_json_i64(port, "gid_tbl_len", &v);
		p->gid_tbl_len = (int)v;
		mtb_json_bool(port, "active", &active);
		p->active = active;
		mtb_json_str(port, "intf", p->intf, sizeof(p->intf));
		m->nports++;
	}
	return 0;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct mtb_device *d = (struct mtb_device *)device;
	struct mtb_context *m;
	char *reply;

	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->magic = MTB_MAGIC;
	m->pid = getpid();
	pthread_mutex_init(&m->lock, NULL);
	snprintf(m->sock_path, sizeof(m->sock_path), "%s", d->sock_path);
	if (mtb_connect(&m->conn, m->sock_path) < 0)
		goto fail;
	reply = mtb_callf(m, "{\"cmd\":\"hello\",\"device\":\"%s\"}", device->name);
	if (!reply)
		goto fail_conn;
	if (mtb_json_u64(reply, "session", &m->session) || mtb_json_u64(reply, "token", &m->token) ||
	    mtb_json_str(reply, "host", m->host, sizeof(m->host)) || parse_ports(m, reply)) {
		mtb_set_error(EPROTO, "unexpected reply from the agent: %.200s", reply);
		goto fail_conn;
	}
	m->ibv.device = device;
	m->ibv.cmd_fd = m->conn.fd;
	m->ibv.async_fd = -1;
	m->ibv.num_comp_vectors = 1;
	m->ibv.abi_compat = MTB_ABI_MARK;
	pthread_mutex_init(&m->ibv.mutex, NULL);
	return &m->ibv;

fail_conn:
	mtb_close(&m->conn);
fail:
	{
		int err = errno;

		pthread_mutex_destroy(&m->lock);
		free(m);
		errno = err;
	}
	return NULL;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct mtb_context *m = mtb_from_ibv(context);

	if (!m)
		return -1;
	mtb_close(&m->conn); /* the agent ends the session and frees what is left */
	m->magic = 0;
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->ibv.mutex);
	free(m);
	return 0;
}

/* An int field of the agent's query_device reply (0 when absent). */
static int device_limit(const char *reply, const char *key)
{
	int64_t v = 0;

	mtb_json_i64(reply, key, &v);
	return (int)v;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	struct mtb_context *m = mtb_from_ibv(context);

	if (!m || !attr) {
		errno = m ? EINVAL : errno;
		return errno;
	}
	char *reply = mtb_query_device(m);

	if (!reply)
		return errno;
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "mrc-testbed");
	attr->page_size_cap = 4096;
	/* the agent's limits (docs/ocp-api.md, "Limits and isolation") */
	mtb_json_u64(reply, "max_mr_size", &attr->max_mr_size);
	attr->max_qp = device_limit(reply, "max_qp");
	attr->max_qp_wr = device_limit(reply, "max_qp_wr");
	attr->max_sge = device_limit(reply, "max_sge");
	attr->max_cq = device_limit(reply, "max_cq");
	attr->max_cqe = device_limit(reply, "max_cqe");
	attr->max_mr = device_limit(reply, "max_mr");
	attr->max_pd = device_limit(reply, "max_pd");
	attr->phys_port_cnt = (uint8_t)m->nports;
	return 0;
}

/* verbs.h declares it with an opaque struct; its inline wrapper passes a struct ibv_port_attr */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			  struct _compat_ibv_port_attr *compat)
{
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;
	struct mtb_context *m = mtb_from_ibv(context);
	char *reply;
	int active = 1;

	if (!m)
		return errno;
	if (!attr || port_num < 1 || port_num > m->nports) {
		mtb_set_error(EINVAL, "ibv_query_port: port %u: %s has ports 1..%d", port_num,
			      m->host, m->nports);
		return EINVAL;
	}
	reply = mtb_query_device(m);
	if (!reply)
		return errno;
	uint64_t max_msg_sz = 0;

	mtb_json_u64(reply, "max_msg_sz", &max_msg_sz);
	reply = mtb_callf(m, "{\"cmd\":\"query_port\",\"port\":%u}", port_num);
	if (!reply)
		return errno;
	mtb_json_bool(reply, "active", &active);
	pthread_mutex_lock(&m->lock); /* threads may query ports at once */
	m->ports[port_num - 1].active = active;
	pthread_mutex_unlock(&m->lock);
	memset(attr, 0, sizeof(*attr));
	attr->state = active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_4096;
	attr->gid_tbl_len = m->ports[port_num - 1].gid_tbl_len;
	attr->max_msg_sz = (uint32_t)max_msg_sz;
	attr->pkey_tbl_len = 1;
	attr->active_width = 1;	/* 1x */
	attr->active_speed = 32; /* the emulated link's rate is the fabric's, not this value */
	attr->phys_state = active ? 5 : 3; /* LinkUp / Disabled */
	attr->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			 union ibv_gid *gid)
{
	struct mtb_context *m = mtb_from_ibv(context);

	if (!m)
		return -1;
	if (!gid || port_num < 1 || port_num > m->nports || index < 0 ||
	    index >= m->ports[port_num - 1].gid_tbl_len) {
		mtb_set_error(EINVAL, "ibv_query_gid: port %u index %d: %s has ports 1..%d, "
			      "each with GID indexes 0..%d (the plane address)", port_num, index,
			      m->host, m->nports, m->nports ? m->ports[0].gid_tbl_len - 1 : 0);
		return -1;
	}
	memcpy(gid->raw, m->ports[port_num - 1].gid, 16);
	return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	static uint32_t next_handle = 1;
	struct mtb_context *m = mtb_from_ibv(context);
	struct mtb_pd *pd;

	if (!m)
		return NULL;
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->pd.context = context;
	pd->pd.handle = __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
	return &pd->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct mtb_pd *p = (struct mtb_pd *)pd;

	if (!pd || !mtb_from_ibv(pd->context))
		return EINVAL;
	if (p->mrs) {
		mtb_set_error(EBUSY, "ibv_dealloc_pd: %d memory region(s) still registered", p->mrs);
		return EBUSY;
	}
	free(p);
	return 0;
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct mtb_context *m = pd ? mtb_from_ibv(pd->context) : NULL;
	struct ibv_mr *mr;
	uint64_t lkey = 0, rkey = 0;
	char *reply;

	if (!m) {
		errno = pd ? errno : EINVAL;
		return NULL;
	}
	if (!addr || length == 0) {
		mtb_set_error(EINVAL, "ibv_reg_mr: expected a buffer (address %p, %zu bytes)", addr,
			      length);
		return NULL;
	}
	reply = mtb_callf(m, "{\"cmd\":\"reg_mr\",\"addr\":%llu,\"length\":%zu,\"access\":%u,"
			  "\"pd\":%u}", (unsigned long long)(uintptr_t)addr, length,
			  (unsigned int)access, pd->handle);
	if (!reply)
		return NULL;
	mtb_json_u64(reply, "lkey", &lkey);
	mtb_json_u64(reply, "rkey", &rkey);
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->handle = (uint32_t)lkey;
	mr->lkey = (uint32_t)lkey;
	mr->rkey = (uint32_t)rkey;
	((struct mtb_pd *)pd)->mrs++;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
				      uint64_t iova, int access)
{
	if (iova != (uint64_t)(uintptr_t)addr) {
		mtb_set_error(EOPNOTSUPP, "ibv_reg_mr_iova: the remote address of a region is its "
			      "virtual address on the testbed (iova must equal addr)");
		return NULL;
	}
	return reg_mr(pd, addr, length, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				       uint64_t iova, unsigned int access)
{
	return ibv_reg_mr_iova(pd, addr, length, iova, (int)access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct mtb_context *m = mr ? mtb_from_ibv(mr->context) : NULL;
	char *reply;

	if (!m)
		return EINVAL;
	reply = mtb_callf(m, "{\"cmd\":\"dereg_mr\",\"lkey\":%u}", mr->lkey);
	if (!reply && !mtb_lost(m))
		return errno; /* with the agent gone, the region is freed here */
	((struct mtb_pd *)mr->pd)->mrs--;
	free(mr);
	return 0;
}

EXPORT int ibv_fork_init(void)
{
	return 0; /* nothing is pinned: the agent reads and writes the process's memory */
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "work request flushed",
		[IBV_WC_MW_BIND_ERR] = "memory window bind error",
		[IBV_WC_BAD_RESP_ERR] = "bad response",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "retry count exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry count exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "remote aborted",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "tag matching error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "tag matching rendezvous incomplete",
	};

	if ((unsigned int)status < sizeof(names) / sizeof(names[0]) && names[status])
		return names[status];
	return "unknown";
}
