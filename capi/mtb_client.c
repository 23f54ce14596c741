/*
 * mrc-testbed: the client side of the agent's OCP API socket, shared by the emulated verbs
 * device and lib_mrc.so: Unix socket connections, JSON-lines requests, a small reader for
 * the agent's replies (flat objects, arrays of integers, arrays of flat objects).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mtb.h"

static __thread char last_error[512];
static __thread int64_t last_bad;
static __thread char *last_reply;

int mtb_last_error_i64(const char *key, int64_t *out)
{
	return last_reply ? mtb_json_i64(last_reply, key, out) : -1;
}

const char *mtb_last_error_reply(void)
{
	return last_reply ? last_reply : "{}";
}

int64_t mtb_last_bad(void)
{
	return last_bad;
}

const char *mtb_last_error(void)
{
	return last_error;
}

void mtb_set_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (getenv("MRC_TESTBED_VERBOSE"))
		fprintf(stderr, "mrc-testbed: %s\n", last_error);
	errno = err;
}

struct mtb_context *mtb_from_ibv(struct ibv_context *ctx)
{
	struct mtb_context *m;

	if (!ctx || ctx->abi_compat != MTB_ABI_MARK) {
		mtb_set_error(ENODEV, "not a device of the mrc-testbed verbs provider");
		return NULL;
	}
	m = (struct mtb_context *)((char *)ctx - offsetof(struct mtb_context, ibv));
	if (m->magic != MTB_MAGIC) {
		mtb_set_error(ENODEV, "not a device of the mrc-testbed verbs provider");
		return NULL;
	}
	return m;
}

/* -- connections ------------------------------------------------------------------------- */

int mtb_connect(struct mtb_conn *conn, const char *path)
{
	struct sockaddr_un addr;
	int fd;

	memset(conn, 0, sizeof(*conn));
	conn->fd = -1;
	if (strlen(path) >= sizeof(addr.sun_path)) {
		mtb_set_error(ENAMETOOLONG, "socket path too long: %s", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strcpy(addr.sun_path, path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int err = errno;

		close(fd);
		mtb_set_error(err == ENOENT || err == ECONNREFUSED ? ENODEV : err,
			      "no mrc-host agent at %s (%s): is the testbed up, and is this "
			      "program run with 'mrc-testbed exec HOST -- ...'?",
			      path, strerror(err));
		return -1;
	}
	conn->fd = fd;
	return 0;
}

void mtb_close(struct mtb_conn *conn)
{
	if (conn->fd >= 0)
		close(conn->fd);
	conn->fd = -1;
	free(conn->buf);
	conn->buf = NULL;
	conn->len = conn->cap = 0;
}

int mtb_send_line(struct mtb_conn *conn, const char *line, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(conn->fd, line + done, len - done, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			conn->lost = 1;
			mtb_set_error(EIO, "lost the connection to the mrc-host agent (%s)",
				      strerror(errno));
			return -1;
		}
		done += (size_t)n;
	}
	return 0;
}

char *mtb_read_line(struct mtb_conn *conn)
{
	static __thread char *line;
	static __thread size_t line_cap;
	char *nl;

	for (;;) {
		nl = conn->buf ? memchr(conn->buf, '\n', conn->len) : NULL;
		if (nl)
			break;
		if (conn->cap - conn->len < 4096) {
			size_t cap = conn->cap ? conn->cap * 2 : 8192;
			char *p = realloc(conn->buf, cap);

			if (!p) {
				errno = ENOMEM;
				return NULL;
			}
			conn->buf = p;
			conn->cap = cap;
		}
		ssize_t n = recv(conn->fd, conn->buf + conn->len, conn->cap - conn->len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			conn->lost = 1;
			mtb_set_error(EIO, "the mrc-host agent closed the connection");
			return NULL;
		}
		conn->len += (size_t)n;
	}
	size_t n = (size_t)(nl - conn->buf);

	if (n + 1 > line_cap) {
		char *p = realloc(line, n + 1);

		if (!p) {
			errno = ENOMEM;
			return NULL;
		}
		line = p;
		line_cap = n + 1;
	}
	memcpy(line, conn->buf, n);
	line[n] = '\0';
	memmove(conn->buf, nl + 1, conn->len - n - 1);
	conn->len -= n + 1;
	return line;
}

/* -- requests ------------------------------------------------------------------------------ */

void mtb_sb_init(struct mtb_sb *sb)
{
	memset(sb, 0, sizeof(*sb));
}

void mtb_sb_free(struct mtb_sb *sb)
{
	free(sb->p);
	mtb_sb_init(sb);
}

void mtb_sb_vprintf(struct mtb_sb *sb, const char *fmt, va_list ap)
{
	va_list copy;
	int n;

	if (sb->failed)
		return;
	for (;;) {
		size_t room = sb->cap - sb->len;

		va_copy(copy, ap);
		n = vsnprintf(sb->p ? sb->p + sb->len : NULL, room, fmt, copy);
		va_end(copy);
		if (n < 0) {
			sb->failed = 1;
			return;
		}
		if ((size_t)n < room) {
			sb->len += (size_t)n;
			return;
		}
		size_t cap = sb->cap ? sb->cap : 256;

		while (cap - sb->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(sb->p, cap);

		if (!p) {
			sb->failed = 1;
			return;
		}
		sb->p = p;
		sb->cap = cap;
	}
}

void mtb_sb_printf(struct mtb_sb *sb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mtb_sb_vprintf(sb, fmt, ap);
	va_end(ap);
}

char *mtb_call_conn(struct mtb_conn *conn, struct mtb_sb *sb)
{
	char *reply;
	int ok = 0;

	mtb_sb_printf(sb, "\n");
	if (sb->failed) {
		mtb_set_error(ENOMEM, "out of memory building a request");
		return NULL;
	}
	if (mtb_send_line(conn, sb->p, sb->len) < 0)
		return NULL;
	reply = mtb_read_line(conn);
	if (!reply)
		return NULL;
	if (mtb_json_bool(reply, "ok", &ok) == 0 && ok)
		return reply;
	int64_t err = EIO;
	char message[400] = "the agent refused the request";

	mtb_json_i64(reply, "errno", &err);
	last_bad = 0;
	mtb_json_i64(reply, "bad", &last_bad);
	free(last_reply);
	last_reply = strdup(reply);
	mtb_json_str(reply, "error", message, sizeof(message));
	mtb_set_error((int)err, "%s", message);
	return NULL;
}

char *mtb_call(struct mtb_context *ctx, struct mtb_sb *sb)
{
	char *reply;
	int err;

	if (ctx->pid != getpid()) {
		/* the session is the opening process's: the agent reads and writes its memory */
		mtb_set_error(EPERM, "this device context was opened by process %ld: a forked "
			      "child opens a device of its own (ibv_fork_init(3))", (long)ctx->pid);
		return NULL;
	}
	pthread_mutex_lock(&ctx->lock);
	if (ctx->conn.lost) {
		mtb_set_error(EIO, "the mrc-host agent of %s is gone (its connection was lost)",
			      ctx->host);
		reply = NULL;
	} else {
		reply = mtb_call_conn(&ctx->conn, sb);
	}
	err = errno;
	pthread_mutex_unlock(&ctx->lock);
	errno = err;
	return reply;
}

int mtb_lost(struct mtb_context *ctx)
{
	int lost;

	pthread_mutex_lock(&ctx->lock);
	lost = ctx->conn.lost;
	pthread_mutex_unlock(&ctx->lock);
	return lost;
}

char *mtb_callf(struct mtb_context *ctx, const char *fmt, ...)
{
	struct mtb_sb sb;
	va_list ap;
	char *reply;
	int err;

	mtb_sb_init(&sb);
	va_start(ap, fmt);
	mtb_sb_vprintf(&sb, fmt, ap);
	va_end(ap);
	reply = mtb_call(ctx, &sb);
	err = errno;
	mtb_sb_free(&sb);
	errno = err;
	return reply;
}

char *mtb_query_device(struct mtb_context *ctx)
{
	return mtb_callf(ctx, "{\"cmd\":\"query_device\"}");
}

/* -- JSON ----------------------------------------------------------------------------------- */

static const char *ws(const char *p)
{
	while (*p && isspace((unsigned char)*p))
		p++;
	return p;
}

static const char *skip_string(const char *p)
{
	/* p at the opening quote */
	p++;
	while (*p && *p != '"') {
		if (*p == '\\' && p[1])
			p++;
		p++;
	}
	return *p ? p + 1 : p;
}

const char *mtb_json_skip(const char *p)
{
	int depth = 0;

	p = ws(p);
	do {
		if (!*p)
			return p;
		if (*p == '"') {
			p = skip_string(p);
			continue;
		}
		if (*p == '{' || *p == '[')
			depth++;
		else if (*p == '}' || *p == ']')
			depth--;
		else if (depth == 0) {
			/* a number or a literal */
			while (*p && *p != ',' && *p != '}' && *p != ']' && !isspace((unsigned char)*p))
				p++;
			return p;
		}
		p++;
	} while (depth > 0);
	return p;
}

const char *mtb_json_get(const char *obj, const char *key)
{
	size_t klen = strlen(key);
	const char *p = ws(obj);

	if (*p != '{')
		return NULL;
	p = ws(p + 1);
	while (*p == '"') {
		const char *kstart = p + 1;
		const char *kend = skip_string(p) - 1;

		p = ws(kend + 1);
		if (*p != ':')
			return NULL;
		p = ws(p + 1);
		if ((size_t)(kend - kstart) == klen && strncmp(kstart, key, klen) == 0)
			return p;
		p = ws(mtb_json_skip(p));
		if (*p != ',')
			return NULL;
		p = ws(p + 1);
	}
	return NULL;
}

int mtb_json_u64(const char *obj, const char *key, uint64_t *out)
{
	const char *v = mtb_json_get(obj, key);
	char *end;

	if (!v || !isdigit((unsigned char)*v))
		return -1;
	errno = 0;
	*out = strtoull(v, &end, 10);
	return errno ? -1 : 0;
}

int mtb_json_i64(const char *obj, const char *key, int64_t *out)
{
	const char *v = mtb_json_get(obj, key);
	char *end;

	if (!v || !(isdigit((unsigned char)*v) || *v == '-'))
		return -1;
	*out = strtoll(v, &end, 10);
	return 0;
}

int mtb_json_bool(const char *obj, const char *key, int *out)
{
	const char *v = mtb_json_get(obj, key);

	if (!v)
		return -1;
	if (strncmp(v, "true", 4) == 0)
		*out = 1;
	else if (strncmp(v, "false", 5) == 0)
		*out = 0;
	else
		return -1;
	return 0;
}

int mtb_json_str(const char *obj, const char *key, char *out, size_t size)
{
	const char *v = mtb_json_get(obj, key);
	size_t n = 0;

	if (!v || *v != '"' || size == 0)
		return -1;
	for (v++; *v && *v != '"'; v++) {
		char c = *v;

		if (c == '\\' && v[1]) {
			v++;
			c = *v == 'n' ? '\n' : *v == 't' ? '\t' : *v;
			if (*v == 'u') { /* keep it simple: not produced for our fields */
				c = '?';
				v += strlen(v) >= 5 ? 4 : 0;
			}
		}
		if (n + 1 < size)
			out[n++] = c;
	}
	out[n] = '\0';
	return 0;
}

const char *mtb_json_next(const char **cursor)
{
	const char *p = ws(*cursor);
	const char *start;

	if (*p == '[' || *p == ',')
		p = ws(p + 1);
	if (*p == ']' || !*p) {
		*cursor = p;
		return NULL;
	}
	start = p;
	*cursor = ws(mtb_json_skip(p));
	return start;
}

void mtb_json_u64s(const char *array, uint64_t *out, int n)
{
	const char *p = array;

	for (int i = 0; i < n; i++) {
		char *end;

		while (*p == '[' || *p == ',' || *p == ' ')
			p++;
		out[i] = strtoull(p, &end, 10);
		p = end;
	}
}

/* -- helpers -------------------------------------------------------------------------------- */

int mtb_hex_decode(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned int v;

		if (!isxdigit((unsigned char)hex[2 * i]) || !isxdigit((unsigned char)hex[2 * i + 1]))
			return -1;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return 0;
}

void mtb_hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}
