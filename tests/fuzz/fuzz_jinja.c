/* fuzz_jinja — libFuzzer target: any bytes as a chat template, parsed by the Jinja engine and,
 * when they parse, rendered over a conversation with tools under tight limits. Both must
 * return 0 or an error with a message, never crash, leak, read out of bounds or run past the
 * limits (a template of `range` loops and string doubling is bounded by them). */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "coordinator/api/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_vars[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
	"\"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}, {\"role\": \"assistant\", "
	"\"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
	"\"f\", \"arguments\": {\"a\": 1.5, \"b\": [true, null]}}}]}, {\"role\": \"tool\", "
	"\"content\": \"ok\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
	"\"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
	"\"number\"}}}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", "
	"\"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy: reading one byte past the input is caught. */
	char *text = malloc(size ? size : 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	lm_diag d = {{0}};
	jinja_tmpl *t = jinja_parse(text, size, &d);
	if (t == NULL && d.msg[0] == '\0')
		abort(); /* every failure must say why */
	cJSON *vars = cJSON_Parse(fuzz_vars);
	const struct jinja_limits lim = {.max_output = 1 << 16,
					 .max_steps = 200000,
					 .max_depth = 16,
					 .max_memory = 16 << 20};
	struct lm_buf out = {0};
	if (t != NULL && vars != NULL && jinja_render(t, vars, NULL, &lim, &out, &d) != 0 &&
	    (d.msg[0] == '\0' || out.len != 0))
		abort(); /* a failure says why and leaves the output as it was */
	if (out.len > lim.max_output)
		abort();
	lm_buf_fini(&out);
	cJSON_Delete(vars);
	jinja_free(t);
	free(text);
	return 0;
}
