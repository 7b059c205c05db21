/* The enforcement hook: a request whose tool_choice is "required" or names a function, or whose
 * tools are `strict`, can only be honoured by constraining the sampler to the family's call
 * syntax with each function's parameters schema. This file writes that constraint as GBNF
 * (llama.cpp's grammar format); the grammar sampler (another module) consumes it.
 *
 * srv_tools_enforce compiles it with the grammar module (grammar/json_schema.h converts each
 * parameters schema) into the request's sampling grammar; the reply parser reads what the
 * grammar lets through. */
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "server/srv_request.h"
#include "server/srv_tools.h"
#include "server/srv_toolparse_int.h"

/* ==== GBNF text ==== */
/* A GBNF string literal of s (UTF-8 copied as is; quotes, backslashes, control bytes escaped). */
static void lit(cp_buf *b, const char *s) {
    cp_putc(b, '"');
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') {
            cp_putc(b, '\\');
            cp_putc(b, (char)c);
        } else if (c == '\n') {
            cp_puts(b, "\\n");
        } else if (c < 0x20) {
            snprintf(e, sizeof e, "\\x%02X", c);
            cp_puts(b, e);
        } else {
            cp_putc(b, (char)c);
        }
    }
    cp_putc(b, '"');
}

static const char k_json_rules[] =
    "j-value ::= j-object | j-array | j-string | j-number | \"true\" | \"false\" | \"null\"\n"
    "j-object ::= \"{\" j-ws ( j-string j-ws \":\" j-ws j-value j-ws ( \",\" j-ws j-string j-ws \":\" j-ws j-value "
    "j-ws )* )? \"}\"\n"
    "j-array ::= \"[\" j-ws ( j-value j-ws ( \",\" j-ws j-value j-ws )* )? \"]\"\n"
    "j-string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F] [0-9a-fA-F] "
    "[0-9a-fA-F] [0-9a-fA-F] ) )* \"\\\"\"\n"
    "j-number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "j-ws ::= [ \\t\\n]?\n";

/* The literal text of one call of tool `name` up to its arguments, and after them. */
static void call_texts(srv_tool_format f, const char *name, cp_buf *pre, cp_buf *post) {
    switch (f) {
    case SRV_TOOLS_HERMES:
        cp_puts(pre, "<tool_call>\n{\"name\": \"");
        cp_puts(pre, name);
        cp_puts(pre, "\", \"arguments\": ");
        cp_puts(post, "}\n</tool_call>");
        break;
    case SRV_TOOLS_LLAMA3:
        cp_puts(pre, "{\"name\": \"");
        cp_puts(pre, name);
        cp_puts(pre, "\", \"parameters\": ");
        cp_puts(post, "}");
        break;
    case SRV_TOOLS_MISTRAL:
        cp_puts(pre, "{\"name\": \"");
        cp_puts(pre, name);
        cp_puts(pre, "\", \"arguments\": ");
        cp_puts(post, "}");
        break;
    default: /* DeepSeek V3 */
        cp_puts(pre, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>");
        cp_puts(pre, name);
        cp_puts(pre, "\n```json\n");
        cp_puts(post, "\n```<｜tool▁call▁end｜>");
    }
}

int srv_tools_constraint(srv_tool_format f, const srv_chat_opts *o, srv_schema_rules_fn schema_rules, void *ctx,
                         srv_tool_constraint *out, mx_error *err) {
    memset(out, 0, sizeof *out);
    if (f == SRV_TOOLS_NONE) return mx_fail(err, "tools: no tool-call syntax to constrain to");
    if (!o->tools.n) return mx_fail(err, "tools: no tools to call");
    int only = -1;
    if (o->choice.mode == SRV_TOOL_CHOICE_NAMED) {
        for (int i = 0; i < o->tools.n; i++)
            if (!strcmp(o->tools.t[i].name, o->choice.name)) only = i;
        if (only < 0) return mx_fail(err, "tool_choice: no tool named '%s'", o->choice.name);
    }
    cp_buf g = {0}, rules = {0};
    /* one rule per callable tool: call-i ::= PRE args-i POST */
    for (int i = 0; i < o->tools.n; i++) {
        if (only >= 0 && i != only) continue;
        char rn[32];
        snprintf(rn, sizeof rn, "args-%d", i);
        const json_t *schema = o->tools.t[i].parameters;
        char *r = schema_rules && schema ? schema_rules(ctx, schema, rn, err) : NULL;
        if (schema_rules && schema && !r) {
            cp_free(&g);
            cp_free(&rules);
            return -1;
        }
        if (r) {
            cp_puts(&rules, r);
            if (rules.n && rules.p[rules.n - 1] != '\n') cp_putc(&rules, '\n');
            free(r);
        } else {
            cp_puts(&rules, rn);
            cp_puts(&rules, " ::= j-object\n");
        }
        cp_buf pre = {0}, post = {0};
        call_texts(f, o->tools.t[i].name, &pre, &post);
        char line[64];
        snprintf(line, sizeof line, "call-%d ::= ", i);
        cp_puts(&rules, line);
        lit(&rules, pre.p);
        cp_puts(&rules, " ");
        cp_puts(&rules, rn);
        cp_puts(&rules, " ");
        lit(&rules, post.p);
        cp_putc(&rules, '\n');
        cp_free(&pre);
        cp_free(&post);
    }
    cp_puts(&rules, "call ::= ");
    for (int i = 0, k = 0; i < o->tools.n; i++) {
        if (only >= 0 && i != only) continue;
        char ref[32];
        snprintf(ref, sizeof ref, "%scall-%d", k++ ? " | " : "", i);
        cp_puts(&rules, ref);
    }
    cp_putc(&rules, '\n');
    /* several calls where the request allows them (Llama 3.x makes one call at a time) */
    const bool many = o->parallel && only < 0 && f != SRV_TOOLS_LLAMA3;
    const char *sep = f == SRV_TOOLS_MISTRAL ? ", " : "\n";
    cp_puts(&g, "root ::= ");
    if (f == SRV_TOOLS_MISTRAL) cp_puts(&g, "\"[TOOL_CALLS][\" ");
    if (f == SRV_TOOLS_DEEPSEEK_V3) cp_puts(&g, "\"<｜tool▁calls▁begin｜>\" ");
    cp_puts(&g, "call");
    if (many) {
        cp_puts(&g, " ( ");
        lit(&g, sep);
        cp_puts(&g, " call )*");
    }
    if (f == SRV_TOOLS_MISTRAL) cp_puts(&g, " \"]\"");
    if (f == SRV_TOOLS_DEEPSEEK_V3) cp_puts(&g, " \"<｜tool▁calls▁end｜>\"");
    cp_putc(&g, '\n');
    cp_put(&g, rules.p, rules.n);
    cp_puts(&g, k_json_rules);
    cp_free(&rules);
    /* tool_choice auto with strict tools: free text until the model opens a call */
    out->lazy = o->choice.mode == SRV_TOOL_CHOICE_AUTO;
    const char *trig = f == SRV_TOOLS_HERMES ? "<tool_call>" : f == SRV_TOOLS_MISTRAL ? "[TOOL_CALLS]"
                       : f == SRV_TOOLS_DEEPSEEK_V3 ? "<｜tool▁calls▁begin｜>" : "{\"name\": \"";
    snprintf(out->trigger, sizeof out->trigger, "%s", trig);
    out->gbnf = g.p;
    return 0;
}

bool srv_tools_need_constraint(const srv_chat_opts *o) {
    if (o->choice.mode == SRV_TOOL_CHOICE_REQUIRED || o->choice.mode == SRV_TOOL_CHOICE_NAMED) return true;
    for (int i = 0; i < o->tools.n; i++)
        if (o->tools.t[i].strict) return true;
    return false;
}

/* ==== Enforcement ====
 * An enforced tool_choice (required, or a named function) constrains the whole reply to the
 * family's call syntax: srv_tools_constraint's GBNF, each tool's arguments from its parameters
 * schema through the grammar module's converter (grammar/json_schema.h), compiled here into
 * o->call_grammar for the request's sampling (srv_http.c). A schema the converter refuses: a
 * 400 naming it for a strict tool; a non-strict tool's arguments fall back to any JSON object
 * (OpenAI does not promise them to follow the schema). */
typedef struct schema_ctx {
    grammar_builder *b;
    const srv_chat_opts *o;
    bool refused; /* a strict tool's schema: the error names tools[i] */
} schema_ctx;

static char *schema_rules(void *ctx, const json_t *schema, const char *rule, mx_error *err) {
    schema_ctx *c = ctx;
    bool strict = false;
    int which = -1;
    for (int i = 0; i < c->o->tools.n; i++)
        if (c->o->tools.t[i].parameters == schema) strict = c->o->tools.t[i].strict, which = i;
    const char *name = NULL;
    mx_error e2 = {{0}};
    if (grammar_builder_add_schema(c->b, "tool-args", (json_t *)schema, &name, &e2)) {
        if (strict) {
            c->refused = true;
            mx_fail(err, "tools[%d].function.parameters: %s", which, e2.msg);
            return NULL;
        }
        name = "j-object";
    }
    const size_t n = strlen(rule) + strlen(name) + 8;
    char *out = malloc(n);
    if (!out) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    snprintf(out, n, "%s ::= %s\n", rule, name);
    return out;
}

int srv_tools_enforce(srv_tool_format f, srv_chat_opts *o, const char **param, mx_error *err) {
    const bool by_choice = o->choice.mode == SRV_TOOL_CHOICE_REQUIRED || o->choice.mode == SRV_TOOL_CHOICE_NAMED;
    *param = by_choice ? "tool_choice" : "tools";
    schema_ctx sc = {grammar_builder_new(), o, false};
    if (!sc.b) return mx_fail(err, "out of memory");
    srv_tool_constraint c;
    int rc = srv_tools_constraint(f, o, schema_rules, &sc, &c, err);
    if (rc && sc.refused) *param = "tools";
    if (!rc) {
        /* the converter's rules (named tool-args...) and the call syntax's, one GBNF text;
         * compiled once for every request with the same tools and choice (the server's cache) */
        const char *rules = grammar_builder_text(sc.b);
        cp_buf g = {0};
        cp_puts(&g, c.gbnf);
        cp_putc(&g, '\n');
        cp_puts(&g, rules ? rules : "");
        free(c.gbnf);
        grammar_release(o->call_grammar);
        o->call_grammar = NULL;
        rc = g.p ? srv_grammar_compile_cached(g.p, g.n, &o->call_grammar, err) : mx_fail(err, "out of memory");
        if (rc) mx_wrap(err, "%s: the call grammar", *param);
        /* strict tools under auto: free text until the model opens a call, then the call's grammar */
        snprintf(o->call_trigger, sizeof o->call_trigger, "%s", c.lazy ? c.trigger : "");
        cp_free(&g);
    }
    grammar_builder_free(sc.b);
    return rc;
}
