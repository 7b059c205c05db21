/* --grammar / --grammar-file / -j, --json-schema / --json-schema-file of generate and run: the
 * grammar every request of the session is constrained to, and the tokenizer's token bytes it is
 * matched against (docs/structured-output.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli/gen_common.h"
#include "grammar/json_schema.h"

static char *read_text(const char *path, size_t *len, mx_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mx_fail(err, "%s: cannot open", path), NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            char *nb = n < (64u << 20) ? realloc(b, cap *= 2) : NULL;
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    if (!b) return mx_fail(err, "%s: out of memory (or larger than 64 MB)", path), NULL;
    *len = n;
    return b;
}

int gen_grammar_open(gen_session *s, const gen_opts *o, mx_error *err) {
    const char *flag = o->grammar ? "--grammar" : o->grammar_file ? "--grammar-file" : o->json_schema ? "--json-schema"
                     : o->json_schema_file ? "--json-schema-file" : NULL;
    if (!flag) return 0;
    if (!s->rt.tok) return mx_fail(err, "%s needs the model's tokenizer.json", flag);
    const double t0 = mx_now();
    int rc;
    if (o->grammar || o->grammar_file) {
        size_t len = o->grammar ? strlen(o->grammar) : 0;
        char *text = o->grammar ? NULL : read_text(o->grammar_file, &len, err);
        if (!o->grammar && !text) return -1;
        rc = grammar_compile(&s->grammar, o->grammar ? o->grammar : text, len, err);
        free(text);
    } else {
        json_error_t je;
        json_t *j = o->json_schema ? json_loads(o->json_schema, JSON_DECODE_ANY, &je)
                                   : json_load_file(o->json_schema_file, JSON_DECODE_ANY, &je);
        if (!j) return mx_fail(err, "%s: not JSON (line %d column %d: %s)", flag, je.line, je.column, je.text);
        rc = grammar_from_json_schema(&s->grammar, j, err);
        json_decref(j);
    }
    if (rc) return mx_wrap(err, "%s", flag);
    tok_vocab tv;
    if (tok_vocab_bytes(s->rt.tok, &tv, err)) return -1;
    const char **ptr = malloc((size_t)(tv.n ? tv.n : 1) * sizeof *ptr);
    if (!ptr) {
        tok_vocab_free(&tv);
        return mx_fail(err, "out of memory");
    }
    for (int i = 0; i < tv.n; i++) ptr[i] = tv.data + tv.off[i];
    const model_spec *spec = s->rt.spec;
    rc = grammar_vocab_new(&s->grammar_vocab, tv.n, ptr, tv.len, tv.special, spec->eos_ids, spec->n_eos, err);
    free(ptr);
    tok_vocab_free(&tv);
    if (!rc) fprintf(stderr, "grammar: %s compiled, token bytes of %d tokens ready in %.0f ms\n", flag,
                     grammar_vocab_size(s->grammar_vocab), (mx_now() - t0) * 1e3);
    return rc;
}
