/* Prints, one hex code point a line, every code point the linked PCRE2 puts in \p{Cn}
 * (unassigned in its Unicode tables). Used by make_unicode_delta.sh. */
#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>

int main(void) {
    int ec;
    PCRE2_SIZE eo;
    static const uint32_t pat[] = {'^', '\\', 'p', '{', 'C', 'n', '}', '$', 0};
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!re || !md) return 1;
    for (uint32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        if (pcre2_match(re, (PCRE2_SPTR)&c, 1, 0, 0, md, NULL) >= 0) printf("%x\n", c);
    }
    fprintf(stderr, "PCRE2 %d.%d\n", PCRE2_MAJOR, PCRE2_MINOR);
    return 0;
}
