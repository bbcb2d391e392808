/* gbnf_vocab.c — a vocabulary's token bytes in a trie, and the masks of grammar states over it.
 * See gbnf.h.
 *
 * A mask is a depth-first walk of the trie in which each node carries the matcher state after
 * its bytes: a child whose byte the state rejects is not entered, so the walk visits only the
 * prefixes the grammar admits. States are interned (hashed by content) and each (state, byte)
 * transition is remembered, so the many nodes that reach the same state (every character of a
 * JSON string leaves the string's state as it was) cost a table lookup instead of a matcher
 * step. Masks of the states a sequence stands in between tokens are cached by content.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/grammar/gbnf_impl.h"

#define GBNF_MASK_CACHE 8
/* Interned states are dropped between masks past these (they are a cache). */
#define GBNF_SOFT_STATES (1 << 14)
#define GBNF_SOFT_WORDS  ((size_t)1 << 20)
#define GBNF_SOFT_TRANS  (1u << 18)
/* And one mask that needs more than this fails with LM_ERANGE. */
#define GBNF_HARD_STATES (1 << 18)
/* Entries of the masker's direct-mapped transition cache. */
#define GM_DC 4096

struct gbnf_vocab {
	int32_t n;
	char *bytes;   /* every token's bytes, end to end */
	uint32_t *off; /* [n + 1] */
	/* The trie: node 0 is the root (the empty prefix). Built linked (child, sib), then laid
	 * out in preorder (the arrays below), so that a walk reads it front to back and skips a
	 * rejected subtree by jumping to its end. */
	int32_t n_nodes;
	int32_t *child, *sib; /* [n_nodes] while building: first child, next sibling */
	int32_t *tok;         /* [n_nodes] first token ending at the node (-1: none) */
	uint8_t *byte;        /* [n_nodes] the byte that leads to the node */
	int32_t *end;         /* [n_nodes] preorder: one past the node's subtree */
	uint16_t *depth;      /* [n_nodes] preorder: bytes from the root */
	int32_t max_depth;
	int32_t *tok_next; /* [n]: next token ending at the same node */
};

struct gbnf_mcache {
	uint64_t hash;
	int32_t *key; /* the state's words */
	int32_t klen, count;
	uint32_t *bits;
	uint64_t used;
};

struct gbnf_masker {
	const struct gbnf *g;
	const struct gbnf_vocab *v;
	struct gbnf_scratch sc;
	struct gbnf_state tmp;
	int32_t *arena; /* interned states' words */
	size_t alen, acap;
	size_t *st_at; /* [n_st] where state i starts in arena; its length is arena[at - 1] */
	int32_t n_st;
	size_t cap_st;
	int32_t *shash; /* open addressing: state id + 1, 0 empty */
	uint32_t shash_cap;
	uint64_t *tkey; /* (state id << 8 | byte) + 1, 0 empty */
	int32_t *tval;  /* next state id, -1 rejected */
	uint32_t tcap, tn;
	int32_t *path; /* [max_depth + 1] the walk's states by depth */
	/* A direct-mapped cache in front of the transitions: a walk inside a string asks the same
	 * few (state, byte) pairs a million times, and this stays in the first-level cache. */
	struct {
		int32_t sid, next;
	} * dc;
	struct gbnf_mcache cache[GBNF_MASK_CACHE];
	uint64_t tick, computed, cached;
};

/* ------------------------------------------------------------------ vocabulary */

static int32_t gv_new_node(struct gbnf_vocab *v, size_t *cap, uint8_t b)
{
	if ((size_t)v->n_nodes >= *cap) {
		size_t c = *cap ? *cap * 2 : 1024;
		int32_t *ch = realloc(v->child, c * sizeof *ch);
		if (ch != NULL)
			v->child = ch;
		int32_t *sb = realloc(v->sib, c * sizeof *sb);
		if (sb != NULL)
			v->sib = sb;
		int32_t *tk = realloc(v->tok, c * sizeof *tk);
		if (tk != NULL)
			v->tok = tk;
		uint8_t *by = realloc(v->byte, c);
		if (by != NULL)
			v->byte = by;
		if (ch == NULL || sb == NULL || tk == NULL || by == NULL)
			return -1;
		*cap = c;
	}
	int32_t id = v->n_nodes++;
	v->child[id] = v->sib[id] = v->tok[id] = -1;
	v->byte[id] = b;
	return id;
}

static int gv_insert(struct gbnf_vocab *v, size_t *cap, int32_t *root_child, int32_t id)
{
	const uint8_t *p = (const uint8_t *)v->bytes + v->off[id];
	size_t n = v->off[id + 1] - v->off[id];
	int32_t node = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t c = i == 0 ? root_child[p[0]] : v->child[node];
		while (i > 0 && c >= 0 && v->byte[c] != p[i])
			c = v->sib[c];
		if (c < 0) {
			if ((c = gv_new_node(v, cap, p[i])) < 0)
				return LM_ENOMEM;
			v->sib[c] = v->child[node];
			v->child[node] = c;
			if (i == 0)
				root_child[p[0]] = c;
		}
		node = c;
	}
	v->tok_next[id] = v->tok[node];
	v->tok[node] = id;
	return 0;
}

/* Renumbers the linked trie in preorder: tok, byte, end and depth; child and sib are freed. */
static int gv_preorder(struct gbnf_vocab *v)
{
	size_t n = (size_t)v->n_nodes;
	int32_t *order = malloc(n * sizeof *order), *stack = malloc(n * sizeof *stack);
	int32_t *tok = malloc(n * sizeof *tok), *end = malloc(n * sizeof *end);
	uint8_t *byte = malloc(n);
	uint16_t *depth = malloc(n * sizeof *depth);
	int rc = LM_ENOMEM;
	if (order == NULL || stack == NULL || tok == NULL || end == NULL || byte == NULL ||
	    depth == NULL)
		goto out;
	/* Iterative preorder: stack holds old ids; a node's new id is its visit number. */
	int32_t top = 0, k = 0;
	stack[top++] = 0;
	uint16_t *dep_old = malloc(n * sizeof *dep_old);
	if (dep_old == NULL)
		goto out;
	dep_old[0] = 0;
	v->max_depth = 0;
	while (top > 0) {
		int32_t old = stack[--top];
		order[k++] = old;
		for (int32_t c = v->child[old]; c >= 0; c = v->sib[c]) {
			dep_old[c] = (uint16_t)(dep_old[old] + 1);
			stack[top++] = c;
		}
	}
	for (int32_t i = 0; i < k; i++) {
		int32_t old = order[i];
		tok[i] = v->tok[old];
		byte[i] = v->byte[old];
		depth[i] = dep_old[old];
		if (depth[i] > v->max_depth)
			v->max_depth = depth[i];
	}
	free(dep_old);
	/* end[i]: the first later node no deeper than i. */
	top = 0;
	for (int32_t i = 0; i < k; i++) {
		while (top > 0 && depth[stack[top - 1]] >= depth[i])
			end[stack[--top]] = i;
		stack[top++] = i;
	}
	while (top > 0)
		end[stack[--top]] = k;
	free(v->tok);
	free(v->byte);
	free(v->child);
	free(v->sib);
	v->child = v->sib = NULL;
	v->tok = tok;
	v->byte = byte;
	v->end = end;
	v->depth = depth;
	tok = end = NULL;
	byte = NULL;
	depth = NULL;
	rc = 0;
out:
	free(order);
	free(stack);
	free(tok);
	free(end);
	free(byte);
	free(depth);
	return rc;
}

int gbnf_vocab_build(int32_t n_vocab, const char *(*piece)(void *ctx, int32_t id, size_t *len),
		     void *ctx, struct gbnf_vocab **out, lm_diag *d)
{
	*out = NULL;
	struct gbnf_vocab *v = calloc(1, sizeof *v);
	size_t total = 0, cap = 0;
	int32_t root_child[256];
	if (v == NULL || n_vocab <= 0)
		goto nomem;
	v->n = n_vocab;
	v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
	v->tok_next = malloc((size_t)n_vocab * sizeof *v->tok_next);
	if (v->off == NULL || v->tok_next == NULL)
		goto nomem;
	for (int32_t i = 0; i < n_vocab; i++) {
		size_t len = 0;
		if (piece(ctx, i, &len) != NULL)
			total += len;
	}
	if (total > UINT32_MAX || (v->bytes = malloc(total + 1)) == NULL)
		goto nomem;
	total = 0;
	for (int32_t i = 0; i < n_vocab; i++) {
		size_t len = 0;
		const char *p = piece(ctx, i, &len);
		v->off[i] = (uint32_t)total;
		if (p != NULL && len > 0)
			memcpy(v->bytes + total, p, len);
		total += p != NULL ? len : 0;
	}
	v->off[n_vocab] = (uint32_t)total;
	for (int i = 0; i < 256; i++)
		root_child[i] = -1;
	if (gv_new_node(v, &cap, 0) < 0)
		goto nomem;
	for (int32_t i = 0; i < n_vocab; i++)
		if (v->off[i + 1] > v->off[i] && gv_insert(v, &cap, root_child, i) != 0)
			goto nomem;
	if (gv_preorder(v) != 0)
		goto nomem;
	*out = v;
	return 0;
nomem:
	gbnf_vocab_free(v);
	return lm_fail(d, LM_ENOMEM, "grammar: out of memory for a vocabulary of %d tokens",
		       n_vocab);
}

void gbnf_vocab_free(struct gbnf_vocab *v)
{
	if (v == NULL)
		return;
	free(v->bytes);
	free(v->off);
	free(v->child);
	free(v->sib);
	free(v->tok);
	free(v->byte);
	free(v->end);
	free(v->depth);
	free(v->tok_next);
	free(v);
}

int32_t gbnf_vocab_n(const struct gbnf_vocab *v)
{
	return v->n;
}

size_t gbnf_vocab_bytes(const struct gbnf_vocab *v)
{
	return v->off[v->n] + ((size_t)v->n + 1) * sizeof *v->off +
	       (size_t)v->n * sizeof *v->tok_next + (size_t)v->n_nodes * (2 * sizeof(int32_t) + 3);
}

const char *gbnf_vocab_piece(const struct gbnf_vocab *v, int32_t id, size_t *len)
{
	if (id < 0 || id >= v->n)
		return NULL;
	*len = v->off[id + 1] - v->off[id];
	return v->bytes + v->off[id];
}

int gbnf_accept_token(const struct gbnf *g, const struct gbnf_vocab *v, struct gbnf_state *s,
		      int32_t id, lm_diag *d)
{
	size_t n = 0;
	const char *p = gbnf_vocab_piece(v, id, &n);
	if (p == NULL || n == 0)
		return lm_fail(d, LM_EINVAL, "grammar: token %d has no text to match", id);
	return gbnf_accept(g, s, p, n, d);
}

bool gbnf_token_ok(const struct gbnf *g, const struct gbnf_vocab *v, const struct gbnf_state *s,
		   int32_t id)
{
	struct gbnf_state t = {0};
	bool ok = gbnf_state_copy(&t, s) == 0 && gbnf_accept_token(g, v, &t, id, NULL) == 0;
	gbnf_state_fini(&t);
	return ok;
}

/* ------------------------------------------------------------------ masker */

static uint64_t gm_hash(const int32_t *w, int32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int32_t i = 0; i < n; i++) {
		h ^= (uint32_t)w[i];
		h *= 0x100000001b3ull;
	}
	return h ^ (h >> 29);
}

int gbnf_masker_new(const struct gbnf *g, const struct gbnf_vocab *v, struct gbnf_masker **out)
{
	struct gbnf_masker *m = calloc(1, sizeof *m);
	*out = NULL;
	if (m == NULL)
		return LM_ENOMEM;
	m->g = g;
	m->v = v;
	m->path = malloc(((size_t)v->max_depth + 1) * sizeof *m->path);
	m->dc = malloc(GM_DC * sizeof *m->dc);
	if (m->path == NULL || m->dc == NULL) {
		gbnf_masker_free(m);
		return LM_ENOMEM;
	}
	for (int i = 0; i < GM_DC; i++)
		m->dc[i].sid = -1;
	*out = m;
	return 0;
}

static void gm_clear(struct gbnf_masker *m)
{
	m->alen = 0;
	m->n_st = 0;
	if (m->shash != NULL)
		memset(m->shash, 0, m->shash_cap * sizeof *m->shash);
	if (m->tkey != NULL)
		memset(m->tkey, 0, m->tcap * sizeof *m->tkey);
	m->tn = 0;
	for (int i = 0; m->dc != NULL && i < GM_DC; i++)
		m->dc[i].sid = -1;
}

void gbnf_masker_free(struct gbnf_masker *m)
{
	if (m == NULL)
		return;
	gbnf_scratch_fini(&m->sc);
	gbnf_state_fini(&m->tmp);
	free(m->arena);
	free(m->st_at);
	free(m->shash);
	free(m->tkey);
	free(m->tval);
	free(m->path);
	free(m->dc);
	for (int i = 0; i < GBNF_MASK_CACHE; i++) {
		free(m->cache[i].key);
		free(m->cache[i].bits);
	}
	free(m);
}

size_t gbnf_masker_bytes(const struct gbnf_masker *m)
{
	if (m == NULL)
		return 0;
	size_t b = sizeof *m + m->acap * sizeof *m->arena + m->cap_st * sizeof *m->st_at +
		   m->shash_cap * sizeof *m->shash + m->tcap * (sizeof *m->tkey + sizeof *m->tval) +
		   GM_DC * sizeof *m->dc + (size_t)m->tmp.cap * sizeof(int32_t);
	for (int i = 0; i < GBNF_MASK_CACHE; i++)
		if (m->cache[i].bits != NULL)
			b += ((size_t)m->v->n + 31) / 32 * 4 + (size_t)m->cache[i].klen * 4;
	return b;
}

void gbnf_masker_stats(const struct gbnf_masker *m, uint64_t *computed, uint64_t *cached)
{
	*computed = m->computed;
	*cached = m->cached;
}

static int gm_rehash_states(struct gbnf_masker *m)
{
	uint32_t cap = m->shash_cap ? m->shash_cap * 2 : 1024;
	int32_t *h = calloc(cap, sizeof *h);
	if (h == NULL)
		return LM_ENOMEM;
	for (int32_t i = 0; i < m->n_st; i++) {
		const int32_t *w = m->arena + m->st_at[i];
		uint32_t k = (uint32_t)gm_hash(w, m->arena[m->st_at[i] - 1]) & (cap - 1);
		while (h[k] != 0)
			k = (k + 1) & (cap - 1);
		h[k] = i + 1;
	}
	free(m->shash);
	m->shash = h;
	m->shash_cap = cap;
	return 0;
}

/* The id of the state w[n], interned at its first sight; negative on error. */
static int32_t gm_intern(struct gbnf_masker *m, const int32_t *w, int32_t n)
{
	if ((uint32_t)m->n_st * 2 >= m->shash_cap && gm_rehash_states(m) != 0)
		return LM_ENOMEM;
	uint64_t h = gm_hash(w, n);
	uint32_t k = (uint32_t)h & (m->shash_cap - 1);
	for (; m->shash[k] != 0; k = (k + 1) & (m->shash_cap - 1)) {
		size_t at = m->st_at[m->shash[k] - 1];
		if (m->arena[at - 1] == n && memcmp(m->arena + at, w, (size_t)n * sizeof *w) == 0)
			return m->shash[k] - 1;
	}
	if (m->n_st >= GBNF_HARD_STATES)
		return LM_ERANGE;
	size_t *sa = lm_grow(m->st_at, &m->cap_st, (size_t)m->n_st + 1, sizeof *sa, 256);
	int32_t *ar = lm_grow(m->arena, &m->acap, m->alen + (size_t)n + 1, sizeof *ar, 4096);
	if (sa != NULL)
		m->st_at = sa;
	if (ar != NULL)
		m->arena = ar;
	if (sa == NULL || ar == NULL)
		return LM_ENOMEM;
	m->arena[m->alen++] = n;
	m->st_at[m->n_st] = m->alen;
	memcpy(m->arena + m->alen, w, (size_t)n * sizeof *w);
	m->alen += (size_t)n;
	m->shash[k] = m->n_st + 1;
	return m->n_st++;
}

static int gm_rehash_trans(struct gbnf_masker *m)
{
	uint32_t cap = m->tcap ? m->tcap * 2 : 4096;
	uint64_t *key = calloc(cap, sizeof *key);
	int32_t *val = malloc(cap * sizeof *val);
	if (key == NULL || val == NULL) {
		free(key);
		free(val);
		return LM_ENOMEM;
	}
	for (uint32_t i = 0; i < m->tcap; i++) {
		if (m->tkey[i] == 0)
			continue;
		uint32_t k = (uint32_t)(m->tkey[i] * 0x9e3779b97f4a7c15ull >> 32) & (cap - 1);
		while (key[k] != 0)
			k = (k + 1) & (cap - 1);
		key[k] = m->tkey[i];
		val[k] = m->tval[i];
	}
	free(m->tkey);
	free(m->tval);
	m->tkey = key;
	m->tval = val;
	m->tcap = cap;
	return 0;
}

/* *next := the state after byte b from state sid (-1 when b is rejected). */
static int gm_next_slow(struct gbnf_masker *m, int32_t sid, uint8_t b, int32_t *next)
{
	if (m->tn * 2 >= m->tcap && gm_rehash_trans(m) != 0)
		return LM_ENOMEM;
	uint64_t key = ((uint64_t)sid << 8 | b) + 1;
	uint32_t k = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & (m->tcap - 1);
	for (; m->tkey[k] != 0; k = (k + 1) & (m->tcap - 1))
		if (m->tkey[k] == key) {
			*next = m->tval[k];
			return 0;
		}
	int rc = gbnf_step_byte(m->g, m->arena + m->st_at[sid], b, &m->tmp, &m->sc);
	if (rc != 0)
		return rc;
	if (m->sc.spent > GBNF_MAX_MASK_WORK)
		return LM_ERANGE;
	*next = -1;
	if (m->tmp.v[2] > 0 && (*next = gm_intern(m, m->tmp.v, m->tmp.len)) < 0)
		return *next;
	m->tkey[k] = key;
	m->tval[k] = *next;
	m->tn++;
	return 0;
}

static int gm_next(struct gbnf_masker *m, int32_t sid, uint8_t b, int32_t *next)
{
	uint32_t h = ((uint32_t)sid * 257u + b) & (GM_DC - 1);
	if (m->dc[h].sid == (sid << 8 | b)) {
		*next = m->dc[h].next;
		return 0;
	}
	int rc = gm_next_slow(m, sid, b, next);
	if (rc == 0 && sid < (1 << 22)) {
		m->dc[h].sid = sid << 8 | b;
		m->dc[h].next = *next;
	}
	return rc;
}

/* The walk: the trie in preorder, each node's state from its parent's (path[depth - 1]); a
 * node whose byte the state rejects is skipped with its subtree. */
static int32_t gm_walk(struct gbnf_masker *m, int32_t sid0, uint32_t *bits)
{
	const struct gbnf_vocab *v = m->v;
	int32_t count = 0;
	m->path[0] = sid0;
	for (int32_t i = 1; i < v->n_nodes;) {
		int32_t sid;
		int rc = gm_next(m, m->path[v->depth[i] - 1], v->byte[i], &sid);
		if (rc != 0)
			return rc;
		if (sid < 0) {
			i = v->end[i];
			continue;
		}
		m->path[v->depth[i]] = sid;
		for (int32_t t = v->tok[i]; t >= 0; t = v->tok_next[t]) {
			bits[t >> 5] |= 1u << (t & 31);
			count++;
		}
		i++;
	}
	return count;
}

int32_t gbnf_masker_mask(struct gbnf_masker *m, const struct gbnf_state *s, uint32_t *bits)
{
	size_t words = ((size_t)m->v->n + 31) / 32;
	uint64_t h = gm_hash(s->v, s->len);
	m->tick++;
	for (int i = 0; i < GBNF_MASK_CACHE; i++) {
		struct gbnf_mcache *c = &m->cache[i];
		if (c->bits != NULL && c->hash == h && c->klen == s->len &&
		    memcmp(c->key, s->v, (size_t)s->len * sizeof *s->v) == 0) {
			memcpy(bits, c->bits, words * sizeof *bits);
			c->used = m->tick;
			m->cached++;
			return c->count;
		}
	}
	if (m->n_st > GBNF_SOFT_STATES || m->alen > GBNF_SOFT_WORDS || m->tn > GBNF_SOFT_TRANS)
		gm_clear(m);
	memset(bits, 0, words * sizeof *bits);
	m->sc.spent = 0;
	int32_t sid = gm_intern(m, s->v, s->len);
	int32_t count = sid < 0 ? sid : gm_walk(m, sid, bits);
	if (count < 0) {
		gm_clear(m);
		return count;
	}
	m->computed++;
	struct gbnf_mcache *c = &m->cache[0];
	for (int i = 1; i < GBNF_MASK_CACHE; i++)
		if (m->cache[i].used < c->used)
			c = &m->cache[i];
	int32_t *key = realloc(c->key, (size_t)s->len * sizeof *key);
	if (key == NULL)
		return count; /* the mask is right; it is just not cached */
	c->key = key;
	if (c->bits == NULL && (c->bits = malloc(words * sizeof *bits)) == NULL)
		return count;
	memcpy(c->key, s->v, (size_t)s->len * sizeof *s->v);
	memcpy(c->bits, bits, words * sizeof *bits);
	c->klen = s->len;
	c->hash = h;
	c->count = count;
	c->used = m->tick;
	return count;
}
