#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

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
