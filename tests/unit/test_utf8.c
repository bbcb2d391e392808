/* test_utf8.c — strict UTF-8 (common/base/utf8.h), against a decoder written the other way
 * round: decode the code point from the bit patterns, then reject overlong forms, surrogates and
 * values past U+10FFFF (The Unicode Standard, table 3-7, as ranges of code points). Every
 * sequence of 1 to 3 bytes and every 4-byte one with a valid lead is compared. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "common/base/utf8.h"

static size_t ref_len(const uint8_t *p, size_t n)
{
	size_t k;
	uint32_t cp;
	if (p[0] < 0x80)
		return 1;
	if ((p[0] & 0xe0) == 0xc0)
		k = 2, cp = p[0] & 0x1f;
	else if ((p[0] & 0xf0) == 0xe0)
		k = 3, cp = p[0] & 0x0f;
	else if ((p[0] & 0xf8) == 0xf0)
		k = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (k > n)
		return 0;
	for (size_t j = 1; j < k; j++) {
		if ((p[j] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[j] & 0x3f);
	}
	static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (cp < least[k] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return k;
}

Test(utf8, every_short_sequence_as_the_reference_decides)
{
	uint8_t b[4];
	for (uint32_t v = 0; v < 1u << 24; v++) {
		b[0] = (uint8_t)(v >> 16), b[1] = (uint8_t)(v >> 8), b[2] = (uint8_t)v;
		for (size_t n = 1; n <= 3; n++)
			if (lm_utf8_len(b, n) != ref_len(b, n))
				cr_assert_fail("%02x %02x %02x (n %zu): %zu, the reference %zu",
					       b[0], b[1], b[2], n, lm_utf8_len(b, n),
					       ref_len(b, n));
	}
}

Test(utf8, four_byte_sequences_as_the_reference_decides)
{
	uint8_t b[4];
	for (uint32_t v = 0; v < 1u << 24; v++) {
		b[0] = (uint8_t)(0xf0 + (v >> 21 & 0x7)), b[1] = (uint8_t)(v >> 14 & 0x7f) | 0x80;
		b[2] = (uint8_t)(v >> 7 & 0x7f) | (v & 1 ? 0x80 : 0x40);
		b[3] = (uint8_t)(v & 0x7f) | 0x80;
		if (lm_utf8_len(b, 4) != ref_len(b, 4))
			cr_assert_fail("%02x %02x %02x %02x: %zu, the reference %zu", b[0], b[1],
				       b[2], b[3], lm_utf8_len(b, 4), ref_len(b, 4));
	}
}

Test(utf8, whole_strings)
{
	cr_expect(lm_utf8_valid("", 0));
	cr_expect(lm_utf8_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10)); /* a é € 😀 */
	cr_expect(!lm_utf8_valid("\xc0\xaf", 2), "overlong /");
	cr_expect(!lm_utf8_valid("\xed\xa0\x80", 3), "a surrogate");
	cr_expect(!lm_utf8_valid("\xf4\x90\x80\x80", 4), "past U+10FFFF");
	cr_expect(!lm_utf8_valid("\xe2\x82", 2), "cut short");
	cr_expect(!lm_utf8_valid("ab\x80", 3), "a stray continuation byte");
}
