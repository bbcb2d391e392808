/* spec_adapt.c — how many tokens a sequence drafts next. See spec_adapt.h. */
#include "coordinator/sched/spec_adapt.h"

void spec_adapt_init(struct spec_adapt *a, int32_t max_draft)
{
	*a = (struct spec_adapt){.p = SPEC_ADAPT_P0,
				 .max_draft = max_draft > 0 ? max_draft : 0,
				 .wait = 0,
				 .backoff = SPEC_ADAPT_BACKOFF_MIN,
				 .shadow = -1,
				 .shadow_at = -1};
}

int32_t spec_adapt_k(const struct spec_adapt *a)
{
	int32_t k = 0;
	float last = 1.0f;
	while (k < a->max_draft) {
		last *= a->p;
		if (last < SPEC_ADAPT_MIN)
			break;
		k++;
	}
	return k;
}

/* One comparison of a drafted token with what the model chose. */
static void spec_adapt_observe(struct spec_adapt *a, bool accepted)
{
	a->p += SPEC_ADAPT_ALPHA * ((accepted ? 1.0f : 0.0f) - a->p);
}

bool spec_adapt_shadow_due(struct spec_adapt *a, bool cheap)
{
	if (a->max_draft <= 0 || spec_adapt_k(a) > 0)
		return false;
	if (cheap)
		return true;
	if (a->wait > 0) {
		a->wait--;
		return false;
	}
	a->wait = a->backoff;
	return true;
}

void spec_adapt_verified(struct spec_adapt *a, int32_t drafted, int32_t accepted)
{
	if (drafted <= 0)
		return;
	if (accepted < 0)
		accepted = 0;
	if (accepted > drafted)
		accepted = drafted;
	/* Each accepted draft was compared and taken; the first one refused was compared too;
	 * the drafts after it never were, and say nothing. */
	for (int32_t i = 0; i < accepted; i++)
		spec_adapt_observe(a, true);
	if (accepted < drafted)
		spec_adapt_observe(a, false);
	a->shadow = -1;
}

void spec_adapt_shadow(struct spec_adapt *a, int32_t at, int32_t token)
{
	a->shadow = token;
	a->shadow_at = at;
}

void spec_adapt_token(struct spec_adapt *a, int32_t at, int32_t token)
{
	if (a->shadow < 0 || a->shadow_at != at) {
		a->shadow = -1;
		return;
	}
	bool hit = a->shadow == token;
	a->shadow = -1;
	spec_adapt_observe(a, hit);
	/* A costly source's next shadow comes sooner after a hit, later after a miss. */
	if (hit)
		a->backoff = SPEC_ADAPT_BACKOFF_MIN;
	else if (a->backoff < SPEC_ADAPT_BACKOFF_MAX)
		a->backoff *= 2;
}
