/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_plan.h: bucket planning for the DDP engine (ddp.c), host and device alike. */
#ifndef CRUN_WORKER_API_DDP_PLAN_H
#define CRUN_WORKER_API_DDP_PLAN_H

#include <stdbool.h>
#include <stddef.h>

/* What the planner needs of one registered tensor: the first member of each tensor struct. */
struct ddp_slot {
	float *param;
	float *grad;
	size_t n;
	int bucket;
	size_t offset; /* in the bucket's flat layout: forward registration order */
};

struct ddp_bucket {
	int first, count; /* tensors first-count+1 .. first, i.e. reverse registration order */
	size_t numel;
	/* When the bucket's tensors lie back to back in memory (one tensor always does), the
	 * collectives run in place on these spans; otherwise through the flat copy @buf (which
	 * the caller allocates, host or device). Both follow the same layout, so ranks that
	 * differ in contiguity still pair elements. */
	float *grad_span;
	float *param_span;
	float *buf;
	int pending; /* tensors not yet marked in this step */
	bool ready;
};

/*
 * Group @nt tensors into buckets, last registered first: the first bucket holds at most
 * @first_bytes, the others @cap_bytes (a tensor larger than the cap gets a bucket of its
 * own). @tensors is an array of structs of @stride bytes, each starting with a struct
 * ddp_slot; their bucket and offset are filled in. Each bucket's first/count/numel/pending
 * and spans are set; buf is left NULL. On success *@out holds calloc'd buckets (*@nb of
 * them). Returns 0, -EINVAL when @nt is 0, or -ENOMEM.
 */
int ddp_plan_buckets(void *tensors, size_t stride, int nt, size_t first_bytes,
		     size_t cap_bytes, struct ddp_bucket **out, int *nb);

/*
 * The plan every rank must share before any bucket is reduced (ddp.c gathers it once, when
 * the buckets are built): ranks that registered different sizes, or set different caps, would
 * pair different elements, or wait for a collective the others never start. Words, as
 * doubles so that any communicator can gather them (each is exact): the 64-bit FNV-1a hash
 * of the tensor sizes, the caps and the bucket boundaries (high and low 32 bits), then the
 * tensor count, the total floats, the bucket count and the two caps in bytes (what a message
 * shows: the caps may round).
 */
#define DDP_PLAN_WORDS 7

/** Fill @out with the plan of @nt tensors (as ddp_plan_buckets() left them) in @nb buckets. */
void ddp_plan_summary(const void *tensors, size_t stride, int nt, const struct ddp_bucket *b,
		      int nb, size_t first_bytes, size_t cap_bytes, double out[DDP_PLAN_WORDS]);
/** "<n> tensors, <n> floats, <n> buckets (first <n> B, cap <n> B), plan <hash>" into @buf. */
void ddp_plan_describe(const double w[DDP_PLAN_WORDS], char *buf, size_t len);

/* Whether the bucket needs a flat buffer: its gradients or parameters are not back to back. */
static inline bool ddp_bucket_needs_buf(const struct ddp_bucket *bk)
{
	return bk->grad_span == NULL || bk->param_span == NULL;
}

#endif
