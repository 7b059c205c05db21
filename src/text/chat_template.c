/* Chat templates of checkpoints: finds the template (override file, chat_template.jinja, or
 * tokenizer_config.json "chat_template"), compiles it once, and renders it with the context
 * transformers' apply_chat_template builds: messages, tools (None unless given), documents,
 * add_generation_prompt, the special tokens, then the caller's extra variables. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/chat_template.h"

struct chat_template {
    jinja_template *tpl;
    char *src;      /* the Jinja source, for llama-server's /props "chat_template" */
    json_t *tokens; /* {"bos_token": "...", ...}: special tokens present in tokenizer_config.json */
};

/* ==== Loading ==== */
#define MAX_TEMPLATE_BYTES (16u << 20)

static int read_text_file(const char *path, char **out, mx_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 65536 * 2;
            if (cap > MAX_TEMPLATE_BYTES + 65536 * 2) {
                free(buf);
                fclose(f);
                return mx_fail(err, "%s: larger than %u bytes", path, MAX_TEMPLATE_BYTES);
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return mx_fail(err, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, 65536, f);
        n += k;
        if (k < 65536) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return mx_fail(err, "%s: read error", path);
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return mx_fail(err, "%s: contains a NUL byte", path);
    }
    *out = buf;
    return 0;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* tokenizer_config.json's chat_template: a string, or [{name, template}, ...] -> "default". */
static int template_from_config(const json_t *cfg, const char *path, char **out, mx_error *err) {
    const json_t *ct = json_object_get(cfg, "chat_template");
    if (!ct || json_is_null(ct)) return 1;
    if (json_is_string(ct)) {
        *out = strdup(json_string_value(ct));
        return *out ? 0 : mx_fail(err, "out of memory");
    }
    if (!json_is_array(ct))
        return mx_fail(err, "%s: \"chat_template\" must be a string or a list of {name, template}", path);
    size_t i;
    const json_t *item;
    char names[512] = "";
    json_array_foreach(ct, i, item) {
        const char *name = json_string_value(json_object_get(item, "name"));
        const char *tpl = json_string_value(json_object_get(item, "template"));
        if (!name || !tpl)
            return mx_fail(err, "%s: \"chat_template\"[%zu] must be an object with string \"name\" and \"template\"",
                           path, i);
        if (!strcmp(name, "default")) {
            *out = strdup(tpl);
            return *out ? 0 : mx_fail(err, "out of memory");
        }
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s'%s'", used ? ", " : "", name);
    }
    return mx_fail(err, "%s: \"chat_template\" has no template named 'default' (it has: %s)", path,
                   names[0] ? names : "none");
}

/* A special token is a string or an AddedToken object {"content": "..."}; null means unset. */
static int add_token(json_t *tokens, const json_t *cfg, const char *key, const char *path, mx_error *err) {
    const json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return mx_fail(err, "%s: \"%s\" must be a string or an object with a string \"content\"", path, key);
    json_object_set_new(tokens, key, json_stringn(json_string_value(v), json_string_length(v)));
    return 0;
}

int chat_template_load(chat_template **out, const char *model_dir, const char *override_file, mx_error *err) {
    *out = NULL;
    char cfg_path[4096], jinja_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", model_dir ? model_dir : ".");
    snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", model_dir ? model_dir : ".");
    json_t *cfg = NULL;
    if (model_dir && file_exists(cfg_path)) {
        json_error_t je;
        /* INT_AS_REAL: model_max_length is often 1e30, beyond int64; only strings are read here. */
        cfg = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je);
        if (!cfg) return mx_fail(err, "%s:%d: invalid JSON: %s", cfg_path, je.line, je.text);
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return mx_fail(err, "%s: expected a JSON object", cfg_path);
        }
    }
    char *src = NULL;
    const char *src_name;
    int rc;
    if (override_file) {
        src_name = override_file;
        rc = read_text_file(override_file, &src, err);
    } else if (model_dir && file_exists(jinja_path)) {
        src_name = jinja_path;
        rc = read_text_file(jinja_path, &src, err);
    } else if (cfg) {
        src_name = cfg_path;
        rc = template_from_config(cfg, cfg_path, &src, err);
        if (rc == 1)
            rc = mx_fail(err, "%s has no \"chat_template\" and %s does not exist; give a template with "
                              "--chat-template-file", cfg_path, jinja_path);
    } else {
        src_name = model_dir ? model_dir : "(none)";
        rc = mx_fail(err, "%s: no chat_template.jinja and no tokenizer_config.json; give a template with "
                          "--chat-template-file", src_name);
    }
    chat_template *ct = NULL;
    if (!rc) {
        ct = calloc(1, sizeof *ct);
        if (ct) ct->tokens = json_object();
        if (!ct || !ct->tokens) rc = mx_fail(err, "out of memory");
    }
    static const char *const k_tokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token", NULL};
    for (int i = 0; !rc && cfg && k_tokens[i]; i++) rc = add_token(ct->tokens, cfg, k_tokens[i], cfg_path, err);
    if (!rc && cfg) {
        const json_t *extra = json_object_get(cfg, "additional_special_tokens");
        if (json_is_array(extra)) {
            json_t *list = json_array();
            size_t i;
            const json_t *t;
            json_array_foreach(extra, i, t) {
                if (json_is_object(t)) t = json_object_get(t, "content");
                if (json_is_string(t)) json_array_append_new(list, json_string(json_string_value(t)));
            }
            json_object_set_new(ct->tokens, "additional_special_tokens", list);
        }
    }
    if (!rc && jinja_compile(&ct->tpl, src, err)) rc = mx_wrap(err, "%s", src_name);
    if (!rc) ct->src = src;
    else free(src);
    json_decref(cfg);
    if (rc) {
        chat_template_free(ct);
        return -1;
    }
    *out = ct;
    return 0;
}

void chat_template_free(chat_template *ct) {
    if (!ct) return;
    jinja_free(ct->tpl);
    json_decref(ct->tokens);
    free(ct->src);
    free(ct);
}

const char *chat_template_source(const chat_template *ct) { return ct->src; }

/* ==== Rendering ==== */
int chat_template_apply(const chat_template *ct, const json_t *messages, const json_t *extra,
                        bool add_generation_prompt, char **out, mx_error *err) {
    *out = NULL;
    if (!json_is_array(messages)) return mx_fail(err, "chat template: \"messages\" must be a JSON array");
    if (extra && !json_is_object(extra) && !json_is_null(extra))
        return mx_fail(err, "chat template: extra template variables must be a JSON object");
    json_t *ctx = json_object();
    if (!ctx) return mx_fail(err, "out of memory");
    /* Same order as transformers: explicit args first, then special tokens, then kwargs
     * (which win on a name clash). */
    json_object_set(ctx, "messages", (json_t *)messages);
    json_object_set_new(ctx, "tools", json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_update(ctx, ct->tokens);
    if (extra && json_is_object(extra)) json_object_update(ctx, (json_t *)extra);
    int rc = jinja_render(ct->tpl, ctx, out, err);
    json_decref(ctx);
    return rc;
}
