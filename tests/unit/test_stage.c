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

#include "coordinator/synth.h"
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
					    .k_type = LM_F32,
					    .wire_dtype = LM_F32,
					    .bo = bo};
		lm_scratch_estimate(&st.eng.model.hp, &sc, &est);
		uint64_t held = stage_scratch_held(&st);
		uint64_t planned = est.total - est.messages; /* messages are not in `held` */
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
