/* Request-header checks made before the API key and the body.
 *
 * Framing (RFC 9112 §6.3): libmicrohttpd 0.9.75 takes the first Content-Length and reads the
 * rest as the next request, so a proxy that picks the other one would see different requests
 * (smuggling). A request with more than one Content-Length, Content-Length together with
 * Transfer-Encoding, a Transfer-Encoding other than `chunked` (libmicrohttpd would read such a
 * body until the connection closes), or an HTTP/1.1 request without exactly one Host is
 * refused and its connection closed.
 *
 * Host and Origin: a keyless server on loopback trusts whoever can reach it, and any web page
 * in a browser on the same machine can. A DNS-rebinding page reaches it under its own name
 * (Host: evil.example), so Host must name loopback (localhost, *.localhost, 127.0.0.0/8, ::1)
 * or be listed in --allowed-hosts; a cross-origin page sends its Origin, which must be the
 * server's own (same as Host), a loopback page, or listed in --allowed-origins. With an API key
 * the key is the defence, and CORS is llama-server's: the Origin echoed, credentials allowed in
 * preflights. `null` (sandboxed frames, file: pages) never gets credentials. */
#include "server/srv_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/srv_conn.h"

/* ==== Names ==== */
/* host[:port] / [v6][:port] -> the host part (lowercase, no brackets, no trailing dot). */
static bool host_part(const char *authority, size_t len, char *out, size_t n) {
    if (!len || len >= n) return false;
    size_t hl;
    if (authority[0] == '[') {
        const char *e = memchr(authority, ']', len);
        if (!e) return false;
        hl = (size_t)(e - authority - 1);
        memcpy(out, authority + 1, hl);
        const char *rest = e + 1;
        if (rest < authority + len && *rest != ':') return false;
    } else {
        const char *colon = memchr(authority, ':', len);
        hl = colon ? (size_t)(colon - authority) : len;
        memcpy(out, authority, hl);
    }
    out[hl] = 0;
    for (size_t i = 0; i < hl; i++) out[i] = (char)tolower((unsigned char)out[i]);
    if (hl && out[hl - 1] == '.') out[--hl] = 0;
    return hl > 0;
}

static bool host_is_loopback(const char *h) {
    size_t n = strlen(h);
    if (!strcmp(h, "localhost") || (n > 10 && !strcmp(h + n - 10, ".localhost"))) return true;
    unsigned char a[16];
    if (inet_pton(AF_INET, h, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, h, a) == 1) {
        static const unsigned char one[16] = {[15] = 1};
        static const unsigned char v4map[12] = {[10] = 0xff, [11] = 0xff};
        return !memcmp(a, one, 16) || (!memcmp(a, v4map, 12) && a[12] == 127);
    }
    return false;
}

static bool listed(const char (*list)[256], int n, const char *v) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], "*") || !strcasecmp(list[i], v)) return true;
    return false;
}

static bool list_has_star(const char (*list)[256], int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], "*")) return true;
    return false;
}

/* From the bound address, not the --host text: a host name (Debian maps the machine's name to
 * 127.0.1.1) is loopback when it resolved to it. A Unix socket is not: no browser reaches it. */
bool srv_guard_keyless_loopback(const srv_config *cfg, int listen_fd) {
    if (cfg->n_api_keys) return false;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(listen_fd, (struct sockaddr *)&ss, &sl)) return false;
    char h[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, h, sizeof h);
    else if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, h, sizeof h);
    else return false;
    return host_is_loopback(h);
}

/* ==== Header scan ==== */
typedef struct hdr_scan {
    int n_cl, n_te, n_host;
    const char *te, *host, *origin;
    int n_origin;
} hdr_scan;

static MHD_Result_t scan_one(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    hdr_scan *h = cls;
    if (!strcasecmp(key, "Content-Length")) h->n_cl++;
    else if (!strcasecmp(key, "Transfer-Encoding")) h->n_te++, h->te = value;
    else if (!strcasecmp(key, "Host")) h->n_host++, h->host = value;
    else if (!strcasecmp(key, "Origin")) h->n_origin++, h->origin = value;
    return MHD_YES;
}

static int refuse(srv_guard_refusal *out, int status, bool close, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(srv_guard_refusal *out, int status, bool close, const char *fmt, ...) {
    out->status = status;
    out->close = close;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->msg, sizeof out->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static bool is_chunked(const char *te) {
    while (*te == ' ' || *te == '\t') te++;
    size_t n = strlen(te);
    while (n && (te[n - 1] == ' ' || te[n - 1] == '\t')) n--;
    return n == 7 && !strncasecmp(te, "chunked", 7);
}

/* ==== Checks ==== */
int srv_guard_request(const srv_config *cfg, bool keyless_loopback, struct MHD_Connection *c, const char *version,
                      srv_guard_refusal *out) {
    hdr_scan h = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_one, &h);
    srv_conns_set_cors(c, NULL, false); /* a refused request gets no CORS header */

    /* framing: refused, and the connection closed (its next bytes cannot be trusted) */
    if (h.n_cl > 1)
        return refuse(out, 400, true, "the request has %d Content-Length headers; send one", h.n_cl);
    if (h.n_te > 1) return refuse(out, 400, true, "the request has %d Transfer-Encoding headers; send one", h.n_te);
    if (h.n_te && h.n_cl)
        return refuse(out, 400, true, "the request has both Content-Length and Transfer-Encoding; send one");
    if (h.n_te && !is_chunked(h.te))
        return refuse(out, 501, true, "Transfer-Encoding '%.64s' is not supported; send chunked or a Content-Length",
                      h.te);
    const bool http11 = version && !strcmp(version, "HTTP/1.1");
    if (http11 && h.n_host > 1)
        return refuse(out, 400, true, "the request has %d Host headers; HTTP/1.1 needs exactly one", h.n_host);
    if (http11 && !h.n_host) return refuse(out, 400, true, "an HTTP/1.1 request needs a Host header");
    if (h.n_origin > 1) return refuse(out, 400, false, "the request has %d Origin headers", h.n_origin);

    /* Host: a keyless loopback server answers only names that resolve to loopback */
    char host[256] = "";
    if (h.host) host_part(h.host, strlen(h.host), host, sizeof host);
    if (keyless_loopback && h.host && !host_is_loopback(host) &&
        !listed(cfg->allowed_hosts, cfg->n_allowed_hosts, host))
        return refuse(out, 403, false,
                      "Host '%.100s' is not allowed: this server has no API key and listens on loopback, so it answers "
                      "only requests addressed to localhost or a loopback IP (a defence against DNS rebinding); add "
                      "the name with --allowed-hosts, or set --api-key", h.host);

    /* Origin -> the CORS answer */
    const char *o = h.origin;
    const bool keyless = cfg->n_api_keys == 0;
    const bool strict = keyless_loopback || (cfg->n_allowed_origins && !list_has_star(cfg->allowed_origins,
                                                                                       cfg->n_allowed_origins));
    if (!o || !*o) {
        srv_conns_set_cors(c, "*", false);
        return 0;
    }
    if (!strcasecmp(o, "null")) {
        if (strict)
            return refuse(out, 403, false, "Origin 'null' (a sandboxed frame or a file: page) is not allowed here");
        srv_conns_set_cors(c, "*", false);
        return 0;
    }
    const char *sep = strstr(o, "://");
    char ohost[256] = "";
    bool same = false, loop = false;
    if (sep && host_part(sep + 3, strlen(sep + 3), ohost, sizeof ohost)) {
        loop = host_is_loopback(ohost);
        same = h.host && !strcasecmp(sep + 3, h.host); /* the server's own page */
    }
    if (same || loop || listed(cfg->allowed_origins, cfg->n_allowed_origins, o)) {
        srv_conns_set_cors(c, o, true);
        return 0;
    }
    if (strict)
        return refuse(out, 403, false,
                      "Origin '%.100s' is not allowed (CORS): %s; add it with --allowed-origins", o,
                      keyless_loopback ? "a keyless server on loopback answers only its own pages and loopback origins"
                                       : "it is not in --allowed-origins");
    /* an API key (llama-server's CORS: echo, credentials) or a keyless server not on loopback */
    srv_conns_set_cors(c, o, !keyless);
    return 0;
}

/* ==== Body ==== */
/* Bytes jansson 2.14 allocates per parsed value (measured with glibc: a 16 MB array of each
 * kind): an integer or real 40, a string 88 + its length, an object 232 (+ its members'
 * keys, counted as strings), an array 136, true/false/null 8 (shared singletons + a slot). */
enum { COST_NUMBER = 40, COST_STRING = 88, COST_OBJECT = 232, COST_ARRAY = 136, COST_LITERAL = 8 };

int srv_guard_body(const char *p, size_t n, srv_guard_refusal *out) {
    uint64_t cost = 0, values = 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = p[i];
        if (ch == '"') {
            const size_t start = ++i;
            while (i < n && p[i] != '"') i += p[i] == '\\' ? 2 : 1;
            cost += COST_STRING + (i - start);
        } else if (ch == '{') {
            cost += COST_OBJECT;
        } else if (ch == '[') {
            cost += COST_ARRAY;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            while (i + 1 < n && (strchr("0123456789+-.eE", p[i + 1]) && p[i + 1])) i++;
            cost += COST_NUMBER;
        } else if (ch == 't' || ch == 'f' || ch == 'n') {
            while (i + 1 < n && p[i + 1] >= 'a' && p[i + 1] <= 'z') i++;
            cost += COST_LITERAL;
        } else {
            continue;
        }
        values++;
    }
    const uint64_t budget = 8 * (uint64_t)n + (32u << 20);
    if (cost <= budget) return 0;
    return refuse(out, 413, false,
                  "the JSON body holds %llu values, which would take about %llu MiB of memory to parse (the limit is "
                  "8x the body size + 32 MiB: %llu MiB); send fewer, larger values",
                  (unsigned long long)values, (unsigned long long)(cost >> 20), (unsigned long long)(budget >> 20));
}

void srv_guard_describe(const srv_config *cfg, bool keyless_loopback, char *out, size_t n) {
    if (cfg->n_api_keys)
        snprintf(out, n, "auth: %d API key(s); CORS: %s", cfg->n_api_keys,
                 cfg->n_allowed_origins ? "--allowed-origins" : "any Origin echoed (llama-server)");
    else if (keyless_loopback)
        snprintf(out, n, "auth: none (no --api-key) on loopback: only Host localhost/loopback%s, only same-site, "
                         "loopback%s origins (DNS-rebinding and CORS defence)",
                 cfg->n_allowed_hosts ? " and --allowed-hosts" : "", cfg->n_allowed_origins ? " and listed" : "");
    else
        snprintf(out, n, "auth: none (no --api-key) and not on loopback: anyone who can reach %s may use the server; "
                         "CORS: %s", cfg->host, cfg->n_allowed_origins ? "--allowed-origins" : "any Origin echoed");
}
