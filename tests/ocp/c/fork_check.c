/*
 * A device context after fork(), run by tests/ocp/test_ocp_isolation.py against a provider
 * served in the test process (MRC_TESTBED_OCP_SOCKET): the agent reads and writes the memory
 * of the process that opened the context, so a forked child's calls on the parent's context
 * fail with EPERM (and name ibv_fork_init), while a device the child opens itself works; the
 * parent's context is unharmed.
 *
 * usage: fork_check
 * Prints "ok NAME" or "FAIL NAME: why" per check and "ALL OK" at the end; exits 1 when any
 * failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static int failures;

static void check(const char *name, int cond)
{
	if (cond)
		printf("ok %s\n", name);
	else {
		printf("FAIL %s (errno %d %s)\n", name, errno, strerror(errno));
		failures++;
	}
	fflush(stdout);
}

static int child(struct ibv_device *device, struct ibv_pd *parents_pd, char *buf)
{
	struct ibv_mr *mr = ibv_reg_mr(parents_pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);

	check("child: the parent's context refuses with EPERM", !mr && errno == EPERM);
	struct ibv_context *own = ibv_open_device(device);
	struct ibv_pd *pd = own ? ibv_alloc_pd(own) : NULL;

	mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	check("child: a device of its own works", mr != NULL);
	if (mr)
		ibv_dereg_mr(mr);
	return failures ? 1 : 0;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	static char buf[2][4096];

	if (!list || !list[0]) {
		printf("FAIL setup: no device\n");
		return 1;
	}
	struct ibv_context *ibv = ibv_open_device(list[0]);
	struct ibv_pd *pd = ibv ? ibv_alloc_pd(ibv) : NULL;
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf[0], 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;

	check("parent: registers before fork", mr != NULL);
	fflush(stdout);
	pid_t pid = fork();

	if (pid == 0)
		_exit(child(list[0], pd, buf[1]));
	int status = 0;

	check("fork", pid > 0 && waitpid(pid, &status, 0) == pid);
	check("child: its checks passed", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct ibv_mr *again = pd ? ibv_reg_mr(pd, buf[1], 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;

	check("parent: its context still works", again != NULL);
	if (!failures)
		printf("ALL OK\n");
	return failures ? 1 : 0;
}
