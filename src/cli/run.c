/* `mlxcel run`: interactive chat with the model's chat template. /bye quits, /clear forgets
 * the conversation, a line holding only """ starts and ends multi-line input. The history is
 * kept within the context by dropping the oldest turns; the paged KV prefix cache makes each
 * new turn recompute only what changed. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen_common.h"

static const char *k_help =
    "usage: mlxcel run [DIR] [options]\n"
    "\n"
    "Interactive chat. Type a message and press Enter.\n"
    "  /bye        quit (also end of input)\n"
    "  /clear      forget the conversation\n"
    "  \"\"\"         on its own line: start / end a multi-line message\n"
    "\n"
    "  DIR, -m DIR                checkpoint directory with tokenizer.json and a chat template\n"
    "  -s, --system TEXT          system message\n"
    "%s"
    "  -h, --help                 this help\n";

typedef struct chat_state {
    tok_stream *ts;
    char *reply;
    size_t len, cap;
    engine_finish why;
} chat_state;

static void reply_append(chat_state *c, const char *p, size_t n) {
    if (!n) return;
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n + 1) cap *= 2;
        char *r = realloc(c->reply, cap);
        if (!r) return;
        c->reply = r;
        c->cap = cap;
    }
    memcpy(c->reply + c->len, p, n);
    c->len += n;
    c->reply[c->len] = '\0';
}

static int on_token(void *user, int64_t id, int32_t tok, float lp) {
    (void)id;
    (void)lp;
    chat_state *c = user;
    const char *out = NULL;
    size_t n = 0;
    const int stop = tok_stream_push(c->ts, tok, &out, &n);
    reply_append(c, out, n);
    return stop;
}

static void on_finish(void *user, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id;
    (void)st;
    ((chat_state *)user)->why = why;
}

/* Reads one message: a line, or the lines between two """ lines. NULL at end of input. */
static char *read_message(bool tty) {
    char *line = NULL, *msg = NULL;
    size_t cap = 0, len = 0;
    bool multi = false;
    for (;;) {
        if (tty) fputs(multi ? "... " : ">>> ", stdout), fflush(stdout);
        ssize_t r = getline(&line, &cap, stdin);
        if (r < 0) break;
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = '\0';
        if (!strcmp(line, "\"\"\"")) {
            if (multi) break;
            multi = true;
            continue;
        }
        char *m = realloc(msg, len + (size_t)r + 2);
        if (!m) break;
        msg = m;
        if (len) msg[len++] = '\n';
        memcpy(msg + len, line, (size_t)r + 1);
        len += (size_t)r;
        if (!multi) break;
    }
    free(line);
    if (!msg && !feof(stdin)) msg = strdup("");
    return msg;
}

/* Renders the conversation; drops the oldest non-system turns until the prompt leaves a
 * quarter of the context for the reply. Returns -1 when even the last message alone does not
 * fit (it is removed). */
static int fit_history(gen_session *s, json_t *msgs, int ctx, int32_t **ids, int *n, mx_error *err) {
    for (;;) {
        free(*ids);
        *ids = NULL;
        if (gen_render_chat(s, msgs, ids, n, err)) return -1;
        if (*n <= ctx - ctx / 4) return 0;
        /* first non-system message; never the one just typed */
        size_t first = 0;
        json_t *m0 = json_array_get(msgs, 0);
        if (m0 && !strcmp(json_string_value(json_object_get(m0, "role")), "system")) first = 1;
        if (json_array_size(msgs) <= first + 1) {
            json_array_remove(msgs, json_array_size(msgs) - 1);
            return mx_fail(err, "this message (%d tokens with the template) does not fit the "
                                "context of %d tokens; raise --ctx-size", *n, ctx);
        }
        json_array_remove(msgs, first);
        /* keep turns paired: drop the assistant reply that followed */
        json_t *next = json_array_get(msgs, first);
        if (next && json_array_size(msgs) > first + 1 &&
            !strcmp(json_string_value(json_object_get(next, "role")), "assistant"))
            json_array_remove(msgs, first);
    }
}

int cmd_run(int argc, char **argv) {
    gen_opts o;
    gen_opts_default(&o);
    const char *system_msg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(k_help, k_gen_opts_help);
            return 0;
        }
        if ((!strcmp(a, "-s") || !strcmp(a, "--system")) && i + 1 < argc) {
            system_msg = argv[++i];
            continue;
        }
        const int r = gen_opts_parse(&o, argc, argv, &i, "run");
        if (r < 0) return 2;
        if (r == 0) {
            if (a[0] != '-' && !o.model_dir) {
                o.model_dir = a;
                continue;
            }
            fprintf(stderr, "mlxcel run: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o.model_dir) {
        fprintf(stderr, "mlxcel run: give a model directory (mlxcel run DIR; see --help)\n");
        return 2;
    }
    if (o.no_chat_template) {
        fprintf(stderr, "mlxcel run: chat needs a chat template (drop --no-chat-template)\n");
        return 2;
    }
    mx_error err = {{0}};
    gen_session s;
    if (gen_session_open(&s, &o, "run", &err)) {
        fprintf(stderr, "mlxcel run: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    json_t *msgs = json_array();
    if (!s.rt.tok || !s.rt.tpl) {
        fprintf(stderr, "mlxcel run: %s needs tokenizer.json and a chat template "
                        "(chat_template.jinja, tokenizer_config.json, or --chat-template-file)\n",
                o.model_dir);
        goto out;
    }
    if (system_msg) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system_msg));
    const bool tty = isatty(0);
    const int ctx = engine_params_of(s.rt.e)->ctx_size;
    if (tty) fprintf(stderr, "mlxcel run: chat with %s (/bye to quit, /clear to forget, \"\"\" for multi-line)\n", o.model_dir);
    for (;;) {
        char *msg = read_message(tty);
        if (!msg || !strcmp(msg, "/bye")) {
            free(msg);
            break;
        }
        if (!strcmp(msg, "/clear")) {
            json_array_clear(msgs);
            if (system_msg)
                json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system_msg));
            fprintf(stderr, "(conversation cleared)\n");
            free(msg);
            continue;
        }
        if (!*msg) {
            free(msg);
            continue;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", msg));
        free(msg);
        int32_t *ids = NULL;
        int n = 0;
        if (fit_history(&s, msgs, ctx, &ids, &n, &err)) {
            fprintf(stderr, "mlxcel run: %s\n", err.msg);
            free(ids);
            continue;
        }
        chat_state c = {.ts = tok_stream_new(s.rt.tok, true)};
        if (o.n_stops) tok_stream_set_stops(c.ts, o.stops, o.n_stops);
        engine_request r = {.prompt = ids, .n_prompt = n, .sampling = s.sp, .max_tokens = o.n_predict,
                            .ignore_eos = o.ignore_eos, .on_token = on_token, .on_finish = on_finish,
                            .user = &c, .grammar = s.grammar, .grammar_vocab = s.grammar_vocab};
        if (engine_submit(s.rt.e, &r, &err) < 0 || engine_run(s.rt.e, &err) < 0) {
            fprintf(stderr, "mlxcel run: %s\n", err.msg);
            tok_stream_free(c.ts);
            free(ids);
            goto out;
        }
        if (c.why != ENGINE_FINISH_STOP) {
            const char *tail = NULL;
            size_t len = 0;
            tok_stream_flush(c.ts, &tail, &len);
            reply_append(&c, tail, len);
        }
        fputc('\n', stdout);
        if (c.why == ENGINE_FINISH_CONTEXT)
            fprintf(stderr, "(the reply filled the context; older turns will be dropped)\n");
        json_array_append_new(msgs, json_pack("{s:s, s:s#}", "role", "assistant", "content",
                                              c.reply ? c.reply : "", c.len));
        tok_stream_free(c.ts);
        free(c.reply);
        free(ids);
    }
    rc = 0;
out:
    json_decref(msgs);
    gen_session_close(&s);
    return rc;
}
