/* Logging to stderr. Level from MLXCEL_LOG_LEVEL (error|warn|info|debug), default info. */
#ifndef MLXCEL_BASE_LOG_H
#define MLXCEL_BASE_LOG_H

#include <stdarg.h>

typedef enum { MX_LOG_ERROR = 0, MX_LOG_WARN, MX_LOG_INFO, MX_LOG_DEBUG } mx_log_level;

void mx_log(mx_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_log_set_level(mx_log_level lvl);

/* A budget for a log line that outside input can trigger at will (a client dropping
 * connections, a flood): at most `burst` lines per `window_s` seconds. The lines over budget
 * are counted, and the first line of a later window says how many were suppressed, so the
 * log stays readable and its size bounded under attack. Initialize with MX_LOG_LIMIT(w, b). */
typedef struct mx_log_limit {
    double window_s;
    int burst;
    double t0;                /* start of the current window (0: none yet) */
    int n;                    /* lines printed in it */
    unsigned long suppressed; /* lines dropped since the last printed one */
} mx_log_limit;
#define MX_LOG_LIMIT(window_s, burst) {(window_s), (burst), 0, 0, 0}

/* Thread-safe (the log lock guards the budget). Returns whether the line was printed. */
int mx_log_limited(mx_log_limit *lim, mx_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int mx_vlog_limited(mx_log_limit *lim, mx_log_level lvl, const char *fmt, va_list ap);

#define LOG_ERR(...)   mx_log(MX_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...)  mx_log(MX_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...)  mx_log(MX_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) mx_log(MX_LOG_DEBUG, __VA_ARGS__)

#endif
