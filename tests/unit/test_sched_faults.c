/* test_sched_faults.c — coordinator/scheduler: faults against a real ring
 * (tests/unit/sched_ring.h). A worker lost, a batch dropped, refused or garbled, a stray
 * message, a mesh held too long: each ends only what it must, and what goes on ends with the
 * engine's tokens. */
#include "tests/unit/sched_ring.h"

/* The fault path: a worker dies with a batch on its way (lost), the scheduler pauses, the
 * worker comes back with an empty cache, and sched_resume(replay) rebuilds every live
 * sequence from the scheduler's history: the tokens are those of a run without the fault. */
Test(sched_faults, a_pause_and_a_replay_after_a_lost_batch_give_the_same_tokens, .timeout = 30)
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
Test(sched_faults, quiesce_returns_the_live_slots_and_their_lengths, .timeout = 30)
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
Test(sched_faults, a_dropped_batch_fails_after_the_batch_timeout, .timeout = 30)
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
Test(sched_faults, an_error_from_the_ring_fails_only_its_batch, .timeout = 30)
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

/* Refusals that progress separates do not add up: a sequence refused once, then again after
 * tokens came, then a third time (as a rolling redeploy of three workers may refuse it at each
 * switch), is computed again each time and ends with the reference's tokens; the two retries
 * bound refusals in a row only. */
Test(sched_faults, refusals_apart_are_each_retried, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req x;
	req_init(&x, 92, 6, 24);
	sched_pause(r.s, "test: hold");
	req_start(&r, &x);
	cr_assert(wait_slots(&r, 1, 0));
	r.hop[1].refuse_every = 4; /* the 4th, 8th and 12th FORWARD: tokens come between */
	r.hop[1].refuse_max = 3;
	atomic_store(&r.hop[1].fault_seq, x.id);
	atomic_store(&r.hop[1].fault, HOP_REFUSE_EVERY);
	sched_resume(r.s, false);
	cr_assert(req_wait(&x, 20000));
	expect_like_reference(&x, NULL, 0);
	cr_expect_eq(atomic_load(&r.hop[1].refused), 3);
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_eq(atomic_load(&st->replays), 3);
	ring_down(&r);
	req_fini(&x);
}

/* The last worker's answer for one sequence's batch arrives malformed: the scheduler drops it
 * (a ring error), that batch fails when its time is up, and the other sequence completes. */
Test(sched_faults, a_malformed_answer_fails_only_its_batch, .timeout = 30)
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
Test(sched_faults, stray_messages_on_the_ring_are_dropped, .timeout = 30)
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

/* [coordinator] request_timeout: while dispatch is held (a worker restarting), a request that
 * waits longer than the timeout fails with LM_EUNAVAILABLE, the hold's reason and the knob's
 * name, whether it held a slot or was still queued; once dispatch resumes, the next one is
 * served. */
Test(sched_faults, held_requests_fail_after_request_timeout_with_the_reason, .timeout = 30)
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
Test(sched_faults, replays_are_counted_for_the_blamed_worker, .timeout = 30)
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

/* The prefix cache on recurrent layers, told that each stage keeps 8 states per slot where it
 * keeps 4 (max_draft 4): a reuse the index offers at a length whose state no stage kept is
 * refused (LM_ERANGE), and the sequence is computed from position 0 with the engine's tokens,
 * reporting nothing reused. A reuse at a length whose state the stages did keep restores it,
 * with the engine's tokens again. */
Test(sched_faults, a_recurrent_reuse_a_stage_refuses_is_computed_from_0, .timeout = 30)
{
	model_arch = "qwen35";
	struct ring r;
	struct sched_cfg cfg = default_cfg(); /* prefill chunks of 8 */
	cfg.prefix_cache = true;
	cfg.ring_rollback = -1;
	cfg.recurrent = true;
	cfg.rec_keep = 8; /* the stages keep T_MAX_DRAFT = 4 */
	ring_up(&r, &cfg);
	const struct sched_stats *st = sched_stats(r.s);
	/* a: 16 prompt tokens in batches [0, 8) and [8, 16) and one token sampled: the stages
	 * keep the states after 11 .. 14; the index believes after 8 .. 14. */
	struct req a, b, c;
	req_init(&a, 70, 16, 1);
	req_start(&r, &a);
	expect_like_reference(&a, NULL, 0);
	/* b leaves a's tokens after 10: the index offers 10, which needs the state after 9. */
	req_init(&b, 71, 14, 6);
	memcpy(b.prompt, a.prompt, 10 * sizeof *b.prompt);
	req_start(&r, &b);
	expect_like_reference(&b, NULL, 0);
	cr_expect_eq(b.cached, 0, "a refused reuse reports %d cached", b.cached);
	cr_expect_eq(atomic_load(&st->ring_errors), 1);
	cr_expect_eq(atomic_load(&st->replays), 1);
	/* b was computed again from 0, [0, 8) then [8, 14), and decoded 5 tokens one at a time:
	 * the stages keep no state but the live one, after 18 positions. c extends all of it. */
	struct req c2;
	req_init(&c, 72, 22, 4);
	memcpy(c.prompt, b.prompt, 14 * sizeof *c.prompt);
	memcpy(c.prompt + 14, b.tok, 5 * sizeof *c.prompt);
	req_start(&r, &c);
	expect_like_reference(&c, NULL, 0);
	cr_expect_eq(c.cached, 19, "c reused %d", c.cached);
	cr_expect_eq(atomic_load(&st->ring_errors), 1, "no other refusal");
	/* c2 leaves c's tokens after 12: nowhere a stage can return to, nothing is offered. */
	req_init(&c2, 73, 15, 4);
	memcpy(c2.prompt, c.prompt, 12 * sizeof *c2.prompt);
	req_start(&r, &c2);
	expect_like_reference(&c2, NULL, 0);
	cr_expect_eq(c2.cached, 0);
	cr_expect_eq(atomic_load(&st->ring_errors), 1, "no other refusal");
	/* d as a, in a slot of its own; e leaves it after 13: the state after 12 is kept, and
	 * every stage rolls its delta-net state back to it. */
	struct req d, e;
	req_init(&d, 74, 16, 1);
	req_start(&r, &d);
	expect_like_reference(&d, NULL, 0);
	req_init(&e, 75, 15, 4);
	memcpy(e.prompt, d.prompt, 13 * sizeof *e.prompt);
	req_start(&r, &e);
	expect_like_reference(&e, NULL, 0);
	cr_expect_eq(e.cached, 13, "e reused %d", e.cached);
	cr_expect_eq(atomic_load(&st->ring_errors), 1, "no other refusal");
	cr_expect_eq(atomic_load(&st->replays), 1);
	ring_down(&r);
	req_fini(&a);
	req_fini(&b);
	req_fini(&c);
	req_fini(&c2);
	req_fini(&d);
	req_fini(&e);
}
