/* The HTTP fuzz targets' server: see http_harness.h. */
#include "http_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fake_backend.h"
#include "server/srv_server.h"

/* ==== Server thread ==== */
static char g_dir[64];
static char g_sock[128];
static char g_port_file[128];
static srv_config g_cfg;
static srv_backend g_be;

static FILE *g_log;

void fuzz_http_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(g_log ? g_log : stderr, fmt, ap);
    va_end(ap);
    fflush(g_log ? g_log : stderr);
}

static void *server_main(void *arg) {
    (void)arg;
    mx_error err = {{0}};
    /* Returns only on SIGINT/SIGTERM, which libFuzzer's thread takes: the server lives as long
     * as the process. */
    if (srv_run(&g_cfg, &g_be, &err)) {
        fuzz_http_log("fuzz http harness: srv_run: %s\n", err.msg);
        abort();
    }
    return NULL;
}

static void cleanup_dir(void) {
    unlink(g_sock);
    unlink(g_port_file);
    rmdir(g_dir);
}

void fuzz_http_start(void) {
    static bool started;
    if (started) return;
    started = true;
    int fd = dup(2);
    g_log = fd >= 0 ? fdopen(fd, "w") : NULL;
    /* The start-up lines once, not a line per request. */
    setenv("MLXCEL_LOG_LEVEL", "error", 0);
    snprintf(g_dir, sizeof g_dir, "/tmp/mlxcel-fuzz-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("fuzz http harness: mkdtemp");
        abort();
    }
    snprintf(g_sock, sizeof g_sock, "%s/http.sock", g_dir);
    snprintf(g_port_file, sizeof g_port_file, "%s/port", g_dir);
    atexit(cleanup_dir);
    /* Flags as a user gives them (so new defaults apply as they do to `mlxcel serve`): a small
     * context keeps each generation short, the key puts the auth check in every path, metrics
     * and slots on so their routes answer, a short socket timeout bounds a stalled connection. */
    char *argv[] = {"fuzz-http", "--host", g_sock, "--port-file", g_port_file, "--api-key", FUZZ_HTTP_KEY,
                    "--metrics", "--slots", "-c", "128", "--parallel", "4", "--timeout", "5",
                    "--max-body-size", "256K", "-a", "fake-model", NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    mx_error err = {{0}};
    srv_config_defaults(&g_cfg);
    if (srv_config_parse(&g_cfg, argc, argv, stderr, &err) || srv_config_finalize(&g_cfg, 2048, &err)) {
        fprintf(stderr, "fuzz http harness: config: %s\n", err.msg);
        abort();
    }
    fake_opts o = {.n_parallel = g_cfg.n_parallel, .max_batch_size = g_cfg.max_batch_size,
                   .batch_size = g_cfg.batch_size, .chunk = g_cfg.prefill_chunk_size,
                   .n_ctx = g_cfg.ctx_size, .name = "fake-model"};
    if (fake_backend_init(&g_be, &o, &err)) {
        fprintf(stderr, "fuzz http harness: %s\n", err.msg);
        abort();
    }
    pthread_t t;
    if (pthread_create(&t, NULL, server_main, NULL)) abort();
    pthread_detach(t);
    /* srv_run writes the port file once the daemon listens. */
    for (int i = 0; i < 1000; i++) {
        struct stat sb;
        if (!stat(g_port_file, &sb)) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "fuzz http harness: the server did not start within 10 s\n");
    abort();
}

/* ==== One exchange ==== */
static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void keep(fuzz_http_reply *out, const char *buf, size_t n) {
    size_t room = out->cap > out->len ? out->cap - out->len : 0;
    size_t k = n < room ? n : room;
    memcpy(out->data + out->len, buf, k);
    out->len += k;
    out->total += n;
}

static int parse_status(const fuzz_http_reply *r) {
    if (r->len < 12 || memcmp(r->data, "HTTP/1.", 7)) return 0;
    int s = 0;
    for (int i = 9; i < 12; i++) {
        if (r->data[i] < '0' || r->data[i] > '9') return 0;
        s = s * 10 + (r->data[i] - '0');
    }
    return s;
}

static int conn_open(long long deadline) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        fuzz_http_log("fuzz http harness: socket: %s\n", strerror(errno));
        abort();
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", g_sock);
    /* A Unix-socket connect completes at once, or EAGAIN when the backlog is full. */
    while (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        if (errno != EAGAIN || now_ms() > deadline) {
            fuzz_http_log("fuzz http harness: connect: %s\n", strerror(errno));
            abort();
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

/* The end of one response on a kept-alive connection, found as the bytes arrive: after the
 * header, Content-Length bytes, or chunks up to the last one and its trailer. */
typedef struct framer {
    char head[65536];
    size_t hn;
    bool in_body, chunked, close, done;
    long long left;     /* body bytes (or bytes of the current chunk and its CRLF) still to come */
    char line[64];      /* a chunk-size or trailer line being read */
    size_t ln;
    bool trailer;       /* after the last chunk: lines until an empty one */
} framer;

static bool header_has(const char *head, const char *needle) {
    return strcasestr(head, needle) != NULL;
}

static void framer_head_done(framer *f) {
    f->head[f->hn] = '\0';
    f->in_body = true;
    f->close = header_has(f->head, "\r\nconnection: close");
    const char *cl = strcasestr(f->head, "\r\ncontent-length:");
    if (header_has(f->head, "\r\ntransfer-encoding: chunked")) f->chunked = true;
    else if (cl) f->left = strtoll(cl + 17, NULL, 10);
    else f->close = true; /* ends with the connection */
    if (!f->chunked && cl && f->left == 0) f->done = true;
}

static void framer_feed(framer *f, const char *p, size_t n) {
    for (size_t i = 0; i < n && !f->done; i++) {
        const char c = p[i];
        if (!f->in_body) {
            if (f->hn + 1 < sizeof f->head) f->head[f->hn++] = c;
            if (f->hn >= 4 && !memcmp(f->head + f->hn - 4, "\r\n\r\n", 4)) framer_head_done(f);
            continue;
        }
        if (!f->chunked) {
            if (f->left > 0 && --f->left == 0) f->done = true;
            continue;
        }
        if (f->left > 0) { /* chunk data, then its CRLF */
            f->left--;
            continue;
        }
        if (f->ln + 1 < sizeof f->line) f->line[f->ln++] = c;
        if (c != '\n') continue;
        f->line[f->ln] = '\0';
        if (f->trailer) {
            if (!strcmp(f->line, "\r\n")) f->done = true;
        } else {
            long long k = strtoll(f->line, NULL, 16);
            if (k == 0) f->trailer = true;
            else f->left = k + 2;
        }
        f->ln = 0;
    }
}

/* Returns whether a kept-alive connection was reused. */
static bool exchange(const uint8_t *req, size_t n, bool half_close, bool keep_alive, fuzz_http_reply *out) {
    static int kept = -1; /* the kept-alive connection */
    static framer fr;
    out->len = out->total = 0;
    out->status = 0;
    const long long deadline = now_ms() + FUZZ_HTTP_REPLY_TIMEOUT_MS;
    const bool reused = keep_alive && kept >= 0;
    int fd = reused ? kept : conn_open(deadline);
    if (!keep_alive && kept >= 0) close(kept), kept = -1;
    memset(&fr, 0, sizeof fr);
    size_t sent = 0;
    bool writing = true, eof = false;
    if (!n && half_close) shutdown(fd, SHUT_WR), writing = false;
    char buf[16384];
    while (!(keep_alive && fr.done)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN | (writing ? POLLOUT : 0)};
        long long left = deadline - now_ms();
        if (left <= 0 || poll(&pf, 1, (int)left) == 0) {
            fuzz_http_log("fuzz http harness: no end of the reply within %d ms (%zu of %zu request bytes sent, "
                          "%zu reply bytes read): the server hung\n",
                          FUZZ_HTTP_REPLY_TIMEOUT_MS, sent, n, out->total);
            abort();
        }
        if (writing && (pf.revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = send(fd, req + sent, n - sent, MSG_NOSIGNAL);
            if (w > 0) sent += (size_t)w;
            /* The server may answer and close before it read everything (413, a bad header). */
            if (w < 0 && errno != EAGAIN && errno != EINTR) writing = false;
            if (sent == n) writing = false;
            if (!writing && half_close) shutdown(fd, SHUT_WR);
        }
        if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r > 0) {
                keep(out, buf, (size_t)r);
                framer_feed(&fr, buf, (size_t)r);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                eof = true;
                break;
            }
        }
    }
    out->status = parse_status(out);
    /* Kept only after a whole answer to a request the server read to its end (200, 400): a
     * refusal such as 413 may leave request bytes unread on the connection. */
    if (keep_alive && !eof && !fr.close && sent == n && (out->status == 200 || out->status == 400)) {
        kept = fd;
    } else {
        close(fd);
        if (fd == kept) kept = -1;
    }
    return reused;
}

void fuzz_http_exchange(const uint8_t *req, size_t n, bool half_close, fuzz_http_reply *out) {
    (void)exchange(req, n, half_close, false, out);
}

void fuzz_http_request(const uint8_t *req, size_t n, fuzz_http_reply *out) {
    /* A kept connection the server closed meanwhile (an idle limit) reads as an empty reply:
     * the request goes again on a new one. */
    const bool reused = exchange(req, n, false, true, out);
    if (reused && out->total == 0) exchange(req, n, false, true, out);
}

/* ==== Reply checks ==== */
/* The body after the header, de-chunked into a new buffer (NULL when the reply is cut short
 * or malformed: then *why says how). */
static char *reply_body(const fuzz_http_reply *r, size_t *blen, bool *sse, const char **why) {
    const char *end = memmem(r->data, r->len, "\r\n\r\n", 4);
    if (!end) { *why = "no end of the header"; return NULL; }
    size_t hlen = (size_t)(end - r->data) + 4;
    char *head = strndup(r->data, hlen);
    if (!head) abort();
    for (char *p = head; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    bool chunked = strstr(head, "\r\ntransfer-encoding: chunked\r\n") != NULL;
    *sse = strstr(head, "\r\ncontent-type: text/event-stream") != NULL;
    free(head);
    const char *p = r->data + hlen, *lim = r->data + r->len;
    char *body = malloc(r->len - hlen + 1);
    if (!body) abort();
    size_t n = 0;
    if (!chunked) {
        n = (size_t)(lim - p);
        memcpy(body, p, n);
    } else {
        for (;;) { /* size CRLF data CRLF ... 0 CRLF CRLF */
            char *e;
            unsigned long k = strtoul(p, &e, 16);
            if (e == p || e + 2 > lim || memcmp(e, "\r\n", 2)) { *why = "bad chunk size line"; free(body); return NULL; }
            p = e + 2;
            if (k == 0) break;
            if (k > (size_t)(lim - p) || (size_t)(lim - p) - k < 2 || memcmp(p + k, "\r\n", 2)) {
                *why = "chunk runs past the reply";
                free(body);
                return NULL;
            }
            memcpy(body + n, p, k);
            n += k;
            p += k + 2;
        }
    }
    body[n] = '\0';
    *blen = n;
    return body;
}

/* An error body: {"error": {"message": "...", "code": status, ...}}. */
static const char *check_error_body(json_t *o, int status) {
    json_t *e = json_object_get(o, "error");
    if (!json_is_object(e)) return "error reply without an \"error\" object";
    const char *m = json_string_value(json_object_get(e, "message"));
    if (!m || !*m) return "error reply without a message";
    if (strchr(m, '\n')) return "error message spans lines";
    if (json_integer_value(json_object_get(e, "code")) != status) return "error code is not the HTTP status";
    return NULL;
}

const char *fuzz_http_check_json(const fuzz_http_reply *r) {
    if (r->total > r->len) return NULL; /* cut at cap: nothing to say */
    size_t n;
    bool sse = false;
    const char *why = NULL;
    char *body = reply_body(r, &n, &sse, &why);
    if (!body) return why;
    const char *bad = NULL;
    if (!sse) {
        json_error_t je;
        json_t *o = json_loadb(body, n, JSON_ALLOW_NUL, &je);
        if (!o) bad = "the reply body is not JSON";
        else if (r->status >= 400) bad = check_error_body(o, r->status);
        json_decref(o);
    } else {
        /* Every event is a comment, `data: [DONE]` or `data: <JSON>`. */
        for (char *line = body, *next; line && *line && !bad; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = '\0';
            if (!*line || *line == ':') continue;
            if (strncmp(line, "data: ", 6)) { bad = "an SSE line that is not data"; break; }
            if (!strcmp(line + 6, "[DONE]")) continue;
            json_t *o = json_loads(line + 6, JSON_ALLOW_NUL, NULL);
            if (!o) bad = "an SSE event that is not JSON";
            json_decref(o);
        }
    }
    free(body);
    return bad;
}
