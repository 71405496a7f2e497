/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/*
 * nvrx_remote.c: slurmstepd (remote context). Exports the agent socket, burst buffer and node
 * name into the task environment and reports task starts, task exits and the step end to the
 * node agent. Everything after plugstack parsing fails open: a missing, slow or broken agent
 * costs one log line, never the job.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "nvrx_agent.h"
#include "nvrx_common.h"
#include "nvrx_config.h"
#include "nvrx_options.h"
#include "nvrx_remote.h"

#define NODE_NAME_MAX 256
#define MESSAGE_MAX 2048

/* One slurmstepd runs one step on one node; this is its whole state. */
static struct {
	struct nvrx_config config;
	bool loaded;           /* init parsed the plugstack line (an `optional` plugin may run on without) */
	bool enabled;          /* nvrx is on for this step (init_post_opt) */
	bool ready;            /* socket resolved (user_init): messages may be sent */
	bool warned;           /* the one slurm_info line about an unreachable agent is out */
	bool agent_gone;       /* the agent timed out once: stop waiting on it in this step */
	uid_t uid;             /* the job's user: the only non-root listener we talk to */
	uint32_t job_id;
	uint32_t step_id;
	uint32_t restart_count;
	char step[16];         /* the step as a JSON value: 3 or "batch" */
	char node[NODE_NAME_MAX];
	char socket[NVRX_PATH_MAX];
	char bb_dir[NVRX_PATH_MAX];
	char template[NVRX_PATH_MAX];
} context;

int nvrx_remote_init(spank_t sp, int ac, char **av)
{
	if (nvrx_config_load(&context.config, ac, av) < 0)
		return (-1);
	context.loaded = true;
	return (nvrx_options_register(sp));
}

/*
 * How often the job was requeued. On 22.05 S_SLURM_RESTART_COUNT stays 0 after `scontrol requeue`
 * (seen on the lab cluster), while the batch script runs with SLURM_RESTART_COUNT=N and its sruns
 * pass that on in the step's environment; take the larger of the two. The batch step itself gets
 * the variable only in its task, after these callbacks, so it reports 0.
 */
static uint32_t restart_count_read(spank_t sp)
{
	char value[16] = "";
	uint32_t count = 0;
	unsigned long env_count = 0;
	char *end = NULL;
	spank_err_t rc = spank_get_item(sp, S_SLURM_RESTART_COUNT, &count);

	if (rc != ESPANK_SUCCESS) {
		slurm_verbose("nvrx: cannot read the restart count: %s", spank_strerror(rc));
		count = 0;
	}
	if (spank_getenv(sp, "SLURM_RESTART_COUNT", value, sizeof(value)) == ESPANK_SUCCESS && value[0] >= '0' &&
	    value[0] <= '9') {
		errno = 0;
		env_count = strtoul(value, &end, 10);
		if (errno == 0 && *end == '\0' && env_count <= UINT32_MAX && env_count > count)
			count = (uint32_t)env_count;
	}
	return (count);
}

static int step_read_ids(spank_t sp)
{
	spank_err_t rc = ESPANK_SUCCESS;

	rc = spank_get_item(sp, S_JOB_ID, &context.job_id);
	if (rc == ESPANK_SUCCESS)
		rc = spank_get_item(sp, S_JOB_STEPID, &context.step_id);
	if (rc == ESPANK_SUCCESS)
		rc = spank_get_item(sp, S_JOB_UID, &context.uid);
	if (rc != ESPANK_SUCCESS) {
		slurm_info("nvrx: cannot read the job and step ids: %s; nvrx is off for this step",
			   spank_strerror(rc));
		return (-1);
	}
	context.restart_count = restart_count_read(sp);
	if (context.step_id == SLURM_BATCH_SCRIPT)
		snprintf(context.step, sizeof(context.step), "\"batch\"");
	else if (context.step_id == SLURM_INTERACTIVE_STEP)
		snprintf(context.step, sizeof(context.step), "\"interactive\"");
	else
		snprintf(context.step, sizeof(context.step), "%u", context.step_id);
	return (0);
}

int nvrx_remote_init_post_opt(spank_t sp, int ac, char **av)
{
	const struct nvrx_options *options = nvrx_options_get();

	(void)ac;
	(void)av;
	context.enabled = false;
	if (!context.loaded || (!options->enabled && !context.config.default_on))
		return (0);
	if (step_read_ids(sp) < 0)
		return (0);
	/* The extern step holds no user tasks: nothing to register. */
	if (context.step_id == SLURM_EXTERN_CONT)
		return (0);
	context.enabled = true;
	return (0);
}

/*
 * The Slurm node name (NodeName, what `slurmd -N` was given), from slurmstepd's own environment:
 * slurmd sets SLURMD_NODENAME in its environment and slurmstepd inherits it. Not gethostname(),
 * which is the same for every virtual node of a test cluster and may differ from NodeName on real
 * sites; and not the job environment, which at user_init holds whatever the submitting shell had
 * (an srun inside a batch script carries the batch node's SLURMD_NODENAME to every node).
 */
static int node_name_read(void)
{
	const char *name = getenv("SLURMD_NODENAME");

	if (name != NULL && name[0] != '\0' && nvrx_strlcpy(context.node, name, sizeof(context.node)) == 0)
		return (0);
	if (gethostname(context.node, sizeof(context.node)) == 0 && context.node[0] != '\0') {
		context.node[sizeof(context.node) - 1] = '\0';
		slurm_info("nvrx: job %u step %s: SLURMD_NODENAME not set in slurmstepd; using hostname '%s'",
			   context.job_id, context.step, context.node);
		return (0);
	}
	slurm_info("nvrx: job %u step %s: cannot tell the node name; nvrx is off", context.job_id, context.step);
	return (-1);
}

/* Read one job-environment variable into buf; 0 if present, -1 if absent or unreadable. */
static int job_getenv(spank_t sp, const char *name, char *buf, int size)
{
	spank_err_t rc = spank_getenv(sp, name, buf, size);

	if (rc == ESPANK_SUCCESS)
		return (0);
	if (rc != ESPANK_ENV_NOEXIST)
		slurm_info("nvrx: cannot read %s from the job environment: %s", name, spank_strerror(rc));
	buf[0] = '\0';
	return (-1);
}

/*
 * Which socket template applies, in order:
 *   1. NVRX_AGENT_SOCKET holding a '%': a launcher that runs its own agents (user mode);
 *   2. NVRX_AGENT_SOCKET_TEMPLATE: set by this plugin in an enclosing step (the batch step of
 *      `sbatch --nvrx`), whose NVRX_AGENT_SOCKET was expanded for another node;
 *   3. NVRX_AGENT_SOCKET without '%': a fixed path set by the user;
 *   4. agent_socket from plugstack.conf.
 * A malformed environment value is logged and skipped: the step must not fail over it.
 */
static void socket_template_choose(spank_t sp)
{
	char socket_env[NVRX_PATH_MAX] = "";
	char template_env[NVRX_PATH_MAX] = "";
	char err[NVRX_PATH_MAX + 128] = "";
	const char *chosen = NULL;
	const char *source = NULL;
	bool have_socket = false;
	bool have_template = false;

	have_socket = job_getenv(sp, NVRX_ENV_AGENT_SOCKET, socket_env, sizeof(socket_env)) == 0;
	have_template = job_getenv(sp, NVRX_ENV_AGENT_SOCKET_TEMPLATE, template_env, sizeof(template_env)) == 0;
	if (have_socket && strchr(socket_env, '%') != NULL) {
		chosen = socket_env;
		source = NVRX_ENV_AGENT_SOCKET;
	} else if (have_template) {
		chosen = template_env;
		source = NVRX_ENV_AGENT_SOCKET_TEMPLATE;
	} else if (have_socket) {
		chosen = socket_env;
		source = NVRX_ENV_AGENT_SOCKET;
	}
	if (chosen != NULL && nvrx_template_check(chosen, err, sizeof(err)) < 0) {
		slurm_info("nvrx: job %u step %s: ignoring %s: %s", context.job_id, context.step, source, err);
		chosen = NULL;
	}
	if (chosen == NULL) {
		chosen = context.config.agent_socket;
		source = "plugstack agent_socket";
	}
	slurm_verbose("nvrx: job %u step %s: agent socket template %s from %s", context.job_id, context.step,
		      chosen, source);
	/* chosen passed nvrx_template_check, so it fits. */
	(void)nvrx_strlcpy(context.template, chosen, sizeof(context.template));
}

static void task_setenv(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_setenv(sp, name, value, 1);

	if (rc != ESPANK_SUCCESS)
		slurm_info("nvrx: job %u step %s: cannot set %s in the task environment: %s", context.job_id,
			   context.step, name, spank_strerror(rc));
}

int nvrx_remote_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!context.enabled)
		return (0);
	if (node_name_read() < 0)
		return (0);
	socket_template_choose(sp);
	if (nvrx_template_expand(context.template, context.job_id, context.node, context.socket,
				 sizeof(context.socket)) < 0 ||
	    nvrx_template_expand(context.config.bb_dir, context.job_id, context.node, context.bb_dir,
				 sizeof(context.bb_dir)) < 0) {
		slurm_info("nvrx: job %u step %s: cannot expand the paths for node '%s'; nvrx is off",
			   context.job_id, context.step, context.node);
		return (0);
	}
	task_setenv(sp, NVRX_ENV_AGENT_SOCKET, context.socket);
	task_setenv(sp, NVRX_ENV_AGENT_SOCKET_TEMPLATE, context.template);
	task_setenv(sp, NVRX_ENV_BB_DIR, context.bb_dir);
	task_setenv(sp, NVRX_ENV_NODE, context.node);
	context.ready = true;
	return (0);
}

static void message_begin(struct nvrx_buf *msg, const char *type)
{
	nvrx_buf_printf(msg, "{\"v\":1,\"type\":");
	nvrx_buf_json_string(msg, type);
	nvrx_buf_printf(msg, ",\"job\":%u,\"step\":%s", context.job_id, context.step);
}

static void message_end(struct nvrx_buf *msg)
{
	struct timespec now = { 0, 0 };

	clock_gettime(CLOCK_REALTIME, &now);
	nvrx_buf_printf(msg, ",\"node\":");
	nvrx_buf_json_string(msg, context.node);
	nvrx_buf_printf(msg, ",\"time\":%lld.%06ld}\n", (long long)now.tv_sec, now.tv_nsec / 1000);
}

static void agent_send(const char *type, const struct nvrx_buf *msg)
{
	char err[256] = "";
	int rc = NVRX_AGENT_ERROR;

	if (msg->overflow) {
		slurm_info("nvrx: job %u step %s: %s message does not fit in %d bytes; not sent", context.job_id,
			   context.step, type, MESSAGE_MAX);
		return;
	}
	if (context.agent_gone) {
		slurm_verbose("nvrx: job %u step %s: %s not sent, the agent timed out earlier", context.job_id,
			      context.step, type);
		return;
	}
	rc = nvrx_agent_send(context.socket, msg->data, context.config.timeout_ms, context.uid, err, sizeof(err));
	if (rc == NVRX_AGENT_OK) {
		slurm_verbose("nvrx: job %u step %s: sent %s to %s", context.job_id, context.step, type,
			      context.socket);
		return;
	}
	if (rc == NVRX_AGENT_TIMEOUT)
		context.agent_gone = true;
	if (!context.warned) {
		context.warned = true;
		slurm_info("nvrx: job %u step %s: no agent at %s (%s); the step continues without it",
			   context.job_id, context.step, context.socket, err);
	} else {
		slurm_verbose("nvrx: job %u step %s: %s not sent to %s: %s", context.job_id, context.step, type,
			      context.socket, err);
	}
}

/* The ids every task message carries: rank, local rank and pid. */
static int task_read_ids(spank_t sp, uint32_t *rank, int *local_rank, pid_t *pid)
{
	spank_err_t rc = spank_get_item(sp, S_TASK_GLOBAL_ID, rank);

	if (rc == ESPANK_SUCCESS)
		rc = spank_get_item(sp, S_TASK_ID, local_rank);
	if (rc == ESPANK_SUCCESS)
		rc = spank_get_item(sp, S_TASK_PID, pid);
	if (rc != ESPANK_SUCCESS) {
		slurm_info("nvrx: job %u step %s: cannot read the task ids: %s", context.job_id, context.step,
			   spank_strerror(rc));
		return (-1);
	}
	return (0);
}

static void message_task(struct nvrx_buf *msg, uint32_t rank, int local_rank, pid_t pid)
{
	nvrx_buf_printf(msg, ",\"rank\":%u,\"local_rank\":%d,\"pid\":%ld,\"restart_count\":%u", rank, local_rank,
			(long)pid, context.restart_count);
}

int nvrx_remote_task_post_fork(spank_t sp, int ac, char **av)
{
	char data[MESSAGE_MAX] = "";
	struct nvrx_buf msg;
	uint32_t rank = 0;
	int local_rank = 0;
	pid_t pid = 0;

	(void)ac;
	(void)av;
	if (!context.ready || task_read_ids(sp, &rank, &local_rank, &pid) < 0)
		return (0);
	nvrx_buf_init(&msg, data, sizeof(data));
	message_begin(&msg, "register");
	message_task(&msg, rank, local_rank, pid);
	message_end(&msg);
	agent_send("register", &msg);
	return (0);
}

int nvrx_remote_task_exit(spank_t sp, int ac, char **av)
{
	char data[MESSAGE_MAX] = "";
	struct nvrx_buf msg;
	spank_err_t rc = ESPANK_SUCCESS;
	uint32_t rank = 0;
	int local_rank = 0;
	int status = 0;
	pid_t pid = 0;

	(void)ac;
	(void)av;
	if (!context.ready || task_read_ids(sp, &rank, &local_rank, &pid) < 0)
		return (0);
	rc = spank_get_item(sp, S_TASK_EXIT_STATUS, &status);
	if (rc != ESPANK_SUCCESS) {
		slurm_info("nvrx: job %u step %s: cannot read the exit status of rank %u: %s", context.job_id,
			   context.step, rank, spank_strerror(rc));
		return (0);
	}
	nvrx_buf_init(&msg, data, sizeof(data));
	message_begin(&msg, "task_exit");
	message_task(&msg, rank, local_rank, pid);
	nvrx_buf_printf(&msg, ",\"status\":%d", status);
	if (WIFEXITED(status))
		nvrx_buf_printf(&msg, ",\"exit_code\":%d,\"signal\":null", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		nvrx_buf_printf(&msg, ",\"exit_code\":null,\"signal\":%d", WTERMSIG(status));
	else
		nvrx_buf_printf(&msg, ",\"exit_code\":null,\"signal\":null");
	message_end(&msg);
	agent_send("task_exit", &msg);
	return (0);
}

int nvrx_remote_exit(spank_t sp, int ac, char **av)
{
	char data[MESSAGE_MAX] = "";
	struct nvrx_buf msg;

	(void)sp;
	(void)ac;
	(void)av;
	if (!context.ready)
		return (0);
	nvrx_buf_init(&msg, data, sizeof(data));
	message_begin(&msg, "step_end");
	message_end(&msg);
	agent_send("step_end", &msg);
	return (0);
}
