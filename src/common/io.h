/* SPDX-License-Identifier: MIT */
/* src/common/io.h: whole-buffer reads and writes that survive EINTR and short transfers. */
#ifndef CRUN_SRC_COMMON_IO_H
#define CRUN_SRC_COMMON_IO_H

#include <stddef.h>
#include <sys/types.h>

/** Write all @len bytes of @buf (borrowed). Returns 0 or -errno. */
int io_write_full(int fd, const void *buf, size_t len);
/** pwrite(2) all @len bytes at @off. Returns 0 or -errno. */
int io_pwrite_full(int fd, const void *buf, size_t len, off_t off);
/**
 * Read until @len bytes or end of file. Returns the byte count (< @len only at end of file)
 * or -errno.
 */
ssize_t io_read_full(int fd, void *buf, size_t len);
/** pread(2) until @len bytes or end of file, from @off. As io_read_full(). */
ssize_t io_pread_full(int fd, void *buf, size_t len, off_t off);
/**
 * Write all of @buf to a descriptor that may be non-blocking (a shared terminal, a pipe to a
 * slow reader): on EAGAIN wait for room, but at most @stall_ms each time, then give up.
 * Returns 0, -ETIMEDOUT (stalled; part may have been written) or -errno.
 */
int io_write_full_stall(int fd, const void *buf, size_t len, int stall_ms);
/**
 * Move @fd (owned) above 0, 1 and 2, close-on-exec: a process started with a closed stdio
 * gets those numbers for its first new descriptors, and a child's dup2() onto them would
 * then close them under the parent. Returns the descriptor (@fd itself when already above
 * 2) or -errno (@fd is closed either way on failure).
 */
int io_lift_fd(int fd);

#endif
