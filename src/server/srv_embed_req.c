/* Embeddings request bodies (POST /v1/embeddings, /embedding, /embeddings) parsed and checked
 * into srv_embed_req, and llama.cpp's normalization of the vectors. No server state: the fuzz
 * target fuzz/fuzz_srv_embed.c runs the parser on its own. See srv_embed.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_embed.h"

/* ==== Request ==== */
void srv_embed_req_free(srv_embed_req *r) {
    for (int i = 0; r->ids && i < r->n; i++) free(r->ids[i]);
    free(r->ids);
    free(r->n_ids);
}

/* Names the field an error is about (then mx_fail says what is wrong with it). */
static void at_param(srv_embed_req *r, const char *param) { snprintf(r->param, sizeof r->param, "%s", param); }

static const char *jtype(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* The scalar fields: encoding_format, embd_normalize (llama-server), dimensions, model, user. */
static int parse_fields(const srv_embed_limits *lim, json_t *o, srv_embed_req *r, mx_error *err) {
    json_t *v = json_object_get(o, "encoding_format");
    if (v && !json_is_null(v)) {
        const char *f = json_string_value(v);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
        {
            at_param(r, "encoding_format");
            return mx_fail(err, "encoding_format: the format to return the embeddings in. Can be either float or "
                                "base64");
        }
        r->base64 = !strcmp(f, "base64");
    }
    r->normalize = 2;
    v = json_object_get(o, "embd_normalize");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > 1000)
        {
            at_param(r, "embd_normalize");
            return mx_fail(err, "embd_normalize: expected an integer: -1 (none), 0 (max absolute, int16 range), 1 "
                                "(taxicab), 2 (euclidean, default) or p from 3 to 1000 (p-norm), got %s", jtype(v));
        }
        r->normalize = (int)json_integer_value(v);
    }
    const int n_embd = lim->n_embd;
    v = json_object_get(o, "dimensions");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > n_embd) {
            at_param(r, "dimensions");
            return mx_fail(err, "dimensions: expected an integer from 1 to %d (this model's embedding size)", n_embd);
        }
        r->dims = (int)json_integer_value(v);
    }
    v = json_object_get(o, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return at_param(r, "model"), mx_fail(err, "model: expected a string, got %s", jtype(v));
        snprintf(r->model, sizeof r->model, "%s", json_string_value(v));
    }
    v = json_object_get(o, "user"); /* OpenAI: an end-user id for abuse monitoring; nothing to do here */
    if (v && !json_is_null(v) && !json_is_string(v))
        return at_param(r, "user"), mx_fail(err, "user: expected a string, got %s", jtype(v));
    return 0;
}

/* ==== Inputs -> token ids ==== */
static bool all_ints(json_t *a) {
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) if (!json_is_integer(e)) return false;
    return json_array_size(a) > 0;
}

/* llama-server's mixed prompt: ids and strings, at least one of each. */
static bool is_mixed(json_t *a) {
    bool num = false, str = false;
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) {
        if (json_is_integer(e)) num = true;
        else if (json_is_string(e)) str = true;
        else return false;
    }
    return num && str;
}

/* One input: a string (tokenized with the tokenizer's special tokens, as llama-server does), an
 * array of ids, or a mixed array. `at` names it in errors ("input", "input[3]"). */
static int one_input(const srv_embed_limits *lim, json_t *v, const char *at, srv_embed_req *r, int k, mx_error *err) {
    const int vocab = lim->vocab;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return mx_fail(err, "%s: an empty string cannot be embedded", at);
        if (lim->tokenize(lim->tok_ctx, json_string_value(v), true, &r->ids[k], &r->n_ids[k], err))
            return mx_wrap(err, "%s", at);
    } else if (json_is_array(v) && json_array_size(v) == 0) {
        return mx_fail(err, "%s: an empty array cannot be embedded", at);
    } else if (json_is_array(v) && all_ints(v)) {
        const size_t n = json_array_size(v);
        r->ids[k] = malloc(n * sizeof *r->ids[k]);
        if (!r->ids[k]) return mx_fail(err, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_int_t id = json_integer_value(json_array_get(v, i));
            if (id < 0 || id >= vocab)
                return mx_fail(err, "%s[%zu]: token id %lld is outside the vocabulary [0, %d)", at, i, (long long)id,
                               vocab);
            r->ids[k][i] = (int32_t)id;
        }
        r->n_ids[k] = n;
    } else if (json_is_array(v) && is_mixed(v)) {
        if (srv_tokenize_mixed(v, true, lim->tokenize, lim->tok_ctx, vocab, &r->ids[k], &r->n_ids[k], err))
            return mx_wrap(err, "%s", at);
    } else {
        return mx_fail(err, "%s: expected a string, an array of token ids or of ids and strings, got %s", at,
                       jtype(v));
    }
    if (r->n_ids[k] == 0) return mx_fail(err, "%s: the input has no tokens", at);
    const int n_ctx = lim->n_ctx;
    if (r->n_ids[k] > (size_t)n_ctx)
        return mx_fail(err, "%s: %zu tokens exceed the context of %d tokens (the most one input may hold here; "
                            "shorten it or raise --ctx-size)", at, r->n_ids[k], n_ctx);
    return 0;
}

/* `input` (or llama-server's `content`): one input, or an array of them. */
static int parse_inputs(const srv_embed_limits *lim, json_t *in, const char *name, srv_embed_req *r, mx_error *err) {
    at_param(r, name);
    const bool list = json_is_array(in) && json_array_size(in) > 0 && !all_ints(in) && !is_mixed(in);
    if (list && json_array_size(in) > SRV_EMBED_MAX_INPUTS)
        return mx_fail(err, "%s: at most %d inputs per request", name, SRV_EMBED_MAX_INPUTS);
    r->n = list ? (int)json_array_size(in) : 1;
    r->ids = calloc((size_t)r->n, sizeof *r->ids);
    r->n_ids = calloc((size_t)r->n, sizeof *r->n_ids);
    if (!r->ids || !r->n_ids) return mx_fail(err, "out of memory");
    if (!list) return one_input(lim, in, name, r, 0, err);
    for (int k = 0; k < r->n; k++) {
        char at[48];
        snprintf(at, sizeof at, "%s[%d]", name, k);
        if (one_input(lim, json_array_get(in, (size_t)k), at, r, k, err)) return -1;
    }
    return 0;
}

int srv_embed_parse(srv_embed_req *r, bool oai, const char *body, size_t len, const srv_embed_limits *lim,
                    mx_error *err) {
    memset(r, 0, sizeof *r);
    r->oai = oai;
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o || !json_is_object(o)) {
        char m[280];
        if (o) snprintf(m, sizeof m, "expected a JSON object");
        else srv_json_error_msg(&je, m, sizeof m);
        json_decref(o);
        at_param(r, "body");
        return mx_fail(err, "body: %s", m);
    }
    json_t *in = json_object_get(o, "input");
    const char *name = "input";
    if (!in && (in = json_object_get(o, "content"))) { /* llama-server: `content` is not OpenAI's */
        name = "content";
        r->oai = false;
    }
    int rc = 0;
    if (!in) {
        at_param(r, "input");
        rc = mx_fail(err, "\"input\" or \"content\" must be provided");
    }
    if (!rc) rc = parse_fields(lim, o, r, err);
    if (!rc && r->base64 && !r->oai) {
        at_param(r, "encoding_format");
        rc = mx_fail(err, "encoding_format: base64 is OpenAI's (POST /v1/embeddings with `input`); llama-server's "
                          "/embedding answers floats");
    }
    if (!rc) rc = parse_inputs(lim, in, name, r, err);
    json_decref(o);
    return rc;
}

/* ==== Vectors ==== */
/* llama.cpp's common_embd_normalize, step for step, so the values are llama-server's. */
void srv_embd_normalize(const float *in, float *out, int n, int norm) {
    double sum = 0.0;
    switch (norm) {
    case -1: sum = 1.0; break;
    case 0:
        for (int i = 0; i < n; i++)
            if (sum < fabsf(in[i])) sum = fabsf(in[i]);
        sum /= 32760.0;
        break;
    case 2:
        for (int i = 0; i < n; i++) sum += in[i] * in[i];
        sum = sqrt(sum);
        break;
    default:
        for (int i = 0; i < n; i++) sum += pow(fabsf(in[i]), norm);
        sum = pow(sum, 1.0 / norm);
        break;
    }
    const float k = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int i = 0; i < n; i++) out[i] = in[i] * k;
}

