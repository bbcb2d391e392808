/* test_scheduler.c — coordinator/scheduler: the real scheduler against a real ring
 * (tests/unit/sched_ring.h). A request's tokens must be exactly what `layermesh run` would
 * print, whatever else shares its batches; faults injected at a hop end only what they must. */
#include "tests/unit/sched_ring.h"

/* ------------------------------------------------------------------ tests */

Test(scheduler, a_request_gets_the_single_process_engines_greedy_tokens, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req q;
	req_init(&q, 1, 6, 12);
	req_start(&r, &q);
	expect_like_reference(&q, NULL, 0);
	cr_expect_eq(q.why, SCHED_FINISH_LENGTH);
	cr_expect_eq(q.n, 12);
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_eq(atomic_load(&st->requests), 1);
	cr_expect_eq(atomic_load(&st->prompt_tokens), 6);
	cr_expect_eq(atomic_load(&st->tokens_generated), 12);
	cr_expect_eq(atomic_load(&st->active), 0);
	cr_expect_eq(atomic_load(&st->ring_errors), 0);
	ring_down(&r);
	req_fini(&q);
}

/* Continuous batching: requests of different lengths share batches (their prompts in chunks,
 * beside the others' decode steps) and each still gets exactly its solo run's tokens. They are
 * submitted while dispatch is held, so the first batches are full. */
Test(scheduler, concurrent_requests_each_equal_their_solo_run, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	const int32_t len[4] = {3, 17, 9, 25}, max[4] = {14, 5, 9, 11};
	struct req q[4];
	sched_pause(r.s, "test: hold until all are in");
	for (int k = 0; k < 4; k++) {
		req_init(&q[k], 10 + k, len[k], max[k]);
		req_start(&r, &q[k]);
	}
	cr_assert(wait_slots(&r, 4, 0));
	sched_resume(r.s, false);
	for (int k = 0; k < 4; k++)
		expect_like_reference(&q[k], NULL, 0);
	cr_expect_geq(atomic_load(&r.hop[0].max_seqs), 2, "no batch carried two sequences");
	ring_down(&r);
	for (int k = 0; k < 4; k++)
		req_fini(&q[k]);
}

/* Speculation with either draft source: requests get exactly the tokens of plain decoding,
 * drafts are sent and (from the draft model) mostly accepted, and sequences with a draft ride
 * in batches beside sequences without one (the request that opts out). */
Test(scheduler, speculation_from_either_source_gives_the_plain_tokens, .timeout = 30)
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
Test(scheduler, drafts_that_keep_failing_stop, .timeout = 30)
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

/* Above [speculative] max_streams sequences holding slots, none drafts: three streams of the
 * same length draft with no bound, and nothing with a bound of two; the tokens are the plain
 * ones either way. */
static uint64_t three_streams_drafted(int32_t max_streams)
{
	struct ring r;
	struct sched_cfg cfg = spec_cfg(default_cfg(), false);
	cfg.max_inflight = 1;
	cfg.spec_max_streams = max_streams;
	ring_up(&r, &cfg);
	struct req q[3];
	sched_pause(r.s, "test: hold until all are in");
	for (int k = 0; k < 3; k++) {
		req_init(&q[k], 30 + k, 12, 18);
		prompt_repeating(30 + k, q[k].n_prompt, q[k].prompt);
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

Test(scheduler, many_streams_do_not_draft, .timeout = 30)
{
	cr_expect_gt(three_streams_drafted(0), 0, "no bound: the repeating prompts draft");
	uint64_t bounded = three_streams_drafted(2);
	cr_expect_eq(bounded, 0, "%llu drafted with three streams over a bound of two",
		     (unsigned long long)bounded);
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

Test(scheduler, a_conversation_reuses_its_rows_with_the_same_bits, .timeout = 30)
{
	conversation_with_and_without(0);
}

Test(scheduler, a_speculating_conversation_reuses_its_rows_with_the_same_bits, .timeout = 30)
{
	conversation_with_and_without(1);
}

/* A worker lost while sequences speculate: the replay rebuilds every cache from the tokens
 * accepted (never from a draft), and the requests end with the plain tokens. */
Test(scheduler, a_fault_while_speculating_replays_to_the_same_tokens, .timeout = 30)
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

/* max_tokens, a stop id, a full context and max_tokens 0 each end a request with its reason. */
Test(scheduler, max_tokens_stop_ids_and_the_context_end_requests_with_their_reason, .timeout = 30)
{
	/* The stop id: a token the engine generates for prompt 20 for the first time at step
	 * k >= 2, so that request ends there with k tokens, the stop id unseen. */
	make_model();
	ref_open();
	int32_t p[T_MAX_SEQ], gen[T_MAX_SEQ], n_gen, k = 0;
	prompt_of(20, 5, p);
	ref_generate(p, 5, 12, NULL, 0, gen, &n_gen);
	cr_assert_eq(n_gen, 12);
	for (int32_t i = 2; i < n_gen && k == 0; i++) {
		bool seen = false;
		for (int32_t j = 0; j < i; j++)
			seen |= gen[j] == gen[i];
		k = seen ? 0 : i;
	}
	cr_assert_gt(k, 0, "the engine repeats itself from the start");
	int32_t stop = gen[k];

	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.stop_ids[0] = stop;
	cfg.n_stop_ids = 1;
	ring_up(&r, &cfg); /* on the model and reference already made */

	struct req by_stop, by_max, by_ctx, none;
	req_init(&by_stop, 20, 5, 12);
	req_init(&by_max, 21, 7, 4);
	req_init(&by_ctx, 22, T_MAX_SEQ - 3, 50);
	req_init(&none, 23, 4, 0);
	req_start(&r, &by_stop);
	req_start(&r, &by_max);
	req_start(&r, &by_ctx);
	req_start(&r, &none);
	expect_like_reference(&by_stop, &stop, 1);
	expect_like_reference(&by_max, &stop, 1);
	expect_like_reference(&by_ctx, &stop, 1);
	expect_like_reference(&none, &stop, 1);
	cr_expect_eq(by_stop.why, SCHED_FINISH_STOP);
	cr_expect_eq(by_stop.n, k);
	for (int32_t i = 0; i < by_stop.n; i++)
		cr_expect_neq(by_stop.tok[i], stop, "a stop id was reported as a token");
	/* The other two end by length, unless the stop id came first (then the reference agreed). */
	if (by_max.why == SCHED_FINISH_LENGTH)
		cr_expect_eq(by_max.n, 4);
	if (by_ctx.why == SCHED_FINISH_LENGTH)
		cr_expect_eq(by_ctx.n, 3, "a context of %d holds 3 tokens after %d", T_MAX_SEQ,
			     T_MAX_SEQ - 3);
	cr_expect_eq(none.why, SCHED_FINISH_LENGTH);
	cr_expect_eq(none.n, 0);
	ring_down(&r);
	req_fini(&by_stop);
	req_fini(&by_max);
	req_fini(&by_ctx);
	req_fini(&none);
}

/* sched_cancel ends a running request (its tokens so far are the engine's) and a queued one
 * (no tokens); an unknown id changes nothing. */
Test(scheduler, cancel_ends_running_and_queued_requests, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req run, other[T_SLOTS - 1], queued;
	req_init(&run, 30, 4, 50);
	/* Held at the first worker from its second token, the request cannot run to its end
	 * before the cancel is seen: its batch is in flight then, and it ends when that batch
	 * comes back. */
	hold_when(&r.hop[0], 2, &run, NULL);
	req_start(&r, &run);
	cr_assert(req_wait_tokens(&run, 2, T_WAIT_MS));
	cr_assert_eq(atomic_load(&r.hop[0].fault), HOP_HOLD);
	sched_cancel(r.s, run.id);
	usleep(20000);
	atomic_store(&r.hop[0].fault, HOP_PASS);
	cr_assert(req_wait(&run, T_WAIT_MS));
	cr_expect_eq(run.why, SCHED_FINISH_CANCEL);
	cr_expect_eq(run.code, 0);
	cr_expect_eq(run.done_calls, 1);
	cr_expect_lt(run.n, 50);
	int32_t want[T_MAX_SEQ], n_want;
	ref_generate(run.prompt, run.n_prompt, 50, NULL, 0, want, &n_want);
	for (int32_t i = 0; i < run.n; i++)
		cr_expect_eq(run.tok[i], want[i], "token %d", i);

	/* Every slot taken, one more waits: cancelling it ends it at once. */
	sched_pause(r.s, "test: hold");
	for (int k = 0; k < T_SLOTS - 1; k++) {
		req_init(&other[k], 31 + k, 5, 6);
		req_start(&r, &other[k]);
	}
	struct req filler;
	req_init(&filler, 35, 5, 6);
	req_start(&r, &filler);
	req_init(&queued, 36, 5, 6);
	req_start(&r, &queued);
	cr_assert(wait_slots(&r, T_SLOTS, 1));
	sched_cancel(r.s, queued.id);
	sched_cancel(r.s, 987654321); /* unknown: ignored */
	cr_assert(req_wait(&queued, T_WAIT_MS));
	cr_expect_eq(queued.why, SCHED_FINISH_CANCEL);
	cr_expect_eq(queued.n, 0);
	cr_expect(wait_slots(&r, T_SLOTS, 0));
	sched_resume(r.s, false);
	for (int k = 0; k < T_SLOTS - 1; k++)
		expect_like_reference(&other[k], NULL, 0);
	expect_like_reference(&filler, NULL, 0);
	ring_down(&r);
	req_fini(&run);
	req_fini(&queued);
	req_fini(&filler);
	for (int k = 0; k < T_SLOTS - 1; k++)
		req_fini(&other[k]);
}

/* More requests than slots: the rest wait in order and take slots as they free up; no more
 * than `slots` are ever active, and every one completes with its own tokens. */
Test(scheduler, more_requests_than_slots_wait_their_turn_and_all_complete, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	enum { N = 10 };
	struct req q[N];
	watched = sched_stats(r.s);
	sched_pause(r.s, "test: hold until all are in");
	for (int k = 0; k < N; k++) {
		req_init(&q[k], 40 + k, 2 + 3 * k % 11, 3 + k % 5);
		req_start(&r, &q[k]);
	}
	cr_assert(wait_slots(&r, T_SLOTS, N - T_SLOTS), "active %d, queued %d",
		  atomic_load(&watched->active), atomic_load(&watched->queued));
	sched_resume(r.s, false);
	for (int k = 0; k < N; k++)
		expect_like_reference(&q[k], NULL, 0);
	cr_expect_leq(atomic_load(&max_active), T_SLOTS);
	cr_expect(wait_slots(&r, 0, 0));
	cr_expect_eq(atomic_load(&watched->requests), N);
	watched = NULL;
	ring_down(&r);
	for (int k = 0; k < N; k++)
		req_fini(&q[k]);
}

/* A mesh marked down fails what is live and refuses new work, both with the reason; marked up,
 * it serves again. */
Test(scheduler, an_unavailable_mesh_refuses_work_with_the_reason, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	const char *why = "worker w1 gave up after 5 restarts";
	struct req live, refused, later;
	sched_pause(r.s, "test: hold");
	req_init(&live, 50, 5, 8);
	req_start(&r, &live);
	cr_assert(wait_slots(&r, 1, 0));
	sched_set_available(r.s, false, why);
	expect_failed(&live, LM_EUNAVAILABLE, why);

	req_init(&refused, 51, 5, 8);
	lm_diag d = {{0}};
	cr_expect_eq(req_submit(&r, &refused, &d), LM_EUNAVAILABLE);
	cr_expect(strstr(d.msg, why) != NULL, "'%s'", d.msg);
	usleep(50000);
	cr_expect_eq(refused.done_calls, 0, "a refused submit must not call on_done");

	sched_set_available(r.s, true, "");
	sched_resume(r.s, false);
	req_init(&later, 52, 5, 8);
	req_start(&r, &later);
	expect_like_reference(&later, NULL, 0);
	ring_down(&r);
	req_fini(&live);
	req_fini(&refused);
	req_fini(&later);
}

/* The fault path: a worker dies with a batch on its way (lost), the scheduler pauses, the
 * worker comes back with an empty cache, and sched_resume(replay) rebuilds every live
 * sequence from the scheduler's history: the tokens are those of a run without the fault. */
Test(scheduler, a_pause_and_a_replay_after_a_lost_batch_give_the_same_tokens, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req a, b;
	req_init(&a, 60, 7, 20);
	req_init(&b, 61, 13, 16);
	/* Held once both have 3 tokens (neither can end now), then the worker is gone: what it
	 * held is lost, and so is what comes after. Once a batch of each sequence is lost (one
	 * sequence per batch: two active, two in flight), nothing moves on the ring. */
	hold_when(&r.hop[0], 3, &a, &b);
	req_start(&r, &a);
	req_start(&r, &b);
	cr_assert(req_wait_tokens(&a, 3, T_WAIT_MS));
	cr_assert(req_wait_tokens(&b, 3, T_WAIT_MS));
	cr_assert_eq(atomic_load(&r.hop[0].fault), HOP_HOLD);
	atomic_store(&r.hop[0].fault, HOP_DROP);
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 2));
	sched_pause(r.s, "test: worker 1 restarting");
	hop_restart(&r.hop[1]);
	atomic_store(&r.hop[0].fault, HOP_PASS);
	int32_t at_a = req_count(&a), at_b = req_count(&b);
	int live = (a.done_calls == 0) + (b.done_calls == 0); /* none can end while paused */
	sched_resume(r.s, true);

	expect_like_reference(&a, NULL, 0);
	expect_like_reference(&b, NULL, 0);
	cr_expect(at_a < a.n || at_b < b.n, "nothing was generated after the fault");
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_geq(atomic_load(&st->batches_forgotten), 1);
	cr_expect_eq(atomic_load(&st->replays), (uint64_t)live);
	cr_expect_geq(live, 1);
	/* The replay rebuilt the caches before anything else reached the restarted worker: it
	 * refused nothing (a refusal would also end in the right tokens, by the retry path). */
	cr_expect_eq(atomic_load(&st->ring_errors), 0);
	ring_down(&r);
	req_fini(&a);
	req_fini(&b);
}

/* sched_quiesce: nothing in flight, the live slots listed with the positions every worker's
 * cache holds for them; sched_resume(false) carries on as if nothing happened. */
Test(scheduler, quiesce_returns_the_live_slots_and_their_lengths, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req q[2];
	req_init(&q[0], 70, 5, 40);
	req_init(&q[1], 71, 12, 40);
	/* Held once both have 2 tokens, while the quiesce is asked (so neither can end first),
	 * and let go while it waits. */
	hold_when(&r.hop[0], 2, &q[0], &q[1]);
	req_start(&r, &q[0]);
	req_start(&r, &q[1]);
	cr_assert(req_wait_tokens(&q[0], 2, T_WAIT_MS));
	cr_assert(req_wait_tokens(&q[1], 2, T_WAIT_MS));
	cr_assert_eq(atomic_load(&r.hop[0].fault), HOP_HOLD);
	struct hop_later go;
	hop_later(&go, &r.hop[0], HOP_PASS, 50);
	struct sched_slot out[T_SLOTS];
	int32_t n = -1;
	lm_diag d = {{0}};
	int rc = sched_quiesce(r.s, 3000, out, T_SLOTS, &n, &d);
	pthread_join(go.thread, NULL);
	cr_assert_eq(rc, 0, "%s", lm_diag_str(&d, rc));
	cr_assert_eq(n, 2, "%d live slots, and requests at %d and %d tokens", n, req_count(&q[0]),
		     req_count(&q[1]));
	cr_expect_neq(out[0].slot, out[1].slot);
	/* A decoding sequence's workers hold its prompt and every generated token but the last. */
	int32_t want[2] = {q[0].n_prompt + req_count(&q[0]) - 1,
			   q[1].n_prompt + req_count(&q[1]) - 1};
	bool seen[2] = {false, false};
	for (int32_t i = 0; i < n; i++) {
		cr_expect(out[i].slot >= 0 && out[i].slot < T_SLOTS);
		for (int k = 0; k < 2; k++)
			seen[k] |= out[i].len == want[k];
		for (int32_t h = 0; h < T_HOPS; h++)
			cr_expect_eq(hop_kv_len(&r.hop[h], out[i].slot), out[i].len,
				     "hop %d slot %d holds %d positions, quiesce says %d", h,
				     out[i].slot, hop_kv_len(&r.hop[h], out[i].slot), out[i].len);
	}
	cr_expect(seen[0] && seen[1], "lengths %d, %d; want %d, %d", out[0].len, out[1].len,
		  want[0], want[1]);
	/* Quiet means quiet: no token arrives while quiesced. */
	usleep(100000);
	cr_expect_eq(q[0].n_prompt + req_count(&q[0]) - 1, want[0]);
	sched_resume(r.s, false);
	expect_like_reference(&q[0], NULL, 0);
	expect_like_reference(&q[1], NULL, 0);
	ring_down(&r);
	req_fini(&q[0]);
	req_fini(&q[1]);
}

/* A ring that loses a batch: quiesce times out (a batch is in flight), and after
 * batch_timeout_ms the batch fails its request with LM_ETIMEOUT; the scheduler then serves
 * the next request normally. */
Test(scheduler, a_dropped_batch_fails_after_the_batch_timeout, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.batch_timeout_ms = 800;
	ring_up(&r, &cfg);
	atomic_store(&r.hop[0].fault, HOP_DROP);
	struct req lost, next;
	req_init(&lost, 80, 5, 8);
	int64_t t0 = lm_now_ms();
	req_start(&r, &lost);
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 1));

	struct sched_slot out[T_SLOTS];
	int32_t n;
	lm_diag d = {{0}};
	cr_expect_eq(sched_quiesce(r.s, 100, out, T_SLOTS, &n, &d), LM_ETIMEOUT);
	cr_expect(strstr(d.msg, "in flight") != NULL, "'%s'", d.msg);

	expect_failed(&lost, LM_ETIMEOUT, "did not return batch");
	int64_t took = lm_now_ms() - t0;
	cr_expect_geq(took, 800, "failed after %lld ms", (long long)took);
	cr_expect_lt(took, 5000, "failed after %lld ms", (long long)took);

	atomic_store(&r.hop[0].fault, HOP_PASS);
	req_init(&next, 81, 5, 8);
	req_start(&r, &next);
	expect_like_reference(&next, NULL, 0);
	ring_down(&r);
	req_fini(&lost);
	req_fini(&next);
}

/* A worker refuses every batch of one sequence (ERROR down the ring): that sequence is tried
 * again from position 0 twice, then fails with the worker's code and message; the sequence
 * batched beside it is not touched. */
Test(scheduler, an_error_from_the_ring_fails_only_its_batch, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg(); /* 2 in flight, 2 active: one sequence per batch */
	ring_up(&r, &cfg);
	struct req x, y;
	sched_pause(r.s, "test: hold");
	req_init(&x, 90, 6, 10);
	req_init(&y, 91, 9, 10);
	req_start(&r, &x);
	req_start(&r, &y);
	cr_assert(wait_slots(&r, 2, 0));
	atomic_store(&r.hop[0].fault_seq, x.id);
	atomic_store(&r.hop[0].fault, HOP_REFUSE);
	sched_resume(r.s, false);

	expect_failed(&x, LM_EBUSY, "test: this hop refuses sequence");
	cr_expect(strstr(x.msg, "a worker refused the batch") != NULL, "'%s'", x.msg);
	cr_expect_eq(x.n, 0);
	expect_like_reference(&y, NULL, 0);
	cr_expect_eq(atomic_load(&r.hop[0].refused), 3, "refused %d times",
		     atomic_load(&r.hop[0].refused));
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_eq(atomic_load(&st->ring_errors), 3);
	cr_expect_eq(atomic_load(&st->replays), 2);
	ring_down(&r);
	req_fini(&x);
	req_fini(&y);
}

/* The last worker's answer for one sequence's batch arrives malformed: the scheduler drops it
 * (a ring error), that batch fails when its time is up, and the other sequence completes. */
Test(scheduler, a_malformed_answer_fails_only_its_batch, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.batch_timeout_ms = 500;
	ring_up(&r, &cfg);
	struct req x, y;
	sched_pause(r.s, "test: hold");
	req_init(&x, 100, 6, 10);
	req_init(&y, 101, 9, 10);
	req_start(&r, &x);
	req_start(&r, &y);
	cr_assert(wait_slots(&r, 2, 0));
	atomic_store(&r.hop[1].fault_seq, x.id);
	atomic_store(&r.hop[1].fault, HOP_GARBLE);
	sched_resume(r.s, false);

	expect_failed(&x, LM_ETIMEOUT, "did not return batch");
	expect_like_reference(&y, NULL, 0);
	cr_expect_eq(atomic_load(&r.hop[1].garbled), 1);
	cr_expect_eq(atomic_load(&sched_stats(r.s)->ring_errors), 1);
	ring_down(&r);
	req_fini(&x);
	req_fini(&y);
}

static void send_raw(nng_socket s, const void *data, size_t len)
{
	nng_msg *m;
	cr_assert_eq(nng_msg_alloc(&m, 0), 0);
	cr_assert_eq(nng_msg_append(m, data, len), 0);
	cr_assert_eq(nng_sendmsg(s, m, 0), 0);
}

/* Messages on the scheduler's PULL that answer no batch: garbage, a control message, an ERROR
 * and TOKENS about a batch nobody sent, a RELEASE coming home. The first three count as ring
 * errors, none fails anything, and requests are served as before. */
Test(scheduler, stray_messages_on_the_ring_are_dropped, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	nng_socket stray;
	cr_assert_eq(nng_push0_open(&stray), 0);
	nng_socket_set_ms(stray, NNG_OPT_SENDTIMEO, 1000);
	cr_assert_eq(nng_dial(stray, url_of(T_HOPS), NULL, 0), 0);

	struct wire_buf b = {0};
	send_raw(stray, "\xc1\xff garbage", 10);
	struct wire_hello hello = {.id = 5};
	cr_assert_eq(wire_encode_hello(&b, &hello, false), 0);
	send_raw(stray, b.data, b.len);
	struct wire_error e = {.id = 999999, .code = LM_EPROTO, .about = WIRE_FORWARD};
	snprintf(e.msg, sizeof e.msg, "about a batch nobody sent");
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_error(&b, &e), 0);
	send_raw(stray, b.data, b.len);
	struct wire_token tk = {.seq_id = 1, .token = 7, .logprob = -1.0f};
	struct wire_tokens t = {
		.batch_id = 999999, .fingerprint = r.cfg.fingerprint, .n = 1, .toks = &tk};
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_tokens(&b, &t), 0);
	send_raw(stray, b.data, b.len);
	int32_t slot = 0;
	struct wire_release rel = {
		.id = 3, .fingerprint = r.cfg.fingerprint, .n = 1, .slots = &slot};
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_release(&b, &rel), 0);
	send_raw(stray, b.data, b.len);
	wire_buf_fini(&b);

	const struct sched_stats *st = sched_stats(r.s);
	for (int i = 0; i < 400 && atomic_load(&st->ring_errors) < 3; i++)
		usleep(5000);
	cr_expect_eq(atomic_load(&st->ring_errors), 3);
	struct req q;
	req_init(&q, 110, 6, 8);
	req_start(&r, &q);
	expect_like_reference(&q, NULL, 0);
	cr_expect_eq(atomic_load(&st->ring_errors), 3);
	lm_close_bounded(stray, 2000);
	ring_down(&r);
	req_fini(&q);
}

/* sched_stop fails what is live (in flight, admitted, queued) with LM_ECANCELED and frees
 * nothing: sched_submit is refused after it, a second stop is harmless; sched_fini frees and
 * fini(NULL) is harmless. */
Test(scheduler, stop_fails_live_requests_then_fini_frees, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	atomic_store(&r.hop[0].fault, HOP_DROP); /* what is sent stays in flight */
	struct req flying, held[T_SLOTS], late;
	req_init(&flying, 120, 5, 8);
	req_start(&r, &flying);
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 1));
	for (int k = 0; k < T_SLOTS; k++) {
		req_init(&held[k], 121 + k, 5, 8);
		req_start(&r, &held[k]);
	}
	/* Two batches in flight (one with two sequences), one sequence admitted and ready, one
	 * queued. */
	cr_assert(wait_slots(&r, T_SLOTS, 1));
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 2));

	sched_stop(r.s);
	expect_failed(&flying, LM_ECANCELED, "the coordinator is stopping");
	for (int k = 0; k < T_SLOTS; k++)
		expect_failed(&held[k], LM_ECANCELED, "the coordinator is stopping");
	req_init(&late, 130, 5, 8);
	lm_diag d = {{0}};
	cr_expect_eq(req_submit(&r, &late, &d), LM_EUNAVAILABLE);
	cr_expect(strstr(d.msg, "stopping") != NULL, "'%s'", d.msg);
	sched_stop(r.s);
	cr_expect_eq(flying.done_calls, 1);
	sched_fini(NULL);
	ring_down(&r); /* stops again (harmless), then fini */
	req_fini(&flying);
	req_fini(&late);
	for (int k = 0; k < T_SLOTS; k++)
		req_fini(&held[k]);
}

/* ------------------------------------------------------------------ limits and adjustments */

/* Past max_queued waiting requests a submit is refused with LM_EBUSY and the limit named;
 * what was accepted all completes. */
Test(scheduler, a_full_queue_refuses_new_requests, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.max_queued = 2;
	ring_up(&r, &cfg);
	enum { N = T_SLOTS + 2 };
	struct req q[N + 1];
	sched_pause(r.s, "test: hold until all are in");
	for (int k = 0; k < N; k++) {
		req_init(&q[k], 60 + k, 4, 3);
		req_start(&r, &q[k]);
	}
	cr_assert(wait_slots(&r, T_SLOTS, 2));
	req_init(&q[N], 70, 4, 3);
	lm_diag d = {{0}};
	cr_expect_eq(req_submit(&r, &q[N], &d), LM_EBUSY);
	cr_expect(strstr(d.msg, "max_queued") != NULL, "%s", d.msg);
	sched_resume(r.s, false);
	for (int k = 0; k < N; k++)
		expect_like_reference(&q[k], NULL, 0);
	ring_down(&r);
	for (int k = 0; k <= N; k++)
		req_fini(&q[k]);
}

/* The reference with a request's logit adjustments: at every step the biases and penalties
 * over the last last_n tokens (prompt included) applied to the engine's logits, then greedy;
 * a request stop id ends it. */
static int32_t ref_generate_adjusted(const struct req *q, const struct lm_penalties *pen,
				     const struct lm_logit_bias *bias, int32_t n_bias,
				     int32_t stop_id, int32_t *out, enum sched_finish *why)
{
	struct lm_sampling greedy = {.temperature = 0, .top_p = 1};
	int32_t seq[T_MAX_SEQ], n_tok = q->n_prompt, n_out = 0, row = 0;
	memcpy(seq, q->prompt, (size_t)q->n_prompt * sizeof *seq);
	struct lm_tok_loc loc[T_MAX_SEQ];
	for (int32_t i = 0; i < q->n_prompt; i++)
		loc[i] = (struct lm_tok_loc){0, i};
	int32_t last = q->n_prompt - 1;
	struct lm_batch b = {
		.n = q->n_prompt, .ids = q->prompt, .loc = loc, .n_out = 1, .out_rows = &last};
	lm_diag d = {{0}};
	cr_assert_eq(lm_forward_run(&ref_eng.fw, &b, NULL, NULL, ref_logits, &d), 0, "%s", d.msg);
	for (;;) {
		int32_t win = pen->last_n < n_tok ? pen->last_n : n_tok;
		const struct lm_logit_adjust a = {.presence = pen->presence,
						  .frequency = pen->frequency,
						  .repeat = pen->repeat,
						  .hist = seq + n_tok - win,
						  .n_hist = win,
						  .bias = bias,
						  .n_bias = n_bias};
		lm_adjust_logits(&ref_smp, ref_logits, &a);
		int32_t t = lm_sample(&ref_smp, ref_logits, &greedy, (uint64_t)n_out);
		if (t == stop_id) {
			*why = SCHED_FINISH_STOP;
			return n_out;
		}
		out[n_out++] = seq[n_tok++] = t;
		if (n_out >= q->max_tokens || n_tok >= T_MAX_SEQ) {
			*why = SCHED_FINISH_LENGTH;
			return n_out;
		}
		struct lm_tok_loc l = {0, n_tok - 1};
		struct lm_batch one = {.n = 1, .ids = &t, .loc = &l, .n_out = 1, .out_rows = &row};
		cr_assert_eq(lm_forward_run(&ref_eng.fw, &one, NULL, NULL, ref_logits, &d), 0, "%s",
			     d.msg);
	}
}

/* Penalties and biases reach the last stage with every sampled step, over the right window
 * (the prompt is longer than a prefill chunk, the window longer than the prompt), and a
 * request's own stop id ends it: each request's tokens are those of the reference that applies
 * the same adjustments itself. Requests without adjustments share the batches unchanged. */
Test(scheduler, penalties_biases_and_request_stop_ids, .timeout = 30)
{
	make_model();
	ref_open();
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	static const struct lm_penalties pens[3] = {
		{.presence = 1.5f, .frequency = 0.5f, .repeat = 1.3f, .last_n = 24},
		{.presence = -0.5f, .frequency = 2.0f, .repeat = 1.0f, .last_n = 3},
		{.repeat = 1.0f},
	};
	const struct lm_logit_bias bias[2] = {{5, 30.0f}, {17, -100.0f}};
	struct req q[4];
	int32_t want[4][T_MAX_SEQ], n_want[4];
	enum sched_finish why[4];
	for (int k = 0; k < 3; k++) {
		req_init(&q[k], 80 + k, 12, 20);
		n_want[k] = ref_generate_adjusted(&q[k], &pens[k], k == 2 ? bias : NULL,
						  k == 2 ? 2 : 0, -1, want[k], &why[k]);
	}
	/* A request stop id: the fourth token of an unadjusted run. */
	req_init(&q[3], 83, 9, 20);
	const struct lm_penalties none = {.repeat = 1.0f};
	int32_t plain[T_MAX_SEQ];
	enum sched_finish ignored;
	cr_assert_geq(ref_generate_adjusted(&q[3], &none, NULL, 0, -1, plain, &ignored), 4);
	int32_t stop_id = plain[3];
	n_want[3] = ref_generate_adjusted(&q[3], &none, NULL, 0, stop_id, want[3], &why[3]);
	cr_assert_eq(why[3], SCHED_FINISH_STOP);
	for (int k = 0; k < 4; k++) {
		struct sched_req sr = {.prompt = q[k].prompt,
				       .n_prompt = q[k].n_prompt,
				       .max_tokens = q[k].max_tokens,
				       .sampling = {.temperature = 0, .top_p = 1},
				       .penalties = k < 3 ? pens[k] : none,
				       .bias = k == 2 ? bias : NULL,
				       .n_bias = k == 2 ? 2 : 0,
				       .stop_ids = k == 3 ? &stop_id : NULL,
				       .n_stop_ids = k == 3 ? 1 : 0,
				       .on_token = req_on_token,
				       .on_done = req_on_done,
				       .arg = &q[k]};
		lm_diag d = {{0}};
		cr_assert_eq(sched_submit(r.s, &sr, &q[k].id, &d), 0, "%s", d.msg);
	}
	for (int k = 0; k < 4; k++) {
		cr_assert(req_wait(&q[k], T_WAIT_MS));
		cr_expect_eq(q[k].why, why[k], "request %d", k);
		cr_expect_eq(q[k].n, n_want[k], "request %d: %d tokens, the reference %d", k,
			     q[k].n, n_want[k]);
		for (int32_t i = 0; i < q[k].n && i < n_want[k]; i++)
			cr_expect_eq(q[k].tok[i], want[k][i], "request %d token %d", k, i);
	}
	/* The adjustments did change something: the first request differs from a plain run. */
	int32_t base[T_MAX_SEQ];
	int32_t nb = ref_generate_adjusted(&q[0], &none, NULL, 0, -1, base, &ignored);
	cr_expect(nb != n_want[0] || memcmp(base, want[0], (size_t)nb * sizeof *base) != 0);
	/* Out of range: refused at submit. */
	struct sched_req bad = {.prompt = q[0].prompt,
				.n_prompt = 3,
				.max_tokens = 2,
				.sampling = {.temperature = 0, .top_p = 1},
				.penalties = {.repeat = 1.0f, .last_n = LM_MAX_PENALTY_WINDOW + 1},
				.on_token = req_on_token,
				.on_done = req_on_done,
				.arg = &q[0]};
	lm_diag d = {{0}};
	uint64_t id;
	cr_expect_eq(sched_submit(r.s, &bad, &id, &d), LM_EINVAL);
	ring_down(&r);
	ref_close();
	for (int k = 0; k < 4; k++)
		req_fini(&q[k]);
}

/* [coordinator] request_timeout: while dispatch is held (a worker restarting), a request that
 * waits longer than the timeout fails with LM_EUNAVAILABLE, the hold's reason and the knob's
 * name, whether it held a slot or was still queued; once dispatch resumes, the next one is
 * served. */
Test(scheduler, held_requests_fail_after_request_timeout_with_the_reason, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.request_timeout_ms = 300;
	ring_up(&r, &cfg);
	const char *why = "worker w1 is restarting (killed by signal 9)";
	struct req held, later;
	sched_pause(r.s, why);
	req_init(&held, 70, 5, 8);
	req_start(&r, &held);
	expect_failed(&held, LM_EUNAVAILABLE, why);
	cr_expect(strstr(held.msg, "request_timeout") != NULL, "'%s'", held.msg);
	sched_resume(r.s, false);
	req_init(&later, 71, 5, 8);
	req_start(&r, &later);
	expect_like_reference(&later, NULL, 0);
	ring_down(&r);
	req_fini(&held);
	req_fini(&later);
}

/* sched_blame: the sequences a replay rebuilds count for the worker named as its cause. */
Test(scheduler, replays_are_counted_for_the_blamed_worker, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.n_workers = T_HOPS;
	ring_up(&r, &cfg);
	struct req a;
	req_init(&a, 72, 7, 20);
	hold_when(&r.hop[0], 3, &a, NULL);
	req_start(&r, &a);
	cr_assert(req_wait_tokens(&a, 3, T_WAIT_MS));
	sched_blame(r.s, 1);
	sched_pause(r.s, "test: worker 1 restarting");
	atomic_store(&r.hop[0].fault, HOP_PASS);
	sched_resume(r.s, true);
	expect_like_reference(&a, NULL, 0);
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_eq(atomic_load(&st->worker_replays[1]), atomic_load(&st->replays));
	cr_expect_eq(atomic_load(&st->worker_replays[0]), 0);
	cr_expect_geq(atomic_load(&st->replays), 1);
	ring_down(&r);
	req_fini(&a);
}
