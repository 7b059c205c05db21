/* GET / : the built-in chat page (the files of webui/, embedded at build time; see srv_webui.h).
 *
 * Headers: the page's own strict Content-Security-Policy (scripts, styles and fetches from this
 * origin only, nothing inline, no frames, no plugins), so that even a rendering bug in the page
 * could not run text a model wrote. "Cache-Control: no-cache" with an ETag: the browser keeps
 * its copy but asks each time (304 when unchanged), so a new binary's page is never mixed with
 * an old cached script. */
#include "server/srv_webui.h"

#include <microhttpd.h>
#include <string.h>

#include "server/srv_internal.h"

#define WEBUI_CSP                                                                                      \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* ==== Lookup ==== */
const srv_webui_asset *srv_webui_find(const char *url) {
    for (const srv_webui_asset *a = srv_webui_assets; a->path; a++)
        if (!strcmp(a->path, url)) return a;
    return NULL;
}

bool srv_webui_public(const srv_server *s, const char *url) { return s->cfg.webui && srv_webui_find(url); }

/* ==== Reply ==== */
/* If-None-Match holds a list of validators (or *): a match means the browser's copy is current. */
static bool etag_matches(struct MHD_Connection *c, const char *etag) {
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    if (!inm) return false;
    if (!strcmp(inm, "*")) return true;
    size_t n = strlen(etag);
    for (const char *p = strstr(inm, etag); p; p = strstr(p + 1, etag)) {
        char after = p[n];
        if (after == 0 || after == ',' || after == ' ') return true;
    }
    return false;
}

MHD_Result_t srv_webui_route(srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                             bool *handled) {
    const srv_webui_asset *a = s->cfg.webui ? srv_webui_find(url) : NULL;
    if (!a) return MHD_NO;
    *handled = true;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return srv_mhd_method_not_allowed(s, c, "GET");
    bool fresh = etag_matches(c, a->etag);
    /* the bytes live in the program image for its whole life: no copy */
    struct MHD_Response *r = fresh ? MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)
                                   : MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    if (!fresh) MHD_add_response_header(r, "Content-Type", a->content_type);
    MHD_add_response_header(r, "ETag", a->etag);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy", WEBUI_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    return srv_mhd_queue(s, c, fresh ? 304 : 200, r);
}
