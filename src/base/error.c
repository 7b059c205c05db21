#include "base/error.h"

#include <stdio.h>
#include <string.h>

/* A message is one line (it is printed as one stderr line, one log line, one JSON error):
 * control characters that came in with quoted input (a JSON "\n" in a tensor name, jansson's
 * "near '...'" text of a corrupt file: found by fuzz_tune_record) become '?'. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

int mx_fail(mx_error *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    one_line(e->msg);
    return -1;
}

int mx_wrap(mx_error *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* Truncation is acceptable here: messages are for people. */
    size_t n = strlen(prefix);
    if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
    memcpy(e->msg, prefix, n);
    e->msg[n] = ':';
    e->msg[n + 1] = ' ';
    size_t m = strlen(old);
    if (m > sizeof e->msg - n - 3) m = sizeof e->msg - n - 3;
    memcpy(e->msg + n + 2, old, m);
    e->msg[n + 2 + m] = '\0';
    one_line(e->msg);
    return -1;
}

void mx_error_clear(mx_error *e) {
    if (e) e->msg[0] = '\0';
}
