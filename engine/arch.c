/* arch.c — the architectures layermesh runs. See arch.h. */
#include "engine/arch.h"

#include <string.h>

static const struct lm_arch *const arch_all[] = {
	&lm_arch_llama,  &lm_arch_qwen2,  &lm_arch_qwen3,  &lm_arch_qwen3moe,
	&lm_arch_gemma3, &lm_arch_gemma4, &lm_arch_qwen35, &lm_arch_qwen35moe,
};

const struct lm_arch *lm_arch_find(const char *name)
{
	for (size_t i = 0; i < sizeof arch_all / sizeof arch_all[0]; i++)
		if (strcmp(arch_all[i]->name, name) == 0)
			return arch_all[i];
	return NULL;
}

const char *lm_arch_names(void)
{
	return lm_hparams_archs(); /* the same list: hparams_arch.c reads what arch_all runs */
}
