/* test_sched_samples.c — coordinator/scheduler: parallel samples of one prompt
 * (sched_req.share_prompt_of) against a real ring (tests/unit/sched_ring.h). The prompt is
 * computed once and its rows copied into the samples' slots on every stage (COPY, wire.h); each
 * sample must still give exactly the tokens a request of its own gives. */
#include "tests/unit/sched_ring.h"

#define N_SAMPLES 4

/* Submits N_SAMPLES requests of prompt k: the first computes it, the others name it. */
static void start_samples(struct ring *r, struct req q[N_SAMPLES], int32_t k, int32_t n_prompt,
			  int32_t max_tokens, float temperature)
{
	for (int i = 0; i < N_SAMPLES; i++) {
		req_init(&q[i], k, n_prompt, max_tokens);
		q[i].temperature = temperature;
		q[i].seed = 1000 + (uint64_t)i;
		q[i].share_of = i > 0 ? q[0].id : 0;
		req_start(r, &q[i]);
	}
}

static int hop_copies(struct hop *h)
{
	pthread_mutex_lock(&h->mu);
	int n = (int)atomic_load(&h->st.stats.copies);
	pthread_mutex_unlock(&h->mu);
	return n;
}

/* Four greedy samples of a 20-token prompt (prefilled in chunks of 8): each equals the engine's
 * run; the prompt went through the ring once, the samples computed only its last token each,
 * and every stage applied the COPY. */
Test(sched_samples, greedy_samples_equal_the_engine_and_compute_the_prompt_once, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req q[N_SAMPLES];
	start_samples(&r, q, 7, 20, 10, 0);
	for (int i = 0; i < N_SAMPLES; i++)
		expect_like_reference(&q[i], NULL, 0);
	const struct sched_stats *st = sched_stats(r.s);
	cr_expect_eq(atomic_load(&st->prompt_shared), (uint64_t)(N_SAMPLES - 1) * 19);
	cr_expect_eq(atomic_load(&st->prompt_computed), (uint64_t)20 + (N_SAMPLES - 1));
	cr_expect_eq(atomic_load(&st->prompt_tokens), (uint64_t)N_SAMPLES * 20);
	for (int32_t h = 0; h < T_HOPS; h++)
		cr_expect_eq(hop_copies(&r.hop[h]), 1, "hop %d", h);
	cr_expect_eq(atomic_load(&st->ring_errors), 0);
	ring_down(&r);
	for (int i = 0; i < N_SAMPLES; i++)
		req_fini(&q[i]);
}

/* Sampled at temperature 1 with their own seeds, the samples draw exactly what requests of
 * their own with those seeds draw: the copied rows are the rows the prompt makes. */
Test(sched_samples, seeded_samples_equal_requests_of_their_own, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req q[N_SAMPLES], solo;
	start_samples(&r, q, 11, 17, 8, 1.0f);
	for (int i = 0; i < N_SAMPLES; i++) {
		cr_assert(req_wait(&q[i], T_WAIT_MS));
		cr_assert_eq(q[i].code, 0, "%s", q[i].msg);
	}
	cr_expect_eq(atomic_load(&sched_stats(r.s)->prompt_shared), (uint64_t)(N_SAMPLES - 1) * 16);
	for (int i = 0; i < N_SAMPLES; i++) {
		req_init(&solo, 11, 17, 8);
		solo.temperature = 1.0f;
		solo.seed = q[i].seed;
		req_start(&r, &solo);
		cr_assert(req_wait(&solo, T_WAIT_MS));
		cr_expect_eq(solo.n, q[i].n, "sample %d", i);
		for (int32_t j = 0; j < solo.n && j < q[i].n; j++)
			cr_expect_eq(solo.tok[j], q[i].tok[j], "sample %d, token %d", i, j);
		req_fini(&solo);
	}
	ring_down(&r);
	for (int i = 0; i < N_SAMPLES; i++)
		req_fini(&q[i]);
}

/* A sample whose first request is gone before its rows were ready (cancelled at once), or whose
 * prompt differs, computes its own prompt, and still gets the engine's tokens. */
Test(sched_samples, a_sample_without_its_rows_computes_its_own, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req lead, a, other;
	req_init(&lead, 3, 24, 10);
	req_start(&r, &lead);
	req_init(&a, 3, 24, 6);
	a.share_of = lead.id;
	req_start(&r, &a);
	sched_cancel(r.s, lead.id);
	req_init(&other, 4, 24, 6);
	other.share_of = a.id;
	req_start(&r, &other);
	cr_assert(req_wait(&lead, T_WAIT_MS));
	expect_like_reference(&a, NULL, 0);
	expect_like_reference(&other, NULL, 0);
	ring_down(&r);
	req_fini(&lead);
	req_fini(&a);
	req_fini(&other);
}

/* More samples than slots: the ones admitted later copy the rows from the first while it still
 * decodes, or compute their own once it has ended; all equal the engine. */
Test(sched_samples, samples_past_the_free_slots_wait_and_still_equal_the_engine, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req q[T_SLOTS + 2];
	for (int i = 0; i < T_SLOTS + 2; i++) {
		req_init(&q[i], 21, 12, 6 + i);
		q[i].share_of = i > 0 ? q[0].id : 0;
		req_start(&r, &q[i]);
	}
	for (int i = 0; i < T_SLOTS + 2; i++)
		expect_like_reference(&q[i], NULL, 0);
	cr_expect_geq(atomic_load(&sched_stats(r.s)->prompt_shared), (uint64_t)(T_SLOTS - 1) * 11);
	ring_down(&r);
	for (int i = 0; i < T_SLOTS + 2; i++)
		req_fini(&q[i]);
}

/* A worker lost while the samples decode (their rows copied): the replay rebuilds every
 * sample's rows from its own history, and each ends with the engine's tokens. */
Test(sched_samples, a_replay_after_a_fault_rebuilds_the_copied_rows, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	ring_up(&r, &cfg);
	struct req q[N_SAMPLES];
	hold_when(&r.hop[0], 3, &q[0], &q[N_SAMPLES - 1]);
	start_samples(&r, q, 9, 15, 16, 0);
	cr_assert(req_wait_tokens(&q[0], 3, T_WAIT_MS));
	cr_assert(req_wait_tokens(&q[N_SAMPLES - 1], 3, T_WAIT_MS));
	cr_assert_eq(atomic_load(&r.hop[0].fault), HOP_HOLD);
	atomic_store(&r.hop[0].fault, HOP_DROP);
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 1));
	sched_pause(r.s, "test: worker 1 restarting");
	hop_restart(&r.hop[1]);
	atomic_store(&r.hop[0].fault, HOP_PASS);
	sched_resume(r.s, true);
	for (int i = 0; i < N_SAMPLES; i++)
		expect_like_reference(&q[i], NULL, 0);
	cr_expect_geq(atomic_load(&sched_stats(r.s)->replays), 1);
	ring_down(&r);
	for (int i = 0; i < N_SAMPLES; i++)
		req_fini(&q[i]);
}

/* What the constrained samples are held to: letters, then one mark, then the end. */
#define T_GRAMMAR "root ::= [a-e]{8,20} (\".\" | \"!\")"

/* Request q's tokens are a sentence of T_GRAMMAR over the last stage's vocabulary (a prefix
 * of one, when cut at max_tokens). */
static void expect_in_grammar(struct hop *last, const struct req *q, int i)
{
	struct gbnf *g = NULL;
	struct gbnf_state st;
	lm_diag d = {{0}};
	cr_assert_eq(gbnf_compile(T_GRAMMAR, strlen(T_GRAMMAR), &g, &d), 0, "%s", d.msg);
	cr_assert_eq(gbnf_state_init(g, &st, &d), 0, "%s", d.msg);
	pthread_mutex_lock(&last->mu);
	const struct gbnf_vocab *v = last->st.cons.vocab;
	cr_assert_not_null(v, "the last stage loaded no grammar vocabulary");
	for (int32_t j = 0; j < q->n; j++)
		cr_expect_eq(gbnf_accept_token(g, v, &st, q->tok[j], &d), 0,
			     "sample %d, token %d (id %d): %s", i, j, q->tok[j], d.msg);
	pthread_mutex_unlock(&last->mu);
	if (q->why == SCHED_FINISH_STOP)
		cr_expect(gbnf_accepting(&st), "sample %d stopped before the grammar's end", i);
	gbnf_state_fini(&st);
	gbnf_free(g);
}

/* Constrained samples at temperature 1, the last worker restarted while they decode: each
 * sample's grammar goes with its first sampled step after its copied prompt and again with
 * its tokens after the replay; each holds to the grammar and draws exactly what a request of
 * its own with its seed and grammar draws. */
Test(sched_samples, constrained_samples_hold_to_the_grammar_across_a_replay, .timeout = 30)
{
	struct ring r;
	struct sched_cfg cfg = default_cfg();
	cfg.stop_ids[cfg.n_stop_ids++] = 2; /* </s>, which the grammar admits at its end */
	ring_up(&r, &cfg);
	struct req q[N_SAMPLES], solo;
	for (int i = 0; i < N_SAMPLES; i++) {
		req_init(&q[i], 13, 14, 16);
		q[i].temperature = 1.0f;
		q[i].seed = 500 + (uint64_t)i;
		q[i].grammar = T_GRAMMAR;
		q[i].no_speculate = true;
	}
	hold_when(&r.hop[0], 2, &q[0], &q[N_SAMPLES - 1]);
	for (int i = 0; i < N_SAMPLES; i++) {
		q[i].share_of = i > 0 ? q[0].id : 0;
		req_start(&r, &q[i]);
	}
	cr_assert(req_wait_tokens(&q[0], 2, T_WAIT_MS));
	cr_assert(req_wait_tokens(&q[N_SAMPLES - 1], 2, T_WAIT_MS));
	cr_assert_eq(atomic_load(&r.hop[0].fault), HOP_HOLD);
	atomic_store(&r.hop[0].fault, HOP_DROP);
	cr_assert(wait_atomic_geq(&r.hop[0].dropped, 1));
	sched_pause(r.s, "test: the last worker restarting");
	hop_restart(&r.hop[T_HOPS - 1]);
	atomic_store(&r.hop[0].fault, HOP_PASS);
	sched_resume(r.s, true);
	for (int i = 0; i < N_SAMPLES; i++) {
		cr_assert(req_wait(&q[i], T_WAIT_MS));
		cr_assert_eq(q[i].code, 0, "sample %d: %s", i, q[i].msg);
		expect_in_grammar(&r.hop[T_HOPS - 1], &q[i], i);
	}
	cr_expect_geq(atomic_load(&sched_stats(r.s)->replays), 1);
	cr_expect_eq(atomic_load(&sched_stats(r.s)->prompt_shared), (uint64_t)(N_SAMPLES - 1) * 13);
	for (int i = 0; i < N_SAMPLES; i++) {
		req_init(&solo, 13, 14, 16);
		solo.temperature = 1.0f;
		solo.seed = q[i].seed;
		solo.grammar = T_GRAMMAR;
		solo.no_speculate = true;
		req_start(&r, &solo);
		cr_assert(req_wait(&solo, T_WAIT_MS));
		cr_expect_eq(solo.why, q[i].why, "sample %d", i);
		cr_expect_eq(solo.n, q[i].n, "sample %d", i);
		for (int32_t j = 0; j < solo.n && j < q[i].n; j++)
			cr_expect_eq(solo.tok[j], q[i].tok[j], "sample %d, token %d", i, j);
		req_fini(&solo);
	}
	ring_down(&r);
	for (int i = 0; i < N_SAMPLES; i++)
		req_fini(&q[i]);
}
