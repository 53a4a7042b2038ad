/* SPDX-License-Identifier: MIT */
/* tests/fuzz/replay.c: run a fuzz harness over every file of a corpus directory (the CI replay). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a harness, as in libFuzzer. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay(const char *path)
{
	uint8_t *buf;
	long n;
	FILE *f = fopen(path, "rb");

	if (f == NULL) {
		fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		fprintf(stderr, "fuzz_replay: %s: cannot size\n", path);
		return -1;
	}
	buf = malloc((size_t)n + 1);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		fprintf(stderr, "fuzz_replay: %s: read failed\n", path);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct dirent *de;
	char path[4096];
	int files = 0, bad = 0;
	DIR *d;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize != NULL) {
		LLVMFuzzerInitialize(&argc, &argv);
	}
	d = opendir(argv[1]);
	if (d == NULL) {
		fprintf(stderr, "fuzz_replay: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.') {
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
		bad += replay(path) < 0;
		files++;
	}
	closedir(d);
	/* stderr: a harness may have pointed stdout at /dev/null. */
	fprintf(stderr, "fuzz_replay: %d inputs replayed\n", files);
	return bad != 0 || files == 0 ? 1 : 0;
}
