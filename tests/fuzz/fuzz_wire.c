/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz_wire.c: libFuzzer harness for the frame decoder (also replayed in CI). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rendezvous/store/wire.h"
#include "src/common/diag.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wire_hdr h;
	struct wire_req r;
	struct wire_cur c;
	struct wire_limits lim = {64, 256, 8};
	struct crun_diag d;

	/* The stream decoder, exactly as the server walks a read buffer. */
	(void)wire_decode_stream(data, size);

	/* One frame against small limits, so the limit paths are reachable. */
	if (size >= WIRE_HDR_LEN && wire_hdr_decode(data, (uint32_t)size, &h) == 0 &&
	    (size_t)h.len + 4 <= size) {
		if (wire_req_decode(&h, data + WIRE_HDR_LEN, h.len - 8, &lim, &r, &d) != WIRE_OK &&
		    strlen(d.msg) == 0) {
			__builtin_trap(); /* every refusal names its problem */
		}
	}

	/* The client's reply reader over arbitrary bytes. */
	c = (struct wire_cur){data, data + size, false};
	while (!c.bad) {
		(void)wire_get_u8(&c);
		(void)wire_get_bytes(&c);
		(void)wire_get_i64(&c);
	}
	return 0;
}
