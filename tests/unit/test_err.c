#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"

Test(err, names_and_messages_come_from_one_table)
{
	cr_expect_str_eq(lm_err_name(LM_EFORMAT), "LM_EFORMAT");
	cr_expect_str_eq(lm_strerror(LM_EFORMAT), "malformed input");
	cr_expect_str_eq(lm_err_name(12345), "LM_E?");
	cr_expect_str_eq(lm_strerror(12345), "unknown error");
	cr_expect_eq(lm_err_from_errno(ENOENT), LM_ENOENT);
	cr_expect_eq(lm_err_from_errno(ENOMEM), LM_ENOMEM);
	cr_expect_eq(lm_err_from_errno(EXDEV), LM_EOS);
}

Test(err, fail_formats_and_truncates)
{
	lm_diag d = {{0}};
	char big[2000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cr_expect_eq(lm_fail(&d, LM_ERANGE, "layer %d: %s", 7, big), LM_ERANGE);
	cr_expect_eq(strncmp(d.msg, "layer 7: xxx", 12), 0);
	cr_expect_eq(strlen(d.msg), sizeof d.msg - 1);
	cr_expect_eq(lm_fail(NULL, LM_EIO, "ignored"), LM_EIO);
	lm_fail(&d, LM_EIO, "short read");
	lm_diag_prefix(&d, "model.gguf");
	cr_expect_str_eq(d.msg, "model.gguf: short read");
}

/* Every half-precision value converts to f32 and back to itself (nans stay nans). */
Test(dtype, f16_round_trips_every_value)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = lm_f16_to_f32((uint16_t)h);
		uint16_t back = lm_f32_to_f16(f);
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0)
			cr_assert((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0, "nan %04x", h);
		else
			cr_assert_eq(back, h, "half %04x -> %g -> %04x", h, (double)f, back);
	}
}

/* f32 -> f16 rounds to nearest even: check midpoints between neighbouring halves. */
Test(dtype, f16_rounds_to_nearest_even)
{
	for (uint32_t h = 0; h < 0x7bff; h++) {
		float lo = lm_f16_to_f32((uint16_t)h), hi = lm_f16_to_f32((uint16_t)(h + 1));
		float mid = (float)(((double)lo + (double)hi) / 2);
		uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
		cr_assert_eq(lm_f32_to_f16(mid), want, "midpoint of %04x", h);
	}
	cr_expect_eq(lm_f32_to_f16(65520.0f), 0x7c00);
	cr_expect_eq(lm_f32_to_f16(65519.0f), 0x7bff);
	cr_expect_eq(lm_f32_to_f16(-1e9f), 0xfc00);
}

Test(dtype, row_bytes_checks_blocks_and_overflow)
{
	uint64_t b = 0;
	cr_expect_eq(lm_dtype_row_bytes(LM_Q8_0, 64, &b), 0);
	cr_expect_eq(b, 68);
	cr_expect_eq(lm_dtype_row_bytes(LM_Q4_K, 512, &b), 0);
	cr_expect_eq(b, 288);
	cr_expect_eq(lm_dtype_row_bytes(LM_Q4_K, 100, &b), LM_EINVAL);
	cr_expect_eq(lm_dtype_row_bytes(77, 32, &b), LM_EINVAL);
	cr_expect_eq(lm_dtype_row_bytes(LM_F32, UINT64_MAX / 2, &b), LM_EOVERFLOW);
	cr_expect_eq(lm_dtype_parse("Q4_K"), LM_Q4_K);
	cr_expect_eq(lm_dtype_parse("bf16"), LM_BF16);
	cr_expect_eq(lm_dtype_parse("q9"), -1);
}
