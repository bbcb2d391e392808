/* test_json_schema.c — JSON schemas to GBNF: texts the grammar must accept and must refuse,
 * written by hand from the schema's meaning; refusals naming the keyword; and a request's
 * structured-output fields. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "coordinator/api/json_schema.h"

static struct gbnf *schema_grammar(const char *schema_json)
{
	cJSON *s = cJSON_Parse(schema_json);
	cr_assert_not_null(s, "%s", schema_json);
	struct lm_buf b = {0};
	lm_diag d = {{0}};
	cr_assert_eq(json_schema_gbnf(s, &b, &d), 0, "%s: %s", schema_json, d.msg);
	struct gbnf *g = NULL;
	cr_assert_eq(gbnf_compile(b.p, b.len, &g, &d), 0, "%s\n%s", d.msg, b.p);
	lm_buf_fini(&b);
	cJSON_Delete(s);
	return g;
}

static void yes(const struct gbnf *g, const char *text)
{
	cr_assert(gbnf_matches(g, text, strlen(text)), "should match: %s", text);
}

static void no(const struct gbnf *g, const char *text)
{
	cr_assert_not(gbnf_matches(g, text, strlen(text)), "should not match: %s", text);
}

static void refused(const char *schema_json, const char *want)
{
	cJSON *s = cJSON_Parse(schema_json);
	cr_assert_not_null(s);
	struct lm_buf b = {0};
	lm_diag d = {{0}};
	cr_assert_eq(json_schema_gbnf(s, &b, &d), LM_EINVAL, "%s", schema_json);
	cr_assert(strstr(d.msg, want) != NULL, "'%s' lacks '%s'", d.msg, want);
	lm_buf_fini(&b);
	cJSON_Delete(s);
}

Test(json_schema, object_with_required_and_optional)
{
	struct gbnf *g = schema_grammar(
		"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
		"\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"},"
		"\"tag\":{\"type\":[\"string\",\"null\"]}},"
		"\"required\":[\"name\",\"age\"],\"additionalProperties\":false}");
	yes(g, "{\"name\":\"Ann\",\"age\":42}");
	yes(g, "{ \"name\": \"A\\\"n\\u00e9\", \"age\": -7, \"ok\": true }");
	yes(g, "{\"name\":\"\",\"age\":0,\"tag\":null}");
	yes(g, "{\"name\":\"x\",\"age\":1,\"ok\":false,\"tag\":\"t\"}");
	yes(g, "{\n  \"name\": \"x\",\n  \"age\": 1\n}");
	no(g, "{\"age\":42,\"name\":\"Ann\"}");        /* required ones come first, in order */
	no(g, "{\"name\":\"Ann\"}");                   /* age is required */
	no(g, "{\"name\":\"Ann\",\"age\":4.5}");       /* an integer */
	no(g, "{\"name\":\"Ann\",\"age\":042}");       /* JSON has no leading zeros */
	no(g, "{\"name\":\"Ann\",\"age\":1,}");        /* no trailing comma */
	no(g, "{\"name\":\"Ann\",\"age\":1,\"x\":1}"); /* no other key */
	no(g, "{\"name\":\"a\nb\",\"age\":1}");        /* raw control characters */
	gbnf_free(g);
}

Test(json_schema, all_optional_and_additional)
{
	struct gbnf *g =
		schema_grammar("{\"properties\":{\"a\":{\"const\":1},\"b\":{\"const\":2}}}");
	yes(g, "{}");
	yes(g, "{\"a\":1}");
	yes(g, "{\"b\":2}");
	yes(g, "{\"a\":1,\"b\":2}");
	no(g, "{\"b\":2,\"a\":1}");
	no(g, "{,}");
	no(g, "{\"a\":2}");
	gbnf_free(g);
	g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},"
			   "\"additionalProperties\":{\"type\":\"number\"}}");
	yes(g, "{\"a\":null,\"x\":1.5e3,\"y\":-2}");
	yes(g, "{\"x\":1}");
	no(g, "{\"x\":\"s\"}");
	gbnf_free(g);
}

Test(json_schema, arrays_strings_enums)
{
	struct gbnf *g = schema_grammar(
		"{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",3,null]},"
		"\"minItems\":1,\"maxItems\":3}");
	yes(g, "[\"red\"]");
	yes(g, "[3, null, \"green\"]");
	no(g, "[]");
	no(g, "[\"red\",\"red\",\"red\",\"red\"]");
	no(g, "[\"blue\"]");
	gbnf_free(g);
	g = schema_grammar("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
	yes(g, "\"ab\"");
	yes(g, "\"a\\nb\"");
	no(g, "\"a\"");
	no(g, "\"abcd\"");
	gbnf_free(g);
	g = schema_grammar("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},"
			   "{\"type\":\"string\"}]}");
	yes(g, "[1,\"a\"]");
	no(g, "[1]");
	no(g, "[\"a\",1]");
	gbnf_free(
		g); /* The older drafts' tuple, an array of items (llama-server's tests send it): as
	 * prefixItems. */
	g = schema_grammar("{\"items\":[{\"type\":\"integer\"}]}");
	yes(g, "[ -3000 ]");
	no(g, "[]");
	no(g, "[1, 2]");
	gbnf_free(g);
}

Test(json_schema, anyof_refs_and_recursion)
{
	struct gbnf *g =
		schema_grammar("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
			       "\"v\":{\"type\":\"number\"},\"kids\":{\"type\":\"array\",\"items\":"
			       "{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
			       "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"boolean\"}]}");
	yes(g, "true");
	yes(g, "{\"v\":1}");
	yes(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3.25}]}");
	no(g, "{\"kids\":[]}");
	no(g, "{\"v\":1,\"kids\":[{\"kids\":[]}]}");
	gbnf_free(g);
}

Test(json_schema, any_value_and_json_object)
{
	struct gbnf *g = schema_grammar("{}");
	yes(g, "[1, {\"a\": [true, null]}, \"s\"]");
	yes(g, "-0.5E+10");
	no(g, "[1,]");
	no(g, "nul");
	gbnf_free(g);
	lm_diag d = {{0}};
	cr_assert_eq(gbnf_compile(json_object_gbnf, strlen(json_object_gbnf), &g, &d), 0, "%s",
		     d.msg);
	yes(g, "{\"a\": {\"b\": [1, 2.5, \"x\"]}}");
	yes(g, "{}");
	no(g, "[]");
	no(g, "\"just a string\"");
	gbnf_free(g);
}

Test(json_schema, refusals_name_the_keyword_and_path)
{
	refused("{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\","
		"\"minimum\":0}}}",
		"json_schema: /properties/age: 'minimum' is not supported");
	refused("{\"type\":\"string\",\"pattern\":\"^a+$\"}", "'pattern' is not supported");
	refused("{\"type\":\"strin\"}", "unknown type \"strin\"");
	refused("{\"$ref\":\"#/$defs/missing\"}", "is not a definition of this schema");
	refused("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}",
		"'required' names \"x\"");
	refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "below 'minItems'");
	refused("{\"enum\":[]}", "'enum' must be a non-empty array");
	refused("false", "admits no value");
	/* Nesting is bounded. */
	char deep[2048] = "";
	for (int i = 0; i < 80; i++)
		strcat(deep, "{\"items\":");
	strcat(deep, "{}");
	for (int i = 0; i < 80; i++)
		strcat(deep, "}");
	refused(deep, "nests deeper than 64");
}

static int request(const char *body, char **grammar, const char **param, lm_diag *d)
{
	cJSON *req = cJSON_Parse(body);
	cr_assert_not_null(req);
	int rc = json_schema_request(req, grammar, param, d);
	cJSON_Delete(req);
	return rc;
}

Test(json_schema, request_fields)
{
	char *g = NULL;
	const char *param = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(request("{\"response_format\":{\"type\":\"text\"}}", &g, &param, &d), 0);
	cr_assert_null(g);
	cr_assert_eq(request("{\"response_format\":{\"type\":\"json_object\"}}", &g, &param, &d),
		     0);
	cr_assert_str_eq(g, json_object_gbnf);
	free(g);
	cr_assert_eq(request("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
			     "{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"boolean\"}}}}",
			     &g, &param, &d),
		     0, "%s", d.msg);
	cr_assert(strstr(g, "boolean") != NULL);
	free(g);
	cr_assert_eq(request("{\"json_schema\":{\"type\":\"integer\"}}", &g, &param, &d), 0);
	free(g);
	cr_assert_eq(request("{\"grammar\":\"root ::= \\\"a\\\"\"}", &g, &param, &d), 0);
	cr_assert_str_eq(g, "root ::= \"a\"");
	free(g);
	cr_assert_eq(request("{\"grammar\":\"root ::= b\"}", &g, &param, &d), LM_EINVAL);
	cr_assert_str_eq(param, "grammar");
	cr_assert(strstr(d.msg, "line 1, column 10: rule 'b' is used but not defined") != NULL,
		  "%s", d.msg);
	cr_assert_null(g);
	cr_assert_eq(
		request("{\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}}", &g, &param, &d),
		LM_EINVAL);
	cr_assert(strstr(d.msg, "not several") != NULL);
	cr_assert_eq(request("{\"response_format\":{\"type\":\"yaml\"}}", &g, &param, &d),
		     LM_EINVAL);
	cr_assert_str_eq(param, "response_format");
	cr_assert_eq(request("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
			     "{\"schema\":{\"type\":\"string\",\"pattern\":\"x\"}}}}",
			     &g, &param, &d),
		     LM_EINVAL);
	cr_assert(strstr(d.msg, "'pattern' is not supported") != NULL, "%s", d.msg);
}
