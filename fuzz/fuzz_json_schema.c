/* libFuzzer target: JSON Schema -> GBNF -> grammar. Input: a JSON document taken as a schema.
 * It must convert or be refused with a one-line message naming where ("schema at ..."); what
 * it converts to must compile, except for the refusals that only the compiled grammar can see
 * (left recursion through $ref, recursion that never finishes, size): an undefined rule or a
 * syntax error in the generated text is a converter bug. The converter's output must not depend
 * on anything but the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!s) return 0;
    char *text = NULL, *again = NULL;
    mx_error err;
    if (grammar_json_schema_to_gbnf(s, &text, &err)) {
        if (strchr(err.msg, '\n') || (strncmp(err.msg, "schema", 6) && strncmp(err.msg, "grammar", 7))) __builtin_trap();
        json_decref(s);
        return 0;
    }
    if (grammar_json_schema_to_gbnf(s, &again, &err) || strcmp(text, again)) __builtin_trap();
    grammar *g = NULL;
    if (grammar_compile(&g, text, strlen(text), &err)) {
        if (!strstr(err.msg, "left-recursive") && !strstr(err.msg, "can never finish") && !strstr(err.msg, "too large") &&
            !strstr(err.msg, "too many"))
            __builtin_trap();
    } else {
        (void)grammar_min_length(g, 256);
        grammar_release(g);
    }
    free(text), free(again);
    json_decref(s);
    return 0;
}
