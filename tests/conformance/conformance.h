/* SPDX-License-Identifier: MIT */
/* tests/conformance/conformance.h: what the conformance harness shares with the tests. */
#ifndef CRUN_TESTS_CONFORMANCE_CONFORMANCE_H
#define CRUN_TESTS_CONFORMANCE_CONFORMANCE_H

#include <stdbool.h>
#include <stdint.h>

#include <crun/store.h>

#include "src/common/clock.h"

/* The backend under test (set up by the harness for the whole group). */
enum conf_backend { CONF_FILE, CONF_TCP, CONF_ETCD };
extern enum conf_backend g_backend;
extern bool g_tcp;           /* g_backend == CONF_TCP */
extern char g_dir[256];      /* temporary directory of the fixture */
extern char g_path[512];     /* file backend: the store file */
extern char g_endpoint[600]; /* what every test connects to */
extern int g_etcd_port;      /* etcd: its client port on 127.0.0.1 */
extern unsigned g_seq;       /* makes prefixes unique */

/* Helpers (test_conformance.c); they fail the running test on error. */
struct crun_store *open_with(const char *endpoint, const char *prefix, int timeout_ms);
/** A handle on the store under test with a prefix no other test uses. */
struct crun_store *open_fresh(void);
void want_value(struct crun_store *st, const char *key, const char *want);
int sets(struct crun_store *st, const char *key, const char *val);

/*
 * Parked waits (parked.c): a test that means to wake a wait writes only once the store holds
 * it, not while the key could still be found at once. Every backend logs "WAIT parked" at
 * debug level; the harness counts those lines.
 */
/** tcp: count the parked waits crun-rdzvd logs on @fd (its stderr; taken) until EOF. */
int parked_tap_daemon(int fd);
/** Wait for the tap to reach EOF (after the daemon exits). */
void parked_tap_stop(void);
/**
 * Start counting before starting the threads that wait; returns the count so far. The file
 * and etcd backends log in this process, at debug level, through a tap on stderr, until
 * park_watch_end().
 */
unsigned park_watch_begin(void);
/** Any thread: 0 once @n waits in all have parked, -ETIMEDOUT after @timeout_ms. */
int park_watch_until(unsigned n, int timeout_ms);
/** After joining those threads; the group teardown calls it too (a test that failed). */
void park_watch_end(void);

/* The tests, listed in main() in the order they run. */
void set_get_roundtrip(void **state);
void get_missing_is_enoent(void **state);
void add_semantics(void **state);
void compare_set_semantics(void **state);
void delete_semantics(void **state);
void check_semantics(void **state);
void num_keys_counts_every_prefix(void **state);
void append_semantics(void **state);
void multi_get_with_absent_keys(void **state);
void multi_set_then_get(void **state);
void huge_ttl_does_not_overflow(void **state);
void append_past_value_limit_is_emsgsize(void **state);
void ttl_key_expires(void **state);
void prefix_isolation_and_clone(void **state);
void limits_are_emsgsize(void **state);
void wait_all_times_out_within_bounds(void **state);
void wait_any_times_out_within_bounds(void **state);
void wait_returns_at_once_when_present(void **state);
void wait_woken_by_second_handle(void **state);
void wait_any_get_returns_the_value(void **state);
void wait_series_with_a_mark_misses_nothing(void **state);
void wait_get_blocks_until_the_key_exists(void **state);
void add_from_8_threads_is_exact(void **state);
void add_from_processes_is_exact(void **state);
void one_write_wakes_many_waiters(void **state);
void multi_set_is_atomic_for_readers(void **state);
void compare_set_race_has_one_winner(void **state);
/* tickets.c */
void ticket_semantics(void **state);
void tickets_at_once_are_distinct_and_consecutive(void **state);
void old_counter_met_by_a_ticket_is_named(void **state);
void bad_endpoints_are_einval(void **state);
void endpoint_spellings_reach_the_same_store(void **state);
void dead_endpoint_times_out(void **state);
void torn_last_record_is_recovered(void **state);
void hostile_record_lengths_are_rejected(void **state);
void held_lock_times_out(void **state);
void file_compaction_keeps_every_key(void **state);
/* file_integrity.c */
void file_has_format_header(void **state);
void damaged_middle_record_is_refused(void **state);
void garbage_after_records_is_refused(void **state);
void zero_tail_is_torn(void **state);
void foreign_file_is_refused(void **state);
void old_format_file_is_refused(void **state);

#endif
