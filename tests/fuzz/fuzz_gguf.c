/* fuzz_gguf.c — libFuzzer target for the GGUF reader and everything a loader does with a file.
 *
 * The input goes through gguf_open_mem; when it is accepted, the target walks it as the
 * planner, the workers and the coordinator would: every key (typed getters, strings, arrays
 * and nested arrays with the numeric accessors), every tensor (looked up by name), gguf_map in
 * memory, gguf_fingerprint, lm_hparams_load and lm_model_costs, tok_load and, when a
 * vocabulary loads, tok_encode / tok_piece / the streaming decoder on fixed texts. When the
 * hyperparameters load, the same bytes are opened from a file (a memfd) by lm_model_open, so
 * gguf_open's mmap path and gguf_map's page-aligned mappings bind the weights too.
 *
 * Beyond "no crash, no sanitizer report, no leak" it traps when a promise is broken:
 *   - a failure with a code the function does not document, or without a message;
 *   - an accepted file whose header fields, strings, arrays or tensors lie outside the buffer,
 *     overlap, are misaligned, or disagree with their lookups (gguf_find, gguf_find_tensor);
 *   - loaded hyperparameters outside the ranges common/model/hparams.h promises (recurrent
 *     layers' state geometry, experts' counts and widths), or costs whose flops are not twice
 *     the parameters (of an experts layer: between its used share and all of them);
 *   - a vocabulary whose special ids, texts or pieces are out of range, or whose encoder
 *     returns ids outside the vocabulary or disagrees with itself (cap too small, alloc form);
 *   - lm_model_open giving another fingerprint, binding a weight outside the file, or a
 *     layer's weights (attention or recurrent, dense FFN or experts) of other shapes than
 *     engine/weights.h gives them.
 *
 * Seeds: tests/fuzz/corpus/gguf (gen_gguf_corpus writes them); dictionary: tests/fuzz/gguf.dict.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/format/gguf.h"
#include "engine/weights.h"
#include "common/tok/tokenizer.h"

#define CHECK(cond)                       \
	do {                              \
		if (!(cond))              \
			__builtin_trap(); \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where the input lies, for "inside the buffer" checks. */
static const uint8_t *in_lo, *in_hi;

static bool inside(const void *p, uint64_t n)
{
	const uint8_t *q = p;
	return q >= in_lo && q <= in_hi && n <= (uint64_t)(in_hi - q);
}

static void check_fail(int rc, const lm_diag *d, const int *allowed, size_t n_allowed)
{
	bool ok = false;
	for (size_t i = 0; i < n_allowed; i++)
		ok |= rc == allowed[i];
	CHECK(ok);
	CHECK(d->msg[0] != '\0');
}
#define CHECK_FAIL(rc, d, ...)                                                         \
	do {                                                                           \
		static const int allowed_[] = {__VA_ARGS__};                           \
		check_fail((rc), (d), allowed_, sizeof allowed_ / sizeof allowed_[0]); \
	} while (0)

/* Every element of an array, nested ones included. The accessors read every fixed-size
 * element in every conversion (ASan sees a read past the input). */
static volatile uint64_t sink;

static void walk_arr(const struct gguf_arr *a, int depth)
{
	CHECK(depth <= 16 && a->type < GGUF_TYPE_COUNT);
	if (a->type == GGUF_TYPE_STRING) {
		CHECK(a->strs != NULL || a->n == 0);
		CHECK(a->data == NULL && a->arrs == NULL);
		for (uint64_t i = 0; i < a->n; i++) {
			CHECK(a->strs[i] != NULL && a->strs[i][a->str_lens[i]] == '\0');
			CHECK(strlen(a->strs[i]) <= a->str_lens[i]);
		}
		return;
	}
	if (a->type == GGUF_TYPE_ARRAY) {
		CHECK(a->arrs != NULL || a->n == 0);
		for (uint64_t i = 0; i < a->n; i++)
			walk_arr(&a->arrs[i], depth + 1);
		return;
	}
	CHECK(a->strs == NULL && a->arrs == NULL);
	CHECK(a->n == 0 || (a->data != NULL && inside(a->data, a->n * gguf_value_size(a->type))));
	for (uint64_t i = 0; i < a->n; i++) {
		int64_t s = gguf_arr_i64(a, i);
		uint64_t u = gguf_arr_u64(a, i);
		double f = gguf_arr_f64(a, i);
		if (a->type == GGUF_TYPE_BOOL)
			CHECK(u <= 1);
		sink += (uint64_t)s + u + (uint64_t)(f == f);
	}
}

static void walk_kvs(const gguf_file *f)
{
	for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);
		CHECK(kv != NULL && kv->key != NULL && kv->type < GGUF_TYPE_COUNT);
		CHECK(gguf_find(f, kv->key) == kv); /* keys are unique */
		CHECK(kv->offset < gguf_file_size(f));
		if (kv->type == GGUF_TYPE_STRING)
			CHECK(kv->v.str.ptr != NULL && kv->v.str.ptr[kv->v.str.len] == '\0');
		if (kv->type == GGUF_TYPE_ARRAY)
			walk_arr(&kv->v.arr, 1);

		/* Every getter on every key: 0 or LM_EFORMAT with a message. */
		lm_diag d;
		uint32_t u32;
		uint64_t u64;
		int64_t i64;
		float f32;
		bool b;
		const char *s;
		const struct gguf_arr *a;
		int rc;
#define GETTER(call)                                    \
	do {                                            \
		d.msg[0] = '\0';                        \
		rc = (call);                            \
		if (rc != 0)                            \
			CHECK_FAIL(rc, &d, LM_EFORMAT); \
	} while (0)
		GETTER(gguf_get_u32(f, kv->key, &u32, &d));
		GETTER(gguf_get_u64(f, kv->key, &u64, &d));
		GETTER(gguf_get_i64(f, kv->key, &i64, &d));
		GETTER(gguf_get_f32(f, kv->key, &f32, &d));
		GETTER(gguf_get_bool(f, kv->key, &b, &d));
		GETTER(gguf_get_str(f, kv->key, &s, &d));
		if (rc == 0)
			CHECK(s == kv->v.str.ptr);
		GETTER(gguf_get_arr(f, kv->key, GGUF_TYPE_COUNT, &a, &d));
		if (rc == 0)
			CHECK(a == &kv->v.arr);
		GETTER(gguf_get_arr(f, kv->key, GGUF_TYPE_INT32, &a, &d));
#undef GETTER
	}
	CHECK(gguf_kv_at(f, gguf_n_kv(f)) == NULL);
	CHECK(gguf_find(f, "fuzz.no.such.key") == NULL);
}

/* N of "blk.N.", -1 for other names, -2 for ten digits or more (not checked). Written apart
 * from the reader's own parser. */
static int32_t layer_of(const char *name)
{
	if (strncmp(name, "blk.", 4) != 0)
		return -1;
	int32_t v = 0, digits = 0;
	for (const char *p = name + 4;; p++) {
		if (*p >= '0' && *p <= '9') {
			if (++digits == 10)
				return -2;
			v = v * 10 + (*p - '0');
			continue;
		}
		return digits > 0 && *p == '.' ? v : -1;
	}
}

struct span {
	uint64_t off, size;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static void walk_tensors(gguf_file *f, const uint8_t *data, size_t size)
{
	struct span *spans = malloc((gguf_n_tensors(f) + 1) * sizeof *spans);
	CHECK(spans != NULL);
	uint64_t data_off = gguf_data_offset(f);
	uint32_t align = gguf_alignment(f);
	CHECK(data_off <= size);
	if (gguf_n_tensors(f) > 0)
		CHECK(data_off % align == 0);
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		CHECK(t != NULL && t->name != NULL);
		CHECK(gguf_find_tensor(f, t->name) == t); /* names are unique */
		CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
		const struct lm_dtype_info *info = lm_dtype_info(t->type);
		CHECK(info != NULL);
		uint64_t nelem = 1;
		for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++) {
			CHECK(t->ne[j] >= 0);
			if (j >= t->n_dims)
				CHECK(t->ne[j] == 1);
			nelem *= (uint64_t)t->ne[j]; /* checked not to overflow by the reader */
		}
		CHECK(t->ne[0] % info->blck == 0);
		uint64_t row;
		CHECK(lm_dtype_row_bytes(t->type, (uint64_t)t->ne[0], &row) == 0);
		CHECK(t->size == (t->ne[0] == 0 ? 0 : row * (nelem / (uint64_t)t->ne[0])));
		CHECK(t->offset % align == 0);
		CHECK(t->offset <= size - data_off && t->size <= size - data_off - t->offset);
		CHECK(t->data == NULL);
		int32_t layer = layer_of(t->name);
		CHECK(layer == -2 || t->layer == layer);
		spans[i] = (struct span){t->offset, t->size};
	}
	/* No two tensors with bytes overlap. */
	qsort(spans, gguf_n_tensors(f), sizeof *spans, cmp_span);
	for (uint64_t i = 1; i < gguf_n_tensors(f); i++)
		CHECK(spans[i - 1].size == 0 || spans[i].size == 0 ||
		      spans[i - 1].off + spans[i - 1].size <= spans[i].off);
	free(spans);
	CHECK(gguf_tensor_at(f, gguf_n_tensors(f)) == NULL);
	CHECK(gguf_find_tensor(f, "fuzz.no.such.tensor") == NULL);

	/* Mapping in memory: a selection first, then everything. Tensors point into the input. */
	struct gguf_select sel = {.layer_begin = 0, .layer_end = 1, .embedding = true};
	lm_diag d = {{0}};
	uint64_t mapped = 1;
	CHECK(gguf_map(f, gguf_select_fn, &sel, false, &mapped, &d) == 0 && mapped == 0);
	CHECK(gguf_map(f, NULL, NULL, false, NULL, &d) == 0);
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		CHECK((const uint8_t *)t->data == data + data_off + t->offset);
		CHECK(inside(t->data, t->size));
		if (t->size > 0)
			sink += ((const uint8_t *)t->data)[0] +
				((const uint8_t *)t->data)[t->size - 1];
	}
}

static void check_hparams(const struct lm_hparams *hp, const gguf_file *f)
{
	CHECK(hp->arch[0] != '\0');
	CHECK(hp->n_layer >= 1 && hp->n_layer <= LM_MAX_LAYERS);
	CHECK(hp->n_embd >= 1 && hp->n_vocab >= 1 && hp->n_ctx_train >= 1);
	CHECK(hp->rms_eps > 0 && hp->rms_eps < 1);
	CHECK(isfinite(hp->embd_scale) && isfinite(hp->attn_scale) && hp->final_softcap >= 0);
	for (int32_t i = 0; i < hp->n_layer; i++) {
		const struct lm_layer_hparams *l = &hp->layer[i];
		CHECK(l->n_head >= 1 && l->n_head_kv >= 1 && l->n_ff >= 1 && l->head_dim >= 1);
		CHECK(l->n_head % l->n_head_kv == 0);
		CHECK((int64_t)l->n_head * l->head_dim <= (int64_t)1 << 24);
		CHECK(l->rope.n_rot >= 2 && l->rope.n_rot <= l->head_dim && l->rope.n_rot % 2 == 0);
		CHECK(isfinite(l->rope.freq_base) && l->rope.freq_base > 0);
		CHECK(isfinite(l->rope.freq_scale) && l->rope.freq_scale > 0);
		CHECK(l->window >= 0);
		if (l->n_expert > 0)
			CHECK(l->n_expert <= LM_MAX_EXPERTS && l->n_expert_used >= 1 &&
			      l->n_expert_used <= l->n_expert && l->n_ff_exp >= 1);
		else
			CHECK(l->n_expert_used == 0 && l->n_ff_exp == 0);
		CHECK(l->n_ff_shexp >= 0);
		struct kv_geom g = lm_hparams_kv_geom(hp, i);
		if (l->recurrent) {
			/* A state instead of KV rows, of the ssm shape. */
			const struct lm_ssm_params *s = &hp->ssm;
			CHECK(s->conv_kernel >= 2 && s->head_dim >= 1 && s->n_k_heads >= 1 &&
			      s->n_v_heads >= 1 && s->n_v_heads % s->n_k_heads == 0);
			CHECK(g.n_kv_heads == 0 && g.conv > 0 && g.state > 0);
		} else {
			CHECK(g.n_kv_heads == l->n_head_kv && g.head_dim == l->head_dim &&
			      g.window == l->window);
		}
	}
	CHECK(hp->tied == (gguf_find_tensor(f, "output.weight") == NULL));
	const struct gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
	CHECK(embd != NULL && embd->ne[1] == hp->n_vocab);
}

static void check_costs(const gguf_file *f, const struct lm_hparams *hp)
{
	static struct lm_layer_cost layers[LM_MAX_LAYERS];
	struct lm_model_costs c = {.layer = layers};
	lm_diag d = {{0}};
	int rc = lm_model_costs(f, hp, &c, &d);
	if (rc != 0) {
		CHECK_FAIL(rc, &d, LM_EFORMAT);
		return;
	}
	uint64_t sum = c.embd_bytes;
	for (int32_t i = 0; i < hp->n_layer; i++) {
		const struct lm_layer_hparams *l = &hp->layer[i];
		const struct lm_layer_cost *lc = &layers[i];
		if (l->n_expert == 0) {
			CHECK(lc->flops == 2 * lc->params);
		} else {
			/* A token reads only n_expert_used of each expert tensor's n_expert
			 * blocks: between that share of every parameter and all of them. */
			CHECK(lc->flops <= 2 * lc->params);
			CHECK(lc->flops >=
			      2 * lc->params / (uint64_t)l->n_expert * (uint64_t)l->n_expert_used);
		}
		sum += lc->weight_bytes;
	}
	sink += sum + c.head_bytes + c.head_flops;
}

/* A bound weight: rows of row_bytes inside the mapping (its first and last bytes are read). */
static void touch_weight(const struct lm_weight *w)
{
	if (w->data == NULL)
		return;
	CHECK(w->ne0 >= 1 && w->ne1 >= 1 && w->row_bytes > 0);
	const uint8_t *p = w->data;
	sink += p[0] + p[(size_t)w->ne1 * w->row_bytes - 1];
}

/* Layer il's weights: every bound one inside the file, and the shapes engine/weights.h gives
 * each kind of layer (attention or recurrent, dense FFN or experts). */
static void check_layer_weights(const struct lm_model *m, int32_t il)
{
	const struct lm_layer_weights *l = lm_model_layer(m, il);
	CHECK(l != NULL);
	for (int t = 0; t < LM_T_COUNT; t++)
		touch_weight(
			lm_layer_tensor((struct lm_layer_weights *)l, (enum lm_layer_tensor)t));
	const struct lm_layer_hparams *lh = &m->hp.layer[il];
	int64_t e = m->hp.n_embd;
	int64_t q = (int64_t)lh->n_head * lh->head_dim;
	int64_t kv = (int64_t)lh->n_head_kv * lh->head_dim;
	CHECK(l->attn_norm.data != NULL && l->attn_norm.ne0 == e);
	if (lh->recurrent) {
		CHECK(l->wq.data == NULL && l->wqkv.data != NULL && l->wqkv.ne0 == e &&
		      l->ssm_out.data != NULL && l->ssm_out.ne1 == e);
	} else {
		CHECK(l->wq.data != NULL && l->wq.ne0 == e &&
		      l->wq.ne1 == (lh->q_gate ? 2 * q : q));
		CHECK(l->wk.data != NULL && l->wk.ne0 == e && l->wk.ne1 == kv);
		CHECK(l->wv.data == NULL || (l->wv.ne0 == e && l->wv.ne1 == kv));
		CHECK(l->wo.data != NULL && l->wo.ne0 == q && l->wo.ne1 == e);
	}
	CHECK(l->exps.n == lh->n_expert);
	if (lh->n_expert == 0) {
		CHECK(l->w_down.data != NULL && l->w_down.ne0 == lh->n_ff && l->w_down.ne1 == e);
		CHECK(l->w_gate.data == NULL || l->w_gate.ne1 == lh->n_ff);
		return;
	}
	for (int32_t x = 0; x < l->exps.n; x++) {
		touch_weight(&l->exps.gate[x]);
		touch_weight(&l->exps.up[x]);
		touch_weight(&l->exps.down[x]);
		CHECK(l->exps.up[x].data != NULL && l->exps.up[x].ne0 == e &&
		      l->exps.up[x].ne1 == lh->n_ff_exp);
		CHECK(l->exps.down[x].data != NULL && l->exps.down[x].ne0 == lh->n_ff_exp &&
		      l->exps.down[x].ne1 == e);
	}
}

/* The same bytes as a file, through lm_model_open (gguf_open's mmap path, gguf_map's page
 * mappings, weight binding), for the whole model and for its first layer alone. */
static void check_model_open(const uint8_t *data, size_t size, uint64_t fingerprint)
{
	int fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
	if (fd < 0)
		return;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	for (int pass = 0; pass < 2; pass++) {
		struct lm_slice first = {0, 1, true, false};
		struct lm_model m;
		lm_diag d;
		d.msg[0] = '\0';
		int rc = lm_model_open(&m, path, pass == 0 ? NULL : &first, NULL, false, &d);
		if (rc != 0) {
			CHECK_FAIL(rc, &d, LM_EFORMAT, LM_EUNSUPPORTED, LM_ERANGE, LM_ENOMEM);
			continue;
		}
		CHECK(m.fingerprint == fingerprint);
		CHECK(m.weight_bytes <= size);
		check_hparams(&m.hp, m.file);
		/* Shapes as engine/weights.h lists them. */
		int64_t e = m.hp.n_embd, nv = m.hp.n_vocab;
		CHECK(m.tok_embd.ne0 == e && m.tok_embd.ne1 == nv);
		if (pass == 0)
			CHECK(m.output_norm.ne0 == e && m.output_norm.ne1 == 1 &&
			      m.output.ne0 == e && m.output.ne1 == nv);
		/* Every bound weight: rows of row_bytes inside the mapped file. */
		touch_weight(&m.tok_embd);
		touch_weight(&m.output_norm);
		touch_weight(&m.output);
		for (int32_t il = m.slice.begin; il < m.slice.end; il++)
			check_layer_weights(&m, il);
		CHECK(lm_model_layer(&m, m.slice.end) == NULL);
		lm_model_close(&m);
	}
	close(fd);
}

static const char *const texts[] = {
	"",
	"Hello world",
	" the cat sat on the mat. The end!",
	"  leading spaces\n\nand\ttabs  ",
	"caf\xc3\xa9 \xe2\x82\xac 5 \xf0\x9f\x98\x80 \xe2\x96\x81",
	"<s> </s> <unk> <user> <|endoftext|> [EMPTY_0]",
	"\xff\xfe invalid \xc3 utf-8 \xed\xa0\x80 \xf5\x80\x80\x80 \xc0\xaf",
	"1234567890 3.14159 don't we'll I'M",
};

static void check_vocab(const tok_vocab *v)
{
	int32_t n = tok_n_vocab(v);
	CHECK(n >= 1);
	CHECK(tok_model(v) == TOK_MODEL_SPM || tok_model(v) == TOK_MODEL_BPE ||
	      tok_model(v) == TOK_MODEL_GEMMA4);
	int32_t specials[4] = {tok_bos(v), tok_eos(v), tok_eot(v), tok_unk(v)};
	for (int i = 0; i < 4; i++)
		CHECK(specials[i] >= -1 && specials[i] < n);
	CHECK(!tok_add_bos(v) || tok_bos(v) >= 0);
	CHECK(tok_text(v, -1, NULL) == NULL && tok_text(v, n, NULL) == NULL);
	CHECK(tok_piece(v, -1, NULL) == NULL && tok_piece(v, n, NULL) == NULL);
	CHECK(!tok_is_eog(v, -1) && tok_attr(v, n) == 0);
	size_t n_eog = 0;
	const int32_t *eog = tok_eog_ids(v, &n_eog);
	for (size_t i = 0; i < n_eog; i++)
		CHECK(eog[i] >= 0 && eog[i] < n && (i == 0 || eog[i - 1] < eog[i]) &&
		      tok_is_eog(v, eog[i]));
	size_t max_piece = tok_max_piece(v);
	for (int32_t i = 0; i < n && i < 4096; i++) {
		size_t len = 0;
		const char *s = tok_text(v, i, &len);
		CHECK(s != NULL && s[len] == '\0' && len > 0);
		CHECK(tok_find(v, s, len) == i);
		const char *p = tok_piece(v, i, &len);
		CHECK(p != NULL && len <= max_piece);
		sink += len > 0 ? (uint8_t)p[len - 1] : 0;
	}

	size_t cap = tok_stream_cap(v);
	char *out = malloc(cap);
	CHECK(out != NULL);
	for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
		const char *t = texts[k];
		size_t len = strlen(t);
		for (int mode = 0; mode < 4; mode++) {
			bool bos = mode & 1, special = mode & 2;
			int32_t *ids = NULL;
			size_t n_ids = 0;
			lm_diag d;
			d.msg[0] = '\0';
			int rc = tok_encode_alloc_ex(v, t, len,
						     (bos ? TOK_ENC_ADD_BOS : 0) |
							     (special ? TOK_ENC_PARSE_SPECIAL : 0),
						     &ids, &n_ids, &d);
			if (rc != 0) {
				/* Only BOS that the vocabulary lacks is refused. */
				CHECK(bos && tok_bos(v) < 0);
				CHECK_FAIL(rc, &d, LM_EINVAL);
				continue;
			}
			CHECK((n_ids == 0) == (ids == NULL));
			if (bos)
				CHECK(n_ids >= 1 && ids[0] == tok_bos(v));
			for (size_t i = 0; i < n_ids; i++)
				CHECK(ids[i] >= 0 && ids[i] < n);
			/* The capped form agrees, and says how many it needed. */
			int32_t few[4];
			size_t need = 0;
			rc = tok_encode_ex(v, t, len,
					   (bos ? TOK_ENC_ADD_BOS : 0) |
						   (special ? TOK_ENC_PARSE_SPECIAL : 0),
					   few, 4, &need, NULL);
			CHECK(need == n_ids && (rc == 0) == (n_ids <= 4));
			CHECK(rc == 0 || rc == LM_ERANGE);
			CHECK(n_ids == 0 ||
			      memcmp(few, ids, (n_ids < 4 ? n_ids : 4) * sizeof *ids) == 0);
			/* Decoding: pieces through the streaming decoder never overflow its cap. */
			struct tok_stream st;
			tok_stream_init(&st);
			for (size_t i = 0; i < n_ids; i++) {
				size_t got = cap + 1;
				CHECK(tok_stream_push(v, &st, ids[i], out, cap, &got) == 0);
				CHECK(got <= cap);
			}
			CHECK(tok_stream_flush(&st, out, cap) <= 3);
			free(ids);
		}
	}
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	in_lo = data;
	in_hi = data + size;
	gguf_file *f = (gguf_file *)1;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = gguf_open_mem(data, size, &f, &d);
	if (rc != 0) {
		CHECK(f == NULL);
		CHECK_FAIL(rc, &d, LM_EFORMAT, LM_ENOMEM, LM_ERANGE);
		return 0;
	}
	CHECK(f != NULL);
	CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
	uint32_t align = gguf_alignment(f);
	CHECK(align != 0 && (align & (align - 1)) == 0);
	CHECK(gguf_file_size(f) == size && strcmp(gguf_path(f), "<memory>") == 0);
	walk_kvs(f);
	walk_tensors(f, data, size);
	uint64_t fp = gguf_fingerprint(f);
	CHECK(gguf_fingerprint(f) == fp);

	struct lm_hparams *hp = malloc(sizeof *hp);
	CHECK(hp != NULL);
	d.msg[0] = '\0';
	rc = lm_hparams_load(f, hp, &d);
	if (rc == 0) {
		check_hparams(hp, f);
		check_costs(f, hp);
	} else {
		CHECK_FAIL(rc, &d, LM_EFORMAT, LM_EUNSUPPORTED);
	}

	tok_vocab *v = (tok_vocab *)1;
	lm_diag dv;
	dv.msg[0] = '\0';
	int rc_v = tok_load(f, &v, &dv);
	if (rc_v == 0) {
		check_vocab(v);
		tok_free(v);
	} else {
		CHECK(v == NULL);
		CHECK_FAIL(rc_v, &dv, LM_EFORMAT, LM_EUNSUPPORTED, LM_ENOMEM);
	}
	gguf_close(f);

	if (rc == 0)
		check_model_open(data, size, fp);
	free(hp);
	return 0;
}
