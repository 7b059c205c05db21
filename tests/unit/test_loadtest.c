/* mlxcel loadtest's parts: length laws (determinism, clamps, moments), the SSE reader, the
 * Prometheus parser and the server breakdown of both dialects (mlxcel serve, llama-server), and
 * the failure causes of one request against a scripted HTTP server on loopback that answers
 * the way llama-server and broken servers do (an error event mid-stream, no [DONE], a cut or
 * reset connection, a 503, a short answer, a stall). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "cli/loadtest.h"

/* ==== Length laws ==== */
static void test_dist_parse(void **st) {
    (void)st;
    lt_dist d;
    char err[400];
    assert_int_equal(lt_dist_parse("512", false, &d, err, sizeof err), 0);
    assert_true(d.kind == LT_DIST_FIXED && d.lo == 512 && d.hi == 512);
    assert_string_equal(d.spec, "fixed:512");
    assert_int_equal(lt_dist_parse("fixed:7", true, &d, err, sizeof err), 0);
    assert_int_equal(d.hi, 7);
    assert_int_equal(lt_dist_parse("uniform:3,9", true, &d, err, sizeof err), 0);
    assert_true(d.kind == LT_DIST_UNIFORM && d.lo == 3 && d.hi == 9);
    assert_int_equal(lt_dist_parse("lognormal:300,0.5", false, &d, err, sizeof err), 0);
    assert_true(d.kind == LT_DIST_LOGNORMAL && d.lo == 1 && d.hi == 1 << 20 && d.mean == 300 && d.sigma == 0.5);
    assert_int_equal(lt_dist_parse("lognormal:300,0.5,16,900", false, &d, err, sizeof err), 0);
    assert_true(d.lo == 16 && d.hi == 900);
    assert_string_equal(d.spec, "lognormal:300,0.5,16,900");
    assert_int_equal(lt_dist_parse("sharegpt", false, &d, err, sizeof err), 0);
    assert_string_equal(d.spec, "lognormal:161,1,4,1024");
    assert_int_equal(lt_dist_parse("sharegpt", true, &d, err, sizeof err), 0);
    assert_string_equal(d.spec, "lognormal:338,0.8,4,1024");
    const char *bad[] = {"0", "-3", "1.5", "fixed:", "uniform:9,3", "uniform:1", "lognormal:300",
                         "lognormal:0.5,1", "lognormal:300,-1", "lognormal:300,1,10", "lognormal:300,1,10,5",
                         "lognormal:300,1,1.5,9", "zipf:1,2", "uniform:1,2,3", "fixed:2000000", "512x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        assert_int_equal(lt_dist_parse(bad[i], i % 2, &d, err, sizeof err), -1);
        assert_non_null(strstr(err, i % 2 ? "--gen-tokens-dist" : "--prompt-tokens-dist"));
    }
}

static void test_dist_determinism(void **st) {
    (void)st;
    lt_dist d;
    char err[400];
    assert_int_equal(lt_dist_parse("lognormal:200,1.2,1,5000", false, &d, err, sizeof err), 0);
    int a[500], same_gen = 0, same_seed = 0;
    for (int i = 0; i < 500; i++) a[i] = lt_dist_draw(&d, 42, (uint64_t)i, false);
    for (int i = 499; i >= 0; i--) assert_int_equal(lt_dist_draw(&d, 42, (uint64_t)i, false), a[i]); /* any order */
    for (int i = 0; i < 500; i++) {
        same_gen += lt_dist_draw(&d, 42, (uint64_t)i, true) == a[i];
        same_seed += lt_dist_draw(&d, 43, (uint64_t)i, false) == a[i];
    }
    /* the other length and another seed are other sequences (a few equal draws by chance) */
    assert_true(same_gen < 25);
    assert_true(same_seed < 25);
    assert_int_equal(lt_dist_parse("uniform:5,6", false, &d, err, sizeof err), 0);
    for (int i = 0; i < 100; i++) assert_int_equal(lt_dist_draw(&d, 9, 77, false), lt_dist_draw(&d, 9, 77, false));
}

static double phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* E[min(max(X, lo), hi)] for X lognormal(mu, s): the clamped law's mean, in closed form. */
static double clamped_mean(double mean, double s, double lo, double hi) {
    const double mu = log(mean) - s * s / 2;
    const double a = (log(lo) - mu) / s, b = (log(hi) - mu) / s;
    return lo * phi(a) + mean * (phi(b - s) - phi(a - s)) + hi * (1 - phi(b));
}

static void test_dist_moments(void **st) {
    (void)st;
    lt_dist d;
    char err[400];
    const int n = 200000;
    /* unclamped in effect: mean and the spread of the logarithm as asked */
    assert_int_equal(lt_dist_parse("lognormal:300,0.8", false, &d, err, sizeof err), 0);
    double s = 0, sl = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        const double x = lt_dist_draw(&d, 7, (uint64_t)i, false);
        s += x;
        sl += log(x);
        sl2 += log(x) * log(x);
    }
    const double m = s / n, ml = sl / n, sd = sqrt(sl2 / n - ml * ml);
    assert_true(fabs(m / 300 - 1) < 0.01);
    assert_true(fabs(sd / 0.8 - 1) < 0.02);
    assert_true(fabs(ml - (log(300) - 0.32)) < 0.01);
    /* clamps: every draw inside, the tail mass on the bound, the mean as the clamped law's */
    assert_int_equal(lt_dist_parse("lognormal:100,1.0,20,200", false, &d, err, sizeof err), 0);
    int at_lo = 0, at_hi = 0;
    s = 0;
    for (int i = 0; i < n; i++) {
        const int x = lt_dist_draw(&d, 8, (uint64_t)i, true);
        assert_true(x >= 20 && x <= 200);
        at_lo += x == 20;
        at_hi += x == 200;
        s += x;
    }
    const double mu = log(100) - 0.5;
    assert_true(fabs((double)at_lo / n - phi((log(20) - mu) / 1.0)) < 0.01);
    assert_true(fabs((double)at_hi / n - (1 - phi((log(200) - mu) / 1.0))) < 0.01);
    assert_true(fabs(s / n / clamped_mean(100, 1.0, 20, 200) - 1) < 0.01);
    /* the ShareGPT-like preset: realized means as its clamped laws say */
    for (int g = 0; g < 2; g++) {
        assert_int_equal(lt_dist_parse("sharegpt", g, &d, err, sizeof err), 0);
        s = 0;
        for (int i = 0; i < n; i++) s += lt_dist_draw(&d, 11, (uint64_t)i, g);
        assert_true(fabs(s / n / clamped_mean(d.mean, d.sigma, 4, 1024) - 1) < 0.015);
    }
    /* uniform: every value, equally often */
    assert_int_equal(lt_dist_parse("uniform:10,19", false, &d, err, sizeof err), 0);
    int hist[10] = {0};
    for (int i = 0; i < n; i++) {
        const int x = lt_dist_draw(&d, 12, (uint64_t)i, false);
        assert_true(x >= 10 && x <= 19);
        hist[x - 10]++;
    }
    for (int k = 0; k < 10; k++) assert_true(fabs(hist[k] / (n / 10.0) - 1) < 0.03);
}

/* ==== SSE ==== */
typedef struct ev_log { char text[2048]; int n; } ev_log;

static void log_event(const lt_sse_event *ev, void *user) {
    ev_log *l = user;
    size_t k = strlen(l->text);
    snprintf(l->text + k, sizeof l->text - k, "[%s|%s]", ev->name, ev->has_data ? ev->data : "-");
    l->n++;
}

static void test_sse(void **st) {
    (void)st;
    const char *in = ": ping\n\n"
                     "data: a\r\n\r\n"
                     "data:b\rdata:  c\r\r"
                     "event: error\ndata: {\"message\":\"x\"}\n\n"
                     "id: 3\nretry: 10\nfoo\n\n"      /* no data: no event */
                     "data\n\n"                       /* a field without colon: empty data */
                     "data: [DONE]\n\n";
    const char *want = "[|a][|b\n c][error|{\"message\":\"x\"}][|][|[DONE]]";
    const size_t n = strlen(in);
    /* the same events whatever the reads look like: every split point, and byte by byte */
    for (size_t cut = 0; cut <= n; cut++) {
        ev_log l = {{0}, 0};
        lt_sse s = {0};
        lt_sse_feed(&s, in, cut, log_event, &l);
        lt_sse_feed(&s, in + cut, n - cut, log_event, &l);
        assert_string_equal(l.text, want);
        lt_sse_free(&s);
    }
    ev_log l = {{0}, 0};
    lt_sse s = {0};
    for (size_t i = 0; i < n; i++) lt_sse_feed(&s, in + i, 1, log_event, &l);
    assert_string_equal(l.text, want);
    assert_int_equal(l.n, 5);
    lt_sse_free(&s);
}

/* ==== Prometheus text and the breakdown ==== */
static void test_prom_parse(void **st) {
    (void)st;
    lt_prom p;
    char err[200];
    const char *t = "# HELP x y\n# TYPE x counter\nx 3\r\n"
                    "h_bucket{le=\"+Inf\"} 12\n"
                    "m{code=\"a b}\",q=\"\\\"}\"} 2.5 1700000000\n"
                    "  n -Inf\nz NaN\nbig 1.23457e+06\n\n";
    assert_int_equal(lt_prom_parse(t, &p, err, sizeof err), 6);
    assert_true(lt_prom_get(&p, "x") == 3);
    assert_true(lt_prom_get(&p, "h_bucket{le=\"+Inf\"}") == 12);
    assert_true(lt_prom_get(&p, "m{code=\"a b}\",q=\"\\\"}\"}") == 2.5);
    assert_true(isinf(lt_prom_get(&p, "n")) && lt_prom_get(&p, "n") < 0);
    assert_true(isnan(lt_prom_get(&p, "z")));
    assert_true(lt_prom_get(&p, "big") == 1234570);
    assert_true(isnan(lt_prom_get(&p, "absent")));
    assert_int_equal(lt_prom_peer(&p), LT_PEER_NONE);
    lt_prom_free(&p);
    assert_int_equal(lt_prom_parse("ok 1\nbroken{le=\"1\" 2\n", &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "line 2"));
    assert_int_equal(lt_prom_parse("novalue\n", &p, err, sizeof err), -1);
    assert_int_equal(lt_prom_parse("v abc\n", &p, err, sizeof err), -1);
}

static double jd(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void test_breakdown_mlxcel(void **st) {
    (void)st;
    lt_prom a, b, e;
    char err[200];
    assert_true(lt_prom_parse("llamacpp:n_decode_total 100\nllamacpp:prompt_seconds_total 1\n"
                              "llamacpp:tokens_predicted_seconds_total 2\nllamacpp:prompt_tokens_total 1000\n"
                              "llamacpp:tokens_predicted_total 500\nmlxcel_decode_rows_total 480\n"
                              "mlxcel_engine_busy_seconds_total 4\nmlxcel_step_batch_size_sum 900\n"
                              "mlxcel_step_batch_size_count 100\nmlxcel_prefill_chunks_total 10\n"
                              "mlxcel_prefill_grants_total 1\nmlxcel_prefix_cache_hits_total 2\n"
                              "mlxcel_prefix_cache_reused_tokens_total 32\nmlxcel_preemptions_total 0\n"
                              "mlxcel_queue_depth 3\nmlxcel_requests_running 8\nmlxcel_kv_blocks_used 40\n"
                              "mlxcel_kv_blocks_capacity 256\n", &a, err, sizeof err) > 0);
    assert_true(lt_prom_parse("llamacpp:n_decode_total 300\nllamacpp:prompt_seconds_total 2\n"
                              "llamacpp:tokens_predicted_seconds_total 5\nllamacpp:prompt_tokens_total 3000\n"
                              "llamacpp:tokens_predicted_total 2500\nmlxcel_decode_rows_total 2480\n"
                              "mlxcel_engine_busy_seconds_total 9\nmlxcel_step_batch_size_sum 2900\n"
                              "mlxcel_step_batch_size_count 300\nmlxcel_prefill_chunks_total 14\n"
                              "mlxcel_prefill_grants_total 4\nmlxcel_prefix_cache_hits_total 2\n"
                              "mlxcel_prefix_cache_reused_tokens_total 32\nmlxcel_preemptions_total 5\n"
                              "mlxcel_queue_depth 1\nmlxcel_requests_running 8\nmlxcel_kv_blocks_used 60\n"
                              "mlxcel_kv_blocks_capacity 256\n", &b, err, sizeof err) > 0);
    assert_true(lt_prom_parse("mlxcel_queue_depth 0\nmlxcel_requests_running 0\nmlxcel_kv_blocks_used 0\n", &e, err,
                              sizeof err) > 0);
    a.t = 10;
    b.t = 15; /* a 5 s window */
    lt_samples smp = {0};
    lt_samples_add(&smp, &a);
    lt_samples_add(&smp, &b);
    assert_int_equal(lt_prom_peer(&b), LT_PEER_MLXCEL);
    assert_false(lt_prom_idle(&b));
    assert_true(lt_prom_idle(&e));
    json_t *o = lt_breakdown(&a, &b, &smp, &e, 0.25);
    assert_string_equal(json_string_value(json_object_get(o, "peer")), "mlxcel");
    assert_true(jd(o, "steps") == 200);
    assert_true(fabs(jd(o, "wall_ms_per_step") - 25) < 1e-9);   /* 5 s / 200 */
    assert_true(fabs(jd(o, "forward_ms_per_step") - 20) < 1e-9); /* (1 + 3) s / 200 */
    assert_true(fabs(jd(o, "host_ms_per_step") - 5) < 1e-9);     /* (5 - 4) s / 200 */
    assert_true(fabs(jd(o, "engine_busy_share") - 1) < 1e-9);
    assert_true(fabs(jd(o, "rows_per_step") - 20) < 1e-9);       /* (2000 + 2000) / 200 */
    assert_true(fabs(jd(o, "seqs_per_step") - 10) < 1e-9);       /* 2000 / 200 */
    assert_true(fabs(jd(o, "prefill_row_share") - 0.5) < 1e-9);
    assert_true(fabs(jd(o, "prefill_time_share") - 0.25) < 1e-9); /* 1 s of 4 */
    assert_true(jd(o, "generated_tokens") == 2000 && jd(o, "prefill_chunks") == 4 && jd(o, "prefill_grants") == 3);
    assert_true(jd(o, "prefix_cache_hits") == 0 && jd(o, "prefix_cached_tokens") == 0 && jd(o, "preemptions") == 5);
    json_t *q = json_object_get(o, "queue_depth"), *kv = json_object_get(o, "kv_blocks_used");
    assert_true(jd(q, "mean") == 2 && jd(q, "max") == 3 && jd(kv, "max") == 60 && jd(kv, "capacity") == 256);
    json_t *af = json_object_get(o, "after");
    assert_true(json_is_true(json_object_get(af, "idle")) && jd(af, "kv_blocks_used") == 0 && jd(af, "wait_s") == 0.25);
    json_decref(o);
    lt_prom_free(&a);
    lt_prom_free(&b);
    lt_prom_free(&e);
}

static void test_breakdown_llamacpp(void **st) {
    (void)st;
    lt_prom a, b, e;
    char err[200];
    /* llama-server's own text (its to_metrics(): HELP/TYPE, 6 significant digits) */
    assert_true(lt_prom_parse("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed\n"
                              "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1000\n"
                              "llamacpp:prompt_tokens_cached_total 0\nllamacpp:prompt_seconds_total 2\n"
                              "llamacpp:tokens_predicted_total 1000\nllamacpp:tokens_predicted_seconds_total 50\n"
                              "llamacpp:n_decode_total 100\nllamacpp:n_busy_slots_per_decode 4\n"
                              "llamacpp:requests_processing 8\nllamacpp:requests_deferred 2\n", &a, err, sizeof err) > 0);
    assert_true(lt_prom_parse("llamacpp:prompt_tokens_total 5000\nllamacpp:prompt_tokens_cached_total 64\n"
                              "llamacpp:prompt_seconds_total 3\nllamacpp:tokens_predicted_total 9000\n"
                              "llamacpp:tokens_predicted_seconds_total 900\nllamacpp:n_decode_total 500\n"
                              "llamacpp:n_busy_slots_per_decode 7.2\nllamacpp:requests_processing 8\n"
                              "llamacpp:requests_deferred 0\n", &b, err, sizeof err) > 0);
    assert_true(lt_prom_parse("llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n", &e, err, sizeof err) > 0);
    a.t = 0;
    b.t = 8;
    lt_samples smp = {0};
    lt_samples_add(&smp, &a);
    lt_samples_add(&smp, &b);
    assert_int_equal(lt_prom_peer(&b), LT_PEER_LLAMACPP);
    json_t *o = lt_breakdown(&a, &b, &smp, &e, 0);
    assert_string_equal(json_string_value(json_object_get(o, "peer")), "llama-server");
    assert_true(jd(o, "steps") == 400);
    assert_true(fabs(jd(o, "wall_ms_per_step") - 20) < 1e-9);
    assert_true(json_is_null(json_object_get(o, "forward_ms_per_step")));
    assert_true(json_is_null(json_object_get(o, "host_ms_per_step")));
    assert_true(fabs(jd(o, "rows_per_step") - 30) < 1e-9);   /* (4000 + 8000) / 400 */
    assert_true(fabs(jd(o, "seqs_per_step") - 8) < 1e-9);    /* (7.2 x 500 - 4 x 100) / 400 */
    assert_true(fabs(jd(o, "prefill_time_share") - 0.125) < 1e-9); /* 1 s of an 8 s window */
    assert_true(jd(o, "prefix_cached_tokens") == 64);
    assert_true(json_is_null(json_object_get(o, "preemptions")) && json_is_null(json_object_get(o, "kv_blocks_used")));
    assert_true(jd(json_object_get(o, "queue_depth"), "max") == 2);
    json_t *af = json_object_get(o, "after");
    assert_true(json_is_true(json_object_get(af, "idle")) && json_is_null(json_object_get(af, "kv_blocks_used")));
    json_decref(o);
    lt_prom_free(&a);
    lt_prom_free(&b);
    lt_prom_free(&e);
}

/* ==== Failure causes against a scripted server ==== */
enum { M_GOOD, M_ERR_MID, M_EVENT_ERROR, M_NO_DONE, M_CUT, M_RST, M_503, M_SHORT, M_STALL, M_JSON_OK, M_JSON_ERR,
       M_IDENTITY };
static volatile int g_mode;
static int g_listen = -1;

static void send_s(int fd, const char *s) { (void)!send(fd, s, strlen(s), MSG_NOSIGNAL); }
static void chunk(int fd, const char *s) {
    char h[32];
    snprintf(h, sizeof h, "%zx\r\n", strlen(s));
    send_s(fd, h);
    send_s(fd, s);
    send_s(fd, "\r\n");
}
static void tokens(int fd, int n, const char *eol) {
    char ev[200];
    for (int i = 0; i < n; i++) {
        snprintf(ev, sizeof ev, "data: {\"choices\":[{\"text\":\"a\",\"index\":0,\"finish_reason\":null}]}%s%s", eol, eol);
        chunk(fd, ev);
    }
}
static void final_usage(int fd, int n) {
    char ev[300];
    snprintf(ev, sizeof ev, "data: {\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}],"
                            "\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":%d}}\n\n", n);
    chunk(fd, ev);
}

static void *script_server(void *arg) {
    (void)arg;
    for (;;) {
        const int fd = accept(g_listen, NULL, NULL);
        if (fd < 0) return NULL;
        char req[8192];
        size_t got = 0;
        for (;;) { /* the request: headers and Content-Length bytes */
            const ssize_t r = recv(fd, req + got, sizeof req - 1 - got, 0);
            if (r <= 0) break;
            got += (size_t)r;
            req[got] = 0;
            char *e = strstr(req, "\r\n\r\n"), *cl = strstr(req, "Content-Length: ");
            if (e && (!cl || got >= (size_t)(e - req) + 4 + (size_t)atoi(cl + 16))) break;
        }
        const char *sse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        switch (g_mode) {
        case M_GOOD: /* CRLF line ends, a comment, usage, [DONE] */
            send_s(fd, sse);
            chunk(fd, ": ping\r\n\r\n");
            tokens(fd, 8, "\r\n");
            final_usage(fd, 8);
            chunk(fd, "data: [DONE]\r\n\r\n");
            send_s(fd, "0\r\n\r\n");
            break;
        case M_ERR_MID: /* llama-server: an error result mid-stream ends it without [DONE] */
            send_s(fd, sse);
            tokens(fd, 3, "\n");
            chunk(fd, "data: {\"error\":{\"code\":500,\"message\":\"Context size has been exceeded.\","
                      "\"type\":\"server_error\"}}\n\n");
            send_s(fd, "0\r\n\r\n");
            break;
        case M_EVENT_ERROR:
            send_s(fd, sse);
            tokens(fd, 2, "\n");
            chunk(fd, "event: error\ndata: {\"message\":\"boom\"}\n\n");
            send_s(fd, "0\r\n\r\n");
            break;
        case M_NO_DONE:
            send_s(fd, sse);
            tokens(fd, 8, "\n");
            final_usage(fd, 8);
            send_s(fd, "0\r\n\r\n");
            break;
        case M_CUT:
            send_s(fd, sse);
            tokens(fd, 3, "\n");
            break;
        case M_RST: {
            send_s(fd, sse);
            tokens(fd, 3, "\n");
            usleep(50000); /* the client has read them: the reset is what it meets next */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            break;
        }
        case M_503:
            send_s(fd, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 56\r\n\r\n"
                       "{\"error\":{\"code\":503,\"message\":\"queue full, try later\"}}xx");
            break;
        case M_SHORT:
            send_s(fd, sse);
            tokens(fd, 5, "\n");
            final_usage(fd, 5);
            chunk(fd, "data: [DONE]\n\n");
            send_s(fd, "0\r\n\r\n");
            break;
        case M_STALL:
            send_s(fd, sse);
            tokens(fd, 1, "\n");
            usleep(1500000);
            break;
        case M_JSON_OK:
            send_s(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 108\r\n\r\n"
                       "{\"choices\":[{\"text\":\"aaaaaaaa\",\"finish_reason\":\"length\"}],"
                       "\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":8}}");
            break;
        case M_JSON_ERR:
            send_s(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"error\":{\"message\":\"odd\"}}");
            break;
        case M_IDENTITY: /* no chunking, no length: the body ends when the server closes */
            send_s(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n");
            for (int i = 0; i < 8; i++) send_s(fd, "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n");
            send_s(fd, "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":8}}\n\n"
                       "data: [DONE]\n\n");
            break;
        }
        close(fd);
    }
}

static lt_result run_mode(lt_opts *o, int mode, bool stream) {
    g_mode = mode;
    o->stream = stream;
    lt_result r = {0};
    r.want_prompt = 4;
    r.want_gen = 8;
    lt_request_run(o, 1, &r);
    free(r.ev_t);
    return r;
}

static void test_fail_kinds(void **st) {
    (void)st;
    g_listen = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(g_listen, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(g_listen, 16), 0);
    getsockname(g_listen, (struct sockaddr *)&sa, &sl);
    pthread_t th;
    pthread_create(&th, NULL, script_server, NULL);
    lt_opts o = {.vocab = 100, .seed = 1, .timeout_s = 1};
    snprintf(o.host, sizeof o.host, "127.0.0.1");
    snprintf(o.port, sizeof o.port, "%d", ntohs(sa.sin_port));

    lt_result r = run_mode(&o, M_GOOD, true);
    assert_int_equal(r.fail, LT_OK);
    assert_true(r.tokens == 8 && r.prompt_tokens == 4 && r.n_ev == 8 && r.ttft > 0);
    r = run_mode(&o, M_ERR_MID, true);
    assert_int_equal(r.fail, LT_FAIL_ERROR_EVENT);
    assert_string_equal(r.err, "Context size has been exceeded.");
    r = run_mode(&o, M_EVENT_ERROR, true);
    assert_int_equal(r.fail, LT_FAIL_ERROR_EVENT);
    assert_string_equal(r.err, "boom");
    r = run_mode(&o, M_NO_DONE, true);
    assert_int_equal(r.fail, LT_FAIL_NO_DONE);
    assert_non_null(strstr(r.err, "without [DONE]"));
    r = run_mode(&o, M_CUT, true);
    assert_int_equal(r.fail, LT_FAIL_RESET);
    assert_non_null(strstr(r.err, "inside the chunked body"));
    r = run_mode(&o, M_RST, true);
    assert_int_equal(r.fail, LT_FAIL_RESET);
    r = run_mode(&o, M_503, true);
    assert_int_equal(r.fail, LT_FAIL_HTTP);
    assert_int_equal(r.http_status, 503);
    assert_string_equal(r.err, "HTTP 503: queue full, try later");
    r = run_mode(&o, M_SHORT, true);
    assert_int_equal(r.fail, LT_FAIL_SHORT);
    assert_string_equal(r.err, "5 of 8 tokens (finish_reason length)");
    r = run_mode(&o, M_STALL, true);
    assert_int_equal(r.fail, LT_FAIL_TIMEOUT);
    r = run_mode(&o, M_JSON_OK, false);
    assert_int_equal(r.fail, LT_OK);
    assert_int_equal(r.tokens, 8);
    r = run_mode(&o, M_JSON_ERR, false);
    assert_int_equal(r.fail, LT_FAIL_BAD_RESPONSE);
    r = run_mode(&o, M_IDENTITY, true);
    assert_int_equal(r.fail, LT_OK);
    assert_int_equal(r.n_ev, 8);
    /* nobody listening */
    shutdown(g_listen, SHUT_RDWR);
    close(g_listen);
    pthread_join(th, NULL);
    r = run_mode(&o, M_GOOD, true);
    assert_int_equal(r.fail, LT_FAIL_CONNECT);
    for (int k = 0; k < LT_FAIL_KINDS; k++) assert_true(strlen(lt_fail_name((lt_fail_kind)k)) > 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist_parse),       cmocka_unit_test(test_dist_determinism),
        cmocka_unit_test(test_dist_moments),     cmocka_unit_test(test_sse),
        cmocka_unit_test(test_prom_parse),       cmocka_unit_test(test_breakdown_mlxcel),
        cmocka_unit_test(test_breakdown_llamacpp), cmocka_unit_test(test_fail_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
