/* fuzz_toml — libFuzzer target: any bytes through the TOML reader and mesh.toml's schema. Both
 * must return 0 or an error with a message, never crash, leak or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/config/mesh_config.h"
#include "common/format/toml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy: reading one byte past the input is caught. */
	char *text = malloc(size ? size : 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	struct toml_doc doc;
	lm_diag d = {{0}};
	if (toml_parse(&doc, "fuzz.toml", text, size, &d) == 0) {
		char path[64];
		for (size_t i = 0; i < toml_len(doc.root); i++)
			toml_path(toml_entry(doc.root, i)->val, path, sizeof path);
		toml_doc_fini(&doc);
	} else if (d.msg[0] == '\0') {
		abort(); /* every failure must say why */
	}
	struct mesh_config cfg;
	if (mesh_config_parse(&cfg, "/fuzz/mesh.toml", text, size, &d) == 0)
		mesh_config_fini(&cfg);
	free(text);
	return 0;
}
