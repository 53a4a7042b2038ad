/* SPDX-License-Identifier: MIT */
/* examples/train_gpu.h: the CUDA half of examples/train_gpu (cuBLAS + kernels), in plain C. */
#ifndef CRUN_EXAMPLES_TRAIN_GPU_H
#define CRUN_EXAMPLES_TRAIN_GPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The model of examples/train_common.c on one CUDA device: the same 64-H-10 MLP, the same
 * parameter layout (W1 row-major h x 64, b1, W2 row-major 10 x h, b2, in one flat array), the
 * same softmax cross-entropy and SGD with momentum. Every call enqueues on the model's own stream
 * and returns 0 or a negative code (CRUN_ECUDA, -ENOMEM, -EINVAL) with a message in
 * gpu_model_error(). One thread at a time.
 */
struct gpu_model;

/** Number of CUDA devices (>= 0), or a negative code with the runtime's reason in @err. */
int gpu_device_count(char *err, size_t errlen);
/** Name of @device into @buf ("?" on failure). */
void gpu_device_name(int device, char *buf, size_t len);

/**
 * Select @device for this thread and build the model: @h hidden units, batches of at most
 * @max_batch, the dataset @x (n x 64) and @y (n) copied to the device (both borrowed).
 * *out owned by the caller (gpu_model_destroy()). On failure @err holds the reason.
 */
int gpu_model_create(int device, int h, size_t max_batch, const float *x, const int *y, size_t n,
		     struct gpu_model **out, char *err, size_t errlen);
void gpu_model_destroy(struct gpu_model *g);
const char *gpu_model_error(const struct gpu_model *g);
/** The model's cudaStream_t (borrowed). */
void *gpu_model_stream(struct gpu_model *g);
/** Device arrays of np floats (borrowed): parameters and gradients, the host layout. */
float *gpu_model_params(struct gpu_model *g);
float *gpu_model_grads(struct gpu_model *g);
size_t gpu_model_nparams(const struct gpu_model *g);

/** Copy parameters @p and momentum @v (np floats each, borrowed) to the device; zero grads. */
int gpu_model_upload(struct gpu_model *g, const float *p, const float *v);
/** Copy parameters into @p and (when @v is not NULL) momentum into @v; waits for the stream. */
int gpu_model_download(struct gpu_model *g, float *p, float *v);

/**
 * First half of one micro-batch (samples @idx, @nb of them, borrowed): forward, softmax
 * cross-entropy, and the output layer's gradients (W2, b2) of mean loss * @scale, added to
 * the gradients. The batch's summed loss is added to the epoch's sum (gpu_model_take_loss()).
 */
int gpu_model_forward_output(struct gpu_model *g, const size_t *idx, size_t nb, float scale);
/** Second half: the hidden layer's gradients (W1, b1) of the same micro-batch. */
int gpu_model_backward_hidden(struct gpu_model *g);
/** v = mu v + g; p -= lr v; g = 0. */
int gpu_model_sgd(struct gpu_model *g, float lr, float mu);
/** The loss summed since the last call (waits for the stream), then reset to 0. */
int gpu_model_take_loss(struct gpu_model *g, double *sum);
/** Wait for every kernel enqueued so far. */
int gpu_model_sync(struct gpu_model *g);

#ifdef __cplusplus
}
#endif

#endif
