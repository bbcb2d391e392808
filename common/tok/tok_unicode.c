/* tok_unicode.c — UTF-8, code point classes and the GPT-2 byte mapping for the tokenizer. */
#include "common/tok/tok_unicode.h"

enum tok_ucat tok_ucat(uint32_t cp)
{
	if (cp >= TOK_MAX_CP)
		return TOK_UCAT_UNDEF;
	/* Last range whose first code point is <= cp. Entry 0 starts at U+0000. */
	size_t lo = 0, hi = tok_ucat_n_ranges;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if ((tok_ucat_ranges[mid] >> 3) <= cp)
			lo = mid;
		else
			hi = mid;
	}
	return (enum tok_ucat)(tok_ucat_ranges[lo] & 7);
}

bool tok_is_space(uint32_t cp)
{
	/* Unicode's White_Space property (PropList.txt); unchanged since Unicode 6.3. */
	if (cp < 0x80)
		return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
	switch (cp) {
	case 0x0085:
	case 0x00a0:
	case 0x1680:
	case 0x2028:
	case 0x2029:
	case 0x202f:
	case 0x205f:
	case 0x3000:
		return true;
	default:
		return cp >= 0x2000 && cp <= 0x200a;
	}
}

size_t tok_utf8_len(uint8_t lead)
{
	static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
	return by_high_nibble[lead >> 4];
}

static bool tok_is_cont(uint8_t b)
{
	return (b & 0xc0) == 0x80;
}

bool tok_utf8_decode(const uint8_t *s, size_t len, size_t *off, uint32_t *cp)
{
	size_t i = *off;
	uint8_t b = s[i];
	size_t n;
	uint32_t v;
	if (b < 0x80) {
		*cp = b;
		*off = i + 1;
		return true;
	}
	if ((b & 0x40) == 0) {
		n = 0; /* a stray continuation byte */
	} else if ((b & 0x20) == 0) {
		n = 2;
		v = b & 0x1fu;
	} else if ((b & 0x10) == 0) {
		n = 3;
		v = b & 0x0fu;
	} else if ((b & 0x08) == 0) {
		n = 4;
		v = b & 0x07u;
	} else {
		n = 0;
	}
	if (n == 0 || len - i < n) {
		*off = i + 1;
		return false;
	}
	for (size_t k = 1; k < n; k++) {
		if (!tok_is_cont(s[i + k])) {
			*off = i + 1;
			return false;
		}
		v = (v << 6) | (s[i + k] & 0x3fu);
	}
	if (v >= TOK_MAX_CP) {
		*off = i + 1;
		return false;
	}
	*cp = v;
	*off = i + n;
	return true;
}

size_t tok_utf8_encode(uint32_t cp, uint8_t out[4])
{
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xc0 | (cp >> 6));
		out[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xe0 | (cp >> 12));
		out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (uint8_t)(0xf0 | ((cp >> 18) & 0x07));
	out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

/* The bytes GPT-2 keeps as themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF. The other 68
 * (0x00..0x20, 0x7F..0xA0, 0xAD) map in byte order to U+0100..U+0143. */
static bool tok_gpt2_keeps(unsigned b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

uint32_t tok_gpt2_byte_to_cp(uint8_t b)
{
	if (tok_gpt2_keeps(b))
		return b;
	if (b <= 0x20)
		return 0x100u + b;
	if (b <= 0xa0)
		return 0x100u + 33 + (b - 0x7fu);
	return 0x100u + 67; /* 0xAD */
}

int tok_gpt2_cp_to_byte(uint32_t cp)
{
	if (cp < 0x100)
		return tok_gpt2_keeps(cp) ? (int)cp : -1;
	if (cp < 0x100 + 33)
		return (int)(cp - 0x100);
	if (cp < 0x100 + 67)
		return (int)(cp - 0x100 - 33 + 0x7f);
	if (cp == 0x100 + 67)
		return 0xad;
	return -1;
}
