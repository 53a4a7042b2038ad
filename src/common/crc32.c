/* SPDX-License-Identifier: MIT */
/* src/common/crc32.c: table-driven CRC-32 (reflected 0xedb88320), the checksum of every file
 * crun writes (file store records, checkpoints). zlib's crc32() computes the same value; the
 * file store and checkpoints need no zlib, so the 20 lines live here. */
#include <pthread.h>

#include "src/common/crc32.h"

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	uint32_t c;
	unsigned int i, k;

	for (i = 0; i < 256; i++) {
		c = i;
		for (k = 0; k < 8; k++) {
			c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
		}
		crc_table[i] = c;
	}
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;

	pthread_once(&crc_once, crc_init);
	crc = ~crc;
	while (len-- > 0) {
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	}
	return ~crc;
}
