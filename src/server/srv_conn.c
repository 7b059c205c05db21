/* HTTP connection admission for libmicrohttpd's thread-per-connection mode.
 *
 * Every connection costs a thread until it closes, so a client that opens connections and
 * sends nothing could hold them all: issue 50 locked /health and keyed clients out for 600 s
 * with 1,030 idle sockets. This table knows every live connection as idle (no request header
 * yet, or between keep-alive requests) or busy (a request being read, run or answered), and:
 *  - admits a new connection (the accept policy callback, on the listening thread) while its
 *    address holds fewer than --max-connections-per-ip and the server fewer than
 *    --threads-http. At a limit it closes the oldest idle connection of that address (or of
 *    the server) to make room, and refuses the new one only when all in the way are busy:
 *    a flood of idle sockets evicts itself, and a real request always finds room;
 *  - closes idle connections whose next header has not arrived within --header-timeout of
 *    their accept or previous answer (a reaper thread), however slowly they trickle bytes
 *    (libmicrohttpd's own timeout restarts at every byte);
 *  - rate-limits libmicrohttpd's log lines (one per dropped incomplete request otherwise).
 * Closing is shutdown(fd): the connection's thread reads EOF and libmicrohttpd closes it. The
 * descriptor stays valid while the table holds the connection: libmicrohttpd closes it only
 * after the NOTIFY_CLOSED callback, which takes the table lock. */
#include "server/srv_conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"

/* ==== Table ==== */
typedef struct conn_key {
    uint8_t fam; /* 4 or 6 */
    uint8_t b[16];
} conn_key;

typedef struct srv_conn {
    struct srv_conns *owner;
    int fd;
    conn_key key;
    bool keyed;                    /* false: a Unix-socket client (no per-address limit) */
    bool busy, dropped;            /* dropped: shut down by the table, not closed yet */
    double idle_since;
    struct srv_conn *prev, *next;  /* every connection */
    struct srv_conn *iprev, *inext; /* idle and not dropped, oldest first */
    /* the current request's CORS answer: its connection thread only */
    const char *cors_origin;
    bool cors_credentials;
} srv_conn;

#define MHD_LOG_KINDS 32

struct srv_conns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_conn *all, *idle_head, *idle_tail;
    int n_live; /* registered and not dropped */
    int n_busy;
    srv_conn_limits lim;
    srv_metrics *metrics;
    pthread_t reaper;
    bool reaper_started, stopping;
    mx_log_limit log_refused, log_evicted;
    unsigned long evicted_unlogged;
    /* libmicrohttpd's lines, one budget per format string */
    pthread_mutex_t log_mu;
    struct { const char *fmt; mx_log_limit lim; } mhd_log[MHD_LOG_KINDS];
};

static bool key_of(const struct sockaddr *a, conn_key *k) {
    memset(k, 0, sizeof *k);
    if (!a) return false;
    if (a->sa_family == AF_INET) {
        k->fam = 4;
        memcpy(k->b, &((const struct sockaddr_in *)a)->sin_addr, 4);
        return true;
    }
    if (a->sa_family == AF_INET6) {
        const struct in6_addr *p = &((const struct sockaddr_in6 *)a)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(p)) {
            k->fam = 4;
            memcpy(k->b, p->s6_addr + 12, 4);
        } else {
            k->fam = 6; /* one host owns a whole /64: count the prefix */
            memcpy(k->b, p->s6_addr, 8);
        }
        return true;
    }
    return false;
}

static void key_str(const conn_key *k, char *out, size_t n) {
    if (k->fam == 4) {
        inet_ntop(AF_INET, k->b, out, (socklen_t)n);
        return;
    }
    struct in6_addr a;
    memset(&a, 0, sizeof a);
    memcpy(a.s6_addr, k->b, 8);
    char t[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &a, t, sizeof t);
    snprintf(out, n, "%s/64", t);
}

static bool key_eq(const conn_key *a, const conn_key *b) { return a->fam == b->fam && !memcmp(a->b, b->b, 16); }

static void idle_unlink(srv_conns *t, srv_conn *k) {
    if (k->iprev) k->iprev->inext = k->inext;
    else if (t->idle_head == k) t->idle_head = k->inext;
    else return; /* not on the list */
    if (k->inext) k->inext->iprev = k->iprev;
    else t->idle_tail = k->iprev;
    k->iprev = k->inext = NULL;
}

static void idle_append(srv_conns *t, srv_conn *k) {
    k->idle_since = mx_now();
    k->inext = NULL;
    k->iprev = t->idle_tail;
    if (t->idle_tail) t->idle_tail->inext = k;
    else t->idle_head = k;
    t->idle_tail = k;
}

static void publish(srv_conns *t) {
    srv_metrics_set(t->metrics, SM_HTTP_CONNECTIONS, "idle", t->n_live - t->n_busy);
    srv_metrics_set(t->metrics, SM_HTTP_CONNECTIONS, "busy", t->n_busy);
}

/* Shuts an idle connection down (its thread closes it); t->mu held. */
static void drop_locked(srv_conns *t, srv_conn *k, const char *reason) {
    idle_unlink(t, k);
    k->dropped = true;
    t->n_live--;
    shutdown(k->fd, SHUT_RDWR);
    srv_metrics_add(t->metrics, SM_HTTP_CONN_CLOSED_TOTAL, reason, 1);
}

/* The oldest idle connection (of `key` when given); t->mu held. */
static srv_conn *oldest_idle(srv_conns *t, const conn_key *key) {
    for (srv_conn *k = t->idle_head; k; k = k->inext)
        if (!key || (k->keyed && key_eq(&k->key, key))) return k;
    return NULL;
}

static srv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* ==== Reaper: the header deadline ==== */
static void *reaper_main(void *arg) {
    srv_conns *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        const double now = mx_now();
        int n = 0;
        /* the idle list is in idle_since order: the expired ones are its head */
        while (t->idle_head && now - t->idle_head->idle_since >= t->lim.header_timeout_s) {
            drop_locked(t, t->idle_head, "header_timeout");
            n++;
        }
        if (n) publish(t);
        double wait = t->idle_head ? t->idle_head->idle_since + t->lim.header_timeout_s - now : 1.0;
        if (wait > 1.0) wait = 1.0; /* a newly idle connection's deadline is later than the head's */
        if (wait < 0.01) wait = 0.01;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(wait * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ==== Life cycle ==== */
srv_conns *srv_conns_new(const srv_conn_limits *lim, srv_metrics *metrics, mx_error *err) {
    srv_conns *t = calloc(1, sizeof *t);
    if (!t) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_mutex_init(&t->log_mu, NULL);
    t->lim = *lim;
    if (t->lim.max_conns < 1) t->lim.max_conns = 1;
    if (t->lim.max_per_ip < 1 || t->lim.max_per_ip > t->lim.max_conns) t->lim.max_per_ip = t->lim.max_conns;
    t->metrics = metrics;
    t->log_refused = (mx_log_limit)MX_LOG_LIMIT(10.0, 3);
    t->log_evicted = (mx_log_limit)MX_LOG_LIMIT(10.0, 1);
    for (int i = 0; i < MHD_LOG_KINDS; i++) t->mhd_log[i].lim = (mx_log_limit)MX_LOG_LIMIT(10.0, 3);
    publish(t);
    if (t->lim.header_timeout_s > 0) {
        int rc = pthread_create(&t->reaper, NULL, reaper_main, t);
        if (rc) {
            mx_fail(err, "server: cannot start the connection reaper thread: %s", strerror(rc));
            srv_conns_free(t);
            return NULL;
        }
        t->reaper_started = true;
    }
    return t;
}

void srv_conns_free(srv_conns *t) {
    if (!t) return;
    if (t->reaper_started) {
        pthread_mutex_lock(&t->mu);
        t->stopping = true;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->reaper, NULL);
    }
    while (t->all) { /* none after MHD_stop_daemon; freed anyway */
        srv_conn *k = t->all;
        t->all = k->next;
        free(k);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->log_mu);
    free(t);
}

/* Room for connections being closed (shut down, their threads exiting) on top of the limit. */
static unsigned headroom(int max_conns) { return max_conns / 8 > 32 ? (unsigned)(max_conns / 8) : 32u; }

unsigned srv_conns_mhd_limit(const srv_conns *t) { return (unsigned)t->lim.max_conns + headroom(t->lim.max_conns); }

void srv_conns_fit_fd_limit(srv_conns *t) {
    /* a descriptor per connection (plus headroom), and some for the model, logs and pipes */
    const rlim_t spare = 128;
    const rlim_t need = (rlim_t)srv_conns_mhd_limit(t) + spare;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    if (rl.rlim_cur >= need) return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl)) getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur >= need) return;
    int fit = (int)((rl.rlim_cur > spare ? rl.rlim_cur - spare : 1) * 8 / 9);
    if (fit < 1) fit = 1;
    LOG_WARN("http: the open-file limit (%llu, hard %llu) cannot hold %d connections: serving at most %d "
             "(--threads-http); raise `ulimit -n` for more",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, t->lim.max_conns, fit);
    t->lim.max_conns = fit;
    if (t->lim.max_per_ip > fit) t->lim.max_per_ip = fit;
}

/* ==== libmicrohttpd callbacks ==== */
MHD_Result_t srv_conns_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
    (void)len;
    srv_conns *t = cls;
    conn_key key;
    const bool keyed = key_of(addr, &key);
    const char *refused = NULL;
    int evicted = 0, n_ip = 0;
    pthread_mutex_lock(&t->mu);
    if (keyed) {
        for (srv_conn *k = t->all; k; k = k->next) n_ip += !k->dropped && k->keyed && key_eq(&k->key, &key);
        if (n_ip >= t->lim.max_per_ip) {
            srv_conn *v = oldest_idle(t, &key);
            if (v) {
                drop_locked(t, v, "evicted");
                evicted++;
            } else {
                refused = "per_ip";
            }
        }
    }
    if (!refused && t->n_live >= t->lim.max_conns) {
        srv_conn *v = oldest_idle(t, NULL);
        if (v) {
            drop_locked(t, v, "evicted");
            evicted++;
        } else {
            refused = "limit";
        }
    }
    if (evicted) publish(t);
    t->evicted_unlogged += (unsigned long)evicted;
    const unsigned long ev = t->evicted_unlogged;
    const int live = t->n_live;
    pthread_mutex_unlock(&t->mu);

    char who[64] = "a Unix-socket client";
    if (keyed) key_str(&key, who, sizeof who);
    if (refused) {
        srv_metrics_add(t->metrics, SM_HTTP_CONN_REFUSED_TOTAL, refused, 1);
        if (!strcmp(refused, "per_ip"))
            mx_log_limited(&t->log_refused, MX_LOG_WARN,
                           "http: refused a connection from %s: its %d connections (--max-connections-per-ip) are all "
                           "busy", who, n_ip);
        else
            mx_log_limited(&t->log_refused, MX_LOG_WARN,
                           "http: refused a connection from %s: all %d connections (--threads-http) are busy", who,
                           live);
        return MHD_NO;
    }
    if (evicted && mx_log_limited(&t->log_evicted, MX_LOG_INFO,
                                  "http: at a connection limit (--threads-http %d, --max-connections-per-ip %d): "
                                  "closed %lu idle connection%s to admit new ones (latest for %s)",
                                  t->lim.max_conns, t->lim.max_per_ip, ev, ev == 1 ? "" : "s", who)) {
        pthread_mutex_lock(&t->mu);
        t->evicted_unlogged -= ev;
        pthread_mutex_unlock(&t->mu);
    }
    return MHD_YES;
}

void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                      enum MHD_ConnectionNotificationCode code) {
    srv_conns *t = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        srv_conn *k = calloc(1, sizeof *k);
        if (!k || !fi) { /* untracked, it could never be evicted: close it rather */
            if (fi) shutdown(fi->connect_fd, SHUT_RDWR);
            free(k);
            return;
        }
        k->owner = t;
        k->fd = fi->connect_fd;
        k->keyed = ai && key_of(ai->client_addr, &k->key);
        pthread_mutex_lock(&t->mu);
        k->next = t->all;
        if (t->all) t->all->prev = k;
        t->all = k;
        t->n_live++;
        idle_append(t, k);
        publish(t);
        pthread_mutex_unlock(&t->mu);
        *socket_ctx = k;
        return;
    }
    srv_conn *k = *socket_ctx;
    if (!k) return;
    pthread_mutex_lock(&t->mu);
    if (k->prev) k->prev->next = k->next;
    else t->all = k->next;
    if (k->next) k->next->prev = k->prev;
    idle_unlink(t, k);
    if (!k->dropped) t->n_live--;
    if (k->busy) t->n_busy--;
    publish(t);
    pthread_mutex_unlock(&t->mu);
    *socket_ctx = NULL;
    free(k);
}

void srv_conns_busy(struct MHD_Connection *c) {
    srv_conn *k = conn_of(c);
    if (!k) return;
    k->cors_origin = NULL;
    k->cors_credentials = false;
    srv_conns *t = k->owner;
    pthread_mutex_lock(&t->mu);
    if (!k->busy && !k->dropped) {
        k->busy = true;
        t->n_busy++;
        idle_unlink(t, k);
        publish(t);
    }
    pthread_mutex_unlock(&t->mu);
}

void srv_conns_idle(struct MHD_Connection *c) {
    srv_conn *k = conn_of(c);
    if (!k) return;
    k->cors_origin = NULL; /* pointed into the finished request's headers */
    k->cors_credentials = false;
    srv_conns *t = k->owner;
    pthread_mutex_lock(&t->mu);
    if (k->busy) {
        k->busy = false;
        t->n_busy--;
        if (!k->dropped) idle_append(t, k); /* the header deadline of its next request starts */
        publish(t);
    }
    pthread_mutex_unlock(&t->mu);
}

void srv_conns_set_cors(struct MHD_Connection *c, const char *origin, bool credentials) {
    srv_conn *k = conn_of(c);
    if (!k) return;
    k->cors_origin = origin;
    k->cors_credentials = credentials;
}

bool srv_conns_cors(struct MHD_Connection *c, const char **origin, bool *credentials) {
    srv_conn *k = conn_of(c);
    if (!k) return false;
    *origin = k->cors_origin;
    *credentials = k->cors_credentials;
    return true;
}

/* ==== libmicrohttpd's log ====
 * Its lines (a client closing with an incomplete request, a malformed request, ...) can be
 * triggered at will by any client: each kind (its format string) gets its own budget. */
void srv_conns_mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_conns *t = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    pthread_mutex_lock(&t->log_mu);
    int slot = MHD_LOG_KINDS - 1; /* shared by the kinds past the table */
    for (int i = 0; i < MHD_LOG_KINDS - 1; i++) {
        if (t->mhd_log[i].fmt == fmt) { slot = i; break; }
        if (!t->mhd_log[i].fmt) { t->mhd_log[i].fmt = fmt; slot = i; break; }
    }
    pthread_mutex_unlock(&t->log_mu);
    mx_log_limited(&t->mhd_log[slot].lim, MX_LOG_WARN, "http: %s", msg);
}
