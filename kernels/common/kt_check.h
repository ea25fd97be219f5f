/* kt_check.h — how an output is compared with its float64 reference, written once for the
 * GPU check kernel (tuner/check.cu) and the CPU compare (tuner/measure.c, kt_check_host),
 * so both apply the same rule to the same bits. Valid C and CUDA C++ (NVRTC, no headers).
 *
 * The unit of a check is an element (REL_L2, EXACT) or a row of set_len elements (SET).
 * A unit fails when it holds the poison (unwritten: NaN for the float types, INT32_MIN for
 * i32), a NaN on either side, an infinity on either side not matched by the same infinity,
 * a value unequal to the reference (EXACT), or a row that is not its reference row as a
 * multiset (SET). REL_L2 sums only finite pairs. */
#ifndef KT_CHECK_H
#define KT_CHECK_H

#ifdef __CUDACC__
#define KT_CHECK_FN static __device__ __forceinline__
#else
#define KT_CHECK_FN static inline
#endif

/* kt_dtype's and kt_compare's values (runtime/kt.h). */
enum { KT_CHECK_E4M3, KT_CHECK_BF16, KT_CHECK_F32, KT_CHECK_I32, KT_CHECK_U8 };
enum { KT_CHECK_REL_L2, KT_CHECK_EXACT, KT_CHECK_SET };
#define KT_CHECK_POISON_I32 (-2147483647 - 1)

/* One output tensor's sums (the GPU writes them, the host reads them: one layout). */
typedef struct kt_check_sums {
    double diff2;                 /* sum of (out - ref)^2 over the finite pairs */
    double ref2;                  /* sum of ref^2 over the same pairs */
    unsigned long long bad;       /* units that fail */
    unsigned long long bad_rank;  /* n - the index of the first failing unit's first element; 0 if none */
    unsigned long long unwritten; /* elements still holding the poison */
} kt_check_sums;

typedef union kt_check_bits {
    double d;
    unsigned long long u;
} kt_check_bits;

/* 2^e as a double, e in the normal range. */
KT_CHECK_FN double kt_check_pow2(int e) {
    kt_check_bits b;
    b.u = (unsigned long long)(e + 1023) << 52;
    return b.d;
}

/* Element i of out (dtype) as a double, exactly; *poison set when it is the poison. */
KT_CHECK_FN double kt_check_load(const void *out, int dtype, unsigned long long i, int *poison) {
    kt_check_bits nan;
    nan.u = 0x7ff8000000000000ULL;
    *poison = 0;
    if (dtype == KT_CHECK_E4M3) {
        unsigned c = ((const unsigned char *)out)[i];
        int e = (c >> 3) & 15, m = c & 7;
        if ((c & 0x7f) == 0x7f) return *poison = 1, nan.d;
        double v = e ? (1.0 + m / 8.0) * kt_check_pow2(e - 7) : m / 8.0 * kt_check_pow2(-6);
        return c & 0x80 ? -v : v;
    }
    if (dtype == KT_CHECK_BF16 || dtype == KT_CHECK_F32) {
        union {
            unsigned u;
            float f;
        } f;
        f.u = dtype == KT_CHECK_F32 ? ((const unsigned *)out)[i] : (unsigned)((const unsigned short *)out)[i] << 16;
        if ((f.u & 0x7fffffffu) > 0x7f800000u) *poison = 1;
        return f.f;
    }
    if (dtype == KT_CHECK_I32) {
        int v = ((const int *)out)[i];
        *poison = v == KT_CHECK_POISON_I32;
        return v;
    }
    return ((const unsigned char *)out)[i];
}

KT_CHECK_FN int kt_check_is_inf(double x) { return x == x && x - x != x - x; }

/* A 64-bit mix of x's value (+0 and -0 the same), two independent ones by salt: a row's
 * multiset is compared by the sums of both over its elements. */
KT_CHECK_FN unsigned long long kt_check_mix(double x, unsigned long long salt) {
    kt_check_bits b;
    b.d = x == 0 ? 0.0 : x;
    unsigned long long z = b.u ^ salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Checks unit u of out[n] against ref[n] into s (bad_rank as the largest, so that adding
 * units in any order gives the same sums). */
KT_CHECK_FN void kt_check_unit(const void *out, int dtype, const double *ref, unsigned long long n, int compare,
                               unsigned long long set_len, unsigned long long u, kt_check_sums *s) {
    int bad = 0, poison;
    unsigned long long first = u;
    if (compare == KT_CHECK_SET) {
        unsigned long long h1 = 0, h2 = 0;
        first = u * set_len;
        for (unsigned long long i = first; i < first + set_len && i < n; i++) {
            double o = kt_check_load(out, dtype, i, &poison), r = ref[i];
            s->unwritten += (unsigned long long)poison;
            if (poison || o != o || r != r) bad = 1;
            h1 += kt_check_mix(o, 0) - kt_check_mix(r, 0);
            h2 += kt_check_mix(o, 0x9e3779b97f4a7c15ULL) - kt_check_mix(r, 0x9e3779b97f4a7c15ULL);
            if (r == r && !kt_check_is_inf(r)) s->ref2 += r * r;
        }
        if (h1 || h2) bad = 1;
    } else {
        double o = kt_check_load(out, dtype, u, &poison), r = ref[u];
        s->unwritten += (unsigned long long)poison;
        if (poison || o != o || r != r)
            bad = 1;
        else if (kt_check_is_inf(o) || kt_check_is_inf(r))
            bad = o != r;
        else {
            s->diff2 += (o - r) * (o - r);
            s->ref2 += r * r;
            bad = compare == KT_CHECK_EXACT && o != r;
        }
    }
    if (!bad) return;
    s->bad++;
    if (n - first > s->bad_rank) s->bad_rank = n - first;
}

/* Units of an output of n elements: elements, or rows for SET. */
KT_CHECK_FN unsigned long long kt_check_units(unsigned long long n, int compare, unsigned long long set_len) {
    return compare == KT_CHECK_SET && set_len ? (n + set_len - 1) / set_len : n;
}

#endif
