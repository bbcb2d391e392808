/* utf8.c — strict UTF-8 (utf8.h). */
#include "common/base/utf8.h"

size_t lm_utf8_len(const uint8_t *p, size_t n)
{
	const uint8_t b = p[0];
	const size_t k = b < 0x80                 ? 1
			 : b >= 0xc2 && b <= 0xdf ? 2
			 : b >= 0xe0 && b <= 0xef ? 3
			 : b >= 0xf0 && b <= 0xf4 ? 4
						  : 0;
	if (k == 0 || k > n)
		return 0;
	/* The second byte's range rules out overlong forms, surrogates and values past
	 * U+10FFFF. */
	const uint8_t lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
	const uint8_t hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
	if (k > 1 && (p[1] < lo || p[1] > hi))
		return 0;
	for (size_t j = 2; j < k; j++)
		if ((p[j] & 0xc0) != 0x80)
			return 0;
	return k;
}

bool lm_utf8_valid(const void *s, size_t n)
{
	const uint8_t *p = s;
	for (size_t i = 0; i < n;) {
		const size_t k = lm_utf8_len(p + i, n - i);
		if (k == 0)
			return false;
		i += k;
	}
	return true;
}
