/* stage.c — a worker's pipeline stage. See stage.h. */
#include "worker/stage.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/dtype.h"
#include "common/base/buf.h"

uint64_t stage_rss_bytes(void)
{
	FILE *fp = fopen("/proc/self/statm", "r");
	unsigned long long size = 0, rss = 0;
	if (fp == NULL)
		return 0;
	if (fscanf(fp, "%llu %llu", &size, &rss) != 2)
		rss = 0;
	fclose(fp);
	return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

int stage_init(struct stage *st, const struct wire_assign *a, const char *backend,
	       const struct lm_backend_opts *bo, lm_diag *d)
{
	int rc;

	memset(st, 0, sizeof *st);
	st->assign = *a;
	st->trace_slot = -1;
	struct lm_slice slice = {a->begin, a->end, a->embedding, a->head};
	struct lm_engine_cfg ec = {
		.model = a->model,
		.slice = &slice,
		.backend = backend,
		.bo = bo != NULL ? *bo : (struct lm_backend_opts){0},
		.populate = true,
		/* Text exists only in the coordinator: the vocabulary (15 MiB of Gemma 4's file,
		 * more as strings) stays out of a worker's memory. */
		.no_vocab = true,
		.max_seq = a->max_seq,
		.slots = a->slots,
		.max_batch = a->max_batch,
		.max_draft = a->max_draft,
		.kv_types = {.global = {(enum lm_dtype)a->k_type, (enum lm_dtype)a->v_type},
			     .swa = {(enum lm_dtype)a->k_type_swa, (enum lm_dtype)a->v_type_swa}}};
	if ((rc = lm_engine_open(&st->eng, &ec, d)) != 0)
		goto fail;
	const struct lm_hparams *hp = &st->eng.model.hp;
	st->dim = hp->n_embd;
	st->n_vocab = hp->n_vocab;

	st->lim = (struct wire_limits){.fingerprint = st->eng.model.fingerprint,
				       .slots = a->slots,
				       .max_seq = a->max_seq,
				       .dim = st->dim,
				       .n_vocab = st->n_vocab,
				       .max_batch = a->max_batch,
				       .max_seqs = a->slots,
				       .max_logprobs = WIRE_MAX_LOGPROBS,
				       .max_draft = a->max_draft};
	size_t rows = (size_t)a->max_batch, width = (size_t)st->dim;
	st->out_cap = lm_stage_out_rows(a->max_batch, a->slots, a->max_draft);
	const size_t out = (size_t)st->out_cap;
	st->ids = malloc(rows * sizeof *st->ids);
	st->loc = malloc(rows * sizeof *st->loc);
	st->out_rows = malloc(out * sizeof *st->out_rows);
	st->hin = malloc(rows * width * sizeof(float));
	st->hout = malloc(rows * width * sizeof(float));
	st->toks = malloc(out * sizeof *st->toks);
	st->verified = malloc(out * sizeof *st->verified);
	if (st->ids == NULL || st->loc == NULL || st->out_rows == NULL || st->hin == NULL ||
	    st->hout == NULL || st->toks == NULL || st->verified == NULL ||
	    wire_scratch_init_rows(&st->scratch, a->slots,
				   a->max_batch > a->slots ? a->max_batch : a->slots) != 0)
		goto nomem;
	if (a->head) {
		st->logits = malloc(out * (size_t)st->n_vocab * sizeof(float));
		st->adjusted = malloc((size_t)st->n_vocab * sizeof(float));
		st->top_cap = out * (size_t)st->lim.max_logprobs * 8;
		st->top = malloc(st->top_cap);
		if (st->logits == NULL || st->adjusted == NULL || st->top == NULL ||
		    lm_sampler_init(&st->sampler, st->n_vocab) != 0)
			goto nomem;
		lm_constrain_init(&st->cons, a->slots, st->n_vocab);
	}
	/* What the stage holds besides the engine (for stage_scratch_held). */
	st->host_bytes = rows * (sizeof *st->ids + sizeof *st->loc + 2 * width * sizeof(float)) +
			 wire_scratch_bytes(st->scratch.cap, st->scratch.rows) +
			 out * (sizeof *st->out_rows + sizeof *st->toks + sizeof *st->verified);
	if (a->head)
		st->host_bytes += (out + 1) * (size_t)st->n_vocab * sizeof(float) + st->top_cap +
				  (size_t)st->n_vocab * sizeof *st->sampler.cand;
	return 0;
nomem:
	rc = lm_fail(d, LM_ENOMEM, "out of memory for a batch of %d tokens", a->max_batch);
fail:
	stage_fini(st);
	return rc;
}

void stage_fini(struct stage *st)
{
	if (st == NULL)
		return;
	lm_engine_close(&st->eng);
	lm_sampler_fini(&st->sampler);
	lm_constrain_fini(&st->cons);
	wire_scratch_fini(&st->scratch);
	wire_buf_fini(&st->hdr);
	free(st->ids);
	free(st->loc);
	free(st->out_rows);
	free(st->hin);
	free(st->hout);
	free(st->logits);
	free(st->adjusted);
	free(st->toks);
	free(st->verified);
	free(st->top);
	free(st->trace);
	free(st->trace_rows);
	memset(st, 0, sizeof *st);
}

int stage_error_msg(struct wire_buf *scratch, uint64_t id, uint32_t about, int code,
		    const char *msg, nng_msg **out)
{
	struct wire_error e = {.id = id, .code = code, .about = about};
	snprintf(e.msg, sizeof e.msg, "%s", msg);
	wire_buf_reset(scratch);
	int rc = wire_encode_error(scratch, &e);
	if (rc != 0)
		return rc;
	if (nng_msg_alloc(out, 0) != 0)
		return LM_ENOMEM;
	if (nng_msg_append(*out, scratch->data, scratch->len) != 0) {
		nng_msg_free(*out);
		*out = NULL;
		return LM_ENOMEM;
	}
	return 0;
}

/* A new message of header + `payload` bytes; *payload_at receives the payload's address. */
static int stage_new_msg(const struct wire_buf *hdr, size_t payload, nng_msg **out,
			 uint8_t **payload_at)
{
	if (nng_msg_alloc(out, hdr->len + payload) != 0)
		return LM_ENOMEM;
	uint8_t *body = nng_msg_body(*out);
	memcpy(body, hdr->data, hdr->len);
	*payload_at = body + hdr->len;
	return 0;
}

/* f32 rows -> the wire dtype, into dst (which may be unaligned). */
static void stage_pack_rows(enum wire_dtype dt, const float *src, uint8_t *dst, size_t n)
{
	if (dt == WIRE_DT_F32) {
		memcpy(dst, src, n * sizeof(float));
	} else if (dt == WIRE_DT_F16) {
		for (size_t i = 0; i < n; i++) {
			uint16_t h = lm_f32_to_f16(src[i]);
			memcpy(dst + 2 * i, &h, 2);
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			uint16_t h = lm_f32_to_bf16(src[i]);
			memcpy(dst + 2 * i, &h, 2);
		}
	}
}

static void stage_unpack_rows(enum wire_dtype dt, const uint8_t *src, float *dst, size_t n)
{
	if (dt == WIRE_DT_F32) {
		memcpy(dst, src, n * sizeof(float));
	} else {
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, src + 2 * i, 2);
			dst[i] = dt == WIRE_DT_F16 ? lm_f16_to_f32(h) : lm_bf16_to_f32(h);
		}
	}
}

/* The top-n logprobs of a row whose norm is z, appended to st->top as n ids then n logprobs. */
static size_t stage_top_logprobs(struct stage *st, const float *logits, struct lm_log_norm z,
				 int32_t n, size_t at)
{
	/* n is at most lim.max_logprobs (20): a partial insertion sort over the vocabulary. */
	int32_t ids[64];
	float vals[64];
	int32_t k = 0;
	for (int32_t i = 0; i < st->n_vocab; i++) {
		float v = isnan(logits[i]) ? -INFINITY : logits[i];
		if (k == n && v <= vals[k - 1])
			continue;
		int32_t j = k < n ? k++ : n - 1;
		while (j > 0 && vals[j - 1] < v) {
			vals[j] = vals[j - 1];
			ids[j] = ids[j - 1];
			j--;
		}
		vals[j] = v;
		ids[j] = i;
	}
	for (int32_t j = 0; j < k; j++) {
		float lp = lm_logprob_of(z, logits[ids[j]]);
		memcpy(st->top + at + 4 * (size_t)j, &ids[j], 4);
		memcpy(st->top + at + 4 * (size_t)(k + j), &lp, 4);
	}
	return at + 8 * (size_t)k;
}

/* The forward's per-layer hook while a traced slot's rows are in the batch. The trace holds
 * [rows][layers][dim]: a row's layers side by side, so that it grows by rows as they come. */
static void stage_trace_hook(void *arg, int32_t layer, const float *x, int32_t n)
{
	struct stage *st = arg;
	size_t dim = (size_t)st->dim, l = (size_t)(layer - st->assign.begin);
	size_t layers = (size_t)(st->assign.end - st->assign.begin);
	(void)n;
	for (int32_t k = 0; k < st->trace_batch; k++) {
		float *dst = st->trace + (((size_t)(st->trace_n + k)) * layers + l) * dim;
		st->eng.be.iface->download(st->eng.be.ctx, dst, x + (size_t)st->trace_rows[k] * dim,
					   dim * sizeof(float));
	}
}

/* Picks the traced slot's rows of a batch of n and makes room for them (at most LM_TRACE_ROWS
 * in all); false when out of memory (the batch is then not traced). The trace holds a row per
 * position from 0: a batch that starts the slot at position p below what was traced (the
 * sequence computed again, its batch refused further down the ring) replaces the rows from p
 * on, so a replayed probe is recorded once. */
static bool stage_trace_batch(struct stage *st, int32_t n)
{
	st->trace_batch = 0;
	if (st->trace_slot < 0)
		return true;
	for (int32_t r = 0; r < n && st->trace_n + st->trace_batch < LM_TRACE_ROWS; r++) {
		if (st->eng.fw.max_batch <= 0 || st->loc[r].slot != st->trace_slot)
			continue;
		if (st->trace_batch == 0 && st->loc[r].pos >= 0 && st->loc[r].pos < st->trace_n)
			st->trace_n = st->loc[r].pos;
		st->trace_rows[st->trace_batch++] = r;
	}
	size_t row = (size_t)(st->assign.end - st->assign.begin) * (size_t)st->dim;
	size_t cap = (size_t)st->trace_cap;
	float *t = lm_grow(st->trace, &cap, (size_t)(st->trace_n + st->trace_batch) * row + 1,
			   sizeof(float), row);
	if (t == NULL) {
		st->trace_batch = 0;
		return false;
	}
	st->trace = t;
	st->trace_cap = (int32_t)(cap / (row > 0 ? row : 1));
	return true;
}

uint64_t stage_scratch_held(const struct stage *st)
{
	size_t layers = (size_t)(st->assign.end - st->assign.begin);
	uint64_t trace = (uint64_t)st->trace_cap * layers * (uint64_t)st->dim * sizeof(float);
	if (st->trace_rows != NULL)
		trace += (uint64_t)st->assign.max_batch * sizeof *st->trace_rows;
	return st->eng.fw.scratch_bytes + lm_backend_scratch_held(&st->eng.be) + st->host_bytes +
	       trace + lm_constrain_bytes(&st->cons);
}

int stage_trace(struct stage *st, int32_t slot, int32_t *rows, void **out, size_t *bytes,
		lm_diag *d)
{
	size_t layers = (size_t)(st->assign.end - st->assign.begin), dim = (size_t)st->dim;
	if (st->trace_rows == NULL && (st->trace_rows = malloc((size_t)st->assign.max_batch *
							       sizeof *st->trace_rows)) == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory for a trace");
	size_t n = st->trace_slot >= 0 ? (size_t)st->trace_n : 0;
	*rows = (int32_t)n;
	*bytes = layers * n * dim * sizeof(float);
	*out = malloc(*bytes + 1);
	if (*out == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory for a trace");
	/* [rows][layers][dim] as recorded, to [layers][rows][dim] as TRACE answers. */
	for (size_t l = 0; l < layers; l++)
		for (size_t r = 0; r < n; r++)
			memcpy((float *)*out + (l * n + r) * dim,
			       st->trace + (r * layers + l) * dim, dim * sizeof(float));
	st->trace_slot = slot;
	st->trace_n = 0;
	return 0;
}

/* The batch's locations and the rows the last stage samples: a sequence's last row, or all of
 * a speculating sequence's 1 + n_draft rows. The first stage also holds the drafted ids against
 * its payload, so the ids verified are the ids whose rows every stage stored. */
static int stage_batch(struct stage *st, const struct wire_forward *f, int32_t *n_out, lm_diag *d)
{
	const bool first = st->assign.embedding, last = st->assign.head;
	int32_t drafted = 0;
	*n_out = 0;
	for (int32_t s = 0, row = 0; s < f->n_seqs; s++) {
		const struct wire_seq *q = &f->seqs[s];
		for (int32_t i = 0; i < q->n_tokens; i++, row++)
			st->loc[row] = (struct lm_tok_loc){q->slot, q->pos + i};
		for (int32_t i = 0; first && i < q->n_draft; i++) {
			int32_t id;
			memcpy(&id,
			       (const uint8_t *)f->payload + 4 * (size_t)(row - q->n_draft + i),
			       sizeof id);
			if (id != f->drafts[drafted + i])
				return lm_fail(d, LM_EPROTO,
					       "sequence %" PRIu64
					       ": draft %d is %d in \"dr\" but %d "
					       "in the payload",
					       q->seq_id, i, f->drafts[drafted + i], id);
		}
		drafted += q->n_draft;
		if (!last || !q->sample)
			continue;
		if (*n_out + 1 + q->n_draft > st->out_cap)
			return lm_fail(d, LM_ERANGE, "the batch samples more than %d rows",
				       st->out_cap);
		for (int32_t i = q->n_draft; i >= 0; i--)
			st->out_rows[(*n_out)++] = row - 1 - i;
	}
	return 0;
}

/* One token of TOKENS, with its logprob and top alternatives (appended at *top_len). */
static void stage_emit(struct stage *st, const struct wire_seq *q, const float *row, int32_t token,
		       struct wire_tokens *t, size_t *top_len)
{
	struct wire_token *tk = &st->toks[t->n++];
	tk->seq_id = q->seq_id;
	tk->token = token;
	const struct lm_log_norm z = lm_log_norm(row, st->n_vocab);
	tk->logprob = lm_logprob_of(z, row[token]);
	tk->n_top = q->n_logprobs;
	if (q->n_logprobs > 0)
		*top_len = stage_top_logprobs(st, row, z, q->n_logprobs, *top_len);
}

/* A constrained sequence's token, or its verified run, under its grammar (constrain.h): with
 * its logit adjustments applied first, as llama.cpp's chain applies biases before the grammar. */
static int stage_constrained(struct stage *st, const struct wire_seq *q, const float *rows,
			     const int32_t *drafts, int32_t *n, lm_diag *d)
{
	*n = 1;
	if (q->n_draft > 0)
		return lm_constrain_verify(&st->cons, &st->sampler, q->slot, rows, drafts,
					   q->n_draft, &q->sampling, st->verified, n, d);
	if (q->adjust != NULL) {
		memcpy(st->adjusted, rows, (size_t)st->n_vocab * sizeof(float));
		lm_adjust_logits(&st->sampler, st->adjusted, q->adjust);
		rows = st->adjusted;
	}
	return lm_constrain_sample(&st->cons, &st->sampler, q->slot, rows, &q->sampling,
				   st->verified, d);
}

/* The last stage's matchers for the batch's constrained sequences, before anything is
 * computed: a sequence whose matcher this stage does not hold (and whose grammar did not come
 * with it) refuses the batch, and the coordinator sends it again with its grammar. */
static int stage_grammars(struct stage *st, const struct wire_forward *f, lm_diag *d)
{
	for (int32_t s = 0; s < f->n_seqs; s++) {
		const struct wire_seq *q = &f->seqs[s];
		const struct wire_grammar *g = q->grammar;
		if (g == NULL)
			continue;
		int rc = lm_constrain_vocab(&st->cons, st->assign.model, d);
		if (rc == 0)
			rc = lm_constrain_begin(&st->cons, q->slot, q->seq_id, q->step, g->text,
						g->len, g->ids, g->n_ids, d);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* Last stage: each sampling sequence's token, or a speculating one's verified run (the
 * accepted drafts and the token after them), in order, as one TOKENS message. */
static int stage_tokens(struct stage *st, const struct wire_forward *f, nng_msg **out, lm_diag *d)
{
	struct wire_tokens t = {.batch_id = f->batch_id, .fingerprint = st->lim.fingerprint};
	const size_t v = (size_t)st->n_vocab;
	size_t top_len = 0;
	int32_t k = 0, drafted = 0;
	for (int32_t s = 0; s < f->n_seqs; s++) {
		const struct wire_seq *q = &f->seqs[s];
		const float *rows = st->logits + (size_t)k * v;
		if (!q->sample)
			continue;
		int32_t n = 1;
		if (q->grammar != NULL) {
			uint64_t d0 = st->cons.drawn, f0 = st->cons.fast, m0 = st->cons.masks;
			int rc = stage_constrained(st, q, rows, f->drafts + drafted, &n, d);
			atomic_fetch_add(&st->stats.grammar_draws, st->cons.drawn - d0);
			atomic_fetch_add(&st->stats.grammar_fast, st->cons.fast - f0);
			atomic_fetch_add(&st->stats.grammar_masked, st->cons.masks - m0);
			if (rc != 0)
				return rc;
		} else if (q->n_draft == 0 && q->adjust != NULL) {
			/* Bias and penalties change what is drawn; the logprobs stay the model's.
			 * (The wire refuses drafts beside adjustments.) */
			memcpy(st->adjusted, rows, v * sizeof(float));
			lm_adjust_logits(&st->sampler, st->adjusted, q->adjust);
			st->verified[0] =
				lm_sample(&st->sampler, st->adjusted, &q->sampling, q->step);
		} else if (q->n_draft == 0)
			st->verified[0] = lm_sample(&st->sampler, rows, &q->sampling, q->step);
		else
			n = lm_sample_verify(&st->sampler, rows, st->n_vocab, f->drafts + drafted,
					     q->n_draft, &q->sampling, q->step, st->verified);
		for (int32_t i = 0; i < n; i++)
			stage_emit(st, q, rows + (size_t)i * v, st->verified[i], &t, &top_len);
		k += 1 + q->n_draft;
		drafted += q->n_draft;
	}
	t.toks = st->toks;
	t.payload = st->top;
	t.payload_len = top_len;
	t.sent_ns = f->sent_ns; /* stamped again when sent */
	wire_buf_reset(&st->hdr);
	int rc = wire_encode_tokens(&st->hdr, &t);
	if (rc != 0)
		return lm_fail(d, rc, "encoding TOKENS");
	uint8_t *payload;
	if ((rc = stage_new_msg(&st->hdr, 0, out, &payload)) != 0)
		return lm_fail(d, rc, "out of memory for a message");
	/* The encoder copied the top logprobs after the header, whose last bytes the stamp's are. */
	st->out_stamp_at = t.sent_ns != 0 ? st->hdr.len - top_len - WIRE_STAMP_LEN : 0;
	return 0;
}

/* A middle or first stage: the hidden rows go on, in the received message when the shape
 * allows. */
static int stage_pass_on(struct stage *st, struct wire_forward *f, nng_msg *in, nng_msg **out,
			 lm_diag *d)
{
	const struct wire_assign *a = &st->assign;
	enum wire_dtype dt = a->wire_dtype;
	int32_t n = f->n_tokens;
	size_t bytes = (size_t)n * (size_t)st->dim * wire_dtype_size(dt);
	/* A stamp in another form than this build writes cannot be rewritten in place. */
	if (!a->embedding && f->dtype == dt && (f->sent_ns == 0 || f->stamp_at != 0)) {
		/* Same shape in and out: compute into the received message and pass it on. */
		uint8_t *payload = (uint8_t *)nng_msg_body(in) + (nng_msg_len(in) - bytes);
		stage_pack_rows(dt, st->hout, payload, (size_t)n * (size_t)st->dim);
		*out = in;
		st->out_stamp_at = f->sent_ns != 0 ? f->stamp_at : 0;
		return 0;
	}
	f->dtype = dt;
	f->dim = st->dim;
	f->payload = NULL;
	f->payload_len = bytes;
	wire_buf_reset(&st->hdr);
	int rc = wire_encode_forward(&st->hdr, f);
	if (rc != 0)
		return lm_fail(d, rc, "encoding FORWARD");
	uint8_t *payload;
	if ((rc = stage_new_msg(&st->hdr, bytes, out, &payload)) != 0)
		return lm_fail(d, rc, "out of memory for a message");
	stage_pack_rows(dt, st->hout, payload, (size_t)n * (size_t)st->dim);
	nng_msg_free(in);
	st->out_stamp_at = f->sent_ns != 0 ? st->hdr.len - WIRE_STAMP_LEN : 0;
	return 0;
}

static int stage_forward(struct stage *st, nng_msg *in, nng_msg **out, lm_diag *d)
{
	const uint8_t *body = nng_msg_body(in);
	struct wire_forward f;
	int rc = wire_decode_forward(body, nng_msg_len(in), &st->lim, &st->scratch, &f, d);
	st->malformed = true; /* until the message is known to be one this stage takes */
	if (rc != 0)
		return rc;
	st->in_stamp = f.sent_ns;
	const struct wire_assign *a = &st->assign;
	bool first = a->embedding, last = a->head;

	if (first && f.dtype != WIRE_DT_I32)
		return lm_fail(d, LM_EPROTO, "the first stage takes token ids, got %s rows",
			       wire_dtype_name(f.dtype));
	if (!first && (f.dtype == WIRE_DT_I32 || f.dtype == WIRE_DT_NONE || f.dim != st->dim))
		return lm_fail(d, LM_EPROTO, "stage [%d, %d) takes hidden rows of width %d",
			       a->begin, a->end, st->dim);
	st->malformed = false;

	/* The batch: every sequence's rows, in order. */
	int32_t n = f.n_tokens, n_out = 0;
	if ((rc = stage_batch(st, &f, &n_out, d)) != 0)
		return rc;
	if (last && (rc = stage_grammars(st, &f, d)) != 0)
		return rc;
	struct lm_batch b = {.n = n, .loc = st->loc, .n_out = n_out, .out_rows = st->out_rows};
	const float *hin = NULL;
	if (first) {
		memcpy(st->ids, f.payload, (size_t)n * sizeof(int32_t));
		b.ids = st->ids;
	} else {
		stage_unpack_rows(f.dtype, f.payload, st->hin, (size_t)n * (size_t)st->dim);
		hin = st->hin;
	}
	/* Rows of the traced slot, if any, are copied after each layer by stage_trace_hook (a
	 * trace that cannot grow records what it has). */
	stage_trace_batch(st, n);
	st->eng.fw.hook = st->trace_batch > 0 ? stage_trace_hook : NULL;
	st->eng.fw.hook_arg = st;

	/* A last-stage batch that samples nothing (prefill chunks) still runs for its KV rows and
	 * answers with an empty TOKENS message, so the coordinator knows the batch is done. */
	uint64_t t0 = lm_now_ns();
	if (last) {
		rc = lm_forward_run_checked(&st->eng.fw, &b, hin, NULL, st->logits, d);
	} else {
		rc = lm_forward_run_checked(&st->eng.fw, &b, hin, st->hout, NULL, d);
	}
	st->forward_ns = lm_now_ns() - t0;
	atomic_fetch_add(&st->stats.compute_ns, st->forward_ns);
	st->eng.fw.hook = NULL;
	if (rc != 0)
		return rc;
	st->trace_n += st->trace_batch;
	atomic_fetch_add(&st->stats.batches, 1);
	atomic_fetch_add(&st->stats.tokens, (uint64_t)n);

	if (!last)
		return stage_pass_on(st, &f, in, out, d);
	if ((rc = stage_tokens(st, &f, out, d)) != 0)
		return rc;
	nng_msg_free(in);
	return 0;
}

static int stage_release(struct stage *st, nng_msg *in, nng_msg **out, lm_diag *d)
{
	struct wire_release r;
	int rc = wire_decode_release(nng_msg_body(in), nng_msg_len(in), &st->lim, &st->scratch, &r,
				     d);
	st->malformed = rc != 0;
	if (rc != 0)
		return rc;
	for (int32_t i = 0; i < r.n; i++) {
		kv_cache_truncate(&st->eng.kv, r.slots[i], 0, NULL);
		lm_constrain_end(&st->cons, r.slots[i]);
	}
	atomic_fetch_add(&st->stats.releases, 1);
	*out = in; /* every stage applies it, then the coordinator sees it back */
	return 0;
}

/* COPY: each destination takes the source's first positions (kv_cache_copy); a destination
 * that could not is left empty, and the refusal goes down the ring. */
static int stage_copy(struct stage *st, nng_msg *in, nng_msg **out, lm_diag *d)
{
	struct wire_copy c;
	int rc = wire_decode_copy(nng_msg_body(in), nng_msg_len(in), &st->lim, &st->scratch, &c, d);
	st->malformed = rc != 0;
	if (rc != 0)
		return rc;
	int first = 0;
	for (int32_t i = 0; i < c.n; i++) {
		rc = kv_cache_copy(&st->eng.kv, c.src, c.dst[i], c.len, first == 0 ? d : NULL);
		if (first == 0)
			first = rc;
	}
	if (first != 0)
		return first;
	atomic_fetch_add(&st->stats.copies, 1);
	*out = in; /* every stage applies it, then the coordinator sees it back */
	return 0;
}

int stage_handle(struct stage *st, nng_msg *in, nng_msg **out, lm_diag *d)
{
	struct wire_head h;
	int rc;

	*out = NULL;
	st->malformed = true;
	st->in_stamp = 0;
	st->out_stamp_at = 0;
	st->forward_ns = 0;
	if ((rc = wire_peek(nng_msg_body(in), nng_msg_len(in), &h, d)) != 0)
		goto refused;
	switch (h.type) {
	case WIRE_FORWARD:
		rc = stage_forward(st, in, out, d);
		break;
	case WIRE_RELEASE:
		rc = stage_release(st, in, out, d);
		break;
	case WIRE_COPY:
		rc = stage_copy(st, in, out, d);
		break;
	case WIRE_ERROR:
		*out = in; /* an earlier stage's refusal travels on to the coordinator */
		st->malformed = false;
		return 0;
	default:
		rc = lm_fail(d, LM_EPROTO, "%s is not a data-ring message", wire_type_name(h.type));
		break;
	}
	if (rc == 0)
		return 0;
refused:
	atomic_fetch_add(&st->stats.errors, 1);
	return rc;
}

void stage_mem_refresh(struct stage *st)
{
	struct lm_backend_mem m;
	if (lm_backend_mem_info(&st->eng.be, &m) != 0)
		return;
	atomic_store(&st->stats.mem_total, m.total);
	atomic_store(&st->stats.mem_free, m.free);
	atomic_store(&st->stats.mem_used, m.used);
	atomic_store(&st->stats.mem_device, m.kind != NULL && strcmp(m.kind, "device") == 0);
}
