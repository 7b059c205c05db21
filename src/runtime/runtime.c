/* The runtime: backend + model + tokenizer + template + sampling defaults + engine, opened once
 * for every front end (runtime.h). */
#include "runtime/runtime.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "tune/tune_policy.h"

void rt_opts_default(rt_opts *o) {
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->tp_size = 1;
}

/* ==== Chat template discovery ==== */
static bool path_in(const char *dir, const char *name, char *p, size_t n) {
    snprintf(p, n, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

void runtime_template_source(const char *dir, const char *override_file, char *src, size_t n) {
    char p[4096];
    src[0] = 0;
    if (override_file && override_file[0]) {
        snprintf(src, n, "%s", override_file);
        return;
    }
    if (path_in(dir, "chat_template.jinja", p, sizeof p)) {
        snprintf(src, n, "chat_template.jinja");
        return;
    }
    if (!path_in(dir, "tokenizer_config.json", p, sizeof p)) return;
    json_t *cfg = json_load_file(p, JSON_DECODE_INT_AS_REAL, NULL);
    const json_t *t = cfg ? json_object_get(cfg, "chat_template") : NULL;
    /* unreadable: named, so that chat_template_load says what is wrong with it */
    if (!cfg || (t && !json_is_null(t))) snprintf(src, n, "tokenizer_config.json");
    json_decref(cfg);
}

/* ==== Sampling defaults ==== */
void runtime_generation_defaults(const model_spec *s, sampling_params *sp, unsigned *fields) {
    unsigned f = 0;
    if (s->gen_do_sample == 1) { /* as transformers: the sampling fields count only with do_sample */
        sp->temperature = s->gen_temperature > 0 ? s->gen_temperature : 1.0f;
        f |= RT_GEN_TEMPERATURE;
        if (s->gen_top_p > 0) {
            sp->top_p = s->gen_top_p;
            f |= RT_GEN_TOP_P;
        }
        if (s->gen_top_k > 0) {
            sp->top_k = s->gen_top_k;
            f |= RT_GEN_TOP_K;
        }
    }
    if (s->gen_repetition_penalty > 0) {
        sp->repeat_penalty = s->gen_repetition_penalty;
        f |= RT_GEN_REPEAT_PENALTY;
    }
    if (fields) *fields = f;
}

/* ==== Open / close ==== */
int runtime_open(runtime *rt, const rt_opts *o, mx_error *err) {
    memset(rt, 0, sizeof *rt);
    if (!o->model_dir || !o->model_dir[0]) return mx_fail(err, "no model: give -m DIR (a checkpoint directory)");
    const double t0 = mx_now();
    const mx_device dev = o->device && !strcmp(o->device, "cuda") ? MX_DEV_CUDA : MX_DEV_CPU;
    rt->be = backend_get(dev, err);
    if (!rt->be) return -1;
    /* a cache type the device cannot hold: refused now, not after loading the weights */
    if (kv_type_check(o->cache_type_k, rt->be, 0, "K", err) || kv_type_check(o->cache_type_v, rt->be, 0, "V", err))
        return -1;
    const int tp = o->tp_size > 1 ? o->tp_size : 1;
    if (o->dummy_weights ? model_load_dummy_tp(&rt->m, o->model_dir, rt->be, tp, err)
                         : model_load_tp(&rt->m, o->model_dir, rt->be, tp, err))
        return -1;
    rt->spec = model_spec_of(rt->m);
    char p[4096];
    if (o->tokenizer == RT_TOK_REQUIRED ||
        (o->tokenizer == RT_TOK_OPTIONAL && path_in(o->model_dir, "tokenizer.json", p, sizeof p))) {
        if (tok_load_dir(&rt->tok, o->model_dir, err)) {
            mx_wrap(err, "%s/tokenizer.json", o->model_dir);
            goto fail;
        }
    }
    if (rt->tok && !o->no_chat_template) {
        runtime_template_source(o->model_dir, o->chat_template_file, rt->tpl_src, sizeof rt->tpl_src);
        if (rt->tpl_src[0] &&
            chat_template_load(&rt->tpl, o->model_dir,
                               o->chat_template_file && o->chat_template_file[0] ? o->chat_template_file : NULL,
                               err))
            goto fail;
    }
    sampling_params_default(&rt->sampling);
    runtime_generation_defaults(rt->spec, &rt->sampling, &rt->gen_fields);
    rt->load_seconds = mx_now() - t0;
    return 0;
fail:
    runtime_close(rt);
    return -1;
}

int runtime_start_engine(runtime *rt, const engine_params *ep, mx_error *err) {
    if (rt->e) return mx_fail(err, "runtime: the engine is already started");
    return engine_new(&rt->e, rt->m, ep, err);
}

void runtime_close(runtime *rt) {
    engine_free(rt->e); /* before the model it borrows */
    if (rt->tpl) chat_template_free(rt->tpl);
    if (rt->tok) tok_free(rt->tok);
    model_free(rt->m);
    memset(rt, 0, sizeof *rt);
}

/* ==== Description ==== */
void runtime_describe_kv(engine *e, char *buf, size_t len) {
    const engine_params *p = engine_params_of(e);
    snprintf(buf, len, "kv cache: K %s, V %s (%zu bytes per token)", kv_type_name(p->cache_type_k),
             kv_type_name(p->cache_type_v), kv_cache_bytes_per_token(engine_kv(e)));
}

void runtime_describe(const runtime *rt, void (*emit)(void *user, const char *line), void *user) {
    char line[640], part[512];
    if (rt->be->describe) { /* device, compute capability, memory, applied launch settings */
        rt->be->describe(part, sizeof part);
        snprintf(line, sizeof line, "device: %s", part);
        emit(user, line);
    }
    snprintf(line, sizeof line, "model loaded: %.2f GB of weights on %s",
             (double)model_weight_bytes(rt->m) / 1e9, rt->be->name);
    emit(user, line);
    model_describe_quant(rt->m, part, sizeof part);
    snprintf(line, sizeof line, "quantization: %s", part);
    emit(user, line);
    if (rt->e) {
        snprintf(line, sizeof line, "kv storage: %s (%s)", kv_storage_name(engine_storage(rt->e)),
                 engine_storage_reason(rt->e));
        emit(user, line);
        runtime_describe_kv(rt->e, line, sizeof line);
        emit(user, line);
    }
    tune_policy_describe(line, sizeof line);
    emit(user, line);
}

/* ==== Time to first token ==== */
void runtime_ttft_line(char *buf, size_t len, const char *who, double prep_s, const engine_seq_stats *st,
                       double t_out) {
    size_t k = 0;
#define PUT(...)                                                           \
    do {                                                                   \
        if (k < len) k += (size_t)snprintf(buf + k, len - k, __VA_ARGS__); \
    } while (0)
    PUT("[TTFT] %s: prompt %d tok (%d cached) | template+tokenize %.2f ms | queue %.2f ms | prefill %d step%s "
        "%.2f ms", who, st->n_prompt, st->n_cached, prep_s * 1e3, (st->t_start - st->t_submit) * 1e3,
        st->n_prefill_steps, st->n_prefill_steps == 1 ? "" : "s", st->prefill_seconds * 1e3);
    const int shown = st->n_prefill_steps < ENGINE_TTFT_STEPS ? st->n_prefill_steps : ENGINE_TTFT_STEPS;
    PUT(" (");
    double listed = 0;
    for (int i = 0; i < shown; i++) {
        PUT("%s%.2f ms %d/%d rows", i ? ", " : "", st->prefill_step_s[i] * 1e3, st->prefill_step_rows[i],
            st->prefill_step_all_rows[i]);
        listed += st->prefill_step_s[i];
    }
    if (st->n_prefill_steps > shown)
        PUT(", %d more %.2f ms", st->n_prefill_steps - shown, (st->prefill_seconds - listed) * 1e3);
    PUT(")");
    /* the sequence's wall time from admission to its first logits, less its own forwards:
     * steps it sat out (other prompts' chunks, decode-only steps) */
    const double between = st->t_first_forward_end - st->t_start - st->prefill_seconds;
    PUT(" | between steps %.2f ms | first sample %.2f ms", (between > 0 ? between : 0) * 1e3,
        (st->t_first_token - st->t_first_forward_end) * 1e3);
    if (t_out > 0)
        PUT(" | first byte out %.2f ms | total %.2f ms", (t_out - st->t_first_token) * 1e3,
            (prep_s + t_out - st->t_submit) * 1e3);
    else
        PUT(" | first byte out - (held back) | total to first token %.2f ms",
            (prep_s + st->t_first_token - st->t_submit) * 1e3);
#undef PUT
}
