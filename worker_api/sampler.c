/* SPDX-License-Identifier: MIT */
/* worker_api/sampler.c: deterministic sharded sampling (torch's DistributedSampler rules). */
#include <errno.h>
#include <stdlib.h>

#include <crun/ddp.h>

CRUN_EXPORT int crun_sampler_init(struct crun_sampler *s, size_t dataset_len, int rank,
				  int world, uint64_t seed, bool shuffle, bool drop_last)
{
	if (s == NULL || world < 1 || rank < 0 || rank >= world || dataset_len == 0) {
		return -EINVAL;
	}
	if (drop_last && dataset_len < (size_t)world) {
		return -EINVAL; /* every rank would get nothing */
	}
	s->dataset_len = dataset_len;
	s->rank = rank;
	s->world = world;
	s->seed = seed;
	s->shuffle = shuffle;
	s->drop_last = drop_last;
	if (drop_last) {
		s->num_samples = dataset_len / (size_t)world;
	} else {
		s->num_samples = (dataset_len + (size_t)world - 1) / (size_t)world;
	}
	s->total_size = s->num_samples * (size_t)world;
	return 0;
}

/*
 * torch.randperm's generator: MT19937 seeded as torch's CPU generator does (the low 32 bits of
 * the seed), so that the same seed + epoch gives the same permutation as DistributedSampler.
 */
#define MT_N 624
#define MT_M 397

struct mt19937 {
	uint32_t s[MT_N];
	int i;
};

static void mt_seed(struct mt19937 *m, uint64_t seed)
{
	int j;

	m->s[0] = (uint32_t)seed;
	for (j = 1; j < MT_N; j++) {
		m->s[j] = 1812433253u * (m->s[j - 1] ^ (m->s[j - 1] >> 30)) + (uint32_t)j;
	}
	m->i = MT_N;
}

static uint32_t mt_next(struct mt19937 *m)
{
	uint32_t y;
	int k;

	if (m->i >= MT_N) {
		for (k = 0; k < MT_N; k++) {
			y = (m->s[k] & 0x80000000u) | (m->s[(k + 1) % MT_N] & 0x7fffffffu);
			m->s[k] = m->s[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
		}
		m->i = 0;
	}
	y = m->s[m->i++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

CRUN_EXPORT int crun_sampler_indices(const struct crun_sampler *s, uint64_t epoch, size_t *out)
{
	size_t *perm, i, j, tmp;

	if (s == NULL || out == NULL || s->dataset_len == 0 || s->world < 1) {
		return -EINVAL;
	}
	perm = malloc(s->dataset_len * sizeof(*perm));
	if (perm == NULL) {
		return -ENOMEM;
	}
	for (i = 0; i < s->dataset_len; i++) {
		perm[i] = i;
	}
	if (s->shuffle) {
		struct mt19937 *mt = malloc(sizeof(*mt));

		if (mt == NULL) {
			free(perm);
			return -ENOMEM;
		}
		/* torch's randperm on the CPU: swap position i with i + (random() % (len - i)). The
		 * modulo is slightly biased, but matching torch's order is the point. */
		mt_seed(mt, s->seed + epoch);
		for (i = 0; i + 1 < s->dataset_len; i++) {
			j = i + (size_t)(mt_next(mt) % (uint64_t)(s->dataset_len - i));
			tmp = perm[i];
			perm[i] = perm[j];
			perm[j] = tmp;
		}
		free(mt);
	}
	/* Position p of the padded (or trimmed) list is perm[p % len]: padding wraps around,
	 * repeatedly if the padding is longer than the dataset. */
	for (i = 0; i < s->num_samples; i++) {
		out[i] = perm[((size_t)s->rank + i * (size_t)s->world) % s->dataset_len];
	}
	free(perm);
	return 0;
}
