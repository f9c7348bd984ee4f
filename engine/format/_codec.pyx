# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The v2 record codec's per-record loops in C (spec 1.5): framing, field checks and column building.

Records are variable-length (varint framing), so decoding and encoding need a loop per record; here it
runs without the GIL over raw buffers and writes Arrow-ready buffers (offsets, data, validity bitmaps)
directly. The Python side (`engine.format.records`, `engine.format.builder`) keeps the batch-level
work: headers, decompression, timestamps/offsets from deltas, and the Arrow arrays over these buffers.

Every check Kafka's `DefaultRecord.readFrom` makes is made here, and a failure is returned (never
raised from C) as (kind, batch, record, position, field, message) for the caller to turn into a
`CorruptRecordError`. Reads never go past a batch's region: every varint and every skip is bounded.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

import os

cdef extern from *:
    """
    /* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as Kafka's v2 batch CRC (spec 1.3): with
       SSE4.2 three streams of the crc32 instruction interleaved (its latency is 3 cycles, its throughput
       1) and combined by multiplying a stream's register by x^(8 * bytes) mod P (4 table lookups), as
       Mark Adler's crc32c.c and Java's CRC32C intrinsic do; a byte-table loop where SSE4.2 is missing. */
    #include <stdint.h>
    #include <string.h>
    #define KLAKE_CRC32C_POLY 0x82f63b78u
    #define KLAKE_CRC_LONG 8192
    #define KLAKE_CRC_SHORT 256
    static uint32_t klake_crc_bytes[256];
    static uint32_t klake_crc_long[4][256];
    static uint32_t klake_crc_short[4][256];
    static int klake_crc_hw = 0;

    /* a * b mod P, polynomials in the reflected bit order (bit 31 = x^0) */
    static uint32_t klake_multmodp(uint32_t a, uint32_t b) {
        uint32_t m = (uint32_t)1 << 31, p = 0;
        for (;;) {
            if (a & m) {
                p ^= b;
                if ((a & (m - 1)) == 0) break;
            }
            m >>= 1;
            b = b & 1 ? (b >> 1) ^ KLAKE_CRC32C_POLY : b >> 1;
        }
        return p;
    }

    static uint32_t klake_x2n[64];  /* x^(2^k) mod P */

    /* x^e mod P, from the powers x^(2^k) (zlib's x2nmodp) */
    static uint32_t klake_xpow(uint64_t e) {
        uint32_t result = (uint32_t)1 << 31;  /* x^0 */
        int k = 0;
        while (e) {
            if (e & 1) result = klake_multmodp(klake_x2n[k], result);
            e >>= 1;
            k++;
        }
        return result;
    }

    /* x^(8 * bytes) mod P: what a register becomes after `bytes` zero bytes */
    static uint32_t klake_x8n(uint64_t bytes) {
        return klake_xpow(bytes * 8);
    }

    static void klake_crc_shift_table(uint32_t table[4][256], uint64_t bytes) {
        uint32_t op = klake_x8n(bytes);
        int k, n;
        for (k = 0; k < 4; k++)
            for (n = 0; n < 256; n++)
                table[k][n] = klake_multmodp(op, (uint32_t)n << (8 * k));
    }

    static inline uint32_t klake_crc_shift(uint32_t table[4][256], uint32_t crc) {
        return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff]
            ^ table[3][crc >> 24];
    }

    static uint32_t klake_crc32c_sw(uint32_t crc, const uint8_t* next, size_t len) {
        crc = ~crc;
        while (len--) crc = klake_crc_bytes[(crc ^ *next++) & 0xff] ^ (crc >> 8);
        return ~crc;
    }

    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <nmmintrin.h>
    /* Three stripes of `stride` bytes CRC'd side by side, then combined (Adler's method): while 3 * stride
       bytes are left. Called with the long then the short stride. */
    __attribute__((target("sse4.2")))
    static inline uint64_t klake_crc_stripes(uint64_t crc0, const uint8_t** at, size_t* len, size_t stride,
                                             uint32_t table[4][256]) {
        const uint8_t* next = *at;
        const uint8_t* end;
        uint64_t crc1, crc2, w0, w1, w2;
        while (*len >= 3 * stride) {
            crc1 = crc2 = 0;
            end = next + stride;
            do {
                memcpy(&w0, next, 8);
                memcpy(&w1, next + stride, 8);
                memcpy(&w2, next + 2 * stride, 8);
                crc0 = _mm_crc32_u64(crc0, w0);
                crc1 = _mm_crc32_u64(crc1, w1);
                crc2 = _mm_crc32_u64(crc2, w2);
                next += 8;
            } while (next < end);
            crc0 = klake_crc_shift(table, (uint32_t)crc0) ^ crc1;
            crc0 = klake_crc_shift(table, (uint32_t)crc0) ^ crc2;
            next += 2 * stride;
            *len -= 3 * stride;
        }
        *at = next;
        return crc0;
    }

    __attribute__((target("sse4.2")))
    static uint32_t klake_crc32c_hw(uint32_t crc, const uint8_t* next, size_t len) {
        uint64_t crc0 = (uint32_t)~crc, w0;
        while (len && ((uintptr_t)next & 7)) {
            crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
            len--;
        }
        crc0 = klake_crc_stripes(crc0, &next, &len, KLAKE_CRC_LONG, klake_crc_long);
        crc0 = klake_crc_stripes(crc0, &next, &len, KLAKE_CRC_SHORT, klake_crc_short);
        while (len >= 8) {
            memcpy(&w0, next, 8);
            crc0 = _mm_crc32_u64(crc0, w0);
            next += 8;
            len -= 8;
        }
        while (len) {
            crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
            len--;
        }
        return ~(uint32_t)crc0;
    }
    static int klake_crc_hw_supported(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("sse4.2");
    }

    /* With VPCLMULQDQ (AVX-512): 16 lanes of 128 bits folded forward by 256 bytes per step (carry-less
       multiplications by x^(8 * 256 + 31) and x^(8 * 256 - 33) mod P, reflected), then onto one lane, whose
       16 bytes go through the crc32 instruction from 0: it is congruent to the message (the starting
       register xored into its first 4 bytes) modulo P, so it has its CRC. 3x the crc32 loop on data in
       the cache (68 vs 22 GB/s here); not faster on data coming from memory. */
    static uint64_t klake_fold[5][2];  /* by 256, 64, 48, 32 and 16 bytes: (first, second 8 bytes of a lane) */
    static int klake_crc_fold = 0;

    #include <immintrin.h>
    #define KLAKE_FOLD(a, k, d) _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), \
                                                           _mm512_clmulepi64_epi128(a, k, 0x11), d, 0x96)
    __attribute__((target("avx512f,vpclmulqdq,sse4.2")))
    static uint32_t klake_crc32c_fold(uint32_t crc, const uint8_t* p, size_t len) {  /* len >= 256 */
        __m512i k256 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)klake_fold[0]));
        __m512i k64 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)klake_fold[1]));
        __m512i a0 = _mm512_loadu_si512(p), a1 = _mm512_loadu_si512(p + 64), a2 = _mm512_loadu_si512(p + 128),
                a3 = _mm512_loadu_si512(p + 192), k, f;
        __m128i x;
        uint64_t r;
        a0 = _mm512_xor_si512(a0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)~crc)));
        p += 256;
        len -= 256;
        while (len >= 256) {
            a0 = KLAKE_FOLD(a0, k256, _mm512_loadu_si512(p));
            a1 = KLAKE_FOLD(a1, k256, _mm512_loadu_si512(p + 64));
            a2 = KLAKE_FOLD(a2, k256, _mm512_loadu_si512(p + 128));
            a3 = KLAKE_FOLD(a3, k256, _mm512_loadu_si512(p + 192));
            p += 256;
            len -= 256;
        }
        a1 = KLAKE_FOLD(a0, k64, a1);
        a2 = KLAKE_FOLD(a1, k64, a2);
        a3 = KLAKE_FOLD(a2, k64, a3);
        k = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(
                _mm_loadu_si128((const __m128i*)klake_fold[2])),
                _mm_loadu_si128((const __m128i*)klake_fold[3]), 1), _mm_loadu_si128((const __m128i*)klake_fold[4]), 2);
        f = _mm512_xor_si512(_mm512_clmulepi64_epi128(a3, k, 0x00), _mm512_clmulepi64_epi128(a3, k, 0x11));
        x = _mm_xor_si128(_mm512_extracti32x4_epi32(a3, 3), _mm512_castsi512_si128(f));
        x = _mm_xor_si128(x, _mm_xor_si128(_mm512_extracti32x4_epi32(f, 1), _mm512_extracti32x4_epi32(f, 2)));
        r = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
        r = _mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(x, 1));
        return klake_crc32c_hw(~(uint32_t)r, p, len);
    }

    static void klake_crc_fold_init(void) {
        static const uint64_t by[5] = {256, 64, 48, 32, 16};
        int i;
        for (i = 0; i < 5; i++) {
            klake_fold[i][0] = klake_xpow(8 * by[i] + 31);
            klake_fold[i][1] = klake_xpow(8 * by[i] - 33);
        }
        klake_crc_fold = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
    }
    #else
    static uint32_t klake_crc32c_hw(uint32_t crc, const uint8_t* next, size_t len) {
        return klake_crc32c_sw(crc, next, len);
    }
    static int klake_crc_hw_supported(void) { return 0; }
    static int klake_crc_fold = 0;
    static uint32_t klake_crc32c_fold(uint32_t crc, const uint8_t* p, size_t len) { return klake_crc32c_sw(crc, p, len); }
    static void klake_crc_fold_init(void) {}
    #endif

    static void klake_crc_init(void) {
        uint32_t n, crc;
        int k;
        for (n = 0; n < 256; n++) {
            crc = n;
            for (k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ KLAKE_CRC32C_POLY : crc >> 1;
            klake_crc_bytes[n] = crc;
        }
        klake_x2n[0] = (uint32_t)1 << 30;  /* x^1 */
        for (k = 1; k < 64; k++)
            klake_x2n[k] = klake_multmodp(klake_x2n[k - 1], klake_x2n[k - 1]);
        klake_crc_shift_table(klake_crc_long, KLAKE_CRC_LONG);
        klake_crc_shift_table(klake_crc_short, KLAKE_CRC_SHORT);
        klake_crc_hw = klake_crc_hw_supported();
        if (klake_crc_hw)
            klake_crc_fold_init();
    }

    /* the CRC-32C of (what gave `crc`) followed by `data` */
    static inline uint32_t klake_crc32c_update(uint32_t crc, const uint8_t* data, size_t len) {
        return klake_crc_hw ? klake_crc32c_hw(crc, data, len) : klake_crc32c_sw(crc, data, len);
    }

    /* the same, for data just written (in the cache): the folding loop where the CPU has it */
    static inline uint32_t klake_crc32c_cached(uint32_t crc, const uint8_t* data, size_t len) {
        if (klake_crc_fold && len >= 512)
            return klake_crc32c_fold(crc, data, len);
        return klake_crc32c_update(crc, data, len);
    }

    static inline uint32_t klake_crc32c(const uint8_t* data, size_t len) {
        return klake_crc32c_update(0, data, len);
    }

    /* the CRC-32C of A followed by B from crc(A), crc(B) and B's length (zlib's crc32_combine) */
    static uint32_t klake_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
        return klake_multmodp(klake_x8n(len_b), crc_a) ^ crc_b;
    }

    /* Streaming (non-temporal) writes of a column's data, for outputs larger than the cache: an ordinary
       store first reads the destination's cache line from memory (read-for-ownership), then writes it back,
       so copying 1 KB values into a 100 MB buffer moved each byte three times; stores that bypass the cache
       move it once. Consecutive puts fill the output in order; a line is stored once all its 64 bytes are
       known (the partial one waits in `line`), so lines are never written twice. The buffer must be
       64-byte aligned (Arrow's are) and end with `klake_stream_end`. AVX-512BW masked loads read only
       the bytes they are asked for (no read past `src + n`); 64-byte streaming stores write whole lines
       (SSE2's 16-byte ones, four per line, measured slower for the encoder here). Without AVX-512BW the
       codec copies as before (`klake_stream_ok` 0). */
    typedef struct { uint8_t line[64]; } klake_stream;
    static int klake_stream_ok = 0;

    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <immintrin.h>
    __attribute__((target("avx512f,avx512bw")))
    static void klake_stream_put(klake_stream* s, uint8_t* dst, const uint8_t* src, size_t n) {
        size_t r = (uintptr_t)dst & 63, take;
        __mmask64 mask;
        __m512i line;
        if (r) {
            take = n < 64 - r ? n : 64 - r;
            mask = (((__mmask64)1 << take) - 1) << r;
            line = _mm512_mask_mov_epi8(_mm512_loadu_si512(s->line), mask, _mm512_maskz_loadu_epi8(mask, src - r));
            dst += take;
            src += take;
            n -= take;
            if ((uintptr_t)dst & 63) {
                _mm512_storeu_si512(s->line, line);
                return;
            }
            _mm512_stream_si512((void*)(dst - 64), line);
        }
        while (n >= 64) {
            _mm512_stream_si512((void*)dst, _mm512_loadu_si512(src));
            dst += 64;
            src += 64;
            n -= 64;
        }
        if (n)
            _mm512_storeu_si512(s->line, _mm512_maskz_loadu_epi8(((__mmask64)1 << n) - 1, src));
    }

    /* the partial last line (ordinary stores, only its bytes), then a fence: the data is in memory for
       any thread that reads it next */
    __attribute__((target("avx512f,avx512bw")))
    static void klake_stream_end(klake_stream* s, uint8_t* end) {
        size_t r = (uintptr_t)end & 63;
        if (r)
            _mm512_mask_storeu_epi8(end - r, ((__mmask64)1 << r) - 1, _mm512_loadu_si512(s->line));
        _mm_sfence();
    }

    static void klake_stream_init(void) {
        __builtin_cpu_init();
        klake_stream_ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    }
    #else
    static void klake_stream_put(klake_stream* s, uint8_t* dst, const uint8_t* src, size_t n) { memcpy(dst, src, n); }
    static void klake_stream_end(klake_stream* s, uint8_t* end) {}
    static void klake_stream_init(void) {}
    #endif

    /* KLAKE_CODEC_PORTABLE: none of the CPU-specific paths (the byte-table CRC, plain copies), whatever the
       CPU has: the code a CPU without SSE4.2 / AVX-512 runs, to check or compare on any machine. */
    static void klake_portable(void) {
        klake_crc_hw = 0;
        klake_crc_fold = 0;
        klake_stream_ok = 0;
    }
    """
    void klake_crc_init() nogil
    uint32_t klake_crc32c(const uint8_t* data, size_t len) nogil
    uint32_t klake_crc32c_cached(uint32_t crc, const uint8_t* data, size_t len) nogil
    uint32_t klake_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) nogil
    int klake_crc_hw
    ctypedef struct klake_stream:
        uint8_t line[64]
    int klake_stream_ok
    void klake_stream_init() nogil
    void klake_stream_put(klake_stream* s, uint8_t* dst, const uint8_t* src, size_t n) nogil
    void klake_stream_end(klake_stream* s, uint8_t* end) nogil
    int klake_crc_fold
    void klake_portable() nogil

klake_crc_init()
klake_stream_init()
if os.environ.get("KLAKE_CODEC_PORTABLE", "") not in ("", "0"):
    klake_portable()

import numpy as np
import pyarrow as pa

cdef enum:
    VARINT_MAX = 5
    VARLONG_MAX = 10
    MIN_RECORD_BODY = 6  # attributes + 5 one-byte varints
    SHORT_COPY = 128  # keys and values up to this size are copied by constant-size copies (`copy_bytes`)
    # an output of at least STREAM_FROM bytes, whose records average at least STREAM_RECORD bytes, is written
    # with streaming stores (`klake_stream`): it is larger than this machine's 4 MiB L2 and leaves the cache
    # before anyone reads it; a smaller one stays in the cache for its reader. With shorter records the
    # writer's cost per copy outweighs the memory traffic it saves (100-byte values: no faster, decode slower)
    STREAM_FROM = 8 << 20
    STREAM_RECORD = 512
    # an encode that streams its output writes the records into a buffer of this size first (in the cache:
    # the CRC-32C reads them there), then streams the buffer to the output
    SCRATCH = 256 << 10

cdef int64_t INT32_MAX = 2147483647

# failure kinds: batch-level ones carry no record number, record-level ones do
cdef enum:
    BATCH_FAILURE = 0
    RECORD_FAILURE = 1
    CRC_FAILURE = 2  # `value` holds the computed CRC-32C

cdef enum Field:
    F_RECORDS_COUNT, F_RECORD_LENGTH, F_SIZE, F_TIMESTAMP_DELTA, F_OFFSET_DELTA, F_KEY_LENGTH, F_KEY,
    F_VALUE_LENGTH, F_VALUE, F_HEADER_COUNT, F_HEADER_KEY_LENGTH, F_HEADER_VALUE_LENGTH, F_HEADERS, F_CRC

FIELD_NAMES = ("recordsCount", "record length", "size", "timestampDelta", "offsetDelta", "keyLength", "key",
               "valueLength", "value", "headerCount", "headerKeyLength", "headerValueLength", "headers", "crc")

cdef enum Message:
    M_FEWER_RECORDS, M_BAD_LENGTH_VARINT, M_NEGATIVE_LENGTH, M_SIZE_MISMATCH, M_VARINT_PAST_END,
    M_VARINT_TOO_LONG, M_SHORT_RECORD, M_NEGATIVE_KEY, M_KEY_PAST_END, M_NEGATIVE_VALUE, M_VALUE_PAST_END,
    M_BAD_HEADER_COUNT, M_BAD_HEADER_KEY, M_BAD_HEADER_VALUE, M_HEADER_PAST_END, M_LENGTH_MISMATCH, M_CRC_MISMATCH


cdef struct Failure:
    int kind
    int64_t batch
    int64_t record      # index of the record within its batch
    int64_t position    # the record's start in its chunk (record failures), or the end of the framing walk
    int field
    int message
    int64_t value
    int max_bytes


cdef struct Totals:
    int64_t records
    int64_t key_bytes
    int64_t value_bytes
    int64_t key_nulls
    int64_t value_nulls
    int64_t headers
    int64_t header_key_bytes
    int64_t header_value_bytes
    int64_t header_value_nulls


cdef inline int read_varint(const uint8_t* buf, int64_t* pos, int64_t end, int max_bytes,
                            int64_t* out) noexcept nogil:
    """Zig-zag varint at pos[0], at most `max_bytes` long and ending before `end`: 0 ok, 1 runs past
    the end, 2 too long. On success pos[0] moves past it."""
    cdef uint64_t u = 0
    cdef int64_t p = pos[0]
    cdef int k
    cdef uint8_t b
    for k in range(max_bytes):
        if p + k >= end:
            return 1
        b = buf[p + k]
        u |= (<uint64_t>(b & 0x7F)) << (7 * k)
        if b < 0x80:
            pos[0] = p + k + 1
            out[0] = <int64_t>((u >> 1) ^ (<uint64_t>0 - (u & 1)))
            return 0
    return 2


cdef inline int fail(Failure* f, int kind, int64_t batch, int64_t record, int64_t position, int field,
                     int message, int64_t value, int max_bytes) noexcept nogil:
    """Fill `f` and return 1: the one way a failure leaves the C code."""
    f.kind = kind
    f.batch = batch
    f.record = record
    f.position = position
    f.field = field
    f.message = message
    f.value = value
    f.max_bytes = max_bytes
    return 1


cdef inline int fail_record(Failure* f, int64_t batch, int64_t record, int64_t start, int field, int message,
                            int64_t value, int max_bytes) noexcept nogil:
    return fail(f, RECORD_FAILURE, batch, record, start, field, message, value, max_bytes)


cdef inline int fail_batch(Failure* f, int64_t batch, int field, int message, int64_t value, int64_t position,
                           int max_bytes) noexcept nogil:
    return fail(f, BATCH_FAILURE, batch, 0, position, field, message, value, max_bytes)


cdef inline int varint_failure(Failure* f, int64_t batch, int64_t record, int64_t start, int field, int status,
                               int max_bytes) noexcept nogil:
    return fail_record(f, batch, record, start, field, M_VARINT_PAST_END if status == 1 else M_VARINT_TOO_LONG,
                       0, max_bytes)


cdef inline void copy_bytes(uint8_t* out, const uint8_t* src, int64_t n, int64_t readable) noexcept nogil:
    """`n` bytes from `src` to `out`. Up to SHORT_COPY bytes, when `src` has SHORT_COPY readable bytes
    (`readable`), are copied as SHORT_COPY (constant-size copies the compiler inlines, instead of a call
    per key and value); `out` has SHORT_COPY bytes of slack after the column's data for it."""
    if n <= SHORT_COPY and readable >= SHORT_COPY:
        memcpy(out, src, SHORT_COPY // 2)
        if n > SHORT_COPY // 2:
            memcpy(out + SHORT_COPY // 2, src + SHORT_COPY // 2, SHORT_COPY // 2)
    else:
        memcpy(out, src, n)


cdef inline int nullable_bytes(const uint8_t* buf, int64_t* p, int64_t e, int64_t end, uint8_t* out, int64_t* at,
                               klake_stream* stream, int32_t* length, int64_t* nulls, Failure* f, int64_t b,
                               int64_t i, int64_t start, int length_field, int negative, int data_field,
                               int past_end) noexcept nogil:
    """A record's key or value: varint length (-1 = null), then that many bytes inside the record,
    copied to `out + at[0]` at once (the record was just read: it is in cache), through `stream` unless
    it is NULL; `end` is the end of the batch's records, up to which `buf` may be read. 1 (with `f`
    filled) if the field is bad."""
    cdef int64_t n
    cdef int status = read_varint(buf, p, e, VARINT_MAX, &n)
    if status:
        return varint_failure(f, b, i, start, length_field, status, VARINT_MAX)
    if n < -1:
        return fail_record(f, b, i, start, length_field, negative, n, 0)
    length[0] = <int32_t>n
    if n > 0:
        if n > e - p[0]:
            return fail_record(f, b, i, start, data_field, past_end, n, 0)
        if stream != NULL:
            klake_stream_put(stream, out + at[0], buf + p[0], <size_t>n)
        else:
            copy_bytes(out + at[0], buf + p[0], n, end - p[0])
        p[0] += n
        at[0] += n
    elif n < 0:
        nulls[0] += 1
    return 0


cdef inline int check_crc(const uint8_t* buf, int64_t b, const int64_t* crc_from, const uint32_t* crc_stored,
                          int64_t end, Failure* f) noexcept nogil:
    """Batch b's CRC-32C over `buf[crc_from[b]:end]` against its stored one (spec 1.3), when asked
    (`crc_from` not NULL, `crc_from[b]` >= 0): 1 (with `f` filled) on a mismatch."""
    cdef uint32_t computed
    if crc_from == NULL or crc_from[b] < 0:
        return 0
    computed = klake_crc32c(buf + crc_from[b], <size_t>(end - crc_from[b]))
    if computed != crc_stored[b]:
        return fail(f, CRC_FAILURE, b, 0, 0, F_CRC, M_CRC_MISMATCH, computed, 0)
    return 0


cdef int scan(const uint8_t** chunks, const int64_t* starts, const int64_t* ends, const int64_t* counts,
              const int64_t* base_offset, const int64_t* base_timestamp,
              const int64_t* max_timestamp, const uint8_t* log_append_time, const int64_t* crc_from,
              const uint32_t* crc_stored, Py_ssize_t batches, int32_t* rec_batch, int64_t* timestamp, int64_t* offset,
              int32_t* key_len, int32_t* key_offsets, uint8_t* key_data, int32_t* value_len,
              int32_t* value_offsets, uint8_t* value_data, klake_stream* value_stream, int64_t* header_pos,
              int32_t* header_count, Totals* t, Failure* f) noexcept nogil:
    """One pass over the records: frame every record, check every field, copy its key and value into
    the columns' data buffers while the record is in cache (they hold as many bytes as the regions:
    a key or value lies inside its batch's region; values through `value_stream` unless NULL) and note where the headers are (a second pass copies
    them, when there are any). Offsets are the batch's base offset plus the delta; timestamps the base
    timestamp plus the delta, or the batch's max timestamp for LogAppendTime batches (spec 1.4). Sums
    wrap as Java's longs do. A batch whose CRC is to be checked here (`check_crc`) is checked just
    before its records are read: the batch is then in cache for them (one read from memory, not two)."""
    cdef Py_ssize_t b
    cdef int64_t i, p, e, end, count, length, ts, od, hc, h, hkl, hvl, start, n = 0
    cdef int status
    cdef const uint8_t* buf
    for b in range(batches):
        buf = chunks[b]
        p = starts[b]
        end = ends[b]
        count = counts[b]
        if check_crc(buf, b, crc_from, crc_stored, end, f):
            return 1
        for i in range(count):
            if p >= end:
                return fail_batch(f, b, F_RECORDS_COUNT, M_FEWER_RECORDS, 0, 0, 0)
            start = p
            status = read_varint(buf, &p, end, VARINT_MAX, &length)
            if status:
                return fail_batch(f, b, F_RECORD_LENGTH, M_BAD_LENGTH_VARINT, status, 0, VARINT_MAX)
            if length < 0:
                return fail_batch(f, b, F_RECORD_LENGTH, M_NEGATIVE_LENGTH, length, 0, 0)
            if length < MIN_RECORD_BODY:
                return fail_record(f, b, i, start, F_RECORD_LENGTH, M_SHORT_RECORD, length, 0)
            if length > end - p:
                return fail_batch(f, b, F_SIZE, M_SIZE_MISMATCH, 0, p + length - starts[b], 0)
            e = p + length
            p += 1  # attributes: unused
            status = read_varint(buf, &p, e, VARLONG_MAX, &ts)
            if status:
                return varint_failure(f, b, i, start, F_TIMESTAMP_DELTA, status, VARLONG_MAX)
            status = read_varint(buf, &p, e, VARINT_MAX, &od)
            if status:
                return varint_failure(f, b, i, start, F_OFFSET_DELTA, status, VARINT_MAX)
            if nullable_bytes(buf, &p, e, end, key_data, &t.key_bytes, NULL, &key_len[n], &t.key_nulls, f, b,
                              i, start, F_KEY_LENGTH, M_NEGATIVE_KEY, F_KEY, M_KEY_PAST_END):
                return 1
            key_offsets[n + 1] = <int32_t>t.key_bytes  # wraps past 2 GiB: the caller raises then
            if nullable_bytes(buf, &p, e, end, value_data, &t.value_bytes, value_stream, &value_len[n],
                              &t.value_nulls, f, b, i, start, F_VALUE_LENGTH, M_NEGATIVE_VALUE, F_VALUE,
                              M_VALUE_PAST_END):
                return 1
            value_offsets[n + 1] = <int32_t>t.value_bytes
            status = read_varint(buf, &p, e, VARINT_MAX, &hc)
            if status:
                return varint_failure(f, b, i, start, F_HEADER_COUNT, status, VARINT_MAX)
            if hc < 0 or hc > e - p:
                return fail_record(f, b, i, start, F_HEADER_COUNT, M_BAD_HEADER_COUNT, hc, 0)
            header_pos[n] = p
            header_count[n] = <int32_t>hc
            for h in range(hc):
                status = read_varint(buf, &p, e, VARINT_MAX, &hkl)
                if status:
                    return varint_failure(f, b, i, start, F_HEADER_KEY_LENGTH, status, VARINT_MAX)
                if hkl < 0:
                    return fail_record(f, b, i, start, F_HEADER_KEY_LENGTH, M_BAD_HEADER_KEY, hkl, 0)
                if hkl > e - p:
                    return fail_record(f, b, i, start, F_HEADERS, M_HEADER_PAST_END, hkl, 0)
                p += hkl
                status = read_varint(buf, &p, e, VARINT_MAX, &hvl)
                if status:
                    return varint_failure(f, b, i, start, F_HEADER_VALUE_LENGTH, status, VARINT_MAX)
                if hvl < -1:
                    return fail_record(f, b, i, start, F_HEADER_VALUE_LENGTH, M_BAD_HEADER_VALUE, hvl, 0)
                if hvl > e - p:
                    return fail_record(f, b, i, start, F_HEADERS, M_HEADER_PAST_END, hvl, 0)
                if hvl > 0:
                    p += hvl
                    t.header_value_bytes += hvl
                elif hvl < 0:
                    t.header_value_nulls += 1
                t.header_key_bytes += hkl
            t.headers += hc
            if p != e:
                return fail_record(f, b, i, start, F_RECORD_LENGTH, M_LENGTH_MISMATCH, 0, 0)
            rec_batch[n] = <int32_t>b  # the caller's row once pass 2 has used it to find the chunk
            timestamp[n] = max_timestamp[b] if log_append_time[b] else <int64_t>(<uint64_t>base_timestamp[b] + <uint64_t>ts)
            offset[n] = <int64_t>(<uint64_t>base_offset[b] + <uint64_t>od)
            n += 1
        if p != end:
            return fail_batch(f, b, F_SIZE, M_SIZE_MISMATCH, 0, p - starts[b], 0)
    t.records = n
    return 0


cdef inline void set_valid(uint8_t* bitmap, int64_t i) noexcept nogil:
    bitmap[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef void valid_bits(const int32_t* length, int64_t n, uint8_t* bitmap) noexcept nogil:
    """Arrow validity bitmap (zeroed by the caller): bit i set unless element i is null (length -1)."""
    cdef int64_t i
    for i in range(n):
        if length[i] >= 0:
            set_valid(bitmap, i)


cdef void fill_headers(const uint8_t** chunks, const int32_t* rec_batch, int64_t n, const int64_t* header_pos,
                       const int32_t* header_count, int32_t* list_offsets, int32_t* hk_offsets, uint8_t* hk_data,
                       int32_t* hv_offsets, uint8_t* hv_data, uint8_t* hv_valid) noexcept nogil:
    """Pass 2 (headers): list offsets per record, and the header keys and values as two binary columns.
    The varints were checked in pass 1, so they are read here without bounds (`end` = no limit)."""
    cdef int64_t i, h, p, kl = 0, vl = 0, slot = 0, kat = 0, vat = 0
    cdef int64_t unbounded = 0x7FFFFFFFFFFFFFFF
    cdef const uint8_t* buf
    list_offsets[0] = 0
    hk_offsets[0] = 0
    hv_offsets[0] = 0
    for i in range(n):
        buf = chunks[rec_batch[i]]
        p = header_pos[i]
        for h in range(header_count[i]):
            read_varint(buf, &p, unbounded, VARINT_MAX, &kl)
            memcpy(hk_data + kat, buf + p, kl)
            p += kl
            kat += kl
            hk_offsets[slot + 1] = <int32_t>kat
            read_varint(buf, &p, unbounded, VARINT_MAX, &vl)
            if vl >= 0:
                memcpy(hv_data + vat, buf + p, vl)
                p += vl
                vat += vl
                if hv_valid != NULL:
                    set_valid(hv_valid, slot)
            hv_offsets[slot + 1] = <int32_t>vat
            slot += 1
        list_offsets[i + 1] = <int32_t>slot


MESSAGES = (  # by `Message`; {count} and {region} are the caller's to fill (batch figures it holds)
    "batch declares {{count}} records but its data ends after fewer",
    "bad record length varint: {varint}",
    "negative record length {value}",
    "Incorrect declared batch size: {{count}} records end at byte {position} of the records but the batch "
    "holds {{region}}",
    "varint runs past the end of its data",
    "varint longer than {max_bytes} bytes",
    "record shorter than its fixed fields",
    "negative key length other than -1",
    "key runs past the end of the record",
    "negative value length other than -1",
    "value runs past the end of the record",
    "header count is negative or exceeds the remaining bytes",
    "null or negative header key length",
    "negative header value length other than -1",
    "header runs past the end of the record",
    "record length does not match its fields",
    "stored CRC does not match the computed {value:#010x}",
)


def _describe(Failure f):
    """(kind, batch, record, position, field name, message, value) of a failure, in the Python decoder's
    words; `value` is the figure the message names (for a CRC failure: the computed CRC)."""
    varint = MESSAGES[M_VARINT_PAST_END] if f.value == 1 else MESSAGES[M_VARINT_TOO_LONG]
    message = MESSAGES[f.message].format(value=f.value, position=f.position, max_bytes=f.max_bytes,
                                         varint=varint.format(max_bytes=f.max_bytes))
    return f.kind, f.batch, f.record, f.position, FIELD_NAMES[f.field], message, f.value


def _empty(int64_t count, dtype):
    """An uninitialised array from Arrow's memory pool, which keeps freed memory for the next decode:
    fresh pages from the OS cost more than decoding (a page fault per 4 KiB, ~0.25 ms per MB)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(count * dtype.itemsize), dtype)


def _bitmap(int64_t n, int64_t nulls):
    if not nulls:
        return None
    bitmap = _empty((n + 7) // 8, np.uint8)
    bitmap[:] = 0
    return bitmap


cdef uint8_t* _address(object array):
    cdef uint8_t[::1] view
    if array is None:
        return NULL
    view = array
    return &view[0] if view.shape[0] else NULL


def crc32c(data) -> int:
    """CRC-32C of a bytes-like object (the compiled code the decoder checks batches with)."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B")
    cdef size_t n = view.shape[0]
    cdef uint32_t out
    if n == 0:
        return 0
    with nogil:
        out = klake_crc32c(&view[0], n)
    return out


def crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) -> int:
    """CRC-32C of A followed by B, from A's CRC, B's CRC and B's length in bytes (zlib's `crc32_combine`):
    a batch's CRC from its header's and its records' (spec 1.3), the records' computed as they were written."""
    return klake_crc32c_combine(crc_a, crc_b, length_b)


def cpu_paths() -> dict:
    """The CPU-specific paths this process runs (all off with `KLAKE_CODEC_PORTABLE=1`): `crc32c_instruction`,
    SSE4.2's CRC-32C rather than a byte-table loop; `crc32c_folding`, VPCLMULQDQ folding for long runs;
    `streaming_stores`, AVX-512BW stores that bypass the cache for outputs larger than it."""
    return {"crc32c_instruction": bool(klake_crc_hw), "crc32c_folding": bool(klake_crc_hw and klake_crc_fold),
            "streaming_stores": bool(klake_stream_ok)}


def decode_v2(list chunks, const int64_t[::1] starts, const int64_t[::1] ends, const int64_t[::1] counts,
              const int32_t[::1] rows, const int64_t[::1] base_offset, const int64_t[::1] base_timestamp,
              const int64_t[::1] max_timestamp, const uint8_t[::1] log_append_time,
              const int64_t[::1] crc_from=None, const uint32_t[::1] crc_stored=None):
    """Decode the records of v2 batches: batch b's records are `chunks[b][starts[b]:ends[b]]` (the log
    buffer itself for uncompressed batches, its decompressed records otherwise), `counts[b]` of them;
    `rows[b]` is its row in the caller's batch headers, and the other arrays its header fields.
    With `crc_from` and `crc_stored`, batch b's CRC-32C over `chunks[b][crc_from[b]:ends[b]]` must
    equal `crc_stored[b]` (checked just before its records are read; -1: not checked here).

    Returns (None, columns) or (failure, None); `columns` is a dict of numpy arrays: `batch` (each
    record's row), `offset`, `timestamp`, and Arrow buffers (validity or None, null count, offsets,
    data) for `key`, `value`, and the headers (`header_list` offsets, `header_key`, `header_value`).
    """
    cdef Py_ssize_t batches = counts.shape[0], b
    cdef int64_t capacity = 0, region = 0, c, room
    cdef Totals t
    cdef Failure f
    cdef int status
    cdef const uint8_t[::1] view
    cdef list views = []
    cdef uint64_t[::1] pointers = np.zeros(batches, np.uint64)
    cdef const int64_t* cfrom = NULL
    cdef const uint32_t* cstored = NULL
    if crc_from is not None:
        if crc_stored is None or crc_from.shape[0] != batches or crc_stored.shape[0] != batches:
            raise ValueError("crc_from and crc_stored need one entry per batch")
        if batches:
            cfrom = &crc_from[0]
            cstored = &crc_stored[0]
    if (len(chunks) != batches or starts.shape[0] != batches or ends.shape[0] != batches
            or rows.shape[0] != batches or base_offset.shape[0] != batches or base_timestamp.shape[0] != batches
            or max_timestamp.shape[0] != batches or log_append_time.shape[0] != batches):
        raise ValueError("every per-batch argument must have one entry per batch")
    for b in range(batches):
        view = chunks[b]
        if not (0 <= starts[b] <= ends[b] <= view.shape[0]):
            raise ValueError(f"batch {b}: region [{starts[b]}, {ends[b]}) is outside its {view.shape[0]}-byte chunk")
        if cfrom != NULL and cfrom[b] > ends[b]:
            raise ValueError(f"batch {b}: CRC range starts at {cfrom[b]}, past its region's end {ends[b]}")
        views.append(view)
        pointers[b] = <uint64_t><uintptr_t>&view[0] if view.shape[0] else 0
        c = counts[b]
        room = (ends[b] - starts[b]) // (MIN_RECORD_BODY + 1) + 1  # every record takes >= 7 bytes
        capacity += c if 0 <= c <= room else room
        region += ends[b] - starts[b]
    rec_batch = _empty(capacity, np.int32)
    timestamp = _empty(capacity, np.int64)
    offset = _empty(capacity, np.int64)
    key_len = _empty(capacity, np.int32)
    value_len = _empty(capacity, np.int32)
    header_pos = _empty(capacity, np.int64)
    header_count = _empty(capacity, np.int32)
    key_offsets = _empty(capacity + 1, np.int32)
    value_offsets = _empty(capacity + 1, np.int32)
    # the keys (values) of a batch lie inside its region, so all of them fit in `region` bytes (plus the
    # slack of `copy_bytes`); the unused end is given back (in place, or by a copy of the used part when it is most of the buffer)
    key_buffer = pa.allocate_buffer(region + SHORT_COPY, resizable=True)
    value_buffer = pa.allocate_buffer(region + SHORT_COPY, resizable=True)
    cdef int32_t[::1] rb = rec_batch, kl = key_len, vl = value_len, hc = header_count
    cdef int32_t[::1] ko = key_offsets, vo = value_offsets
    cdef int64_t[::1] td = timestamp, od = offset, hp = header_pos
    cdef uint8_t* kd = <uint8_t*><uintptr_t>key_buffer.address
    cdef uint8_t* vd = <uint8_t*><uintptr_t>value_buffer.address
    cdef const uint8_t** base = <const uint8_t**>&pointers[0] if batches else NULL
    # the value column is streamed (keys are short in Kafka's use: through the cache, as copies of a few bytes)
    cdef klake_stream value_stream
    cdef klake_stream* vs = NULL
    if (klake_stream_ok and region >= STREAM_FROM and region >= STREAM_RECORD * capacity
            and (<uintptr_t>vd) % 64 == 0):
        vs = &value_stream
    t = Totals(0, 0, 0, 0, 0, 0, 0, 0, 0)
    f = Failure(0, 0, 0, 0, 0, 0, 0, 0)
    ko[0] = 0
    vo[0] = 0
    if capacity:
        with nogil:
            status = scan(base, &starts[0], &ends[0], &counts[0], &base_offset[0], &base_timestamp[0],
                          &max_timestamp[0], &log_append_time[0], cfrom, cstored, batches, &rb[0], &td[0], &od[0],
                          &kl[0], &ko[0], kd, &vl[0], &vo[0], vd, vs, &hp[0], &hc[0], &t, &f)
            if vs != NULL:
                klake_stream_end(vs, vd + t.value_bytes)
    else:
        status = 0
        for b in range(batches):
            status = check_crc(base[b], b, cfrom, cstored, ends[b], &f)
            if status:
                break
            if counts[b] != 0 or starts[b] != ends[b]:
                if counts[b] > 0:
                    status = fail_batch(&f, b, F_RECORDS_COUNT, M_FEWER_RECORDS, 0, 0, 0)
                else:
                    status = fail_batch(&f, b, F_SIZE, M_SIZE_MISMATCH, 0, 0, 0)
                break
    if status:
        return _describe(f), None
    cdef int64_t n = t.records
    for name, size in (("keys", t.key_bytes), ("values", t.value_bytes), ("header keys", t.header_key_bytes),
                       ("header values", t.header_value_bytes), ("headers", t.headers)):
        if size > INT32_MAX:
            raise OverflowError(f"{size} bytes of {name} in one decode: more than an Arrow binary column holds")
    key_buffer.resize(t.key_bytes, shrink_to_fit=True)
    value_buffer.resize(t.value_bytes, shrink_to_fit=True)
    key_valid = _bitmap(n, t.key_nulls)
    value_valid = _bitmap(n, t.value_nulls)
    list_offsets = _empty(n + 1, np.int32)
    hk_offsets = _empty(t.headers + 1, np.int32)
    hv_offsets = _empty(t.headers + 1, np.int32)
    hk_data = _empty(t.header_key_bytes, np.uint8)
    hv_data = _empty(t.header_value_bytes, np.uint8)
    hv_valid = _bitmap(t.headers, t.header_value_nulls)
    cdef int32_t[::1] lo = list_offsets, hko = hk_offsets, hvo = hv_offsets
    cdef uint8_t* kv = _address(key_valid)
    cdef uint8_t* vv = _address(value_valid)
    cdef uint8_t* hkd = _address(hk_data)
    cdef uint8_t* hvd = _address(hv_data)
    cdef uint8_t* hvv = _address(hv_valid)
    cdef int32_t* rbp = &rb[0] if capacity else NULL
    cdef int32_t* klp = &kl[0] if capacity else NULL
    cdef int32_t* vlp = &vl[0] if capacity else NULL
    cdef int64_t* hpp = &hp[0] if capacity else NULL
    cdef int32_t* hcp = &hc[0] if capacity else NULL
    with nogil:
        if kv != NULL:
            valid_bits(klp, n, kv)
        if vv != NULL:
            valid_bits(vlp, n, vv)
        if t.headers:
            fill_headers(base, rbp, n, hpp, hcp, &lo[0], &hko[0], hkd, &hvo[0], hvd, hvv)
        else:
            for c in range(n + 1):
                lo[c] = 0
            hko[0] = 0
            hvo[0] = 0
        for c in range(n):
            rbp[c] = rows[rbp[c]]
    return None, {
        "batch": rec_batch[:n], "offset": offset[:n], "timestamp": timestamp[:n],
        "key": (key_valid, t.key_nulls, key_offsets[:n + 1], np.frombuffer(key_buffer, np.uint8)),
        "value": (value_valid, t.value_nulls, value_offsets[:n + 1], np.frombuffer(value_buffer, np.uint8)),
        "header_list": list_offsets,
        "header_key": (None, 0, hk_offsets, hk_data),
        "header_value": (hv_valid, t.header_value_nulls, hv_offsets, hv_data),
    }


# ------------------------------------------------------------------------------------------ encode


cdef inline int varint_size(int64_t value) noexcept nogil:
    cdef uint64_t u = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


cdef inline int64_t write_varint(uint8_t* out, int64_t at, int64_t value) noexcept nogil:
    cdef uint64_t u = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while u >= 0x80:
        out[at] = <uint8_t>((u & 0x7F) | 0x80)
        u >>= 7
        at += 1
    out[at] = <uint8_t>u
    return at + 1


cdef inline bint is_valid(const uint8_t* bitmap, int64_t i) noexcept nogil:
    return bitmap == NULL or (bitmap[i >> 3] >> (i & 7)) & 1


cdef struct Binary:
    const int32_t* offsets  # n + 1 entries, already moved to the array's slice offset
    const uint8_t* data
    const uint8_t* validity  # NULL: no nulls
    int64_t bit_offset


cdef inline int64_t binary_length(Binary* b, int64_t i) noexcept nogil:
    """Kafka's length of element i: -1 for null."""
    if not is_valid(b.validity, b.bit_offset + i):
        return -1
    return b.offsets[i + 1] - b.offsets[i]


cdef class _BinaryColumn:
    """Holds an Arrow binary array's buffers alive while C reads them through a `Binary`."""
    cdef object keep
    cdef Binary view

    def __init__(self, array):
        cdef const int32_t[::1] offsets
        cdef const uint8_t[::1] data
        cdef const uint8_t[::1] validity
        buffers = array.buffers()
        self.keep = (array, buffers)
        offsets = np.frombuffer(buffers[1], np.int32, count=array.offset + len(array) + 1)
        self.view.offsets = &offsets[array.offset]
        if buffers[2] is not None and buffers[2].size:
            data = np.frombuffer(buffers[2], np.uint8)
            self.view.data = &data[0]
        else:
            self.view.data = NULL
        if array.null_count and buffers[0] is not None:
            validity = np.frombuffer(buffers[0], np.uint8)
            self.view.validity = &validity[0]
        else:
            self.view.validity = NULL
        self.view.bit_offset = array.offset


def encode_records(keys, values, const int64_t[::1] timestamp_delta, const int64_t[::1] offset_delta,
                   headers=None, const int64_t[::1] batch_firsts=None, int64_t gap=0):
    """Records in v2 wire form (spec 1.5): (offsets int64 n+1, data, crcs) with record i at
    `data[offsets[i]:offsets[i+1]]`: length, attributes 0, timestampDelta, offsetDelta, key, value, headers.

    `keys`/`values` are Arrow binary arrays (null = length -1); `headers` an Arrow
    list<struct<key: string, value: binary>> array or None. Byte-identical to kafka-clients'
    `DefaultRecord.writeTo`. Sizes are computed first, then the records are written once, in C.

    `batch_firsts` (ascending record indices) with `gap`: `gap` bytes are left free before each of those
    records, so that a batch header can be written in place in front of its records (no second copy);
    `crcs` (uint32, one per batch first, else None) holds the CRC-32C of each such batch's records (up to
    the next batch first), computed as they are written (in the cache), for the batch CRC (spec 1.3;
    `crc32c_combine` adds the header's). An output of `STREAM_FROM` bytes or more (records of
    `STREAM_RECORD` bytes on average) is written with streaming stores (`klake_stream`); its gaps are zeros.
    """
    cdef int64_t n = len(keys), i, h, total = 0, body, at, hk, hv, first, last, next_gap = 0, gaps = 0, longest = 0
    cdef const int64_t* firsts = NULL
    if len(values) != n or timestamp_delta.shape[0] != n or offset_delta.shape[0] != n:
        raise ValueError("keys, values and deltas differ in length")
    cdef _BinaryColumn key_column = _BinaryColumn(keys)
    cdef _BinaryColumn value_column = _BinaryColumn(values)
    cdef Binary* k = &key_column.view
    cdef Binary* v = &value_column.view
    cdef Binary* hkeys = NULL
    cdef Binary* hvalues = NULL
    cdef const int32_t[::1] list_offsets
    cdef const int32_t* lists = NULL
    cdef _BinaryColumn hkey_column, hvalue_column
    if headers is not None:
        if len(headers) != n:
            raise ValueError("headers differ in length from the records")
        if headers.null_count:
            raise ValueError("a record's header list may be empty but not null")
        list_offsets = np.frombuffer(headers.buffers()[1], np.int32, count=headers.offset + n + 1)
        lists = &list_offsets[headers.offset]
        entries = headers.values
        header_keys = entries.field("key").cast(pa.binary())
        if header_keys.null_count:
            raise ValueError("header keys may not be null")
        hkey_column = _BinaryColumn(header_keys)
        hvalue_column = _BinaryColumn(entries.field("value"))
        hkeys = &hkey_column.view
        hvalues = &hvalue_column.view
    if batch_firsts is not None and batch_firsts.shape[0]:
        gaps = batch_firsts.shape[0]
        firsts = &batch_firsts[0]
    offsets = _empty(n + 1, np.int64)
    bodies = _empty(n, np.int64)
    cdef int64_t[::1] out_offsets = offsets
    cdef int64_t[::1] body_sizes = bodies
    with nogil:
        out_offsets[0] = gap if gaps and firsts[0] == 0 else 0
        total = out_offsets[0]
        next_gap = 1 if gaps and firsts[0] == 0 else 0
        for i in range(n):
            body = 1 + varint_size(timestamp_delta[i]) + varint_size(offset_delta[i])
            hk = binary_length(k, i)
            body += varint_size(hk) + (hk if hk > 0 else 0)
            hv = binary_length(v, i)
            body += varint_size(hv) + (hv if hv > 0 else 0)
            if lists != NULL:
                first, last = lists[i], lists[i + 1]
                body += varint_size(last - first)
                for h in range(first, last):
                    hk = binary_length(hkeys, h)
                    hv = binary_length(hvalues, h)
                    body += varint_size(hk) + hk + varint_size(hv) + (hv if hv > 0 else 0)
            else:
                body += 1
            body_sizes[i] = body
            total += varint_size(body) + body
            longest = max(longest, varint_size(body) + body)
            if next_gap < gaps and firsts[next_gap] == i + 1:
                total += gap
                next_gap += 1
            out_offsets[i + 1] = total
    data = pa.allocate_buffer(total)
    cdef uint8_t[::1] out_view
    cdef uint8_t* out = NULL
    if total:
        out_view = np.frombuffer(data, np.uint8)
        out = &out_view[0]
    crcs = _empty(gaps, np.uint32) if gaps else None
    cdef uint32_t[::1] crc_view
    cdef uint32_t* crc_out = NULL
    if gaps:
        crc_view = crcs
        crc_out = &crc_view[0]
    cdef klake_stream stream
    cdef klake_stream* streaming = NULL
    cdef uint8_t* scratch = NULL
    scratch_buffer = None
    cdef int64_t cap = max(longest, SCRATCH)
    if klake_stream_ok and total >= STREAM_FROM and total >= STREAM_RECORD * n and (<uintptr_t>out) % 64 == 0:
        streaming = &stream
        scratch_buffer = pa.allocate_buffer(cap)
        scratch = <uint8_t*><uintptr_t>scratch_buffer.address
    with nogil:
        _write_records(out, &out_offsets[0], &body_sizes[0] if n else NULL, n, k, v, hkeys, hvalues, lists,
                       &timestamp_delta[0] if n else NULL, &offset_delta[0] if n else NULL, firsts, gaps, crc_out,
                       streaming, scratch, cap)
    return offsets, data, crcs


cdef void _write_records(uint8_t* out, const int64_t* offsets, const int64_t* bodies, int64_t n, Binary* k,
                         Binary* v, Binary* hkeys, Binary* hvalues, const int32_t* lists, const int64_t* ts,
                         const int64_t* od, const int64_t* firsts, int64_t gaps, uint32_t* crcs,
                         klake_stream* stream, uint8_t* scratch, int64_t cap) noexcept nogil:
    """Record i at `out + offsets[i]`, and each batch's records' CRC-32C into `crcs` (see `encode_records`).
    Without `stream`, records are written in place and a batch's CRC read back just after its last
    record (from the cache). With it, records are written into `scratch` (`cap` bytes, at least the
    largest record), whose content is added to its batch's CRC and streamed to the output when it is
    full and at each batch's end; the output is written in order, its gaps included (as zeros)."""
    cdef int64_t i, at, size, j = -1, next_first = 0, done = 0, used = 0
    cdef uint32_t crc = 0
    cdef uint8_t zeros[64]
    memset(zeros, 0, 64)
    for i in range(n + 1):
        if i == n or (next_first < gaps and firsts[next_first] == i):
            # the previous batch (or the records before the first batch, j = -1) ends before record i
            if stream != NULL:
                if used:
                    if j >= 0:
                        crc = klake_crc32c_cached(crc, scratch, <size_t>used)
                    klake_stream_put(stream, out + done, scratch, <size_t>used)
                    done += used
                    used = 0
            elif j >= 0:
                at = offsets[i - 1] + varint_size(bodies[i - 1]) + bodies[i - 1]  # the batch's end
                crc = klake_crc32c_cached(0, out + done, <size_t>(at - done))
            if j >= 0:
                crcs[j] = crc
            if i == n:
                break
            j = next_first
            next_first += 1
            crc = 0
            if stream != NULL:
                while done < offsets[i]:
                    size = min(offsets[i] - done, 64)
                    klake_stream_put(stream, out + done, zeros, <size_t>size)
                    done += size
            else:
                done = offsets[i]
        if stream == NULL:
            at = write_varint(out, offsets[i], bodies[i])
            _write_body(out, at, k, v, hkeys, hvalues, lists, i, ts[i], od[i])
        else:
            size = varint_size(bodies[i]) + bodies[i]
            if used + size > cap:
                if j >= 0:
                    crc = klake_crc32c_cached(crc, scratch, <size_t>used)
                klake_stream_put(stream, out + done, scratch, <size_t>used)
                done += used
                used = 0
            at = write_varint(scratch, used, bodies[i])
            used = _write_body(scratch, at, k, v, hkeys, hvalues, lists, i, ts[i], od[i])
    if stream != NULL:
        klake_stream_end(stream, out + done)


cdef inline int64_t _write_bytes(uint8_t* out, int64_t at, Binary* b, int64_t i, int64_t length) noexcept nogil:
    at = write_varint(out, at, length)
    if length > 0:
        memcpy(out + at, b.data + b.offsets[i], length)
        at += length
    return at


cdef int64_t _write_body(uint8_t* out, int64_t at, Binary* k, Binary* v, Binary* hkeys, Binary* hvalues,
                         const int32_t* lists, int64_t i, int64_t ts, int64_t od) noexcept nogil:
    cdef int64_t h, first, last
    out[at] = 0  # attributes: unused in v2 records
    at = write_varint(out, at + 1, ts)
    at = write_varint(out, at, od)
    at = _write_bytes(out, at, k, i, binary_length(k, i))
    at = _write_bytes(out, at, v, i, binary_length(v, i))
    if lists == NULL:
        return write_varint(out, at, 0)
    first, last = lists[i], lists[i + 1]
    at = write_varint(out, at, last - first)
    for h in range(first, last):
        at = _write_bytes(out, at, hkeys, h, binary_length(hkeys, h))
        at = _write_bytes(out, at, hvalues, h, binary_length(hvalues, h))
    return at


# ------------------------------------------------------------------------------------------ planning


def varint_sizes(const int64_t[::1] values):
    """Bytes of each value as a zig-zag varint (1..10; spec 1.5), as an int64 numpy array."""
    cdef int64_t n = values.shape[0], i
    sizes = np.empty(n, np.int64)
    cdef int64_t[::1] out = sizes
    with nogil:
        for i in range(n):
            out[i] = varint_size(values[i])
    return sizes


def plan_batches(const int64_t[::1] fixed, const int64_t[::1] ts, int64_t limit, int64_t header_size,
                 bint cut_on_delta_overflow):
    """Greedy batch lengths (int64 numpy array): each batch takes the following records while its exact
    uncompressed size (`header_size` + records) stays <= `limit`, at least one record. A record's size
    is `fixed` (its bytes that do not depend on the batch) plus the varints of its length, timestamp
    delta and offset delta against the batch's first record (spec 1.5). With `cut_on_delta_overflow`
    a batch also ends before a record whose timestamp delta would overflow int64 (KIP-228 extremes);
    without it the delta wraps, as numpy's int64 arithmetic does."""
    cdef int64_t n = fixed.shape[0]
    cdef int64_t start = 0, i, base, delta, body, total
    cdef int64_t INT64_MAX_ = 9223372036854775807
    cdef int64_t INT64_MIN_ = -INT64_MAX_ - 1
    cdef bint fits
    lengths = np.empty(n, np.int64)
    cdef int64_t[::1] out = lengths
    cdef int64_t count = 0
    with nogil:
        while start < n:
            base = ts[start]
            total = header_size
            i = start
            while i < n:
                if cut_on_delta_overflow:
                    if base < 0:
                        fits = ts[i] <= INT64_MAX_ + base
                    elif base > 0:
                        fits = ts[i] >= INT64_MIN_ + base
                    else:
                        fits = True
                    if not fits:
                        break
                delta = <int64_t>(<uint64_t>ts[i] - <uint64_t>base)
                body = fixed[i] + varint_size(delta) + varint_size(i - start)
                total += body + varint_size(body)
                if total > limit:
                    break
                i += 1
            if i == start:
                i = start + 1
            out[count] = i - start
            count += 1
            start = i
    return lengths[:count].copy()


# ------------------------------------------------------------------------------------------ partitioning


def murmur2(keys):
    """Kafka's `Utils.murmur2` (seed 0x9747b28c, m 0x5bd1e995, r 24) of every element of an Arrow binary
    array, as a uint32 numpy array; a null key hashes as an empty one. 4-byte little-endian words, then
    the 1-3 tail bytes (Java's switch falls through), then the final mix, in uint32 arithmetic that
    wraps as Java's int does."""
    cdef int64_t n = len(keys), i, j, length, tail
    cdef _BinaryColumn column = _BinaryColumn(keys)
    cdef Binary* b = &column.view
    cdef const uint8_t* p
    cdef uint32_t h, k
    cdef uint32_t m = 0x5BD1E995, seed = 0x9747B28C
    hashes = np.empty(n, np.uint32)
    cdef uint32_t[::1] out = hashes
    with nogil:
        for i in range(n):
            length = binary_length(b, i)
            if length < 0:
                length = 0
            h = seed ^ <uint32_t>length
            if length:
                p = b.data + b.offsets[i]
                for j in range(0, length & ~3, 4):
                    k = (<uint32_t>p[j] | (<uint32_t>p[j + 1] << 8) | (<uint32_t>p[j + 2] << 16)
                         | (<uint32_t>p[j + 3] << 24))
                    k *= m
                    k ^= k >> 24
                    k *= m
                    h *= m
                    h ^= k
                tail = length & ~3
                if length & 3 == 3:
                    h ^= <uint32_t>p[tail + 2] << 16
                if length & 3 >= 2:
                    h ^= <uint32_t>p[tail + 1] << 8
                if length & 3 >= 1:
                    h ^= <uint32_t>p[tail]
                    h *= m
            h ^= h >> 13
            h *= m
            h ^= h >> 15
            out[i] = h
    return hashes
