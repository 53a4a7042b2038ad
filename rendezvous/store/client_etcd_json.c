/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_json.c: building and reading etcd's JSON messages (json-c). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "rendezvous/store/client_etcd_internal.h"
#include "src/common/base64.h"

struct json_object *etcd_jbytes(const void *p, size_t n)
{
	struct json_object *o;
	char *s;

	s = malloc(base64_encoded_size(n));
	if (s == NULL) {
		return NULL;
	}
	base64_encode(p, n, s);
	o = json_object_new_string_len(s, (int)(base64_encoded_size(n) - 1));
	free(s);
	return o;
}

struct json_object *etcd_jkey_suffix(struct store_backend *b, const char *key,
				     const void *suffix, size_t slen)
{
	size_t l, kl = strlen(key);
	struct json_object *o;
	char *p;

	l = ETCD_ROOT_LEN + kl + slen;
	p = malloc(l + 1);
	if (p == NULL) {
		return NULL;
	}
	memcpy(p, ETCD_ROOT, ETCD_ROOT_LEN);
	memcpy(p + ETCD_ROOT_LEN, key, kl);
	if (slen > 0) {
		memcpy(p + ETCD_ROOT_LEN + kl, suffix, slen);
	}
	o = etcd_jbytes(p, l);
	free(p);
	return o;
}

struct json_object *etcd_jkey(struct store_backend *b, const char *key)
{
	return etcd_jkey_suffix(b, key, NULL, 0);
}

struct json_object *etcd_jint(int64_t v)
{
	char s[32];

	snprintf(s, sizeof(s), "%lld", (long long)v);
	return json_object_new_string(s);
}

void etcd_jset(struct json_object *o, const char *k, struct json_object *v, bool *bad)
{
	if (o == NULL || v == NULL || json_object_object_add(o, k, v) != 0) {
		json_object_put(v);
		*bad = true;
	}
}

void etcd_jpush(struct json_object *a, struct json_object *v, bool *bad)
{
	if (a == NULL || v == NULL || json_object_array_add(a, v) != 0) {
		json_object_put(v);
		*bad = true;
	}
}

struct json_object *etcd_jget(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;

	if (o == NULL || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, k, &v)) {
		return NULL;
	}
	return v;
}

int64_t etcd_jget_int(struct json_object *o, const char *k)
{
	struct json_object *v = etcd_jget(o, k);

	if (v == NULL) {
		return 0;
	}
	if (json_object_is_type(v, json_type_string)) {
		return strtoll(json_object_get_string(v), NULL, 10);
	}
	return json_object_get_int64(v);
}

bool etcd_jget_bool(struct json_object *o, const char *k)
{
	struct json_object *v = etcd_jget(o, k);

	return v != NULL && json_object_get_boolean(v);
}

int64_t etcd_revision(struct json_object *reply)
{
	return etcd_jget_int(etcd_jget(reply, "header"), "revision");
}

int etcd_jget_bytes(struct json_object *o, const char *k, void **p, size_t *n)
{
	struct json_object *v = etcd_jget(o, k);
	const char *s = "";
	size_t sl = 0;
	char *out;
	int rc;

	if (v != NULL && json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		sl = (size_t)json_object_get_string_len(v);
	}
	out = malloc(base64_decoded_cap(sl) + 1);
	if (out == NULL) {
		return -ENOMEM;
	}
	rc = base64_decode(s, sl, out, n);
	if (rc < 0) {
		free(out);
		return -EPROTO;
	}
	out[*n] = '\0';
	*p = out;
	return 0;
}
