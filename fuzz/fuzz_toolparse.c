/* libFuzzer target: the chat reply parser (src/server/srv_toolparse.c) on any text a model may
 * write. data[0] picks the call syntax, the reasoning mode and parallel_tool_calls, data[1]
 * where the text is cut; the rest is the text. It must never crash, and the message must not
 * depend on the cut (the same content, reasoning and calls fed whole and in three pieces). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_tools.h"

typedef struct sum {
    char *c, *r;
    size_t nc, nr;
    int calls;
} sum;

static void sink(void *ctx, const srv_cp_event *e) {
    sum *s = ctx;
    char **b = e->kind == SRV_CP_CONTENT ? &s->c : e->kind == SRV_CP_REASONING ? &s->r : NULL;
    size_t *n = e->kind == SRV_CP_CONTENT ? &s->nc : &s->nr;
    if (e->kind == SRV_CP_CALL) s->calls++;
    if (!b) return;
    char *p = realloc(*b, *n + e->len + 1);
    if (!p) abort();
    memcpy(p + *n, e->text, e->len);
    *b = p;
    *n += e->len;
}

static void parse(const srv_cp_config *cfg, const uint8_t *t, size_t n, const size_t *cuts, int nc, sum *s) {
    memset(s, 0, sizeof *s);
    srv_cp *p = srv_cp_new(cfg);
    if (!p) return;
    size_t at = 0;
    for (int i = 0; i <= nc; i++) {
        const size_t end = i < nc ? cuts[i] : n;
        srv_cp_feed(p, (const char *)t + at, end - at, sink, s);
        at = end;
    }
    srv_cp_finish(p, sink, s);
    size_t len;
    srv_cp_content(p, &len);
    if (len != s->nc || srv_cp_n_calls(p) > s->calls) __builtin_trap(); /* the events add up to the message */
    srv_cp_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static srv_tool_set tools;
    static int init;
    mx_error err;
    if (!init) {
        srv_tool_set_add(&tools, "get_weather", NULL, false, &err);
        srv_tool_set_add(&tools, "python", NULL, false, &err);
        init = 1;
    }
    if (size < 2) return 0;
    const srv_cp_config cfg = {.format = (srv_tool_format)(data[0] % 5), .reasoning = (srv_reasoning_mode)(data[0] / 5 % 3),
                               .start_in_reasoning = data[0] & 0x80, .parallel = data[0] & 0x40, .tools = &tools,
                               .id_seed = 1};
    const uint8_t *t = data + 2;
    const size_t n = size - 2;
    size_t cuts[3] = {0, 0, 0};
    int nc = 0;
    if (n > 1) {
        cuts[0] = 1 + data[1] % (n - 1);
        cuts[1] = cuts[0] + (n - cuts[0]) / 2;
        cuts[2] = n - (data[1] & 1);
        nc = 3;
    }
    sum a, b;
    parse(&cfg, t, n, NULL, 0, &a);
    parse(&cfg, t, n, cuts, nc, &b);
    if (a.nc != b.nc || a.nr != b.nr || a.calls != b.calls || (a.nc && memcmp(a.c, b.c, a.nc)) ||
        (a.nr && memcmp(a.r, b.r, a.nr)))
        __builtin_trap();
    free(a.c);
    free(a.r);
    free(b.c);
    free(b.r);
    return 0;
}
