/* test_buf.c — the growth rule and the text buffer (common/base/buf.h). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/base/err.h"

Test(buf, grow_doubles_from_the_minimum)
{
	size_t cap = 0;
	int *p = lm_grow(NULL, &cap, 3, sizeof *p, 8);
	cr_assert_not_null(p);
	cr_expect_eq(cap, 8);
	int *q = lm_grow(p, &cap, 8, sizeof *p, 8);
	cr_expect_eq(q, p, "no growth when it already fits");
	q = lm_grow(p, &cap, 9, sizeof *p, 8);
	cr_assert_not_null(q);
	cr_expect_eq(cap, 16);
	q = lm_grow(q, &cap, 100, sizeof *q, 8);
	cr_assert_not_null(q);
	cr_expect_eq(cap, 128);
	free(q);
}

Test(buf, grow_refuses_what_would_overflow)
{
	size_t cap = 4;
	char *p = malloc(4);
	cr_assert_not_null(p);
	cr_expect_null(lm_grow(p, &cap, SIZE_MAX / 2 + 1, 2, 1));
	cr_expect_null(lm_grow(p, &cap, SIZE_MAX, 8, 1));
	cr_expect_eq(cap, 4, "a refused growth leaves the capacity");
	free(p);
}

Test(buf, text_stays_terminated)
{
	struct lm_buf b = {0};
	cr_assert_eq(lm_buf_adds(&b, "data: "), 0);
	cr_assert_eq(lm_buf_add(&b, "{}xyz", 2), 0);
	cr_assert_eq(lm_buf_addc(&b, '\n'), 0);
	cr_assert_eq(lm_buf_printf(&b, "%d-%s", 42, "z"), 0);
	cr_expect_str_eq(b.p, "data: {}\n42-z");
	cr_expect_eq(b.len, strlen("data: {}\n42-z"));
	lm_buf_reset(&b);
	cr_expect_eq(b.len, 0);
	cr_expect_str_eq(b.p, "");
	/* Past the first capacity, printf grows the buffer in one step. */
	char big[5000];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cr_assert_eq(lm_buf_printf(&b, "<%s>", big), 0);
	cr_expect_eq(b.len, sizeof big + 1);
	cr_expect_eq(b.p[b.len], '\0');
	cr_expect_eq(lm_buf_reserve(&b, SIZE_MAX - 1), LM_ENOMEM);
	lm_buf_fini(&b);
	lm_buf_fini(&b); /* harmless twice */
	cr_expect_null(b.p);
}
