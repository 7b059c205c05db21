/* Routes that do not generate: health, models, props, slots, metrics, tokenize, detokenize,
 * apply-template; and the chat page (srv_webui.c). */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"
#include "server/srv_mhd.h"
#include "server/srv_tools.h"
#include "server/srv_webui.h"

/* ==== Reply helpers (same shapes as srv_http.c) ==== */
static MHD_Result_t send_body(srv_server *s, struct MHD_Connection *c, int status, const char *ctype, char *body) {
    /* the answer is handed over, not copied: a large one (/detokenize) is not held twice */
    struct MHD_Response *r = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", ctype);
    return srv_mhd_queue(s, c, status, r);
}

static MHD_Result_t send_json(srv_server *s, struct MHD_Connection *c, int status, json_t *o) {
    char *b = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return send_body(s, c, status, "application/json; charset=utf-8", b);
}

static MHD_Result_t send_err(srv_server *s, struct MHD_Connection *c, int status, const char *msg, const char *param) {
    return send_body(s, c, status, "application/json; charset=utf-8", srv_resp_error(status, msg, param));
}

/* Parses a JSON object body; on failure replies 400 and returns NULL. */
static json_t *body_object(srv_server *s, struct MHD_Connection *c, const char *body, size_t len, MHD_Result_t *rc) {
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o || !json_is_object(o)) {
        char msg[300];
        if (!o) {
            char m[280];
            srv_json_error_msg(&je, m, sizeof m);
            snprintf(msg, sizeof msg, "body: %s", m);
        } else {
            snprintf(msg, sizeof msg, "body: expected a JSON object");
        }
        json_decref(o);
        *rc = send_err(s, c, 400, msg, "body");
        return NULL;
    }
    return o;
}

static bool opt_bool(json_t *o, const char *k, bool def, bool *ok) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return def;
    if (!json_is_boolean(v)) { *ok = false; return def; }
    return json_is_true(v);
}

/* ==== Text routes ==== */
/* srv_tokenize.c: the answer streamed from the ids (takes them) */
MHD_Result_t srv_tokenize_reply(srv_server *s, struct MHD_Connection *c, int32_t *ids, size_t n, bool with_pieces);

static MHD_Result_t route_tokenize(srv_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    MHD_Result_t rc;
    json_t *o = body_object(s, c, body, len, &rc);
    if (!o) return rc;
    json_t *content = json_object_get(o, "content");
    bool ok = true;
    bool add_special = opt_bool(o, "add_special", false, &ok);
    bool with_pieces = opt_bool(o, "with_pieces", false, &ok);
    if (!(json_is_string(content) || json_is_array(content)) || !ok) {
        json_decref(o);
        return send_err(s, c, 400,
                        !ok ? "add_special/with_pieces: expected a boolean"
                            : "content: expected a string or an array of token ids and strings",
                        !ok ? "add_special" : "content");
    }
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err;
    /* an array: llama-server's mixed content, each string tokenized in place */
    if (json_is_array(content) ? srv_tokenize_mixed(content, add_special, srv_tokenize_text, s->be,
                                                    s->be->text_ops->vocab_size(s->be->text), &ids, &n, &err)
                               : s->be->text_ops->tokenize(s->be->text, json_string_value(content),
                                                           json_string_length(content), add_special, &ids, &n, &err)) {
        json_decref(o);
        char msg[sizeof err.msg + 16];
        snprintf(msg, sizeof msg, "content: %s", err.msg);
        return send_err(s, c, 400, msg, "content");
    }
    json_decref(o); /* the body's text is no longer needed: only the ids are kept */
    return srv_tokenize_reply(s, c, ids, n, with_pieces);
}

static MHD_Result_t route_detokenize(srv_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    MHD_Result_t rc;
    json_t *o = body_object(s, c, body, len, &rc);
    if (!o) return rc;
    json_t *t = json_object_get(o, "tokens");
    int vocab = s->be->text_ops->vocab_size(s->be->text);
    if (!json_is_array(t)) { json_decref(o); return send_err(s, c, 400, "tokens: expected an array of token ids", "tokens"); }
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; ids && i < n; i++) {
        json_t *e = json_array_get(t, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= vocab) {
            free(ids);
            json_decref(o);
            char msg[128];
            snprintf(msg, sizeof msg, "tokens: element %zu is not a token id in [0, %d)", i, vocab);
            return send_err(s, c, 400, msg, "tokens");
        }
        ids[i] = (int32_t)json_integer_value(e);
    }
    json_decref(o);
    char *out = NULL;
    size_t out_n = 0;
    mx_error err;
    if (!ids || s->be->text_ops->detokenize(s->be->text, ids, n, false, &out, &out_n, &err)) {
        free(ids);
        return send_err(s, c, 400, ids ? err.msg : "out of memory", "tokens");
    }
    free(ids);
    json_t *str = json_stringn(out, out_n);
    free(out);
    if (!str) str = json_string(""); /* cut inside a UTF-8 sequence */
    return send_json(s, c, 200, json_pack("{s:o}", "content", str));
}

static MHD_Result_t route_apply_template(srv_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    srv_request r;
    mx_error err;
    if (srv_request_parse(&r, SRV_API_CHAT, body, len, &s->cfg, s->be->text_ops->vocab_size(s->be->text), &err)) {
        MHD_Result_t rc = send_err(s, c, 400, err.msg, r.bad_param);
        srv_request_free(&r);
        return rc;
    }
    if (!s->be->text_ops->has_template) {
        srv_request_free(&r);
        return send_err(s, c, 400, "this model has no chat template; start the server with --chat-template-file", "messages");
    }
    char *prompt = NULL;
    const char *param = "messages";
    int rc = srv_chat_render(s->chat_caps, s->be, r.chat, r.messages, r.template_extra, r.add_generation_prompt,
                             &prompt, &param, &err);
    srv_request_free(&r);
    if (rc) return send_err(s, c, 400, err.msg, param);
    json_t *p = json_string(prompt);
    free(prompt);
    return send_json(s, c, 200, json_pack("{s:o}", "prompt", p ? p : json_string("")));
}

/* ==== Info routes ==== */
static json_t *default_settings(srv_server *s) {
    const srv_config *c = &s->cfg;
    return json_pack("{s:i, s:{s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:i, s:I}}", "n_ctx", c->ctx_size, "params",
                     "n_predict", c->n_predict, "temperature", (double)c->temperature, "top_p", (double)c->top_p,
                     "top_k", c->top_k, "min_p", (double)c->min_p, "repeat_penalty", (double)c->repeat_penalty,
                     "presence_penalty", (double)c->presence_penalty, "frequency_penalty",
                     (double)c->frequency_penalty, "repeat_last_n", c->repeat_last_n, "seed", (json_int_t)c->seed);
}

/* meta as llama-server's (n_vocab: `mlxcel loadtest` draws its token-id prompts from it;
 * n_embd: the length of an embedding) */
static json_t *model_object(srv_server *s, const char *id) {
    const srv_model_info *m = &s->be->info;
    return json_pack("{s:s, s:s, s:I, s:s, s:{s:I, s:i, s:i, s:i, s:i, s:s, s:s}}", "id", id, "object", "model",
                     "created", (json_int_t)s->t_start, "owned_by", "mlxcel", "meta", "n_params",
                     (json_int_t)m->n_params, "n_ctx", s->cfg.ctx_size, "n_ctx_train", m->n_ctx_train, "n_vocab",
                     s->be->text_ops->vocab_size(s->be->text), "n_embd", m->n_embd, "family", m->family, "dtype",
                     m->dtype);
}

static MHD_Result_t route_models(srv_server *s, struct MHD_Connection *c) {
    json_t *data = json_array();
    int n = s->cfg.n_aliases ? s->cfg.n_aliases : 1;
    for (int i = 0; i < n; i++)
        json_array_append_new(data, model_object(s, s->cfg.n_aliases ? s->cfg.aliases[i] : s->be->info.name));
    return send_json(s, c, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* GET /v1/models/{id} (OpenAI's models.retrieve): a served name, else 404. The id may hold
 * '/' (libmicrohttpd has already decoded %2F). */
static MHD_Result_t route_model_one(srv_server *s, struct MHD_Connection *c, const char *id) {
    int n = s->cfg.n_aliases ? s->cfg.n_aliases : 1;
    for (int i = 0; i < n; i++)
        if (!strcmp(id, s->cfg.n_aliases ? s->cfg.aliases[i] : s->be->info.name))
            return send_json(s, c, 200, model_object(s, id));
    char msg[400];
    snprintf(msg, sizeof msg, "the model '%.200s' does not exist on this server (GET /v1/models lists them)", id);
    return send_err(s, c, 404, msg, "model");
}

static MHD_Result_t route_props(srv_server *s, struct MHD_Connection *c) {
    const srv_model_info *m = &s->be->info;
    const char *tpl = m->chat_template_text ? m->chat_template_text : ""; /* the Jinja text, as llama-server */
    return send_json(s, c, 200,
                     json_pack("{s:o, s:i, s:s, s:s, s:s, s:s, s:{s:b, s:b}, s:s, s:s}", "default_generation_settings",
                               default_settings(s), "total_slots", s->cfg.n_parallel, "model_path", m->path,
                               "model_alias", m->name, "chat_template", tpl, "build_info",
                               "mlxcel " MLXCEL_VERSION, "modalities", "vision", 0, "audio", 0,
                               "cache_type_k", m->cache_type_k, "cache_type_v", m->cache_type_v));
}

/* The engine seam reports counts, not per-slot state: slots are listed with the number of
 * busy ones (the first n_running) and the server-wide context size. */
static MHD_Result_t route_slots(srv_server *s, struct MHD_Connection *c) {
    /* 501 not_supported_error, as llama-server: the route exists, this server has it off */
    if (!s->cfg.slots) return send_err(s, c, 501, "the /slots endpoint is disabled (--no-slots)", NULL);
    srv_engine_stats st;
    int out;
    srv_core_snapshot(s, &st, &out);
    int busy = st.n_running < out ? st.n_running : out;
    json_t *arr = json_array();
    for (int i = 0; i < s->cfg.n_parallel; i++)
        json_array_append_new(arr, json_pack("{s:i, s:i, s:b}", "id", i, "n_ctx", s->cfg.ctx_size, "is_processing", i < busy));
    return send_json(s, c, 200, arr);
}

static MHD_Result_t route_metrics(srv_server *s, struct MHD_Connection *c) {
    if (!s->cfg.metrics) return send_err(s, c, 501, "the /metrics endpoint is disabled; start the server with --metrics", NULL);
    char *text = NULL;
    size_t len = 0;
    if (srv_metrics_render(s->metrics, &text, &len)) return send_err(s, c, 500, "out of memory", NULL);
    return send_body(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", text);
}

/* ==== Dispatch ==== */
MHD_Result_t srv_route_info(srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                            const char *body, size_t len, bool *handled);
MHD_Result_t srv_route_info(srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                            const char *body, size_t len, bool *handled) {
    static const char *gets[] = {"/health", "/v1/health", "/v1/models", "/models", "/props", "/slots", "/metrics"};
    static const char *posts[] = {"/tokenize", "/detokenize", "/apply-template"};
    MHD_Result_t web = srv_webui_route(s, c, method, url, handled); /* GET /: the chat page */
    if (*handled) return web;
    const char *model_id = !strncmp(url, "/v1/models/", 11) ? url + 11 : !strncmp(url, "/models/", 8) ? url + 8 : NULL;
    if (model_id && *model_id) {
        *handled = true;
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) return srv_mhd_method_not_allowed(s, c, "GET");
        return route_model_one(s, c, model_id);
    }
    int gi = -1, pi = -1;
    for (int i = 0; i < 7; i++) if (!strcmp(url, gets[i])) gi = i;
    for (int i = 0; i < 3; i++) if (!strcmp(url, posts[i])) pi = i;
    if (gi < 0 && pi < 0) return MHD_NO;
    *handled = true;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (gi >= 0 && !get) return srv_mhd_method_not_allowed(s, c, "GET");
    if (pi >= 0 && strcmp(method, "POST")) return srv_mhd_method_not_allowed(s, c, "POST");
    switch (gi) {
    case 0: case 1: return send_json(s, c, 200, json_pack("{s:s}", "status", "ok"));
    case 2: case 3: return route_models(s, c);
    case 4: return route_props(s, c);
    case 5: return route_slots(s, c);
    case 6: return route_metrics(s, c);
    default: break;
    }
    if (pi == 0) return route_tokenize(s, c, body, len);
    if (pi == 1) return route_detokenize(s, c, body, len);
    return route_apply_template(s, c, body, len);
}
