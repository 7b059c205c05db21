/* Logging to stderr. Level from MLXCEL_LOG_LEVEL (error|warn|info|debug), default info. */
#ifndef MLXCEL_BASE_LOG_H
#define MLXCEL_BASE_LOG_H

typedef enum { MX_LOG_ERROR = 0, MX_LOG_WARN, MX_LOG_INFO, MX_LOG_DEBUG } mx_log_level;

void mx_log(mx_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_log_set_level(mx_log_level lvl);

#define LOG_ERR(...)   mx_log(MX_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...)  mx_log(MX_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...)  mx_log(MX_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) mx_log(MX_LOG_DEBUG, __VA_ARGS__)

#endif
