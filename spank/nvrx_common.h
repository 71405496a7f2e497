/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_common.h: pure helpers (templates, bounded strings, JSON) shared by every context. */
#ifndef NVRX_COMMON_H
#define NVRX_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define NVRX_PATH_MAX 4096

/* Task environment the plugin reads (user mode) and writes (remote context). */
#define NVRX_ENV_AGENT_SOCKET "NVRX_AGENT_SOCKET"
#define NVRX_ENV_AGENT_SOCKET_TEMPLATE "NVRX_AGENT_SOCKET_TEMPLATE"
#define NVRX_ENV_BB_DIR "NVRX_BB_DIR"
#define NVRX_ENV_NODE "NVRX_NODE"

/* Copy src into dst; -1 (dst left empty) when it does not fit. */
int nvrx_strlcpy(char *dst, const char *src, size_t size);

/*
 * Path templates: an absolute path in which %j is the job id, %n the Slurm node name and
 * %% a literal '%'. Any other '%' sequence is an error.
 */
int nvrx_template_check(const char *tpl, char *err, size_t errlen);
int nvrx_template_expand(const char *tpl, uint32_t job_id, const char *node, char *out, size_t size);

/* A bounded output buffer: writes past the end set overflow instead of truncating silently. */
struct nvrx_buf {
	char *data;
	size_t size;
	size_t len;
	int overflow;
};

void nvrx_buf_init(struct nvrx_buf *buf, char *data, size_t size);
void nvrx_buf_printf(struct nvrx_buf *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s as a quoted JSON string: escapes '"', '\\' and control bytes; invalid UTF-8 becomes U+FFFD. */
void nvrx_buf_json_string(struct nvrx_buf *buf, const char *s);

#endif /* NVRX_COMMON_H */
