/*
 * bench.h — what the benchmark programs share: a monotonic clock, sorting
 * samples, their percentiles and median, and a growing buffer for an HTTP
 * answer's body (a libcurl write callback). Header-only (static inline),
 * so each program stays one source file; not thread-safe beyond what each
 * function says.
 */
#ifndef SBX_BENCH_H
#define SBX_BENCH_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline double now_ms(void)
{
    return now_us() / 1e3;
}

/* qsort() comparison of doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The @p quantile (0..1) of the @n samples @v, nearest rank; sorts @v in
 * place. @n > 0. */
static inline double percentile(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

/* The median of the @n samples @v (the mean of the middle two when @n is
 * even); sorts @v in place. @n > 0. */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A growing response body, NUL-terminated; free() its data. */
typedef struct bench_body {
    char *data;
    size_t len;
} bench_body;

/* A libcurl CURLOPT_WRITEFUNCTION appending to the bench_body @ud; 0 (which
 * aborts the transfer) when out of memory. */
static inline size_t bench_collect(char *p, size_t size, size_t n, void *ud)
{
    bench_body *b = ud;
    size_t len = size * n;
    char *d = realloc(b->data, b->len + len + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, p, len);
    b->len += len;
    d[b->len] = '\0';
    b->data = d;
    return len;
}

#endif /* SBX_BENCH_H */
