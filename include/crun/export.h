/* SPDX-License-Identifier: MIT */
/* include/crun/export.h: symbol visibility for the public API. */
#ifndef CRUN_EXPORT_H
#define CRUN_EXPORT_H

/*
 * Marks a declaration as part of libcrun-worker's ABI (the library is built with
 * -fvisibility=hidden, and worker_api/libcrun-worker.map lists every exported name). This
 * header declares nothing, so it needs no extern "C" block; every header that declares
 * functions has one.
 */
#define CRUN_EXPORT __attribute__((visibility("default")))

#endif
