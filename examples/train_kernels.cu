/* SPDX-License-Identifier: MIT */
/* examples/train_kernels.cu: the MLP of examples/train_common.c on CUDA: cuBLAS sgemm + kernels. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <crun/error.h>

#include "examples/train_gpu.h"

#define NFEAT 64
#define NCLASS 10
#define THREADS 256

/*
 * Layouts (cuBLAS is column-major; "cm" below):
 *   x batch   cm 64 x nb  (ld 64): sample b's features contiguous, as train_common.c gathers them
 *   W1        row-major h x 64 == cm 64 x h (ld 64)
 *   W2        row-major 10 x h == cm h x 10 (ld h)
 *   hid, dh   cm h x nb   (ld h)
 *   z         cm 10 x nb  (ld 10): logits, then d(loss * scale)/d logits
 */
struct gpu_model {
	int device;
	int h;
	size_t np, max_batch, n;
	cudaStream_t stream;
	cublasHandle_t blas;
	float *p, *g, *v; /* device: params, grads, momentum (one allocation each) */
	float *data_x;	  /* device: the dataset, n x 64 */
	int *data_y;
	int *idx;	  /* device: the micro-batch's sample numbers */
	int *idx_host;	  /* host staging for idx */
	float *x, *hid, *dh, *z;
	double *loss_b;	  /* device: per-sample loss of the micro-batch */
	double *loss_sum; /* device: summed since the last take */
	size_t nb;	  /* current micro-batch size */
	char err[256];
};

static int fail(struct gpu_model *g, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->err, sizeof(g->err), fmt, ap);
	va_end(ap);
	return code;
}

#define CUDA_TRY(g, call)                                                                          \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			return fail((g), CRUN_ECUDA, "train_gpu: %s: %s", #call,                   \
				    cudaGetErrorString(e_));                                       \
		}                                                                                  \
	} while (0)

#define BLAS_TRY(g, call)                                                                          \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
			return fail((g), CRUN_ECUDA, "train_gpu: %s: %s", #call,                   \
				    cublasGetStatusString(s_));                                    \
		}                                                                                  \
	} while (0)

/* A kernel launch reports a bad configuration at once; faults surface at the next sync. */
#define LAUNCH_CHECK(g, what)                                                                      \
	do {                                                                                       \
		cudaError_t e_ = cudaGetLastError();                                               \
		if (e_ != cudaSuccess) {                                                           \
			return fail((g), CRUN_ECUDA, "train_gpu: launch %s: %s", what,             \
				    cudaGetErrorString(e_));                                       \
		}                                                                                  \
	} while (0)

static unsigned blocks(size_t n)
{
	return (unsigned)((n + THREADS - 1) / THREADS);
}

__global__ void k_gather(const float *data_x, const int *idx, size_t nb, float *x)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < nb * NFEAT) {
		size_t b = i / NFEAT, f = i % NFEAT;

		x[i] = data_x[(size_t)idx[b] * NFEAT + f];
	}
}

/* hid = relu(hid + b1): hid is cm h x nb. */
__global__ void k_bias_relu(float *hid, const float *b1, int h, size_t nb)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < (size_t)h * nb) {
		float a = hid[i] + b1[i % (size_t)h];

		hid[i] = a > 0.0f ? a : 0.0f;
	}
}

/* One thread per sample, in train_common.c's order of operations: bias, max, exp, sum, divide. */
__global__ void k_softmax_xent(float *z, const float *b2, const int *labels, const int *idx,
			       size_t nb, float scale, double *loss_b)
{
	size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	float mx, sum = 0.0f, p;
	float *zb;
	int k, y;

	if (b >= nb) {
		return;
	}
	zb = z + b * NCLASS;
	y = labels[idx[b]];
	for (k = 0; k < NCLASS; k++) {
		zb[k] += b2[k];
	}
	mx = zb[0];
	for (k = 1; k < NCLASS; k++) {
		mx = zb[k] > mx ? zb[k] : mx;
	}
	for (k = 0; k < NCLASS; k++) {
		zb[k] = expf(zb[k] - mx);
		sum += zb[k];
	}
	loss_b[b] = 0.0;
	for (k = 0; k < NCLASS; k++) {
		p = zb[k] / sum;
		if (k == y) {
			loss_b[b] = -log((double)(p > 1e-30f ? p : 1e-30f));
		}
		zb[k] = (p - (k == y ? 1.0f : 0.0f)) * scale;
	}
}

/* One thread: the batch's loss added in sample order, so the sum is deterministic. */
__global__ void k_loss_sum(const double *loss_b, size_t nb, double *sum)
{
	double s = 0.0;
	size_t b;

	if (blockIdx.x != 0 || threadIdx.x != 0) {
		return;
	}
	for (b = 0; b < nb; b++) {
		s += loss_b[b];
	}
	*sum += s;
}

/* gb2[k] += sum_b dz[k, b]. */
__global__ void k_bias_grad_out(const float *dz, size_t nb, float *gb2)
{
	int k = threadIdx.x;
	float acc = 0.0f;
	size_t b;

	if (k >= NCLASS) {
		return;
	}
	for (b = 0; b < nb; b++) {
		acc += dz[b * NCLASS + (size_t)k];
	}
	gb2[k] += acc;
}

/* dh = relu'(hid) * dh; gb1[j] += sum_b dh[j, b]. One thread per hidden unit. */
__global__ void k_relu_back_bias(const float *hid, float *dh, int h, size_t nb, float *gb1)
{
	size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	float acc = 0.0f;
	size_t b;

	if (j >= (size_t)h) {
		return;
	}
	for (b = 0; b < nb; b++) {
		size_t i = b * (size_t)h + j;
		float gv = hid[i] > 0.0f ? dh[i] : 0.0f;

		dh[i] = gv;
		acc += gv;
	}
	gb1[j] += acc;
}

__global__ void k_sgd(float *p, float *g, float *v, size_t n, float lr, float mu)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		v[i] = mu * v[i] + g[i];
		p[i] -= lr * v[i];
		g[i] = 0.0f;
	}
}

extern "C" int gpu_device_count(char *err, size_t errlen)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
				       e == cudaErrorInitializationError
			       ? CRUN_ENODEV
			       : CRUN_ECUDA;
	}
	if (n == 0) {
		snprintf(err, errlen, "cudaGetDeviceCount: no CUDA device");
	}
	return n;
}

extern "C" void gpu_device_name(int device, char *buf, size_t len)
{
	cudaDeviceProp prop;

	if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
		snprintf(buf, len, "?");
		return;
	}
	snprintf(buf, len, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
		 (double)prop.totalGlobalMem / (1 << 30));
}

static int model_init(struct gpu_model *g, const float *x, const int *y)
{
	size_t h = (size_t)g->h, mb = g->max_batch;

	CUDA_TRY(g, cudaSetDevice(g->device));
	CUDA_TRY(g, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
	BLAS_TRY(g, cublasCreate(&g->blas));
	BLAS_TRY(g, cublasSetStream(g->blas, g->stream));
	/* Full FP32 (no TF32): the loss curve is compared with the CPU build's. */
	BLAS_TRY(g, cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH));
	CUDA_TRY(g, cudaMalloc((void **)&g->p, g->np * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->g, g->np * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->v, g->np * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->data_x, g->n * NFEAT * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->data_y, g->n * sizeof(int)));
	CUDA_TRY(g, cudaMalloc((void **)&g->idx, mb * sizeof(int)));
	CUDA_TRY(g, cudaMalloc((void **)&g->x, mb * NFEAT * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->hid, h * mb * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->dh, h * mb * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->z, NCLASS * mb * sizeof(float)));
	CUDA_TRY(g, cudaMalloc((void **)&g->loss_b, mb * sizeof(double)));
	CUDA_TRY(g, cudaMalloc((void **)&g->loss_sum, sizeof(double)));
	/*
	 * Everything on the model's stream, which is non-blocking: work on the legacy default
	 * stream (a plain cudaMemset, or a cudaMemcpy whose pageable source is only staged when
	 * it returns) is not ordered with it, so a zeroing of the momentum could land after
	 * gpu_model_upload() wrote the resumed momentum, or after the first update.
	 */
	CUDA_TRY(g, cudaMemcpyAsync(g->data_x, x, g->n * NFEAT * sizeof(float),
				    cudaMemcpyHostToDevice, g->stream));
	CUDA_TRY(g, cudaMemcpyAsync(g->data_y, y, g->n * sizeof(int), cudaMemcpyHostToDevice,
				    g->stream));
	CUDA_TRY(g, cudaMemsetAsync(g->g, 0, g->np * sizeof(float), g->stream));
	CUDA_TRY(g, cudaMemsetAsync(g->v, 0, g->np * sizeof(float), g->stream));
	CUDA_TRY(g, cudaMemsetAsync(g->loss_sum, 0, sizeof(double), g->stream));
	CUDA_TRY(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int gpu_model_create(int device, int h, size_t max_batch, const float *x,
				const int *y, size_t n, struct gpu_model **out, char *err,
				size_t errlen)
{
	struct gpu_model *g;
	int rc;

	*out = NULL;
	if (h < 1 || max_batch < 1 || n < 1 || n > (size_t)0x7fffffff) {
		snprintf(err, errlen, "train_gpu: model: bad size (hidden %d, batch %zu, %zu samples)",
			 h, max_batch, n);
		return -EINVAL;
	}
	g = (struct gpu_model *)calloc(1, sizeof(*g));
	if (g == NULL) {
		snprintf(err, errlen, "train_gpu: model: out of memory");
		return -ENOMEM;
	}
	g->device = device;
	g->h = h;
	g->np = (size_t)h * NFEAT + (size_t)h + (size_t)NCLASS * h + NCLASS;
	g->max_batch = max_batch;
	g->n = n;
	g->idx_host = (int *)malloc(max_batch * sizeof(int));
	if (g->idx_host == NULL) {
		rc = fail(g, -ENOMEM, "train_gpu: model: out of memory");
	} else {
		rc = model_init(g, x, y);
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s", g->err);
		gpu_model_destroy(g);
		return rc;
	}
	*out = g;
	return 0;
}

extern "C" void gpu_model_destroy(struct gpu_model *g)
{
	if (g == NULL) {
		return;
	}
	cudaSetDevice(g->device);
	if (g->stream != NULL) {
		cudaStreamSynchronize(g->stream);
	}
	if (g->blas != NULL) {
		cublasDestroy(g->blas);
	}
	cudaFree(g->p);
	cudaFree(g->g);
	cudaFree(g->v);
	cudaFree(g->data_x);
	cudaFree(g->data_y);
	cudaFree(g->idx);
	cudaFree(g->x);
	cudaFree(g->hid);
	cudaFree(g->dh);
	cudaFree(g->z);
	cudaFree(g->loss_b);
	cudaFree(g->loss_sum);
	if (g->stream != NULL) {
		cudaStreamDestroy(g->stream);
	}
	free(g->idx_host);
	free(g);
}

extern "C" const char *gpu_model_error(const struct gpu_model *g)
{
	return g->err;
}

extern "C" void *gpu_model_stream(struct gpu_model *g)
{
	return (void *)g->stream;
}

extern "C" float *gpu_model_params(struct gpu_model *g)
{
	return g->p;
}

extern "C" float *gpu_model_grads(struct gpu_model *g)
{
	return g->g;
}

extern "C" size_t gpu_model_nparams(const struct gpu_model *g)
{
	return g->np;
}

extern "C" int gpu_model_upload(struct gpu_model *g, const float *p, const float *v)
{
	CUDA_TRY(g, cudaMemcpyAsync(g->p, p, g->np * sizeof(float), cudaMemcpyHostToDevice,
				    g->stream));
	CUDA_TRY(g, cudaMemcpyAsync(g->v, v, g->np * sizeof(float), cudaMemcpyHostToDevice,
				    g->stream));
	CUDA_TRY(g, cudaMemsetAsync(g->g, 0, g->np * sizeof(float), g->stream));
	CUDA_TRY(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int gpu_model_download(struct gpu_model *g, float *p, float *v)
{
	CUDA_TRY(g, cudaMemcpyAsync(p, g->p, g->np * sizeof(float), cudaMemcpyDeviceToHost,
				    g->stream));
	if (v != NULL) {
		CUDA_TRY(g, cudaMemcpyAsync(v, g->v, g->np * sizeof(float), cudaMemcpyDeviceToHost,
					    g->stream));
	}
	CUDA_TRY(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int gpu_model_forward_output(struct gpu_model *g, const size_t *idx, size_t nb,
					float scale)
{
	const float one = 1.0f, zero = 0.0f;
	const int h = g->h, n = (int)nb;
	float *w1 = g->p, *b1 = w1 + (size_t)h * NFEAT, *w2 = b1 + h, *b2 = w2 + (size_t)NCLASS * h;
	float *gw1 = g->g, *gb1 = gw1 + (size_t)h * NFEAT, *gw2 = gb1 + h;
	float *gb2 = gw2 + (size_t)NCLASS * h;
	size_t b;

	if (nb == 0 || nb > g->max_batch) {
		return fail(g, -EINVAL, "train_gpu: micro-batch of %zu samples (1..%zu)", nb,
			    g->max_batch);
	}
	for (b = 0; b < nb; b++) {
		if (idx[b] >= g->n) {
			return fail(g, -EINVAL, "train_gpu: sample %zu out of range (%zu samples)",
				    idx[b], g->n);
		}
		g->idx_host[b] = (int)idx[b];
	}
	g->nb = nb;
	/* From pageable memory: the copy has read idx_host when the call returns. */
	CUDA_TRY(g, cudaMemcpyAsync(g->idx, g->idx_host, nb * sizeof(int), cudaMemcpyHostToDevice,
				    g->stream));
	k_gather<<<blocks(nb * NFEAT), THREADS, 0, g->stream>>>(g->data_x, g->idx, nb, g->x);
	LAUNCH_CHECK(g, "gather");
	/* hid = W1 x (cm h x nb), then relu(hid + b1). */
	BLAS_TRY(g, cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, h, n, NFEAT, &one, w1, NFEAT,
				g->x, NFEAT, &zero, g->hid, h));
	k_bias_relu<<<blocks((size_t)h * nb), THREADS, 0, g->stream>>>(g->hid, b1, h, nb);
	LAUNCH_CHECK(g, "bias_relu");
	/* z = W2 hid (cm 10 x nb); the kernel adds b2 and turns z into d loss / d z. */
	BLAS_TRY(g, cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, NCLASS, n, h, &one, w2, h,
				g->hid, h, &zero, g->z, NCLASS));
	k_softmax_xent<<<blocks(nb), THREADS, 0, g->stream>>>(g->z, b2, g->data_y, g->idx, nb,
							       scale, g->loss_b);
	LAUNCH_CHECK(g, "softmax_xent");
	k_loss_sum<<<1, 1, 0, g->stream>>>(g->loss_b, nb, g->loss_sum);
	LAUNCH_CHECK(g, "loss_sum");
	/* gW2 (cm h x 10) += hid dz^T; gb2 += row sums of dz. */
	BLAS_TRY(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, h, NCLASS, n, &one, g->hid, h,
				g->z, NCLASS, &one, gw2, h));
	k_bias_grad_out<<<1, 32, 0, g->stream>>>(g->z, nb, gb2);
	LAUNCH_CHECK(g, "bias_grad_out");
	return 0;
}

extern "C" int gpu_model_backward_hidden(struct gpu_model *g)
{
	const float one = 1.0f, zero = 0.0f;
	const int h = g->h, n = (int)g->nb;
	float *w1 = g->p, *b1 = w1 + (size_t)h * NFEAT, *w2 = b1 + h;
	float *gw1 = g->g, *gb1 = gw1 + (size_t)h * NFEAT;

	if (g->nb == 0) {
		return fail(g, -EINVAL, "train_gpu: backward without a forward");
	}
	/* dh (cm h x nb) = W2^T dz, masked by relu'(hid); gb1 += row sums. */
	BLAS_TRY(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, h, n, NCLASS, &one, w2, h, g->z,
				NCLASS, &zero, g->dh, h));
	k_relu_back_bias<<<blocks((size_t)h), THREADS, 0, g->stream>>>(g->hid, g->dh, h, g->nb,
									 gb1);
	LAUNCH_CHECK(g, "relu_back_bias");
	/* gW1 (cm 64 x h) += x dh^T. */
	BLAS_TRY(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, NFEAT, h, n, &one, g->x, NFEAT,
				g->dh, h, &one, gw1, NFEAT));
	g->nb = 0;
	return 0;
}

extern "C" int gpu_model_sgd(struct gpu_model *g, float lr, float mu)
{
	k_sgd<<<blocks(g->np), THREADS, 0, g->stream>>>(g->p, g->g, g->v, g->np, lr, mu);
	LAUNCH_CHECK(g, "sgd");
	return 0;
}

extern "C" int gpu_model_take_loss(struct gpu_model *g, double *sum)
{
	CUDA_TRY(g, cudaMemcpyAsync(sum, g->loss_sum, sizeof(double), cudaMemcpyDeviceToHost,
				    g->stream));
	CUDA_TRY(g, cudaMemsetAsync(g->loss_sum, 0, sizeof(double), g->stream));
	CUDA_TRY(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int gpu_model_sync(struct gpu_model *g)
{
	CUDA_TRY(g, cudaStreamSynchronize(g->stream));
	return 0;
}
