/* Prints, for every code point but the surrogates, what this machine's utf8proc makes of it
 * the way src/text/tok_normalize.c calls it: "cp nfd nfkd lower mark ccc word", each form a
 * comma-separated list of hex code points, mark 1 when the category is Mn, Mc or Me (what
 * StripAccents removes), ccc the canonical combining class, word 1 for tok_util.c's word
 * characters before its table (k_word_delta). Used by
 * make_unicode_delta.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

static void form(uint32_t c, utf8proc_option_t opt) {
    utf8proc_uint8_t in[4], *out = NULL;
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)c, in);
    utf8proc_ssize_t r = utf8proc_map(in, n, &out, opt | UTF8PROC_STABLE);
    for (utf8proc_ssize_t i = 0; i < r;) {
        utf8proc_int32_t cp;
        i += utf8proc_iterate(out + i, r - i, &cp);
        printf(i < r ? "%x," : "%x", (unsigned)cp);
    }
    free(out);
}

int main(void) {
    for (uint32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        printf("%x ", c);
        form(c, UTF8PROC_DECOMPOSE);
        putchar(' ');
        form(c, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        /* tok_normalize.c's norm_lower: U+0130 -> i + U+0307, else utf8proc_tolower */
        if (c == 0x130) printf(" 69,307");
        else printf(" %x", (unsigned)utf8proc_tolower((utf8proc_int32_t)c));
        const utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
        /* tok_util.c's tk_is_rust_word before its table: letters, marks, Nd, Nl, Pc, ZWNJ, ZWJ */
        const int w = (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
                      (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
                      k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC || c == 0x200C || c == 0x200D;
        printf(" %d %d %d\n", k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME,
               utf8proc_get_property((utf8proc_int32_t)c)->combining_class, w);
    }
    fprintf(stderr, "utf8proc %s (Unicode %s)\n", utf8proc_version(), utf8proc_unicode_version());
    return 0;
}
