/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* test_nvrx.c: unit tests for the pure helpers, the plugstack parser and the agent client (`make check`). */
#define _GNU_SOURCE

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "nvrx_agent.h"
#include "nvrx_common.h"
#include "nvrx_config.h"

static int failures;
static int checks;

/* The plugin resolves slurm_error in the host process; here it only records the last line. */
static char last_log[8192];

void slurm_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_log, sizeof(last_log), fmt, ap);
	va_end(ap);
}

#define CHECK(cond)                                                                      \
	do {                                                                             \
		checks++;                                                                \
		if (!(cond)) {                                                           \
			failures++;                                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                        \
	} while (0)

#define CHECK_STR(got, want)                                                                      \
	do {                                                                                      \
		checks++;                                                                         \
		if (strcmp((got), (want)) != 0) {                                                 \
			failures++;                                                               \
			fprintf(stderr, "%s:%d: got '%s', want '%s'\n", __FILE__, __LINE__, (got), (want)); \
		}                                                                                 \
	} while (0)

static const char *json(const char *s)
{
	static char out[512];
	struct nvrx_buf buf;

	nvrx_buf_init(&buf, out, sizeof(out));
	nvrx_buf_json_string(&buf, s);
	return (buf.overflow ? "<overflow>" : out);
}

static void test_json(void)
{
	char small[8];
	struct nvrx_buf buf;

	CHECK_STR(json("n1"), "\"n1\"");
	CHECK_STR(json(""), "\"\"");
	CHECK_STR(json("a\"b\\c"), "\"a\\\"b\\\\c\"");
	CHECK_STR(json("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
	CHECK_STR(json("\x01\x1f\x7f"), "\"\\u0001\\u001f\x7f\"");
	CHECK_STR(json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
	/* Invalid UTF-8: lone continuation, overlong, surrogate, past U+10FFFF, truncated sequence. */
	CHECK_STR(json("\x80"), "\"\\ufffd\"");
	CHECK_STR(json("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
	CHECK_STR(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
	CHECK_STR(json("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
	CHECK_STR(json("a\xe2\x82"), "\"a\\ufffd\\ufffd\"");
	/* A full buffer is reported, never silently cut. */
	nvrx_buf_init(&buf, small, sizeof(small));
	nvrx_buf_json_string(&buf, "0123456789");
	CHECK(buf.overflow);
	CHECK(strlen(small) < sizeof(small));
}

static void test_templates(void)
{
	char out[64];
	char err[256];

	CHECK(nvrx_template_check("/run/nvrx/%j/agent-%n.sock", err, sizeof(err)) == 0);
	CHECK(nvrx_template_check("/a/100%%", err, sizeof(err)) == 0);
	CHECK(nvrx_template_check("relative/%j", err, sizeof(err)) < 0);
	CHECK(strstr(err, "not an absolute path") != NULL);
	CHECK(nvrx_template_check("", err, sizeof(err)) < 0);
	CHECK(nvrx_template_check("/a/%u", err, sizeof(err)) < 0);
	CHECK(strstr(err, "%u") != NULL);
	CHECK(nvrx_template_check("/a/%", err, sizeof(err)) < 0);

	CHECK(nvrx_template_expand("/run/nvrx/%j/agent-%n.sock", 42, "n3", out, sizeof(out)) == 0);
	CHECK_STR(out, "/run/nvrx/42/agent-n3.sock");
	CHECK(nvrx_template_expand("/x/%%j%n%%", 7, "gpu-a01", out, sizeof(out)) == 0);
	CHECK_STR(out, "/x/%jgpu-a01%");
	CHECK(nvrx_template_expand("/x/%j", 4294967295u, "n1", out, sizeof(out)) == 0);
	CHECK_STR(out, "/x/4294967295");
	CHECK(nvrx_template_expand("/x/%n", 1, "../etc", out, sizeof(out)) < 0);
	CHECK(nvrx_template_expand("/x/%n", 1, "..", out, sizeof(out)) < 0);
	CHECK(nvrx_template_expand("/x/%n", 1, "", out, sizeof(out)) < 0);
	CHECK(nvrx_template_expand("/x/%q", 1, "n1", out, sizeof(out)) < 0);
	CHECK(nvrx_template_expand("/x/%n", 1, "n1", out, 5) < 0);
}

static int parse(struct nvrx_config *config, char *err, size_t errlen, int ac, ...)
{
	char *av[16];
	va_list ap;
	int i = 0;

	va_start(ap, ac);
	for (i = 0; i < ac && i < 16; i++)
		av[i] = va_arg(ap, char *);
	va_end(ap);
	err[0] = '\0';
	return (nvrx_config_parse(config, ac, av, err, errlen));
}

static void test_config(void)
{
	struct nvrx_config config;
	char err[512];
	char *bad[] = { "bogus=1" };

	CHECK(parse(&config, err, sizeof(err), 0) == 0);
	CHECK_STR(config.agent_socket, "/run/nvrx/%j/agent-%n.sock");
	CHECK_STR(config.bb_dir, "/dev/shm/nvrx/%j");
	CHECK(config.timeout_ms == 500);
	CHECK(!config.default_on);

	CHECK(parse(&config, err, sizeof(err), 4, "agent_socket=/s/%n/a-%j.sock", "bb_dir=/bb/%n/%j", "timeout_ms=60000",
		    "default=on") == 0);
	CHECK_STR(config.agent_socket, "/s/%n/a-%j.sock");
	CHECK_STR(config.bb_dir, "/bb/%n/%j");
	CHECK(config.timeout_ms == 60000);
	CHECK(config.default_on);

	/* Each failure names the key and resets nothing it should not: defaults come first every time. */
	CHECK(parse(&config, err, sizeof(err), 1, "bogus=1") < 0);
	CHECK(strstr(err, "unknown key 'bogus'") != NULL);
	CHECK(strstr(err, "agent_socket, bb_dir, timeout_ms, default") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms=abc") < 0);
	CHECK(strstr(err, "'timeout_ms'") != NULL && strstr(err, "'abc'") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms=0") < 0);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms=60001") < 0);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms=") < 0);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms=5x") < 0);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms=99999999999999999999") < 0);
	CHECK(parse(&config, err, sizeof(err), 1, "default=yes") < 0);
	CHECK(strstr(err, "'default'") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "agent_socket=rel/%j") < 0);
	CHECK(strstr(err, "'agent_socket'") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "bb_dir=/x/%s") < 0);
	CHECK(strstr(err, "'bb_dir'") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout_ms") < 0);
	CHECK(strstr(err, "not key=value") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "=5") < 0);
	CHECK(parse(&config, err, sizeof(err), 2, "timeout_ms=5", "timeout_ms=6") < 0);
	CHECK(strstr(err, "twice") != NULL);
	CHECK(parse(&config, err, sizeof(err), 1, "timeout=5") < 0);
	CHECK(strstr(err, "unknown key 'timeout'") != NULL);

	last_log[0] = '\0';
	CHECK(nvrx_config_load(&config, 1, bad) < 0);
	CHECK(strncmp(last_log, "nvrx: ", 6) == 0 && strstr(last_log, "bogus") != NULL);
}

static long long elapsed_ms(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return ((now.tv_sec - start->tv_sec) * 1000LL + (now.tv_nsec - start->tv_nsec) / 1000000);
}

static int listener(const char *path, int backlog)
{
	struct sockaddr_un addr;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, backlog) < 0) {
		perror("listener");
		exit(2);
	}
	return (fd);
}

static void test_agent(void)
{
	char dir[] = "/tmp/nvrx-test-XXXXXX";
	char path[108];
	char longpath[200];
	char err[256];
	char got[256];
	struct timespec start;
	long long ms = 0;
	ssize_t n = 0;
	int lfd = -1;
	int cfd = -1;
	int rc = 0;

	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		exit(2);
	}
	snprintf(path, sizeof(path), "%s/agent.sock", dir);

	/* Nobody listening: an immediate error, not a wait. */
	clock_gettime(CLOCK_MONOTONIC, &start);
	rc = nvrx_agent_send(path, "{}\n", 500, getuid(), err, sizeof(err));
	CHECK(rc == NVRX_AGENT_ERROR);
	CHECK(strstr(err, "No such file") != NULL);
	CHECK(elapsed_ms(&start) < 100);

	/* A listener: one line arrives, then EOF. */
	lfd = listener(path, 8);
	rc = nvrx_agent_send(path, "{\"v\":1}\n", 500, getuid(), err, sizeof(err));
	CHECK(rc == NVRX_AGENT_OK);
	cfd = accept(lfd, NULL, NULL);
	CHECK(cfd >= 0);
	n = read(cfd, got, sizeof(got) - 1);
	CHECK(n == 8);
	got[n > 0 ? n : 0] = '\0';
	CHECK_STR(got, "{\"v\":1}\n");
	CHECK(read(cfd, got, sizeof(got)) == 0);
	close(cfd);

	/* A listener that never accepts, backlog full: a timeout close to timeout_ms. */
	close(lfd);
	lfd = listener(path, 0);
	while (nvrx_agent_send(path, "x\n", 50, getuid(), err, sizeof(err)) == NVRX_AGENT_OK)
		;
	clock_gettime(CLOCK_MONOTONIC, &start);
	rc = nvrx_agent_send(path, "{}\n", 200, getuid(), err, sizeof(err));
	ms = elapsed_ms(&start);
	CHECK(rc == NVRX_AGENT_TIMEOUT);
	CHECK(ms >= 150 && ms < 1000);
	close(lfd);

	/* The socket file exists but nobody listens any more. */
	rc = nvrx_agent_send(path, "{}\n", 500, getuid(), err, sizeof(err));
	CHECK(rc == NVRX_AGENT_ERROR);
	CHECK(strstr(err, "Connection refused") != NULL);

	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	CHECK(nvrx_agent_send(longpath, "{}\n", 500, getuid(), err, sizeof(err)) == NVRX_AGENT_ERROR);
	CHECK(strstr(err, "longer than") != NULL);

	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_json();
	test_templates();
	test_config();
	test_agent();
	printf("test_nvrx: %d checks, %d failed\n", checks, failures);
	return (failures ? 1 : 0);
}
