/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_agent.c: one-way client for the node agent's Unix socket, bounded by a timeout. */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "nvrx_agent.h"
#include "nvrx_common.h"

static long long monotonic_ms(void)
{
	struct timespec ts = { 0, 0 };

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static int remaining_ms(long long deadline)
{
	long long left = deadline - monotonic_ms();

	return (left > 0 ? (int)left : 0);
}

/* Connect fd to addr before the deadline; the socket is non-blocking. */
static int agent_connect(int fd, const struct sockaddr_un *addr, long long deadline, char *err, size_t errlen)
{
	struct pollfd pfd = { fd, POLLOUT, 0 };
	socklen_t len = sizeof(int);
	int so_error = 0;
	int saved = 0;
	int left = 0;

	for (;;) {
		if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0 || errno == EISCONN)
			return (NVRX_AGENT_OK);
		saved = errno;
		if (saved == EINTR)
			continue;
		if (saved != EINPROGRESS && saved != EALREADY && saved != EAGAIN) {
			snprintf(err, errlen, "connect: %s", strerror(saved));
			return (NVRX_AGENT_ERROR);
		}
		left = remaining_ms(deadline);
		if (left == 0) {
			snprintf(err, errlen, "connect: no answer within the timeout");
			return (NVRX_AGENT_TIMEOUT);
		}
		if (saved == EAGAIN) {
			/* The listen backlog is full: the agent is alive but behind. Retry until the deadline. */
			(void)poll(NULL, 0, left < 10 ? left : 10);
			continue;
		}
		if (poll(&pfd, 1, left) <= 0)
			continue; /* EINTR or timeout: the loop re-checks the deadline */
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) < 0 || so_error != 0) {
			snprintf(err, errlen, "connect: %s", strerror(so_error ? so_error : errno));
			return (NVRX_AGENT_ERROR);
		}
		return (NVRX_AGENT_OK);
	}
}

/* Only a listener running as root or as the job's user may receive what slurmstepd (root) sends. */
static int agent_check_peer(int fd, uid_t allowed_uid, char *err, size_t errlen)
{
	struct ucred peer = { 0, 0, 0 };
	socklen_t len = sizeof(peer);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0) {
		snprintf(err, errlen, "SO_PEERCRED: %s", strerror(errno));
		return (NVRX_AGENT_ERROR);
	}
	if (peer.uid != 0 && peer.uid != allowed_uid) {
		snprintf(err, errlen, "listener runs as uid %u, expected 0 or %u; not sending", (unsigned)peer.uid,
			 (unsigned)allowed_uid);
		return (NVRX_AGENT_ERROR);
	}
	return (NVRX_AGENT_OK);
}

static int agent_write(int fd, const char *line, long long deadline, char *err, size_t errlen)
{
	struct timeval tv = { 0, 0 };
	size_t len = strlen(line);
	size_t done = 0;
	ssize_t n = 0;
	int flags = 0;
	int left = 0;

	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		snprintf(err, errlen, "fcntl: %s", strerror(errno));
		return (NVRX_AGENT_ERROR);
	}
	while (done < len) {
		left = remaining_ms(deadline);
		if (left == 0) {
			snprintf(err, errlen, "write: agent did not read within the timeout");
			return (NVRX_AGENT_TIMEOUT);
		}
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
			snprintf(err, errlen, "SO_SNDTIMEO: %s", strerror(errno));
			return (NVRX_AGENT_ERROR);
		}
		n = send(fd, line + done, len - done, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			snprintf(err, errlen, "write: agent did not read within the timeout");
			return (NVRX_AGENT_TIMEOUT);
		}
		if (n < 0) {
			snprintf(err, errlen, "write: %s", strerror(errno));
			return (NVRX_AGENT_ERROR);
		}
		done += (size_t)n;
	}
	return (NVRX_AGENT_OK);
}

int nvrx_agent_send(const char *path, const char *line, int timeout_ms, uid_t allowed_uid, char *err,
		    size_t errlen)
{
	struct sockaddr_un addr;
	long long deadline = monotonic_ms() + timeout_ms;
	int rv = NVRX_AGENT_ERROR;
	int fd = -1;

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	if (nvrx_strlcpy(addr.sun_path, path, sizeof(addr.sun_path)) < 0) {
		snprintf(err, errlen, "socket path is longer than %zu bytes", sizeof(addr.sun_path) - 1);
		goto fail;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		goto fail;
	}
	rv = agent_connect(fd, &addr, deadline, err, errlen);
	if (rv != NVRX_AGENT_OK)
		goto fail;
	rv = agent_check_peer(fd, allowed_uid, err, errlen);
	if (rv != NVRX_AGENT_OK)
		goto fail;
	rv = agent_write(fd, line, deadline, err, errlen);
fail:
	if (fd >= 0)
		close(fd);
	return (rv);
}
