/* SPDX-License-Identifier: MIT */
/* tests/api/client.cpp: an external C++ client of the installed libcrun-worker (CRUN_SINGLE=1). */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <crun/crun.h>

namespace {

int failures;

void check(bool ok, const char *what, int line)
{
	if (!ok) {
		std::fprintf(stderr, "FAIL: client.cpp:%d: %s\n", line, what);
		failures++;
	}
}
#define CHECK(cond) check((cond), #cond, __LINE__)

struct store_closer {
	void operator()(crun_store *st) const
	{
		crun_store_close(st);
	}
};
struct comm_destroyer {
	void operator()(crun_comm *c) const
	{
		crun_comm_destroy(c);
	}
};
typedef std::unique_ptr<crun_store, store_closer> store_ptr;
typedef std::unique_ptr<crun_comm, comm_destroyer> comm_ptr;

void check_store(crun_store *st)
{
	const std::string value = "from C++";
	void *val = nullptr;
	size_t len = 0;

	CHECK(crun_store_set(st, "api/cxx", value.data(), value.size()) == 0);
	CHECK(crun_store_get(st, "api/cxx", &val, &len) == 0);
	CHECK(val != nullptr && std::string(static_cast<char *>(val), len) == value);
	std::free(val);
}

void check_comm(crun_store *st)
{
	crun_comm_opts co = CRUN_COMM_OPTS_INIT;
	crun_comm *raw = nullptr;
	std::vector<float> v = {1.5f, -2.0f, 4.0f};

	co.backend = CRUN_BACKEND_CPU;
	co.timeout_ms = 10000;
	co.name = "api-cxx";
	int rc = crun_comm_create(st, 0, 1, &co, &raw);
	CHECK(rc == 0);
	if (rc < 0) {
		std::fprintf(stderr, "crun_comm_create: %s\n", crun_strerror(rc));
		return;
	}
	comm_ptr comm(raw);
	CHECK(crun_comm_allreduce(comm.get(), v.data(), v.data(), v.size(), CRUN_DTYPE_FLOAT32,
				  CRUN_REDOP_AVG) == 0);
	CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 4.0f);
	CHECK(std::string(crun_comm_last_error(comm.get())).empty());
}

} // namespace

int main()
{
	crun_init_opts io = CRUN_INIT_OPTS_INIT;
	crun_store_opts so = CRUN_STORE_OPTS_INIT;
	char err[256];

	CHECK(crun_version() == CRUN_VERSION_NUMBER);
	CHECK(std::string(crun_version_string()) == CRUN_VERSION_STRING);
	CHECK(std::string(crun_strerror(CRUN_EBACKEND)) == "collective backend unavailable");
	CHECK(so.struct_size == sizeof(crun_store_opts) && so.endpoint == nullptr);

	io.store_timeout_ms = 10000;
	if (crun_init(&io, err, sizeof(err)) < 0) { // single mode: CRUN_SINGLE=1
		std::fprintf(stderr, "FAIL: crun_init: %s\n", err);
		return 1;
	}
	CHECK(crun_rank() == 0 && crun_world_size() == 1);
	{
		crun_store *raw = nullptr;
		int rc = crun_worker_store_open(&raw, err, sizeof(err));
		CHECK(rc == 0);
		store_ptr st(raw);
		if (rc == 0) {
			check_store(st.get());
			check_comm(st.get());
		} else {
			std::fprintf(stderr, "crun_worker_store_open: %s\n", err);
		}
	}
	crun_finish();
	if (failures > 0) {
		std::fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	std::printf("C++ client: libcrun-worker %s OK\n", crun_version_string());
	return 0;
}
