/* The families' call syntaxes in the reply parser (see srv_toolparse.c for the machine):
 * Qwen / Hermes <tool_call> with its JSON or XML body, Mistral [TOOL_CALLS], DeepSeek V3 tool
 * tokens, Llama's <|python_tag|>. Each is a sub-state of the REGION state; the JSON call
 * objects and argument values they contain are the shared steps of srv_toolparse.c. */
#include <stdlib.h>
#include <string.h>

#include "server/srv_toolparse.h"
#include "server/srv_toolparse_int.h"

/* ==== Qwen / Hermes ==== */
void cp_st_hermes(srv_cp *p, char c) {
    static const char *const close[] = {"</tool_call>"};
    static const char *const body[] = {"<parameter=", "</function>"};
    switch (p->sub) {
    case S_H_OPEN:
        if (!p->hold.n && cp_is_ws(c)) return;
        if (!p->hold.n && c == '{') {
            cp_obj_start(p, S_H_TAIL);
            return;
        }
        cp_putc(&p->hold, c);
        switch (cp_lit(p->hold.p, p->hold.n, "<function=")) {
        case CP_MATCH: p->hold.n = 0; p->tmp.n = 0; p->sub = S_X_NAME; return;
        case CP_PARTIAL: return;
        default: cp_fallback(p); return;
        }
    case S_H_TAIL:
        if (!p->hold.n && cp_is_ws(c)) return;
        /* anything else before the close tag is dropped */
        /* fall through */
    case S_H_SKIP:
        p->sub = S_H_SKIP;
        if (cp_hold_lits(p, c, close, 1, NULL) == 0) cp_region_exit(p, NULL);
        return;
    case S_X_NAME:
        if (c == '>') {
            if (!p->tmp.n) { cp_fallback(p); return; }
            cp_call_begin(p, p->tmp.p, p->tmp.n);
            p->sub = S_X_BODY;
            return;
        }
        if (c == '<' || c == '\n' || p->tmp.n >= 256) { cp_fallback(p); return; }
        cp_putc(&p->tmp, c);
        return;
    case S_X_BODY: {
        if (!p->hold.n && cp_is_ws(c)) return;
        int m = cp_hold_lits(p, c, body, 2, NULL);
        if (m == 0) {
            p->key.n = 0;
            p->sub = S_X_PKEY;
        } else if (m == 1) {
            if (!p->n_params) cp_out_args(p, "{}", 2);
            else cp_out_args(p, "}", 1);
            cp_go(p, S_H_TAIL);
        }
        return;
    }
    case S_X_PKEY:
        if (c == '>') {
            p->val.n = 0;
            p->sub = S_X_PVAL;
        } else if (p->key.n < 256) {
            cp_putc(&p->key, c);
        }
        return;
    default: { /* S_X_PVAL */
        static const char *const end[] = {"</parameter>"};
        if (cp_hold_lits(p, c, end, 1, cp_rel_val) != 0) return;
        const char *v = p->val.p ? p->val.p : "";
        size_t n = p->val.n;
        if (n && v[0] == '\n') v++, n--;
        if (n && v[n - 1] == '\n') n--;
        const char *type = srv_tool_set_param_type(p->cfg.tools, p->n_calls ? p->calls[p->n_calls - 1].name : "",
                                                   p->key.p ? p->key.p : "");
        char *jv = cp_xml_value_json(v, n, type);
        cp_buf piece = {0};
        cp_puts(&piece, p->n_params ? ", \"" : "{\"");
        cp_put_json_escaped(&piece, p->key.p ? p->key.p : "", p->key.n);
        cp_puts(&piece, "\": ");
        cp_puts(&piece, jv ? jv : "null");
        cp_out_args(p, piece.p, piece.n);
        cp_free(&piece);
        free(jv);
        p->n_params++;
        p->sub = S_X_BODY;
    }
    }
}

static bool name_char(char c) {
    return c == '_' || c == '-' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9');
}

void cp_st_mistral(srv_cp *p, char c) {
    static const char *const marks[] = {"[ARGS]", "[CALL_ID]"};
    static const char *const args[] = {"[ARGS]"};
    switch (p->sub) {
    case S_M_OPEN:
        if (cp_is_ws(c)) return;
        if (c == '[') p->sub = S_M_ARR;
        else if (c == '{') cp_obj_start(p, S_EXIT);
        else if (name_char(c)) {
            p->tmp.n = 0;
            cp_putc(&p->tmp, c);
            p->sub = S_M_NAME;
        } else cp_fallback(p);
        return;
    case S_M_ARR:
        if (cp_is_ws(c)) return;
        if (c == '{') cp_obj_start(p, S_M_NEXT);
        else if (c == ']' && !p->committed) cp_region_exit(p, NULL); /* [TOOL_CALLS][] */
        else cp_fallback(p);
        return;
    case S_M_NEXT:
        if (cp_is_ws(c)) return;
        if (c == ',') p->sub = S_M_ARR;
        else if (c == ']') cp_region_exit(p, NULL);
        else cp_region_exit(p, &c);
        return;
    case S_M_NAME: {
        if (!p->hold.n && c != '[') {
            if (!name_char(c) || p->tmp.n >= 256) cp_fallback(p);
            else cp_putc(&p->tmp, c);
            return;
        }
        int m = cp_hold_lits(p, c, marks, 2, cp_rel_tmp);
        if (m == 0) {
            cp_call_begin(p, p->tmp.p, p->tmp.n);
            cp_av_start(p, S_EXIT);
        } else if (m == 1) {
            p->sub = S_M_CALLID;
        } else if (p->tmp.n && !name_char(p->tmp.p[p->tmp.n - 1])) {
            cp_fallback(p); /* a '[' that starts no marker: not this syntax */
        }
        return;
    }
    default: /* S_M_CALLID: the id the model wrote is not kept (ids are the server's) */
        if (cp_hold_lits(p, c, args, 1, NULL) == 0) {
            cp_call_begin(p, p->tmp.p, p->tmp.n);
            cp_av_start(p, S_EXIT);
        }
    }
}

void cp_st_deepseek(srv_cp *p, char c) {
    static const char *const open[] = {DS_CALL_BEGIN, DS_CALLS_END};
    static const char *const sep[] = {DS_SEP};
    static const char *const fence[] = {"```json"};
    static const char *const end[] = {DS_CALL_END};
    switch (p->sub) {
    case S_D_OPEN: {
        if (!p->hold.n && cp_is_ws(c)) return;
        cp_putc(&p->hold, c);
        bool partial = false;
        for (int i = 0; i < 2; i++) {
            cp_match m = cp_lit(p->hold.p, p->hold.n, open[i]);
            if (m == CP_MATCH) {
                p->hold.n = 0;
                if (i == 0) {
                    p->tmp.n = 0;
                    p->sub = S_D_TYPE;
                } else {
                    cp_region_exit(p, NULL);
                }
                return;
            }
            partial |= m == CP_PARTIAL;
        }
        if (!partial) cp_fallback(p);
        return;
    }
    case S_D_TYPE:
        if (cp_hold_lits(p, c, sep, 1, cp_rel_tmp) == 0) {
            if (p->tmp.n == 8 && !memcmp(p->tmp.p, "function", 8)) {
                p->tmp.n = 0;
                p->sub = S_D_NAME;
            } else if (p->tmp.n) { /* V3.1: NAME<｜tool▁sep｜>{arguments} */
                cp_call_begin(p, p->tmp.p, p->tmp.n);
                cp_av_start(p, S_D_CLOSE);
            } else {
                cp_fallback(p);
            }
        } else if (p->tmp.n > 256) {
            cp_fallback(p);
        }
        return;
    case S_D_NAME:
        if (c == '\n') {
            if (!p->tmp.n) { cp_fallback(p); return; }
            cp_call_begin(p, p->tmp.p, p->tmp.n);
            p->sub = S_D_FENCE;
        } else if (c == '<' || p->tmp.n >= 256) {
            cp_fallback(p);
        } else {
            cp_putc(&p->tmp, c);
        }
        return;
    case S_D_FENCE:
        if (!p->hold.n && cp_is_ws(c)) return;
        if (!p->hold.n && (c == '{' || c == '[')) { /* no fence */
            cp_av_start(p, S_D_CLOSE);
            cp_st_av(p, c);
            return;
        }
        if (cp_hold_lits(p, c, fence, 1, NULL) == 0) cp_av_start(p, S_D_CLOSE);
        return;
    default: /* S_D_CLOSE: the closing fence and anything else up to the call's end token */
        if (cp_hold_lits(p, c, end, 1, NULL) == 0) cp_go(p, S_D_OPEN);
    }
}

/* Code after <|python_tag|> goes to a "python" / "code_interpreter" tool as {"code": ...}. */
static void code_begin(srv_cp *p, const char *text, size_t n) {
    const char *tool = srv_tool_set_has(p->cfg.tools, "python", 6) ? "python"
                       : srv_tool_set_has(p->cfg.tools, "code_interpreter", 16) ? "code_interpreter" : NULL;
    if (!tool) {
        cp_fallback(p);
        return;
    }
    cp_call_begin(p, tool, strlen(tool));
    cp_buf b = {0};
    cp_puts(&b, "{\"code\": \"");
    cp_put_json_escaped(&b, text, n);
    cp_out_args(p, b.p, b.n);
    cp_free(&b);
    p->sub = S_P_CODE;
}

void cp_st_pytag(srv_cp *p, char c) {
    switch (p->sub) {
    case S_P_OPEN:
        if (cp_is_ws(c)) return;
        if (c == '{') cp_obj_start(p, S_EXIT);
        else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            p->tmp.n = 0;
            cp_putc(&p->tmp, c);
            p->key.n = 0;
            p->sub = S_P_IDENT;
        } else code_begin(p, &c, 1);
        return;
    case S_P_IDENT:
        if (!p->key.n && (name_char(c) && c != '.' && c != '-') && p->tmp.n < 256) {
            cp_putc(&p->tmp, c);
            return;
        }
        cp_putc(&p->key, c);
        switch (cp_lit(p->key.p, p->key.n, ".call(")) {
        case CP_MATCH: p->val.n = 0; p->scan = (cp_scan){0}; p->quote = 0; p->sub = S_P_ARGS; return;
        case CP_PARTIAL: return;
        default: {
            cp_buf code = {0};
            cp_put(&code, p->tmp.p, p->tmp.n);
            cp_put(&code, p->key.p, p->key.n);
            code_begin(p, code.p, code.n);
            cp_free(&code);
            return;
        }
        }
    case S_P_ARGS: /* up to the ')' outside quotes */
        if (p->quote) {
            if (p->scan.esc) p->scan.esc = false;
            else if (c == '\\') p->scan.esc = true;
            else if (c == p->quote) p->quote = 0;
            cp_putc(&p->val, c);
            return;
        }
        if (c == '"' || c == '\'') p->quote = c;
        if (c != ')') {
            cp_putc(&p->val, c);
            return;
        }
        {
        char *args = cp_python_kwargs_json(p->val.p ? p->val.p : "", p->val.n);
        if (!args) {
            cp_fallback(p);
            return;
        }
        cp_call_begin(p, p->tmp.p, p->tmp.n);
        cp_out_args(p, args, strlen(args));
        free(args);
        cp_region_exit(p, NULL);
        return;
    }
    default: { /* S_P_CODE */
        cp_buf b = {0};
        cp_put_json_escaped(&b, &c, 1);
        cp_out_args(p, b.p, b.n);
        cp_free(&b);
    }
    }
}

