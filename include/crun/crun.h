/* SPDX-License-Identifier: MIT */
/* include/crun/crun.h: everything a worker program needs (libcrun-worker). */
#ifndef CRUN_CRUN_H
#define CRUN_CRUN_H

#include <crun/export.h>
#include <crun/version.h>
#include <crun/error.h>
#include <crun/store.h>
#include <crun/comm.h>
#include <crun/worker.h>
#include <crun/ddp.h>

#endif
