/*
 * mrc-testbed: what the emulated verbs device (libibverbs.so.1) and lib_mrc.so share.
 *
 * Both libraries talk to the host agent's OCP API socket (HOST.ocp.sock, JSON lines;
 * docs/ocp-api.md). The verbs context the testbed's libibverbs.so.1 hands out is the
 * ibv_context embedded at the end of a struct mtb_context, marked by abi_compat ==
 * MTB_ABI_MARK and a magic number, so lib_mrc.so finds the session of the process from
 * any ibv_context it is given and refuses contexts of other providers.
 *
 * Private to the project: not installed, not part of the OCP API.
 */
#ifndef MTB_H
#define MTB_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

#define MTB_HIDDEN __attribute__((visibility("hidden")))

#define MTB_MAGIC 0x4d52432d54424544ULL /* "MRC-TBED" */
#define MTB_ABI_MARK ((void *)(uintptr_t)0x4d52435442ULL)
#define MTB_MAX_PORTS 16
#define MTB_DEFAULT_DIR "/run/mrc-testbed"
/*
 * Work requests one post request carries at most: a longer chain goes as several requests. A
 * request line is at most 1 MiB (MAX_LINE of host/agent/control.py), and 1024 WRs of 16 SGEs
 * (max_sge) take some 900 KB.
 */
#define MTB_POST_BATCH 1024

/* A line-oriented connection to the agent's OCP socket. */
struct mtb_conn {
	int fd;
	char *buf;	/* bytes read and not yet consumed */
	size_t len;
	size_t cap;
	int lost;	/* the agent closed it, or it failed: the agent is gone */
};

/* A growable request buffer. */
struct mtb_sb {
	char *p;
	size_t len;
	size_t cap;
	int failed;
};

struct mtb_port {
	uint8_t gid[16];
	int plane;
	int active;
	int mtu;
	int gid_tbl_len; /* every index holds the plane address (as a RoCEv2 NIC's defaults) */
	char intf[32];
};

struct mtb_device {
	struct ibv_device dev;
	char sock_path[108];
};

struct mtb_context {
	uint64_t magic;
	pthread_mutex_t lock;	/* one request at a time on conn */
	struct mtb_conn conn;	/* the session connection */
	uint64_t session;
	uint64_t token;
	pid_t pid;		/* the process that opened it: a forked child's calls fail */
	char host[64];
	char sock_path[108];
	int nports;
	struct mtb_port ports[MTB_MAX_PORTS];
	struct ibv_context ibv;	/* must be last */
};

/* The testbed context behind an ibv_context, or NULL (errno ENODEV) for another provider's. */
MTB_HIDDEN struct mtb_context *mtb_from_ibv(struct ibv_context *ctx);

/* connections */
MTB_HIDDEN int mtb_connect(struct mtb_conn *conn, const char *path);
MTB_HIDDEN void mtb_close(struct mtb_conn *conn);
MTB_HIDDEN int mtb_send_line(struct mtb_conn *conn, const char *line, size_t len);
/* The next line (NUL-terminated, without '\n'), valid until the next call; NULL on EOF/error. */
MTB_HIDDEN char *mtb_read_line(struct mtb_conn *conn);

/* requests */
MTB_HIDDEN void mtb_sb_init(struct mtb_sb *sb);
MTB_HIDDEN void mtb_sb_free(struct mtb_sb *sb);
MTB_HIDDEN void mtb_sb_printf(struct mtb_sb *sb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
MTB_HIDDEN void mtb_sb_vprintf(struct mtb_sb *sb, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
/*
 * Send the request in sb (a JSON object without the trailing newline) on the context's
 * session connection and wait for the reply. Returns the reply line (valid until the next
 * request of this context) when it says "ok": true; NULL with errno set from the reply (and
 * the agent's message kept for mtb_last_error()) otherwise.
 */
MTB_HIDDEN char *mtb_call(struct mtb_context *ctx, struct mtb_sb *sb);
/* mtb_call of a request written by one printf (the request ends with the call). */
MTB_HIDDEN char *mtb_callf(struct mtb_context *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The agent of the context is gone (its session connection was lost): nothing more is sent. */
MTB_HIDDEN int mtb_lost(struct mtb_context *ctx);
/* The same on any connection (no lock). */
MTB_HIDDEN char *mtb_call_conn(struct mtb_conn *conn, struct mtb_sb *sb);
/* The agent's query_device reply (device limits, as mtb_call returns a reply). */
MTB_HIDDEN char *mtb_query_device(struct mtb_context *ctx);
MTB_HIDDEN const char *mtb_last_error(void);
/* The index of the work request the agent refused in the last failed post. */
MTB_HIDDEN int64_t mtb_last_bad(void);
/* An integer field of the last refusal (e.g. "needed" with E2BIG); -1 when absent. */
MTB_HIDDEN int mtb_last_error_i64(const char *key, int64_t *out);
/* The whole last refusal (a JSON object; "{}" when none). */
MTB_HIDDEN const char *mtb_last_error_reply(void);
MTB_HIDDEN void mtb_set_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* JSON (replies of the agent: one object per line) */
MTB_HIDDEN const char *mtb_json_get(const char *obj, const char *key);
MTB_HIDDEN int mtb_json_u64(const char *obj, const char *key, uint64_t *out);
MTB_HIDDEN int mtb_json_i64(const char *obj, const char *key, int64_t *out);
MTB_HIDDEN int mtb_json_bool(const char *obj, const char *key, int *out);
MTB_HIDDEN int mtb_json_str(const char *obj, const char *key, char *out, size_t size);
/* Iterate over the elements of an array value: *cursor starts at the '[' of the value. */
MTB_HIDDEN const char *mtb_json_next(const char **cursor);
/* The first n numbers of an array of unsigned integers (an element from mtb_json_next); a
 * number not there is 0. */
MTB_HIDDEN void mtb_json_u64s(const char *array, uint64_t *out, int n);
MTB_HIDDEN const char *mtb_json_skip(const char *p);

/* helpers */
MTB_HIDDEN int mtb_hex_decode(const char *hex, uint8_t *out, size_t n);
MTB_HIDDEN void mtb_hex_encode(const uint8_t *in, size_t n, char *out);

#endif /* MTB_H */
