/* SPDX-License-Identifier: MIT */
/* bench/etcd_cost/grpc.h: etcd's KV service over gRPC (HTTP/2 over cleartext, one connection). */
#ifndef CRUN_BENCH_ETCD_COST_GRPC_H
#define CRUN_BENCH_ETCD_COST_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct grpc_conn;

/** A connection to http://@hostport (libcurl with HTTP/2 prior knowledge); NULL with @err. */
struct grpc_conn *grpc_open(const char *hostport, char *err, size_t cap);
void grpc_close(struct grpc_conn *g);

/*
 * The four requests a round sends, each built as crun's JSON client builds it (the same
 * compares and ops), each answer checked: 0, or -1 with @err saying what was wrong.
 */
/** Range @key: its value must be @want. */
int grpc_range(struct grpc_conn *g, const char *key, const char *want, char *err, size_t cap);
/** Put @val at @key: the answer's revision must be above *@rev, which it updates. */
int grpc_put(struct grpc_conn *g, const char *key, const char *val, int64_t *rev, char *err,
	     size_t cap);
/**
 * A ticket on @key holding @mark (client_etcd_ticket.c's transaction: compare the value with
 * the mark, put it with prev_kv; else nested compare version 0 and put; else range): *@n is
 * the ticket taken (the replaced version + 1).
 */
int grpc_ticket(struct grpc_conn *g, const char *key, const char *mark, int64_t *n, char *err,
		size_t cap);
/** compare_set's transaction: compare value == @expected, put @desired, else range: must hold. */
int grpc_cas(struct grpc_conn *g, const char *key, const char *expected, const char *desired,
	     char *err, size_t cap);

#endif
