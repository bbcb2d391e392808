/* test_sched_spec.c — coordinator/scheduler: speculative decoding and the prefix cache against
 * a real ring (tests/unit/sched_ring.h). Drafts, accepted or not, and rows reused from a slot
 * change no token: every request ends with the tokens the single-process engine gives. */
#include "tests/unit/sched_ring.h"

/* Speculation with either draft source: requests get exactly the tokens of plain decoding,
 * drafts are sent and (from the draft model) mostly accepted, and sequences with a draft ride
 * in batches beside sequences without one (the request that opts out). */
Test(sched_spec, speculation_from_either_source_gives_the_plain_tokens, .timeout = 30)
{
	for (int model = 0; model <= 1; model++) {
		struct ring r;
		struct sched_cfg cfg = spec_cfg(default_cfg(), model);
		/* One batch in flight carries all three sequences, so those with drafts ride
		 * beside the one without whatever the timing (with a batch per hop, each batch
		 * may take one sequence). */
		cfg.max_inflight = 1;
		ring_up(&r, &cfg);
		struct req q[3];
		sched_pause(r.s, "test: hold until all are in");
		for (int k = 0; k < 3; k++) {
			req_init(&q[k], 30 + k, 9 + 4 * k, 18 + k);
			prompt_repeating(30 + k, q[k].n_prompt, q[k].prompt);
			q[k].no_speculate = k == 2;
			req_start(&r, &q[k]);
		}
		cr_assert(wait_slots(&r, 3, 0));
		sched_resume(r.s, false);
		for (int k = 0; k < 3; k++)
			expect_like_reference(&q[k], NULL, 0);
		const struct sched_stats *st = sched_stats(r.s);
		uint64_t drafted = atomic_load(&st->spec_drafted);
		uint64_t accepted = atomic_load(&st->spec_accepted);
		cr_log_info("%s: %llu drafted, %llu accepted in %llu batches, %d mixed",
			    model ? "draft model" : "n-gram", (unsigned long long)drafted,
			    (unsigned long long)accepted,
			    (unsigned long long)atomic_load(&st->batches),
			    atomic_load(&r.hop[0].mixed));
		cr_expect_gt(drafted, 0);
		cr_expect_leq(accepted, drafted);
		if (model)
			cr_expect_gt(accepted * 2, drafted, "the q8_0 copy agrees with its model");
		cr_expect_gt(atomic_load(&r.hop[0].mixed), 0);
		cr_expect_eq(atomic_load(&st->ring_errors), 0);
		ring_down(&r);
		for (int k = 0; k < 3; k++)
			req_fini(&q[k]);
		model_path[0] = '\0'; /* ring_down removed it: the next ring writes it again */
	}
}

/* A draft source that is always wrong: it proposes the token after the sequence's last
 * (the reference model's greedy choice almost never is). */
static int32_t wrong_propose(void *ctx, int32_t slot, const int32_t *tok, int32_t n, int32_t max,
			     int32_t *out)
{
	(void)ctx;
	(void)slot;
	for (int32_t i = 0; i < max; i++)
		out[i] = 3 + (tok[n - 1] + 1 + i) % (T_VOCAB - 3);
	return max;
}

static void wrong_fini(void *ctx)
{
	(void)ctx;
}

static const struct spec_source_i wrong_iface = {
	.name = "wrong", .cheap = true, .propose = wrong_propose, .fini = wrong_fini};

/* Drafts that keep failing stop within a few steps of each sequence, and shadow drafts (never
 * sent) take their place; the tokens are the plain ones. */
Test(sched_spec, drafts_that_keep_failing_stop, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.max_draft = T_MAX_DRAFT;
	cfg.draft = (struct spec_source){.iface = &wrong_iface};
	cfg.max_inflight = 1;
	ring_up(&r, &cfg);
	struct req q[3];
	for (int k = 0; k < 3; k++) {
		req_init(&q[k], 40 + k, 9, 40);
		prompt_of(40 + k, q[k].n_prompt, q[k].prompt);
		req_start(&r, &q[k]);
	}
	for (int k = 0; k < 3; k++)
		expect_like_reference(&q[k], NULL, 0);
	const struct sched_stats *st = sched_stats(r.s);
	uint64_t drafted = atomic_load(&st->spec_drafted);
	uint64_t accepted = atomic_load(&st->spec_accepted);
	uint64_t shadowed = atomic_load(&st->spec_shadowed);
	cr_expect_eq(accepted, 0, "%llu of %llu drafts accepted", (unsigned long long)accepted,
		     (unsigned long long)drafted);
	/* Each sequence starts at one draft a step and stops after two misses: a handful, not
	 * one a step for 40 steps. */
	cr_expect_leq(drafted, 3 * 3, "%llu drafted", (unsigned long long)drafted);
	cr_expect_gt(shadowed, 3 * 20, "stopped sequences keep watching with shadow drafts");
	cr_expect_eq(atomic_load(&st->ring_errors), 0);
	ring_down(&r);
	for (int k = 0; k < 3; k++)
		req_fini(&q[k]);
}

/* Three streams of 12-token prompts (repeating ones from seed k0 + k) in one batch, so that they
 * advance a token a step together, with max_tokens[k] each and [speculative] max_streams as
 * given, the draft model or n-gram lookup drafting: how many tokens were drafted. The tokens are
 * the plain ones whatever was drafted. */
static uint64_t three_streams_drafted(bool model, int32_t max_streams, int32_t k0,
				      const int32_t max_tokens[3])
{
	struct ring r;
	struct sched_cfg cfg = spec_cfg(default_cfg(), model);
	cfg.max_inflight = 1;
	cfg.spec_max_streams = max_streams;
	ring_up(&r, &cfg);
	struct req q[3];
	sched_pause(r.s, "test: hold until all are in");
	for (int k = 0; k < 3; k++) {
		req_init(&q[k], k0 + k, 12, max_tokens[k]);
		prompt_repeating(k0 + k, q[k].n_prompt, q[k].prompt);
		req_start(&r, &q[k]);
	}
	cr_assert(wait_slots(&r, 3, 0));
	sched_resume(r.s, false);
	for (int k = 0; k < 3; k++)
		expect_like_reference(&q[k], NULL, 0);
	uint64_t drafted = atomic_load(&sched_stats(r.s)->spec_drafted);
	ring_down(&r);
	for (int k = 0; k < 3; k++)
		req_fini(&q[k]);
	model_path[0] = '\0';
	return drafted;
}

/* Above [speculative] max_streams sequences holding slots, none drafts: three streams of the
 * same length draft with no bound, and nothing with a bound of two. */
Test(sched_spec, many_streams_do_not_draft, .timeout = 30)
{
	const int32_t same[3] = {18, 18, 18};
	cr_expect_gt(three_streams_drafted(false, 0, 30, same), 0,
		     "no bound: the repeating prompts draft");
	uint64_t bounded = three_streams_drafted(false, 2, 30, same);
	cr_expect_eq(bounded, 0, "%llu drafted with three streams over a bound of two",
		     (unsigned long long)bounded);
}

/* A round drains: three streams over a bound of two draft nothing until two of them end,
 * after 12 tokens. The third, with the draft model, then drafts again only if it has as many
 * tokens left as the model must first be fed (the 12 it missed): with 40 to generate it does,
 * with 16 it does not. */
Test(sched_spec, a_draining_round_drafts_again_only_where_it_pays, .timeout = 30)
{
	const int32_t long_third[3] = {12, 12, 40}, short_third[3] = {12, 12, 16};
	cr_expect_gt(three_streams_drafted(true, 2, 60, long_third), 0,
		     "28 tokens left after 12 missed: drafts");
	uint64_t late = three_streams_drafted(true, 2, 60, short_third);
	cr_expect_eq(late, 0, "%llu drafted with 4 tokens left after 12 missed",
		     (unsigned long long)late);
}

/* Three turns of a conversation, each prompt the last one's prompt and answer and more: with
 * the prefix cache each turn reuses the rows the last one left in its slot and computes only
 * the rest, and every token and logprob is the same bits as without it, with and without
 * speculation. A pause (a worker away) forgets what the slots held. */
static void conversation(bool cache, bool spec, struct req turns[3])
{
	struct ring r;
	struct sched_cfg cfg = spec ? spec_cfg(default_cfg(), false) : default_cfg();
	cfg.prefix_cache = cache;
	cfg.ring_rollback = -1;
	cfg.recurrent = model_arch != NULL; /* qwen35: each stage keeps max_draft states */
	cfg.rec_keep = T_MAX_DRAFT;
	ring_up(&r, &cfg);
	for (int t = 0; t < 3; t++) {
		struct req *q = &turns[t];
		req_init(q, 50, 12, 10);
		if (t > 0) {
			const struct req *p = &turns[t - 1];
			memcpy(q->prompt, p->prompt, (size_t)p->n_prompt * sizeof *q->prompt);
			memcpy(q->prompt + p->n_prompt, p->tok, (size_t)p->n * sizeof *q->prompt);
			q->n_prompt = p->n_prompt + p->n;
			for (int32_t i = 0; i < 5; i++)
				q->prompt[q->n_prompt++] = 3 + (t * 7 + i * 13) % (T_VOCAB - 3);
		}
		if (t == 2)
			sched_pause(r.s, "test: a worker away"), sched_resume(r.s, false);
		req_start(&r, q);
		expect_like_reference(q, NULL, 0);
	}
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_eq(atomic_load(&st->prompt_cached),
		     (uint64_t)(turns[0].cached + turns[1].cached + turns[2].cached));
	/* Reused, never repaired: no stage refused a batch, nothing was computed twice. */
	cr_expect_eq(atomic_load(&st->ring_errors), 0);
	cr_expect_eq(atomic_load(&st->replays), 0);
	cr_expect_eq(atomic_load(&st->batches_forgotten), 0);
	ring_down(&r);
	model_path[0] = '\0';
}

static void conversation_with_and_without(int spec)
{
	struct req off[3], on[3];
	conversation(false, spec, off);
	conversation(true, spec, on);
	for (int t = 0; t < 3; t++) {
		cr_expect_eq(off[t].cached, 0);
		cr_assert_eq(on[t].n, off[t].n, "turn %d", t);
		for (int32_t i = 0; i < on[t].n; i++) {
			cr_expect_eq(on[t].tok[i], off[t].tok[i], "turn %d token %d", t, i);
			cr_expect(memcmp(&on[t].lp[i], &off[t].lp[i], sizeof(float)) == 0,
				  "turn %d token %d: logprob %a with the cache, %a without", t, i,
				  (double)on[t].lp[i], (double)off[t].lp[i]);
		}
	}
	/* Turn 2 reuses all turn 1 computed: its prompt and its answer less the last
	 * token, which was sampled and never fed back. Turn 3 follows a pause: nothing. */
	cr_expect_eq(on[0].cached, 0);
	cr_expect_eq(on[1].cached, on[0].n_prompt + on[0].n - 1, "spec %d: %d reused", spec,
		     on[1].cached);
	cr_expect_eq(on[2].cached, 0, "after a pause the slots' rows are not trusted");
	for (int t = 0; t < 3; t++) {
		req_fini(&off[t]);
		req_fini(&on[t]);
	}
}

Test(sched_spec, a_conversation_reuses_its_rows_with_the_same_bits, .timeout = 30)
{
	conversation_with_and_without(0);
}

Test(sched_spec, a_speculating_conversation_reuses_its_rows_with_the_same_bits, .timeout = 30)
{
	conversation_with_and_without(1);
}

/* The same on recurrent layers: each turn extends all the last one held, a length every stage
 * can return to, even after a verify batch whose drafts were partly rejected. */
Test(sched_spec, a_recurrent_conversation_reuses_its_states_with_the_same_bits, .timeout = 30)
{
	model_arch = "qwen35";
	conversation_with_and_without(0);
}

Test(sched_spec, a_speculating_recurrent_conversation_reuses_its_states, .timeout = 30)
{
	model_arch = "qwen35";
	conversation_with_and_without(1);
}

/* A worker lost while sequences speculate: the replay rebuilds every cache from the tokens
 * accepted (never from a draft), and the requests end with the plain tokens. */
Test(sched_spec, a_fault_while_speculating_replays_to_the_same_tokens, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = spec_cfg(default_cfg(), true);
	ring_up(&r, &cfg);
	struct req a, b;
	req_init(&a, 62, 7, 30);
	req_init(&b, 63, 11, 28);
	hold_when(&r.hop[0], 5, &a, &b);
	req_start(&r, &a);
	req_start(&r, &b);
	cr_assert(req_wait_tokens(&a, 5, T_WAIT_MS));
	cr_assert(req_wait_tokens(&b, 5, T_WAIT_MS));
	atomic_store(&r.hop[0].fault, HOP_DROP);
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 2));
	sched_pause(r.s, "test: worker 1 restarting");
	hop_restart(&r.hop[1]);
	atomic_store(&r.hop[0].fault, HOP_PASS);
	sched_resume(r.s, true);
	expect_like_reference(&a, NULL, 0);
	expect_like_reference(&b, NULL, 0);
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_geq(atomic_load(&st->replays), 1);
	cr_expect_gt(atomic_load(&st->spec_accepted), 0);
	ring_down(&r);
	req_fini(&a);
	req_fini(&b);
}
