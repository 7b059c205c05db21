#ifndef MLXCEL_BASE_CLOCK_H
#define MLXCEL_BASE_CLOCK_H

#include <time.h>

/* Monotonic seconds. */
static inline double mx_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
