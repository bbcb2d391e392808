/* Tests of common/toml: the examples of the TOML 1.0.0 specification (valid ones must parse to
 * the values the specification documents, the ones it marks invalid must be refused), then the
 * edges the specification states in prose, positions and key paths in messages, the limits that
 * protect against hostile input, and every prefix of the examples (which must never crash).
 *
 * Expected values are written by hand from the specification text, in a compact JSON-like form:
 * tables {"k":v} in definition order, arrays [..], strings JSON-escaped, integers in decimal,
 * floats in the shortest form that reads back exactly (with ".0" added when that form looks like
 * an integer), booleans true/false. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/format/toml.h"
#include "common/base/clock.h"

/* ---- the canonical dump ------------------------------------------------------------------- */

struct dbuf {
	char *p;
	size_t n, cap;
};

static void dput(struct dbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		cr_assert_not_null(b->p);
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void dputs(struct dbuf *b, const char *s)
{
	dput(b, s, strlen(s));
}

static void dump_str(struct dbuf *b, const char *s, size_t n)
{
	dputs(b, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[8];
		switch (c) {
		case '"':
			dputs(b, "\\\"");
			break;
		case '\\':
			dputs(b, "\\\\");
			break;
		case '\n':
			dputs(b, "\\n");
			break;
		case '\t':
			dputs(b, "\\t");
			break;
		case '\r':
			dputs(b, "\\r");
			break;
		case '\b':
			dputs(b, "\\b");
			break;
		case '\f':
			dputs(b, "\\f");
			break;
		default:
			if (c < 0x20 || c == 0x7f) {
				snprintf(e, sizeof e, "\\u%04X", c);
				dputs(b, e);
			} else {
				dput(b, (const char *)&c, 1);
			}
		}
	}
	dputs(b, "\"");
}

static void dump_float(struct dbuf *b, double f)
{
	char s[64];
	if (isnan(f)) {
		dputs(b, "nan");
		return;
	}
	if (isinf(f)) {
		dputs(b, f < 0 ? "-inf" : "inf");
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(s, sizeof s, "%.*g", prec, f);
		if (strtod(s, NULL) == f)
			break;
	}
	dputs(b, s);
	if (strpbrk(s, ".e") == NULL)
		dputs(b, ".0");
}

static void dump_value(struct dbuf *b, const struct toml_value *v)
{
	char s[64];
	switch (v->type) {
	case TOML_TABLE:
		dputs(b, "{");
		for (size_t i = 0; i < toml_len(v); i++) {
			const struct toml_kv *kv = toml_entry(v, i);
			if (i > 0)
				dputs(b, ",");
			dump_str(b, kv->key, kv->keylen);
			dputs(b, ":");
			dump_value(b, kv->val);
		}
		dputs(b, "}");
		break;
	case TOML_ARRAY:
		dputs(b, "[");
		for (size_t i = 0; i < toml_len(v); i++) {
			if (i > 0)
				dputs(b, ",");
			dump_value(b, toml_at(v, i));
		}
		dputs(b, "]");
		break;
	case TOML_STRING:
		dump_str(b, v->u.str.s, v->u.str.len);
		break;
	case TOML_INTEGER:
		snprintf(s, sizeof s, "%lld", (long long)v->u.i);
		dputs(b, s);
		break;
	case TOML_FLOAT:
		dump_float(b, v->u.f);
		break;
	case TOML_BOOL:
		dputs(b, v->u.b ? "true" : "false");
		break;
	}
}

/* The dump of a document, or "error <code>: <message>". Caller frees. */
static char *dump(const char *text)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	struct dbuf b = {0};
	int rc = toml_parse(&doc, "t.toml", text, strlen(text), &d);
	if (rc != 0) {
		char e[600];
		snprintf(e, sizeof e, "error %s: %s", lm_err_name(rc), d.msg);
		dputs(&b, e);
		return b.p;
	}
	dump_value(&b, doc.root);
	toml_doc_fini(&doc);
	return b.p;
}

static void expect_doc(const char *text, const char *want)
{
	char *got = dump(text);
	cr_expect_str_eq(got, want, "document:\n%s", text);
	free(got);
}

/* The document must be refused with `code`, and the message must contain `part` (if given). */
static void expect_error(const char *text, int code, const char *part)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	int rc = toml_parse(&doc, "t.toml", text, strlen(text), &d);
	cr_expect_eq(rc, code, "document:\n%s\nreturned %s (%s), expected %s", text,
		     lm_err_name(rc), d.msg, lm_err_name(code));
	if (rc == 0) {
		toml_doc_fini(&doc);
		return;
	}
	cr_expect_null(doc.root);
	if (part != NULL)
		cr_expect(strstr(d.msg, part) != NULL, "message '%s' lacks '%s'", d.msg, part);
}

static void expect_invalid(const char *text)
{
	expect_error(text, LM_EFORMAT, NULL);
}

/* ---- the specification's examples: comments, key/value pairs, keys ------------------------ */

Test(toml_spec, comment)
{
	expect_doc("# This is a full-line comment\n"
		   "key = \"value\"  # This is a comment at the end of a line\n"
		   "another = \"# This is not a comment\"\n",
		   "{\"key\":\"value\",\"another\":\"# This is not a comment\"}");
}

Test(toml_spec, key_value_pair)
{
	expect_doc("key = \"value\"\n", "{\"key\":\"value\"}");
	expect_invalid("key = # INVALID\n");
	expect_invalid("first = \"Tom\" last = \"Preston-Werner\" # INVALID\n");
}

Test(toml_spec, bare_and_quoted_keys)
{
	expect_doc(
		"key = \"value\"\nbare_key = \"value\"\nbare-key = \"value\"\n1234 = \"value\"\n",
		"{\"key\":\"value\",\"bare_key\":\"value\",\"bare-key\":\"value\","
		"\"1234\":\"value\"}");
	expect_doc("\"127.0.0.1\" = \"value\"\n"
		   "\"character encoding\" = \"value\"\n"
		   "\"ʎǝʞ\" = \"value\"\n"
		   "'key2' = \"value\"\n"
		   "'quoted \"value\"' = \"value\"\n",
		   "{\"127.0.0.1\":\"value\",\"character encoding\":\"value\",\"ʎǝʞ\":\"value\","
		   "\"key2\":\"value\",\"quoted \\\"value\\\"\":\"value\"}");
	expect_invalid("= \"no key name\"  # INVALID\n");
	expect_doc("\"\" = \"blank\"     # VALID but discouraged\n", "{\"\":\"blank\"}");
	expect_doc("'' = 'blank'     # VALID but discouraged\n", "{\"\":\"blank\"}");
}

Test(toml_spec, dotted_keys)
{
	expect_doc("name = \"Orange\"\n"
		   "physical.color = \"orange\"\n"
		   "physical.shape = \"round\"\n"
		   "site.\"google.com\" = true\n",
		   "{\"name\":\"Orange\",\"physical\":{\"color\":\"orange\",\"shape\":\"round\"},"
		   "\"site\":{\"google.com\":true}}");
	expect_doc("fruit.name = \"banana\"     # this is best practice\n"
		   "fruit. color = \"yellow\"    # same as fruit.color\n"
		   "fruit . flavor = \"banana\"   # same as fruit.flavor\n",
		   "{\"fruit\":{\"name\":\"banana\",\"color\":\"yellow\",\"flavor\":\"banana\"}}");
	expect_doc("# This makes the key \"fruit\" into a table.\n"
		   "fruit.apple.smooth = true\n\n"
		   "# So then you can add to the table \"fruit\" like so:\n"
		   "fruit.orange = 2\n",
		   "{\"fruit\":{\"apple\":{\"smooth\":true},\"orange\":2}}");
	expect_doc("apple.type = \"fruit\"\norange.type = \"fruit\"\n\n"
		   "apple.skin = \"thin\"\norange.skin = \"thick\"\n\n"
		   "apple.color = \"red\"\norange.color = \"orange\"\n",
		   "{\"apple\":{\"type\":\"fruit\",\"skin\":\"thin\",\"color\":\"red\"},"
		   "\"orange\":{\"type\":\"fruit\",\"skin\":\"thick\",\"color\":\"orange\"}}");
	expect_doc("3.14159 = \"pi\"\n", "{\"3\":{\"14159\":\"pi\"}}");
}

Test(toml_spec, keys_defined_twice)
{
	expect_invalid("# DO NOT DO THIS\nname = \"Tom\"\nname = \"Pradyun\"\n");
	expect_invalid(
		"# THIS WILL NOT WORK\nspelling = \"favorite\"\n\"spelling\" = \"favourite\"\n");
	expect_invalid("# This defines the value of fruit.apple to be an integer.\n"
		       "fruit.apple = 1\n"
		       "# But then this treats fruit.apple like it's a table.\n"
		       "fruit.apple.smooth = true\n");
}

/* ---- strings ------------------------------------------------------------------------------ */

Test(toml_spec, basic_strings)
{
	expect_doc("str = \"I'm a string. \\\"You can quote me\\\". "
		   "Name\\tJos\\u00E9\\nLocation\\tSF.\"\n",
		   "{\"str\":\"I'm a string. \\\"You can quote me\\\". "
		   "Name\\tJosé\\nLocation\\tSF.\"}");
	/* Every escape of the table in the specification. */
	expect_doc("s = \"\\b\\t\\n\\f\\r\\\"\\\\\\u00E9\\U0001F600\"\n",
		   "{\"s\":\"\\b\\t\\n\\f\\r\\\"\\\\é\xF0\x9F\x98\x80\"}");
}

Test(toml_spec, multiline_basic_strings)
{
	expect_doc("str1 = \"\"\"\nRoses are red\nViolets are blue\"\"\"\n"
		   "str2 = \"Roses are red\\nViolets are blue\"\n"
		   "str3 = \"Roses are red\\r\\nViolets are blue\"\n",
		   "{\"str1\":\"Roses are red\\nViolets are blue\","
		   "\"str2\":\"Roses are red\\nViolets are blue\","
		   "\"str3\":\"Roses are red\\r\\nViolets are blue\"}");
	expect_doc("# The following strings are byte-for-byte equivalent:\n"
		   "str1 = \"The quick brown fox jumps over the lazy dog.\"\n\n"
		   "str2 = \"\"\"\nThe quick brown \\\n\n\n  fox jumps over \\\n    the lazy "
		   "dog.\"\"\"\n\n"
		   "str3 = \"\"\"\\\n       The quick brown \\\n       fox jumps over \\\n"
		   "       the lazy dog.\\\n       \"\"\"\n",
		   "{\"str1\":\"The quick brown fox jumps over the lazy dog.\","
		   "\"str2\":\"The quick brown fox jumps over the lazy dog.\","
		   "\"str3\":\"The quick brown fox jumps over the lazy dog.\"}");
	expect_doc("str4 = \"\"\"Here are two quotation marks: \"\". Simple enough.\"\"\"\n"
		   "# str5 = \"\"\"Here are three quotation marks: \"\"\".\"\"\"  # INVALID\n"
		   "str5 = \"\"\"Here are three quotation marks: \"\"\\\".\"\"\"\n"
		   "str6 = \"\"\"Here are fifteen quotation marks: "
		   "\"\"\\\"\"\"\\\"\"\"\\\"\"\"\\\"\"\"\\\".\"\"\"\n\n"
		   "# \"This,\" she said, \"is just a pointless statement.\"\n"
		   "str7 = \"\"\"\"This,\" she said, \"is just a pointless statement.\"\"\"\"\n",
		   "{\"str4\":\"Here are two quotation marks: \\\"\\\". Simple enough.\","
		   "\"str5\":\"Here are three quotation marks: \\\"\\\"\\\".\","
		   "\"str6\":\"Here are fifteen quotation marks: "
		   "\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\".\","
		   "\"str7\":\"\\\"This,\\\" she said, \\\"is just a pointless statement.\\\"\"}");
	expect_invalid("str5 = \"\"\"Here are three quotation marks: \"\"\".\"\"\"  # INVALID\n");
}

Test(toml_spec, literal_strings)
{
	expect_doc("# What you see is what you get.\n"
		   "winpath  = 'C:\\Users\\nodejs\\templates'\n"
		   "winpath2 = '\\\\ServerX\\admin$\\system32\\'\n"
		   "quoted   = 'Tom \"Dubs\" Preston-Werner'\n"
		   "regex    = '<\\i\\c*\\s*>'\n",
		   "{\"winpath\":\"C:\\\\Users\\\\nodejs\\\\templates\","
		   "\"winpath2\":\"\\\\\\\\ServerX\\\\admin$\\\\system32\\\\\","
		   "\"quoted\":\"Tom \\\"Dubs\\\" Preston-Werner\","
		   "\"regex\":\"<\\\\i\\\\c*\\\\s*>\"}");
	expect_doc("regex2 = '''I [dw]on't need \\d{2} apples'''\n"
		   "lines  = '''\nThe first newline is\ntrimmed in raw strings.\n"
		   "   All other whitespace\n   is preserved.\n'''\n",
		   "{\"regex2\":\"I [dw]on't need \\\\d{2} apples\","
		   "\"lines\":\"The first newline is\\ntrimmed in raw strings.\\n"
		   "   All other whitespace\\n   is preserved.\\n\"}");
	expect_doc("quot15 = '''Here are fifteen quotation marks: "
		   "\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"'''\n\n"
		   "# apos15 = '''Here are fifteen apostrophes: ''''''''''''''''''  # INVALID\n"
		   "apos15 = \"Here are fifteen apostrophes: '''''''''''''''\"\n\n"
		   "# 'That,' she said, 'is still pointless.'\n"
		   "str = ''''That,' she said, 'is still pointless.''''\n",
		   "{\"quot15\":\"Here are fifteen quotation marks: "
		   "\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\","
		   "\"apos15\":\"Here are fifteen apostrophes: '''''''''''''''\","
		   "\"str\":\"'That,' she said, 'is still pointless.'\"}");
	expect_invalid("apos15 = '''Here are fifteen apostrophes: ''''''''''''''''''  # INVALID\n");
}

/* ---- numbers and booleans ----------------------------------------------------------------- */

Test(toml_spec, integers)
{
	expect_doc("int1 = +99\nint2 = 42\nint3 = 0\nint4 = -17\n",
		   "{\"int1\":99,\"int2\":42,\"int3\":0,\"int4\":-17}");
	expect_doc("int5 = 1_000\nint6 = 5_349_221\nint7 = 53_49_221  # Indian number system "
		   "grouping\nint8 = 1_2_3_4_5  # VALID but discouraged\n",
		   "{\"int5\":1000,\"int6\":5349221,\"int7\":5349221,\"int8\":12345}");
	expect_doc("a = -0\nb = +0\n", "{\"a\":0,\"b\":0}");
	/* 0xDEADBEEF = 3735928559, 0o01234567 = 342391, 0o755 = 493, 0b11010110 = 214. */
	expect_doc("# hexadecimal with prefix `0x`\nhex1 = 0xDEADBEEF\nhex2 = 0xdeadbeef\n"
		   "hex3 = 0xdead_beef\n\n# octal with prefix `0o`\noct1 = 0o01234567\n"
		   "oct2 = 0o755 # useful for Unix file permissions\n\n"
		   "# binary with prefix `0b`\nbin1 = 0b11010110\n",
		   "{\"hex1\":3735928559,\"hex2\":3735928559,\"hex3\":3735928559,"
		   "\"oct1\":342391,\"oct2\":493,\"bin1\":214}");
	/* "Arbitrary 64-bit signed integers ... should be accepted and handled losslessly." */
	expect_doc("max = 9223372036854775807\nmin = -9223372036854775808\n"
		   "hmax = 0x7fffffffffffffff\n",
		   "{\"max\":9223372036854775807,\"min\":-9223372036854775808,"
		   "\"hmax\":9223372036854775807}");
	/* "If an integer cannot be represented losslessly, an error must be thrown." */
	expect_error("a = 9223372036854775808\n", LM_ERANGE, "does not fit in 64 bits");
	expect_error("a = -9223372036854775809\n", LM_ERANGE, NULL);
	expect_error("a = 0x8000000000000000\n", LM_ERANGE, NULL);
	expect_error("a = 99999999999999999999999999\n", LM_ERANGE, NULL);
	/* "Leading zeros are not allowed." */
	expect_error("a = 012\n", LM_EFORMAT, "leading zeros");
	expect_error("a = -01\n", LM_EFORMAT, "leading zeros");
	expect_error("a = 0_1\n", LM_EFORMAT, "leading zeros");
	/* "Each underscore must be surrounded by at least one digit on each side." */
	expect_invalid("a = 1__000\n");
	expect_invalid("a = 1_\n");
	expect_invalid("a = _1\n");
	expect_invalid("a = 0x_1\n");
	expect_invalid("a = 0x1_\n");
	/* "leading + is not allowed" in prefixed forms; signs are neither; prefixes lowercase. */
	expect_invalid("a = +0x1\n");
	expect_invalid("a = -0x1\n");
	expect_invalid("a = 0X1\n");
	expect_invalid("a = 0o8\n");
	expect_invalid("a = 0b2\n");
	expect_invalid("a = 0x\n");
	expect_invalid("a = 0xg\n");
	expect_invalid("a = +\n");
	expect_invalid("a = -\n");
	expect_invalid("a = 1x\n");
}

static const struct toml_value *parse_one(struct toml_doc *doc, const char *text, const char *key)
{
	lm_diag d = {{0}};
	int rc = toml_parse(doc, "t.toml", text, strlen(text), &d);
	cr_assert_eq(rc, 0, "%s", d.msg);
	const struct toml_value *v = toml_get(doc->root, key);
	cr_assert_not_null(v, "no key %s", key);
	return v;
}

Test(toml_spec, floats)
{
	struct toml_doc doc;
	const char *text = "# fractional\nflt1 = +1.0\nflt2 = 3.1415\nflt3 = -0.01\n\n"
			   "# exponent\nflt4 = 5e+22\nflt5 = 1e06\nflt6 = -2E-2\n\n"
			   "# both\nflt7 = 6.626e-34\nflt8 = 224_617.445_991_228\n";
	static const struct {
		const char *key;
		double want;
	} cases[] = {
		{"flt1", 1.0},  {"flt2", 3.1415}, {"flt3", -0.01},     {"flt4", 5e+22},
		{"flt5", 1e06}, {"flt6", -2E-2},  {"flt7", 6.626e-34}, {"flt8", 224617.445991228},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct toml_value *v = parse_one(&doc, text, cases[i].key);
		cr_expect_eq(v->type, TOML_FLOAT, "%s", cases[i].key);
		cr_expect_eq(v->u.f, cases[i].want, "%s: %.17g", cases[i].key, v->u.f);
		toml_doc_fini(&doc);
	}
	/* "Float values -0.0 and +0.0 are valid and should map according to IEEE 754." */
	const struct toml_value *z = parse_one(&doc, "a = -0.0\n", "a");
	cr_expect(z->u.f == 0.0 && signbit(z->u.f));
	toml_doc_fini(&doc);
	z = parse_one(&doc, "a = +0.0\n", "a");
	cr_expect(z->u.f == 0.0 && !signbit(z->u.f));
	toml_doc_fini(&doc);

	/* The invalid floats of the specification, and the rules its prose states. */
	expect_invalid("invalid_float_1 = .7\n");
	expect_invalid("invalid_float_2 = 7.\n");
	expect_invalid("invalid_float_3 = 3.e+20\n");
	expect_invalid("a = 03.14\n");
	expect_invalid("a = 1._5\n");
	expect_invalid("a = 1_.5\n");
	expect_invalid("a = 1.5_\n");
	expect_invalid("a = 1e_5\n");
	expect_invalid("a = 1e5_\n");
	expect_invalid("a = 1e\n");
	expect_invalid("a = 1e+\n");
	expect_invalid("a = 1.0e1.5\n");
	expect_invalid("a = 1.2.3\n");
	expect_invalid("a = Inf\n");
	expect_invalid("a = NaN\n");
	expect_invalid("a = infinity\n");
	/* The exponent "may include leading zeros"; underscores work in every part. */
	expect_doc("a = 1e007\nb = 1_0.0_1e1_0\nc = 0e0\nd = 0.0\n",
		   "{\"a\":1e+07,\"b\":1.001e+11,\"c\":0.0,\"d\":0.0}");
	/* Out of the binary64 range is an error; underflow to zero is the nearest value. */
	expect_error("a = 1e400\n", LM_ERANGE, "out of the binary64 range");
	expect_error("a = -1e400\n", LM_ERANGE, NULL);
	expect_doc("a = 1e-400\n", "{\"a\":0.0}");
}

Test(toml_spec, special_floats)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	const char *text = "# infinity\nsf1 = inf  # positive infinity\n"
			   "sf2 = +inf # positive infinity\nsf3 = -inf # negative infinity\n\n"
			   "# not a number\nsf4 = nan  # actual sNaN/qNaN encoding is "
			   "implementation-specific\nsf5 = +nan # same as `nan`\n"
			   "sf6 = -nan # valid, actual encoding is implementation-specific\n";
	cr_assert_eq(toml_parse(&doc, "t.toml", text, strlen(text), &d), 0, "%s", d.msg);
	const struct toml_value *r = doc.root;
	cr_expect(isinf(toml_get(r, "sf1")->u.f) && toml_get(r, "sf1")->u.f > 0);
	cr_expect(isinf(toml_get(r, "sf2")->u.f) && toml_get(r, "sf2")->u.f > 0);
	cr_expect(isinf(toml_get(r, "sf3")->u.f) && toml_get(r, "sf3")->u.f < 0);
	for (int i = 4; i <= 6; i++) {
		char k[8];
		snprintf(k, sizeof k, "sf%d", i);
		cr_expect_eq(toml_get(r, k)->type, TOML_FLOAT);
		cr_expect(isnan(toml_get(r, k)->u.f), "%s", k);
	}
	toml_doc_fini(&doc);
}

Test(toml_spec, booleans)
{
	expect_doc("bool1 = true\nbool2 = false\n", "{\"bool1\":true,\"bool2\":false}");
	/* "Always lowercase." */
	expect_invalid("a = True\n");
	expect_invalid("a = FALSE\n");
	expect_invalid("a = truee\n");
}

/* Dates and times are outside what layermesh reads: each example is refused, clearly. */
Test(toml_spec, dates_and_times_are_not_supported)
{
	static const char *const docs[] = {
		"odt1 = 1979-05-27T07:32:00Z\n",
		"odt2 = 1979-05-27T00:32:00-07:00\n",
		"odt3 = 1979-05-27T00:32:00.999999-07:00\n",
		"odt4 = 1979-05-27 07:32:00Z\n",
		"ldt1 = 1979-05-27T07:32:00\n",
		"ldt2 = 1979-05-27T00:32:00.999999\n",
		"ld1 = 1979-05-27\n",
		"lt1 = 07:32:00\n",
		"lt2 = 00:32:00.999999\n",
		"# Top-level table begins.\nname = \"Fido\"\nbreed = \"pug\"\n\n"
		"# Top-level table ends.\n[owner]\nname = \"Regina Dogman\"\n"
		"member_since = 1999-08-04\n",
	};
	for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
		expect_error(docs[i], LM_EUNSUPPORTED, "not supported");
}

/* ---- arrays ------------------------------------------------------------------------------- */

Test(toml_spec, arrays)
{
	expect_doc("integers = [ 1, 2, 3 ]\n"
		   "colors = [ \"red\", \"yellow\", \"green\" ]\n"
		   "nested_arrays_of_ints = [ [ 1, 2 ], [3, 4, 5] ]\n"
		   "nested_mixed_array = [ [ 1, 2 ], [\"a\", \"b\", \"c\"] ]\n"
		   "string_array = [ \"all\", 'strings', \"\"\"are the same\"\"\", '''type''' ]\n\n"
		   "# Mixed-type arrays are allowed\n"
		   "numbers = [ 0.1, 0.2, 0.5, 1, 2, 5 ]\n"
		   "contributors = [\n"
		   "  \"Foo Bar <foo@example.com>\",\n"
		   "  { name = \"Baz Qux\", email = \"bazqux@example.com\", url = "
		   "\"https://example.com/bazqux\" }\n"
		   "]\n",
		   "{\"integers\":[1,2,3],\"colors\":[\"red\",\"yellow\",\"green\"],"
		   "\"nested_arrays_of_ints\":[[1,2],[3,4,5]],"
		   "\"nested_mixed_array\":[[1,2],[\"a\",\"b\",\"c\"]],"
		   "\"string_array\":[\"all\",\"strings\",\"are the same\",\"type\"],"
		   "\"numbers\":[0.1,0.2,0.5,1,2,5],"
		   "\"contributors\":[\"Foo Bar <foo@example.com>\",{\"name\":\"Baz Qux\","
		   "\"email\":\"bazqux@example.com\",\"url\":\"https://example.com/bazqux\"}]}");
	expect_doc("integers2 = [\n  1, 2, 3\n]\n\nintegers3 = [\n  1,\n  2, # this is ok\n]\n",
		   "{\"integers2\":[1,2,3],\"integers3\":[1,2]}");
	expect_doc("a = []\nb = [\n]\nc = [ # comment\n # more\n ]\n",
		   "{\"a\":[],\"b\":[],\"c\":[]}");
	expect_invalid("a = [,]\n");
	expect_invalid("a = [1,,2]\n");
	expect_invalid("a = [1 2]\n");
	expect_invalid("a = [1, 2\n");
	expect_invalid("a = [1, 2,\n# no end\n");
}

/* ---- tables ------------------------------------------------------------------------------- */

Test(toml_spec, tables)
{
	expect_doc("[table]\n", "{\"table\":{}}");
	expect_doc("[table-1]\nkey1 = \"some string\"\nkey2 = 123\n\n"
		   "[table-2]\nkey1 = \"another string\"\nkey2 = 456\n",
		   "{\"table-1\":{\"key1\":\"some string\",\"key2\":123},"
		   "\"table-2\":{\"key1\":\"another string\",\"key2\":456}}");
	expect_doc("[dog.\"tater.man\"]\ntype.name = \"pug\"\n",
		   "{\"dog\":{\"tater.man\":{\"type\":{\"name\":\"pug\"}}}}");
	expect_doc("[a.b.c]            # this is best practice\n"
		   "[ d.e.f ]          # same as [d.e.f]\n"
		   "[ g .  h  . i ]    # same as [g.h.i]\n"
		   "[ j . \"ʞ\" . 'l' ]  # same as [j.\"ʞ\".'l']\n",
		   "{\"a\":{\"b\":{\"c\":{}}},\"d\":{\"e\":{\"f\":{}}},\"g\":{\"h\":{\"i\":{}}},"
		   "\"j\":{\"ʞ\":{\"l\":{}}}}");
	expect_doc("# [x] you\n# [x.y] don't\n# [x.y.z] need these\n"
		   "[x.y.z.w] # for this to work\n\n[x] # defining a super-table afterward is ok\n",
		   "{\"x\":{\"y\":{\"z\":{\"w\":{}}}}}");
	expect_doc("# VALID BUT DISCOURAGED\n[fruit.apple]\n[animal]\n[fruit.orange]\n",
		   "{\"fruit\":{\"apple\":{},\"orange\":{}},\"animal\":{}}");
	expect_doc("# RECOMMENDED\n[fruit.apple]\n[fruit.orange]\n[animal]\n",
		   "{\"fruit\":{\"apple\":{},\"orange\":{}},\"animal\":{}}");
	expect_doc("# Top-level table begins.\nname = \"Fido\"\nbreed = \"pug\"\n\n"
		   "# Top-level table ends.\n[owner]\nname = \"Regina Dogman\"\n",
		   "{\"name\":\"Fido\",\"breed\":\"pug\",\"owner\":{\"name\":\"Regina Dogman\"}}");
	expect_doc("fruit.apple.color = \"red\"\n# Defines a table named fruit\n"
		   "# Defines a table named fruit.apple\n\nfruit.apple.taste.sweet = true\n"
		   "# Defines a table named fruit.apple.taste\n"
		   "# fruit and fruit.apple were already created\n",
		   "{\"fruit\":{\"apple\":{\"color\":\"red\",\"taste\":{\"sweet\":true}}}}");
	expect_doc("[fruit]\napple.color = \"red\"\napple.taste.sweet = true\n\n"
		   "# [fruit.apple]  # INVALID\n# [fruit.apple.taste]  # INVALID\n\n"
		   "[fruit.apple.texture]  # you can add sub-tables\nsmooth = true\n",
		   "{\"fruit\":{\"apple\":{\"color\":\"red\",\"taste\":{\"sweet\":true},"
		   "\"texture\":{\"smooth\":true}}}}");
}

Test(toml_spec, tables_defined_twice)
{
	expect_invalid(
		"# DO NOT DO THIS\n\n[fruit]\napple = \"red\"\n\n[fruit]\norange = \"orange\"\n");
	expect_invalid("# DO NOT DO THIS EITHER\n\n[fruit]\napple = \"red\"\n\n"
		       "[fruit.apple]\ntexture = \"smooth\"\n");
	expect_invalid("[fruit]\napple.color = \"red\"\napple.taste.sweet = true\n\n"
		       "[fruit.apple]  # INVALID\n");
	expect_invalid("[fruit]\napple.color = \"red\"\napple.taste.sweet = true\n\n"
		       "[fruit.apple.taste]  # INVALID\n");
}

Test(toml_spec, inline_tables)
{
	const char *want = "{\"name\":{\"first\":\"Tom\",\"last\":\"Preston-Werner\"},"
			   "\"point\":{\"x\":1,\"y\":2},\"animal\":{\"type\":{\"name\":\"pug\"}}}";
	expect_doc("name = { first = \"Tom\", last = \"Preston-Werner\" }\n"
		   "point = { x = 1, y = 2 }\nanimal = { type.name = \"pug\" }\n",
		   want);
	expect_doc("[name]\nfirst = \"Tom\"\nlast = \"Preston-Werner\"\n\n"
		   "[point]\nx = 1\ny = 2\n\n[animal]\ntype.name = \"pug\"\n",
		   want);
	expect_doc("[product]\ntype = { name = \"Nail\" }\n",
		   "{\"product\":{\"type\":{\"name\":\"Nail\"}}}");
	expect_invalid("[product]\ntype = { name = \"Nail\" }\ntype.edible = false  # INVALID\n");
	expect_doc("[product]\ntype.name = \"Nail\"\n",
		   "{\"product\":{\"type\":{\"name\":\"Nail\"}}}");
	expect_invalid("[product]\ntype.name = \"Nail\"\ntype = { edible = false }  # INVALID\n");
	/* "A terminating comma ... is not permitted"; "No newlines are allowed between the curly
	 * braces unless they are valid within a value." */
	expect_invalid("a = { x = 1, }\n");
	expect_invalid("a = { x = 1,\n y = 2 }\n");
	expect_invalid("a = {\n}\n");
	expect_doc("a = { s = \"\"\"two\nlines\"\"\", l = [\n1,\n2] }\n",
		   "{\"a\":{\"s\":\"two\\nlines\",\"l\":[1,2]}}");
	expect_doc("a = {}\nb = { c = { d = {} } }\n", "{\"a\":{},\"b\":{\"c\":{\"d\":{}}}}");
	expect_invalid("a = { x = 1 y = 2 }\n");
	expect_invalid("a = { x = 1, x = 2 }\n");
}

Test(toml_spec, arrays_of_tables)
{
	expect_doc("[[products]]\nname = \"Hammer\"\nsku = 738594937\n\n"
		   "[[products]]  # empty table within the array\n\n"
		   "[[products]]\nname = \"Nail\"\nsku = 284758393\n\ncolor = \"gray\"\n",
		   "{\"products\":[{\"name\":\"Hammer\",\"sku\":738594937},{},"
		   "{\"name\":\"Nail\",\"sku\":284758393,\"color\":\"gray\"}]}");
	expect_doc("[[fruits]]\nname = \"apple\"\n\n[fruits.physical]  # subtable\n"
		   "color = \"red\"\nshape = \"round\"\n\n"
		   "[[fruits.varieties]]  # nested array of tables\nname = \"red delicious\"\n\n"
		   "[[fruits.varieties]]\nname = \"granny smith\"\n\n\n"
		   "[[fruits]]\nname = \"banana\"\n\n[[fruits.varieties]]\nname = \"plantain\"\n",
		   "{\"fruits\":[{\"name\":\"apple\",\"physical\":{\"color\":\"red\",\"shape\":"
		   "\"round\"},"
		   "\"varieties\":[{\"name\":\"red delicious\"},{\"name\":\"granny smith\"}]},"
		   "{\"name\":\"banana\",\"varieties\":[{\"name\":\"plantain\"}]}]}");
	expect_invalid(
		"# INVALID TOML DOC\n[fruit.physical]  # subtable, but to which parent "
		"element should it belong?\ncolor = \"red\"\nshape = \"round\"\n\n"
		"[[fruit]]  # parser must throw an error upon discovering that \"fruit\" is\n"
		"           # an array rather than a table\nname = \"apple\"\n");
	expect_invalid("# INVALID TOML DOC\nfruits = []\n\n[[fruits]] # Not allowed\n");
	expect_invalid("# INVALID TOML DOC\n[[fruits]]\nname = \"apple\"\n\n"
		       "[[fruits.varieties]]\nname = \"red delicious\"\n\n"
		       "# INVALID: This table conflicts with the previous array of tables\n"
		       "[fruits.varieties]\nname = \"granny smith\"\n");
	expect_invalid("# INVALID TOML DOC\n[[fruits]]\nname = \"apple\"\n\n"
		       "[fruits.physical]\ncolor = \"red\"\nshape = \"round\"\n\n"
		       "# INVALID: This array of tables conflicts with the previous table\n"
		       "[[fruits.physical]]\ncolor = \"green\"\n");
	expect_doc("points = [ { x = 1, y = 2, z = 3 },\n           { x = 7, y = 8, z = 9 },\n"
		   "           { x = 2, y = 4, z = 8 } ]\n",
		   "{\"points\":[{\"x\":1,\"y\":2,\"z\":3},{\"x\":7,\"y\":8,\"z\":9},"
		   "{\"x\":2,\"y\":4,\"z\":8}]}");
}

/* ---- strings: the edges of the escape and character rules -------------------------------- */

Test(toml_strings, escapes_must_be_valid)
{
	expect_error("a = \"\\x41\"\n", LM_EFORMAT, "invalid escape sequence '\\x'");
	expect_invalid("a = \"\\e\"\n"); /* TOML 1.1 only */
	expect_invalid("a = \"\\ \"\n");
	expect_invalid("a = \"\\u12\"\n");
	expect_invalid("a = \"\\u12G4\"\n");
	expect_invalid("a = \"\\U0001F60\"\n");
	/* "The escape codes must be valid Unicode scalar values." */
	expect_error("a = \"\\uD800\"\n", LM_EFORMAT, "not a Unicode scalar value");
	expect_invalid("a = \"\\uDFFF\"\n");
	expect_invalid("a = \"\\U00110000\"\n");
	expect_invalid("a = \"\\UFFFFFFFF\"\n");
	expect_doc("a = \"\\uD7FF\\uE000\\U0010FFFF\\u007F\"\n",
		   "{\"a\":\"\xED\x9F\xBF\xEE\x80\x80\xF4\x8F\xBF\xBF\\u007F\"}");
	/* Literal strings take backslashes as they are. */
	expect_doc("a = '\\x\\u'\n", "{\"a\":\"\\\\x\\\\u\"}");
}

Test(toml_strings, nul_escape_keeps_its_length)
{
	struct toml_doc doc;
	const struct toml_value *v = parse_one(&doc, "a = \"x\\u0000y\"\n\"k\\u0000\" = 1\n", "a");
	cr_expect_eq(v->u.str.len, 3);
	cr_expect_eq(memcmp(v->u.str.s, "x\0y", 4), 0);
	cr_expect_not_null(toml_getn(doc.root, "k\0", 2));
	cr_expect_null(toml_get(doc.root, "k"));
	toml_doc_fini(&doc);
}

Test(toml_strings, single_line_forms_end_on_their_line)
{
	expect_error("a = \"abc\nb = 1\n", LM_EFORMAT, "unterminated string");
	expect_invalid("a = 'abc\n'\n");
	expect_invalid("a = \"abc");
	expect_invalid("a = 'abc");
	expect_error("a = \"\"\"abc\n\n", LM_EFORMAT, "unterminated multi-line string");
	expect_invalid("a = '''abc\n");
	/* Raw control characters are never allowed, tab is. */
	expect_doc("a = \"x\ty\"\nb = 'x\ty'\n", "{\"a\":\"x\\ty\",\"b\":\"x\\ty\"}");
	expect_error("a = \"x\x01y\"\n", LM_EFORMAT, "control character U+0001");
	expect_invalid("a = 'x\x7fy'\n");
	expect_invalid("a = \"\"\"x\x0by\"\"\"\n");
	expect_invalid("a = '''x\x0cy'''\n");
}

Test(toml_strings, multiline_edges)
{
	/* Only the newline right after the delimiter is trimmed; CRLF reads as LF. */
	expect_doc("a = \"\"\"\n\nx\"\"\"\n", "{\"a\":\"\\nx\"}");
	expect_doc("a = '''\r\nx\r\ny'''\r\n", "{\"a\":\"x\\ny\"}");
	expect_doc("a = \"\"\"\"\"\"\"\n", "{\"a\":\"\\\"\"}");
	expect_doc("a = \"\"\"\"\"\"\"\"\n", "{\"a\":\"\\\"\\\"\"}");
	expect_error("a = \"\"\"x\"\"\"\"\"\"\n", LM_EFORMAT, "6 quotes in a row");
	expect_doc("a = ''''''\n", "{\"a\":\"\"}");
	expect_doc("a = \"\"\"\"\"\"\n", "{\"a\":\"\"}");
	/* A line-ending backslash may be followed by spaces; a backslash and spaces mid-line
	 * is an invalid escape. */
	expect_doc("a = \"\"\"x\\   \n   y\"\"\"\n", "{\"a\":\"xy\"}");
	expect_doc("a = \"\"\"x\\\n\n\n\"\"\"\n", "{\"a\":\"x\"}");
	expect_invalid("a = \"\"\"x\\  y\"\"\"\n");
	/* Multi-line strings are values, never keys. */
	expect_error("\"\"\"k\"\"\" = 1\n", LM_EFORMAT, "cannot be a key");
	expect_invalid("'''k''' = 1\n");
}

/* ---- the encoding ------------------------------------------------------------------------- */

Test(toml_encoding, utf8_is_checked)
{
	expect_doc("\"é€😀\" = 'é€😀'\n", "{\"é€😀\":\"é€😀\"}");
	expect_error("a = \"\xC0\xAF\"\n", LM_EFORMAT, "invalid UTF-8"); /* overlong */
	expect_invalid("a = \"\xE0\x80\xAF\"\n");                        /* overlong */
	expect_invalid("a = \"\xED\xA0\x80\"\n");                        /* a surrogate */
	expect_invalid("a = \"\xF4\x90\x80\x80\"\n");                    /* past U+10FFFF */
	expect_invalid("a = \"\xF5\x80\x80\x80\"\n");
	expect_invalid("a = \"\x80\"\n"); /* a lone continuation byte */
	expect_invalid("a = \"\xFF\"\n");
	expect_invalid("a = 1 # \xE2\x82\n"); /* truncated, in a comment */
	expect_invalid("a = 1 # \xE2\x82");   /* truncated at the end of the input */
}

Test(toml_encoding, newlines_and_control_characters)
{
	expect_doc("a = 1\r\nb = 2\r\n", "{\"a\":1,\"b\":2}");
	expect_error("a = 1\rb = 2\n", LM_EFORMAT, "carriage return not followed by a line feed");
	expect_invalid("a = 1\r");
	expect_invalid("a = 1 # comment\r\n# \r comment\n");
	/* "Control characters other than tab ... are not permitted in comments." */
	expect_doc("a = 1 # a\ttab\n", "{\"a\":1}");
	expect_error("a = 1 # \x01\n", LM_EFORMAT, "t.toml:1:9: control character U+0001");
	expect_invalid("# \x7f\n");
	{
		/* An explicit NUL inside the input (not a C string). */
		struct toml_doc doc;
		lm_diag d = {{0}};
		static const char text[] = "a = 1 # x\0y\n";
		cr_expect_eq(toml_parse(&doc, "t.toml", text, sizeof text - 1, &d), LM_EFORMAT);
		cr_expect(strstr(d.msg, "U+0000") != NULL, "%s", d.msg);
	}
	/* A leading byte order mark is skipped; anywhere else it is not whitespace. */
	expect_doc("\xEF\xBB\xBF"
		   "a = 1\n",
		   "{\"a\":1}");
	expect_invalid("a = 1\n\xEF\xBB\xBF"
		       "b = 2\n");
	/* Whitespace is space and tab only. */
	expect_doc("\t a \t=\t 1 \t\n", "{\"a\":1}");
	expect_invalid("a =\xC2\xA0"
		       "1\n");
}

/* ---- table rules beyond the specification's own examples --------------------------------- */

Test(toml_tables, definition_rules)
{
	/* A super-table made implicitly by a header may take dotted keys and be defined later. */
	expect_doc("[a.b.c]\n[a]\nb.d = 1\n", "{\"a\":{\"b\":{\"c\":{},\"d\":1}}}");
	expect_doc("[[a.b]]\nx = 1\n[a]\ny = 2\n", "{\"a\":{\"b\":[{\"x\":1}],\"y\":2}}");
	/* Dotted keys may not reach into a table that a header defined ... */
	expect_invalid("[a.b.c]\nz = 9\n[a]\nb.c.t = 1\n");
	expect_invalid("[a.b.c.d]\nz = 9\n[a]\nb.c.d.k.t = 1\n");
	/* ... nor into one that dotted keys of another section defined. */
	expect_invalid("[a]\nb.c = 1\n[x]\n[a]\n");
	expect_invalid("a.b = 1\n[a]\n");
	expect_invalid("a.b = 1\n[a.b]\n");
	expect_doc("a.b = 1\n[a.c]\n", "{\"a\":{\"b\":1,\"c\":{}}}");
	expect_doc("[t1]\nt2.t3.v = 0\n[t1.t2.t3.t4]\n",
		   "{\"t1\":{\"t2\":{\"t3\":{\"v\":0,\"t4\":{}}}}}");
	expect_invalid("[t1]\nt2.t3.v = 0\n[t1.t2]\n");
	expect_invalid("[t1]\nt2.t3.v = 0\n[t1.t2.t3]\n");
	/* Inline tables and static arrays are sealed. */
	expect_invalid("a = {b = 1}\n[a.c]\n");
	expect_invalid("a = {b = 1}\n[a]\n");
	expect_invalid("a = {}\na.b = 1\n");
	expect_invalid("a = {b = {c = 1}}\n[a.b.d]\n");
	expect_invalid("a = [{b = 1}]\n[[a]]\n");
	expect_invalid("a = [{}]\n[a.b]\n");
	expect_invalid("a = {b = {c = 1}, b.d = 2}\n");
	expect_doc("a = {b.c = 1, b.d = 2}\n", "{\"a\":{\"b\":{\"c\":1,\"d\":2}}}");
	/* Headers and values do not turn into each other. */
	expect_invalid("[[a]]\n[a]\n");
	expect_invalid("[a]\n[[a]]\n");
	expect_invalid("a = 1\n[a]\n");
	expect_invalid("a = 1\n[a.b]\n");
	expect_invalid("a = 1\n[[a]]\n");
	expect_invalid("[a]\nb = 1\n[a.b]\n");
	expect_invalid("[a.b]\n[a]\nb = 1\n");
	expect_invalid("a = [1]\na.b = 2\n");
	expect_invalid("[[a.b]]\n[a]\nb.y = 2\n");
	expect_invalid("a.b = 0\na = {}\n");
	expect_invalid("[tbl]\nx = 1\n[tbl.x]\n");
}

Test(toml_tables, dotted_key_inside_array_element_is_relative)
{
	expect_doc("[[a]]\na.b = 1\n", "{\"a\":[{\"a\":{\"b\":1}}]}");
}

Test(toml_tables, header_syntax)
{
	expect_invalid("[]\n");
	expect_invalid("[a\n");
	expect_invalid("[a.]\n");
	expect_invalid("[.a]\n");
	expect_invalid("[a..b]\n");
	expect_invalid("[ [a]]\n");
	expect_invalid("[[a] ]\n");
	expect_invalid("[a]]\n");
	expect_invalid("[a] b = 1\n");
	expect_invalid("[\"\"\"a\"\"\"]\n");
	expect_doc("[a] # comment\n[[b]]# comment\n", "{\"a\":{},\"b\":[{}]}");
	expect_doc("['a b'.\"c\\td\"]\n", "{\"a b\":{\"c\\td\":{}}}");
	expect_invalid("a.b.c\n");
	expect_invalid("a = 1 b\n");
	expect_invalid("a b = 1\n");
	expect_invalid("a. = 1\n");
	expect_invalid("a..b = 1\n");
	expect_invalid("a = 1\n= 2\n");
	expect_invalid("key=\n");
	expect_doc("a=1\nb.c=\"x\"\n", "{\"a\":1,\"b\":{\"c\":\"x\"}}");
}

/* ---- positions and key paths in messages ------------------------------------------------- */

static void expect_message(const char *text, const char *want)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	cr_expect_neq(toml_parse(&doc, "mesh.toml", text, strlen(text), &d), 0);
	cr_expect_str_eq(d.msg, want, "document:\n%s", text);
}

Test(toml_messages, name_line_column_and_key_path)
{
	expect_message("[model]\nslots = 012\n",
		       "mesh.toml:2:9: model.slots: invalid integer '012': leading zeros are not "
		       "allowed");
	expect_message("a = 1\na = 2\n",
		       "mesh.toml:2:1: a: duplicate key (already an integer, from line 1)");
	expect_message("[[worker]]\nname = 'a'\n[[worker]]\nname = 'b'\n  name = 'c'\n",
		       "mesh.toml:5:3: worker[1].name: duplicate key (already a string, from line "
		       "4)");
	expect_message("a = [1, 2, 0x]\n",
		       "mesh.toml:1:12: a[2]: invalid integer '0x': not a digit of its base");
	expect_message("a = [[1], {b = {c = tru}}]\n",
		       "mesh.toml:1:21: a[1].b.c: invalid value 'tru' (strings must be quoted; "
		       "booleans are lowercase true and false)");
	expect_message("[a.\"b.c\"]\nd = \"\\q\"\n",
		       "mesh.toml:2:6: a.\"b.c\".d: invalid escape sequence '\\q'");
	/* Columns count characters: a tab is one, and so is a two-byte character. */
	expect_message("a =\t\t012\n",
		       "mesh.toml:1:6: a: invalid integer '012': leading zeros are not allowed");
	expect_message("\"é\" = 012\n",
		       "mesh.toml:1:7: \"é\": invalid integer '012': leading zeros "
		       "are not allowed");
	expect_message("[fruit]\napple = 1\n\n[fruit]\n",
		       "mesh.toml:4:2: fruit: table defined twice (first by a header on line 1)");
	expect_message("fruits = []\n[[fruits]]\n",
		       "mesh.toml:2:3: fruits: cannot append a table to an array (defined on line "
		       "1)");
	expect_message("x = 1\ny = 2 3\n",
		       "mesh.toml:2:7: expected a newline after the value, found '3'");
	expect_message("a = \"\"\"\nline\n\\q\"\"\"\n",
		       "mesh.toml:3:1: a: invalid escape sequence '\\q'");
	expect_message("s = \"a\"\n\n  t = \"\xE2\x82\"\n",
		       "mesh.toml:3:8: invalid UTF-8 (byte 0xE2)");
	expect_message("d = 1979-05-27\n", "mesh.toml:1:5: d: date and time values are not "
					   "supported here (write the value as a string)");
}

Test(toml_messages, values_remember_where_they_were_written)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	const char *text = "top = 1\n[[worker]]\nname = \"w0\"\n[[worker]]\n  memory_limit = 5\n"
			   "[a.b]\nc = [1, \n  'x']\n";
	cr_assert_eq(toml_parse(&doc, "mesh.toml", text, strlen(text), &d), 0, "%s", d.msg);
	const struct toml_value *w = toml_get(doc.root, "worker");
	cr_assert_eq(toml_len(w), 2);
	const struct toml_value *ml = toml_get(toml_at(w, 1), "memory_limit");
	cr_expect_eq(ml->line, 5);
	cr_expect_eq(ml->col, 18);
	char path[64];
	cr_expect_str_eq(toml_path(ml, path, sizeof path), "worker[1].memory_limit");
	cr_expect_eq(toml_at(w, 1)->line, 4);
	cr_expect_eq(toml_at(w, 1)->col, 3);
	const struct toml_value *x =
		toml_at(toml_get(toml_get(toml_get(doc.root, "a"), "b"), "c"), 1);
	cr_expect_eq(x->line, 8);
	cr_expect_eq(x->col, 3);
	cr_expect_str_eq(toml_path(x, path, sizeof path), "a.b.c[1]");
	cr_expect_str_eq(toml_path(doc.root, path, sizeof path), "");
	/* A truncated path says so. */
	cr_expect_str_eq(toml_path(ml, path, 12), "worker[1...");

	cr_expect_eq(toml_expect(&doc, ml, TOML_STRING, &d), LM_ECONFIG);
	cr_expect_str_eq(d.msg, "mesh.toml:5:18: worker[1].memory_limit: expected a string, found "
				"integer");
	cr_expect_eq(toml_expect(&doc, ml, TOML_INTEGER, &d), 0);
	cr_expect_eq(toml_fail_at(&d, LM_ERANGE, &doc, toml_get(doc.root, "top"), "too %s", "big"),
		     LM_ERANGE);
	cr_expect_str_eq(d.msg, "mesh.toml:1:7: top: too big");
	/* Keys remember their own position (a dotted key: its last part). */
	const struct toml_kv *kv = toml_entry(toml_at(w, 1), 0);
	cr_expect_eq(kv->line, 5);
	cr_expect_eq(kv->col, 3);
	cr_expect_eq(toml_fail_key(&d, LM_ECONFIG, &doc, kv, "unknown key"), LM_ECONFIG);
	cr_expect_str_eq(d.msg, "mesh.toml:5:3: worker[1].memory_limit: unknown key");
	toml_doc_fini(&doc);
}

Test(toml_messages, paths_quote_keys_that_are_not_bare)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	const char *text = "\"a.b\".'c \"d\"'.\"\" = 1\n";
	cr_assert_eq(toml_parse(&doc, "t.toml", text, strlen(text), &d), 0, "%s", d.msg);
	const struct toml_value *v = toml_get(toml_get(toml_get(doc.root, "a.b"), "c \"d\""), "");
	cr_assert_not_null(v);
	char path[64];
	cr_expect_str_eq(toml_path(v, path, sizeof path), "\"a.b\".\"c \\\"d\\\"\".\"\"");
	toml_doc_fini(&doc);
}

/* ---- accessors ---------------------------------------------------------------------------- */

Test(toml_tree, accessors_and_large_tables)
{
	/* Enough keys that the table is hashed; every key is found and nothing else is. */
	struct dbuf b = {0};
	char line[64];
	for (int i = 0; i < 2000; i++) {
		snprintf(line, sizeof line, "k%d = %d\n", i, i * 7);
		dputs(&b, line);
	}
	struct toml_doc doc;
	lm_diag d = {{0}};
	cr_assert_eq(toml_parse(&doc, "t.toml", b.p, b.n, &d), 0, "%s", d.msg);
	cr_expect_eq(toml_len(doc.root), 2000);
	for (int i = 0; i < 2000; i++) {
		snprintf(line, sizeof line, "k%d", i);
		const struct toml_value *v = toml_get(doc.root, line);
		cr_assert_not_null(v, "%s", line);
		cr_expect_eq(v->u.i, i * 7);
		const struct toml_kv *kv = toml_entry(doc.root, (size_t)i);
		cr_expect_str_eq(kv->key, line);
	}
	cr_expect_null(toml_get(doc.root, "k2000"));
	cr_expect_null(toml_get(doc.root, "k"));
	cr_expect_null(toml_entry(doc.root, 2000));
	cr_expect_null(toml_get(toml_get(doc.root, "k1"), "x")); /* not a table */
	cr_expect_null(toml_at(doc.root, 0));                    /* not an array */
	cr_expect_eq(toml_len(toml_get(doc.root, "k1")), 0);
	cr_expect_eq(toml_len(NULL), 0);
	cr_expect_null(toml_get(NULL, "k1"));
	toml_doc_fini(&doc);
	toml_doc_fini(&doc); /* twice is harmless */
	toml_doc_fini(NULL);
	free(b.p);

	/* Duplicates are caught in hashed tables too. */
	expect_invalid("k0=0\nk1=1\nk2=2\nk3=3\nk4=4\nk5=5\nk6=6\nk7=7\nk8=8\nk9=9\nk3=10\n");
	cr_expect_str_eq(toml_type_name(TOML_BOOL), "boolean");
}

Test(toml_tree, parse_file)
{
	char path[] = "/tmp/lm_test_toml_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	const char *text = "[model]\nslots = 4\nbad = 1979-01-01\n";
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	struct toml_doc doc;
	lm_diag d = {{0}};
	cr_expect_eq(toml_parse_file(&doc, path, &d), LM_EUNSUPPORTED);
	char want[128];
	snprintf(want, sizeof want, "%s:3:7: model.bad:", path);
	cr_expect_eq(strncmp(d.msg, want, strlen(want)), 0, "%s", d.msg);
	unlink(path);
	cr_expect_eq(toml_parse_file(&doc, path, &d), LM_ENOENT);
	cr_expect(strstr(d.msg, path) != NULL);
	cr_expect_eq(toml_parse_file(&doc, "/tmp", &d), LM_EINVAL);
}

/* ---- hostile input ------------------------------------------------------------------------ */

static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
	struct dbuf b = {0};
	dputs(&b, head);
	for (size_t i = 0; i < n; i++)
		dputs(&b, unit);
	dputs(&b, tail);
	return b.p;
}

Test(toml_limits, nesting_depth)
{
	/* TOML_MAX_DEPTH containers below the root are fine; one more is refused. */
	char *ok = repeat("a = ", "[", TOML_MAX_DEPTH, "");
	char *ok2 = repeat(ok, "]", TOML_MAX_DEPTH, "\n");
	expect_error(ok2, 0, NULL);
	char *deep = repeat("a = ", "[", TOML_MAX_DEPTH + 1, "");
	char *deep2 = repeat(deep, "]", TOML_MAX_DEPTH + 1, "\n");
	expect_error(deep2, LM_EFORMAT, "nesting deeper than 64 levels");
	char *inl = repeat("a = ", "{b = ", 100000, "1");
	expect_error(inl, LM_EFORMAT, "nesting deeper");
	char *arr = repeat("a = ", "[", 1000000, "");
	expect_error(arr, LM_EFORMAT, "nesting deeper");
	/* Tables nest through headers and dotted keys too. */
	char *hdr = repeat("[a", ".a", TOML_MAX_DEPTH, "]\n");
	expect_error(hdr, LM_EFORMAT, NULL);
	char *dot = repeat("a", ".a", 100000, " = 1\n");
	expect_error(dot, LM_EFORMAT, NULL);
	char *hok = repeat("[a", ".a", TOML_MAX_DEPTH - 1, "]\nx = 1\n");
	expect_error(hok, 0, NULL);
	free(ok);
	free(ok2);
	free(deep);
	free(deep2);
	free(inl);
	free(arr);
	free(hdr);
	free(dot);
	free(hok);
}

/* Linear time: a quadratic step anywhere would take minutes on these (the test would time
 * out); each of them parses in well under a second. */
Test(toml_limits, long_inputs_are_linear, .timeout = 60)
{
	struct {
		const char *head, *unit, *tail;
		size_t n;
	} cases[] = {
		{"a = [", "1,", "]\n", 1000000},               /* one long line */
		{"", "[[w]]\nx = 1\n", "", 200000},            /* many array-of-table elements */
		{"s = \"", "abcdefgh", "\"\n", 1000000},       /* a long string */
		{"s = \"", "\\u00e9", "\"\n", 500000},         /* escapes */
		{"", "# comment\n", "", 500000},               /* comments */
		{"a = [", "{x = 1, y = 'z'},", "]\n", 200000}, /* inline tables */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *text = repeat(cases[i].head, cases[i].unit, cases[i].n, cases[i].tail);
		double t0 = lm_now_s();
		expect_error(text, 0, NULL);
		double dt = lm_now_s() - t0;
		cr_expect_lt(dt, 5.0, "case %zu took %.2f s", i, dt);
		free(text);
	}
	/* Many distinct keys in one table, and an error at the end of a very long line (its
	 * column is counted once, not per value). */
	struct dbuf b = {0};
	char line[48];
	for (int i = 0; i < 300000; i++) {
		snprintf(line, sizeof line, "key_%d = %d\n", i, i);
		dputs(&b, line);
	}
	double t0 = lm_now_s();
	expect_error(b.p, 0, NULL);
	cr_expect_lt(lm_now_s() - t0, 5.0);
	free(b.p);
	char *bad = repeat("a = [", "1, ", 1000000, "x]\n");
	expect_error(bad, LM_EFORMAT, "t.toml:1:3000006:");
	free(bad);
}

Test(toml_limits, size_cap)
{
	struct toml_doc doc;
	lm_diag d = {{0}};
	cr_expect_eq(toml_parse(&doc, "t.toml", "", (size_t)TOML_MAX_INPUT + 1, &d), LM_ERANGE);
	cr_expect_eq(toml_parse(&doc, "t.toml", NULL, 0, &d), 0);
	cr_expect_eq(toml_len(doc.root), 0);
	toml_doc_fini(&doc);
}

/* Every prefix of every example document, and seeded single-byte corruptions of them, parse
 * or fail cleanly (under ASan and UBSan this is the crash test). */
Test(toml_limits, prefixes_and_corruptions_never_crash, .timeout = 60)
{
	static const char *const docs[] = {
		"[[fruits]]\nname = \"apple\"\n\n[fruits.physical]  # subtable\ncolor = \"red\"\n"
		"[[fruits.varieties]]\nname = \"red delicious\"\n[[fruits]]\nname = \"banana\"\n",
		"str6 = \"\"\"Here are fifteen quotation marks: \"\"\\\"\"\"\\\"\"\"\\\".\"\"\"\n"
		"str7 = \"\"\"\"This,\" she said.\"\"\"\"\nq = '''x''y'''\nl = 'C:\\x'\n",
		"a = { b = [1, 2.5e-3, -inf, +nan], c.d = 'x', \"e\\u00E9\" = { f = true } }\n"
		"hex = 0xdead_beef\noct = 0o755\nbin = 0b1101\nflt = 224_617.445_991_228\n",
		"s = \"\"\"\\\n  The quick \\\n  fox.\\\n  \"\"\"\nu = \"\\U0001F600 \\t \\\\\"\r\n"
		"[a.b.c]\n[a]\nb.d = 1\n\"ʎǝʞ\" = \"value\"\n",
	};
	uint64_t rng = 0x2545F4914F6CDD1Dull;
	for (size_t k = 0; k < sizeof docs / sizeof docs[0]; k++) {
		size_t n = strlen(docs[k]);
		char *buf = malloc(n + 1);
		for (size_t len = 0; len <= n; len++) {
			/* An exact-size heap copy, so ASan sees any read past the end. */
			char *p = malloc(len ? len : 1);
			memcpy(p, docs[k], len);
			struct toml_doc doc;
			lm_diag d = {{0}};
			int rc = toml_parse(&doc, "t.toml", p, len, &d);
			cr_expect(rc == 0 || (rc < 0 && d.msg[0] != '\0'));
			toml_doc_fini(&doc);
			free(p);
		}
		for (int round = 0; round < 3000; round++) {
			memcpy(buf, docs[k], n);
			for (int m = 0; m < 3; m++) {
				rng ^= rng << 13;
				rng ^= rng >> 7;
				rng ^= rng << 17;
				buf[rng % n] = (char)(rng >> 32);
			}
			char *p = malloc(n);
			memcpy(p, buf, n);
			struct toml_doc doc;
			lm_diag d = {{0}};
			int rc = toml_parse(&doc, "t.toml", p, n, &d);
			cr_expect(rc == 0 || (rc < 0 && d.msg[0] != '\0'));
			toml_doc_fini(&doc);
			free(p);
		}
		free(buf);
	}
}
