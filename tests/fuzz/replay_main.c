/* replay_main.c — runs a libFuzzer target's entry point over files, without libFuzzer.
 *
 * Linked with a fuzz target's source in every build (gcc too), so `meson test` feeds the
 * committed seed corpus and any saved crash inputs through the target's checks:
 *     replay_<name> FILE_OR_DIR...
 * Exits non-zero if an input cannot be read; a failed check traps, as under libFuzzer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "replay: cannot open %s\n", path);
		return 1;
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *p = realloc(buf, cap * 2);
			if (p == NULL) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = p;
			cap *= 2;
		}
	}
	fclose(f);
	if (buf == NULL) {
		fprintf(stderr, "replay: out of memory reading %s\n", path);
		return 1;
	}
	/* An exact-size copy, so a sanitizer sees any read past the end. */
	uint8_t *exact = malloc(len ? len : 1);
	if (exact == NULL) {
		free(buf);
		return 1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0, inputs = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
			failed = 1;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			failed |= replay_file(argv[i]);
			inputs++;
			continue;
		}
		DIR *dir = opendir(argv[i]);
		if (dir == NULL) {
			failed = 1;
			continue;
		}
		struct dirent *e;
		while ((e = readdir(dir)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
			failed |= replay_file(path);
			inputs++;
		}
		closedir(dir);
	}
	printf("replayed %d inputs\n", inputs);
	return failed || inputs == 0;
}
