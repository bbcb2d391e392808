/* tokenizer.c — encoding (SentencePiece BPE, byte-level BPE and gemma4's BPE), pieces and the
 * streaming decoder.
 *
 * The encoders follow llama.cpp's llm_tokenizer_spm_session / llm_tokenizer_bpe_session (gemma4
 * is the BPE session without GPT-2's byte mapping, over text whose spaces became U+2581): the
 * text is cut into symbols (UTF-8 characters), every adjacent pair that could merge goes into a
 * priority queue, and the best pair is merged repeatedly; a queued pair whose symbols have since
 * changed is skipped when it comes out. SPM ranks a pair by the score of the token its text
 * forms (higher first), BPE by the rank of the merge (lower first); ties go to the leftmost pair.
 *
 * llama.cpp's SPM also keeps a map from merged text back to the pair that formed it, to re-split
 * a final symbol that is not a token. Every merge here forms a token, so only an unmerged single
 * character can fail the lookup, and that goes straight to byte tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "common/tok/tok_internal.h"
#include "common/base/buf.h"
#include "common/tok/tok_unicode.h"

/* Texts longer than this are refused: symbol indices are 32-bit and SPM's escaping triples
 * spaces. */
#define TOK_MAX_INPUT (256u << 20)

struct tok_i32v {
	int32_t *p;
	size_t n, cap;
};

static int tok_i32v_push(struct tok_i32v *v, int32_t x)
{
	if (v->n == v->cap) {
		int32_t *p = lm_grow(v->p, &v->cap, v->n + 1, sizeof *p, 64);
		if (p == NULL)
			return LM_ENOMEM;
		v->p = p;
	}
	v->p[v->n++] = x;
	return 0;
}

/* A symbol: bytes [off, off + n) of the work buffer, linked to its live neighbours. n == 0 once
 * merged into its left neighbour. */
struct tok_sym {
	int32_t prev, next;
	uint32_t off, n;
};

/* A candidate merge of symbols left and right, whose texts then totalled `size` bytes. */
struct tok_bigram {
	double key; /* SPM: the merged token's score; BPE: minus the merge rank. Larger first. */
	int32_t left, right;
	uint32_t size;
};

struct tok_work {
	struct tok_sym *sym;
	size_t n_sym, cap_sym;
	struct tok_bigram *heap;
	size_t n_heap, cap_heap;
	uint8_t *buf; /* the symbols' bytes: an SPM fragment or a BPE word */
	size_t n_buf, cap_buf;
	uint8_t *esc; /* gemma4: the fragment with its spaces escaped */
	size_t n_esc, cap_esc;
	struct tok_u32v cps, ends, scratch;
	struct tok_i32v out;
};

static void tok_work_fini(struct tok_work *w)
{
	free(w->sym);
	free(w->heap);
	free(w->buf);
	free(w->esc);
	tok_u32v_fini(&w->cps);
	tok_u32v_fini(&w->ends);
	tok_u32v_fini(&w->scratch);
	free(w->out.p);
}

/* Appends p[0..n) to the byte buffer (*buf, *len, *cap). */
static int tok_put(uint8_t **buf, size_t *len, size_t *cap, const void *p, size_t n)
{
	if (n == 0) /* the buffer may not exist yet: no memcpy to NULL + 0 */
		return 0;
	if (*cap - *len < n) {
		if (n > SIZE_MAX - *len)
			return LM_ENOMEM;
		uint8_t *b = lm_grow(*buf, cap, *len + n, 1, 256);
		if (b == NULL)
			return LM_ENOMEM;
		*buf = b;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	return 0;
}

static int tok_buf_put(struct tok_work *w, const void *p, size_t n)
{
	return tok_put(&w->buf, &w->n_buf, &w->cap_buf, p, n);
}

/* Appends text[0..len) with every space as U+2581 (llama_escape_whitespace). */
static int tok_put_escaped(uint8_t **buf, size_t *n, size_t *cap, const char *text, size_t len)
{
	static const char escaped_space[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */
	int rc;
	for (size_t i = 0; i < len;) {
		const char *sp = memchr(text + i, ' ', len - i);
		size_t run = sp ? (size_t)(sp - (text + i)) : len - i;
		if ((rc = tok_put(buf, n, cap, text + i, run)) != 0)
			return rc;
		i += run;
		if (sp != NULL) {
			if ((rc = tok_put(buf, n, cap, escaped_space, 3)) != 0)
				return rc;
			i++;
		}
	}
	return 0;
}

/* --- the priority queue --- */

static bool tok_bg_before(const struct tok_bigram *a, const struct tok_bigram *b)
{
	return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static int tok_heap_push(struct tok_work *w, struct tok_bigram bg)
{
	if (w->n_heap == w->cap_heap) {
		struct tok_bigram *p =
			lm_grow(w->heap, &w->cap_heap, w->n_heap + 1, sizeof *p, 256);
		if (p == NULL)
			return LM_ENOMEM;
		w->heap = p;
	}
	size_t i = w->n_heap++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!tok_bg_before(&bg, &w->heap[parent]))
			break;
		w->heap[i] = w->heap[parent];
		i = parent;
	}
	w->heap[i] = bg;
	return 0;
}

static struct tok_bigram tok_heap_pop(struct tok_work *w)
{
	struct tok_bigram top = w->heap[0];
	struct tok_bigram last = w->heap[--w->n_heap];
	size_t i = 0, n = w->n_heap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && tok_bg_before(&w->heap[c + 1], &w->heap[c]))
			c++;
		if (!tok_bg_before(&w->heap[c], &last))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n > 0)
		w->heap[i] = last;
	return top;
}

/* --- symbols and merging, shared by both models --- */

/* Cuts w->buf[0..n_buf) into UTF-8 characters by their lead bytes (clipped at the end). */
static int tok_make_symbols(struct tok_work *w)
{
	w->n_sym = 0;
	w->n_heap = 0;
	for (size_t off = 0; off < w->n_buf;) {
		size_t len = tok_utf8_len(w->buf[off]);
		if (len > w->n_buf - off)
			len = w->n_buf - off;
		if (w->n_sym == w->cap_sym) {
			struct tok_sym *p =
				lm_grow(w->sym, &w->cap_sym, w->n_sym + 1, sizeof *p, 256);
			if (p == NULL)
				return LM_ENOMEM;
			w->sym = p;
		}
		int32_t i = (int32_t)w->n_sym++;
		off += len;
		w->sym[i] = (struct tok_sym){i - 1, off == w->n_buf ? -1 : i + 1,
					     (uint32_t)(off - len), (uint32_t)len};
	}
	return 0;
}

/* Queues the pair (l, r) if it can merge. */
static int tok_try_pair(const tok_vocab *v, struct tok_work *w, int32_t l, int32_t r)
{
	if (l < 0 || r < 0)
		return 0;
	const struct tok_sym *a = &w->sym[l], *b = &w->sym[r];
	const char *text = (const char *)w->buf + a->off;
	double key;
	if (v->model == TOK_MODEL_SPM) {
		int32_t id = tok_find_text(v, text, a->n + b->n);
		if (id < 0)
			return 0;
		key = v->tok[id].score;
	} else {
		int32_t rank = tok_find_merge(v, text, a->n, (const char *)w->buf + b->off, b->n);
		if (rank < 0)
			return 0;
		key = -(double)rank;
	}
	return tok_heap_push(w, (struct tok_bigram){key, l, r, a->n + b->n});
}

static int tok_merge_all(const tok_vocab *v, struct tok_work *w)
{
	int rc;
	for (size_t i = 1; i < w->n_sym; i++)
		if ((rc = tok_try_pair(v, w, (int32_t)i - 1, (int32_t)i)) != 0)
			return rc;
	while (w->n_heap > 0) {
		struct tok_bigram bg = tok_heap_pop(w);
		struct tok_sym *l = &w->sym[bg.left], *r = &w->sym[bg.right];
		/* Symbols only grow rightwards, so an unchanged total means an unchanged pair. */
		if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
			continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = bg.left;
		if ((rc = tok_try_pair(v, w, l->prev, bg.left)) != 0 ||
		    (rc = tok_try_pair(v, w, bg.left, w->sym[bg.left].next)) != 0)
			return rc;
	}
	return 0;
}

/* --- SentencePiece BPE --- */

static int tok_spm_fragment(const tok_vocab *v, struct tok_work *w, const char *text, size_t len,
			    bool prefix_space, lm_diag *d)
{
	int rc;
	w->n_buf = 0;
	if (prefix_space && (rc = tok_put_escaped(&w->buf, &w->n_buf, &w->cap_buf, " ", 1)) != 0)
		return rc;
	if ((rc = tok_put_escaped(&w->buf, &w->n_buf, &w->cap_buf, text, len)) != 0)
		return rc;
	if ((rc = tok_make_symbols(w)) != 0 || (rc = tok_merge_all(v, w)) != 0)
		return rc;
	for (int32_t i = w->n_sym ? 0 : -1; i != -1; i = w->sym[i].next) {
		const struct tok_sym *s = &w->sym[i];
		int32_t id = tok_find_text(v, (const char *)w->buf + s->off, s->n);
		if (id >= 0) {
			if ((rc = tok_i32v_push(&w->out, id)) != 0)
				return rc;
			continue;
		}
		/* Not in the vocabulary: one byte token per byte. */
		for (uint32_t k = 0; k < s->n; k++) {
			uint8_t b = w->buf[s->off + k];
			id = v->byte_tok[b] >= 0 ? v->byte_tok[b] : v->unk;
			if (id < 0)
				return lm_fail(
					d, LM_ENOTFOUND,
					"the vocabulary has no token for byte 0x%02X (no <0x%02X> "
					"byte token, no unknown token)",
					b, b);
			if ((rc = tok_i32v_push(&w->out, id)) != 0)
				return rc;
		}
	}
	return 0;
}

/* --- byte-level BPE, and gemma4's BPE over escaped UTF-8 --- */

/* Whether the word buf[0..n) is newlines only. */
static bool tok_all_newlines(const uint8_t *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != '\n')
			return false;
	return true;
}

/* Tokenizes one word in w->buf, as llm_tokenizer_bpe_session does. */
static int tok_bpe_word(const tok_vocab *v, struct tok_work *w)
{
	int rc;
	int32_t id;
	/* Whole words that skip the merges: any token for ignore_merges vocabularies (llama-bpe);
	 * newline runs for gemma4, whose merges would split them otherwise. */
	if ((v->ignore_merges ||
	     (v->pre == TOK_PRE_NEWLINES && tok_all_newlines(w->buf, w->n_buf))) &&
	    (id = tok_find_text(v, (const char *)w->buf, w->n_buf)) >= 0)
		return tok_i32v_push(&w->out, id);
	if ((rc = tok_make_symbols(w)) != 0 || (rc = tok_merge_all(v, w)) != 0)
		return rc;
	for (size_t i = 0; i < w->n_sym; i++) {
		const struct tok_sym *s = &w->sym[i];
		if (s->n == 0)
			continue;
		const char *st = (const char *)w->buf + s->off;
		if ((id = tok_find_text(v, st, s->n)) >= 0) {
			if ((rc = tok_i32v_push(&w->out, id)) != 0)
				return rc;
			continue;
		}
		/* As llama.cpp: each byte alone, skipped if absent. Byte-level BPE looks the byte up
		 * as a one-character text (of the spelled word), gemma4 as its <0xNN> token. */
		for (uint32_t j = 0; j < s->n; j++) {
			id = v->byte_encode ? tok_find_text(v, st + j, 1)
					    : v->byte_tok[(uint8_t)st[j]];
			if (id >= 0 && (rc = tok_i32v_push(&w->out, id)) != 0)
				return rc;
		}
	}
	return 0;
}

static int tok_bpe_fragment(const tok_vocab *v, struct tok_work *w, const char *text, size_t len)
{
	int rc;
	if (v->escape_spaces) { /* before decoding, as llama.cpp does */
		w->n_esc = 0;
		if ((rc = tok_put_escaped(&w->esc, &w->n_esc, &w->cap_esc, text, len)) != 0)
			return rc;
		text = (const char *)w->esc;
		len = w->n_esc;
	}
	/* Code points as llama.cpp reads them: a malformed byte becomes U+FFFD. */
	w->cps.n = 0;
	for (size_t off = 0; off < len;) {
		uint32_t cp;
		if (!tok_utf8_decode((const uint8_t *)text, len, &off, &cp))
			cp = 0xfffd;
		if ((rc = tok_u32v_push(&w->cps, cp)) != 0)
			return rc;
	}
	if ((rc = tok_pretok_split(v->pre, w->cps.p, w->cps.n, &w->ends, &w->scratch)) != 0)
		return rc;

	size_t b = 0;
	for (size_t k = 0; k < w->ends.n; k++) {
		size_t e = w->ends.p[k];
		/* The word's UTF-8, for byte-level BPE each byte spelled as its GPT-2 character. */
		w->n_buf = 0;
		for (size_t i = b; i < e; i++) {
			uint8_t u[4], m[4];
			size_t nu = tok_utf8_encode(w->cps.p[i], u);
			if (!v->byte_encode) {
				if ((rc = tok_buf_put(w, u, nu)) != 0)
					return rc;
				continue;
			}
			for (size_t j = 0; j < nu; j++) {
				size_t nm = tok_utf8_encode(tok_gpt2_byte_to_cp(u[j]), m);
				if ((rc = tok_buf_put(w, m, nm)) != 0)
					return rc;
			}
		}
		b = e;
		if ((rc = tok_bpe_word(v, w)) != 0)
			return rc;
	}
	return 0;
}

/* --- special tokens in the text --- */

/* A run of text (id < 0) or a token matched in the text. */
struct tok_frag {
	int32_t id;
	uint32_t off, len;
};

struct tok_frags {
	struct tok_frag *p;
	size_t n, cap;
};

static int tok_frag_push(struct tok_frags *f, int32_t id, size_t off, size_t len)
{
	if (f->n == f->cap) {
		struct tok_frag *p = lm_grow(f->p, &f->cap, f->n + 1, sizeof *p, 16);
		if (p == NULL)
			return LM_ENOMEM;
		f->p = p;
	}
	f->p[f->n++] = (struct tok_frag){id, (uint32_t)off, (uint32_t)len};
	return 0;
}

static bool tok_c_space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Splits the text fragments around every occurrence of each special token, longest tokens first,
 * as llama.cpp's tokenizer_st_partition does: user-defined tokens always, control and unknown
 * ones only when parse_special. */
static int tok_partition(const tok_vocab *v, const char *text, size_t len, bool parse_special,
			 struct tok_frags *cur, struct tok_frags *next)
{
	int rc;
	cur->n = 0;
	if (len == 0)
		return 0;
	if ((rc = tok_frag_push(cur, -1, 0, len)) != 0)
		return rc;
	for (size_t u = 0; u < v->n_special; u++) {
		int32_t id = v->special[u];
		const struct tok_token *t = &v->tok[id];
		if (!parse_special && (t->attr & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))
			continue;
		const char *tt = v->text + t->text_off;
		next->n = 0;
		for (size_t k = 0; k < cur->n; k++) {
			struct tok_frag fr = cur->p[k];
			if (fr.id >= 0) {
				if ((rc = tok_frag_push(next, fr.id, 0, 0)) != 0)
					return rc;
				continue;
			}
			size_t pos = fr.off, end = (size_t)fr.off + fr.len;
			for (;;) {
				const char *m = memmem(text + pos, end - pos, tt, t->text_len);
				if (m == NULL)
					break;
				size_t at = (size_t)(m - text), left = at - pos;
				if (t->strip & TOK_STRIP_LEFT)
					while (left > 0 && tok_c_space(text[pos + left - 1]))
						left--;
				if (left > 0 && (rc = tok_frag_push(next, -1, pos, left)) != 0)
					return rc;
				if ((rc = tok_frag_push(next, id, 0, 0)) != 0)
					return rc;
				pos = at + t->text_len;
				if (t->strip & TOK_STRIP_RIGHT)
					while (pos < end && tok_c_space(text[pos]))
						pos++;
			}
			if (pos < end && (rc = tok_frag_push(next, -1, pos, end - pos)) != 0)
				return rc;
		}
		struct tok_frags tmp = *cur;
		*cur = *next;
		*next = tmp;
	}
	return 0;
}

/* --- encoding --- */

static int tok_encode_into(const tok_vocab *v, const char *text, size_t len, unsigned flags,
			   struct tok_work *w, lm_diag *d)
{
	struct tok_frags frags = {0}, spare = {0};
	int rc;
	if ((flags & ~(unsigned)(TOK_ENC_ADD_BOS | TOK_ENC_PARSE_SPECIAL)) != 0)
		return lm_fail(d, LM_EINVAL, "tok_encode_ex: unknown flags 0x%x", flags);
	if (text == NULL && len > 0)
		return lm_fail(d, LM_EINVAL, "tok_encode_ex: no text but a length of %zu", len);
	if (len > TOK_MAX_INPUT)
		return lm_fail(d, LM_ERANGE,
			       "text of %zu bytes is too long to tokenize (at most %u)", len,
			       TOK_MAX_INPUT);
	if (flags & TOK_ENC_ADD_BOS) {
		if (v->bos < 0)
			return lm_fail(d, LM_EINVAL, "the vocabulary has no BOS token");
		if ((rc = tok_i32v_push(&w->out, v->bos)) != 0)
			goto out;
	}
	if ((rc = tok_partition(v, text, len, (flags & TOK_ENC_PARSE_SPECIAL) != 0, &frags,
				&spare)) != 0)
		goto out;
	bool prev_special = true; /* SPM: the dummy space goes before text that starts a run */
	for (size_t k = 0; k < frags.n; k++) {
		const struct tok_frag *fr = &frags.p[k];
		if (fr->id >= 0) {
			rc = tok_i32v_push(&w->out, fr->id);
			prev_special = true;
		} else if (v->model == TOK_MODEL_SPM) {
			rc = tok_spm_fragment(v, w, text + fr->off, fr->len,
					      v->add_space_prefix && prev_special, d);
			prev_special = false;
		} else {
			rc = tok_bpe_fragment(v, w, text + fr->off, fr->len);
		}
		if (rc != 0)
			goto out;
	}
out:
	free(frags.p);
	free(spare.p);
	if (rc == LM_ENOMEM)
		lm_fail(d, LM_ENOMEM, "out of memory tokenizing %zu bytes", len);
	return rc;
}

int tok_encode_ex(const tok_vocab *v, const char *text, size_t len, unsigned flags, int32_t *ids,
		  size_t cap, size_t *n, lm_diag *d)
{
	struct tok_work w = {0};
	int rc = tok_encode_into(v, text, len, flags, &w, d);
	*n = 0;
	if (rc == 0) {
		*n = w.out.n;
		size_t k = w.out.n < cap ? w.out.n : cap;
		if (k > 0)
			memcpy(ids, w.out.p, k * sizeof *ids);
		if (w.out.n > cap)
			rc = lm_fail(d, LM_ERANGE, "%zu token ids do not fit in %zu", w.out.n, cap);
	}
	tok_work_fini(&w);
	return rc;
}

int tok_encode_alloc_ex(const tok_vocab *v, const char *text, size_t len, unsigned flags,
			int32_t **ids, size_t *n, lm_diag *d)
{
	struct tok_work w = {0};
	int rc = tok_encode_into(v, text, len, flags, &w, d);
	*ids = NULL;
	*n = 0;
	if (rc == 0 && w.out.n > 0) {
		*ids = w.out.p; /* ownership passes to the caller */
		*n = w.out.n;
		w.out.p = NULL;
	}
	tok_work_fini(&w);
	return rc;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_bos, int32_t *ids,
	       size_t cap, size_t *n, lm_diag *d)
{
	return tok_encode_ex(v, text, len, add_bos ? TOK_ENC_ADD_BOS : 0, ids, cap, n, d);
}

int tok_encode_alloc(const tok_vocab *v, const char *text, size_t len, bool add_bos, int32_t **ids,
		     size_t *n, lm_diag *d)
{
	return tok_encode_alloc_ex(v, text, len, add_bos ? TOK_ENC_ADD_BOS : 0, ids, n, d);
}

/* --- accessors --- */

enum tok_model tok_model(const tok_vocab *v)
{
	return v->model;
}

int32_t tok_n_vocab(const tok_vocab *v)
{
	return v->n;
}

int32_t tok_bos(const tok_vocab *v)
{
	return v->bos;
}

int32_t tok_eos(const tok_vocab *v)
{
	return v->eos;
}

int32_t tok_eot(const tok_vocab *v)
{
	return v->eot;
}

int32_t tok_unk(const tok_vocab *v)
{
	return v->unk;
}

bool tok_add_bos(const tok_vocab *v)
{
	return v->add_bos && v->bos >= 0;
}

bool tok_is_eog(const tok_vocab *v, int32_t id)
{
	size_t lo = 0, hi = v->n_eog; /* ascending */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v->eog[mid] == id)
			return true;
		if (v->eog[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

const int32_t *tok_eog_ids(const tok_vocab *v, size_t *n)
{
	*n = v->n_eog;
	return v->eog;
}

int32_t tok_find(const tok_vocab *v, const char *text, size_t len)
{
	if (text == NULL)
		return -1;
	return tok_find_text(v, text, len);
}

unsigned tok_attr(const tok_vocab *v, int32_t id)
{
	return id >= 0 && id < v->n ? v->tok[id].attr : 0;
}

const char *tok_text(const tok_vocab *v, int32_t id, size_t *len)
{
	if (id < 0 || id >= v->n)
		return NULL;
	if (len != NULL)
		*len = v->tok[id].text_len;
	return v->text + v->tok[id].text_off;
}

const char *tok_piece(const tok_vocab *v, int32_t id, size_t *len)
{
	if (id < 0 || id >= v->n)
		return NULL;
	if (len != NULL)
		*len = v->tok[id].piece_len;
	return v->pieces + v->tok[id].piece_off;
}

size_t tok_max_piece(const tok_vocab *v)
{
	return v->max_piece;
}

/* --- streaming decoder --- */

void tok_stream_init(struct tok_stream *s)
{
	memset(s, 0, sizeof *s);
}

size_t tok_stream_cap(const tok_vocab *v)
{
	/* Every input byte, held-back ones included, yields at most three output bytes. */
	return 3 * (v->max_piece + sizeof((struct tok_stream *)0)->pend);
}

static size_t tok_put_fffd(char *out)
{
	out[0] = '\xef';
	out[1] = '\xbf';
	out[2] = '\xbd';
	return 3;
}

/* Whether b may follow the n bytes already pending after lead byte `lead`. */
static bool tok_cont_ok(uint8_t lead, size_t n, uint8_t b)
{
	uint8_t lo = 0x80, hi = 0xbf;
	if (n == 1) { /* the second byte excludes overlong forms, surrogates and > U+10FFFF */
		if (lead == 0xe0)
			lo = 0xa0;
		else if (lead == 0xed)
			hi = 0x9f;
		else if (lead == 0xf0)
			lo = 0x90;
		else if (lead == 0xf4)
			hi = 0x8f;
	}
	return b >= lo && b <= hi;
}

static size_t tok_stream_byte(struct tok_stream *s, uint8_t b, char *out)
{
	size_t n = 0;
	if (s->n_pend > 0) {
		if (tok_cont_ok(s->pend[0], s->n_pend, b)) {
			s->pend[s->n_pend++] = b;
			if (s->n_pend < s->need)
				return 0;
			memcpy(out, s->pend, s->need);
			n = s->need;
			s->n_pend = 0;
			return n;
		}
		/* The pending bytes were a maximal ill-formed subpart: one U+FFFD, then b afresh. */
		n = tok_put_fffd(out);
		s->n_pend = 0;
	}
	if (b < 0x80) {
		out[n++] = (char)b;
		return n;
	}
	uint8_t need = b >= 0xc2 && b <= 0xdf   ? 2
		       : b >= 0xe0 && b <= 0xef ? 3
		       : b >= 0xf0 && b <= 0xf4 ? 4
						: 0;
	if (need == 0)
		return n + tok_put_fffd(out + n);
	s->pend[0] = b;
	s->n_pend = 1;
	s->need = need;
	return n;
}

int tok_stream_push(const tok_vocab *v, struct tok_stream *s, int32_t id, char *out, size_t cap,
		    size_t *n_out)
{
	size_t len;
	const char *p = tok_piece(v, id, &len);
	*n_out = 0;
	if (p == NULL || cap < tok_stream_cap(v))
		return LM_ERANGE;
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += tok_stream_byte(s, (uint8_t)p[i], out + n);
	*n_out = n;
	return 0;
}

size_t tok_stream_flush(struct tok_stream *s, char *out, size_t cap)
{
	if (s->n_pend == 0 || cap < 3)
		return 0;
	s->n_pend = 0;
	return tok_put_fffd(out);
}
