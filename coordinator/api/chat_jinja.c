/* chat_jinja.c — the variables of a chat template's render (chat_jinja.h). */
#include "coordinator/api/chat_jinja.h"

#include <string.h>

#include <cjson/cJSON.h>

static const char *const chat_jinja_own[] = {"messages",  "tools",     "add_generation_prompt",
					     "bos_token", "eos_token", NULL};

static int chat_jinja_add(cJSON *vars, const char *key, const cJSON *v, lm_diag *d)
{
	cJSON *copy = cJSON_Duplicate(v, true);
	if (copy == NULL || !cJSON_AddItemToObject(vars, key, copy)) {
		cJSON_Delete(copy);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	return 0;
}

int chat_jinja_vars(const cJSON *messages, const cJSON *tools, bool gen, const cJSON *kwargs,
		    const char *bos, const char *eos, cJSON **out, lm_diag *d)
{
	*out = NULL;
	if (kwargs != NULL && !cJSON_IsNull(kwargs) && !cJSON_IsObject(kwargs))
		return lm_fail(d, LM_EINVAL, "'chat_template_kwargs' must be an object");
	cJSON *vars = cJSON_CreateObject();
	if (vars == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	int rc = chat_jinja_add(vars, "messages", messages, d);
	/* No tools is None, as transformers passes it ("tools is not none" in templates). */
	if (rc == 0 && tools != NULL && !cJSON_IsNull(tools))
		rc = chat_jinja_add(vars, "tools", tools, d);
	else if (rc == 0 && cJSON_AddNullToObject(vars, "tools") == NULL)
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
	if (rc == 0 && (cJSON_AddBoolToObject(vars, "add_generation_prompt", gen) == NULL ||
			cJSON_AddStringToObject(vars, "bos_token", bos) == NULL ||
			cJSON_AddStringToObject(vars, "eos_token", eos) == NULL))
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
	for (const cJSON *k = cJSON_IsObject(kwargs) ? kwargs->child : NULL; rc == 0 && k != NULL;
	     k = k->next) {
		for (int i = 0; chat_jinja_own[i] != NULL; i++)
			if (strcmp(k->string, chat_jinja_own[i]) == 0)
				rc = lm_fail(d, LM_EINVAL,
					     "'chat_template_kwargs.%.40s' would replace the "
					     "template's own '%s'",
					     k->string, chat_jinja_own[i]);
		if (rc == 0 && cJSON_GetObjectItemCaseSensitive(vars, k->string) != NULL)
			rc = lm_fail(d, LM_EINVAL, "'chat_template_kwargs' names '%.40s' twice",
				     k->string);
		if (rc == 0)
			rc = chat_jinja_add(vars, k->string, k, d);
	}
	if (rc != 0) {
		cJSON_Delete(vars);
		return rc;
	}
	*out = vars;
	return 0;
}
