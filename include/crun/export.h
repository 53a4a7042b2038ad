/* SPDX-License-Identifier: MIT */
/* include/crun/export.h: symbol visibility for the public API. */
#ifndef CRUN_EXPORT_H
#define CRUN_EXPORT_H

#define CRUN_EXPORT __attribute__((visibility("default")))

#endif
