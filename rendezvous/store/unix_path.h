/* SPDX-License-Identifier: MIT */
/* rendezvous/store/unix_path.h: where a store's AF_UNIX socket lives (docs/security.md). */
#ifndef CRUN_RENDEZVOUS_STORE_UNIX_PATH_H
#define CRUN_RENDEZVOUS_STORE_UNIX_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

/*
 * Same-host clients of a crun store (crun-rdzvd, the agent's store) skip TCP: the server also
 * listens on a socket file named after the address and port it bound and its network
 * namespace, in a directory only its user can write (docs/security.md, "Same-host clients"):
 *
 *   DIR/store-<netns inode>-<address, "any" or "any6">-<port>.sock
 *
 * DIR: /run/crun for root; else $XDG_RUNTIME_DIR/crun; else /tmp/crun-<uid>. A client whose
 * endpoint is local looks in its own user's DIR and in /run/crun, and talks only to a server
 * whose SO_PEERCRED user owns the directory (itself or root). $CRUN_STORE_UNIX_SOCKET: unset
 * or empty, this; "off", no socket at all (server and clients); an absolute path, that socket
 * (a crun-rdzvd started with --unix-socket PATH).
 */
#define STORE_UNIX_ENV "CRUN_STORE_UNIX_SOCKET"
#define STORE_UNIX_ROOT_DIR "/run/crun"
#define STORE_UNIX_PATH_MAX 108 /* sizeof(sockaddr_un.sun_path) */

/** Whether @setting (the variable's value) turns the sockets off. */
bool store_unix_off(const char *setting);
/** This user's DIR (see above) in @buf. 0 or -ENAMETOOLONG. */
int store_unix_dir(char *buf, size_t len);
/**
 * The socket's path in @dir for a server bound to @sa (a wildcard address: "any") in this
 * network namespace. 0, -ENAMETOOLONG, or -errno when the namespace cannot be told.
 */
int store_unix_path(const char *dir, const struct sockaddr *sa, char *buf, size_t len);
/**
 * @dir (lstat: no symbolic link) is a directory no one but its owner can write; *@owner is
 * then its owner. 0, -ENOENT, or -EPERM (writable by others, not a directory).
 */
int store_unix_dir_check(const char *dir, uid_t *owner);

#endif
