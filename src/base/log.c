#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/env.h"

static int g_level = -1;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

void mx_log_set_level(mx_log_level lvl) { g_level = (int)lvl; }

void mx_log(mx_log_level lvl, const char *fmt, ...) {
    if (g_level < 0) g_level = (int)mx_env()->log_level;
    if ((int)lvl > g_level) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    pthread_mutex_lock(&g_log_mu);
    fprintf(stderr, "mlxcel %s: ", names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_log_mu);
}

/* ==== Rate-limited lines ==== */
int mx_vlog_limited(mx_log_limit *lim, mx_log_level lvl, const char *fmt, va_list ap) {
    if (g_level < 0) g_level = (int)mx_env()->log_level;
    if ((int)lvl > g_level) return 0;
    static const char *names[] = {"error", "warn", "info", "debug"};
    const double now = mx_now();
    pthread_mutex_lock(&g_log_mu);
    if (lim->t0 == 0 || now - lim->t0 >= lim->window_s) {
        lim->t0 = now;
        lim->n = 0;
    }
    if (lim->n >= lim->burst) {
        lim->suppressed++;
        pthread_mutex_unlock(&g_log_mu);
        return 0;
    }
    lim->n++;
    fprintf(stderr, "mlxcel %s: ", names[lvl]);
    vfprintf(stderr, fmt, ap);
    if (lim->suppressed)
        fprintf(stderr, " (%lu similar line%s suppressed before this one)", lim->suppressed,
                lim->suppressed == 1 ? "" : "s");
    lim->suppressed = 0;
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_log_mu);
    return 1;
}

int mx_log_limited(mx_log_limit *lim, mx_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = mx_vlog_limited(lim, lvl, fmt, ap);
    va_end(ap);
    return r;
}
