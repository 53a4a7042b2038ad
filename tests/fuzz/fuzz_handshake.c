/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz_handshake.c: libFuzzer harness for the store's handshake and per-run scopes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "rendezvous/store/server.h"
#include "rendezvous/store/wire.h"
#include "src/common/log.h"
#include "src/common/token.h"

/*
 * One input is one client connection to a real store server running on a thread of this
 * process (with a token). Its first byte picks what the harness does before sending the rest:
 *   0: nothing (raw bytes from the first byte on: HELLO, AUTH, anything),
 *   1: a correct handshake for the scope that follows (up to a NUL), then the rest as frames,
 *   2: the same with one bit of the proof flipped (the refusal path),
 * so the fuzzer reaches both the handshake's refusals and the scope checks after it.
 * Each connection comes from its own loopback address, so the per-source guess limiter does
 * not turn every later input into an unread refusal.
 */
#define FUZZ_TOKEN "fuzz-handshake-token-0123456789abcdef"
#define FUZZ_IO_MS 2000

static struct store_server_thread *server;
static struct sockaddr_in server_addr;
static uint32_t next_source;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct store_server_opts o = {.listen = "127.0.0.1:0", .token = FUZZ_TOKEN,
				      .frame_timeout_ms = 1000, .max_wait_ms = 100};
	struct crun_diag d;

	(void)argc;
	(void)argv;
	log_set_level(LOG_ERROR);
	if (store_server_thread_start(&o, &server, &d) < 0) {
		fprintf(stderr, "fuzz_handshake: cannot start the store: %s\n", d.msg);
		abort();
	}
	server_addr.sin_family = AF_INET;
	server_addr.sin_port = htons((uint16_t)store_server_thread_port(server));
	server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return 0;
}

static int dial(void)
{
	struct timeval tv = {.tv_sec = FUZZ_IO_MS / 1000, .tv_usec = (FUZZ_IO_MS % 1000) * 1000};
	struct sockaddr_in src = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0) {
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* 127.1.0.0 - 127.1.255.255: a fresh source for each of 65,536 inputs in turn. */
	src.sin_addr.s_addr = htonl(0x7f010000u | (next_source++ & 0xffffu));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
	    connect(fd, (struct sockaddr *)&server_addr, sizeof(server_addr)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	ssize_t w;

	while (n > 0) {
		w = send(fd, b, n, MSG_NOSIGNAL);
		if (w <= 0) {
			return false;
		}
		b += w;
		n -= (size_t)w;
	}
	return true;
}

/* One reply frame's payload into @buf (at most @cap bytes); its length, or -1. */
static ssize_t read_frame(int fd, uint8_t *buf, size_t cap, struct wire_hdr *h)
{
	uint8_t hdr[WIRE_HDR_LEN];
	size_t got = 0, want;
	ssize_t r;

	while (got < sizeof(hdr)) {
		r = recv(fd, hdr + got, sizeof(hdr) - got, 0);
		if (r <= 0) {
			return -1;
		}
		got += (size_t)r;
	}
	if (wire_hdr_decode(hdr, WIRE_MAX_FRAME, h) != 0 || h->len - 8 > cap) {
		return -1;
	}
	want = h->len - 8;
	for (got = 0; got < want; got += (size_t)r) {
		r = recv(fd, buf + got, want - got, 0);
		if (r <= 0) {
			return -1;
		}
	}
	return (ssize_t)want;
}

static bool send_frame(int fd, struct wire_buf *b)
{
	bool ok = send_all(fd, b->p, b->len);

	b->len = 0;
	return ok;
}

/* HELLO with @scope, then AUTH with the right proof (one bit flipped when @spoil). */
static bool handshake(int fd, const char *scope, bool spoil, uint8_t flip)
{
	uint8_t cn[TOKEN_NONCE_LEN] = {0}, sn[TOKEN_NONCE_LEN], key[TOKEN_KEY_LEN];
	uint8_t proof[TOKEN_KEY_LEN], reply[512];
	struct wire_buf b = {0};
	struct wire_hdr h;
	struct wire_cur c;
	struct wire_str nonce;
	ssize_t n;
	size_t off;
	bool ok = false;

	if (token_derive_key(FUZZ_TOKEN, strlen(FUZZ_TOKEN), scope, key) < 0) {
		return false;
	}
	off = wire_frame_begin(&b, WIRE_OP_HELLO, 0, 0, 1);
	wire_put_u32(&b, WIRE_MAGIC);
	wire_put_u16(&b, WIRE_VERSION);
	wire_put_u16(&b, 0);
	wire_put_bytes(&b, cn, sizeof(cn));
	wire_put_bytes(&b, scope, strlen(scope));
	wire_frame_end(&b, off);
	if (!send_frame(fd, &b) || (n = read_frame(fd, reply, sizeof(reply), &h)) < 0 ||
	    h.status != 0) {
		goto out;
	}
	c = (struct wire_cur){reply, reply + n, false};
	(void)wire_get_u16(&c);
	(void)wire_get_u16(&c);
	nonce = wire_get_bytes(&c);
	if (c.bad || nonce.len != sizeof(sn)) {
		goto out;
	}
	memcpy(sn, nonce.p, sizeof(sn));
	if (token_proof(key, sn, cn, TOKEN_ROLE_CLIENT, proof) < 0) {
		goto out;
	}
	if (spoil) {
		proof[flip % sizeof(proof)] ^= (uint8_t)(1u << (flip % 8));
	}
	off = wire_frame_begin(&b, WIRE_OP_AUTH, 0, 0, 2);
	wire_put_bytes(&b, proof, sizeof(proof));
	wire_frame_end(&b, off);
	ok = send_frame(fd, &b) && read_frame(fd, reply, sizeof(reply), &h) >= 0;
out:
	wire_buf_finish(&b);
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char scope[TOKEN_SCOPE_MAX + 1] = "";
	uint8_t sink[4096], mode;
	size_t i = 1, n = 0;
	int fd;

	if (size == 0) {
		return 0;
	}
	fd = dial();
	if (fd < 0) {
		return 0;
	}
	mode = data[0] % 3;
	if (mode == 0) {
		i = 0;
	} else {
		while (i < size && data[i] != '\0' && n < TOKEN_SCOPE_MAX) {
			scope[n++] = (char)data[i++];
		}
		scope[n] = '\0';
		i += i < size; /* the NUL */
		if (!handshake(fd, scope, mode == 2, size > i ? data[i] : 0)) {
			close(fd);
			return 0;
		}
	}
	/* The rest as the client's stream; then read until the server has answered and closed
	 * (or the timeout: a wait it holds, a partial frame it keeps). */
	if (send_all(fd, data + i, size - i)) {
		shutdown(fd, SHUT_WR);
		while (recv(fd, sink, sizeof(sink), 0) > 0) {
		}
	}
	close(fd);
	return 0;
}
