/* Native CPU kernels of QSVConv's dense path (quest_geometric.nn._qsv_native).
 *
 * Plain C on raw contiguous buffers, compiled at first use by the system C compiler and
 * loaded with ctypes (as torch.compile's CPU back-end builds its own kernels), so that a
 * fresh install needs no build step and no torch headers. Every kernel has a float and a
 * double version and splits its rows over `threads` threads: torch's OpenMP pool where the
 * compiler has OpenMP, POSIX threads otherwise (see parallel_for below). The plain PyTorch
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
/* The weighted row sums keep WSUM_BYTES of channels in registers (8 AVX registers) and take
 * up to WSUM_ROWS rows at a time; the row PREFETCH_AHEAD rows on is prefetched. */
#define WSUM_BYTES 256
#define WSUM_ROWS 64
#define PREFETCH_AHEAD 4

typedef void (*range_fn)(const void *ctx, int64_t begin, int64_t end);

#ifndef _OPENMP
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
#endif

/* fn(ctx, begin, end) over [0, n) in `threads` contiguous chunks.  Built with OpenMP, the
 * chunks run on the OpenMP pool; the library then links libgomp.so.1, which the dynamic
 * linker resolves to the copy torch has already loaded, so the kernels share torch's threads
 * (a second pool would compete with torch's spinning workers for the same cores).  Without
 * OpenMP, POSIX threads: the calling thread runs the first chunk, and a chunk whose thread
 * cannot be started runs on the calling thread. */
static void parallel_for(int64_t n, int threads, range_fn fn, const void *ctx) {
    if (n <= 0) return;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > n) threads = (int)n;
    if (threads <= 1) {
        fn(ctx, 0, n);
        return;
    }
#ifdef _OPENMP
    const int64_t chunk = (n + threads - 1) / threads;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        const int64_t b = (int64_t)t * chunk, e = b + chunk < n ? b + chunk : n;
        if (b < e) fn(ctx, b, e);
    }
#else
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
#endif
}

/* Whether the targets of rows [begin, end) are in the dense layout: dst[i k + j] == i for
 * every j < k (called per row, just before the row's attention: its k targets are read
 * once, beside its sources, instead of in a sweep of their own). */
static int targets_in_rows(const int64_t *dst, int64_t k, int64_t begin, int64_t end) {
    int64_t differ = 0;
    for (int64_t i = begin; i < end; i++) {
        const int64_t *t = dst + i * k;
        for (int64_t j = 0; j < k; j++) differ |= t[j] ^ i;
    }
    return differ == 0;
}

/* Whether the sources of rows [begin, end) (k each) are node indices in [0, num_src):
 * called per row before any of its sources is read, so an index from the caller never
 * reaches memory outside the features. */
static int sources_in_range(const int64_t *src, int64_t k, int64_t num_src, int64_t begin,
                            int64_t end) {
    uint64_t outside = 0;
    for (int64_t e = begin * k; e < end * k; e++)
        outside |= (uint64_t)src[e] >= (uint64_t)num_src;
    return outside == 0;
}

/* exp(x) of 4 floats x <= 0 (the softmax's shifted logits) in vector operations only (GCC/Clang
 * vector extensions; a scalar exp with a branch or a bit cast through memory is not
 * vectorised by GCC): x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor polynomial of
 * degree 7 (relative error below 2e-7 before rounding), 2^n from the exponent bits.  Lanes
 * below -87.3 (where the float result underflows), -inf among them, give 0; NaN stays NaN. */
typedef float qsv_v4f __attribute__((vector_size(16)));
typedef int32_t qsv_v4i __attribute__((vector_size(16)));
static inline qsv_v4f qsv_exp_v4f(qsv_v4f x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const qsv_v4i low = x < -87.3f;  /* all ones where the result underflows */
    qsv_v4f xc;
    {
        const qsv_v4f floor_value = x - x - 87.3f;
        qsv_v4i xi, fi;
        memcpy(&xi, &x, sizeof xi);
        memcpy(&fi, &floor_value, sizeof fi);
        xi = (xi & ~low) | (fi & low);
        memcpy(&xc, &xi, sizeof xc);
    }
    const qsv_v4f t = xc * log2e + 0.5f;
    qsv_v4i n = __builtin_convertvector(t, qsv_v4i);  /* truncation, then the floor: */
    n += __builtin_convertvector(n, qsv_v4f) > t;     /* -1 where it rounded up */
    const qsv_v4f nf = __builtin_convertvector(n, qsv_v4f);
    const qsv_v4f r = (xc - nf * ln2_hi) - nf * ln2_lo;
    qsv_v4f p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const qsv_v4i bits = (n + 127) << 23;
    qsv_v4f two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    qsv_v4f y = p * two_n;
    qsv_v4i yi;
    memcpy(&yi, &y, sizeof yi);
    yi &= ~low;
    memcpy(&y, &yi, sizeof y);
    return y;
}

/* exp of 4 doubles, lane by lane (libm). */
typedef double qsv_v4d __attribute__((vector_size(32)));
static inline qsv_v4d qsv_exp_v4d(qsv_v4d x) {
    for (int l = 0; l < 4; l++) x[l] = exp(x[l]);
    return x;
}

#define DEFINE_KERNELS(T, SUFFIX, VEXP)                                                       \
                                                                                              \
/* Four dot products <g, x_t> (t < 4) in one pass over g: one vector of partial sums per   \
 * row (GCC/Clang vector extensions, 32 bytes), so g is loaded once for four rows and no    \
 * single chain of dependent multiply-adds runs through all C entries. */                   \
typedef T vec_##SUFFIX __attribute__((vector_size(32)));                                     \
static inline vec_##SUFFIX load_##SUFFIX(const T *p) {                                        \
    vec_##SUFFIX v;                                                                           \
    memcpy(&v, p, sizeof v);                                                                  \
    return v;                                                                                 \
}                                                                                             \
static inline T hsum_##SUFFIX(vec_##SUFFIX v) {                                               \
    enum { W = sizeof(vec_##SUFFIX) / sizeof(T) };                                            \
    T t[W];                                                                                   \
    memcpy(t, &v, sizeof v);                                                                  \
    for (int width = W / 2; width >= 1; width /= 2)                                           \
        for (int f = 0; f < width; f++) t[f] += t[f + width];                                 \
    return t[0];                                                                              \
}                                                                                             \
static inline void dot4_##SUFFIX(const T *restrict g, const T *const *x, int64_t C,          \
                                 T *restrict out) {                                           \
    enum { W = sizeof(vec_##SUFFIX) / sizeof(T) };                                            \
    vec_##SUFFIX s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};                                      \
    int64_t f = 0;                                                                            \
    for (; f + W <= C; f += W) {                                                              \
        const vec_##SUFFIX gv = load_##SUFFIX(g + f);                                         \
        s0 += gv * load_##SUFFIX(x[0] + f);                                                   \
        s1 += gv * load_##SUFFIX(x[1] + f);                                                   \
        s2 += gv * load_##SUFFIX(x[2] + f);                                                   \
        s3 += gv * load_##SUFFIX(x[3] + f);                                                   \
    }                                                                                         \
    out[0] = hsum_##SUFFIX(s0); out[1] = hsum_##SUFFIX(s1);                                   \
    out[2] = hsum_##SUFFIX(s2); out[3] = hsum_##SUFFIX(s3);                                   \
    for (; f < C; f++)                                                                        \
        for (int t = 0; t < 4; t++) out[t] += g[f] * x[t][f];                                 \
}                                                                                             \
                                                                                              \
/* o[0:C] = sum_j w[j] rows[j][0:C] over n rows (o += ... where add), in blocks of          \
 * WSUM_BYTES of channels whose sums stay in registers across the n rows (one store per     \
 * block instead of one per row), the rows of the next neighbours prefetched. */            \
static inline void wsum_##SUFFIX(T *restrict o, const T *restrict w,                         \
                                 const T *restrict const *rows, int64_t n, int64_t C,        \
                                 int add) {                                                   \
    enum { B = WSUM_BYTES / sizeof(T) };                                                      \
    int64_t f0 = 0;                                                                           \
    for (; f0 + B <= C; f0 += B) {                                                            \
        T acc[B];                                                                             \
        for (int f = 0; f < B; f++) acc[f] = add ? o[f0 + f] : 0;                             \
        for (int64_t j = 0; j < n; j++) {                                                     \
            const T wj = w[j], *restrict r = rows[j] + f0;                                    \
            if (j + PREFETCH_AHEAD < n) __builtin_prefetch(rows[j + PREFETCH_AHEAD] + f0);    \
            for (int f = 0; f < B; f++) acc[f] += wj * r[f];                                  \
        }                                                                                     \
        for (int f = 0; f < B; f++) o[f0 + f] = acc[f];                                       \
    }                                                                                         \
    if (f0 < C) {                                                                             \
        const int64_t rest = C - f0;                                                          \
        T acc[B];                                                                             \
        for (int64_t f = 0; f < rest; f++) acc[f] = add ? o[f0 + f] : 0;                      \
        for (int64_t j = 0; j < n; j++) {                                                     \
            const T wj = w[j], *restrict r = rows[j] + f0;                                    \
            for (int64_t f = 0; f < rest; f++) acc[f] += wj * r[f];                           \
        }                                                                                     \
        for (int64_t f = 0; f < rest; f++) o[f0 + f] = acc[f];                                \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* One row of m quaternions: y_g = P x_g (+ b_g), P = diag(1, M), M = R or R^T, as the sum  \
 * of P's four columns scaled by x_g's four entries (4-wide vectors: four multiply-adds per \
 * quaternion instead of nine scalar ones and three shuffles of scalars). y may be x. */     \
typedef T vec4_##SUFFIX __attribute__((vector_size(4 * sizeof(T))));                         \
static inline void rotate_row_##SUFFIX(const T *R, int transpose, const T *x, T *y,         \
                                       const T *b, int64_t m) {                              \
    vec4_##SUFFIX c1, c2, c3;                                                                 \
    if (transpose) {  /* column b of R^T is row b of R */                                     \
        c1 = (vec4_##SUFFIX){0, R[0], R[1], R[2]};                                            \
        c2 = (vec4_##SUFFIX){0, R[3], R[4], R[5]};                                            \
        c3 = (vec4_##SUFFIX){0, R[6], R[7], R[8]};                                            \
    } else {                                                                                  \
        c1 = (vec4_##SUFFIX){0, R[0], R[3], R[6]};                                            \
        c2 = (vec4_##SUFFIX){0, R[1], R[4], R[7]};                                            \
        c3 = (vec4_##SUFFIX){0, R[2], R[5], R[8]};                                            \
    }                                                                                         \
    const vec4_##SUFFIX c0 = {1, 0, 0, 0};                                                    \
    if (b) {                                                                                  \
        for (int64_t g = 0; g < m; g++) {                                                     \
            const T x0 = x[4 * g], x1 = x[4 * g + 1], x2 = x[4 * g + 2], x3 = x[4 * g + 3];   \
            vec4_##SUFFIX bv;                                                                 \
            memcpy(&bv, b + 4 * g, sizeof bv);                                                \
            const vec4_##SUFFIX v = bv + c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3;               \
            memcpy(y + 4 * g, &v, sizeof v);                                                  \
        }                                                                                     \
    } else {                                                                                  \
        for (int64_t g = 0; g < m; g++) {                                                     \
            const T x0 = x[4 * g], x1 = x[4 * g + 1], x2 = x[4 * g + 2], x3 = x[4 * g + 3];   \
            const vec4_##SUFFIX v = c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3;                    \
            memcpy(y + 4 * g, &v, sizeof v);                                                  \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static inline vec4_##SUFFIX load4_##SUFFIX(const T *p) {                                     \
    vec4_##SUFFIX v;                                                                          \
    memcpy(&v, p, sizeof v);                                                                  \
    return v;                                                                                 \
}                                                                                             \
/* a[0:k] = softmax(a) given top = max(a), four at a time (VEXP), the last, partial vector \
 * padded with -inf lanes (exp 0); one division.  Every pass over a reads and writes it in  \
 * the 4-wide vectors logits_ stores (a wider load across two narrower stores            \
 * cannot be forwarded from them and waits for both to reach the cache). */               \
static inline void softmax_##SUFFIX(T *restrict a, int64_t k, T top) {                      \
    enum { W = 4 };                                                                           \
    vec4_##SUFFIX total = {0};                                                                \
    int64_t j = 0;                                                                            \
    for (; j + W <= k; j += W) {                                                              \
        const vec4_##SUFFIX v = VEXP(load4_##SUFFIX(a + j) - top);                            \
        memcpy(a + j, &v, sizeof v);                                                          \
        total += v;                                                                           \
    }                                                                                         \
    if (j < k) {  /* built in registers from the entries (stored one by one) */              \
        const T pad = -INFINITY;                                                              \
        const vec4_##SUFFIX v = VEXP((vec4_##SUFFIX){a[j] - top,                              \
                                                     j + 1 < k ? a[j + 1] - top : pad,        \
                                                     j + 2 < k ? a[j + 2] - top : pad, pad}); \
        total += v;                                                                           \
        for (int l = 0; j + l < k; l++) a[j + l] = v[l];                                      \
    }                                                                                         \
    const T inv = 1 / ((total[0] + total[1]) + (total[2] + total[3]));                        \
    for (j = 0; j + W <= k; j += W) {                                                         \
        const vec4_##SUFFIX v = load4_##SUFFIX(a + j) * inv;                                  \
        memcpy(a + j, &v, sizeof v);                                                          \
    }                                                                                         \
    for (; j < k; j++) a[j] *= inv;                                                           \
}                                                                                             \
                                                                                              \
/* a[j] = s <q, p_j> for the k sources p_j = qs[src[j] * stride] of one row, and their     \
 * maximum: four sources at a time, their four products summed across by shuffles (two     \
 * rounds of pairwise sums) into one vector of four logits, s folded into q. */              \
static inline T logits_##SUFFIX(const T *q, const T *qs, int64_t stride,                    \
                                const int64_t *restrict src, T s, int64_t k, T *restrict a) { \
    vec4_##SUFFIX qv;                                                                         \
    memcpy(&qv, q, sizeof qv);                                                                \
    qv *= s;                                                                                  \
    T top = -INFINITY;                                                                        \
    int64_t j = 0;                                                                            \
    for (; j + 4 <= k; j += 4) {                                                              \
        vec4_##SUFFIX m0, m1, m2, m3;                                                         \
        memcpy(&m0, qs + src[j] * stride, sizeof m0);                                         \
        memcpy(&m1, qs + src[j + 1] * stride, sizeof m1);                                     \
        memcpy(&m2, qs + src[j + 2] * stride, sizeof m2);                                     \
        memcpy(&m3, qs + src[j + 3] * stride, sizeof m3);                                     \
        m0 *= qv; m1 *= qv; m2 *= qv; m3 *= qv;                                               \
        const vec4_##SUFFIX u = (vec4_##SUFFIX){m0[0], m0[2], m1[0], m1[2]}                   \
                              + (vec4_##SUFFIX){m0[1], m0[3], m1[1], m1[3]};                  \
        const vec4_##SUFFIX v = (vec4_##SUFFIX){m2[0], m2[2], m3[0], m3[2]}                   \
                              + (vec4_##SUFFIX){m2[1], m2[3], m3[1], m3[3]};                  \
        const vec4_##SUFFIX r = (vec4_##SUFFIX){u[0], u[2], v[0], v[2]}                       \
                              + (vec4_##SUFFIX){u[1], u[3], v[1], v[3]};                      \
        memcpy(a + j, &r, sizeof r);                                                          \
        for (int l = 0; l < 4; l++) top = r[l] > top ? r[l] : top;                           \
    }                                                                                         \
    for (; j < k; j++) {                                                                      \
        vec4_##SUFFIX m;                                                                      \
        memcpy(&m, qs + src[j] * stride, sizeof m);                                           \
        m *= qv;                                                                              \
        a[j] = (m[0] + m[1]) + (m[2] + m[3]);                                                 \
        top = a[j] > top ? a[j] : top;                                                        \
    }                                                                                         \
    return top;                                                                               \
}                                                                                             \
                                                                                              \
/* y = (x_0, M x_v) + b per quaternion, M = R (transpose == 0) or R^T (transpose != 0), b  \
 * the bias [H, m, 4] of row r's head r % H (none when bias is NULL). */                      \
typedef struct {                                                                              \
    const T *rot, *x, *bias; T *y; int64_t m, H; int transpose;                               \
} rotate_ctx_##SUFFIX;                                                                        \
                                                                                              \
static void rotate_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {                \
    const rotate_ctx_##SUFFIX *c = (const rotate_ctx_##SUFFIX *)p;                            \
    for (int64_t r = begin; r < end; r++)                                                     \
        rotate_row_##SUFFIX(c->rot + 9 * r, c->transpose, c->x + 4 * c->m * r,                \
                            c->y + 4 * c->m * r,                                              \
                            c->bias ? c->bias + 4 * c->m * (r % c->H) : NULL, c->m);          \
}                                                                                             \
                                                                                              \
void qsv_rotate_##SUFFIX(const T *rot, const T *x, const T *bias, T *y, int64_t rows,        \
                         int64_t m, int64_t H, int transpose, int threads) {                  \
    rotate_ctx_##SUFFIX c = {rot, x, bias, y, m, H, transpose};                               \
    parallel_for(rows, threads, rotate_rows_##SUFFIX, &c);                                    \
}                                                                                             \
                                                                                              \
/* R = R(q) of q = (w, x, y, z), row-major: the matrix of v -> q (0, v) q^*. */              \
static inline void matrix_of_##SUFFIX(T w, T x, T y, T z, T *R) {                             \
    const T ww = w * w, xx = x * x, yy = y * y, zz = z * z;                                   \
    R[0] = ww + xx - yy - zz; R[1] = 2 * (x * y - w * z); R[2] = 2 * (x * z + w * y);         \
    R[3] = 2 * (x * y + w * z); R[4] = ww - xx + yy - zz; R[5] = 2 * (y * z - w * x);         \
    R[6] = 2 * (x * z - w * y); R[7] = 2 * (y * z + w * x); R[8] = ww - xx - yy + zz;         \
}                                                                                             \
                                                                                              \
/* rot[r] = R(q_r), the matrix of v -> q (0, v) q^* (quaternion.to_rotation_matrix); with  \
 * grot given (backward) gq[r] = sum_ab grot_ab dR_ab / dq instead. */                        \
typedef struct { const T *q, *grot; T *out; } rotmat_ctx_##SUFFIX;                            \
                                                                                              \
static void rotmat_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {                \
    const rotmat_ctx_##SUFFIX *c = (const rotmat_ctx_##SUFFIX *)p;                            \
    for (int64_t r = begin; r < end; r++) {                                                   \
        const T w = c->q[4 * r], x = c->q[4 * r + 1], y = c->q[4 * r + 2],                    \
                z = c->q[4 * r + 3];                                                          \
        if (!c->grot) {                                                                       \
            matrix_of_##SUFFIX(w, x, y, z, c->out + 9 * r);                                   \
        } else {                                                                              \
            const T *G = c->grot + 9 * r;                                                     \
            T *g = c->out + 4 * r;                                                            \
            g[0] = 2 * (w * (G[0] + G[4] + G[8]) + x * (G[7] - G[5]) + y * (G[2] - G[6])      \
                        + z * (G[3] - G[1]));                                                 \
            g[1] = 2 * (w * (G[7] - G[5]) + x * (G[0] - G[4] - G[8]) + y * (G[1] + G[3])      \
                        + z * (G[2] + G[6]));                                                 \
            g[2] = 2 * (w * (G[2] - G[6]) + x * (G[1] + G[3]) + y * (G[4] - G[0] - G[8])      \
                        + z * (G[5] + G[7]));                                                 \
            g[3] = 2 * (w * (G[3] - G[1]) + x * (G[2] + G[6]) + y * (G[5] + G[7])             \
                        + z * (G[8] - G[0] - G[4]));                                          \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_rotation_matrix_##SUFFIX(const T *q, const T *grot, T *out, int64_t rows,          \
                                  int threads) {                                              \
    rotmat_ctx_##SUFFIX c = {q, grot, out};                                                   \
    parallel_for(rows, threads, rotmat_rows_##SUFFIX, &c);                                    \
}                                                                                             \
                                                                                              \
/* The layer's prologue in one pass over each row x_r ([H * C] channels, C = 4 m per head):  \
 * per head h, q = W_h x_r + b_h (the 4 rows 4h..4h+3 of W [4H, Cin], nn.Linear's layout),  \
 * q <- q / max(|q|, eps), R = R(q), and xs_rh = (x_0, R x_v) per quaternion of the head's   \
 * channels: q [N, H, 4], rot [N, H, 9] and xs [N, H * C] out. */                            \
typedef struct {                                                                              \
    const T *x, *w, *b; T *q, *rot, *xs; int64_t H, C, Cin; T eps;                            \
} prepare_ctx_##SUFFIX;                                                                       \
                                                                                              \
static void prepare_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {               \
    const prepare_ctx_##SUFFIX *c = (const prepare_ctx_##SUFFIX *)p;                          \
    const int64_t H = c->H, C = c->C, Cin = c->Cin;                                           \
    for (int64_t r = begin; r < end; r++) {                                                   \
        const T *xr = c->x + r * Cin;                                                         \
        for (int64_t h = 0; h < H; h++) {                                                     \
            const T *rows[4] = {c->w + (4 * h) * Cin, c->w + (4 * h + 1) * Cin,                \
                                c->w + (4 * h + 2) * Cin, c->w + (4 * h + 3) * Cin};           \
            T d[4];                                                                           \
            dot4_##SUFFIX(xr, rows, Cin, d);                                                  \
            T w = d[0] + c->b[4 * h], x = d[1] + c->b[4 * h + 1],                             \
              y = d[2] + c->b[4 * h + 2], z = d[3] + c->b[4 * h + 3];                         \
            T norm = sqrt(w * w + x * x + y * y + z * z);                                     \
            const T inv = 1 / (norm > c->eps ? norm : c->eps);                                \
            w *= inv; x *= inv; y *= inv; z *= inv;                                           \
            T *q = c->q + 4 * (r * H + h);                                                    \
            q[0] = w; q[1] = x; q[2] = y; q[3] = z;                                           \
            T *R = c->rot + 9 * (r * H + h);                                                  \
            matrix_of_##SUFFIX(w, x, y, z, R);                                                \
            rotate_row_##SUFFIX(R, 0, xr + h * C, c->xs + r * Cin + h * C, NULL, C / 4);      \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_prepare_##SUFFIX(const T *x, const T *w, const T *b, T *q, T *rot, T *xs,          \
                          int64_t rows, int64_t H, int64_t C, double eps, int threads) {      \
    prepare_ctx_##SUFFIX c = {x, w, b, q, rot, xs, H, C, H * C, (T)eps};                      \
    parallel_for(rows, threads, prepare_rows_##SUFFIX, &c);                                   \
}                                                                                             \
                                                                                              \
/* The backward of y = (x_0, M x_v), M = R or R^T, in one pass over x and gy (either output \
 * may be NULL): gx = (gy_0, M^T gy_v) and grot[r] = sum_g gy_v x_v^T (transpose == 0) or   \
 * x_v gy_v^T (transpose != 0). */                                                           \
typedef struct {                                                                              \
    const T *rot, *x, *gy; T *grot, *gx; int64_t m; int transpose;                            \
} rotback_ctx_##SUFFIX;                                                                       \
                                                                                              \
static void rotate_back_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {           \
    const rotback_ctx_##SUFFIX *c = (const rotback_ctx_##SUFFIX *)p;                          \
    for (int64_t r = begin; r < end; r++) {                                                   \
        const T *R = c->rot + 9 * r;                                                          \
        T Mt[9];  /* M^T: R^T, or R when the forward applied R^T */                           \
        for (int a = 0; a < 3; a++)                                                           \
            for (int b = 0; b < 3; b++)                                                       \
                Mt[3 * a + b] = c->transpose ? R[3 * a + b] : R[3 * b + a];                   \
        T acc[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};                                               \
        const T *restrict x = c->x + 4 * c->m * r, *restrict gy = c->gy + 4 * c->m * r;       \
        T *restrict gx = c->gx ? c->gx + 4 * c->m * r : NULL;                                 \
        for (int64_t g = 0; g < c->m; g++, x += 4, gy += 4) {                                 \
            const T g1 = gy[1], g2 = gy[2], g3 = gy[3];                                       \
            if (gx) {                                                                         \
                gx[0] = gy[0];                                                                \
                gx[1] = Mt[0] * g1 + Mt[1] * g2 + Mt[2] * g3;                                 \
                gx[2] = Mt[3] * g1 + Mt[4] * g2 + Mt[5] * g3;                                 \
                gx[3] = Mt[6] * g1 + Mt[7] * g2 + Mt[8] * g3;                                 \
                gx += 4;                                                                      \
            }                                                                                 \
            if (c->grot)                                                                      \
                for (int a = 0; a < 3; a++)                                                   \
                    for (int b = 0; b < 3; b++)                                               \
                        acc[3 * a + b] += gy[1 + a] * x[1 + b];                               \
        }                                                                                     \
        if (c->grot) {                                                                        \
            T *out = c->grot + 9 * r;                                                         \
            for (int a = 0; a < 3; a++)                                                       \
                for (int b = 0; b < 3; b++)                                                   \
                    out[3 * a + b] = c->transpose ? acc[3 * b + a] : acc[3 * a + b];          \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
void qsv_rotate_backward_##SUFFIX(const T *rot, const T *x, const T *gy, T *grot, T *gx,     \
                                  int64_t rows, int64_t m, int transpose, int threads) {      \
    rotback_ctx_##SUFFIX c = {rot, x, gy, grot, gx, m, transpose};                            \
    parallel_for(rows, threads, rotate_back_rows_##SUFFIX, &c);                               \
}                                                                                             \
                                                                                              \
/* Per target row i and head h: e_j = scale_h <qd_ih, qs_{src_ij} h>, alpha = softmax_j(e),   \
 * out_ih = sum_j alpha_j xs_{src_ij} h.  The flags of *bad (OR-ed in): 2, a source of a row  \
 * is outside [0, num_src) (checked before the row reads any); 1, where dst is not NULL, a    \
 * row's targets are not in the dense layout (targets_in_rows); after either the thread       \
 * stops and the caller discards the result.  4, with the epilogue (rot not NULL), a          \
 * finished output entry is NaN or infinite: the caller's check of the output, made on the    \
 * rows while they are in the cache. */                                                       \
typedef struct {                                                                              \
    const T *qs, *qd, *scale, *xs; const int64_t *src; T *out, *alpha;                        \
    int64_t H, k, C; const T *rot, *bias; const int64_t *dst; int *bad; int64_t num_src;      \
} attend_ctx_##SUFFIX;                                                                        \
                                                                                              \
static void attend_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {                 \
    const attend_ctx_##SUFFIX *c = (const attend_ctx_##SUFFIX *)p;                            \
    const int64_t H = c->H, k = c->k, C = c->C;                                               \
    int nonfinite = 0;                                                                        \
    for (int64_t i = begin; i < end; i++) {                                                   \
        const int64_t *src = c->src + i * k;                                                  \
        if (!sources_in_range(c->src, k, c->num_src, i, i + 1)) {                             \
            __atomic_fetch_or(c->bad, 2, __ATOMIC_RELAXED);                                   \
            return;                                                                           \
        }                                                                                     \
        if (c->dst && !targets_in_rows(c->dst, k, i, i + 1)) {                                \
            __atomic_fetch_or(c->bad, 1, __ATOMIC_RELAXED);                                   \
            return;                                                                           \
        }                                                                                     \
        for (int64_t h = 0; h < H; h++) {                                                     \
            T *a = c->alpha + (i * H + h) * k;                                                \
            softmax_##SUFFIX(a, k, logits_##SUFFIX(c->qd + 4 * (i * H + h), c->qs + 4 * h,    \
                                                   4 * H, src, c->scale[h], k, a));           \
            for (int64_t j0 = 0; j0 < k; j0 += WSUM_ROWS) {                                   \
                const int64_t n = k - j0 < WSUM_ROWS ? k - j0 : WSUM_ROWS;                    \
                const T *rows[WSUM_ROWS];                                                     \
                for (int64_t j = 0; j < n; j++) rows[j] = c->xs + (src[j0 + j] * H + h) * C;  \
                wsum_##SUFFIX(c->out + (i * H + h) * C, a + j0, rows, n, C, j0 > 0);          \
            }                                                                                 \
            if (c->rot) {  /* the epilogue: o <- (o_0, R^T o_v) + b on the row in L1 */       \
                T *y = c->out + (i * H + h) * C;                                              \
                rotate_row_##SUFFIX(c->rot + 9 * (i * H + h), 1, y, y,                        \
                                    c->bias ? c->bias + h * C : NULL, C / 4);                 \
                for (int64_t e = 0; e < C; e++) nonfinite |= !(y[e] - y[e] == 0);             \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    if (nonfinite) __atomic_fetch_or(c->bad, 4, __ATOMIC_RELAXED);                            \
}                                                                                             \
                                                                                              \
void qsv_attend_##SUFFIX(const T *qs, const T *qd, const T *scale, const T *xs,             \
                         const int64_t *src, const int64_t *dst, int *bad, T *out, T *alpha,  \
                         int64_t num_src, int64_t num_dst, int64_t H, int64_t k, int64_t C,   \
                         int threads) {                                                       \
    attend_ctx_##SUFFIX c = {qs, qd, scale, xs, src, out, alpha, H, k, C, NULL, NULL,         \
                             dst, bad, num_src};                                              \
    parallel_for(num_dst, threads, attend_rows_##SUFFIX, &c);                                 \
}                                                                                             \
                                                                                              \
/* qsv_attend followed by the layer's output rotation in the same pass: each finished row   \
 * y_ih (C = 4 m channels) becomes (y_0, R_ih^T y_v) per quaternion, plus the bias [H, C]   \
 * of head h where bias is not NULL (rot [num_dst * H, 9]). */                               \
void qsv_attend_rotate_##SUFFIX(const T *qs, const T *qd, const T *scale, const T *xs,      \
                                const int64_t *src, const int64_t *dst, int *bad,            \
                                const T *rot, const T *bias, T *out, T *alpha,               \
                                int64_t num_src, int64_t num_dst, int64_t H, int64_t k,      \
                                int64_t C, int threads) {                                     \
    attend_ctx_##SUFFIX c = {qs, qd, scale, xs, src, out, alpha, H, k, C, rot, bias, dst,     \
                             bad, num_src};                                                   \
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
    T *g_raw, *g_qd, *g_scale; int64_t H, k, C, num_src; int *bad;                            \
} attend_back_ctx_##SUFFIX;                                                                   \
                                                                                              \
static void attend_back_rows_##SUFFIX(const void *p, int64_t begin, int64_t end) {           \
    const attend_back_ctx_##SUFFIX *c = (const attend_back_ctx_##SUFFIX *)p;                  \
    const int64_t H = c->H, k = c->k, C = c->C;                                               \
    for (int64_t i = begin; i < end; i++) {                                                   \
        const int64_t *src = c->src + i * k;                                                  \
        if (!sources_in_range(c->src, k, c->num_src, i, i + 1)) {                             \
            __atomic_fetch_or(c->bad, 2, __ATOMIC_RELAXED);                                   \
            return;                                                                           \
        }                                                                                     \
        for (int64_t h = 0; h < H; h++) {                                                     \
            const int64_t row = i * H + h;                                                    \
            const T *g = c->grad + row * C, *a = c->alpha + row * k, *q = c->qd + 4 * row;   \
            T *gr = c->g_raw + row * k, dot = 0;                                              \
            for (int64_t j0 = 0; j0 < k; j0 += 4) {                                           \
                const T *xj[4];                                                               \
                T ga[4];                                                                      \
                const int64_t n = k - j0 < 4 ? k - j0 : 4;                                    \
                for (int t = 0; t < 4; t++)  /* a short block repeats its last row */          \
                    xj[t] = c->xs + (src[j0 + (t < n ? t : n - 1)] * H + h) * C;              \
                dot4_##SUFFIX(g, xj, C, ga);                                                  \
                for (int64_t t = 0; t < n; t++) {                                             \
                    const int64_t j = j0 + t;                                                 \
                    if (c->grad_alpha) ga[t] += c->grad_alpha[row * k + j];                   \
                    gr[j] = ga[t];                                                            \
                    dot += a[j] * ga[t];                                                      \
                }                                                                             \
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
                                  const int64_t *src, int *bad, T *g_raw, T *g_qd,            \
                                  T *g_scale, int64_t num_src, int64_t num_dst, int64_t H,    \
                                  int64_t k, int64_t C, int threads) {                        \
    attend_back_ctx_##SUFFIX c = {grad, grad_alpha, alpha, qs, qd, scale, xs, src, g_raw,    \
                                  g_qd, g_scale, H, k, C, num_src, bad};                      \
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
            for (int64_t e0 = c->crow[r]; e0 < c->crow[r + 1]; e0 += WSUM_ROWS) {            \
                const int64_t left = c->crow[r + 1] - e0;                                     \
                const int64_t n = left < WSUM_ROWS ? left : WSUM_ROWS;                        \
                const T *rows[WSUM_ROWS];                                                     \
                T w[WSUM_ROWS];                                                               \
                for (int64_t e = 0; e < n; e++) {                                             \
                    w[e] = c->alpha[c->gather[e0 + e]];                                       \
                    rows[e] = c->grad + c->col[e0 + e] * C;                                   \
                }                                                                             \
                wsum_##SUFFIX(o, w, rows, n, C, e0 > c->crow[r]);                             \
            }                                                                                 \
            if (c->crow[r] == c->crow[r + 1]) memset(o, 0, (size_t)C * sizeof(T));            \
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

DEFINE_KERNELS(float, f32, qsv_exp_v4f)
DEFINE_KERNELS(double, f64, qsv_exp_v4d)

/* 1 when the kernels run on the OpenMP pool, 0 on POSIX threads. */
int qsv_kernels_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* The version of this file's interface; the loader checks it. */
int qsv_kernels_version(void) { return 14; }
