/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_common.c: pure helpers (templates, bounded strings, JSON); no Slurm calls, unit-tested. */
#define _GNU_SOURCE

#include <stdio.h>
#include <string.h>

#include "nvrx_common.h"

int nvrx_strlcpy(char *dst, const char *src, size_t size)
{
	size_t len = 0;

	if (size == 0)
		return (-1);
	len = strlen(src);
	if (len >= size) {
		dst[0] = '\0';
		return (-1);
	}
	memcpy(dst, src, len + 1);
	return (0);
}

int nvrx_template_check(const char *tpl, char *err, size_t errlen)
{
	const char *p = NULL;

	if (tpl[0] == '\0') {
		snprintf(err, errlen, "empty path");
		return (-1);
	}
	if (tpl[0] != '/') {
		snprintf(err, errlen, "'%s' is not an absolute path", tpl);
		return (-1);
	}
	if (strlen(tpl) >= NVRX_PATH_MAX) {
		snprintf(err, errlen, "path longer than %d bytes", NVRX_PATH_MAX - 1);
		return (-1);
	}
	for (p = tpl; *p != '\0'; p++) {
		if (*p != '%')
			continue;
		p++;
		if (*p != 'j' && *p != 'n' && *p != '%') {
			snprintf(err, errlen, "'%s': unknown escape '%%%.1s' (use %%j, %%n or %%%%)", tpl, p);
			return (-1);
		}
	}
	return (0);
}

int nvrx_template_expand(const char *tpl, uint32_t job_id, const char *node, char *out, size_t size)
{
	struct nvrx_buf buf;
	const char *p = NULL;

	nvrx_buf_init(&buf, out, size);
	/* A node name becomes one path component: refuse anything that could climb or split it. */
	if (node[0] == '\0' || strchr(node, '/') != NULL || strcmp(node, ".") == 0 || strcmp(node, "..") == 0)
		return (-1);
	for (p = tpl; *p != '\0'; p++) {
		if (*p != '%') {
			nvrx_buf_printf(&buf, "%c", *p);
			continue;
		}
		p++;
		if (*p == 'j')
			nvrx_buf_printf(&buf, "%u", job_id);
		else if (*p == 'n')
			nvrx_buf_printf(&buf, "%s", node);
		else if (*p == '%')
			nvrx_buf_printf(&buf, "%%");
		else
			return (-1);
	}
	return (buf.overflow ? -1 : 0);
}

void nvrx_buf_init(struct nvrx_buf *buf, char *data, size_t size)
{
	buf->data = data;
	buf->size = size;
	buf->len = 0;
	buf->overflow = (size == 0);
	if (size > 0)
		data[0] = '\0';
}

void nvrx_buf_printf(struct nvrx_buf *buf, const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (buf->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf->data + buf->len, buf->size - buf->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= buf->size - buf->len) {
		buf->overflow = 1;
		buf->data[buf->len] = '\0';
		return;
	}
	buf->len += (size_t)n;
}

/* Length of the well-formed UTF-8 sequence at s (1 to 4), or 0 when it is not one (RFC 3629). */
static size_t utf8_sequence_length(const unsigned char *s)
{
	size_t len = 0;
	size_t i = 0;
	unsigned char lo = 0x80;
	unsigned char hi = 0xBF;

	if (s[0] < 0x80)
		return (1);
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4;
	else
		return (0);
	/* Narrower second-byte ranges rule out overlong forms, surrogates and code points past U+10FFFF. */
	if (s[0] == 0xE0)
		lo = 0xA0;
	else if (s[0] == 0xED)
		hi = 0x9F;
	else if (s[0] == 0xF0)
		lo = 0x90;
	else if (s[0] == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return (0);
	for (i = 2; i < len; i++) {
		if (s[i] < 0x80 || s[i] > 0xBF)
			return (0);
	}
	return (len);
}

void nvrx_buf_json_string(struct nvrx_buf *buf, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = 0;

	nvrx_buf_printf(buf, "\"");
	while (*p != '\0' && !buf->overflow) {
		switch (*p) {
		case '"':
			nvrx_buf_printf(buf, "\\\"");
			break;
		case '\\':
			nvrx_buf_printf(buf, "\\\\");
			break;
		case '\b':
			nvrx_buf_printf(buf, "\\b");
			break;
		case '\f':
			nvrx_buf_printf(buf, "\\f");
			break;
		case '\n':
			nvrx_buf_printf(buf, "\\n");
			break;
		case '\r':
			nvrx_buf_printf(buf, "\\r");
			break;
		case '\t':
			nvrx_buf_printf(buf, "\\t");
			break;
		default:
			if (*p < 0x20) {
				nvrx_buf_printf(buf, "\\u%04x", *p);
				break;
			}
			len = utf8_sequence_length(p);
			if (len == 0) {
				nvrx_buf_printf(buf, "\\ufffd");
				break;
			}
			nvrx_buf_printf(buf, "%.*s", (int)len, (const char *)p);
			p += len;
			continue;
		}
		p++;
	}
	nvrx_buf_printf(buf, "\"");
}
