/* test_scheduler.c — coordinator/scheduler: the real scheduler against a real ring
 * (tests/unit/sched_ring.h). A request's tokens must be exactly what `layermesh run` would
 * print, whatever else shares its batches, and limits, cancels and adjustments hold. Faults:
 * test_sched_faults.c; speculation and the prefix cache: test_sched_spec.c; parallel samples:
 * test_sched_samples.c. */
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
