/* The pooling of an embedding checkpoint, from its sentence-transformers files. See srv_embed.h.
 *
 * A sentence-transformers checkpoint (Qwen3-Embedding, gte-Qwen2, ...) lists its pipeline in
 * modules.json: Transformer (the decoder: this server's forward up to the final norm), Pooling
 * (1_Pooling/config.json says which), Normalize (L2). llama.cpp's converter reads the same
 * Pooling config into the GGUF's pooling type, which llama-server then uses; a checkpoint with
 * no such file is pooled by its last token, the convention of decoder embedding models. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "server/srv_embed.h"

/* ==== Names ==== */
const char *srv_pooling_name(srv_pooling p) {
    switch (p) {
    case SRV_POOL_LAST: return "last";
    case SRV_POOL_MEAN: return "mean";
    case SRV_POOL_CLS: return "cls";
    case SRV_POOL_NONE: return "none";
    }
    return "?";
}

int srv_pooling_parse(const char *s, srv_pooling *out) {
    static const srv_pooling all[] = {SRV_POOL_LAST, SRV_POOL_MEAN, SRV_POOL_CLS, SRV_POOL_NONE};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, srv_pooling_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

/* ==== sentence-transformers files ==== */
/* The module kind of a modules.json "type" ("sentence_transformers.models.Pooling" -> Pooling). */
static const char *module_kind(const char *type) {
    const char *dot = strrchr(type, '.');
    return dot ? dot + 1 : type;
}

/* The pooling of 1_Pooling/config.json: the newer "pooling_mode" string, or the booleans every
 * version writes. Exactly one mode this server computes, or an error naming what was found. */
static int read_pooling_config(const char *path, int n_embd, srv_pooling *out, char *why, size_t why_len,
                               mx_error *err) {
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c || !json_is_object(c)) {
        json_decref(c);
        return mx_fail(err, "%s: %s", path, c ? "expected a JSON object" : je.text);
    }
    int rc = 0;
    json_t *dim = json_object_get(c, "word_embedding_dimension");
    if (json_is_integer(dim) && json_integer_value(dim) != n_embd) {
        rc = mx_fail(err, "%s: word_embedding_dimension %lld differs from the model's hidden size %d", path,
                     (long long)json_integer_value(dim), n_embd);
        goto out;
    }
    static const struct { const char *key, *mode; int pool; } modes[] = {
        {"pooling_mode_lasttoken", "lasttoken", SRV_POOL_LAST},
        {"pooling_mode_mean_tokens", "mean", SRV_POOL_MEAN},
        {"pooling_mode_cls_token", "cls", SRV_POOL_CLS},
        {"pooling_mode_max_tokens", "max", -1},
        {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens", -1},
        {"pooling_mode_weightedmean_tokens", "weightedmean", -1},
    };
    const size_t n_modes = sizeof modes / sizeof modes[0];
    int found = -2, n_on = 0;
    const char *name = NULL;
    json_t *pm = json_object_get(c, "pooling_mode");
    for (size_t i = 0; i < n_modes; i++) {
        const bool on = json_is_string(pm) ? !strcmp(json_string_value(pm), modes[i].mode)
                                           : json_is_true(json_object_get(c, modes[i].key));
        if (on) {
            n_on++;
            found = modes[i].pool;
            name = modes[i].key;
        }
    }
    if (n_on != 1 || found < 0) {
        rc = mx_fail(err, "%s: %s; this server pools by the last token, the mean or the first (CLS) token only "
                          "(--pooling chooses one)",
                     path, n_on == 0 ? "no pooling mode it knows is set" : n_on > 1 ? "several pooling modes are set "
                     "(sentence-transformers concatenates them)" : name);
        goto out;
    }
    *out = (srv_pooling)found;
    snprintf(why, why_len, "%.1100s: %s", path, name);
out:
    json_decref(c);
    return rc;
}

/* The prompts sentence-transformers may prepend (its encode(prompt_name=...)): named in the log,
 * since a request's text is embedded as sent (as llama-server and the OpenAI API do). */
static void log_prompts(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config_sentence_transformers.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    json_t *pr = c ? json_object_get(c, "prompts") : NULL;
    if (json_is_object(pr) && json_object_size(pr) > 0) {
        char names[256] = "";
        const char *k;
        json_t *v;
        json_object_foreach(pr, k, v) {
            if (!json_is_string(v) || !json_string_length(v)) continue;
            if (names[0]) strncat(names, ", ", sizeof names - strlen(names) - 1);
            strncat(names, k, sizeof names - strlen(names) - 1);
        }
        if (names[0])
            LOG_INFO("embeddings: the checkpoint's sentence-transformers prompts (%s) are not added: a request's "
                     "text is embedded as sent (prepend a prompt yourself, as the model card says)", names);
    }
    json_decref(c);
}

int srv_embed_resolve(const char *dir, const char *flag, int n_embd, srv_pooling *out, mx_error *err) {
    char path[1200], why[1400] = "no sentence-transformers modules.json: the decoder default";
    snprintf(path, sizeof path, "%s/modules.json", dir);
    json_error_t je;
    json_t *mods = json_load_file(path, 0, &je);
    if (!mods && strstr(je.text, "unable to open") == NULL)
        return mx_fail(err, "%s: %s", path, je.text);
    *out = SRV_POOL_LAST;
    bool normalize = false;
    int rc = 0;
    const char *pool_dir = NULL;
    if (mods) {
        if (!json_is_array(mods)) {
            rc = mx_fail(err, "%s: expected an array of modules", path);
            goto out;
        }
        size_t i;
        json_t *m;
        json_array_foreach(mods, i, m) {
            const char *type = json_string_value(json_object_get(m, "type"));
            const char *kind = type ? module_kind(type) : "";
            if (!strcmp(kind, "Transformer")) continue;
            if (!strcmp(kind, "Normalize")) { normalize = true; continue; }
            if (!strcmp(kind, "Pooling") && !pool_dir) {
                pool_dir = json_string_value(json_object_get(m, "path"));
                if (!pool_dir) pool_dir = "";
                continue;
            }
            rc = mx_fail(err, "%s: module %zu (%s) is not supported: this server computes Transformer -> "
                              "Pooling -> Normalize only, so its vectors would not be this model's",
                         path, i, type ? type : "no type");
            goto out;
        }
        snprintf(why, sizeof why, "%s: no Pooling module: the decoder default", path);
    }
    if (flag && flag[0]) {
        if (!strcmp(flag, "rank")) {
            rc = mx_fail(err, "--pooling rank: reranking is not supported by this server");
            goto out;
        }
        if (srv_pooling_parse(flag, out)) {
            rc = mx_fail(err, "--pooling: expected none, mean, cls or last, got '%s'", flag);
            goto out;
        }
        snprintf(why, sizeof why, "--pooling");
    } else if (pool_dir) {
        char cfg[1300];
        snprintf(cfg, sizeof cfg, "%s/%s/config.json", dir, pool_dir);
        if ((rc = read_pooling_config(cfg, n_embd, out, why, sizeof why, err))) goto out;
    }
    LOG_INFO("embeddings: pooling %s (%s)%s; vectors L2-normalized unless a request's embd_normalize says "
             "otherwise; the generation routes answer 501", srv_pooling_name(*out), why,
             mods && !normalize ? " (modules.json has no Normalize module)" : "");
    log_prompts(dir);
out:
    json_decref(mods);
    return rc;
}
