/* test_stage.c — worker/stage: one worker's slice on the data ring, driven message by message.
 *
 * The stages here are real: a synthetic model written by coordinator/synth, loaded and run by
 * the engine on the CPU backend, fed FORWARD messages encoded as the coordinator encodes them.
 */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/format/synth.h"
#include "engine/scratch.h"
#include "worker/stage.h"

/* A GQA model whose matrices are q8_0 (so the backend converts activations) and whose FFN is
 * the widest input. */
static char model_path[64];

static void make_model(void)
{
	snprintf(model_path, sizeof model_path, "/tmp/lm_test_stage_XXXXXX");
	int fd = mkstemp(model_path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = model_path;
	o.dim = 128;
	o.layers = 5;
	o.heads = 8;
	o.kv_heads = 2;
	o.ffn = 320;
	o.vocab = 600;
	o.ctx = 256;
	o.type = LM_Q8_0;
	struct synth_stats st;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, &st, &d), 0, "%s", d.msg);
}

static struct wire_assign assignment(int32_t begin, int32_t end, bool head)
{
	struct wire_assign a = {.id = 2,
				.begin = begin,
				.end = end,
				.embedding = begin == 0,
				.head = head,
				.max_seq = 128,
				.slots = 5,
				.k_type = LM_F32,
				.v_type = LM_F32,
				.wire_dtype = WIRE_DT_F32,
				.max_batch = 64};
	snprintf(a.model, sizeof a.model, "%s", model_path);
	snprintf(a.next, sizeof a.next, "inproc://unused");
	return a;
}

/* A FORWARD of `per` tokens for each of `n_seqs` sequences (slots 0..), from position `pos`,
 * as ids (the first stage) or hidden rows. */
static nng_msg *forward_msg(const struct stage *st, int32_t n_seqs, int32_t per, int32_t pos)
{
	struct wire_seq seqs[8];
	int32_t n = n_seqs * per;
	for (int32_t s = 0; s < n_seqs; s++)
		seqs[s] = (struct wire_seq){.seq_id = (uint64_t)s + 1,
					    .slot = s,
					    .pos = pos,
					    .n_tokens = per,
					    .sample = true,
					    .step = (uint64_t)pos,
					    .sampling = {.temperature = 0, .top_p = 1}};
	bool ids = st->assign.embedding;
	size_t bytes = (size_t)n * (ids ? sizeof(int32_t) : (size_t)st->dim * sizeof(float));
	void *payload = malloc(bytes);
	cr_assert_not_null(payload);
	for (size_t i = 0; i < bytes / 4; i++) {
		if (ids)
			((int32_t *)payload)[i] = (int32_t)(i * 7 % (size_t)st->n_vocab);
		else
			((float *)payload)[i] = (float)((int)(i % 13) - 6) / 8.0f;
	}
	struct wire_forward f = {.batch_id = 1,
				 .fingerprint = st->lim.fingerprint,
				 .n_seqs = n_seqs,
				 .seqs = seqs,
				 .n_tokens = n,
				 .dtype = ids ? WIRE_DT_I32 : WIRE_DT_F32,
				 .dim = ids ? 1 : st->dim,
				 .payload = payload,
				 .payload_len = bytes};
	struct wire_buf b = {0};
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	nng_msg *m;
	cr_assert_eq(nng_msg_alloc(&m, 0), 0);
	cr_assert_eq(nng_msg_append(m, b.data, b.len), 0);
	wire_buf_fini(&b);
	free(payload);
	return m;
}

static void run(struct stage *st, nng_msg *in)
{
	nng_msg *out = NULL;
	lm_diag d = {{0}};
	int rc = stage_handle(st, in, &out, &d);
	cr_assert_eq(rc, 0, "%s", d.msg);
	nng_msg_free(out);
}

/* What a stage allocates for its batches never exceeds what the planner counts for it
 * (engine/scratch.h), at the first, a middle and the last stage, with its trace armed, after
 * the widest batch it takes and a decode step; and the estimate is not wildly above it. */
Test(stage, scratch_within_the_planned_estimate, .timeout = 60)
{
	make_model();
	const int32_t cuts[][2] = {{0, 2}, {2, 4}, {4, 5}};
	for (int k = 0; k < 3; k++) {
		struct wire_assign a = assignment(cuts[k][0], cuts[k][1], k == 2);
		struct lm_backend_opts bo = {.n_threads = 2};
		static struct stage st;
		lm_diag d = {{0}};
		cr_assert_eq(stage_init(&st, &a, "cpu", &bo, &d), 0, "%s", d.msg);
		int32_t rows;
		void *trace = NULL;
		size_t bytes;
		cr_assert_eq(stage_trace(&st, 0, &rows, &trace, &bytes, &d), 0, "%s", d.msg);
		free(trace);
		run(&st, forward_msg(&st, 4, 16, 0)); /* a full batch of 64 prompt tokens */
		run(&st, forward_msg(&st, 4, 1, 16)); /* and one decode step */

		struct lm_scratch est;
		struct lm_scratch_cfg sc = {.begin = a.begin,
					    .end = a.end,
					    .trace_layers = a.end - a.begin,
					    .embedding = a.embedding,
					    .head = a.head,
					    .max_batch = a.max_batch,
					    .slots = a.slots,
					    .max_seq = a.max_seq,
					    .wire_dtype = LM_F32,
					    .bo = bo};
		lm_scratch_estimate(&st.eng.model.hp, &sc, &est);
		uint64_t held = stage_scratch_held(&st);
		/* Neither the messages nor the process itself are in `held`. */
		uint64_t planned = est.total - est.messages - est.process;
		cr_expect_eq(st.eng.fw.scratch_bytes, est.forward, "stage %d", k);
		cr_expect_leq(held, planned, "stage %d holds %llu bytes, the plan counts %llu", k,
			      (unsigned long long)held, (unsigned long long)planned);
		cr_expect_leq(planned, 2 * held + (256u << 10),
			      "stage %d: the plan counts %llu for %llu held", k,
			      (unsigned long long)planned, (unsigned long long)held);
		stage_fini(&st);
	}
	unlink(model_path);
}

/* ------------------------------------------------------------------ messages in and out */

static struct stage *stage_open(int32_t begin, int32_t end, bool head)
{
	static struct stage stages[4];
	static int used;
	cr_assert_lt(used, 4);
	struct stage *st = &stages[used++];
	struct wire_assign a = assignment(begin, end, head);
	struct lm_backend_opts bo = {.n_threads = 1};
	lm_diag d = {{0}};
	cr_assert_eq(stage_init(st, &a, "cpu", &bo, &d), 0, "%s", d.msg);
	return st;
}

static nng_msg *msg_of(const struct wire_buf *b, const void *payload, size_t len)
{
	nng_msg *m;
	cr_assert_eq(nng_msg_alloc(&m, 0), 0);
	cr_assert_eq(nng_msg_append(m, b->data, b->len), 0);
	if (len > 0)
		cr_assert_eq(nng_msg_append(m, payload, len), 0);
	return m;
}

/* One sequence's part of a FORWARD of token ids. */
struct part {
	int32_t slot, pos, n;
	const int32_t *ids;
};

/* Logit adjustments for the next ids_msg's sequences (NULL: none), by part. */
static const struct lm_logit_adjust *next_adjust[8];
/* The ring stamp the next ids_msg carries (0: none). */
static uint64_t next_stamp;

/* A FORWARD of token ids for the first stage; every part samples after its last token. */
static nng_msg *ids_msg(const struct stage *st, const struct part *p, int32_t n_parts)
{
	struct wire_seq seqs[8];
	int32_t ids[64], n = 0;
	for (int32_t s = 0; s < n_parts; s++) {
		seqs[s] = (struct wire_seq){.seq_id = 100 + (uint64_t)p[s].slot,
					    .slot = p[s].slot,
					    .pos = p[s].pos,
					    .n_tokens = p[s].n,
					    .sample = true,
					    .step = (uint64_t)p[s].pos,
					    .n_logprobs = 2,
					    .sampling = {.temperature = 0, .top_p = 1},
					    .adjust = next_adjust[s]};
		memcpy(ids + n, p[s].ids, (size_t)p[s].n * sizeof *ids);
		n += p[s].n;
	}
	struct wire_forward f = {.batch_id = 9,
				 .fingerprint = st->lim.fingerprint,
				 .n_seqs = n_parts,
				 .seqs = seqs,
				 .n_tokens = n,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = (size_t)n * sizeof *ids,
				 .sent_ns = next_stamp};
	struct wire_buf b = {0};
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	nng_msg *m = msg_of(&b, NULL, 0);
	wire_buf_fini(&b);
	return m;
}

/* Handles `in`, which must succeed; returns the message to pass on. */
static nng_msg *handled(struct stage *st, nng_msg *in)
{
	nng_msg *out = NULL;
	lm_diag d = {{0}};
	int rc = stage_handle(st, in, &out, &d);
	cr_assert_eq(rc, 0, "%s", lm_diag_str(&d, rc));
	cr_assert_not_null(out);
	return out;
}

/* The sampled tokens of a TOKENS message, in order (the message is freed). */
static int32_t tokens_of(const struct stage *st, nng_msg *m, struct wire_token *toks)
{
	struct wire_scratch sc;
	struct wire_tokens t;
	lm_diag d = {{0}};
	cr_assert_eq(wire_scratch_init(&sc, st->assign.slots), 0);
	cr_assert_eq(wire_decode_tokens(nng_msg_body(m), nng_msg_len(m), &st->lim, &sc, &t, &d), 0,
		     "%s", d.msg);
	memcpy(toks, t.toks, (size_t)t.n * sizeof *toks);
	int32_t n = t.n;
	wire_scratch_fini(&sc);
	nng_msg_free(m);
	return n;
}

/* The f32 hidden rows of a FORWARD message into rows [n][dim] (the message is freed). */
static int32_t hidden_of(const struct stage *st, nng_msg *m, float *rows)
{
	struct wire_scratch sc;
	struct wire_forward f;
	struct wire_limits lim = st->lim;
	lm_diag d = {{0}};
	cr_assert_eq(wire_scratch_init(&sc, st->assign.slots), 0);
	cr_assert_eq(wire_decode_forward(nng_msg_body(m), nng_msg_len(m), &lim, &sc, &f, &d), 0,
		     "%s", d.msg);
	cr_assert_eq(f.dtype, WIRE_DT_F32);
	cr_assert_eq(f.dim, st->dim);
	memcpy(rows, f.payload, f.payload_len);
	int32_t n = f.n_tokens;
	wire_scratch_fini(&sc);
	nng_msg_free(m);
	return n;
}

/* One sequence's next token: a FORWARD of ids[0, n) at pos in `slot`. */
static struct wire_token step(struct stage *st, int32_t slot, int32_t pos, const int32_t *ids,
			      int32_t n)
{
	struct part p = {slot, pos, n, ids};
	struct wire_token t[1];
	cr_assert_eq(tokens_of(st, handled(st, ids_msg(st, &p, 1)), t), 1);
	return t[0];
}

static void expect_same_token(struct wire_token a, struct wire_token b, const char *what)
{
	cr_expect_eq(a.token, b.token, "%s: token %d, then %d", what, a.token, b.token);
	cr_expect_eq(memcmp(&a.logprob, &b.logprob, sizeof a.logprob), 0,
		     "%s: logprob %.9g, then %.9g", what, (double)a.logprob, (double)b.logprob);
}

/* Expects stage_handle to refuse `in` with `code` and a message containing `part`, leaving
 * `in` to the caller and nothing to send. */
static void expect_refused(struct stage *st, nng_msg *in, int code, const char *part)
{
	nng_msg *out = (nng_msg *)&out; /* not NULL: stage_handle must clear it */
	lm_diag d = {{0}};
	uint64_t errors = atomic_load(&st->stats.errors);
	int rc = stage_handle(st, in, &out, &d);
	cr_expect_eq(rc, code, "rc %d: %s", rc, d.msg);
	cr_expect_null(out);
	cr_expect(strstr(d.msg, part) != NULL, "'%s' lacks '%s'", d.msg, part);
	cr_expect_eq(atomic_load(&st->stats.errors), errors + 1);
	nng_msg_free(in); /* still ours */
}

static const int32_t prompt[16] = {5, 17, 230, 99, 4, 301, 77, 12, 450, 3, 88, 145, 9, 512, 61, 7};

/* Whatever arrives that is not a well-formed data-ring message for this stage is refused with
 * an error that says what was wrong; the stage computes as before afterwards. */
Test(stage, malformed_and_wrong_type_messages_are_refused, .timeout = 60)
{
	make_model();
	struct stage *st = stage_open(0, 5, true);
	struct wire_token before = step(st, 0, 0, prompt, 6);

	nng_msg *m;
	cr_assert_eq(nng_msg_alloc(&m, 0), 0);
	cr_assert_eq(nng_msg_append(m, "\x81\xa1v", 3), 0); /* a map cut short */
	expect_refused(st, m, LM_EPROTO, "ends inside a value");

	struct wire_buf b = {0};
	struct wire_hello hello = {.id = 3};
	cr_assert_eq(wire_encode_hello(&b, &hello, false), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_EPROTO, "HELLO is not a data-ring message");

	struct wire_token tk = {.seq_id = 1, .token = 2, .logprob = -1};
	struct wire_tokens t = {
		.batch_id = 4, .fingerprint = st->lim.fingerprint, .n = 1, .toks = &tk};
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_tokens(&b, &t), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_EPROTO, "TOKENS is not a data-ring message");

	/* FORWARDs: of another model, to a slot the stage does not have, of hidden rows into the
	 * first stage, starting past what the slot holds, with a payload cut short. */
	struct wire_seq q = {.seq_id = 1, .slot = 0, .pos = 0, .n_tokens = 2, .sample = true};
	q.sampling = (struct lm_sampling){.temperature = 0, .top_p = 1};
	int32_t ids[2] = {5, 6};
	float rows[2 * 128] = {0};
	struct wire_forward f = {.batch_id = 5,
				 .fingerprint = st->lim.fingerprint ^ 1,
				 .n_seqs = 1,
				 .seqs = &q,
				 .n_tokens = 2,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_EFINGERPRINT, "fingerprint mismatch");
	f.fingerprint = st->lim.fingerprint;
	q.slot = st->assign.slots;
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_EPROTO, "slot");
	q.slot = 1;
	f.dtype = WIRE_DT_F32;
	f.dim = st->dim;
	f.payload = rows;
	f.payload_len = sizeof rows;
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_EPROTO, "the first stage takes token ids");
	f.dtype = WIRE_DT_I32;
	f.dim = 1;
	f.payload = ids;
	f.payload_len = sizeof ids;
	q.pos = 3; /* slot 1 holds nothing */
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_ERANGE, "does not follow");
	cr_expect_eq(st->eng.kv.len[1], 0);
	q.pos = 0;
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	nng_msg *cut = msg_of(&b, NULL, 0);
	cr_assert_eq(nng_msg_chop(cut, 1), 0);
	expect_refused(st, cut, LM_EPROTO, "payload bytes announced");
	wire_buf_fini(&b);

	struct wire_token after = step(st, 0, 0, prompt, 6);
	expect_same_token(before, after, "slot 0 before and after the refusals");
	cr_expect_eq(atomic_load(&st->stats.batches), 2);
	stage_fini(st);
	unlink(model_path);
}

/* An ERROR from an earlier stage travels on untouched: the same message, the same bytes. */
Test(stage, an_error_passes_through, .timeout = 60)
{
	make_model();
	struct stage *st = stage_open(2, 4, false);
	struct wire_error e = {.id = 8, .code = LM_EBUSY, .about = WIRE_FORWARD};
	snprintf(e.msg, sizeof e.msg, "worker w0 refused it");
	struct wire_buf b = {0};
	cr_assert_eq(wire_encode_error(&b, &e), 0);
	nng_msg *in = msg_of(&b, NULL, 0);
	nng_msg *out = handled(st, in);
	cr_expect_eq(out, in);
	cr_expect_eq(nng_msg_len(out), b.len);
	cr_expect_eq(memcmp(nng_msg_body(out), b.data, b.len), 0);
	cr_expect_eq(atomic_load(&st->stats.errors), 0);
	nng_msg_free(out);
	wire_buf_fini(&b);
	stage_fini(st);
	unlink(model_path);
}

/* RELEASE empties the slots it names, leaves the others, and goes on to the next stage. */
Test(stage, release_empties_its_slots, .timeout = 60)
{
	make_model();
	struct stage *st = stage_open(0, 2, false);
	struct part p[3] = {{0, 0, 4, prompt}, {1, 0, 4, prompt + 4}, {2, 0, 4, prompt + 8}};
	nng_msg_free(handled(st, ids_msg(st, p, 3)));
	for (int32_t i = 0; i < 3; i++)
		cr_expect_eq(st->eng.kv.len[i], 4);
	int32_t slots[2] = {0, 2};
	struct wire_release r = {
		.id = 9, .fingerprint = st->lim.fingerprint, .n = 2, .slots = slots};
	struct wire_buf b = {0};
	cr_assert_eq(wire_encode_release(&b, &r), 0);
	nng_msg *in = msg_of(&b, NULL, 0);
	nng_msg *out = handled(st, in);
	cr_expect_eq(out, in, "RELEASE goes on to the next stage");
	nng_msg_free(out);
	cr_expect_eq(st->eng.kv.len[0], 0);
	cr_expect_eq(st->eng.kv.len[1], 4);
	cr_expect_eq(st->eng.kv.len[2], 0);
	cr_expect_eq(atomic_load(&st->stats.releases), 1);
	/* A slot the stage does not have is refused, and nothing is emptied. */
	slots[0] = st->assign.slots;
	r.n = 1;
	wire_buf_reset(&b);
	cr_assert_eq(wire_encode_release(&b, &r), 0);
	expect_refused(st, msg_of(&b, NULL, 0), LM_EPROTO, "is outside");
	cr_expect_eq(st->eng.kv.len[1], 4);
	wire_buf_fini(&b);
	stage_fini(st);
	unlink(model_path);
}

/* A FORWARD whose first position is below what the slot holds rolls the slot back to it, and
 * what is computed from there equals the first run, bit for bit. */
Test(stage, a_forward_below_a_slots_length_rolls_it_back, .timeout = 60)
{
	make_model();
	struct stage *st = stage_open(0, 5, true);
	int32_t seq[16];
	memcpy(seq, prompt, 8 * sizeof *seq);
	struct wire_token first[3];
	first[0] = step(st, 0, 0, seq, 8);
	seq[8] = first[0].token;
	first[1] = step(st, 0, 8, seq + 8, 1);
	seq[9] = first[1].token;
	first[2] = step(st, 0, 9, seq + 9, 1);
	cr_assert_eq(st->eng.kv.len[0], 10);

	struct wire_token again = step(st, 0, 4, seq + 4, 4); /* positions 4..7 again */
	cr_expect_eq(st->eng.kv.len[0], 8);
	expect_same_token(first[0], again, "position 8");
	expect_same_token(first[1], step(st, 0, 8, seq + 8, 1), "position 9");
	expect_same_token(first[2], step(st, 0, 9, seq + 9, 1), "position 10");
	cr_expect_eq(st->eng.kv.len[0], 10);
	stage_fini(st);
	unlink(model_path);
}

/* A traced slot computed again from position 0 (its batch refused further down the ring, and
 * the sequence replayed) is recorded once: the rows of the second run replace the first's. */
Test(stage, a_trace_recomputed_from_0_holds_one_run, .timeout = 60)
{
	make_model();
	struct stage *mid = stage_open(2, 4, false);
	int32_t rows;
	void *trace = NULL;
	size_t bytes;
	lm_diag d = {{0}};
	cr_assert_eq(stage_trace(mid, 1, &rows, &trace, &bytes, &d), 0, "%s", d.msg); /* arm */
	free(trace);
	size_t dim = (size_t)mid->dim;
	float *out = malloc(6 * dim * sizeof(float));
	cr_assert(out != NULL);
	nng_msg_free(handled(mid, forward_msg(mid, 2, 3, 0)));
	cr_assert_eq(hidden_of(mid, handled(mid, forward_msg(mid, 2, 3, 0)), out), 6);
	cr_assert_eq(stage_trace(mid, -1, &rows, &trace, &bytes, &d), 0, "%s", d.msg);
	cr_expect_eq(rows, 3, "%d rows recorded for a probe of 3", rows);
	cr_assert_eq(bytes, 2 * 3 * dim * sizeof(float));
	cr_expect_eq(memcmp((const float *)trace + 3 * dim, out + 3 * dim, 3 * dim * sizeof(float)),
		     0, "after layer 3: not the rows of the last run");
	free(trace);
	free(out);
	stage_fini(mid);
	unlink(model_path);
}

/* The trace of a slot holds, after each of the stage's layers, the hidden rows the forward
 * computed for that slot: after the last layer, the rows the stage sent on; after the first,
 * what a stage of that one layer computes from the same input. */
Test(stage, the_trace_returns_the_hidden_states_the_forward_produced, .timeout = 60)
{
	make_model();
	struct stage *mid = stage_open(2, 4, false);
	struct stage *one = stage_open(2, 3, false);
	int32_t rows;
	void *trace = NULL;
	size_t bytes;
	lm_diag d = {{0}};
	cr_assert_eq(stage_trace(mid, 1, &rows, &trace, &bytes, &d), 0, "%s", d.msg); /* arm */
	cr_expect_eq(rows, 0);
	free(trace);

	/* Slots 0 and 1, three rows each: the trace takes slot 1's, rows 3..5. */
	size_t dim = (size_t)mid->dim;
	float *out = malloc(6 * dim * sizeof(float)), *ref = malloc(6 * dim * sizeof(float));
	cr_assert(out != NULL && ref != NULL);
	cr_assert_eq(hidden_of(mid, handled(mid, forward_msg(mid, 2, 3, 0)), out), 6);
	cr_assert_eq(hidden_of(one, handled(one, forward_msg(one, 2, 3, 0)), ref), 6);
	cr_assert_eq(stage_trace(mid, -1, &rows, &trace, &bytes, &d), 0, "%s", d.msg);
	cr_assert_eq(rows, 3);
	cr_assert_eq(bytes, 2 * 3 * dim * sizeof(float)); /* [layers 2][rows 3][dim] */
	const float *layer2 = trace, *layer3 = (const float *)trace + 3 * dim;
	cr_expect_eq(memcmp(layer3, out + 3 * dim, 3 * dim * sizeof(float)), 0,
		     "after layer 3: not the rows the stage sent");
	cr_expect_eq(memcmp(layer2, ref + 3 * dim, 3 * dim * sizeof(float)), 0,
		     "after layer 2: not what layer 2 alone computes");
	cr_expect_neq(memcmp(layer2, layer3, 3 * dim * sizeof(float)), 0);
	free(trace);
	/* Disarmed: the next batch records nothing. */
	nng_msg_free(handled(mid, forward_msg(mid, 2, 1, 3)));
	cr_assert_eq(stage_trace(mid, -1, &rows, &trace, &bytes, &d), 0, "%s", d.msg);
	cr_expect_eq(rows, 0);
	free(trace);
	free(out);
	free(ref);
	stage_fini(mid);
	stage_fini(one);
	unlink(model_path);
}

/* Batch invariance: a decode token computed alone, and the same token (same slot, same cache)
 * inside a 16-token batch of other sequences' prompts, give bit-identical results: the hidden
 * row a first stage sends on, the token and logprob the last samples. This is what lets the
 * scheduler batch sequences without changing a greedy token. */
Test(stage, a_token_alone_and_inside_a_batch_are_bit_identical, .timeout = 60)
{
	make_model();
	struct stage *first = stage_open(0, 2, false);
	struct stage *whole = stage_open(0, 5, true);
	size_t dim = (size_t)first->dim;
	const int32_t x = 321;
	/* slot 0: prompt[0..5) then x at position 5; four other sequences fill the batch. */
	struct part alone = {0, 5, 1, &x};
	struct part batch[5] = {{1, 0, 4, prompt + 5},
				{0, 5, 1, &x},
				{2, 0, 5, prompt + 9},
				{3, 0, 3, prompt + 1},
				{4, 0, 3, prompt + 12}};
	cr_assert_eq(4 + 1 + 5 + 3 + 3, 16);
	struct part history = {0, 0, 5, prompt};

	float solo[128], mixed[16 * 128];
	nng_msg_free(handled(first, ids_msg(first, &history, 1)));
	cr_assert_eq(hidden_of(first, handled(first, ids_msg(first, &alone, 1)), solo), 1);
	nng_msg_free(handled(first, ids_msg(first, &history, 1))); /* the same cache again */
	cr_assert_eq(hidden_of(first, handled(first, ids_msg(first, batch, 5)), mixed), 16);
	cr_expect_eq(memcmp(solo, mixed + 4 * dim, dim * sizeof(float)), 0,
		     "the hidden row of x differs inside the batch");

	struct wire_token t_solo[1], t_mixed[5];
	nng_msg_free(handled(whole, ids_msg(whole, &history, 1)));
	cr_assert_eq(tokens_of(whole, handled(whole, ids_msg(whole, &alone, 1)), t_solo), 1);
	nng_msg_free(handled(whole, ids_msg(whole, &history, 1)));
	cr_assert_eq(tokens_of(whole, handled(whole, ids_msg(whole, batch, 5)), t_mixed), 5);
	cr_expect_eq(t_mixed[1].seq_id, t_solo[0].seq_id);
	expect_same_token(t_solo[0], t_mixed[1], "x alone, then inside the batch");
	stage_fini(first);
	stage_fini(whole);
	unlink(model_path);
}

/* The last stage draws from the adjusted logits and reports the model's own logprobs: a bias
 * of -100 on the greedy token makes the next best one win, with the logprob it had before;
 * a neutral adjustment changes nothing; another sequence of the batch is not touched. */
Test(stage, logit_adjustments_change_the_draw_not_the_logprobs, .timeout = 60)
{
	make_model();
	struct stage *st = stage_open(0, 5, true);
	struct part p[2] = {{0, 0, 6, prompt}, {1, 0, 6, prompt}};
	struct wire_token plain[2], biased[2], neutral[2];
	cr_assert_eq(tokens_of(st, handled(st, ids_msg(st, p, 2)), plain), 2);
	cr_assert_eq(plain[0].token, plain[1].token);
	struct lm_logit_bias ban = {plain[0].token, -100.0f};
	const struct lm_logit_adjust a = {.repeat = 1.0f, .bias = &ban, .n_bias = 1};
	next_adjust[0] = &a;
	cr_assert_eq(tokens_of(st, handled(st, ids_msg(st, p, 2)), biased), 2);
	cr_expect_neq(biased[0].token, plain[0].token, "the banned token was drawn");
	cr_expect_lt(biased[0].logprob, plain[0].logprob, "the logprob is not the model's");
	expect_same_token(biased[1], plain[1], "the other sequence");
	const int32_t window[3] = {plain[0].token, 1, 2};
	const struct lm_logit_adjust none = {.repeat = 1.0f, .hist = window, .n_hist = 3};
	next_adjust[0] = &none;
	cr_assert_eq(tokens_of(st, handled(st, ids_msg(st, p, 2)), neutral), 2);
	expect_same_token(neutral[0], plain[0], "a neutral adjustment");
	next_adjust[0] = NULL;
	stage_fini(st);
	unlink(model_path);
}

/* The stamp a message carries, read by the decoder (0: none), and where its bytes are. */
static uint64_t stamp_of(const struct stage *st, nng_msg *m, size_t *at)
{
	struct wire_scratch sc;
	struct wire_limits lim = st->lim;
	lm_diag d = {{0}};
	uint64_t ns;
	cr_assert_eq(wire_scratch_init(&sc, st->assign.slots), 0);
	struct wire_head h;
	cr_assert_eq(wire_peek(nng_msg_body(m), nng_msg_len(m), &h, &d), 0, "%s", d.msg);
	if (h.type == WIRE_TOKENS) {
		struct wire_tokens t;
		cr_assert_eq(wire_decode_tokens(nng_msg_body(m), nng_msg_len(m), &lim, &sc, &t, &d),
			     0, "%s", d.msg);
		ns = t.sent_ns;
		*at = 0;
	} else {
		struct wire_forward f;
		cr_assert_eq(
			wire_decode_forward(nng_msg_body(m), nng_msg_len(m), &lim, &sc, &f, &d), 0,
			"%s", d.msg);
		ns = f.sent_ns;
		*at = f.stamp_at;
	}
	wire_scratch_fini(&sc);
	return ns;
}

/* The ring stamp (wire.h) goes on with what each stage sends when, and only when, what it got
 * was stamped: the first stage's new message, the middle stage's same message (rewritten in
 * place where the stage says) and the last stage's TOKENS; each stage reports the stamp it
 * got. The stamp changes nothing computed. */
Test(stage, the_ring_stamp_goes_on_with_what_each_stage_sends, .timeout = 60)
{
	make_model();
	struct stage *first = stage_open(0, 2, false);
	struct stage *mid = stage_open(2, 4, false);
	struct stage *last = stage_open(4, 5, true);
	struct part plain = {0, 0, 5, prompt}, stamped = {1, 0, 5, prompt};
	size_t at;

	next_stamp = 0;
	nng_msg *m = handled(first, ids_msg(first, &plain, 1));
	cr_expect_eq(first->in_stamp, 0);
	cr_expect_eq(first->out_stamp_at, 0);
	cr_expect_eq(stamp_of(first, m, &at), 0);
	nng_msg *m2 = handled(mid, m);
	cr_expect_eq(m2, m, "a middle stage passes the message it got on");
	cr_expect_eq(mid->out_stamp_at, 0);
	m = handled(last, m2);
	cr_expect_eq(last->out_stamp_at, 0);
	cr_expect_eq(stamp_of(last, m, &at), 0);
	struct wire_token t_plain[1], t_stamped[1];
	cr_assert_eq(tokens_of(last, m, t_plain), 1);

	next_stamp = 1000;
	m = handled(first, ids_msg(first, &stamped, 1));
	next_stamp = 0;
	cr_expect_eq(first->in_stamp, 1000);
	cr_assert_gt(first->out_stamp_at, 0);
	cr_expect_eq(stamp_of(first, m, &at), 1000, "carried until the worker stamps it");
	cr_expect_eq(at, first->out_stamp_at);
	wire_stamp((uint8_t *)nng_msg_body(m) + first->out_stamp_at, 2000);
	cr_expect_eq(stamp_of(first, m, &at), 2000);

	m2 = handled(mid, m);
	cr_expect_eq(m2, m, "a stamped message still goes on in place");
	cr_expect_eq(mid->in_stamp, 2000);
	cr_expect_eq(mid->out_stamp_at, at);
	wire_stamp((uint8_t *)nng_msg_body(m2) + mid->out_stamp_at, 3000);

	m = handled(last, m2);
	cr_expect_eq(last->in_stamp, 3000);
	cr_assert_gt(last->out_stamp_at, 0);
	cr_assert_leq(last->out_stamp_at + WIRE_STAMP_LEN, nng_msg_len(m));
	wire_stamp((uint8_t *)nng_msg_body(m) + last->out_stamp_at, 4000);
	cr_expect_eq(stamp_of(last, m, &at), 4000);
	cr_assert_eq(tokens_of(last, m, t_stamped), 1);
	cr_expect_eq(t_stamped[0].seq_id, 101);
	expect_same_token(t_plain[0], t_stamped[0], "the same prompt, stamped");
	stage_fini(first);
	stage_fini(mid);
	stage_fini(last);
	unlink(model_path);
}
