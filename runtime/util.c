/* util.c — the small shared pieces of libkt: the thread's error message and the message the
 * status checkers behind KT_CHECK write (each checker lives beside its API; util calls no
 * API), hashing (xxHash), atomic file writes, a seeded generator, and the fp8 e4m3 / bf16
 * conversions the references and input generators use. */
#include "kt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static _Thread_local char error_text[2048];

const char *kt_error(void) { return error_text; }

int kt_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return -1;
}

int kt_status_fail(const char *api, const char *msg, int status, const char *call, const char *file, int line) {
    return kt_fail("%s:%d: %s: %s error %d: %s", file, line, call, api, status, msg);
}

uint64_t kt_hash(const void *data, size_t len, uint64_t seed) { return XXH3_64bits_withSeed(data, len, seed); }

void kt_hex64(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }

int kt_mkdirs(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof buf) return kt_fail("path too long: %s", path);
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return kt_fail("mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return kt_fail("mkdir %s: %s", buf, strerror(errno));
    return 0;
}

int kt_write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return kt_fail("cannot write %s: %s", tmp, strerror(errno));
    size_t wrote = fwrite(data, 1, len, f);
    int bad = wrote != len || fflush(f) || fsync(fileno(f));
    if (fclose(f) || bad) {
        unlink(tmp);
        return kt_fail("cannot write %s: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path)) {
        unlink(tmp);
        return kt_fail("cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    return 0;
}

char *kt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        kt_fail("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        kt_fail("cannot read %s", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

double kt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t kt_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float kt_rng_uniform(uint64_t *state) {
    return (float)((double)(kt_rng_next(state) >> 40) / (double)(1ull << 23) - 1.0);
}

void *kt_grow(void *array, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return array;
    size_t more = *cap ? 2 * *cap : 64;
    void *grown = realloc(array, more * size);
    if (!grown) {
        kt_fail("out of memory");
        return NULL;
    }
    *cap = more;
    return grown;
}

int kt_parse_long(const char *s, long lo, long hi, long *out) {
    /* strtol alone accepts leading blanks and a sign, wraps nothing but saturates on
     * overflow (errno), and stops at the first non-digit: each is checked here. */
    if (!s || !*s) return kt_fail("empty number (expected an integer from %ld to %ld)", lo, hi);
    if (!(s[0] >= '0' && s[0] <= '9') && !(s[0] == '-' && s[1] >= '0' && s[1] <= '9'))
        return kt_fail("'%s' is not an integer", s);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end) return kt_fail("'%s' is not an integer", s);
    if (errno == ERANGE || v < lo || v > hi) return kt_fail("%s is out of range (%ld to %ld)", s, lo, hi);
    *out = v;
    return 0;
}

int kt_parse_int_list(const char *s, long *out, int max) {
    if (!s || !*s) return kt_fail("empty integer list: expected e.g. 1,16,64");
    int n = 0;
    for (const char *p = s;; p++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (!len) return kt_fail("bad integer list '%s': an empty element (expected e.g. 1,16,64)", s);
        if (len >= sizeof item) return kt_fail("bad integer list '%s': '%.*s' is out of range", s, (int)len, p);
        memcpy(item, p, len);
        item[len] = 0;
        if (n == max) return kt_fail("integer list '%s' has more than %d values", s, max);
        if (kt_parse_long(item, 1, KT_MAX_INT_VALUE, &out[n])) {
            char why[2048];
            snprintf(why, sizeof why, "%s", kt_error()); /* kt_fail writes over kt_error() */
            return kt_fail("bad integer list '%s': %s", s, why);
        }
        n++;
        if (!comma) return n;
        p = comma;
    }
}

float kt_e4m3_to_float(uint8_t code) {
    int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
    if (exp == 15 && man == 7) return NAN;
    float v = exp ? ldexpf(1.0f + man / 8.0f, exp - 7) : ldexpf(man / 8.0f, -6);
    return sign ? -v : v;
}

uint8_t kt_float_to_e4m3(float x) {
    if (isnan(x)) return 0x7f;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a >= 448.0f) return sign | 0x7e;
    /* Subnormal codes are the multiples of 2^-9 (a * 512 is exact; round half to even). */
    if (a < 0x1p-6f) return sign | (uint8_t)nearbyintf(a * 512.0f);
    /* Normal: round the 23-bit mantissa to 3 bits, ties to even (a carry moves the exponent
     * up), then rebias the exponent from 127 to 7. */
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    u += 0x7ffffu + ((u >> 20) & 1u);
    return sign | (uint8_t)((u >> 20) - ((127u - 7u) << 3));
}

float kt_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t kt_float_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

size_t kt_dtype_size(kt_dtype t) {
    static const size_t size[] = {[KT_E4M3] = 1, [KT_BF16] = 2, [KT_F32] = 4, [KT_I32] = 4, [KT_U8] = 1};
    return size[t];
}

const char *kt_dtype_name(kt_dtype t) {
    static const char *name[] = {
        [KT_E4M3] = "e4m3", [KT_BF16] = "bf16", [KT_F32] = "f32", [KT_I32] = "i32", [KT_U8] = "u8"};
    return name[t];
}

void kt_poison_fill(kt_dtype t, void *p, size_t n) {
    if (t == KT_I32) {
        for (size_t i = 0; i < n; i++) ((int32_t *)p)[i] = KT_POISON_I32;
        return;
    }
    memset(p, 0xff, n * kt_dtype_size(t));
}

int kt_is_poison(kt_dtype t, const void *p, size_t i) {
    switch (t) {
        case KT_E4M3:
            return (((const uint8_t *)p)[i] & 0x7f) == 0x7f;
        case KT_BF16:
            return (((const uint16_t *)p)[i] & 0x7fff) > 0x7f80;
        case KT_F32:
            return isnan(((const float *)p)[i]);
        case KT_I32:
            return ((const int32_t *)p)[i] == KT_POISON_I32;
        case KT_U8:
            return 0;
    }
    return 0;
}
