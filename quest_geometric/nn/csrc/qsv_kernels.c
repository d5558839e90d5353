/* Native CPU kernels of QSVConv's dense path (quest_geometric.nn._qsv_native).
 *
 * Plain C on raw contiguous buffers, compiled at first use by the system C compiler and
 * loaded with ctypes (as torch.compile's CPU back-end builds its own kernels), so that a
 * fresh install needs no build step and no torch headers. Every kernel has a float and a
 * double version and splits its rows over `threads` POSIX threads. The plain PyTorch
 * reference of each kernel stays beside it in Python and the tests hold both equal.
 *
 * Layouts (all row-major, contiguous):
 *   rot    [R, 3, 3]     one matrix per (node, head) row r
 *   x, y   [R, m, 4]     m quaternions per row, real part first
 *   qs     [Ns, H, 4]    source quaternions;  qd [Nd, H, 4] target quaternions
 *   scale  [H]           per-head logit scale
 *   xs     [Ns, H, C]    source features;     src [Nd * k] source of edge (i, j)
 *   out    [Nd, H, C];   alpha [Nd, H, k]
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define MAX_THREADS 256

typedef void (*range_fn)(const void *ctx, int64_t begin, int64_t end);

typedef struct {
    range_fn fn;
    const void *ctx;
    int64_t begin, end;
} job_t;

static void *run_job(void *arg) {
    job_t *job = (job_t *)arg;
    job->fn(job->ctx, job->begin, job->end);
    return NULL;
}

/* fn(ctx, begin, end) over [0, n) in `threads` contiguous chunks; the calling thread runs
 * the first chunk, and a chunk whose thread cannot be started runs on the calling thread. */
static void parallel_for(int64_t n, int threads, range_fn fn, const void *ctx) {
    if (n <= 0) return;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > n) threads = (int)n;
    if (threads <= 1) {
        fn(ctx, 0, n);
        return;
    }
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS];
    job_t jobs[MAX_THREADS];
    int64_t chunk = (n + threads - 1) / threads;
    for (int t = 0; t < threads; t++) {
        int64_t b = (int64_t)t * chunk, e = b + chunk;
        jobs[t].fn = fn;
        jobs[t].ctx = ctx;
        jobs[t].begin = b < n ? b : n;
        jobs[t].end = e < n ? e : n;
        started[t] = 0;
    }
    for (int t = 1; t < threads; t++)
        if (jobs[t].begin < jobs[t].end)
            started[t] = pthread_create(&tid[t], NULL, run_job, &jobs[t]) == 0;
    fn(ctx, jobs[0].begin, jobs[0].end);
    for (int t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else if (jobs[t].begin < jobs[t].end)
            fn(ctx, jobs[t].begin, jobs[t].end);
    }
}

#define DEFINE_KERNELS(T, SUFFIX, EXP)                                                        \
                                                                                              \
/* y = (x_0, M x_v) per quaternion, M = R (transpose == 0) or R^T (transpose != 0). */       \
typedef struct { const T *rot, *x; T *y; int64_t m; int transpose; } rotate_ctx_##SUFFIX;    \
                                                                                              \
static void rotate_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {                \
    const rotate_ctx_##SUFFIX *c = (const rotate_ctx_##SUFFIX *)p;                            \
    for (int64_t r = begin; r < end; r++) {                                                   \
        const T *R = c->rot + 9 * r;                                                          \
        T M[9];                                                                               \
        for (int a = 0; a < 3; a++)                                                           \
            for (int b = 0; b < 3; b++)                                                       \
                M[3 * a + b] = c->transpose ? R[3 * b + a] : R[3 * a + b];                    \
        const T *x = c->x + 4 * c->m * r;                                                     \
        T *y = c->y + 4 * c->m * r;                                                           \
        for (int64_t g = 0; g < c->m; g++, x += 4, y += 4) {                                  \
            T x1 = x[1], x2 = x[2], x3 = x[3];                                                \
            y[0] = x[0];                                                                      \
            y[1] = M[0] * x1 + M[1] * x2 + M[2] * x3;                                         \
            y[2] = M[3] * x1 + M[4] * x2 + M[5] * x3;                                         \
            y[3] = M[6] * x1 + M[7] * x2 + M[8] * x3;                                         \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_rotate_##SUFFIX(const T *rot, const T *x, T *y, int64_t rows, int64_t m,            \
                         int transpose, int threads) {                                        \
    rotate_ctx_##SUFFIX c = {rot, x, y, m, transpose};                                        \
    parallel_for(rows, threads, rotate_rows_##SUFFIX, &c);                                    \
}                                                                                             \
                                                                                              \
/* grot[r] = sum_g gy_v x_v^T (transpose == 0) or x_v gy_v^T (transpose != 0). */            \
typedef struct { const T *x, *gy; T *grot; int64_t m; int transpose; } rotgrad_ctx_##SUFFIX; \
                                                                                              \
static void rotate_grad_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {           \
    const rotgrad_ctx_##SUFFIX *c = (const rotgrad_ctx_##SUFFIX *)p;                          \
    for (int64_t r = begin; r < end; r++) {                                                   \
        T acc[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};                                               \
        const T *x = c->x + 4 * c->m * r, *gy = c->gy + 4 * c->m * r;                         \
        for (int64_t g = 0; g < c->m; g++, x += 4, gy += 4)                                   \
            for (int a = 0; a < 3; a++)                                                       \
                for (int b = 0; b < 3; b++)                                                   \
                    acc[3 * a + b] += gy[1 + a] * x[1 + b];                                   \
        T *out = c->grot + 9 * r;                                                             \
        for (int a = 0; a < 3; a++)                                                           \
            for (int b = 0; b < 3; b++)                                                       \
                out[3 * a + b] = c->transpose ? acc[3 * b + a] : acc[3 * a + b];              \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_rotate_grad_rot_##SUFFIX(const T *x, const T *gy, T *grot, int64_t rows, int64_t m, \
                                  int transpose, int threads) {                               \
    rotgrad_ctx_##SUFFIX c = {x, gy, grot, m, transpose};                                     \
    parallel_for(rows, threads, rotate_grad_rows_##SUFFIX, &c);                               \
}                                                                                             \
                                                                                              \
/* Per target row i and head h: e_j = scale_h <qd_ih, qs_{src_ij} h>, alpha = softmax_j(e), \
 * out_ih = sum_j alpha_j xs_{src_ij} h. */                                                   \
typedef struct {                                                                              \
    const T *qs, *qd, *scale, *xs; const int64_t *src; T *out, *alpha;                        \
    int64_t H, k, C;                                                                          \
} attend_ctx_##SUFFIX;                                                                        \
                                                                                              \
static void attend_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {                \
    const attend_ctx_##SUFFIX *c = (const attend_ctx_##SUFFIX *)p;                            \
    const int64_t H = c->H, k = c->k, C = c->C;                                               \
    for (int64_t i = begin; i < end; i++) {                                                   \
        const int64_t *src = c->src + i * k;                                                  \
        for (int64_t h = 0; h < H; h++) {                                                     \
            const T *q = c->qd + 4 * (i * H + h);                                             \
            T *a = c->alpha + (i * H + h) * k;                                                \
            T s = c->scale[h], top = -INFINITY, total = 0;                                    \
            for (int64_t j = 0; j < k; j++) {                                                 \
                const T *p2 = c->qs + 4 * (src[j] * H + h);                                   \
                a[j] = s * (q[0] * p2[0] + q[1] * p2[1] + q[2] * p2[2] + q[3] * p2[3]);       \
                if (a[j] > top) top = a[j];                                                   \
            }                                                                                 \
            for (int64_t j = 0; j < k; j++) {                                                 \
                a[j] = EXP(a[j] - top);                                                       \
                total += a[j];                                                                \
            }                                                                                 \
            for (int64_t j = 0; j < k; j++) a[j] /= total;                                    \
            T *o = c->out + (i * H + h) * C;                                                  \
            memset(o, 0, (size_t)C * sizeof(T));                                              \
            for (int64_t j = 0; j < k; j++) {                                                 \
                const T w = a[j], *xj = c->xs + (src[j] * H + h) * C;                         \
                for (int64_t f = 0; f < C; f++) o[f] += w * xj[f];                            \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_attend_##SUFFIX(const T *qs, const T *qd, const T *scale, const T *xs,             \
                         const int64_t *src, T *out, T *alpha, int64_t num_dst, int64_t H,    \
                         int64_t k, int64_t C, int threads) {                                 \
    attend_ctx_##SUFFIX c = {qs, qd, scale, xs, src, out, alpha, H, k, C};                    \
    parallel_for(num_dst, threads, attend_rows_##SUFFIX, &c);                                 \
}                                                                                             \
                                                                                              \
/* The row-local part of the backward: with g_alpha_j = <G_ih, xs_{src_ij} h> and            \
 * g_e_j = alpha_j (g_alpha_j - sum_l alpha_l g_alpha_l), g_alpha_j also holding the        \
 * gradient of alpha itself where given (grad_alpha, may be NULL):                           \
 *   g_raw[i,h,j] = scale_h g_e_j   (the gradient of the raw logit <qd_ih, qs_jh>),          \
 *   g_qd[i,h]    = sum_j g_raw_j qs_{src_ij} h,                                              \
 *   g_scale[i,h] = sum_j g_e_j <qd_ih, qs_{src_ij} h>   (summed over i by the caller). */   \
typedef struct {                                                                              \
    const T *grad, *grad_alpha, *alpha, *qs, *qd, *scale, *xs; const int64_t *src;            \
    T *g_raw, *g_qd, *g_scale; int64_t H, k, C;                                               \
} attend_back_ctx_##SUFFIX;                                                                   \
                                                                                              \
static void attend_back_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {           \
    const attend_back_ctx_##SUFFIX *c = (const attend_back_ctx_##SUFFIX *)p;                  \
    const int64_t H = c->H, k = c->k, C = c->C;                                               \
    for (int64_t i = begin; i < end; i++) {                                                   \
        const int64_t *src = c->src + i * k;                                                  \
        for (int64_t h = 0; h < H; h++) {                                                     \
            const int64_t row = i * H + h;                                                    \
            const T *g = c->grad + row * C, *a = c->alpha + row * k, *q = c->qd + 4 * row;   \
            T *gr = c->g_raw + row * k, dot = 0;                                              \
            for (int64_t j = 0; j < k; j++) {                                                 \
                const T *xj = c->xs + (src[j] * H + h) * C;                                   \
                T ga = 0;                                                                     \
                _Pragma("omp simd reduction(+:ga)")                                           \
                for (int64_t f = 0; f < C; f++) ga += g[f] * xj[f];                           \
                if (c->grad_alpha) ga += c->grad_alpha[row * k + j];                          \
                gr[j] = ga;                                                                   \
                dot += a[j] * ga;                                                             \
            }                                                                                 \
            T s = c->scale[h], gs = 0, gq[4] = {0, 0, 0, 0};                                  \
            for (int64_t j = 0; j < k; j++) {                                                 \
                const T *p2 = c->qs + 4 * (src[j] * H + h);                                   \
                const T ge = a[j] * (gr[j] - dot);                                            \
                gs += ge * (q[0] * p2[0] + q[1] * p2[1] + q[2] * p2[2] + q[3] * p2[3]);       \
                gr[j] = s * ge;                                                               \
                for (int d = 0; d < 4; d++) gq[d] += gr[j] * p2[d];                           \
            }                                                                                 \
            for (int d = 0; d < 4; d++) c->g_qd[4 * row + d] = gq[d];                         \
            c->g_scale[row] = gs;                                                             \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_attend_backward_##SUFFIX(const T *grad, const T *grad_alpha, const T *alpha,       \
                                  const T *qs, const T *qd, const T *scale, const T *xs,      \
                                  const int64_t *src, T *g_raw, T *g_qd, T *g_scale,          \
                                  int64_t num_dst, int64_t H, int64_t k, int64_t C,           \
                                  int threads) {                                              \
    attend_back_ctx_##SUFFIX c = {grad, grad_alpha, alpha, qs, qd, scale, xs, src, g_raw,    \
                                  g_qd, g_scale, H, k, C};                                    \
    parallel_for(num_dst, threads, attend_back_rows_##SUFFIX, &c);                            \
}                                                                                             \
                                                                                              \
/* Row r = (j, h) of the transposed pattern, over its entries e (the edges j -> i):       \
 *   gx[r] = sum_e alpha[gather[e]] grad[col[e]]   (A^T G; skipped when gx is NULL),        \
 *   gq[r] = sum_e g_raw[gather[e]] qd[col[e]]     (skipped when gq is NULL). */           \
typedef struct {                                                                              \
    const T *alpha, *grad, *g_raw, *qd; const int64_t *crow, *col, *gather; T *gx, *gq;      \
    int64_t C;                                                                                \
} transposed_ctx_##SUFFIX;                                                                    \
                                                                                              \
static void transposed_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {            \
    const transposed_ctx_##SUFFIX *c = (const transposed_ctx_##SUFFIX *)p;                    \
    const int64_t C = c->C;                                                                   \
    for (int64_t r = begin; r < end; r++) {                                                   \
        if (c->gx) {                                                                          \
            T *o = c->gx + r * C;                                                             \
            memset(o, 0, (size_t)C * sizeof(T));                                              \
            for (int64_t e = c->crow[r]; e < c->crow[r + 1]; e++) {                           \
                const T w = c->alpha[c->gather[e]], *g = c->grad + c->col[e] * C;            \
                for (int64_t f = 0; f < C; f++) o[f] += w * g[f];                             \
            }                                                                                 \
        }                                                                                     \
        if (c->gq) {                                                                          \
            T acc[4] = {0, 0, 0, 0};                                                          \
            for (int64_t e = c->crow[r]; e < c->crow[r + 1]; e++) {                           \
                const T w = c->g_raw[c->gather[e]], *q = c->qd + 4 * c->col[e];              \
                for (int d = 0; d < 4; d++) acc[d] += w * q[d];                               \
            }                                                                                 \
            for (int d = 0; d < 4; d++) c->gq[4 * r + d] = acc[d];                            \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_transposed_sum_##SUFFIX(const T *alpha, const T *grad, const T *g_raw, const T *qd, \
                                 const int64_t *crow, const int64_t *col,                     \
                                 const int64_t *gather, T *gx, T *gq, int64_t rows,           \
                                 int64_t C, int threads) {                                    \
    transposed_ctx_##SUFFIX c = {alpha, grad, g_raw, qd, crow, col, gather, gx, gq, C};      \
    parallel_for(rows, threads, transposed_rows_##SUFFIX, &c);                                \
}

DEFINE_KERNELS(float, f32, expf)
DEFINE_KERNELS(double, f64, exp)

/* The version of this file's interface; the loader checks it. */
int qsv_kernels_version(void) { return 3; }
