/*
 * The GID table of a testbed host's verbs device, as an application sees it: for every port,
 * ibv_query_port's gid_tbl_len, then ibv_query_gid at every index below it (each must answer,
 * and all the same address) and at gid_tbl_len (must fail). Prints one line a port:
 *
 *   port 1 gid_tbl_len 4 gid fd00:...
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device_attr dattr;
	struct ibv_context *ctx;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "gid_check: no verbs device\n");
		return 1;
	}
	if (ibv_query_device(ctx, &dattr)) {
		fprintf(stderr, "gid_check: ibv_query_device\n");
		return 1;
	}
	for (int port = 1; port <= dattr.phys_port_cnt; port++) {
		struct ibv_port_attr pattr;
		union ibv_gid first, gid;
		char text[INET6_ADDRSTRLEN];

		if (ibv_query_port(ctx, (uint8_t)port, &pattr) || pattr.gid_tbl_len < 1) {
			fprintf(stderr, "gid_check: ibv_query_port %d\n", port);
			return 1;
		}
		for (int index = 0; index < pattr.gid_tbl_len; index++) {
			if (ibv_query_gid(ctx, (uint8_t)port, index, &gid)) {
				fprintf(stderr, "gid_check: port %d index %d refused\n", port, index);
				return 1;
			}
			if (index == 0)
				first = gid;
			if (memcmp(&gid, &first, sizeof(gid))) {
				fprintf(stderr, "gid_check: port %d index %d differs\n", port, index);
				return 1;
			}
		}
		if (ibv_query_gid(ctx, (uint8_t)port, pattr.gid_tbl_len, &gid) == 0) {
			fprintf(stderr, "gid_check: port %d index %d past the table answered\n", port,
				pattr.gid_tbl_len);
			return 1;
		}
		inet_ntop(AF_INET6, first.raw, text, sizeof(text));
		printf("port %d gid_tbl_len %d gid %s\n", port, pattr.gid_tbl_len, text);
	}
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
