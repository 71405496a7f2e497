/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_config.c: table-driven strict parser for the plugstack.conf key=value arguments. */
#define _GNU_SOURCE

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "nvrx_config.h"

enum key_kind {
	KEY_TEMPLATE, /* absolute path template, char[NVRX_PATH_MAX] */
	KEY_INT,      /* decimal integer in [min, max], int */
	KEY_ON_OFF,   /* "on" or "off", bool */
};

struct config_key {
	const char *name;
	enum key_kind kind;
	size_t offset;
	long min;
	long max;
};

static const struct config_key config_keys[] = {
	{ "agent_socket", KEY_TEMPLATE, offsetof(struct nvrx_config, agent_socket), 0, 0 },
	{ "bb_dir", KEY_TEMPLATE, offsetof(struct nvrx_config, bb_dir), 0, 0 },
	{ "timeout_ms", KEY_INT, offsetof(struct nvrx_config, timeout_ms), NVRX_TIMEOUT_MS_MIN, NVRX_TIMEOUT_MS_MAX },
	{ "default", KEY_ON_OFF, offsetof(struct nvrx_config, default_on), 0, 0 },
};

#define N_CONFIG_KEYS (sizeof(config_keys) / sizeof(config_keys[0]))

static void config_set_defaults(struct nvrx_config *config)
{
	memset(config, 0, sizeof(*config));
	/* Both defaults fit: the copies cannot fail. */
	(void)nvrx_strlcpy(config->agent_socket, NVRX_DEFAULT_AGENT_SOCKET, sizeof(config->agent_socket));
	(void)nvrx_strlcpy(config->bb_dir, NVRX_DEFAULT_BB_DIR, sizeof(config->bb_dir));
	config->timeout_ms = NVRX_DEFAULT_TIMEOUT_MS;
	config->default_on = false;
}

static const struct config_key *config_key_find(const char *name, size_t name_len)
{
	size_t i = 0;

	for (i = 0; i < N_CONFIG_KEYS; i++) {
		if (strlen(config_keys[i].name) == name_len && strncmp(config_keys[i].name, name, name_len) == 0)
			return (&config_keys[i]);
	}
	return (NULL);
}

static void config_key_list(char *out, size_t size)
{
	struct nvrx_buf buf;
	size_t i = 0;

	nvrx_buf_init(&buf, out, size);
	for (i = 0; i < N_CONFIG_KEYS; i++)
		nvrx_buf_printf(&buf, "%s%s", i ? ", " : "", config_keys[i].name);
}

static int config_key_apply(struct nvrx_config *config, const struct config_key *key, const char *value,
			    char *err, size_t errlen)
{
	char *field = (char *)config + key->offset;
	char detail[256] = "";
	char *end = NULL;
	long number = 0;

	switch (key->kind) {
	case KEY_TEMPLATE:
		if (nvrx_template_check(value, detail, sizeof(detail)) < 0) {
			snprintf(err, errlen, "bad value for key '%s': %s", key->name, detail);
			return (-1);
		}
		return (nvrx_strlcpy(field, value, NVRX_PATH_MAX));
	case KEY_INT:
		errno = 0;
		number = strtol(value, &end, 10);
		if (value[0] == '\0' || *end != '\0' || errno != 0 || number < key->min || number > key->max) {
			snprintf(err, errlen, "bad value for key '%s': '%s' is not an integer from %ld to %ld",
				 key->name, value, key->min, key->max);
			return (-1);
		}
		*(int *)(void *)field = (int)number;
		return (0);
	case KEY_ON_OFF:
		if (strcmp(value, "on") == 0) {
			*(bool *)(void *)field = true;
		} else if (strcmp(value, "off") == 0) {
			*(bool *)(void *)field = false;
		} else {
			snprintf(err, errlen, "bad value for key '%s': '%s' is neither on nor off", key->name, value);
			return (-1);
		}
		return (0);
	}
	snprintf(err, errlen, "key '%s' has no parser", key->name);
	return (-1);
}

int nvrx_config_parse(struct nvrx_config *config, int ac, char **av, char *err, size_t errlen)
{
	bool seen[N_CONFIG_KEYS] = { false };
	const struct config_key *key = NULL;
	const char *eq = NULL;
	char valid[128] = "";
	int rv = -1;
	int i = 0;

	config_set_defaults(config);
	for (i = 0; i < ac; i++) {
		eq = strchr(av[i], '=');
		if (eq == NULL || eq == av[i]) {
			snprintf(err, errlen, "argument '%s' is not key=value", av[i]);
			goto fail;
		}
		key = config_key_find(av[i], (size_t)(eq - av[i]));
		if (key == NULL) {
			config_key_list(valid, sizeof(valid));
			snprintf(err, errlen, "unknown key '%.*s' in '%s' (valid keys: %s)", (int)(eq - av[i]), av[i],
				 av[i], valid);
			goto fail;
		}
		if (seen[key - config_keys]) {
			snprintf(err, errlen, "key '%s' given twice", key->name);
			goto fail;
		}
		seen[key - config_keys] = true;
		if (config_key_apply(config, key, eq + 1, err, errlen) < 0)
			goto fail;
	}
	rv = 0;
fail:
	return (rv);
}

int nvrx_config_load(struct nvrx_config *config, int ac, char **av)
{
	char err[NVRX_PATH_MAX + 256] = "";

	if (nvrx_config_parse(config, ac, av, err, sizeof(err)) < 0) {
		slurm_error("nvrx: plugstack.conf: %s", err);
		return (-1);
	}
	return (0);
}

int nvrx_config_check(int ac, char **av)
{
	static struct nvrx_config scratch;

	return (nvrx_config_load(&scratch, ac, av));
}
