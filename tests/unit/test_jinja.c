/* coordinator/api/jinja: the language pieces of the Jinja engine, each case's expected text
 * checked against @huggingface/jinja 0.5.11 (the reference: tests/node/render_jinja.mjs holds
 * whole templates to it), its quirks included; errors naming their line; the limits; the
 * sandbox. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "coordinator/api/jinja.h"

/* Renders src with the variables of the JSON text vars; the text or NULL with *rc and d. */
static char *render(const char *src, const char *vars, const struct jinja_limits *lim, int *rc,
		    lm_diag *d)
{
	jinja_tmpl *t = jinja_parse(src, strlen(src), d);
	if (t == NULL) {
		*rc = -1;
		return NULL;
	}
	cJSON *v = cJSON_Parse(vars != NULL ? vars : "{}");
	cr_assert_not_null(v, "%s", vars);
	const struct jinja_date date = {2026, 1, 5, 9, 30};
	struct lm_buf out = {0};
	*rc = jinja_render(t, v, &date, lim, &out, d);
	cJSON_Delete(v);
	jinja_free(t);
	if (*rc != 0) {
		lm_buf_fini(&out);
		return NULL;
	}
	return out.p != NULL ? out.p : strdup("");
}

static const struct {
	const char *name, *src, *vars, *want;
} cases[] = {
	{"arithmetic",
	 "{{ 1 + 2 }},{{ 7 // 2 }},{{ -7 // 2 }},{{ 7 % 3 }},{{ -7 % 3 }},{{ 7 / 2 }},{{ 2 ** 10 "
	 "}}",
	 "{}", "3,3,-4,1,-1,3.5,1024"},
	{"floats print as JavaScript numbers",
	 "{{ 1.0 }},{{ 2.5 }},{{ 1.0|tojson }},{{ [1.0, 'a']|tojson }},{{ 'v' + 1.0 }}", "{}",
	 "1.0,2.5,1,[1, \"a\"],v1"},
	{"concatenation", "{{ 'a' ~ 1 ~ true }}", "{}", "a1true"},
	{"tojson spacing", "{{ {'b': [1, 2], 'a': {'x': none}}|tojson }}", "{}",
	 "{\"b\": [1, 2], \"a\": {\"x\": null}}"},
	{"tojson indent", "{{ {'a': [1], 'e': []}|tojson(indent=2) }}", "{}",
	 "{\n  \"a\": [\n    1\n  ],\n  \"e\": []\n}"},
	{"tojson escapes", "{{ 'é\"\\n<'|tojson }}{{ 'é'|tojson(ensure_ascii=true) }}", "{}",
	 "\"é\\\"\\n<\"\"\\u00e9\""},
	{"loop variables",
	 "{% for x in [1,2,3] %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.revindex "
	 "}};{% endfor %}",
	 "{}", "1truefalse3;2falsefalse2;3falsetrue1;"},
	{"loop filter and else",
	 "{% for x in [1,2,3,4] if x is even %}{{ x }}{% else %}none{% endfor %}|{% for x in [] "
	 "%}{% else %}empty{% endfor %}",
	 "{}", "24|empty"},
	{"a set in a loop lives on into the next iteration",
	 "{% for x in [1,2] %}{% if x == 2 %}{{ y }}{% endif %}{% set y = x %}{% endfor %}[{{ y "
	 "}}]",
	 "{}", "1[]"},
	{"continue drops the iteration's output",
	 "{% for x in [1,2,3] %}a{{ x }}{% if x == 2 %}{% continue %}{% endif %}b{% endfor %}",
	 "{}", "a1ba3b"},
	{"break", "{% for x in [1,2,3] %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}",
	 "{}", "1"},
	{"namespace",
	 "{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}{% endfor "
	 "%}{{ ns.n }}",
	 "{}", "6"},
	{"macros see their caller's variables",
	 "{% macro f(a, b='B') %}{{ a }}{{ b }}{{ outer }}{% endmacro %}{% set outer = 'O' %}{{ "
	 "f(1) }}{{ f(2, b='x') }}",
	 "{}", "1BO2xO"},
	{"call block",
	 "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}in{% endcall %}", "{}",
	 "<in>"},
	{"string methods",
	 "{{ '  hi  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() "
	 "}}|{{ 'hello world'.title() }}|{{ 'ab'.startswith('a') }}{{ 'ab'.endswith(('x','b')) "
	 "}}|{{ 'aaa'.replace('a','b',2) }}|{{ '\\n x\\n'.lstrip('\\n') }}|{{ ' a  b '.split() }}",
	 "{}",
	 "hi|[\"a\", \"b\", \"\", \"c\"]|HELLOhello|Hello World|truetrue|bba|x\n|[\"a\", \"b\"]"},
	{"slices and indexes",
	 "{{ 'hello'[1:3] }}{{ 'hello'[-1] }}{{ [1,2,3,4][::-1] }}{{ [1,2,3][1:] }}", "{}",
	 "elo[4, 3, 2, 1][2, 3]"},
	{"filters",
	 "{{ [3,1,2]|sort|join(',') }}|{{ ['b','A','a']|sort|join }}|{{ "
	 "[1,2,2,1]|unique|list|length }}|{{ 'x'|default('d') }}{{ nothing|default('d') }}{{ "
	 "''|default('d', true) }}|{{ -3|abs }}|{{ '42'|int + 1 }}|{{ 'abc'|length }}|{{ "
	 "[1,2]|first }}{{ [1,2]|last }}|{{ 'a\\nb'|indent(2) }}",
	 "{}", "1,2,3|Aab|2|xdd|3|43|3|12|a\n  b"},
	{"dicts",
	 "{% set d = {'b': 1, 'a': 2} %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ "
	 "d.get('c', 'none') }}{{ d|length }}{% for k, v in d|dictsort %}{{ k }}{% endfor %}{{ 'a' "
	 "in d }}",
	 "{}", "b=1;a=2;none2abtrue"},
	{"tests",
	 "{{ 1 is number }}{{ 'a' is string }}{{ none is none }}{{ x is defined }}{{ [1] is "
	 "iterable }}{{ {} is mapping }}{{ 3 is odd }}{{ 'abc' is lower }}{{ 2 not in [1] }}{{ 1 "
	 "is not string }}",
	 "{}", "truetruetruefalsetruetruetruetruetruetrue"},
	{"selectattr and map",
	 "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') "
	 "}}{{ messages|length }}{{ messages[1].content|upper }}",
	 "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
	 "\"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
	 "a|c3B"},
	{"trim_blocks and lstrip_blocks", "a\n  {% if true %}\nb\n  {% endif %}\nc", "{}",
	 "a\nb\nc"},
	{"white space control", "a  {{- 'x' -}}  b{# c #}d{#- x -#} e", "{}", "axbde"},
	{"loose equality", "{{ 1 == 1.0 }}{{ '1' == 1 }}{{ none == nothing }}{{ [] == [] }}", "{}",
	 "truetruetruefalse"},
	{"loose equality of a list or dict against a primitive",
	 "{{ -0.0 != range(1) }}{{ [1] == '1' }}{{ {} == '[object Map]' }}{{ [1, 'a'] == '1,a' }}",
	 "{}", "falsetruetruetrue"},
	{"the first of an empty list, set, reads as undefined",
	 "{% set t = []|first %}[{{ t }}]{% set ns = namespace() %}{% set ns.x = [1]|last %}{{ "
	 "ns.x "
	 "}}{{ t is defined }}",
	 "{}", "[]1false"},
	{"dict literal inside an expression", "{{ {'a': {'b': 1}}['a']['b'] }}", "{}", "1"},
	{"ternary and select", "{{ 'y' if true else 'n' }}{{ 'z' if false }}.", "{}", "y."},
	{"generation tag", "{% generation %}x{% endgeneration %}", "{}", "x"},
	{"set and filter blocks",
	 "{% set s %}a{{ 1 }}{% endset %}[{{ s }}]{% filter upper %}ab{% endfilter %}", "{}",
	 "[a1]AB"},
	{"range", "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 7, 2)|join(',') }}", "{}",
	 "0121,3,5"},
	{"one trailing newline of the template is dropped", "x\n\n", "{}", "x\n"},
	{"input values", "{{ n }} {{ f }} {{ b }} {{ z }} {{ o.k }} {{ l|length }}",
	 "{\"n\": 3, \"f\": 1.5, \"b\": true, \"z\": null, \"o\": {\"k\": \"v\"}, \"l\": [1, 2]}",
	 "3 1.5 true  v 2"},
};

Test(jinja, renders_as_the_reference_does)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		lm_diag d = {{0}};
		int rc;
		char *got = render(cases[i].src, cases[i].vars, NULL, &rc, &d);
		cr_expect_eq(rc, 0, "%s: %s", cases[i].name, d.msg);
		if (got != NULL)
			cr_expect_str_eq(got, cases[i].want, "%s", cases[i].name);
		free(got);
	}
}

static const struct {
	const char *name, *src, *want;
} errors[] = {
	{"raise_exception", "{{ raise_exception('bad') }}", "line 1: bad"},
	{"an operation on undefined", "a\n\n{{ x + 1 }}",
	 "line 3: Cannot perform operation + on undefined values"},
	{"a filter the reference lacks", "\n{{ 'a'|round }}",
	 "line 2: Unknown StringValue filter: round"},
};

/* Errors name the template's line; raise_exception's message is kept as it is. */
Test(jinja, errors_name_the_line)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
		lm_diag d = {{0}};
		int rc;
		char *got = render(errors[i].src, NULL, NULL, &rc, &d);
		cr_expect_null(got, "%s: rendered", errors[i].name);
		free(got);
		cr_expect_str_eq(d.msg, errors[i].want, "%s", errors[i].name);
		cr_expect_eq(rc, i == 0 ? LM_EINVAL : LM_EUNSUPPORTED, "%s: %d", errors[i].name,
			     rc);
	}
}

/* Syntax errors at parse time, with the line; statements that would reach outside the
 * template (include, import, extends) do not exist. */
Test(jinja, parse_errors)
{
	static const struct {
		const char *src, *want;
	} bad[] = {
		{"a\n{% if x %}b", "line 2: Unexpected token type: end of template"},
		{"{% include 'secret.txt' %}", "line 1: Unknown statement type: include"},
		{"{% import 'x' as y %}", "line 1: Unknown statement type: import"},
		{"{% extends 'base' %}", "line 1: Unknown statement type: extends"},
		{"x\ny\n{{ 1 +* 2 }}", "line 3: Unexpected token: MultiplicativeBinaryOperator"},
		{"{{ 'abc }}", "line 1: Unexpected end of input"},
		{"{# open", "line 1: Missing end of comment tag"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lm_diag d = {{0}};
		jinja_tmpl *t = jinja_parse(bad[i].src, strlen(bad[i].src), &d);
		cr_expect_null(t, "%s: parsed", bad[i].src);
		jinja_free(t);
		cr_expect_str_eq(d.msg, bad[i].want, "%s", bad[i].src);
	}
}

/* strftime_now formats the date it is handed, never the clock. */
Test(jinja, strftime_now_formats_the_given_date)
{
	lm_diag d = {{0}};
	int rc;
	char *got = render("{{ strftime_now('%d %b %Y, %B %m %H:%M %%') }}", NULL, NULL, &rc, &d);
	cr_assert_not_null(got, "%s", d.msg);
	cr_expect_str_eq(got, "05 Jan 2026, January 01 09:30 %");
	free(got);
}

/* Each bound is an error that names it and the line where it was reached. */
Test(jinja, limits)
{
	static const struct {
		const char *src;
		struct jinja_limits lim;
		const char *want;
	} cases_[] = {
		{"{% for i in range(1000) %}xxxxxxxxxx{% endfor %}",
		 {.max_output = 100},
		 "line 1: the template's output passes 100 bytes"},
		{"\n{% for i in range(100000) %}{% endfor %}",
		 {.max_steps = 1000},
		 "line 2: range() of 100000 items passes the step limit"},
		{"{% for i in range(500) %}{% for j in range(500) %}{% endfor %}{% endfor %}",
		 {.max_steps = 10000},
		 "the template takes more than 10000 steps"},
		{"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		 {.max_depth = 0},
		 "line 1: macro calls nest deeper than 64"},
		{"{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s "
		 "%}{% endfor %}",
		 {.max_memory = 1 << 20},
		 "the template needs more than 1048576 bytes of memory"},
	};
	for (size_t i = 0; i < sizeof cases_ / sizeof cases_[0]; i++) {
		lm_diag d = {{0}};
		int rc;
		char *got = render(cases_[i].src, NULL, &cases_[i].lim, &rc, &d);
		cr_expect_null(got, "%s: rendered", cases_[i].src);
		free(got);
		cr_expect_eq(rc, LM_ERANGE, "%s: %d %s", cases_[i].src, rc, d.msg);
		cr_expect(strstr(d.msg, cases_[i].want) != NULL, "%s: %s", cases_[i].src, d.msg);
	}
	/* Nesting is bounded at parse time too. */
	char src[1300] = "{{ ";
	for (int i = 0; i < 300; i++)
		strcat(src, "(");
	strcat(src, "1");
	for (int i = 0; i < 300; i++)
		strcat(src, ")");
	strcat(src, " }}");
	lm_diag d = {{0}};
	cr_expect_null(jinja_parse(src, strlen(src), &d));
	cr_expect(strstr(d.msg, "nests deeper than") != NULL, "%s", d.msg);
}

/* The variables cannot replace the globals, and must be an object. */
Test(jinja, variables)
{
	lm_diag d = {{0}};
	int rc;
	char *got = render("x", "{\"raise_exception\": 1}", NULL, &rc, &d);
	cr_expect_null(got);
	cr_expect_str_eq(d.msg, "line 1: Variable already declared: raise_exception");
	got = render("x", "[1]", NULL, &rc, &d);
	cr_expect_null(got);
	cr_expect_str_eq(d.msg, "line 1: the variables are not a JSON object");
}
