/* SPDX-License-Identifier: MIT */
/* examples/train_common.c: what examples/train and train_gpu share: options, data, model. */

/*
 * The CPU program (train.c) and the CUDA one (train_gpu.c) are the same trainer: the options,
 * the data loading and split, the model and its initialisation, the host training step (the
 * CPU program's, and --gradcheck's reference in both), the evaluation, the checkpoints and
 * the digest are this file's, so the two builds cannot drift apart.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nettle/sha2.h>
#if TRAIN_HAVE_ZLIB
#include <zlib.h>
#endif

#include <crun/crun.h>

#include "examples/train_common.h"

int g_rank = -1;

void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "train: rank %d: %s\n", g_rank, msg);
	crun_error_record(msg);
	crun_finish();
	exit(1);
}

uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s)
{
	return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0));
}

static void data_alloc(struct dataset *d, size_t n)
{
	d->n = n;
	d->x = calloc(n * NFEAT, sizeof(float));
	d->y = calloc(n, sizeof(int));
	if (d->x == NULL || d->y == NULL) {
		die("dataset: out of memory for %zu samples", n);
	}
}

/* Ten noisy prototypes in [0,1]^64: learnable, but not trivially. */
void data_synthetic(struct dataset *d, size_t n, uint64_t seed)
{
	float proto[NCLASS][NFEAT];
	uint64_t s = seed ^ 0x5eedULL;
	size_t i;
	int c, f;

	for (c = 0; c < NCLASS; c++) {
		for (f = 0; f < NFEAT; f++) {
			proto[c][f] = rng_uniform(&s);
		}
	}
	data_alloc(d, n);
	for (i = 0; i < n; i++) {
		c = (int)(rng_next(&s) % NCLASS);
		d->y[i] = c;
		for (f = 0; f < NFEAT; f++) {
			d->x[i * NFEAT + f] = proto[c][f] + 0.35f * (rng_uniform(&s) - 0.5f);
		}
	}
}

/* sklearn's digits.csv.gz: 1797 lines of 64 pixel values (0..16) and the label. */
int data_load(struct dataset *d, const char *path, char *err, size_t errlen)
{
#if TRAIN_HAVE_ZLIB
	char line[1024], *p, *end;
	size_t cap = 2048, n = 0, lineno = 0;
	gzFile gz;
	long v;
	int f;

	gz = gzopen(path, "rb");
	if (gz == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno ? errno : ENOENT));
		return -ENOENT;
	}
	data_alloc(d, cap);
	while (gzgets(gz, line, sizeof(line)) != NULL) {
		lineno++;
		if (line[0] == '\n' || line[0] == '\0') {
			continue;
		}
		if (n == cap) {
			snprintf(err, errlen, "%s: more than %zu samples", path, cap);
			goto bad;
		}
		p = line;
		for (f = 0; f <= NFEAT; f++) {
			errno = 0;
			v = strtol(p, &end, 10);
			if (end == p || errno != 0 || (f < NFEAT && (v < 0 || v > 16)) ||
			    (f == NFEAT && (v < 0 || v >= NCLASS)) ||
			    (f < NFEAT && *end != ',') ||
			    (f == NFEAT && *end != '\n' && *end != '\r' && *end != '\0')) {
				snprintf(err, errlen, "%s:%zu: field %d: expected %s", path, lineno,
					 f + 1, f < NFEAT ? "a pixel value 0..16" : "a label 0..9");
				goto bad;
			}
			if (f < NFEAT) {
				d->x[n * NFEAT + (size_t)f] = (float)v / 16.0f;
			} else {
				d->y[n] = (int)v;
			}
			p = end + 1;
		}
		n++;
	}
	gzclose(gz);
	if (n < 100) {
		snprintf(err, errlen, "%s: only %zu samples", path, n);
		free(d->x);
		free(d->y);
		memset(d, 0, sizeof(*d));
		return -EINVAL;
	}
	d->n = n;
	return 0;
bad:
	gzclose(gz);
	free(d->x);
	free(d->y);
	memset(d, 0, sizeof(*d));
	return -EINVAL;
#else
	snprintf(err, errlen, "%s: built without zlib", path);
	(void)d;
	return -ENOTSUP;
#endif
}

void shuffle_fixed(struct dataset *d)
{
	uint64_t s = 20261122;
	float tmp[NFEAT];
	size_t i, j;
	int y;

	for (i = d->n - 1; i > 0; i--) {
		j = (size_t)(rng_next(&s) % (i + 1));
		memcpy(tmp, d->x + i * NFEAT, sizeof(tmp));
		memcpy(d->x + i * NFEAT, d->x + j * NFEAT, sizeof(tmp));
		memcpy(d->x + j * NFEAT, tmp, sizeof(tmp));
		y = d->y[i];
		d->y[i] = d->y[j];
		d->y[j] = y;
	}
}

size_t data_prepare(const struct opts *o, int rank, struct dataset *d)
{
	char err[512];

	if (o->synthetic) {
		data_synthetic(d, (size_t)o->samples, 1234);
	} else if (data_load(d, o->data, err, sizeof(err)) < 0) {
		if (rank == 0) {
			fprintf(stderr,
				"train: warning: %s; using generated data instead "
				"(run scripts/fetch-digits for the real digits)\n",
				err);
		}
		data_synthetic(d, (size_t)o->samples, 1234);
	}
	/* A fixed split, the same for every run and rank: the samples in a fixed pseudo-random
	 * order (the file groups similar writers together), the last 20% held out. */
	shuffle_fixed(d);
	return d->n - d->n / 5;
}

void model_init(struct model *m, int h, uint64_t seed)
{
	uint64_t s = seed * 7919u + 17u;
	float a1 = sqrtf(6.0f / NFEAT), a2 = sqrtf(6.0f / (float)h);
	size_t i;

	m->h = h;
	m->np = (size_t)h * NFEAT + (size_t)h + (size_t)NCLASS * h + NCLASS;
	m->p = calloc(m->np, sizeof(float));
	m->g = calloc(m->np, sizeof(float));
	m->v = calloc(m->np, sizeof(float));
	if (m->p == NULL || m->g == NULL || m->v == NULL) {
		die("model: out of memory for %zu parameters", m->np);
	}
	m->w1 = m->p;
	m->b1 = m->w1 + (size_t)h * NFEAT;
	m->w2 = m->b1 + h;
	m->b2 = m->w2 + (size_t)NCLASS * h;
	m->gw1 = m->g;
	m->gb1 = m->gw1 + (size_t)h * NFEAT;
	m->gw2 = m->gb1 + h;
	m->gb2 = m->gw2 + (size_t)NCLASS * h;
	for (i = 0; i < (size_t)h * NFEAT; i++) {
		m->w1[i] = a1 * (2.0f * rng_uniform(&s) - 1.0f);
	}
	for (i = 0; i < (size_t)NCLASS * h; i++) {
		m->w2[i] = a2 * (2.0f * rng_uniform(&s) - 1.0f);
	}
}

void model_free(struct model *m)
{
	free(m->p);
	free(m->g);
	free(m->v);
}

/* Forward one sample: hidden activations @hid, class probabilities @prob; returns -log p(y). */
static float forward(const struct model *m, const float *x, int y, float *hid, float *prob)
{
	float z[NCLASS], mx, sum = 0.0f, acc;
	int j, k, f;

	for (j = 0; j < m->h; j++) {
		const float *w = m->w1 + (size_t)j * NFEAT;

		acc = m->b1[j];
		for (f = 0; f < NFEAT; f++) {
			acc += w[f] * x[f];
		}
		hid[j] = acc > 0.0f ? acc : 0.0f;
	}
	for (k = 0; k < NCLASS; k++) {
		const float *w = m->w2 + (size_t)k * m->h;

		acc = m->b2[k];
		for (j = 0; j < m->h; j++) {
			acc += w[j] * hid[j];
		}
		z[k] = acc;
	}
	mx = z[0];
	for (k = 1; k < NCLASS; k++) {
		mx = z[k] > mx ? z[k] : mx;
	}
	for (k = 0; k < NCLASS; k++) {
		prob[k] = expf(z[k] - mx);
		sum += prob[k];
	}
	for (k = 0; k < NCLASS; k++) {
		prob[k] /= sum;
	}
	return -logf(prob[y] > 1e-30f ? prob[y] : 1e-30f);
}

void scratch_alloc(struct scratch *s, int h, int batch)
{
	s->x = malloc((size_t)batch * NFEAT * sizeof(float));
	s->hid = malloc((size_t)h * (size_t)batch * sizeof(float));
	s->dh = malloc((size_t)h * (size_t)batch * sizeof(float));
	s->z = malloc((size_t)NCLASS * (size_t)batch * sizeof(float));
	if (s->x == NULL || s->hid == NULL || s->dh == NULL || s->z == NULL) {
		die("out of memory for a batch of %d", batch);
	}
}

void scratch_free(struct scratch *s)
{
	free(s->x);
	free(s->hid);
	free(s->dh);
	free(s->z);
}

/*
 * One micro-batch: accumulate d(mean loss * @scale)/dparams into m->g. Loops run weight row by
 * weight row over the whole batch, so each row is read from cache once per batch (the work is
 * compute-bound, not memory-bound). The output layer's gradients are complete first: they are
 * handed to DDP while the first layer's are computed.
 */
double train_batch(struct model *m, struct crun_ddp *ddp, const struct dataset *d,
		   const size_t *idx, size_t nb, float scale, bool last_micro, struct scratch *sc)
{
	const size_t h = (size_t)m->h;
	double loss = 0.0;
	size_t b, j, k, f;
	int rc;

	for (b = 0; b < nb; b++) {
		memcpy(sc->x + b * NFEAT, d->x + idx[b] * NFEAT, NFEAT * sizeof(float));
	}
	/* Forward: hidden = relu(W1 x + b1), logits = W2 hidden + b2. */
	for (j = 0; j < h; j++) {
		const float *w = m->w1 + j * NFEAT;
		float *hj = sc->hid + j * nb;

		for (b = 0; b < nb; b++) {
			const float *x = sc->x + b * NFEAT;
			float acc = m->b1[j];

			for (f = 0; f < NFEAT; f++) {
				acc += w[f] * x[f];
			}
			hj[b] = acc > 0.0f ? acc : 0.0f;
		}
	}
	for (k = 0; k < NCLASS; k++) {
		float *zk = sc->z + k * nb;

		for (b = 0; b < nb; b++) {
			zk[b] = m->b2[k];
		}
		for (j = 0; j < h; j++) {
			const float w = m->w2[k * h + j];
			const float *hj = sc->hid + j * nb;

			for (b = 0; b < nb; b++) {
				zk[b] += w * hj[b];
			}
		}
	}
	/* Softmax cross-entropy; z becomes d(loss * scale)/d logits. */
	for (b = 0; b < nb; b++) {
		float mx = sc->z[b], sum = 0.0f, p;
		int y = d->y[idx[b]];

		for (k = 1; k < NCLASS; k++) {
			mx = sc->z[k * nb + b] > mx ? sc->z[k * nb + b] : mx;
		}
		for (k = 0; k < NCLASS; k++) {
			sc->z[k * nb + b] = expf(sc->z[k * nb + b] - mx);
			sum += sc->z[k * nb + b];
		}
		for (k = 0; k < NCLASS; k++) {
			p = sc->z[k * nb + b] / sum;
			if ((int)k == y) {
				loss += -log(p > 1e-30f ? p : 1e-30f);
			}
			sc->z[k * nb + b] = (p - ((int)k == y ? 1.0f : 0.0f)) * scale;
		}
	}
	/* Output layer gradients: gW2 = dz hidden^T, gb2 = sum dz. */
	for (k = 0; k < NCLASS; k++) {
		const float *dzk = sc->z + k * nb;
		float *gw = m->gw2 + k * h, gb = 0.0f;

		for (j = 0; j < h; j++) {
			const float *hj = sc->hid + j * nb;
			float acc = 0.0f;

			for (b = 0; b < nb; b++) {
				acc += dzk[b] * hj[b];
			}
			gw[j] += acc;
		}
		for (b = 0; b < nb; b++) {
			gb += dzk[b];
		}
		m->gb2[k] += gb;
	}
	if (last_micro) {
		if ((rc = crun_ddp_grad_ready(ddp, 3)) < 0 || (rc = crun_ddp_grad_ready(ddp, 2)) < 0) {
			die("ddp: grad_ready: %s", crun_strerror(rc));
		}
	}
	/* Hidden layer: dh = (W2^T dz) * relu'(hidden); gW1 = dh x^T, gb1 = sum dh. */
	for (j = 0; j < h; j++) {
		const float *hj = sc->hid + j * nb;
		float *dhj = sc->dh + j * nb, *gw = m->gw1 + j * NFEAT, gb = 0.0f;

		for (b = 0; b < nb; b++) {
			dhj[b] = 0.0f;
		}
		for (k = 0; k < NCLASS; k++) {
			const float w = m->w2[k * h + j];
			const float *dzk = sc->z + k * nb;

			for (b = 0; b < nb; b++) {
				dhj[b] += w * dzk[b];
			}
		}
		for (b = 0; b < nb; b++) {
			const float *x = sc->x + b * NFEAT;
			float g = hj[b] > 0.0f ? dhj[b] : 0.0f;

			if (g == 0.0f) {
				continue;
			}
			gb += g;
			for (f = 0; f < NFEAT; f++) {
				gw[f] += g * x[f];
			}
		}
		m->gb1[j] += gb;
	}
	if (last_micro) {
		if ((rc = crun_ddp_grad_ready(ddp, 1)) < 0 || (rc = crun_ddp_grad_ready(ddp, 0)) < 0) {
			die("ddp: grad_ready: %s", crun_strerror(rc));
		}
	}
	return loss;
}

void sgd_step(struct model *m, float lr, float mu)
{
	size_t i;

	for (i = 0; i < m->np; i++) {
		m->v[i] = mu * m->v[i] + m->g[i];
		m->p[i] -= lr * m->v[i];
		m->g[i] = 0.0f;
	}
}

/* Evaluate this rank's shard of the held-out set; the sums are combined by allreduce. */
void evaluate(const struct model *m, struct crun_comm *comm, const struct dataset *d,
	      size_t first, int rank, int world, double out[3], float *hid)
{
	float prob[NCLASS];
	double s[3] = {0.0, 0.0, 0.0};
	size_t i;
	int k, best, rc;

	for (i = first + (size_t)rank; i < d->n; i += (size_t)world) {
		s[0] += forward(m, d->x + i * NFEAT, d->y[i], hid, prob);
		best = 0;
		for (k = 1; k < NCLASS; k++) {
			best = prob[k] > prob[best] ? k : best;
		}
		s[1] += best == d->y[i] ? 1.0 : 0.0;
		s[2] += 1.0;
	}
	rc = crun_comm_allreduce(comm, s, out, 3, CRUN_DTYPE_FLOAT64, CRUN_REDOP_SUM);
	if (rc < 0) {
		die("evaluate: allreduce: %s", crun_strerror(rc));
	}
}

void sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[SHA256_DIGEST_SIZE];
	struct sha256_ctx c;
	int i;

	sha256_init(&c);
	sha256_update(&c, len, data);
	sha256_digest(&c, sizeof(md), md);
	for (i = 0; i < 32; i++) {
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	}
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: train [--epochs N] [--batch-size N] [--lr X] [--momentum X] [--hidden N]\n"
		"             [--seed N] [--checkpoint-dir DIR] [--checkpoint-every EPOCHS]\n"
		"             [--data FILE.csv.gz | --synthetic] [--samples N] [--accum N]\n"
		"             [--bucket-kib N] [--bench STEPS] [--fault-epoch E [--fault-rank R]]\n"
		"             [--gradcheck]\n"
		"Trains a 64-H-10 MLP on sklearn's digits with DDP; run it under crun.\n"
		"--gradcheck compares the gradients of one batch (in --accum micro-batches) with\n"
		"central finite differences, without crun, and exits 0 when they agree.\n");
}

static long parse_num(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "train: --%s: expected an integer in [%ld, %ld], got \"%s\"\n", opt,
			lo, hi, s);
		exit(2);
	}
	return v;
}

static double parse_real(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
		fprintf(stderr, "train: --%s: expected a number in [%g, %g], got \"%s\"\n", opt, lo,
			hi, s);
		exit(2);
	}
	return v;
}

/* The long options of parse_args() (no short ones but -h). */
static const struct option train_longs[] = {
	{"epochs", required_argument, NULL, 'e'},
	{"batch-size", required_argument, NULL, 'b'},
	{"lr", required_argument, NULL, 'l'},
	{"momentum", required_argument, NULL, 'm'},
	{"hidden", required_argument, NULL, 'H'},
	{"seed", required_argument, NULL, 's'},
	{"checkpoint-dir", required_argument, NULL, 'c'},
	{"checkpoint-every", required_argument, NULL, 'C'},
	{"data", required_argument, NULL, 'd'},
	{"synthetic", no_argument, NULL, 'S'},
	{"samples", required_argument, NULL, 'n'},
	{"accum", required_argument, NULL, 'a'},
	{"bucket-kib", required_argument, NULL, 'k'},
	{"bench", required_argument, NULL, 'B'},
	{"fault-epoch", required_argument, NULL, 'F'},
	{"fault-rank", required_argument, NULL, 'R'},
	{"gradcheck", no_argument, NULL, 'G'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* Every option's default (--data: $CRUN_DIGITS, else the digits file of the source tree). */
static void opts_default(struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->epochs = 30;
	o->batch = 32;
	o->lr = 0.1;
	o->momentum = 0.9;
	o->hidden = 128;
	o->seed = 1;
	o->ckpt_every = 1;
	o->data = getenv("CRUN_DIGITS") != NULL ? getenv("CRUN_DIGITS") : TRAIN_DEFAULT_DATA;
	o->accum = 1;
	o->samples = 1797;
	o->fault_rank = 1;
}

/*
 * One option from getopt_long(): its code @c, long name @name ("" for -h and unknown options)
 * and optarg, into @o. --help exits 0, an unknown option or a bad value exits 2.
 */
static void parse_opt(struct opts *o, int c, const char *name)
{
	switch (c) {
	case 'e':
		o->epochs = (int)parse_num(name, optarg, 0, 100000);
		break;
	case 'b':
		o->batch = (int)parse_num(name, optarg, 1, 1 << 20);
		break;
	case 'l':
		o->lr = parse_real(name, optarg, 0.0, 100.0);
		break;
	case 'm':
		o->momentum = parse_real(name, optarg, 0.0, 0.999);
		break;
	case 'H':
		o->hidden = (int)parse_num(name, optarg, 1, 1 << 16);
		break;
	case 's':
		o->seed = (uint64_t)parse_num(name, optarg, 0, 0x7fffffffL);
		break;
	case 'c':
		o->ckpt_dir = optarg;
		break;
	case 'C':
		o->ckpt_every = (int)parse_num(name, optarg, 1, 100000);
		break;
	case 'd':
		o->data = optarg;
		break;
	case 'S':
		o->synthetic = true;
		break;
	case 'n':
		o->samples = (int)parse_num(name, optarg, 100, 1 << 24);
		break;
	case 'a':
		o->accum = (int)parse_num(name, optarg, 1, 1024);
		break;
	case 'k':
		o->bucket_kib = (size_t)parse_num(name, optarg, 1, 1 << 20);
		break;
	case 'B':
		o->bench = true;
		o->bench_steps = (int)parse_num(name, optarg, 1, 1 << 20);
		break;
	case 'F':
		o->fault_epoch = (int)parse_num(name, optarg, 1, 100000);
		break;
	case 'R':
		o->fault_rank = (int)parse_num(name, optarg, 0, 1 << 24);
		break;
	case 'G':
		o->gradcheck = true;
		break;
	case 'h':
		usage(stdout);
		exit(0);
	default:
		usage(stderr);
		exit(2);
	}
}

void parse_args(int argc, char **argv, struct opts *o)
{
	int c, li;

	opts_default(o);
	while ((c = getopt_long(argc, argv, "h", train_longs, &li)) != -1) {
		parse_opt(o, c, c == '?' || c == 'h' ? "" : train_longs[li].name);
	}
	if (optind < argc) {
		fprintf(stderr, "train: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		exit(2);
	}
}

/* Mean cross-entropy of samples @idx under parameters @P (the layout of m->p), in double. */
static double loss_ref(const double *P, int h, const struct dataset *d, const size_t *idx,
		       size_t nb)
{
	const double *w1 = P, *b1 = w1 + (size_t)h * NFEAT, *w2 = b1 + h, *b2 = w2 + (size_t)NCLASS * h;
	double *hid = malloc((size_t)h * sizeof(double)), z[NCLASS], mx, sum, loss = 0.0, acc;
	size_t b;
	int j, k, f;

	if (hid == NULL) {
		die("gradcheck: out of memory");
	}
	for (b = 0; b < nb; b++) {
		const float *x = d->x + idx[b] * NFEAT;

		for (j = 0; j < h; j++) {
			acc = b1[j];
			for (f = 0; f < NFEAT; f++) {
				acc += w1[(size_t)j * NFEAT + f] * x[f];
			}
			hid[j] = acc > 0.0 ? acc : 0.0;
		}
		mx = -INFINITY;
		for (k = 0; k < NCLASS; k++) {
			acc = b2[k];
			for (j = 0; j < h; j++) {
				acc += w2[(size_t)k * h + j] * hid[j];
			}
			z[k] = acc;
			mx = acc > mx ? acc : mx;
		}
		sum = 0.0;
		for (k = 0; k < NCLASS; k++) {
			sum += exp(z[k] - mx);
		}
		loss += log(sum) + mx - z[d->y[idx[b]]];
	}
	free(hid);
	return loss / (double)nb;
}

/*
 * --gradcheck: the analytic gradients of train_batch() (one batch of --batch-size samples,
 * split into --accum micro-batches exactly as training does) against central differences of
 * the loss computed in double. Every parameter is checked. Returns the exit status.
 */
int gradcheck(const struct opts *o)
{
	const double eps = 1e-4;
	struct dataset d = {0};
	struct scratch sc;
	struct model m;
	char err[512];
	double *P, lp, lm, num, diff, a, max_abs = 0.0, max_rel = 0.0;
	size_t *idx, nb, i, b, off, cnt, micro_sz, bad = 0, skipped = 0;
	bool *kink;
	int j, f;

	if (o->synthetic || data_load(&d, o->data, err, sizeof(err)) < 0) {
		data_synthetic(&d, (size_t)o->samples, 1234);
	}
	nb = (size_t)o->batch < d.n ? (size_t)o->batch : d.n;
	model_init(&m, o->hidden, o->seed);
	scratch_alloc(&sc, m.h, (int)nb);
	idx = malloc(nb * sizeof(*idx));
	P = malloc(m.np * sizeof(*P));
	if (idx == NULL || P == NULL) {
		die("gradcheck: out of memory");
	}
	for (i = 0; i < nb; i++) {
		idx[i] = (i * 7919u + 13u) % d.n;
	}
	/* Move the biases off zero so that their gradients are exercised too. */
	for (i = 0; i < (size_t)m.h; i++) {
		m.b1[i] = 0.05f * (float)((int)(i % 5) - 2);
	}
	micro_sz = (nb + (size_t)o->accum - 1) / (size_t)o->accum;
	for (off = 0; off < nb; off += cnt) {
		cnt = nb - off < micro_sz ? nb - off : micro_sz;
		train_batch(&m, NULL, &d, idx + off, cnt, 1.0f / (float)nb, false, &sc);
	}
	for (i = 0; i < m.np; i++) {
		P[i] = m.p[i];
	}
	/* A hidden unit whose pre-activation is near 0 for some sample sits on ReLU's kink: a
	 * difference quotient across it measures neither side, and float and double may even
	 * disagree on the side. Its first-layer weights are left out (and counted). */
	kink = calloc((size_t)m.h, sizeof(*kink));
	if (kink == NULL) {
		die("gradcheck: out of memory");
	}
	for (j = 0; j < m.h; j++) {
		for (b = 0; b < nb; b++) {
			a = P[(size_t)m.h * NFEAT + (size_t)j];
			for (f = 0; f < NFEAT; f++) {
				a += P[(size_t)j * NFEAT + (size_t)f] * d.x[idx[b] * NFEAT + (size_t)f];
			}
			kink[j] = kink[j] || fabs(a) < 1e-3;
		}
	}
	for (i = 0; i < m.np; i++) {
		if ((i < (size_t)m.h * NFEAT && kink[i / NFEAT]) ||
		    (i >= (size_t)m.h * NFEAT && i < (size_t)m.h * (NFEAT + 1) &&
		     kink[i - (size_t)m.h * NFEAT])) {
			skipped++;
			continue;
		}
		P[i] = (double)m.p[i] + eps;
		lp = loss_ref(P, m.h, &d, idx, nb);
		P[i] = (double)m.p[i] - eps;
		lm = loss_ref(P, m.h, &d, idx, nb);
		P[i] = m.p[i];
		num = (lp - lm) / (2.0 * eps);
		diff = fabs(num - (double)m.g[i]);
		max_abs = diff > max_abs ? diff : max_abs;
		if (fabs(num) > 1e-3 && diff / fabs(num) > max_rel) {
			max_rel = diff / fabs(num);
		}
		if (diff > 1e-4 + 1e-2 * fabs(num)) {
			if (bad++ < 5) {
				fprintf(stderr, "gradcheck: parameter %zu: analytic %.6g, numeric %.6g\n", i,
					(double)m.g[i], num);
			}
		}
	}
	printf("gradcheck hidden %d batch %zu accum %d params %zu skipped_at_kink %zu "
	       "max_abs_err %.3g max_rel_err %.3g mismatches %zu: %s\n",
	       m.h, nb, o->accum, m.np, skipped, max_abs, max_rel, bad,
	       bad == 0 && skipped < m.np / 2 ? "ok" : "FAILED");
	bad += skipped >= m.np / 2;
	free(kink);
	free(P);
	free(idx);
	scratch_free(&sc);
	model_free(&m);
	free(d.x);
	free(d.y);
	return bad == 0 ? 0 : 1;
}

/*
 * Load the checkpoint of o->ckpt_dir that rank 0 chose (its newest valid one) into the model
 * (parameters and momentum) on every rank, setting *epoch0 and *step; start fresh when rank 0
 * has none. Exits on any other error (a rank that lacks rank 0's choice fails every rank).
 */
void resume_from_checkpoint(const struct opts *o, struct model *m, int rank, uint64_t *epoch0,
			    uint64_t *step)
{
	struct crun_ckpt_seg segs[2] = {{m->p, m->np * sizeof(float)},
					{m->v, m->np * sizeof(float)}};
	uint64_t ck_epoch, ck_step;
	char ckpath[4096], err[4400];
	int rc;

	rc = crun_checkpoint_resume(o->ckpt_dir, &ck_epoch, &ck_step, segs, 2, ckpath,
				    sizeof(ckpath), err, sizeof(err), 120000);
	if (rc == 0) {
		*epoch0 = ck_epoch;
		*step = ck_step;
		printf("rank %d resumed from %s at epoch %" PRIu64 " (restart %d)\n", rank, ckpath,
		       ck_epoch, crun_restart_count());
	} else if (rc == -EINVAL) {
		die("checkpoint %s: the newest checkpoint does not match this model (hidden %d, "
		    "%zu parameters): another --hidden? Use another --checkpoint-dir",
		    o->ckpt_dir, m->h, m->np);
	} else if (rc != -ENOENT) {
		die("%s", err);
	} else if (crun_restart_count() > 0 && rank == 0) {
		printf("restart %d: no checkpoint in %s, starting over\n", crun_restart_count(),
		       o->ckpt_dir);
	}
}

void checkpoint_save(const struct opts *o, struct model *m, int e, uint64_t step)
{
	struct crun_ckpt_seg segs[2] = {{m->p, m->np * sizeof(float)},
					{m->v, m->np * sizeof(float)}};
	int rc;

	rc = crun_checkpoint_save(o->ckpt_dir, (uint64_t)e + 1, step, segs, 2, 120000);
	if (rc < 0) {
		die("checkpoint %s: %s", o->ckpt_dir, crun_strerror(rc));
	}
}

/* ---- the steps of one run, shared by train and train_gpu ------------------------------ */

int run_init(struct run *r)
{
	char err[512];
	int rc;

	rc = crun_init(NULL, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "train: %s\n", err);
		return 2;
	}
	crun_error_install_signal_handler();
	r->rank = crun_rank();
	r->world = crun_world_size();
	g_rank = r->rank;
	return 0;
}

void run_open_store(struct run *r)
{
	char err[512];
	int rc;

	rc = crun_worker_store_open(&r->st, err, sizeof(err));
	if (rc < 0) {
		die("%s", err);
	}
}

void run_ddp_opts(const struct run *r, struct crun_ddp_opts *dopts)
{
	if (r->o.bucket_kib > 0) {
		dopts->bucket_cap_bytes = r->o.bucket_kib << 10;
		dopts->first_bucket_bytes = r->o.bucket_kib << 10;
	}
}

void run_alloc(struct run *r)
{
	int rc;

	rc = crun_sampler_init(&r->smp, r->ntrain, r->rank, r->world, r->o.seed, true, false);
	if (rc < 0) {
		die("sampler: %s", crun_strerror(rc));
	}
	r->idx = malloc(r->smp.num_samples * sizeof(*r->idx));
	r->hid = malloc((size_t)r->m.h * sizeof(float));
	if (r->idx == NULL || r->hid == NULL) {
		die("out of memory");
	}
}

void run_print_banner(const struct run *r, int nbuckets)
{
	if (r->rank == 0) {
		printf("train: world %d, %zu train / %zu test samples, hidden %d, "
		       "batch %d per rank, lr %g, %d buckets\n",
		       r->world, r->ntrain, r->d.n - r->ntrain, r->m.h, r->o.batch, r->o.lr,
		       nbuckets);
		fflush(stdout);
	}
}

float run_epoch_begin(struct run *r, int e)
{
	int rc;

	rc = crun_sampler_indices(&r->smp, (uint64_t)e, r->idx);
	if (rc < 0) {
		die("sampler: %s", crun_strerror(rc));
	}
	/* Cosine decay of the learning rate over the run. */
	return (float)(r->o.lr * 0.5 * (1.0 + cos(M_PI * e / r->o.epochs)));
}

size_t run_batch_len(const struct run *r, size_t pos)
{
	return r->smp.num_samples - pos < (size_t)r->o.batch ? r->smp.num_samples - pos
							     : (size_t)r->o.batch;
}

void run_train_loss(struct run *r, double loss_sum, double tl[2])
{
	int rc;

	tl[0] = loss_sum;
	tl[1] = (double)r->smp.num_samples;
	rc = crun_comm_allreduce(r->comm, tl, tl, 2, CRUN_DTYPE_FLOAT64, CRUN_REDOP_SUM);
	if (rc < 0) {
		die("train loss: allreduce: %s", crun_strerror(rc));
	}
}

void run_report_epoch(struct run *r, int e, const double tl[2])
{
	double ev[3];

	evaluate(&r->m, r->comm, &r->d, r->ntrain, r->rank, r->world, ev, r->hid);
	if (r->rank == 0) {
		printf("epoch %d step %" PRIu64 " train_loss %.4f test_loss %.4f test_acc %.4f\n",
		       e + 1, r->step, tl[0] / tl[1], ev[0] / ev[2], ev[1] / ev[2]);
		fflush(stdout);
	}
}

bool run_checkpoint_due(const struct run *r, int e)
{
	return r->o.ckpt_dir != NULL && ((e + 1) % r->o.ckpt_every == 0 || e + 1 == r->o.epochs);
}

void run_fault_point(const struct run *r, int e)
{
	/* Fault injection for restart tests: one rank crashes on the first attempt. */
	if (r->o.fault_epoch == e + 1 && r->rank == r->o.fault_rank % r->world &&
	    crun_restart_count() == 0) {
		fprintf(stderr, "train: rank %d: --fault-epoch %d: aborting\n", r->rank, e + 1);
		abort();
	}
}

void run_report_final(struct run *r)
{
	double ev[3];
	char hex[65];

	if (!r->o.bench) {
		evaluate(&r->m, r->comm, &r->d, r->ntrain, r->rank, r->world, ev, r->hid);
		printf("rank %d final test_loss %.4f test_acc %.4f\n", r->rank, ev[0] / ev[2],
		       ev[1] / ev[2]);
	}
	sha256_hex(r->m.p, r->m.np * sizeof(float), hex);
	printf("rank %d params sha256 %s\n", r->rank, hex);
	fflush(stdout);
}

void run_end(struct run *r)
{
	free(r->idx);
	free(r->hid);
	crun_store_close(r->st);
	model_free(&r->m);
	free(r->d.x);
	free(r->d.y);
	crun_finish();
}
