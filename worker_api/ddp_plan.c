/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_plan.c: bucket planning for the DDP engine, host and device alike. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/common/fnv.h"
#include "worker_api/ddp_plan.h"

static struct ddp_slot *slot_at(void *tensors, size_t stride, int i)
{
	return (struct ddp_slot *)((char *)tensors + (size_t)i * stride);
}

int ddp_plan_buckets(void *tensors, size_t stride, int nt, size_t first_bytes,
		     size_t cap_bytes, struct ddp_bucket **out, int *nb_out)
{
	struct ddp_bucket *b, *bk = NULL;
	struct ddp_slot *s;
	size_t cap, bytes;
	int i, nb = 0;

	if (nt <= 0) {
		return -EINVAL;
	}
	b = calloc((size_t)nt, sizeof(*b));
	if (b == NULL) {
		return -ENOMEM;
	}
	for (i = nt - 1; i >= 0; i--) {
		s = slot_at(tensors, stride, i);
		bytes = s->n * sizeof(float);
		cap = bk == b ? first_bytes : cap_bytes;
		if (bk == NULL || bk->numel * sizeof(float) + bytes > cap) {
			bk = &b[nb++];
			bk->first = i;
		}
		s->bucket = (int)(bk - b);
		bk->numel += s->n;
		bk->count++;
	}
	for (i = 0; i < nb; i++) {
		int lo = b[i].first - b[i].count + 1;
		bool gspan = true, pspan = true;
		struct ddp_slot *next;
		size_t off = 0;
		int k;

		b[i].pending = b[i].count;
		for (k = 0; k < b[i].count; k++) {
			s = slot_at(tensors, stride, lo + k);
			s->offset = off;
			off += s->n;
			if (k + 1 < b[i].count) {
				next = slot_at(tensors, stride, lo + k + 1);
				gspan = gspan && s->grad + s->n == next->grad;
				pspan = pspan && s->param + s->n == next->param;
			}
		}
		s = slot_at(tensors, stride, lo);
		b[i].grad_span = gspan ? s->grad : NULL;
		b[i].param_span = pspan ? s->param : NULL;
	}
	*out = b;
	*nb_out = nb;
	return 0;
}

void ddp_plan_summary(const void *tensors, size_t stride, int nt, const struct ddp_bucket *b,
		      int nb, size_t first_bytes, size_t cap_bytes, double out[DDP_PLAN_WORDS])
{
	uint64_t h = FNV1A64_INIT;
	size_t numel = 0, n;
	int i;

	h = fnv1a64_u64(h, (uint64_t)nt);
	for (i = 0; i < nt; i++) {
		n = slot_at((void *)tensors, stride, i)->n;
		h = fnv1a64_u64(h, (uint64_t)n);
		numel += n;
	}
	h = fnv1a64_u64(h, (uint64_t)first_bytes);
	h = fnv1a64_u64(h, (uint64_t)cap_bytes);
	h = fnv1a64_u64(h, (uint64_t)nb);
	for (i = 0; i < nb; i++) {
		h = fnv1a64_u64(h, (uint64_t)b[i].first);
		h = fnv1a64_u64(h, (uint64_t)b[i].count);
	}
	out[0] = (double)(h >> 32);
	out[1] = (double)(h & 0xffffffffu);
	out[2] = (double)nt;
	out[3] = (double)numel;
	out[4] = (double)nb;
	out[5] = (double)first_bytes;
	out[6] = (double)cap_bytes;
}

void ddp_plan_describe(const double w[DDP_PLAN_WORDS], char *buf, size_t len)
{
	snprintf(buf, len, "%.0f tensors, %.0f floats, %.0f buckets (first %.0f B, cap %.0f B), "
		 "plan %08llx%08llx",
		 w[2], w[3], w[4], w[5], w[6], (unsigned long long)w[0], (unsigned long long)w[1]);
}
