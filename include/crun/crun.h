/* SPDX-License-Identifier: MIT */
/* include/crun/crun.h: everything a worker program needs (libcrun-worker). */
#ifndef CRUN_CRUN_H
#define CRUN_CRUN_H

/*
 * Every header below is usable from C (C99 and later) and C++ (C++11 and later): each wraps
 * its declarations in extern "C". The device DDP, <crun/ddp_cuda.h>, is included separately.
 */
#include <crun/export.h>
#include <crun/version.h>
#include <crun/error.h>
#include <crun/store.h>
#include <crun/comm.h>
#include <crun/worker.h>
#include <crun/ddp.h>

#endif
