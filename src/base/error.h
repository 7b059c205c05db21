/* Errors: functions return 0 on success and -1 on failure after filling an mx_error.
 * User-facing messages name the file, tensor or JSON field and what was expected. */
#ifndef MLXCEL_BASE_ERROR_H
#define MLXCEL_BASE_ERROR_H

#include <stdarg.h>

typedef struct mx_error {
    char msg[1024];
} mx_error;

/* Sets e->msg (printf-style) and returns -1, so callers can `return mx_fail(e, ...)`. */
int mx_fail(mx_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context: "ctx: <old message>". Returns -1. */
int mx_wrap(mx_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_error_clear(mx_error *e);

#endif
