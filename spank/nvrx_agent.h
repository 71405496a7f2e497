/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_agent.h: one-way client for the node agent's Unix socket (one JSON line per connection). */
#ifndef NVRX_AGENT_H
#define NVRX_AGENT_H

#include <stddef.h>
#include <sys/types.h>

enum nvrx_agent_result {
	NVRX_AGENT_OK = 0,
	NVRX_AGENT_ERROR = -1,   /* nobody listening, bad path, refused peer, write error */
	NVRX_AGENT_TIMEOUT = -2, /* the agent did not accept or read within the budget */
};

/*
 * Connect to the Unix stream socket at path, check that the listener runs as root or as
 * allowed_uid (SO_PEERCRED), write line (which ends in '\n') and close. Connect and write
 * together take at most timeout_ms. On failure err says why.
 */
int nvrx_agent_send(const char *path, const char *line, int timeout_ms, uid_t allowed_uid, char *err,
		    size_t errlen);

#endif /* NVRX_AGENT_H */
