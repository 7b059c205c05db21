/* Internal to src/model/spec*.c: typed, range-checked access to config.json fields.
 * A field is looked up in `text_config` first (multimodal wrappers such as gemma3 nest the
 * language-model fields there), then at the top level. Errors name the file and the field as
 * written ("text_config.hidden_size"). JSON null counts as absent. */
#ifndef MLXCEL_MODEL_SPEC_JSON_H
#define MLXCEL_MODEL_SPEC_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "base/error.h"
#include "model/model_spec.h"

typedef struct spec_cfg {
    json_t *top;
    json_t *text;       /* text_config object or NULL */
    const char *origin; /* file name for messages */
    mx_error *err;
} spec_cfg;

/* The raw value (NULL when absent or null); *where receives "text_config." or "". */
json_t *cfg_get(const spec_cfg *c, const char *key, const char **where);
/* Present and not null. */
bool cfg_has(const spec_cfg *c, const char *key);
/* Integer in [lo, hi]; absent -> def unless required. Integral reals (4096.0) are accepted. */
int cfg_int(const spec_cfg *c, const char *key, bool required, long long def, long long lo,
            long long hi, long long *out);
int cfg_num(const spec_cfg *c, const char *key, double def, double lo, double hi, double *out);
int cfg_bool(const spec_cfg *c, const char *key, bool def, bool *out);
/* String or NULL when absent; a non-string is an error (returns -1). */
int cfg_str(const spec_cfg *c, const char *key, const char **out);

/* Same checks on a member of an explicit object; `path` names it in messages. */
int obj_int(const spec_cfg *c, json_t *obj, const char *path, const char *key, bool required,
            long long def, long long lo, long long hi, long long *out);
int obj_num(const spec_cfg *c, json_t *obj, const char *path, const char *key, bool required,
            double def, double lo, double hi, double *out);

/* RoPE: 4.x rope_theta + rope_scaling, 5.x rope_parameters (possibly per layer type). */
int spec_parse_rope(const spec_cfg *c, model_spec *s, double default_theta);
/* Llama 4's own fields (spec_llama4.c), after shapes, rope and the generic MoE parse. */
int spec_parse_llama4(const spec_cfg *c, model_spec *s);
/* MLX quantization block ("quantization" or "quantization_config"). */
int spec_parse_quant(const spec_cfg *c, model_spec *s);
/* deepseek_v3 / kimi_k2 fields (spec_mla.c), after the common ones. */
int spec_parse_deepseek(const spec_cfg *c, model_spec *s);

#endif
