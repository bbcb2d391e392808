/* facts.h — what a running mesh knows that never changes while it runs: mesh.toml, the model's
 * metadata, the plan, and the options `layermesh up` was started with.
 *
 * mesh.c builds one struct mesh_facts once, before any keeper starts, and hands a const
 * pointer to the worker table, the process supervision, the keepers, the rollouts and the
 * status endpoints. Every pointer in it stays valid until mesh_up returns; nothing in it is
 * written after it is handed down, so it is read without a lock from any thread. */
#ifndef LM_FACTS_H
#define LM_FACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/config/mesh_config.h"
#include "common/tok/tokenizer.h"

struct fence_plan;
struct lm_hparams;
struct lm_tls;

struct mesh_facts {
	const struct mesh_config *cfg; /* mesh.toml as loaded; worker j is cfg->workers[j] */
	int32_t n_workers;
	const struct fence_plan *plan;
	const struct lm_hparams *hp;
	const tok_vocab *vocab;
	const char *model_name;
	uint64_t fingerprint; /* of the model file */
	int32_t max_seq;
	const struct lm_tls *tls; /* the [tls] files, for every tls+tcp:// connection */
	/* "" or, when a plane reaches another host over plain tcp://, a sentence saying so (the
	 * startup log and /readyz carry it). */
	const char *plain_note;
	bool spawns;           /* `layermesh up` starts the workers (false: --no-spawn) */
	int handshake_ms;      /* how long HELLO and READY may take per worker */
	int worker_timeout_ms; /* [coordinator] worker_timeout: liveness silence allowed */
};

/* Worker j's entry of mesh.toml (its name, configured addresses, backend). */
static inline const struct mesh_worker *facts_worker(const struct mesh_facts *f, int32_t j)
{
	return &f->cfg->workers[j];
}

#endif
