/* `mlxcel generate`: one prompt through the engine, streamed to stdout, then a timing line
 * (or one JSON object with --json). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "cli/cli.h"
#include "cli/gen_common.h"

static const char *k_help =
    "usage: mlxcel generate -m DIR (-p TEXT | --prompt-ids 1,2,3) [options]\n"
    "\n"
    "Runs one prompt through the engine and streams the output to stdout, then prints a timing\n"
    "line: prompt tokens, prefill tok/s, decode tok/s, time to first token, finish reason.\n"
    "\n"
    "  -m, --model DIR            checkpoint directory (config.json, *.safetensors, tokenizer.json)\n"
    "  -p, --prompt TEXT          prompt text (needs tokenizer.json); the model's chat template is\n"
    "                             applied as one user message unless --no-chat-template\n"
    "  --prompt-ids IDS           comma-separated token ids, used as they are\n"
    "  --json                     print one JSON object instead: prompt_ids, tokens, text,\n"
    "                             finish_reason, prefill_tokens_per_s, decode_tokens_per_s, ttft_ms\n"
    "%s"
    "  -h, --help                 this help\n"
    "\n"
    "Without tokenizer.json in DIR the output is printed as token ids.\n";

typedef struct gen_state {
    const gen_session *s;
    tok_stream *ts;
    bool json, print;
    int32_t *toks;
    int n_toks, cap_toks;
    char *text;
    size_t text_len, text_cap;
    engine_finish why;
    engine_seq_stats st;
    /* MLXCEL_PROFILE_TTFT: the breakdown is printed once the first bytes are out */
    bool profile, ttft_pending;
    double prep_s;               /* template + tokenize */
    engine_seq_stats first;      /* the statistics at the first token */
} gen_state;

static void ttft_print(gen_state *g, double t_out) {
    char line[1024];
    runtime_ttft_line(line, sizeof line, "generate", g->prep_s, &g->first, t_out);
    fprintf(stderr, "%s\n", line);
    g->ttft_pending = false;
}

static void text_append(gen_state *g, const char *p, size_t n) {
    if (!n) return;
    if (g->text_len + n + 1 > g->text_cap) {
        size_t cap = g->text_cap ? g->text_cap : 256;
        while (cap < g->text_len + n + 1) cap *= 2;
        char *t = realloc(g->text, cap);
        if (!t) return;
        g->text = t;
        g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, p, n);
    g->text_len += n;
    g->text[g->text_len] = '\0';
    if (g->print) {
        fwrite(p, 1, n, stdout);
        fflush(stdout);
    }
    if (g->ttft_pending) ttft_print(g, mx_now());
}

static int on_token(void *user, int64_t id, int32_t tok, float lp) {
    (void)id;
    (void)lp;
    gen_state *g = user;
    if (g->n_toks == g->cap_toks) {
        int cap = g->cap_toks ? 2 * g->cap_toks : 64;
        int32_t *n = realloc(g->toks, (size_t)cap * sizeof(int32_t));
        if (!n) return 1;
        g->toks = n;
        g->cap_toks = cap;
    }
    g->toks[g->n_toks++] = tok;
    if (g->n_toks == 1 && g->profile) {
        g->first = *engine_token_stats(g->s->rt.e);
        g->ttft_pending = true;
    }
    if (g->ts) {
        const char *out = NULL;
        size_t len = 0;
        const int stop = tok_stream_push(g->ts, tok, &out, &len);
        text_append(g, out, len);
        return stop;
    }
    if (g->print) {
        printf("%s%d", g->n_toks > 1 ? " " : "", tok);
        fflush(stdout);
    }
    if (g->ttft_pending) ttft_print(g, mx_now());
    return 0;
}

static void on_finish(void *user, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id;
    gen_state *g = user;
    g->why = why;
    g->st = *st;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    gen_opts_default(&o);
    const char *prompt = NULL, *prompt_ids = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(k_help, k_gen_opts_help);
            return 0;
        }
        if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(a, "--prompt-ids") && i + 1 < argc) prompt_ids = argv[++i];
        else if (!strcmp(a, "--json")) json = true;
        else {
            const int r = gen_opts_parse(&o, argc, argv, &i, "generate");
            if (r < 0) return 2;
            if (r == 0) {
                fprintf(stderr, "mlxcel generate: unknown option '%s' (see --help)\n", a);
                return 2;
            }
        }
    }
    if (!o.model_dir) {
        fprintf(stderr, "mlxcel generate: give -m DIR (see --help)\n");
        return 2;
    }
    if (!!prompt == !!prompt_ids) {
        fprintf(stderr, "mlxcel generate: give exactly one of -p TEXT and --prompt-ids IDS\n");
        return 2;
    }
    mx_error err = {{0}};
    int32_t *ids = NULL;
    int n_ids = 0;
    if (prompt_ids && gen_parse_ids(prompt_ids, &ids, &n_ids, &err)) {
        fprintf(stderr, "mlxcel generate: %s\n", err.msg);
        return 2;
    }
    gen_session s;
    if (gen_session_open(&s, &o, "generate", &err)) {
        fprintf(stderr, "mlxcel generate: %s\n", err.msg);
        free(ids);
        return 1;
    }
    int rc = 1;
    gen_state g = {.s = &s, .json = json, .print = !json, .profile = mx_env()->profile_ttft};
    const double t_prep = mx_now();
    if (prompt) {
        if (!s.rt.tok) {
            fprintf(stderr, "mlxcel generate: -p needs %s/tokenizer.json; use --prompt-ids\n", o.model_dir);
            goto out;
        }
        int rc2;
        if (s.rt.tpl) {
            json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", prompt);
            rc2 = msgs ? gen_render_chat(&s, msgs, &ids, &n_ids, &err) : mx_fail(&err, "out of memory");
            json_decref(msgs);
        } else {
            rc2 = gen_encode_raw(&s, prompt, &ids, &n_ids, &err);
        }
        if (rc2) {
            fprintf(stderr, "mlxcel generate: %s\n", err.msg);
            goto out;
        }
    }
    g.prep_s = mx_now() - t_prep;
    if (s.rt.tok) {
        g.ts = tok_stream_new(s.rt.tok, true);
        if (o.n_stops) tok_stream_set_stops(g.ts, o.stops, o.n_stops);
    }
    engine_request r = {.prompt = ids, .n_prompt = n_ids, .sampling = s.sp,
                        .max_tokens = o.n_predict, .ignore_eos = o.ignore_eos,
                        .on_token = on_token, .on_finish = on_finish, .user = &g,
                        .allow_device_sampling = true, /* no top logprobs asked */
                        .grammar = s.grammar, .grammar_vocab = s.grammar_vocab};
    if (engine_submit(s.rt.e, &r, &err) < 0 || engine_run(s.rt.e, &err) < 0) {
        fprintf(stderr, "mlxcel generate: %s\n", err.msg);
        goto out;
    }
    if (g.ts) {
        const char *tail = NULL;
        size_t len = 0;
        if (g.why != ENGINE_FINISH_STOP) {
            tok_stream_flush(g.ts, &tail, &len);
            text_append(&g, tail, len);
        }
    }
    if (g.ttft_pending) ttft_print(&g, 0); /* nothing of it was ever written (a stop string) */
    const int n_new = g.st.n_prompt - g.st.n_cached;
    const double prefill_s = g.st.t_first_token - g.st.t_start;
    const double decode_s = g.st.t_finish - g.st.t_first_token;
    const double prefill_tps = prefill_s > 0 ? n_new / prefill_s : 0;
    const double decode_tps = g.n_toks > 1 && decode_s > 0 ? (g.n_toks - 1) / decode_s : 0;
    const double ttft_ms = g.n_toks ? (g.st.t_first_token - g.st.t_submit) * 1e3 : 0;
    if (g.why == ENGINE_FINISH_ERROR) {
        fprintf(stderr, "mlxcel generate: the engine could not run this prompt (see the log above)\n");
        goto out;
    }
    if (json) {
        json_t *j = json_object();
        json_t *pi = json_array(), *tk = json_array();
        for (int i = 0; i < n_ids; i++) json_array_append_new(pi, json_integer(ids[i]));
        for (int i = 0; i < g.n_toks; i++) json_array_append_new(tk, json_integer(g.toks[i]));
        json_object_set_new(j, "prompt_ids", pi);
        json_object_set_new(j, "tokens", tk);
        json_object_set_new(j, "text", g.ts ? json_stringn(g.text ? g.text : "", g.text_len) : json_null());
        json_object_set_new(j, "finish_reason", json_string(engine_finish_name(g.why)));
        json_object_set_new(j, "finish_detail", json_string(engine_finish_detail(g.why)));
        json_object_set_new(j, "prompt_tokens", json_integer(n_ids));
        json_object_set_new(j, "cached_prompt_tokens", json_integer(g.st.n_cached));
        json_object_set_new(j, "generated_tokens", json_integer(g.n_toks));
        json_object_set_new(j, "prefill_tokens_per_s", json_real(prefill_tps));
        json_object_set_new(j, "decode_tokens_per_s", json_real(decode_tps));
        if (s.grammar) { /* the time the token masks took, and how many */
            engine_stats es;
            engine_get_stats(s.rt.e, &es);
            json_object_set_new(j, "grammar_masks", json_integer((json_int_t)es.grammar_masks));
            json_object_set_new(j, "grammar_mask_ms", json_real(es.grammar_seconds * 1e3));
        }
        json_object_set_new(j, "ttft_ms", json_real(ttft_ms));
        json_object_set_new(j, "device", json_string(s.rt.be->name));
        json_object_set_new(j, "kv_storage", json_string(kv_storage_name(engine_storage(s.rt.e))));
        json_object_set_new(j, "kv_storage_reason", json_string(engine_storage_reason(s.rt.e)));
        json_object_set_new(j, "cache_type_k", json_string(kv_type_name(engine_params_of(s.rt.e)->cache_type_k)));
        json_object_set_new(j, "cache_type_v", json_string(kv_type_name(engine_params_of(s.rt.e)->cache_type_v)));
        json_object_set_new(j, "kv_bytes_per_token",
                            json_integer((json_int_t)kv_cache_bytes_per_token(engine_kv(s.rt.e))));
        char *txt = json_dumps(j, JSON_COMPACT);
        printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else {
        printf("\nprompt %d tok | prefill %.1f tok/s | decode %.1f tok/s | TTFT %.1f ms | finish: %s\n",
               n_ids, prefill_tps, decode_tps, ttft_ms, engine_finish_name(g.why));
    }
    rc = 0;
out:
    if (g.ts) tok_stream_free(g.ts);
    free(g.toks);
    free(g.text);
    free(ids);
    gen_session_close(&s);
    return rc;
}
