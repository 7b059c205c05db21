/* `mlxcel convert`, step 1: the plan. Which output tensors exist (mlx_lm's sanitize names),
 * where their bytes come from, and which are quantized (mlx_lm's quantize_model rules). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "quant/convert.h"
#include "quant/quant.h"

/* ==== Small helpers ==== */

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static bool is_float(mx_dtype t) { return t == MX_F32 || t == MX_BF16 || t == MX_F16; }

static int64_t numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static cv_out *plan_add(cv_plan *p, const char *name, mx_error *err) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        cv_out *o = realloc(p->outs, (size_t)cap * sizeof *o);
        if (!o) return mx_fail(err, "convert: out of memory"), NULL;
        p->outs = o, p->cap = cap;
    }
    cv_out *o = &p->outs[p->n++];
    memset(o, 0, sizeof *o);
    if (strlen(name) >= sizeof o->name)
        return mx_fail(err, "convert: tensor name '%.80s...' is too long", name), NULL;
    snprintf(o->name, sizeof o->name, "%s", name);
    return o;
}

static int add_parts(cv_out *o, int n, mx_error *err) {
    o->parts = calloc((size_t)n, sizeof *o->parts);
    if (!o->parts) return mx_fail(err, "convert: out of memory");
    o->n_parts = n;
    return 0;
}

/* ==== Quantization decision (mlx_lm quantize_model + Model.quant_predicate) ==== */

static int decide_quant(cv_plan *p, cv_out *o, const model_spec *s, const mlxq_convert_opts *opt,
                        mx_error *err) {
    o->kind = CV_FLOAT;
    if (!opt->quantize || !ends_with(o->name, ".weight") || o->ndim < 2) return 0;
    const int64_t in = o->shape[o->ndim - 1];
    /* mlx_lm checks the input dimension against the default group size first */
    if (in % opt->group_size) return 0;
    char module[256];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(o->name) - 7), o->name);
    int bits = opt->bits, gs = opt->group_size;
    if (s->family == FAM_QWEN3_MOE && ends_with(module, "mlp.gate")) {
        /* qwen3_moe router: 8 bits, group 64. MLX would fail on an input dimension that 64
         * does not divide; such a gate stays in floating point here. */
        bits = 8, gs = 64;
        if (in % gs) return 0;
    }
    if (bits != opt->bits || gs != opt->group_size) {
        if (p->n_overrides == (int)(sizeof p->overrides / sizeof *p->overrides))
            return mx_fail(err, "convert: more than %d per-module quantization overrides",
                           (int)(sizeof p->overrides / sizeof *p->overrides));
        cv_override *ov = &p->overrides[p->n_overrides++];
        snprintf(ov->module, sizeof ov->module, "%s", module);
        ov->bits = bits, ov->group_size = gs;
    }
    o->kind = CV_QUANT;
    o->bits = bits, o->group_size = gs;
    return 0;
}

/* Sizes and parameter counts once kind/shape/dtype are known. */
static void finish_sizes(cv_out *o) {
    int64_t n = numel(o->ndim, o->shape);
    size_t es = mx_dtype_size(o->dtype);
    switch (o->kind) {
    case CV_QUANT:
        o->out_bytes = (uint64_t)(n * o->bits / 8) + 2 * (uint64_t)(n / o->group_size) * es;
        o->n_params = (uint64_t)n;
        break;
    case CV_FLOAT:
    case CV_DEQUANT:
        o->out_bytes = (uint64_t)n * es;
        o->n_params = (uint64_t)n;
        break;
    case CV_RAW:
        o->out_bytes = o->parts[0].nbytes;
        o->n_params = o->bits ? (uint64_t)n * 32 / (uint64_t)o->bits : (uint64_t)n;
        break;
    }
}

/* ==== Experts: stack per-expert weights, split fused ones ==== */

/* "<pre>.experts.<e>.<proj>.weight" -> pre, e, the MLX projection name; else false. */
static bool parse_expert(const char *name, char *pre, size_t pre_cap, int *e, const char **proj) {
    const char *x = strstr(name, ".experts.");
    if (!x || !ends_with(name, ".weight")) return false;
    const char *d = x + 9;
    char *end;
    long v = strtol(d, &end, 10);
    if (end == d || *end != '.' || v < 0) return false;
    static const char *k_hf[] = {"gate_proj", "up_proj", "down_proj", "w1", "w3", "w2"};
    static const char *k_mlx[] = {"gate_proj", "up_proj", "down_proj", "gate_proj", "up_proj",
                                  "down_proj"};
    for (int i = 0; i < 6; i++) {
        size_t m = strlen(k_hf[i]);
        if (!strncmp(end + 1, k_hf[i], m) && !strcmp(end + 1 + m, ".weight")) {
            snprintf(pre, pre_cap, "%.*s", (int)(x - name), name);
            *e = (int)v;
            *proj = k_mlx[i];
            return true;
        }
    }
    return false;
}

static int plan_stack(cv_plan *p, const ckpt *c, const st_tensor *t0, const char *pre,
                      const char *proj, const mlxq_convert_opts *opt, mx_error *err) {
    /* the HF projection suffix of expert 0's name, reused for every expert */
    const char *suffix = strchr(t0->name + strlen(pre) + 9, '.');
    int E = 0;
    char name[512];
    for (;; E++) {
        snprintf(name, sizeof name, "%s.experts.%d%s", pre, E, suffix);
        if (!ckpt_find(c, name)) break;
    }
    if (c->spec.n_experts && E != c->spec.n_experts)
        return mx_fail(err, "%s: found %d experts for '%s.experts.*%s', config.json says %d",
                       c->dir, E, pre, suffix, c->spec.n_experts);
    if (t0->ndim != 2 || !is_float(t0->dtype))
        return mx_fail(err, "%s: expert tensor '%s' is %s of rank %d; stacking needs 2-D float "
                       "weights", c->dir, t0->name, mx_dtype_name(t0->dtype), t0->ndim);
    snprintf(name, sizeof name, "%s.switch_mlp.%s.weight", pre, proj);
    cv_out *o = plan_add(p, name, err);
    if (!o || add_parts(o, E, err)) return -1;
    o->ndim = 3;
    o->shape[0] = E, o->shape[1] = t0->shape[0], o->shape[2] = t0->shape[1];
    o->src_dtype = t0->dtype;
    for (int e = 0; e < E; e++) {
        snprintf(name, sizeof name, "%s.experts.%d%s", pre, e, suffix);
        const st_tensor *t = ckpt_find(c, name);
        if (t->dtype != t0->dtype || t->ndim != 2 || t->shape[0] != t0->shape[0] ||
            t->shape[1] != t0->shape[1])
            return mx_fail(err, "%s: expert tensor '%s' differs in dtype or shape from '%s'",
                           c->dir, t->name, t0->name);
        o->parts[e] = (cv_part){.t = t, .nbytes = t->nbytes};
    }
    o->dtype = opt->dtype != MX_DTYPE_INVALID ? opt->dtype : o->src_dtype;
    if (decide_quant(p, o, &c->spec, opt, err)) return -1;
    finish_sizes(o);
    return 0;
}

/* transformers 5.x: experts.gate_up_proj [E, 2I, H] (gate rows first), experts.down_proj
 * [E, H, I]. */
static int plan_fused(cv_plan *p, const ckpt *c, const st_tensor *t, const mlxq_convert_opts *opt,
                      mx_error *err) {
    bool gate_up = ends_with(t->name, ".experts.gate_up_proj");
    size_t pre_len = strlen(t->name) - strlen(gate_up ? ".experts.gate_up_proj" : ".experts.down_proj");
    if (t->ndim != 3 || !is_float(t->dtype) || (gate_up && t->shape[1] % 2))
        return mx_fail(err, "%s: fused expert tensor '%s' is %s of rank %d; expected 3-D float "
                       "[experts, out, in]", c->dir, t->name, mx_dtype_name(t->dtype), t->ndim);
    const int64_t E = t->shape[0], rows = gate_up ? t->shape[1] / 2 : t->shape[1], in = t->shape[2];
    const size_t es = mx_dtype_size(t->dtype);
    const char *projs[2] = {gate_up ? "gate_proj" : "down_proj", "up_proj"};
    for (int h = 0; h < (gate_up ? 2 : 1); h++) {
        char name[512];
        snprintf(name, sizeof name, "%.*s.switch_mlp.%s.weight", (int)pre_len, t->name, projs[h]);
        cv_out *o = plan_add(p, name, err);
        if (!o || add_parts(o, (int)E, err)) return -1;
        o->ndim = 3;
        o->shape[0] = E, o->shape[1] = rows, o->shape[2] = in;
        o->src_dtype = t->dtype;
        uint64_t slab = (uint64_t)(t->shape[1] * in) * es, half = (uint64_t)(rows * in) * es;
        for (int64_t e = 0; e < E; e++)
            o->parts[e] = (cv_part){.t = t, .off = e * slab + h * half, .nbytes = half};
        o->dtype = opt->dtype != MX_DTYPE_INVALID ? opt->dtype : o->src_dtype;
        if (decide_quant(p, o, &c->spec, opt, err)) return -1;
        finish_sizes(o);
    }
    return 0;
}

/* ==== Llama 4 (mlx_lm models/llama4.py, Model.sanitize) ==== */

/* The output name of a llama4 source tensor into out; false when mlx_lm drops it (the vision
 * tower and projector). Names under transformers 5.x's wrapper prefix `model.language_model.`
 * (with `lm_head.weight` at the top) take mlx_lm's `language_model.model.` and
 * `language_model.lm_head.weight`; every other name is kept. */
static bool l4_name(const cv_plan *p, const char *src, char *out, size_t cap) {
    if (strstr(src, "vision_model") || strstr(src, "multi_modal_projector")) return false;
    static const char k_from[] = "model.language_model.";
    if (p->l4_rename && !strncmp(src, k_from, sizeof k_from - 1))
        snprintf(out, cap, "language_model.model.%s", src + sizeof k_from - 1);
    else if (p->l4_rename && !strcmp(src, "lm_head.weight"))
        snprintf(out, cap, "language_model.lm_head.weight");
    else
        snprintf(out, cap, "%s", src);
    return true;
}

/* transformers' fused experts are [in, out] per expert: gate_up_proj [E, H, 2I] (gate = the
 * first I columns) and down_proj [E, I, H]. mlx_lm splits the last axis and swaps the last two:
 * `<pre>.experts.{gate,up,down}_proj.weight` [E, out, in]; here one transposed block a part,
 * read from the mapped source when the output tensor is materialized. */
static int plan_fused_l4(cv_plan *p, const ckpt *c, const st_tensor *t, const char *name,
                         const mlxq_convert_opts *opt, mx_error *err) {
    const model_spec *s = &c->spec;
    const bool gate_up = ends_with(name, ".experts.gate_up_proj");
    const int64_t E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    const int64_t in = gate_up ? H : I, ld = gate_up ? 2 * I : H; /* source [E, in, ld] */
    if (t->ndim != 3 || !is_float(t->dtype) || t->shape[0] != E || t->shape[1] != in ||
        t->shape[2] != ld) {
        char got[96] = "";
        for (int d = 0, at = 0; d < t->ndim && at < (int)sizeof got - 24; d++)
            at += snprintf(got + at, sizeof got - (size_t)at, "%s%lld", d ? ", " : "",
                           (long long)t->shape[d]);
        return mx_fail(err, "%s: llama4 fused expert tensor '%s' is %s [%s]; expected a float "
                       "[%lld, %lld, %lld] (transformers' [experts, in, out]; config.json: "
                       "num_local_experts %lld, hidden_size %lld, intermediate_size %lld)",
                       c->dir, t->name, mx_dtype_name(t->dtype), got, (long long)E,
                       (long long)in, (long long)ld, (long long)E, (long long)H, (long long)I);
    }
    const int64_t out = gate_up ? I : H; /* output rows of each projection */
    const size_t es = mx_dtype_size(t->dtype);
    const size_t pre_len = strlen(name) - strlen(gate_up ? ".gate_up_proj" : ".down_proj");
    const char *projs[2] = {gate_up ? "gate_proj" : "down_proj", "up_proj"};
    for (int h = 0; h < (gate_up ? 2 : 1); h++) {
        char oname[512];
        snprintf(oname, sizeof oname, "%.*s.%s.weight", (int)pre_len, name, projs[h]);
        cv_out *o = plan_add(p, oname, err);
        if (!o || add_parts(o, (int)E, err)) return -1;
        o->ndim = 3;
        o->shape[0] = E, o->shape[1] = out, o->shape[2] = in;
        o->src_dtype = t->dtype;
        for (int64_t e = 0; e < E; e++)
            o->parts[e] = (cv_part){.t = t, .off = (uint64_t)((e * in * ld + h * I) * (int64_t)es),
                                    .nbytes = (uint64_t)(in * out) * es, .rows = in, .cols = out,
                                    .ld = ld};
        o->dtype = opt->dtype != MX_DTYPE_INVALID ? opt->dtype : o->src_dtype;
        if (decide_quant(p, o, s, opt, err)) return -1;
        finish_sizes(o);
    }
    return 0;
}

/* ==== The plan ==== */

static int cmp_out(const void *a, const void *b) {
    return strcmp(((const cv_out *)a)->name, ((const cv_out *)b)->name);
}

/* True when `name` is the .scales/.biases of an MLX-packed (U32) weight. */
static bool is_companion(const ckpt *c, const char *name) {
    const char *suf = ends_with(name, ".scales") ? ".scales" : ends_with(name, ".biases") ? ".biases" : NULL;
    if (!suf) return false;
    char w[512];
    snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(name) - strlen(suf)), name);
    const st_tensor *t = ckpt_find(c, w);
    return t && t->dtype == MX_U32;
}

static int plan_one(cv_plan *p, const ckpt *c, const st_tensor *t, const mlxq_convert_opts *opt,
                    mx_error *err) {
    const model_spec *s = &c->spec;
    if (strstr(t->name, "rotary_emb.inv_freq")) return 0;
    if (s->tie_word_embeddings && !strcmp(t->name, "lm_head.weight")) return 0;
    char name[512];
    if (s->family == FAM_LLAMA4) {
        if (!l4_name(p, t->name, name, sizeof name)) return 0;
        if (ends_with(name, ".experts.gate_up_proj") || ends_with(name, ".experts.down_proj"))
            return plan_fused_l4(p, c, t, name, opt, err);
    } else {
        snprintf(name, sizeof name, "%s", t->name);
    }
    char pre[256];
    int e;
    const char *proj;
    if (parse_expert(t->name, pre, sizeof pre, &e, &proj)) {
        if (e != 0) return 0; /* stacked with expert 0 */
        return plan_stack(p, c, t, pre, proj, opt, err);
    }
    if (ends_with(t->name, ".experts.gate_up_proj") || ends_with(t->name, ".experts.down_proj"))
        return plan_fused(p, c, t, opt, err);
    bool companion = is_companion(c, t->name);
    if (companion && opt->dequantize) return 0; /* read by its weight */
    cv_out *o = plan_add(p, name, err);
    if (!o || add_parts(o, 1, err)) return -1;
    o->parts[0] = (cv_part){.t = t, .nbytes = t->nbytes};
    o->ndim = t->ndim;
    memcpy(o->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    o->src_dtype = t->dtype;
    if (t->dtype == MX_U32 && ends_with(t->name, ".weight") && s->quant.bits) {
        mx_quant q = spec_quant_for(s, t->name);
        if (!q.bits) return mx_fail(err, "%s: '%s' is packed but config.json does not quantize it",
                                    c->dir, t->name);
        o->bits = q.bits, o->group_size = q.group_size;
        if (opt->dequantize) {
            char n[512];
            size_t base = strlen(t->name) - 7;
            snprintf(n, sizeof n, "%.*s.scales", (int)base, t->name);
            o->qs = ckpt_find(c, n);
            snprintf(n, sizeof n, "%.*s.biases", (int)base, t->name);
            o->qb = ckpt_find(c, n);
            if (!o->qs || !o->qb || !is_float(o->qs->dtype))
                return mx_fail(err, "%s: '%s' has no float .scales/.biases", c->dir, t->name);
            o->kind = CV_DEQUANT;
            o->shape[o->ndim - 1] = o->shape[o->ndim - 1] * 32 / q.bits; /* logical */
            o->dtype = opt->dtype != MX_DTYPE_INVALID ? opt->dtype : o->qs->dtype;
        } else {
            o->kind = CV_RAW;
            o->dtype = MX_U32;
        }
    } else if (is_float(t->dtype)) {
        o->dtype = opt->dtype != MX_DTYPE_INVALID ? opt->dtype : t->dtype;
        if (companion) o->kind = CV_FLOAT;
        else if (decide_quant(p, o, s, opt, err)) return -1;
    } else {
        o->kind = CV_RAW;
        o->dtype = t->dtype;
    }
    finish_sizes(o);
    if (companion) o->n_params = 0; /* not a parameter in mlx_lm's count */
    return 0;
}

int cv_plan_build(cv_plan *p, const ckpt *c, const mlxq_convert_opts *opt, mx_error *err) {
    memset(p, 0, sizeof *p);
    if (c->spec.family == FAM_LLAMA4) /* transformers 5.x wrapper names: see l4_name */
        for (int f = 0; f < c->n_files && !p->l4_rename; f++)
            for (int i = 0; i < c->files[f].n_tensors && !p->l4_rename; i++)
                p->l4_rename = !strncmp(c->files[f].tensors[i].name, "model.language_model.", 21);
    /* mlx_lm quantizes deepseek_v3 with kv_b_proj split into per-head embed_q / unembed_out;
     * mlxcel runs MLA from float weights only (src/model/model_mla.c), so it writes no
     * checkpoint it could not load */
    if (opt->quantize && c->spec.kv_lora_rank > 0)
        return mx_fail(err, "%s: quantizing %s (multi-head latent attention) is not supported yet; "
                       "mlxcel runs it from bf16, f16 or f32 weights", c->dir, c->spec.model_type);
    for (int f = 0; f < c->n_files; f++)
        for (int i = 0; i < c->files[f].n_tensors; i++)
            if (plan_one(p, c, &c->files[f].tensors[i], opt, err)) return -1;
    if (p->n == 0) return mx_fail(err, "%s: no tensors to convert", c->dir);
    qsort(p->outs, (size_t)p->n, sizeof *p->outs, cmp_out);
    for (int i = 1; i < p->n; i++)
        if (!strcmp(p->outs[i].name, p->outs[i - 1].name))
            return mx_fail(err, "%s: two sources produce the tensor '%s' (per-expert and stacked "
                           "experts both present?)", c->dir, p->outs[i].name);
    return 0;
}

void cv_plan_free(cv_plan *p) {
    for (int i = 0; i < p->n; i++) free(p->outs[i].parts);
    free(p->outs);
    memset(p, 0, sizeof *p);
}
