/* Python methods callable from templates (str, dict, list, loop), the global functions
 * transformers provides (range, namespace, dict, raise_exception, strftime_now), and
 * printf-style "%" formatting. Strings are UTF-8; indices and lengths are in code points. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "text/jinja_internal.h"

/* ==== Argument helpers ==== */
/* Positional index `pos` or keyword `name`; false when absent. */
static bool arg(const jv *args, size_t n_args, const char **kw_names, const jv *kw_vals, size_t n_kw,
                size_t pos, const char *name, jv *out) {
    if (pos < n_args) {
        *out = args[pos];
        return true;
    }
    for (size_t i = 0; name && i < n_kw; i++)
        if (!strcmp(kw_names[i], name)) {
            *out = kw_vals[i];
            return true;
        }
    return false;
}

static jv mkstr(jrender *r, const char *p, size_t n) {
    char *s = jarena_strndup(&r->arena, p, n);
    return s ? jv_strn(s, n) : jv_undef(NULL);
}

static jv list_val(jv_list *l) {
    jv v = {.k = JV_LIST};
    v.u.l = l;
    return v;
}

static int need_str(jrender *r, int line, jv v, const char *what) {
    if (v.k == JV_STR) return 0;
    if (v.k == JV_UNDEF) return jr_undefined_error(r, line, v);
    return jr_fail(r, line, "%s must be str, not %s", what, jv_type_name(v));
}

/* ==== str methods ==== */
static const char *const k_str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace", "upper",
    "lower", "title", "capitalize", "find", "rfind", "index", "count", "join", "splitlines",
    "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "format", NULL};
static const char *const k_dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const k_list_methods[] = {"index", "count", "copy", NULL};

static bool in_list(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name)) return true;
    return false;
}

bool jinja_has_method(jv self, const char *name) {
    switch ((jv_kind)self.k) {
    case JV_STR: return in_list(k_str_methods, name);
    case JV_DICT: return in_list(k_dict_methods, name);
    case JV_LIST: return in_list(k_list_methods, name);
    default: return false;
    }
}

static bool in_chars(int32_t c, jv chars) {
    if (chars.k != JV_STR) return ju8_is_space(c);
    size_t i = 0;
    while (i < chars.u.s.n)
        if (ju8_next(chars.u.s.p, chars.u.s.n, &i) == c) return true;
    return false;
}

/* Python str.strip/lstrip/rstrip: chars is a str or None (whitespace). */
jv jinja_strip(jv s, jv chars, bool left, bool right) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, a = 0, b = n;
    if (left) {
        size_t i = 0;
        while (i < n) {
            size_t prev = i;
            if (!in_chars(ju8_next(p, n, &i), chars)) {
                i = prev;
                break;
            }
        }
        a = i;
    }
    if (right) {
        size_t i = a, keep = a;
        while (i < n) {
            int32_t c = ju8_next(p, n, &i);
            if (!in_chars(c, chars)) keep = i;
        }
        b = keep;
    }
    return jv_strn(p + a, b - a);
}

static int str_split(jrender *r, int line, jv s, jv sep, int64_t maxsplit, bool from_right, jv *out) {
    jv_list *l = jv_list_new(&r->arena, 0);
    if (!l) return jr_oom(r, line);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (sep.k == JV_NONE || sep.k == JV_UNDEF) {
        /* runs of whitespace; leading/trailing whitespace produces no empty strings */
        size_t i = 0;
        int64_t splits = 0;
        if (from_right) {
            /* Word boundaries first; the part left of the last maxsplit words keeps its
             * leading whitespace: "  a b c".rsplit(None, 1) == ["  a b", "c"]. */
            size_t *ws = NULL, *we = NULL, nw = 0, cap = 0;
            while (i < n) {
                size_t prev = i;
                if (ju8_is_space(ju8_next(p, n, &i))) continue;
                size_t start = prev, end = i;
                while (end < n) {
                    size_t q = end;
                    if (ju8_is_space(ju8_next(p, n, &q))) break;
                    end = q;
                }
                if (nw == cap) {
                    cap = cap ? cap * 2 : 16;
                    size_t *a1 = realloc(ws, cap * sizeof *ws), *a2 = a1 ? realloc(we, cap * sizeof *we) : NULL;
                    if (!a1 || !a2) {
                        free(a1 ? a1 : ws);
                        free(we);
                        return jr_oom(r, line);
                    }
                    ws = a1;
                    we = a2;
                }
                ws[nw] = start;
                we[nw++] = end;
                i = end;
            }
            /* Once maxsplit words are split off, the rest keeps its leading whitespace. */
            bool capped = maxsplit >= 0 && nw > (size_t)maxsplit;
            size_t first = capped ? nw - (size_t)maxsplit - 1 : 0;
            bool ok = true;
            if (capped) ok = jv_list_push(&r->arena, l, jv_strn(p, we[first]));
            for (size_t k = capped ? first + 1 : 0; k < nw && ok; k++)
                ok = jv_list_push(&r->arena, l, jv_strn(p + ws[k], we[k] - ws[k]));
            free(ws);
            free(we);
            if (!ok) return jr_oom(r, line);
            *out = list_val(l);
            return 0;
        }
        while (i < n) {
            size_t prev;
            while (i < n) {
                prev = i;
                if (!ju8_is_space(ju8_next(p, n, &i))) {
                    i = prev;
                    break;
                }
            }
            if (i >= n) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                if (!jv_list_push(&r->arena, l, jv_strn(p + i, n - i))) return jr_oom(r, line);
                break;
            }
            size_t start = i;
            while (i < n) {
                prev = i;
                if (ju8_is_space(ju8_next(p, n, &i))) {
                    i = prev;
                    break;
                }
            }
            if (!jv_list_push(&r->arena, l, jv_strn(p + start, i - start))) return jr_oom(r, line);
            splits++;
        }
        *out = list_val(l);
        return 0;
    }
    if (need_str(r, line, sep, "separator")) return -1;
    if (sep.u.s.n == 0) return jr_fail(r, line, "empty separator");
    const char *q = sep.u.s.p;
    size_t m = sep.u.s.n;
    int64_t splits = 0;
    if (!from_right) {
        size_t start = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(p + start, n - start, q, m) : NULL;
            if (!hit) {
                if (!jv_list_push(&r->arena, l, jv_strn(p + start, n - start))) return jr_oom(r, line);
                break;
            }
            size_t h = (size_t)(hit - p);
            if (!jv_list_push(&r->arena, l, jv_strn(p + start, h - start))) return jr_oom(r, line);
            start = h + m;
            splits++;
        }
    } else {
        jv_list *rev = jv_list_new(&r->arena, 0);
        if (!rev) return jr_oom(r, line);
        size_t end = n;
        for (;;) {
            size_t h = SIZE_MAX;
            if ((maxsplit < 0 || splits < maxsplit) && end >= m)
                for (size_t k = end - m + 1; k > 0; k--)
                    if (!memcmp(p + k - 1, q, m)) {
                        h = k - 1;
                        break;
                    }
            if (h == SIZE_MAX) {
                if (!jv_list_push(&r->arena, rev, jv_strn(p, end))) return jr_oom(r, line);
                break;
            }
            if (!jv_list_push(&r->arena, rev, jv_strn(p + h + m, end - h - m))) return jr_oom(r, line);
            end = h;
            splits++;
        }
        for (size_t k = rev->n; k > 0; k--)
            if (!jv_list_push(&r->arena, l, rev->v[k - 1])) return jr_oom(r, line);
    }
    *out = list_val(l);
    return 0;
}

/* Case mapping per code point (utf8proc's simple mappings; Python's full mappings such as
 * 'ß'.upper() == 'SS' are not reproduced). mode: 'u' upper, 'l' lower, 't' title, 'c' capitalize */
int jinja_case(jrender *r, int line, jv s, char mode, jv *out) {
    jbuf b = {.limit = r->max_output};
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s.u.s.n) {
        int32_t c = ju8_next(s.u.s.p, s.u.s.n, &i), m;
        bool cased = utf8proc_toupper(c) != c || utf8proc_tolower(c) != c ||
                     utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
        switch (mode) {
        case 'u': m = utf8proc_toupper(c); break;
        case 'l': m = utf8proc_tolower(c); break;
        case 't': m = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c); break;
        default: m = first ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
        }
        prev_cased = cased;
        first = false;
        if (c == 0xDF && (mode == 'u' || m == 0x1E9E)) { /* Python: 'ß'.upper() == 'SS', title 'Ss' */
            jbuf_puts(&b, mode == 'u' ? "SS" : "Ss");
            continue;
        }
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = utf8proc_encode_char(m, enc);
        jbuf_put(&b, (const char *)enc, (size_t)k);
    }
    if (b.failed) {
        jbuf_free(&b);
        return jr_oom(r, line);
    }
    *out = jr_string_from_buf(r, &b);
    return 0;
}

static int str_replace(jrender *r, int line, jv s, jv old, jv new_, int64_t count, jv *out) {
    if (need_str(r, line, old, "replace() argument 1") || need_str(r, line, new_, "replace() argument 2")) return -1;
    jbuf b = {.limit = r->max_output};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        /* "ab".replace("", "-") == "-a-b-" */
        while (count < 0 || done < count) {
            jbuf_put(&b, new_.u.s.p, new_.u.s.n);
            done++;
            if (i >= n) break;
            size_t prev = i;
            ju8_next(p, n, &i);
            jbuf_put(&b, p + prev, i - prev);
        }
        jbuf_put(&b, p + i, n - i);
    } else {
        for (;;) {
            const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
            if (!hit) break;
            jbuf_put(&b, p + i, (size_t)(hit - (p + i)));
            jbuf_put(&b, new_.u.s.p, new_.u.s.n);
            i = (size_t)(hit - p) + old.u.s.n;
            done++;
        }
        jbuf_put(&b, p + i, n - i);
    }
    if (b.failed) {
        jbuf_free(&b);
        return jr_fail(r, line, "replace(): result larger than the output limit");
    }
    *out = jr_string_from_buf(r, &b);
    return 0;
}

int jinja_str_replace(jrender *r, int line, jv s, jv old, jv new_, int64_t count, jv *out) {
    return str_replace(r, line, s, old, new_, count, out);
}

static bool affix_match(jv s, jv affix, bool end) {
    if (affix.u.s.n > s.u.s.n) return false;
    const char *p = end ? s.u.s.p + s.u.s.n - affix.u.s.n : s.u.s.p;
    return !memcmp(p, affix.u.s.p, affix.u.s.n);
}

/* Code point index of a byte offset. */
static int64_t cp_index(jv s, size_t byte_off) { return (int64_t)ju8_len(s.u.s.p, byte_off); }

static int str_format(jrender *r, int line, jv s, const jv *args, size_t n_args, const char **kw_names,
                      const jv *kw_vals, size_t n_kw, jv *out) {
    jbuf b = {.limit = r->max_output};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, auto_idx = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') { jbuf_put(&b, "{", 1); i++; continue; }
        if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') { jbuf_put(&b, "}", 1); i++; continue; }
        if (p[i] == '}') { jbuf_free(&b); return jr_fail(r, line, "format(): single '}' encountered"); }
        if (p[i] != '{') { jbuf_put(&b, p + i, 1); continue; }
        const char *close = memchr(p + i, '}', n - i);
        if (!close) { jbuf_free(&b); return jr_fail(r, line, "format(): single '{' encountered"); }
        size_t fl = (size_t)(close - (p + i + 1));
        const char *field = p + i + 1;
        if (memchr(field, ':', fl) || memchr(field, '!', fl) || memchr(field, '.', fl) || memchr(field, '[', fl)) {
            jbuf_free(&b);
            return jr_fail(r, line, "format(): conversions and format specs are not supported");
        }
        jv v;
        bool found = false;
        if (fl == 0) {
            found = auto_idx < n_args;
            if (found) v = args[auto_idx++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t idx = (size_t)strtoul(field, NULL, 10);
            found = idx < n_args;
            if (found) v = args[idx];
        } else {
            for (size_t k = 0; k < n_kw; k++)
                if (strlen(kw_names[k]) == fl && !memcmp(kw_names[k], field, fl)) {
                    v = kw_vals[k];
                    found = true;
                }
        }
        if (!found) {
            jbuf_free(&b);
            return jr_fail(r, line, "format(): replacement field {%.*s} has no argument", (int)fl, field);
        }
        jv_write_str(&b, v);
        i += fl + 1;
    }
    if (b.failed) {
        jbuf_free(&b);
        return jr_oom(r, line);
    }
    *out = jr_string_from_buf(r, &b);
    return 0;
}

static int call_str_method(jrender *r, int line, jv s, const char *name, const jv *args, size_t n_args,
                           const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out) {
    jv a0 = jv_none(), a1 = jv_none(), a2 = jv_none();
    bool h0 = arg(args, n_args, kw_names, kw_vals, n_kw, 0, NULL, &a0);
    bool h1 = arg(args, n_args, kw_names, kw_vals, n_kw, 1, NULL, &a1);
    arg(args, n_args, kw_names, kw_vals, n_kw, 2, NULL, &a2);
    (void)h1;
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (a0.k != JV_NONE && need_str(r, line, a0, "strip arg")) return -1;
        *out = jinja_strip(s, a0, name[0] != 'r', name[0] != 'l');
        return 0;
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv sep = jv_none(), ms = jv_int(-1);
        arg(args, n_args, kw_names, kw_vals, n_kw, 0, "sep", &sep);
        arg(args, n_args, kw_names, kw_vals, n_kw, 1, "maxsplit", &ms);
        if (ms.k != JV_INT) return jr_fail(r, line, "maxsplit must be an integer");
        return str_split(r, line, s, sep, ms.u.i, name[0] == 'r', out);
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        bool end = name[0] == 'e';
        if (!h0) return jr_fail(r, line, "%s() takes at least 1 argument", name);
        jv sub = s;
        if (n_args > 1) { /* start/end bounds, in code points */
            int64_t len = (int64_t)ju8_len(s.u.s.p, s.u.s.n), st = 0, en = len;
            if (a1.k == JV_INT) st = a1.u.i < 0 ? (a1.u.i + len < 0 ? 0 : a1.u.i + len) : (a1.u.i > len ? len : a1.u.i);
            if (a2.k == JV_INT) en = a2.u.i < 0 ? (a2.u.i + len < 0 ? 0 : a2.u.i + len) : (a2.u.i > len ? len : a2.u.i);
            if (en < st) { *out = jv_bool(false); return 0; }
            size_t bs = ju8_offset(s.u.s.p, s.u.s.n, (size_t)st), be = ju8_offset(s.u.s.p, s.u.s.n, (size_t)en);
            sub = jv_strn(s.u.s.p + bs, be - bs);
        }
        if (a0.k == JV_LIST && a0.u.l->tuple) {
            bool any = false;
            for (size_t i = 0; i < a0.u.l->n; i++) {
                if (need_str(r, line, a0.u.l->v[i], "tuple for startswith/endswith item")) return -1;
                any = any || affix_match(sub, a0.u.l->v[i], end);
            }
            *out = jv_bool(any);
            return 0;
        }
        if (a0.k != JV_STR)
            return jr_fail(r, line, "%s first arg must be str or a tuple of str, not %s", name, jv_type_name(a0));
        *out = jv_bool(affix_match(sub, a0, end));
        return 0;
    }
    if (!strcmp(name, "replace")) {
        if (n_args < 2) return jr_fail(r, line, "replace() takes at least 2 arguments");
        int64_t count = a2.k == JV_INT ? a2.u.i : -1;
        return str_replace(r, line, s, a0, a1, count, out);
    }
    if (!strcmp(name, "upper")) return jinja_case(r, line, s, 'u', out);
    if (!strcmp(name, "lower")) return jinja_case(r, line, s, 'l', out);
    if (!strcmp(name, "title")) return jinja_case(r, line, s, 't', out);
    if (!strcmp(name, "capitalize")) return jinja_case(r, line, s, 'c', out);
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "count")) {
        if (need_str(r, line, a0, "substring")) return -1;
        if (n_args > 1) return jr_fail(r, line, "%s() with start/end is not supported", name);
        const char *p = s.u.s.p;
        size_t n = s.u.s.n, m = a0.u.s.n;
        if (!strcmp(name, "count")) {
            int64_t c = 0;
            if (m == 0) c = (int64_t)ju8_len(p, n) + 1;
            else
                for (const char *h = p; (h = memmem(h, n - (size_t)(h - p), a0.u.s.p, m)); h += m) c++;
            *out = jv_int(c);
            return 0;
        }
        int64_t pos = -1;
        if (name[0] == 'r') {
            for (size_t k = n + 1; k > 0 && m <= n; k--)
                if (k - 1 + m <= n && !memcmp(p + k - 1, a0.u.s.p, m)) { pos = cp_index(s, k - 1); break; }
        } else {
            const char *h = m ? memmem(p, n, a0.u.s.p, m) : p;
            if (h) pos = cp_index(s, (size_t)(h - p));
        }
        if (pos < 0 && name[0] == 'i') return jr_fail(r, line, "substring not found");
        *out = jv_int(pos);
        return 0;
    }
    if (!strcmp(name, "join")) {
        jv_list *items;
        if (!h0) return jr_fail(r, line, "join() takes exactly one argument");
        if (a0.k == JV_UNDEF) return jr_undefined_error(r, line, a0);
        if (jr_iterate(r, line, a0, &items)) return -1;
        jbuf b = {.limit = r->max_output};
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].k != JV_STR) {
                jbuf_free(&b);
                return jr_fail(r, line, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(items->v[i]));
            }
            if (i) jbuf_put(&b, s.u.s.p, s.u.s.n);
            jbuf_put(&b, items->v[i].u.s.p, items->v[i].u.s.n);
        }
        if (b.failed) { jbuf_free(&b); return jr_oom(r, line); }
        *out = jr_string_from_buf(r, &b);
        return 0;
    }
    if (!strcmp(name, "splitlines")) {
        jv_list *l = jv_list_new(&r->arena, 0);
        bool keep = h0 && jv_truthy(a0);
        if (!l) return jr_oom(r, line);
        const char *p = s.u.s.p;
        size_t n = s.u.s.n, i = 0, start = 0;
        while (i < n) {
            size_t prev = i;
            int32_t c = ju8_next(p, n, &i);
            bool nl = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                      c == 0x2028 || c == 0x2029;
            if (!nl) continue;
            if (c == '\r' && i < n && p[i] == '\n') i++;
            if (!jv_list_push(&r->arena, l, jv_strn(p + start, (keep ? i : prev) - start))) return jr_oom(r, line);
            start = i;
        }
        if (start < n && !jv_list_push(&r->arena, l, jv_strn(p + start, n - start))) return jr_oom(r, line);
        *out = list_val(l);
        return 0;
    }
    if (!strncmp(name, "is", 2)) {
        bool all = s.u.s.n > 0, any_cased = false, any_upper = false, any_lower = false;
        size_t i = 0;
        while (i < s.u.s.n) {
            int32_t c = ju8_next(s.u.s.p, s.u.s.n, &i);
            utf8proc_category_t cat = utf8proc_category(c);
            bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            if (!strcmp(name, "isdigit")) all = all && digit;
            else if (!strcmp(name, "isalpha")) all = all && alpha;
            else if (!strcmp(name, "isalnum")) all = all && (alpha || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO);
            else if (!strcmp(name, "isspace")) all = all && ju8_is_space(c);
            if (utf8proc_tolower(c) != c) { any_upper = true; any_cased = true; }
            if (utf8proc_toupper(c) != c) { any_lower = true; any_cased = true; }
        }
        if (!strcmp(name, "isupper")) all = any_cased && !any_lower && any_upper;
        if (!strcmp(name, "islower")) all = any_cased && !any_upper && any_lower;
        *out = jv_bool(all);
        return 0;
    }
    if (!strcmp(name, "format")) return str_format(r, line, s, args, n_args, kw_names, kw_vals, n_kw, out);
    return jr_fail(r, line, "'str' object has no method '%s'", name);
}

/* ==== dict / list / loop methods ==== */
int jinja_dict_items(jrender *r, int line, const jv_dict *d, jv *out) {
    jv_list *l = jv_list_new(&r->arena, d->n);
    if (!l) return jr_oom(r, line);
    for (size_t i = 0; i < d->n; i++) {
        jv_list *pair = jv_list_new(&r->arena, 2);
        if (!pair) return jr_oom(r, line);
        pair->tuple = true;
        pair->v[0] = d->keys[i];
        pair->v[1] = d->vals[i];
        pair->n = 2;
        l->v[l->n++] = list_val(pair);
    }
    *out = list_val(l);
    return 0;
}

int jr_call_method(jrender *r, int line, const jv_method *m, const jv *args, size_t n_args,
                   const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out) {
    jv self = m->self, a0 = jv_none(), a1 = jv_none();
    const char *name = m->name;
    if (jr_charge(r, line, jr_cost(self) + (n_args ? jr_cost(args[0]) : 0))) return -1;
    bool h0 = arg(args, n_args, kw_names, kw_vals, n_kw, 0, NULL, &a0);
    arg(args, n_args, kw_names, kw_vals, n_kw, 1, NULL, &a1);
    if (self.k == JV_STR) return call_str_method(r, line, self, name, args, n_args, kw_names, kw_vals, n_kw, out);
    if (self.k == JV_LOOP) { /* loop.cycle(a, b, ...) */
        if (!n_args) return jr_fail(r, line, "no items for cycling given");
        *out = args[self.u.loop->index0 % n_args];
        return 0;
    }
    if (self.k == JV_DICT) {
        const jv_dict *d = self.u.d;
        if (!strcmp(name, "items")) return jinja_dict_items(r, line, d, out);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            jv_list *l = jv_list_new(&r->arena, d->n);
            if (!l) return jr_oom(r, line);
            memcpy(l->v, name[0] == 'k' ? d->keys : d->vals, d->n * sizeof(jv));
            l->n = d->n;
            *out = list_val(l);
            return 0;
        }
        if (!strcmp(name, "get")) {
            if (!h0) return jr_fail(r, line, "get expected at least 1 argument, got 0");
            const jv *v = jv_dict_get(d, a0);
            *out = v ? *v : a1;
            return 0;
        }
        if (!strcmp(name, "copy")) {
            jv_dict *c = jv_dict_new(&r->arena, d->n);
            if (!c) return jr_oom(r, line);
            if (d->n) {
                memcpy(c->keys, d->keys, d->n * sizeof(jv));
                memcpy(c->vals, d->vals, d->n * sizeof(jv));
            }
            c->n = d->n;
            *out = (jv){.k = JV_DICT};
            out->u.d = c;
            return 0;
        }
    }
    if (self.k == JV_LIST) {
        const jv_list *l = self.u.l;
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            int64_t c = 0;
            for (size_t i = 0; i < l->n; i++)
                if (jv_equal(l->v[i], a0)) {
                    if (name[0] == 'i') {
                        *out = jv_int((int64_t)i);
                        return 0;
                    }
                    c++;
                }
            if (name[0] == 'i') return jr_fail(r, line, "list.index(x): x not in list");
            *out = jv_int(c);
            return 0;
        }
        if (!strcmp(name, "copy")) {
            *out = self;
            return 0;
        }
    }
    return jr_fail(r, line, "'%s' object has no method '%s'", jv_type_name(self), name);
}

/* ==== Globals ==== */
const char *const jinja_func_names[JF_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

#define MAX_RANGE 100000 /* jinja2.sandbox.MAX_RANGE */

int jr_call_func(jrender *r, int line, int fn, const jv *args, size_t n_args, const char **kw_names,
                 const jv *kw_vals, size_t n_kw, jv *out) {
    switch (fn) {
    case JF_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (n_args < 1 || n_args > 3 || n_kw) return jr_fail(r, line, "range expected 1 to 3 integer arguments");
        for (size_t i = 0; i < n_args; i++) {
            if (args[i].k == JV_UNDEF) return jr_undefined_error(r, line, args[i]);
            if (args[i].k != JV_INT && args[i].k != JV_BOOL)
                return jr_fail(r, line, "'%s' object cannot be interpreted as an integer", jv_type_name(args[i]));
            v[n_args == 1 ? 1 : i] = args[i].k == JV_BOOL ? args[i].u.b : args[i].u.i;
        }
        if (v[2] == 0) return jr_fail(r, line, "range() arg 3 must not be zero");
        double count = v[2] > 0 ? ((double)v[1] - (double)v[0]) / (double)v[2] : ((double)v[0] - (double)v[1]) / (double)-v[2];
        if (count > MAX_RANGE)
            return jr_fail(r, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
        jv_list *l = jv_list_new(&r->arena, count > 0 ? (size_t)count + 1 : 0);
        if (!l) return jr_oom(r, line);
        for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) l->v[l->n++] = jv_int(i);
        *out = list_val(l);
        return 0;
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        jv_dict *d = jv_dict_new(&r->arena, 0);
        if (!d) return jr_oom(r, line);
        if (n_args > 1) return jr_fail(r, line, "%s expected at most 1 positional argument", jinja_func_names[fn]);
        if (n_args == 1) {
            if (args[0].k == JV_DICT || args[0].k == JV_NS) {
                const jv_dict *src = args[0].u.d;
                d = jv_dict_new(&r->arena, src->n); /* keys are unique already: copy them */
                if (!d) return jr_oom(r, line);
                if (src->n) {
                    memcpy(d->keys, src->keys, src->n * sizeof(jv));
                    memcpy(d->vals, src->vals, src->n * sizeof(jv));
                }
                d->n = src->n;
            } else {
                return jr_fail(r, line, "%s() argument must be a mapping, not %s", jinja_func_names[fn],
                               jv_type_name(args[0]));
            }
        }
        for (size_t i = 0; i < n_kw; i++)
            if (!jv_dict_set(&r->arena, d, jv_strn(kw_names[i], strlen(kw_names[i])), kw_vals[i])) return jr_oom(r, line);
        *out = (jv){.k = fn == JF_NAMESPACE ? JV_NS : JV_DICT};
        out->u.d = d;
        return 0;
    }
    case JF_RAISE: {
        jv msg = n_args ? jr_str(r, args[0]) : jv_strn("", 0);
        if (msg.k != JV_STR) return jr_oom(r, line);
        return jr_fail(r, line, "%.*s", (int)(msg.u.s.n > 800 ? 800 : msg.u.s.n), msg.u.s.p);
    }
    case JF_STRFTIME: {
        if (n_args != 1 || args[0].k != JV_STR) return jr_fail(r, line, "strftime_now expects one format string");
        char fmt[256], buf[512];
        snprintf(fmt, sizeof fmt, "%.*s", (int)(args[0].u.s.n > 255 ? 255 : args[0].u.s.n), args[0].u.s.p);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        *out = mkstr(r, buf, n);
        return 0;
    }
    }
    return jr_fail(r, line, "unknown function");
}
