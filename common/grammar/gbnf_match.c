/* gbnf_match.c — matching text against a compiled grammar: llama.cpp's stacks of positions,
 * advanced one byte at a time (a code point is matched when its last byte arrives; until then
 * only stacks whose class can still take it are kept). See gbnf.h.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/base/utf8.h"
#include "common/grammar/gbnf_impl.h"

/* Hash slots for the stacks of the state being built: at most half of them in use. */
#define GBNF_SEEN (2 * GBNF_MAX_STACKS)

/* State layout, as gbnf.h documents it. */
enum { ST_PV = 0, ST_PREM = 1, ST_N = 2, ST_HEAD = 3 };

void gbnf_scratch_fini(struct gbnf_scratch *sc)
{
	free(sc->work);
	free(sc->tmp);
	free(sc->seen_at);
	free(sc->seen_gen);
	memset(sc, 0, sizeof *sc);
}

static int st_reserve(struct gbnf_state *s, size_t more)
{
	size_t cap = (size_t)s->cap;
	int32_t *v = lm_grow(s->v, &cap, (size_t)s->len + more, sizeof *v, 64);
	if (v == NULL)
		return LM_ENOMEM;
	s->v = v;
	s->cap = (int32_t)cap;
	return 0;
}

/* Takes words of work from the step's budget; LM_ERANGE once it is spent. */
static int sc_charge(struct gbnf_scratch *sc, int64_t words)
{
	sc->work_left -= words;
	sc->spent += words;
	return sc->work_left < 0 ? LM_ERANGE : 0;
}

/* Starts building out: no stacks and no partial character, no stack seen yet, and the step's
 * whole budget of work. */
static int st_begin(struct gbnf_state *out, struct gbnf_scratch *sc)
{
	int rc = st_reserve(out, ST_HEAD);
	if (rc != 0)
		return rc;
	if (sc->seen_at == NULL || sc->seen_gen == NULL) {
		free(sc->seen_at);
		free(sc->seen_gen);
		sc->seen_at = malloc(GBNF_SEEN * sizeof *sc->seen_at);
		sc->seen_gen = calloc(GBNF_SEEN, sizeof *sc->seen_gen);
		sc->gen = 0;
		if (sc->seen_at == NULL || sc->seen_gen == NULL)
			return LM_ENOMEM;
	}
	if (++sc->gen == 0) { /* wrapped: every slot's generation is old again */
		memset(sc->seen_gen, 0, GBNF_SEEN * sizeof *sc->seen_gen);
		sc->gen = 1;
	}
	sc->work_left = GBNF_MAX_WORK;
	out->len = ST_HEAD;
	out->v[ST_PV] = 0;
	out->v[ST_PREM] = 0;
	out->v[ST_N] = 0;
	return 0;
}

static uint32_t st_hash(const int32_t *stk, int32_t depth)
{
	uint32_t h = 2166136261u ^ (uint32_t)depth;
	for (int32_t i = 0; i < depth; i++)
		h = (h ^ (uint32_t)stk[i]) * 16777619u;
	return h ^ h >> 16;
}

/* Adds a stack unless the state has it already. */
static int st_add(struct gbnf_state *s, const int32_t *stk, int32_t depth, struct gbnf_scratch *sc)
{
	int rc = sc_charge(sc, (int64_t)depth + 1);
	if (rc != 0)
		return rc;
	uint32_t k = st_hash(stk, depth) & (GBNF_SEEN - 1);
	for (; sc->seen_gen[k] == sc->gen; k = (k + 1) & (GBNF_SEEN - 1)) {
		int32_t at = sc->seen_at[k];
		if (s->v[at] != depth)
			continue;
		if ((rc = sc_charge(sc, depth)) != 0)
			return rc;
		if (depth == 0 || memcmp(s->v + at + 1, stk, (size_t)depth * sizeof *stk) == 0)
			return 0;
	}
	if (s->v[ST_N] >= GBNF_MAX_STACKS)
		return LM_ERANGE;
	if ((rc = st_reserve(s, (size_t)depth + 1)) != 0)
		return rc;
	sc->seen_gen[k] = sc->gen;
	sc->seen_at[k] = s->len;
	s->v[s->len++] = depth;
	if (depth > 0)
		memcpy(s->v + s->len, stk, (size_t)depth * sizeof *stk);
	s->len += depth;
	s->v[ST_N]++;
	return 0;
}

static int sc_push(struct gbnf_scratch *sc, const int32_t *stk, int32_t depth, int32_t a, int32_t b)
{
	int32_t n = depth + (a >= 0) + (b >= 0);
	if (n > GBNF_MAX_STACK_DEPTH || sc_charge(sc, (int64_t)n + 1) != 0)
		return LM_ERANGE;
	int32_t *w = lm_grow(sc->work, &sc->wcap, sc->wlen + (size_t)n + 1, sizeof *w, 256);
	if (w == NULL)
		return LM_ENOMEM;
	sc->work = w;
	if (depth > 0) /* stk may be NULL then (the start state's stacks) */
		memcpy(w + sc->wlen, stk, (size_t)depth * sizeof *w);
	sc->wlen += (size_t)depth;
	if (a >= 0)
		w[sc->wlen++] = a;
	if (b >= 0)
		w[sc->wlen++] = b;
	w[sc->wlen++] = n; /* records end with their depth, so the last one pops */
	return 0;
}

/* Expands the stacks pushed on sc->work until each has a character class on top (or is
 * empty), adding them to out. */
static int st_expand(const struct gbnf *g, struct gbnf_state *out, struct gbnf_scratch *sc)
{
	int rc;
	while (sc->wlen > 0) {
		int32_t depth = sc->work[sc->wlen - 1];
		if ((rc = sc_charge(sc, (int64_t)depth + 1)) != 0)
			return rc;
		size_t start = sc->wlen - 1 - (size_t)depth;
		int32_t *t = lm_grow(sc->tmp, &sc->tcap, (size_t)depth + 1, sizeof *t, 256);
		if (t == NULL)
			return LM_ENOMEM;
		sc->tmp = t;
		memcpy(t, sc->work + start, (size_t)depth * sizeof *t);
		sc->wlen = start;
		if (depth == 0 || g->el[t[depth - 1]].type != GBNF_REF) {
			if ((rc = st_add(out, t, depth, sc)) != 0)
				return rc;
			continue;
		}
		int32_t top = t[depth - 1];
		int32_t next = gbnf_is_end(&g->el[top + 1]) ? -1 : top + 1;
		int32_t a = g->rule_at[g->el[top].value];
		for (;;) {
			if ((rc = sc_push(sc, t, depth - 1, next,
					  gbnf_is_end(&g->el[a]) ? -1 : a)) != 0)
				return rc;
			while (!gbnf_is_end(&g->el[a]))
				a++;
			if (g->el[a].type == GBNF_END)
				break;
			a++;
		}
	}
	return 0;
}

/* Whether the class at pos admits cp; *scanned += the members looked at. */
static bool st_match(const struct gbnf *g, int32_t pos, uint32_t cp, int64_t *scanned)
{
	const struct gbnf_el *e = &g->el[pos];
	bool positive = e->type == GBNF_CHAR || e->type == GBNF_ANY, found = false;
	do {
		++*scanned;
		if (e->type == GBNF_ANY) {
			found = true;
			e++;
		} else if (e[1].type == GBNF_RNG_UPPER) {
			found = found || (e->value <= cp && cp <= e[1].value);
			e += 2;
		} else {
			found = found || e->value == cp;
			e++;
		}
	} while (e->type == GBNF_CHAR_ALT);
	return found == positive;
}

/* Whether the class at pos may match some code point in [lo, hi] (a character whose first
 * bytes have come). A negated class is refused only when one member covers the whole range.
 * *scanned += the members looked at. */
static bool st_match_range(const struct gbnf *g, int32_t pos, uint32_t lo, uint32_t hi,
			   int64_t *scanned)
{
	const struct gbnf_el *e = &g->el[pos];
	bool positive = e->type == GBNF_CHAR || e->type == GBNF_ANY;
	do {
		++*scanned;
		uint32_t a = e->value, b = e->value;
		if (e->type == GBNF_ANY) {
			a = 0;
			b = 0x10FFFF;
			e++;
		} else if (e[1].type == GBNF_RNG_UPPER) {
			b = e[1].value;
			e += 2;
		} else {
			e++;
		}
		if (positive && a <= hi && b >= lo)
			return true;
		if (!positive && a <= lo && b >= hi)
			return false;
	} while (e->type == GBNF_CHAR_ALT);
	return !positive;
}

/* The position after the class at pos. */
static int32_t st_after_class(const struct gbnf *g, int32_t pos)
{
	pos++;
	while (g->el[pos].type == GBNF_CHAR_ALT || g->el[pos].type == GBNF_RNG_UPPER)
		pos++;
	return pos;
}

/* Whether the class at pos is one character alone, as a literal's characters are (not a range,
 * not a negated class, not `.`, not one of several). */
static bool st_lone_char(const struct gbnf *g, int32_t pos)
{
	const struct gbnf_el *e = &g->el[pos];
	return e->type == GBNF_CHAR && e[1].type != GBNF_RNG_UPPER && e[1].type != GBNF_CHAR_ALT;
}

/* out += in's stacks advanced over cp; with `literal`, only the stacks whose top is cp alone. */
static int st_step_cp(const struct gbnf *g, const int32_t *in, uint32_t cp, struct gbnf_state *out,
		      struct gbnf_scratch *sc, bool literal)
{
	int rc;
	for (int32_t i = 0, at = ST_HEAD; i < in[ST_N]; i++) {
		int32_t depth = in[at];
		const int32_t *stk = in + at + 1;
		at += 1 + depth;
		if (depth == 0 || (literal && !st_lone_char(g, stk[depth - 1])))
			continue;
		int64_t scanned = 0;
		bool ok = st_match(g, stk[depth - 1], cp, &scanned);
		if ((rc = sc_charge(sc, scanned)) != 0)
			return rc;
		if (!ok)
			continue;
		int32_t next = st_after_class(g, stk[depth - 1]);
		sc->wlen = 0;
		if ((rc = sc_push(sc, stk, depth - 1, gbnf_is_end(&g->el[next]) ? -1 : next, -1)) !=
			    0 ||
		    (rc = st_expand(g, out, sc)) != 0)
			return rc;
	}
	return 0;
}

/* The stacks of in whose top may take a character in [lo, hi]. */
static int st_keep_partial(const struct gbnf *g, const int32_t *in, uint32_t lo, uint32_t hi,
			   struct gbnf_state *out, struct gbnf_scratch *sc)
{
	int rc;
	for (int32_t i = 0, at = ST_HEAD; i < in[ST_N]; i++) {
		int32_t depth = in[at];
		const int32_t *stk = in + at + 1;
		at += 1 + depth;
		if (depth == 0)
			continue;
		int64_t scanned = 0;
		bool ok = st_match_range(g, stk[depth - 1], lo, hi, &scanned);
		if ((rc = sc_charge(sc, scanned)) != 0 ||
		    (ok && (rc = st_add(out, stk, depth, sc)) != 0))
			return rc;
	}
	return 0;
}

/* Whether a character of `len` bytes whose value lies in [lo, hi] can still be valid UTF-8:
 * not overlong, not a surrogate, not past U+10FFFF (a token of raw bytes may spell any of
 * those, and a decoder would show U+FFFD where the grammar saw a character). */
static bool st_utf8_possible(int32_t len, uint32_t lo, uint32_t hi)
{
	uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
	return hi >= min && lo <= 0x10FFFF && !(lo >= 0xD800 && hi <= 0xDFFF);
}

int gbnf_step_byte(const struct gbnf *g, const int32_t *in, uint8_t b, struct gbnf_state *out,
		   struct gbnf_scratch *sc)
{
	/* ST_PREM holds the bytes still to come of a character, and its length << 8. */
	int32_t pv = in[ST_PV], prem = in[ST_PREM] & 0xFF, len = in[ST_PREM] >> 8;
	int rc;
	if ((rc = st_begin(out, sc)) != 0)
		return rc;
	if (prem == 0) {
		if (b < 0x80)
			return st_step_cp(g, in, b, out, sc, false);
		if (b >= 0xC2 && b <= 0xDF)
			pv = b & 0x1F, prem = len = 2;
		else if (b >= 0xE0 && b <= 0xEF)
			pv = b & 0x0F, prem = len = 3;
		else if (b >= 0xF0 && b <= 0xF4)
			pv = b & 0x07, prem = len = 4;
		else
			return 0; /* not UTF-8: no stack survives */
		prem--;
	} else {
		if ((b & 0xC0) != 0x80)
			return 0;
		pv = pv << 6 | (b & 0x3F);
		prem--;
	}
	uint32_t lo = (uint32_t)pv << (6 * prem), hi = lo | ((1u << (6 * prem)) - 1);
	if (!st_utf8_possible(len, lo, hi))
		return 0;
	if (prem == 0)
		return st_step_cp(g, in, (uint32_t)pv, out, sc, false);
	/* Only the values a valid character of this length can still take. */
	uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
	lo = lo > min ? lo : min;
	hi = hi < 0x10FFFF ? hi : 0x10FFFF;
	out->v[ST_PV] = pv;
	out->v[ST_PREM] = prem | len << 8;
	return st_keep_partial(g, in, lo, hi, out, sc);
}

/* ------------------------------------------------------------------ public */

int gbnf_state_init(const struct gbnf *g, struct gbnf_state *s, lm_diag *d)
{
	struct gbnf_scratch sc = {0};
	memset(s, 0, sizeof *s);
	int rc = st_begin(s, &sc);
	if (rc == 0) {
		int32_t a = g->rule_at[g->root];
		for (;;) {
			if ((rc = sc_push(&sc, NULL, 0, gbnf_is_end(&g->el[a]) ? -1 : a, -1)) != 0)
				break;
			while (!gbnf_is_end(&g->el[a]))
				a++;
			if (g->el[a].type == GBNF_END)
				break;
			a++;
		}
		if (rc == 0)
			rc = st_expand(g, s, &sc);
	}
	gbnf_scratch_fini(&sc);
	if (rc != 0) {
		gbnf_state_fini(s);
		return lm_fail(d, rc, "grammar: the start state passes the matcher's bounds");
	}
	return 0;
}

void gbnf_state_fini(struct gbnf_state *s)
{
	if (s == NULL)
		return;
	free(s->v);
	memset(s, 0, sizeof *s);
}

int gbnf_state_copy(struct gbnf_state *dst, const struct gbnf_state *src)
{
	dst->len = 0;
	int rc = st_reserve(dst, (size_t)src->len);
	if (rc != 0)
		return rc;
	memcpy(dst->v, src->v, (size_t)src->len * sizeof *src->v);
	dst->len = src->len;
	return 0;
}

int gbnf_accept(const struct gbnf *g, struct gbnf_state *s, const void *bytes, size_t n, lm_diag *d)
{
	struct gbnf_scratch sc = {0};
	struct gbnf_state a = {0}, b = {0};
	int rc = gbnf_state_copy(&a, s);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = gbnf_step_byte(g, a.v, ((const uint8_t *)bytes)[i], &b, &sc);
		if (rc == 0 && b.v[ST_N] == 0)
			rc = lm_fail(d, LM_EINVAL, "grammar: byte %zu of the text is not allowed",
				     i);
		struct gbnf_state t = a;
		a = b;
		b = t;
	}
	if (rc == LM_ERANGE)
		lm_fail(d, rc, "grammar: matching the text passes the matcher's bounds");
	else if (rc == LM_ENOMEM)
		lm_fail(d, rc, "grammar: out of memory");
	if (rc == 0) {
		gbnf_state_fini(s);
		*s = a;
		a = (struct gbnf_state){0};
	}
	gbnf_state_fini(&a);
	gbnf_state_fini(&b);
	gbnf_scratch_fini(&sc);
	return rc;
}

int gbnf_accept_literal(const struct gbnf *g, struct gbnf_state *s, const void *bytes, size_t n,
			lm_diag *d)
{
	const uint8_t *p = bytes;
	if (s->v == NULL || s->v[ST_PREM] != 0 || n == 0 || !lm_utf8_valid(p, n))
		return lm_fail(d, LM_EINVAL, "grammar: the text is not where a literal may start");
	struct gbnf_scratch sc = {0};
	struct gbnf_state a = {0}, b = {0};
	int rc = gbnf_state_copy(&a, s);
	for (size_t i = 0, k; rc == 0 && i < n; i += k) {
		k = lm_utf8_len(p + i, n - i);
		uint32_t cp = k == 1 ? p[i] : (uint32_t)(p[i] & (0xFF >> (k + 1)));
		for (size_t j = 1; j < k; j++)
			cp = cp << 6 | (p[i + j] & 0x3F);
		if ((rc = st_begin(&b, &sc)) != 0)
			break;
		rc = st_step_cp(g, a.v, cp, &b, &sc, true);
		if (rc == 0 && b.v[ST_N] == 0)
			rc = lm_fail(d, LM_EINVAL,
				     "grammar: byte %zu of the text is not a literal's here", i);
		struct gbnf_state t = a;
		a = b;
		b = t;
	}
	if (rc == LM_ERANGE || rc == LM_ENOMEM)
		lm_fail(d, rc, "grammar: %s",
			rc == LM_ENOMEM ? "out of memory" : "matching passes the matcher's bounds");
	if (rc == 0) {
		gbnf_state_fini(s);
		*s = a;
		a = (struct gbnf_state){0};
	}
	gbnf_state_fini(&a);
	gbnf_state_fini(&b);
	gbnf_scratch_fini(&sc);
	return rc;
}

bool gbnf_accepting(const struct gbnf_state *s)
{
	if (s->v == NULL || s->v[ST_PREM] != 0)
		return false;
	for (int32_t i = 0, at = ST_HEAD; i < s->v[ST_N]; i++) {
		if (s->v[at] == 0)
			return true;
		at += 1 + s->v[at];
	}
	return false;
}

bool gbnf_complete(const struct gbnf_state *s)
{
	return gbnf_accepting(s) && s->v[ST_N] == 1;
}

bool gbnf_matches(const struct gbnf *g, const char *text, size_t len)
{
	struct gbnf_state s;
	if (gbnf_state_init(g, &s, NULL) != 0)
		return false;
	bool ok = gbnf_accept(g, &s, text, len, NULL) == 0 && gbnf_accepting(&s);
	gbnf_state_fini(&s);
	return ok;
}
