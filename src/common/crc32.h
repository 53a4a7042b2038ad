/* SPDX-License-Identifier: MIT */
/* src/common/crc32.h: CRC-32 (IEEE 802.3, the zlib/gzip polynomial) for on-disk records. */
#ifndef CRUN_SRC_COMMON_CRC32_H
#define CRUN_SRC_COMMON_CRC32_H

#include <stddef.h>
#include <stdint.h>

/**
 * Continue a CRC-32 over @len bytes at @data from @crc (0 to start): crc32_update(0, "123456789",
 * 9) == 0xcbf43926, and crc32_update(crc32_update(0, a, n), b, m) is the CRC of a then b.
 * Thread-safe (the table is built once, on first use).
 */
uint32_t crc32_update(uint32_t crc, const void *data, size_t len);

#endif
