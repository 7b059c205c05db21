/* RoPE frequency tables matching transformers' modeling_rope_utils (5.x): default, linear,
 * dynamic NTK, YaRN and Llama 3. Computed in fp32 where transformers uses fp32 tensors, so the
 * rotated values agree to rounding. */
#include <math.h>

#include "model/model.h"

int rope_rot_dim(const model_spec *s) {
    if (s->kv_lora_rank > 0) return s->qk_rope_head_dim; /* MLA: the pe part of each head */
    double f = s->rope.partial_rotary_factor > 0 ? s->rope.partial_rotary_factor : 1.0;
    int d = (int)(s->head_dim * f);
    return d & ~1;
}

/* 1 / base^(2i/dim) in fp32 as torch computes it: exponent in fp32, pow, reciprocal. */
static void rope_default(double base, int dim, float *inv) {
    for (int i = 0; i < dim / 2; i++) {
        const float t = (float)(2 * i) / (float)dim;
        const float pw = (float)pow(base, (double)t);
        inv[i] = 1.0f / pw;
    }
}

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rot, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

void rope_inv_freq(const model_spec *s, const mx_rope *r, int seq_len, float *inv, float *attn_factor) {
    const int dim = rope_rot_dim(s), half = dim / 2;
    *attn_factor = 1.0f;
    switch (r->type) {
    case ROPE_LINEAR:
        rope_default(r->theta, dim, inv);
        for (int i = 0; i < half; i++) inv[i] /= (float)r->factor;
        break;
    case ROPE_DYNAMIC: {
        /* transformers 5.x: seq_len = max(seq_len, max_position_embeddings) */
        const int maxp = s->max_position_embeddings;
        const double L = seq_len > maxp ? seq_len : maxp;
        const double base =
            r->theta * pow((r->factor * L / maxp) - (r->factor - 1), (double)dim / (dim - 2));
        rope_default(base, dim, inv);
        break;
    }
    case ROPE_YARN: {
        const double factor = r->factor;
        const int orig = r->original_max_pos > 0 ? r->original_max_pos : s->max_position_embeddings;
        double af = r->attention_factor;
        if (af <= 0) {
            if (r->mscale > 0 && r->mscale_all_dim > 0)
                af = yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim);
            else
                af = yarn_mscale(factor, 1.0);
        }
        *attn_factor = (float)af;
        const double bf = r->beta_fast > 0 ? r->beta_fast : 32, bsl = r->beta_slow > 0 ? r->beta_slow : 1;
        double low = yarn_correction_dim(bf, dim, r->theta, orig);
        double high = yarn_correction_dim(bsl, dim, r->theta, orig);
        if (r->truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001; /* prevent singularity */
        for (int i = 0; i < half; i++) {
            const float t = (float)(2 * i) / (float)dim;
            const float pos_freq = (float)pow(r->theta, (double)t);
            const float extra = 1.0f / pos_freq;
            const float inter = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const float ef = 1.0f - ramp; /* extrapolation weight */
            inv[i] = inter * (1.0f - ef) + extra * ef;
        }
        break;
    }
    case ROPE_LLAMA3: {
        rope_default(r->theta, dim, inv);
        const double old = r->original_max_pos, lf = r->low_freq_factor, hf = r->high_freq_factor;
        const float factor = (float)r->factor;
        const float low_wl = (float)(old / lf), high_wl = (float)(old / hf);
        for (int i = 0; i < half; i++) {
            const float wl = 2.0f * (float)M_PI / inv[i];
            float v = wl > low_wl ? inv[i] / factor : inv[i];
            if (!(wl < high_wl) && !(wl > low_wl)) {
                const float sm = ((float)old / wl - (float)lf) / (float)(hf - lf);
                v = (1.0f - sm) * v / factor + sm * v;
            }
            inv[i] = v;
        }
        break;
    }
    default:
        rope_default(r->theta, dim, inv);
        break;
    }
}

void rope_cos_sin(const float *inv, int rot_dim, int pos, float attn_factor, float *cs) {
    for (int j = 0; j < rot_dim / 2; j++) {
        const float a = (float)pos * inv[j]; /* fp32 product, as the fp32 matmul in transformers */
        cs[2 * j] = (float)cos((double)a) * attn_factor;
        cs[2 * j + 1] = (float)sin((double)a) * attn_factor;
    }
}
