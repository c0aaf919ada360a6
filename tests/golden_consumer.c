/*
 * golden_consumer.c: a consumer of minifp8's golden files in C99, standard library only.
 *
 * It proves that every file of `python -m minifp8.golden` can be read and checked without Python,
 * from the specifications and the manifest's notes alone: it opens each .npz (a zip archive) with
 * its own zip reader, parses the .npy headers, and compares every expected code and scale in the
 * file with its own encoders. They are written from:
 *   - IEEE 754-2019 section 3.4 (the binary32 and binary64 inputs, read from their bits);
 *   - the OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (E4M3, E5M2: Table 1 and its
 *     conversion rules: round to nearest even, with or without saturation);
 *   - the FNUZ formats (arXiv:2206.02915; StableHLO RFC 20230321-fp8_fnuz) as the manifest's
 *     "codec" note states them;
 *   - the OCP Microscaling Formats (MX) Specification v1.0 (FP6 and FP4 elements, section 5.3;
 *     the E8M0 scale, section 5.4.1; the block scale rule, section 6.3) and the "mx" note's scale
 *     modes;
 *   - the manifest's "stochastic", "E8M0" and "nvfp4" notes (IEEE P3109 stochastic rounding;
 *     NVIDIA's NVFP4 two-level scaling in TransformerEngine's order of float32 operations);
 *   - the "gemm" note (scaled GEMMs: the scale layouts, the reference and the tolerance).
 * One encoder serves every format: it is driven by each format's exponent bits, mantissa bits,
 * bias and special values (section "the formats, as data"), not written once per format.
 * tests/test_golden_c.py compiles it and runs it on every entry of a manifest.
 *
 * Usage: golden_consumer DIR ENTRY...   where each ENTRY is one of
 *   decode FILE CODES VALUES FORMAT
 *       CODES: uint8 codes of FORMAT; VALUES: their float64 values (the "fields" and "decode" notes),
 *       which this decoder must give bit for bit (-0.0 included), NaN for NaN whatever its sign.
 *   codec FILE INPUT CODES FORMAT SATURATE [input_dtype=float32|float64]
 *         [rounding=nearest_even|nearest_away|toward_zero|stochastic]
 *         [random_bits=ARRAY random_bit_count=K]
 *       FORMAT: E4M3, E5M2, E4M3FNUZ, E5M2FNUZ, E3M2, E2M3, E2M1 or E8M0; SATURATE 0 or 1;
 *       defaults float32 and nearest_even; stochastic rounding needs the random bits (uint8).
 *   mx FILE INPUT SCALES CODES ELEMENT_FORMAT BLOCK_SIZE [scale_mode=floor|ceil|even|rceil]
 *         [rounding=nearest_even|nearest_away|toward_zero]
 *       INPUT: float32 rows, blocked along the last axis; SCALES: E8M0 codes; CODES: element
 *       codes (don't care in a block whose scale is 0xFF); default floor and nearest_even.
 *   nvfp4 FILE INPUT SCALES CODES GLOBAL_AMAX ENCODE_SCALE GIVEN DEQUANTIZED
 *       INPUT: float32 rows, blocks of 16 along the last axis; SCALES: E4M3 codes; CODES: E2M1
 *       codes; GLOBAL_AMAX, ENCODE_SCALE: 0-d float32 arrays; GIVEN: 1 if the tensor amax is
 *       given (manifest: global_amax_given), 0 if it must be max |x|; DEQUANTIZED: the float32
 *       value of each code by the note's rule, which must hold bit for bit.
 *   gemm FILE A_CODES A_FORMAT A_SCALES B_CODES B_FORMAT B_SCALES REFERENCE MAGNITUDE ERROR_BOUND
 *         TOLERANCE UNDERFLOW_TERM
 *         [scale_format=E8M0|E4M3 a_scale_codes=ARRAY b_scale_codes=ARRAY]
 *         [a_tensor_scale=ARRAY b_tensor_scale=ARRAY]
 *       The "gemm" note: A_CODES M x K and B_CODES K x N (uint8), their float32 scales 2-d, each
 *       dimension dividing the codes'; the scale codes (MX: E8M0, NVFP4: E4M3) must decode to the
 *       scales; the 0-d float32 tensor scales (NVFP4) multiply their operand. REFERENCE, MAGNITUDE,
 *       ERROR_BOUND, TOLERANCE and UNDERFLOW_TERM (the note's C): M x N float64. A float64 GEMM must
 *       give REFERENCE and S = sum |a b| exactly (the note: these sums are exact); the note's
 *       formulas must give ERROR_BOUND and TOLERANCE bit for bit (C taken from the file); and a
 *       float32 kernel (dequantise in float32, multiply and add in float32, k in order, the tensor
 *       scales in the epilogue) must lie within TOLERANCE of REFERENCE, and be NaN where it is NaN.
 * FILE is relative to DIR; the array names are those of manifest.json's "arrays" (without .npy).
 *
 * Output: one line per entry, "ok ..." or "FAIL ..." with the number of expected values it
 * compared (values, codes and scales, not the don't-care codes; NVFP4's dequantised values; a GEMM's
 * scale codes, and five values an output: its float32 result, its float64 result, S, the error bound
 * and the tolerance), then at most 5 mismatch lines an entry, then "summary: N entries, M values
 * checked, K mismatches".
 * Exit status: 0 every value matches, 1 some value differs, 2 bad usage or a malformed file (an
 * entry with no value to check is one: an emptied file must not pass).
 */
#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTED_MISMATCHES 5

/* ---------------------------------------------------------------- errors and file reading -- */

static void fail_malformed(const char *file, const char *what)
{
    fprintf(stderr, "golden_consumer: error: %s: %s\n", file, what);
    exit(2);
}

static void fail_usage(const char *what, const char *got)
{
    fprintf(stderr, "golden_consumer: error: %s, got %s\n", what, got);
    exit(2);
}

/* The index of name in names[0..count), or a usage error saying what was expected. */
static int index_named(const char *name, const char *const names[], int count, const char *expected)
{
    int i;
    for (i = 0; i < count; i++) {
        if (strcmp(name, names[i]) == 0) {
            return i;
        }
    }
    fail_usage(expected, name);
    return 0;
}

static unsigned char *read_whole_file(const char *path, long *size)
{
    FILE *stream = fopen(path, "rb");
    unsigned char *data;
    if (stream == NULL || fseek(stream, 0, SEEK_END) != 0 || (*size = ftell(stream)) < 0) {
        fail_malformed(path, "cannot open or size the file");
    }
    rewind(stream);
    data = malloc((size_t)*size + 1);
    if (data == NULL || fread(data, 1, (size_t)*size, stream) != (size_t)*size) {
        fail_malformed(path, "cannot read the file");
    }
    fclose(stream);
    return data;
}

static const char *join_path(char *path, size_t capacity, const char *directory, const char *file)
{
    if (snprintf(path, capacity, "%s/%s", directory, file) >= (int)capacity) {
        fail_malformed(file, "the path is too long");
    }
    return path;
}

static uint32_t read_u16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t read_u32(const unsigned char *p) { return read_u16(p) | read_u16(p + 2) << 16; }
static uint64_t read_u64(const unsigned char *p) { return read_u32(p) | (uint64_t)read_u32(p + 4) << 32; }

static float float_of_bits(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static float quiet_nan(void) { return float_of_bits(0x7FC00000u); }
static float positive_infinity(void) { return float_of_bits(0x7F800000u); }

static uint32_t bits_of_float(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

/* ------------------------------------------------------------------------------ zip (.npz) -- */

/* CRC-32 of the zip format (polynomial 0xEDB88320, reflected), bit by bit: short, fast enough. */
static uint32_t crc32_of(const unsigned char *data, uint32_t size)
{
    uint32_t crc = 0xFFFFFFFFu, i;
    int bit;
    for (i = 0; i < size; i++) {
        crc ^= data[i];
        for (bit = 0; bit < 8; bit++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

/* The bytes of member NAME of the zip archive ZIP (SIZE bytes), found through the central
 * directory. numpy's .npz members are stored (method 0), not deflated: anything else is an error. */
static const unsigned char *zip_member(const char *file, const unsigned char *zip, long size,
                                       const char *name, uint32_t *member_size)
{
    long end = size - 22; /* the end of central directory record: 22 bytes and a comment */
    uint32_t entries, offset, i;
    while (end >= 0 && read_u32(zip + end) != 0x06054b50u) {
        end--;
    }
    if (end < 0) {
        fail_malformed(file, "not a zip archive (no end of central directory record)");
    }
    entries = read_u16(zip + end + 10);
    offset = read_u32(zip + end + 16);
    for (i = 0; i < entries; i++) {
        const unsigned char *central = zip + offset;
        uint32_t method, crc, stored_size, full_size, name_length, local;
        if ((long)offset + 46 > end || read_u32(central) != 0x02014b50u
            || (long)offset + 46 + (long)read_u16(central + 28) > end) {
            fail_malformed(file, "damaged zip central directory");
        }
        method = read_u16(central + 10);
        crc = read_u32(central + 16);
        stored_size = read_u32(central + 20);
        full_size = read_u32(central + 24);
        name_length = read_u16(central + 28);
        local = read_u32(central + 42);
        if (name_length == strlen(name) && memcmp(central + 46, name, name_length) == 0) {
            const unsigned char *header = zip + local;
            long data_offset;
            if (method != 0) {
                fprintf(stderr, "golden_consumer: error: %s: member %s is compressed (method %u); this "
                        "reader reads stored members only\n", file, name, (unsigned)method);
                exit(2);
            }
            if (stored_size != full_size || stored_size == 0xFFFFFFFFu) {
                fail_malformed(file, "member sizes disagree or need zip64");
            }
            if ((long)local + 30 > size || read_u32(header) != 0x04034b50u) {
                fail_malformed(file, "damaged zip local header");
            }
            data_offset = (long)local + 30 + (long)read_u16(header + 26) + (long)read_u16(header + 28);
            if (data_offset + (long)stored_size > size) {
                fail_malformed(file, "zip member runs past the end of the file");
            }
            if (crc32_of(zip + data_offset, stored_size) != crc) {
                fail_malformed(file, "zip member fails its CRC-32 check");
            }
            *member_size = stored_size;
            return zip + data_offset;
        }
        offset += 46 + name_length + read_u16(central + 30) + read_u16(central + 32);
    }
    fprintf(stderr, "golden_consumer: error: %s: no member %s\n", file, name);
    exit(2);
}

/* ---------------------------------------------------------------------------------- .npy -- */

typedef struct {
    const unsigned char *data; /* the elements, little-endian, C order */
    long shape[8];
    int ndim;       /* 0 for a 0-d array (one element) */
    long count;     /* the product of shape */
    int item_size;  /* bytes an element */
} Array;

/* The value text after 'KEY': in the header dict, or NULL. */
static const char *header_value(const char *header, const char *key)
{
    const char *found = strstr(header, key);
    if (found == NULL) {
        return NULL;
    }
    found += strlen(key);
    while (*found == ' ' || *found == ':') {
        found++;
    }
    return found;
}

/* Array NAME (NAME.npy in the zip) of FILE, which must have dtype DESCR (numpy's dtype.str). */
static Array read_array(const char *file, const unsigned char *zip, long zip_size, const char *name,
                        const char *descr, int item_size)
{
    char member_name[256], header[1024], expected_descr[32];
    uint32_t member_size, header_length, prefix;
    const unsigned char *npy;
    const char *value;
    Array array;
    if (snprintf(member_name, sizeof member_name, "%s.npy", name) >= (int)sizeof member_name) {
        fail_malformed(file, "array name too long");
    }
    npy = zip_member(file, zip, zip_size, member_name, &member_size);
    /* magic "\x93NUMPY", version major.minor, header length (u16 in version 1, u32 in 2 and 3) */
    if (member_size < 10 || memcmp(npy, "\x93NUMPY", 6) != 0 || npy[6] < 1 || npy[6] > 3) {
        fail_malformed(file, "an array is not a .npy of version 1, 2 or 3");
    }
    prefix = npy[6] == 1 ? 10 : 12;
    header_length = npy[6] == 1 ? read_u16(npy + 8) : read_u32(npy + 8);
    if (prefix + header_length > member_size || header_length >= sizeof header) {
        fail_malformed(file, "a .npy header runs past its array");
    }
    memcpy(header, npy + prefix, header_length);
    header[header_length] = '\0';
    snprintf(expected_descr, sizeof expected_descr, "'%s'", descr);
    value = header_value(header, "'descr'");
    if (value == NULL || strncmp(value, expected_descr, strlen(expected_descr)) != 0) {
        fprintf(stderr, "golden_consumer: error: %s: array %s: expected descr %s, got header %s\n",
                file, name, expected_descr, header);
        exit(2);
    }
    value = header_value(header, "'fortran_order'");
    if (value == NULL || strncmp(value, "False", 5) != 0) {
        fail_malformed(file, "an array is not in C order (fortran_order is not False)");
    }
    value = header_value(header, "'shape'");
    if (value == NULL || *value != '(') {
        fail_malformed(file, "a .npy header has no shape");
    }
    array.ndim = 0;
    array.count = 1;
    array.item_size = item_size;
    for (value++; *value != ')'; value++) {
        if (*value >= '0' && *value <= '9') {
            char *after;
            if (array.ndim == 8) {
                fail_malformed(file, "an array has more than 8 dimensions");
            }
            array.shape[array.ndim] = strtol(value, &after, 10);
            if (array.shape[array.ndim] != 0 && array.count > (long)member_size / array.shape[array.ndim]) {
                fail_malformed(file, "a .npy shape is larger than its array");
            }
            array.count *= array.shape[array.ndim++];
            value = after - 1;
        } else if (*value != ',' && *value != ' ') {
            fail_malformed(file, "a .npy shape is not a tuple of integers");
        }
    }
    if ((long)member_size - (long)(prefix + header_length) != array.count * item_size) {
        fprintf(stderr, "golden_consumer: error: %s: array %s: shape needs %ld bytes, the member holds %ld\n",
                file, name, array.count * item_size, (long)member_size - (long)(prefix + header_length));
        exit(2);
    }
    array.data = npy + prefix + header_length;
    return array;
}

/* Element I of a float array, as its bits (little-endian binary32 or binary64). */
static uint64_t float_bits_at(const Array *array, long i)
{
    return array->item_size == 8 ? read_u64(array->data + 8 * i) : read_u32(array->data + 4 * i);
}

/* Element I of a float64 array, as a double. */
static double read_f64(const Array *array, long i)
{
    const uint64_t bits = read_u64(array->data + 8 * i);
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* ------------------------------------------------ exact values of IEEE 754 binary inputs -- */

typedef enum { FINITE, INFINITE, NOT_A_NUMBER } ValueClass;

/* A number read exactly: |x| = significand * 2**exponent where kind is FINITE (0 for +-0). */
typedef struct {
    int negative; /* the sign bit, NaN and zero included */
    ValueClass kind;
    uint64_t significand;
    int exponent;
} Exact;

/* IEEE 754-2019 section 3.4: a binary format of 1 + W + T bits (binary32: W 8, T 23; binary64:
 * W 11, T 52) with bias 2**(W-1) - 1. Biased exponent all ones: Inf (T = 0) or NaN; 0: subnormal,
 * 0.T * 2**(1 - bias); otherwise 1.T * 2**(E - bias). */
static Exact exact_from_bits(uint64_t bits, int exponent_width, int fraction_width)
{
    const uint64_t fraction = bits & ((UINT64_C(1) << fraction_width) - 1);
    const int biased = (int)((bits >> fraction_width) & ((1u << exponent_width) - 1));
    const int bias = (1 << (exponent_width - 1)) - 1;
    Exact x;
    x.negative = (int)(bits >> (exponent_width + fraction_width)) & 1;
    x.kind = biased != (1 << exponent_width) - 1 ? FINITE : fraction == 0 ? INFINITE : NOT_A_NUMBER;
    x.significand = biased == 0 ? fraction : fraction | UINT64_C(1) << fraction_width;
    x.exponent = (biased == 0 ? 1 : biased) - bias - fraction_width;
    return x;
}

static Exact exact_from_float_bits(uint64_t bits, int item_size)
{
    return item_size == 8 ? exact_from_bits(bits, 11, 52) : exact_from_bits(bits, 8, 23);
}

static int floor_log2(uint64_t n) /* n > 0 */
{
    int result = -1;
    while (n != 0) {
        n >>= 1;
        result++;
    }
    return result;
}

/* ------------------------------------------------------------------ the formats, as data -- */

typedef enum {
    NAN_IEEE,          /* all-ones exponent, mantissa not 0 (minifp8 writes the top mantissa bit) */
    NAN_ALL_ONES,      /* only the all-ones magnitude, S.1111.111 */
    NAN_NEGATIVE_ZERO, /* only 0x80, the code of -0 elsewhere: no -0 */
    NAN_NONE
} NanStyle;

typedef struct {
    const char *name;
    int exponent_bits, mantissa_bits, bias;
    int is_signed;      /* a sign bit above the exponent (E8M0 has none) */
    int has_subnormals; /* exponent field 0 holds 0.m * 2**emin (zero too); else it is an exponent */
    int has_infinity;   /* the all-ones exponent field with mantissa 0 */
    NanStyle nan_style;
} Format;

static const Format FORMATS[] = {
    /* name, exponent bits, mantissa bits, bias, signed, subnormals, Inf, NaN */
    /* OFP8 rev 1.0 Table 1: E4M3 bias 7, no Inf, NaN S.1111.111, max S.1111.110 = 448;
     * E5M2 bias 15, Inf S.11111.00, NaN S.11111.{01,10,11}, max S.11110.11 = 57344 */
    {"E4M3", 4, 3, 7, 1, 1, 0, NAN_ALL_ONES},
    {"E5M2", 5, 2, 15, 1, 1, 1, NAN_IEEE},
    /* FNUZ (Graphcore/AMD): the bias one more, no Inf, no -0, NaN 0x80 only: max 240 and 57344 */
    {"E4M3FNUZ", 4, 3, 8, 1, 1, 0, NAN_NEGATIVE_ZERO},
    {"E5M2FNUZ", 5, 2, 16, 1, 1, 0, NAN_NEGATIVE_ZERO},
    /* MX v1.0 section 5.3: FP6 E3M2 bias 3 (max 28), E2M3 bias 1 (max 7.5), FP4 E2M1 bias 1 (max 6);
     * no Inf, no NaN */
    {"E3M2", 3, 2, 3, 1, 1, 0, NAN_NONE},
    {"E2M3", 2, 3, 1, 1, 1, 0, NAN_NONE},
    {"E2M1", 2, 1, 1, 1, 1, 0, NAN_NONE},
    /* MX v1.0 section 5.4.1: E8M0 unsigned, bias 127, 2**-127 (0x00) to 2**127 (0xFE), NaN 0xFF,
     * no zero */
    {"E8M0", 8, 0, 127, 0, 0, 0, NAN_ALL_ONES},
};

static const Format *format_named(const char *name)
{
    size_t i;
    for (i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) {
        if (strcmp(FORMATS[i].name, name) == 0) {
            return &FORMATS[i];
        }
    }
    fail_usage("FORMAT must be E4M3, E5M2, E4M3FNUZ, E5M2FNUZ, E3M2, E2M3, E2M1 or E8M0", name);
    return NULL;
}

/* The exponent of the smallest normal number: 1 - bias, or -bias where field 0 is a normal one. */
static int format_emin(const Format *f) { return (f->has_subnormals ? 1 : 0) - f->bias; }

/* The sign bit: the top bit of the format's width, in the low bits of a uint8 (the "arrays" note). */
static unsigned sign_bit(const Format *f)
{
    return f->is_signed ? 1u << (f->exponent_bits + f->mantissa_bits) : 0u;
}

static unsigned all_ones_exponent(const Format *f)
{
    return ((1u << f->exponent_bits) - 1) << f->mantissa_bits;
}

/* The largest finite magnitude code: below the Inf/NaN exponent field (IEEE style), or below the
 * all-ones NaN magnitude, or the all-ones magnitude itself where it is a number. */
static unsigned max_code(const Format *f)
{
    const unsigned all_ones = (1u << (f->exponent_bits + f->mantissa_bits)) - 1;
    return f->nan_style == NAN_IEEE ? all_ones_exponent(f) - 1
           : f->nan_style == NAN_ALL_ONES ? all_ones - 1 : all_ones;
}

/* The exponent of the largest value: E4M3 8, E5M2 15, E3M2 4, E2M3 2, E2M1 2 (the "mx" note). */
static int format_emax(const Format *f) { return (int)(max_code(f) >> f->mantissa_bits) - f->bias; }

/* The NaN code minifp8 writes (the "codec" note): the sign kept except where 0x80 is the only NaN. */
static unsigned nan_code(const Format *f, int negative)
{
    const unsigned sign = negative ? sign_bit(f) : 0u;
    switch (f->nan_style) {
    case NAN_IEEE:
        return sign | all_ones_exponent(f) | 1u << (f->mantissa_bits - 1); /* quiet: the top mantissa bit */
    case NAN_ALL_ONES:
        return sign | ((1u << (f->exponent_bits + f->mantissa_bits)) - 1);
    default:
        return sign_bit(f);
    }
}

/* The value of any code of any format, as the manifest's "fields" note defines it (NaN and Inf
 * included; exponent field 0 is subnormal only where the format has subnormals, as E8M0 has not). */
static double decode_to_double(unsigned code, const Format *f)
{
    const unsigned m = (unsigned)f->mantissa_bits;
    const unsigned magnitude = code & ((1u << (f->exponent_bits + f->mantissa_bits)) - 1);
    const unsigned field = magnitude >> m, mantissa = magnitude & ((1u << m) - 1);
    const int negative = (code & sign_bit(f)) != 0;
    unsigned significand;
    int exponent;
    uint64_t power_bits;
    double power;
    if ((f->nan_style == NAN_IEEE && field == (1u << f->exponent_bits) - 1 && mantissa != 0)
        || (f->nan_style == NAN_ALL_ONES && magnitude == (1u << (f->exponent_bits + f->mantissa_bits)) - 1)
        || (f->nan_style == NAN_NEGATIVE_ZERO && code == sign_bit(f))) {
        return (double)quiet_nan();
    }
    if (f->has_infinity && magnitude == all_ones_exponent(f)) {
        return negative ? -(double)positive_infinity() : (double)positive_infinity();
    }
    significand = field == 0 && f->has_subnormals ? mantissa : mantissa | 1u << m;
    exponent = (field == 0 && f->has_subnormals ? format_emin(f) : (int)field - f->bias) - (int)m;
    power_bits = (uint64_t)(exponent + 1023) << 52; /* 2**exponent, a normal double for every format here */
    memcpy(&power, &power_bits, sizeof power);
    return negative ? -((double)significand * power) : (double)significand * power; /* exact */
}

/* The same as a float: every value of these formats is one (E8M0's 0x00, 2**-127, a subnormal). */
static float code_value(unsigned code, const Format *f) { return (float)decode_to_double(code, f); }

/* ------------------------------------------------------------------------------ rounding -- */

/* IEEE 754-2019 section 4.3: roundTiesToEven, roundTiesToAway, roundTowardZero; and IEEE P3109's
 * stochastic rounding as the manifest's "stochastic" note states it. */
typedef enum { NEAREST_EVEN, NEAREST_AWAY, TOWARD_ZERO, STOCHASTIC } Rounding;

static Rounding rounding_named(const char *name)
{
    static const char *const names[] = {"nearest_even", "nearest_away", "toward_zero", "stochastic"};
    return (Rounding)index_named(name, names, 4,
                                 "rounding must be nearest_even, nearest_away, toward_zero or stochastic");
}

/* The sign of remainder / 2**shift - 1/2, for shift >= 1 and remainder < 2**min(shift, 64). */
static int compare_with_half(uint64_t remainder, int shift)
{
    uint64_t half;
    if (shift > 64) {
        return -1;
    }
    half = UINT64_C(1) << (shift - 1);
    return (remainder > half) - (remainder < half);
}

/* remainder / 2**shift (shift >= 1) rounded to the nearest integer, ties to even. */
static uint64_t divide_by_power_to_nearest_even(uint64_t remainder, int shift)
{
    uint64_t quotient, rest;
    int side;
    if (shift > 64) {
        return 0;
    }
    quotient = shift == 64 ? 0 : remainder >> shift;
    rest = shift == 64 ? remainder : remainder & ((UINT64_C(1) << shift) - 1);
    side = compare_with_half(rest, shift);
    return quotient + (side > 0 || (side == 0 && (quotient & 1)));
}

/* Round |x| > 0 (finite) to the format's precision with an exponent unbounded above: to a multiple
 * n of quantum = 2**(max(floor(log2|x|), emin) - M), the spacing of the format's values at |x|
 * (below 2**emin, the subnormals' spacing). Returns n and sets *quantum_exponent.
 * |x| = (n + f) * quantum with 0 <= f < 1, and the rounding moves one quantum away from zero:
 * nearest_even when f > 1/2, or f = 1/2 and n is odd; nearest_away when f >= 1/2; toward_zero
 * never; stochastic (the "stochastic" note, IEEE P3109) when r + random_bits >= 2**K, with r the
 * integer nearest f * 2**K, ties to even. */
static uint64_t round_magnitude(const Exact *x, const Format *f, Rounding rounding, uint32_t random_bits,
                                int random_bit_count, int *quantum_exponent)
{
    const int binade = x->exponent + floor_log2(x->significand); /* floor(log2 |x|) */
    const int emin = format_emin(f);
    const int quantum = (binade > emin ? binade : emin) - f->mantissa_bits;
    const int shift = quantum - x->exponent; /* |x| / quantum = significand / 2**shift */
    uint64_t n, remainder;                   /* f = remainder / 2**shift */
    int away = 0;
    *quantum_exponent = quantum;
    if (shift <= 0) {
        return x->significand << -shift; /* exact: n < 2**(M + 1) */
    }
    n = shift >= 64 ? 0 : x->significand >> shift;
    remainder = shift >= 64 ? x->significand : x->significand & ((UINT64_C(1) << shift) - 1);
    switch (rounding) {
    case NEAREST_EVEN: {
        const int side = compare_with_half(remainder, shift);
        away = side > 0 || (side == 0 && (n & 1));
        break;
    }
    case NEAREST_AWAY:
        away = compare_with_half(remainder, shift) >= 0;
        break;
    case TOWARD_ZERO:
        away = 0;
        break;
    case STOCHASTIC: {
        const int k = random_bit_count;
        const uint64_t r = shift <= k ? remainder << (k - shift) /* exact */
                                      : divide_by_power_to_nearest_even(remainder, shift - k);
        away = r + random_bits >= UINT64_C(1) << k;
        break;
    }
    }
    return n + (uint64_t)away;
}

/* ------------------------------------------------------------------------------ encoding -- */

/* The code of a finite overflow or of +-Inf (SATURATE: the largest value). The "codec" note:
 * saturate=false gives Inf (E5M2) or NaN (E4M3, FNUZ; E8M0 0xFF); saturate=true gives +-max
 * (E8M0 0xFE), FNUZ's +-Inf included. */
static unsigned overflow_code(const Format *f, int negative, int saturate)
{
    const unsigned sign = negative ? sign_bit(f) : 0u;
    if (saturate) {
        return sign | max_code(f);
    }
    return f->has_infinity ? sign | all_ones_exponent(f) : nan_code(f, negative);
}

/* The code of X in format F: the "codec" note (OFP8 rev 1.0's conversion; ONNX Cast-24 for FNUZ),
 * for every format of the table. */
static unsigned encode(const Exact *x, const Format *f, Rounding rounding, int saturate, uint32_t random_bits,
                       int random_bit_count)
{
    const int m = f->mantissa_bits, has_nan = f->nan_style != NAN_NONE;
    const int negative_zero_exists = f->is_signed && f->nan_style != NAN_NEGATIVE_ZERO;
    const unsigned sign = x->negative ? sign_bit(f) : 0u;
    int quantum_exponent;
    uint64_t n, code;
    if (x->kind == NOT_A_NUMBER) {
        return nan_code(f, x->negative && f->is_signed);
    }
    if (!f->is_signed && (x->negative || x->significand == 0)) {
        return nan_code(f, 0); /* E8M0: no zero, no negative numbers (the "E8M0" note) */
    }
    if (x->kind == INFINITE) { /* FP6/FP4 (no NaN) always saturate */
        return overflow_code(f, x->negative, saturate || !has_nan);
    }
    if (x->significand == 0) {
        return negative_zero_exists ? sign : 0u; /* FNUZ: -0 is +0 */
    }
    n = round_magnitude(x, f, rounding, random_bits, random_bit_count, &quantum_exponent);
    if (!f->has_subnormals && n < UINT64_C(1) << m) {
        n = UINT64_C(1) << m; /* E8M0: what lies below 2**-127 gives 2**-127 */
    }
    if (n == 0) {
        return negative_zero_exists ? sign : 0u; /* rounded to zero: the input's sign, but FNUZ */
    }
    /* n * 2**quantum_exponent, with quantum_exponent + M the exponent of its binade (emin for the
     * subnormals): the exponent field is that plus the bias and the mantissa field n - 2**M, so the
     * code is (field << M) + n - 2**M. A subnormal (field 1 less its implicit 1) gives n itself, and
     * n = 2**(M + 1) (a carry from rounding up) lands on the next binade's first code. */
    code = ((uint64_t)(quantum_exponent + m + f->bias) << m) + n - (UINT64_C(1) << m);
    if (code > max_code(f)) { /* overflow, checked after rounding; toward_zero saturates finite values */
        return overflow_code(f, x->negative, saturate || rounding == TOWARD_ZERO || !has_nan);
    }
    return sign | (unsigned)code;
}

/* -------------------------------------------------- MX block scales (OCP MX v1.0, 6.3) -- */

typedef enum { SCALE_FLOOR, SCALE_CEIL, SCALE_EVEN, SCALE_RCEIL } ScaleMode;

static ScaleMode scale_mode_named(const char *name)
{
    static const char *const names[] = {"floor", "ceil", "even", "rceil"};
    return (ScaleMode)index_named(name, names, 4, "scale_mode must be floor, ceil, even or rceil");
}

#define E8M0_NAN 0xFFu
#define SHARED_EXP_MIN (-127)
#define SHARED_EXP_MAX 127

/* The shared exponent of a block whose largest magnitude AMAX is finite and > 0, before the clamp
 * (the "mx" note), from amax's exponent and significand, never a float log2. With
 * amax = s * 2**e, s in [1, 2):
 *   floor: e - emax_elem (OCP MX v1.0 section 6.3)
 *   ceil:  e - emax_elem, plus 1 unless amax is a power of two
 *   even:  e - emax_elem, plus 1 where s rounded to M bits, ties away, is 2
 *   rceil: ceil(log2(amax / max_elem)); max_elem = s_max * 2**emax_elem, so amax / max_elem is
 *          (s / s_max) * 2**(e - emax_elem) with s / s_max in (1/2, 2): plus 1 where s > s_max. */
static int shared_exponent(const Exact *amax, const Format *element, ScaleMode mode)
{
    const int top = floor_log2(amax->significand), m = element->mantissa_bits;
    const int floor_shared = amax->exponent + top - format_emax(element);
    const uint64_t s = amax->significand << (63 - top); /* s * 2**63: bit 63 is the leading 1 */
    const uint64_t s_max = (uint64_t)((max_code(element) & ((1u << m) - 1)) | 1u << m) << (63 - m);
    switch (mode) {
    case SCALE_CEIL:
        return floor_shared + (s != UINT64_C(1) << 63);
    case SCALE_EVEN: /* s rounds up to 2 when its top M + 2 bits (the 1, M bits, the half) are all ones */
        return floor_shared + (s >> (62 - m) == (UINT64_C(1) << (m + 2)) - 1);
    case SCALE_RCEIL:
        return floor_shared + (s > s_max);
    default:
        return floor_shared;
    }
}

/* The E8M0 scale code of a block of float32 values; sets *shared_exp (0 for a NaN scale). A block
 * with a NaN gives 0xFF, and so does one with an Inf except under rceil, where Inf / max_elem is
 * 2**127 (0xFE, and the Inf saturates); an all-zero block gives 0x00; otherwise shared_exp
 * clamped to [-127, 127], plus 127. */
static unsigned block_scale(const Array *input, long start, long stop, const Format *element, ScaleMode mode,
                            int *shared_exp, uint32_t *amax_bits)
{
    long i;
    *amax_bits = 0; /* |x| as bits: for non-negative floats the order of bits is the order of values */
    for (i = start; i < stop; i++) {
        uint32_t magnitude = (uint32_t)float_bits_at(input, i) & 0x7FFFFFFFu;
        *amax_bits = magnitude > *amax_bits ? magnitude : *amax_bits; /* a NaN above Inf above all */
    }
    *shared_exp = 0;
    if (*amax_bits > 0x7F800000u || (*amax_bits == 0x7F800000u && mode != SCALE_RCEIL)) {
        return E8M0_NAN;
    }
    if (*amax_bits == 0x7F800000u) {
        *shared_exp = SHARED_EXP_MAX;
    } else if (*amax_bits == 0) {
        *shared_exp = SHARED_EXP_MIN;
    } else {
        Exact amax = exact_from_bits(*amax_bits, 8, 23);
        const int unclamped = shared_exponent(&amax, element, mode);
        *shared_exp = unclamped < SHARED_EXP_MIN ? SHARED_EXP_MIN
                      : unclamped > SHARED_EXP_MAX ? SHARED_EXP_MAX : unclamped;
    }
    return (unsigned)(*shared_exp + 127);
}

/* The code of element X of a block: x * 2**-shared_exp, exactly, encoded with saturation. */
static unsigned mx_element_code(uint32_t x_bits, int shared_exp, const Format *element, Rounding rounding)
{
    Exact x = exact_from_bits(x_bits, 8, 23);
    x.exponent -= shared_exp; /* (zero, Inf and NaN keep their class) */
    return encode(&x, element, rounding, 1, 0, 0);
}

/* ---------------------------------------------- NVFP4 (the "nvfp4" note), float32 steps -- */

/* Every step below is one float32 operation rounded to nearest even. Each result is stored in a
 * float variable, which C99 rounds to float even where FLT_EVAL_METHOD computes wider (one
 * operation on floats rounded to double or wider and then to float is rounded correctly), and
 * no expression holds a multiply and an add that a compiler could fuse. */

static float min_with_flt_max(float value) { return value > FLT_MAX ? FLT_MAX : value; }

/* S_enc = min(2688 / global_amax, FLT_MAX), 1 where global_amax is 0 (2688 = 448 * 6). */
static float nvfp4_encode_scale(float global_amax)
{
    float quotient;
    if (global_amax == 0.0f) {
        return 1.0f;
    }
    quotient = 2688.0f / global_amax;
    return min_with_flt_max(quotient);
}

/* The block scale multiplier S_enc * float32(1/6). */
static float nvfp4_scale_multiplier(float s_enc)
{
    const float one_sixth = 1.0f / 6.0f;
    const float multiplier = s_enc * one_sixth;
    return multiplier;
}

/* The E4M3 block scale code: e4m3_saturate(min(block_amax * multiplier, FLT_MAX)). */
static unsigned nvfp4_scale_code(float block_amax, float multiplier)
{
    const float product = block_amax * multiplier;
    const Exact scaled_amax = exact_from_bits(bits_of_float(min_with_flt_max(product)), 8, 23);
    return encode(&scaled_amax, format_named("E4M3"), NEAREST_EVEN, 1, 0, 0);
}

/* The element scale: min(1 / (S_dec_b * S_dec), FLT_MAX), with S_dec_b the value of the scale
 * code (1 / 0 is Inf, so FLT_MAX). */
static float nvfp4_element_scale(unsigned scale_code, float s_dec)
{
    const float s_dec_b = code_value(scale_code, format_named("E4M3"));
    const float denominator = s_dec_b * s_dec;
    float reciprocal;
    if (denominator == 0.0f) {
        return FLT_MAX;
    }
    reciprocal = 1.0f / denominator;
    return min_with_flt_max(reciprocal);
}

/* The E2M1 code of an element: e2m1_rne(clamp(x * element_scale, -6, 6)). */
static unsigned nvfp4_element_code(float x, float element_scale)
{
    const float product = x * element_scale;
    const float clamped = product > 6.0f ? 6.0f : product < -6.0f ? -6.0f : product;
    const Exact scaled = exact_from_bits(bits_of_float(clamped), 8, 23);
    return encode(&scaled, format_named("E2M1"), NEAREST_EVEN, 0, 0, 0);
}

/* ------------------------------------------------------------------------------ the checks -- */

typedef struct {
    const char *file;
    long mismatches;
    long checked; /* expected values compared */
} Tally;

/* One mismatching code: its index, the input's bits and value, both codes. */
static void report_code(Tally *tally, const char *array, long index, uint64_t input_bits, int item_size,
                        unsigned expected, unsigned got)
{
    if (++tally->mismatches <= MAX_REPORTED_MISMATCHES) {
        double input;
        if (item_size == 8) {
            memcpy(&input, &input_bits, sizeof input);
        } else {
            input = (double)float_of_bits((uint32_t)input_bits);
        }
        printf("  mismatch %s:%s[%ld]: input 0x%0*llX (%.17g): expected 0x%02X, this encoder gives 0x%02X\n",
               tally->file, array, index, 2 * item_size, (unsigned long long)input_bits, input, expected, got);
    }
}

/* One mismatching block scale: its row and block, the block amax's bits, both codes. */
static void report_scale(Tally *tally, const char *array, long row, long block, uint32_t amax_bits,
                         unsigned expected, unsigned got)
{
    if (++tally->mismatches <= MAX_REPORTED_MISMATCHES) {
        printf("  mismatch %s:%s[%ld, %ld]: block amax 0x%08lX (%.9g): expected scale 0x%02X, this encoder "
               "gives 0x%02X\n", tally->file, array, row, block, (unsigned long)amax_bits,
               (double)float_of_bits(amax_bits), expected, got);
    }
}

/* One mismatching float32 value: a scalar (NVFP4's global amax or S_enc; INDEX < 0) or element INDEX
 * of an array (NVFP4's dequantised values). */
static void report_float(Tally *tally, const char *array, long index, uint32_t expected, uint32_t got)
{
    char where[32] = "";
    if (index >= 0) {
        snprintf(where, sizeof where, "[%ld]", index);
    }
    if (++tally->mismatches <= MAX_REPORTED_MISMATCHES) {
        printf("  mismatch %s:%s%s: expected 0x%08lX (%.9g), this consumer gives 0x%08lX (%.9g)\n", tally->file,
               array, where, (unsigned long)expected, (double)float_of_bits(expected), (unsigned long)got,
               (double)float_of_bits(got));
    }
}

/* The value of option NAME=VALUE among the entry's COUNT options, or FALLBACK. */
static const char *option(char **arguments, int count, const char *name, const char *fallback)
{
    const size_t length = strlen(name);
    int i;
    for (i = 0; i < count; i++) {
        if (strncmp(arguments[i], name, length) == 0 && arguments[i][length] == '=') {
            return arguments[i] + length + 1;
        }
    }
    return fallback;
}

/* Exit 2 unless every option's name is one of ALLOWED (a NULL-terminated list). */
static void check_option_names(char **arguments, int count, const char *const *allowed)
{
    int i, known;
    for (i = 0; i < count; i++) {
        const size_t length = (size_t)(strchr(arguments[i], '=') - arguments[i]);
        const char *const *name;
        for (known = 0, name = allowed; *name != NULL && !known; name++) {
            known = strlen(*name) == length && strncmp(arguments[i], *name, length) == 0;
        }
        if (!known) {
            fail_usage("unknown option (see the usage in golden_consumer.c)", arguments[i]);
        }
        for (known = 0; known < i; known++) {
            if (strncmp(arguments[known], arguments[i], length + 1) == 0) {
                fail_usage("an option given twice", arguments[i]);
            }
        }
    }
}

/* TEXT as a decimal integer, all of it (no sign, no trailing characters), or a usage error. */
static long whole_number(const char *text, const char *what)
{
    char *end;
    long value;
    if (text[0] < '0' || text[0] > '9') {
        fail_usage(what, text);
    }
    errno = 0;
    value = strtol(text, &end, 10);
    if (*end != '\0' || errno == ERANGE) {
        fail_usage(what, text);
    }
    return value;
}

static int flag_argument(const char *text, const char *what)
{
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0) {
        fail_usage(what, text);
    }
    return text[0] == '1';
}

/* One decode entry: every code's value, bit for bit (NaN as NaN). */
static Tally check_decode(const char *directory, char **arguments)
{
    const char *file = arguments[0], *codes_name = arguments[1], *values_name = arguments[2];
    const Format *format = format_named(arguments[3]);
    Tally tally = {0, 0, 0};
    char path[4096];
    long size, i;
    unsigned char *zip;
    Array codes, values;
    tally.file = file;
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    codes = read_array(file, zip, size, codes_name, "|u1", 1);
    values = read_array(file, zip, size, values_name, "<f8", 8);
    if (codes.count != values.count) {
        fail_malformed(file, "the codes and the values differ in size");
    }
    for (i = 0; i < codes.count; i++) {
        const double expected = read_f64(&values, i), got = decode_to_double(codes.data[i], format);
        const uint64_t expected_bits = read_u64(values.data + 8 * i);
        uint64_t got_bits;
        memcpy(&got_bits, &got, sizeof got_bits);
        if (expected != expected ? got == got : got_bits != expected_bits) {
            if (++tally.mismatches <= MAX_REPORTED_MISMATCHES) {
                printf("  mismatch %s:%s[%ld]: code 0x%02X: expected %.17g, this decoder gives %.17g\n", file,
                       values_name, i, codes.data[i], expected, got);
            }
        }
    }
    tally.checked = codes.count;
    printf("%s decode %s %s:%s: %ld codes, %ld mismatches\n", tally.mismatches ? "FAIL" : "ok", format->name, file,
           values_name, codes.count, tally.mismatches);
    free(zip);
    return tally;
}

/* One codec entry: every input's code. */
static Tally check_codec(const char *directory, char **arguments, char **options, int option_count)
{
    static const char *const allowed[] = {"input_dtype", "rounding", "random_bits", "random_bit_count", NULL};
    const char *file = arguments[0], *input_name = arguments[1], *codes_name = arguments[2];
    const Format *format = format_named(arguments[3]);
    const int saturate = flag_argument(arguments[4], "SATURATE must be 0 or 1");
    const char *dtype = option(options, option_count, "input_dtype", "float32");
    const Rounding rounding = rounding_named(option(options, option_count, "rounding", "nearest_even"));
    const char *bits_name = option(options, option_count, "random_bits", NULL);
    const long bit_count = whole_number(option(options, option_count, "random_bit_count", "0"),
                                        "random_bit_count must be a whole number");
    const int item_size = strcmp(dtype, "float64") == 0 ? 8 : 4;
    Tally tally = {0, 0, 0};
    char path[4096];
    long size, i;
    unsigned char *zip;
    Array input, codes, random_bits;
    check_option_names(options, option_count, allowed);
    if (item_size == 4 && strcmp(dtype, "float32") != 0) {
        fail_usage("input_dtype must be float32 or float64", dtype);
    }
    if ((rounding == STOCHASTIC) != (bits_name != NULL) || (bits_name != NULL && (bit_count < 1 || bit_count > 32))) {
        fail_usage("rounding=stochastic needs random_bits=ARRAY and random_bit_count=K (1 to 32), and only it",
                   bits_name == NULL ? "no random bits" : bits_name);
    }
    tally.file = file;
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    input = read_array(file, zip, size, input_name, item_size == 8 ? "<f8" : "<f4", item_size);
    codes = read_array(file, zip, size, codes_name, "|u1", 1);
    if (codes.count != input.count) {
        fail_malformed(file, "the codes and the inputs differ in size");
    }
    if (bits_name != NULL) {
        random_bits = read_array(file, zip, size, bits_name, "|u1", 1);
        if (random_bits.count != input.count) {
            fail_malformed(file, "the random bits and the inputs differ in size");
        }
    }
    for (i = 0; i < input.count; i++) {
        const uint64_t bits = float_bits_at(&input, i);
        const Exact x = exact_from_float_bits(bits, item_size);
        uint32_t random = 0;
        unsigned got;
        if (bits_name != NULL) {
            random = random_bits.data[i];
            if (bit_count < 32 && random >> bit_count != 0) {
                fail_malformed(file, "a random bit value is not below 2**random_bit_count");
            }
        }
        if (x.kind == NOT_A_NUMBER && format->nan_style == NAN_NONE) {
            fail_malformed(file, "a NaN input for a format without NaN");
        }
        got = encode(&x, format, rounding, saturate, random, (int)bit_count);
        if (got != codes.data[i]) {
            report_code(&tally, codes_name, i, bits, item_size, codes.data[i], got);
        }
    }
    tally.checked = input.count;
    printf("%s codec %s %s %s saturate=%d %s:%s: %ld inputs, %ld mismatches\n", tally.mismatches ? "FAIL" : "ok",
           format->name, dtype, option(options, option_count, "rounding", "nearest_even"), saturate, file,
           codes_name, input.count, tally.mismatches);
    free(zip);
    return tally;
}

/* The number of blocks in each row of input (blocks of block_size along the last axis, a short
 * last one counted), after checking that scales holds one scale per block. */
static long blocks_per_row_checked(const char *file, const Array *input, const Array *scales, long block_size)
{
    const long blocks_per_row = (input->shape[1] + block_size - 1) / block_size;
    if (scales->shape[0] != input->shape[0] || scales->shape[1] != blocks_per_row) {
        fail_malformed(file, "the scales' shape does not match the blocks of the input");
    }
    return blocks_per_row;
}

/* One MX entry (OCP MX v1.0 section 6.3 and the "mx" note): each block's E8M0 scale, then, where
 * the scale is right and not NaN, its elements x * 2**-shared_exp, exactly, encoded with
 * saturation. Blocks run along the last axis; a short last block is as if zero-padded. */
static Tally check_mx(const char *directory, char **arguments, char **options, int option_count)
{
    static const char *const allowed[] = {"scale_mode", "rounding", NULL};
    const char *file = arguments[0], *input_name = arguments[1];
    const char *scales_name = arguments[2], *codes_name = arguments[3];
    const Format *element = format_named(arguments[4]);
    const long block_size = whole_number(arguments[5], "BLOCK_SIZE must be a whole number");
    const ScaleMode mode = scale_mode_named(option(options, option_count, "scale_mode", "floor"));
    const Rounding rounding = rounding_named(option(options, option_count, "rounding", "nearest_even"));
    Tally tally = {0, 0, 0};
    long size, rows, length, blocks_per_row, row, block;
    char path[4096];
    unsigned char *zip;
    Array input, scales, codes;
    check_option_names(options, option_count, allowed);
    if (block_size <= 0 || block_size > 1L << 30) { /* (the bound keeps a row's block count from overflowing) */
        fail_usage("BLOCK_SIZE must be a positive integer up to 2**30", arguments[5]);
    }
    if (rounding == STOCHASTIC || !element->is_signed || element->nan_style == NAN_NEGATIVE_ZERO) {
        fail_usage("an MX entry takes E4M3, E5M2, E3M2, E2M3 or E2M1 elements and no stochastic rounding",
                   arguments[4]);
    }
    tally.file = file;
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    input = read_array(file, zip, size, input_name, "<f4", 4);
    scales = read_array(file, zip, size, scales_name, "|u1", 1);
    codes = read_array(file, zip, size, codes_name, "|u1", 1);
    if (input.ndim != 2 || scales.ndim != 2 || codes.count != input.count) {
        fail_malformed(file, "MX arrays must be 2-d, with one code per input");
    }
    rows = input.shape[0];
    length = input.shape[1];
    blocks_per_row = blocks_per_row_checked(file, &input, &scales, block_size);
    for (row = 0; row < rows; row++) {
        for (block = 0; block < blocks_per_row; block++) {
            const long start = row * length + block * block_size;
            const long stop = block == blocks_per_row - 1 ? (row + 1) * length : start + block_size;
            const unsigned expected_scale = scales.data[row * blocks_per_row + block];
            int shared_exp;
            uint32_t amax_bits;
            unsigned scale = block_scale(&input, start, stop, element, mode, &shared_exp, &amax_bits);
            long i;
            tally.checked++;
            if (scale != expected_scale) {
                report_scale(&tally, scales_name, row, block, amax_bits, expected_scale, scale);
                continue; /* the codes depend on the scale */
            }
            if (scale == E8M0_NAN) {
                continue; /* the block decodes to NaN: its codes are don't care */
            }
            for (i = start; i < stop; i++) {
                const uint64_t bits = float_bits_at(&input, i);
                const unsigned got = mx_element_code((uint32_t)bits, shared_exp, element, rounding);
                tally.checked++;
                if (got != codes.data[i]) {
                    report_code(&tally, codes_name, i, bits, 4, codes.data[i], got);
                }
            }
        }
    }
    printf("%s mx %s block_size=%ld scale_mode=%s %s:%s,%s: %ld blocks, %ld elements, %ld values checked, "
           "%ld mismatches\n", tally.mismatches ? "FAIL" : "ok", element->name, block_size,
           option(options, option_count, "scale_mode", "floor"), file, scales_name, codes_name,
           rows * blocks_per_row, input.count, tally.checked, tally.mismatches);
    free(zip);
    return tally;
}

/* One NVFP4 entry (the "nvfp4" note: TransformerEngine's order of float32 operations): the tensor
 * amax (where not given), S_enc, then per block of 16 the E4M3 scale code and the E2M1 codes. */
static Tally check_nvfp4(const char *directory, char **arguments)
{
    const char *file = arguments[0], *input_name = arguments[1], *scales_name = arguments[2];
    const char *codes_name = arguments[3], *amax_name = arguments[4], *encode_scale_name = arguments[5];
    const int given = flag_argument(arguments[6], "GIVEN must be 0 or 1");
    const char *dequantized_name = arguments[7];
    const long block_size = 16;
    Tally tally = {0, 0, 0};
    long size, rows, length, blocks_per_row, row, block, i;
    char path[4096];
    unsigned char *zip;
    Array input, scales, codes, amax_array, encode_scale_array, dequantized;
    float global_amax, s_enc, s_dec, multiplier;
    tally.file = file;
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    input = read_array(file, zip, size, input_name, "<f4", 4);
    scales = read_array(file, zip, size, scales_name, "|u1", 1);
    codes = read_array(file, zip, size, codes_name, "|u1", 1);
    amax_array = read_array(file, zip, size, amax_name, "<f4", 4);
    encode_scale_array = read_array(file, zip, size, encode_scale_name, "<f4", 4);
    dequantized = read_array(file, zip, size, dequantized_name, "<f4", 4);
    if (input.ndim != 2 || scales.ndim != 2 || codes.count != input.count || dequantized.count != input.count
        || amax_array.ndim != 0 || encode_scale_array.ndim != 0) {
        fail_malformed(file, "NVFP4 arrays must be 2-d (one code and one dequantised value per input) and 0-d "
                       "(amax, S_enc)");
    }
    rows = input.shape[0];
    length = input.shape[1];
    blocks_per_row = blocks_per_row_checked(file, &input, &scales, block_size);
    for (i = 0; i < input.count; i++) {
        if ((float_bits_at(&input, i) & 0x7F800000u) == 0x7F800000u) {
            fail_malformed(file, "an NVFP4 input is NaN or Inf");
        }
    }

    /* the tensor amax: max |x| unless given */
    global_amax = float_of_bits((uint32_t)float_bits_at(&amax_array, 0));
    if (!given) {
        uint32_t amax_bits = 0;
        for (i = 0; i < input.count; i++) {
            uint32_t magnitude = (uint32_t)float_bits_at(&input, i) & 0x7FFFFFFFu;
            amax_bits = magnitude > amax_bits ? magnitude : amax_bits;
        }
        tally.checked++;
        if (amax_bits != bits_of_float(global_amax)) {
            report_float(&tally, amax_name, -1, bits_of_float(global_amax), amax_bits);
        }
    }
    /* S_enc, S_dec, and the block scale multiplier */
    s_enc = nvfp4_encode_scale(global_amax);
    tally.checked++;
    if (bits_of_float(s_enc) != (uint32_t)float_bits_at(&encode_scale_array, 0)) {
        report_float(&tally, encode_scale_name, -1, (uint32_t)float_bits_at(&encode_scale_array, 0),
                     bits_of_float(s_enc));
    }
    s_dec = 1.0f / s_enc;
    multiplier = nvfp4_scale_multiplier(s_enc);

    for (row = 0; row < rows; row++) {
        for (block = 0; block < blocks_per_row; block++) {
            const long start = row * length + block * block_size;
            const long stop = block == blocks_per_row - 1 ? (row + 1) * length : start + block_size;
            const unsigned expected_scale = scales.data[row * blocks_per_row + block];
            uint32_t amax_bits = 0;
            unsigned scale;
            float element_scale, factor;
            for (i = start; i < stop; i++) {
                uint32_t magnitude = (uint32_t)float_bits_at(&input, i) & 0x7FFFFFFFu;
                amax_bits = magnitude > amax_bits ? magnitude : amax_bits;
            }
            scale = nvfp4_scale_code(float_of_bits(amax_bits), multiplier);
            tally.checked++;
            if (scale != expected_scale) {
                report_scale(&tally, scales_name, row, block, amax_bits, expected_scale, scale);
                continue; /* the codes depend on the scale */
            }
            element_scale = nvfp4_element_scale(scale, s_dec);
            /* the dequantised values (the note: TransformerEngine's kernel, in float32, left to right; these
             * files' amaxes keep S_dec_b * global_amax within float32) */
            factor = code_value(scale, format_named("E4M3")) * global_amax; /* (one rounding a statement) */
            factor = factor * (float)(1.0 / 2688.0);
            for (i = start; i < stop; i++) {
                const uint64_t bits = float_bits_at(&input, i);
                const unsigned got = nvfp4_element_code(float_of_bits((uint32_t)bits), element_scale);
                float value;
                tally.checked++;
                if (got != codes.data[i]) {
                    report_code(&tally, codes_name, i, bits, 4, codes.data[i], got);
                    continue; /* the value depends on the code */
                }
                value = code_value(got, format_named("E2M1")) * factor;
                tally.checked++;
                if (bits_of_float(value) != (uint32_t)float_bits_at(&dequantized, i)) {
                    report_float(&tally, dequantized_name, i, (uint32_t)float_bits_at(&dequantized, i),
                                     bits_of_float(value));
                }
            }
        }
    }
    printf("%s nvfp4 given=%d %s:%s,%s: %ld blocks, %ld elements, %ld values checked, %ld mismatches\n",
           tally.mismatches ? "FAIL" : "ok", given, file, scales_name, codes_name, rows * blocks_per_row,
           input.count, tally.checked, tally.mismatches);
    free(zip);
    return tally;
}

/* ------------------------------------------------------ scaled GEMMs (the "gemm" note) -- */

static int is_nan_float(float x) { return x != x; }
static int is_finite_double(double x) { return x - x == 0.0; }
static double magnitude_of(double x) { return x < 0.0 ? -x : x; }

/* A dequantised element, as a float32 kernel forms it: one float32 multiplication, rounded. */
static float dequantized_float32(float decoded, float scale)
{
    const float value = decoded * scale;
    return value;
}

/* One operand of a GEMM: its codes (rows x columns) and one scale per block, by the note's layout
 * rule: a rows x columns array of codes with scales of R x C covers blocks of (rows / R) x
 * (columns / C). */
typedef struct {
    Array codes, scales;
    const Format *format;
    long block_rows, block_columns;
} Operand;

/* An operand's element format: one with a sign, subnormals and -0 (not FNUZ, not E8M0). */
static const Format *element_format_named(const char *name)
{
    const Format *format = format_named(name);
    if (!format->is_signed || !format->has_subnormals || format->nan_style == NAN_NEGATIVE_ZERO) {
        fail_usage("a gemm operand's FORMAT must be E4M3, E5M2, E3M2, E2M3 or E2M1", name);
    }
    return format;
}

static Operand read_operand(const char *file, const unsigned char *zip, long size, const char *codes_name,
                            const Format *format, const char *scales_name)
{
    Operand operand;
    long i;
    operand.format = format;
    operand.codes = read_array(file, zip, size, codes_name, "|u1", 1);
    operand.scales = read_array(file, zip, size, scales_name, "<f4", 4);
    if (operand.codes.ndim != 2 || operand.scales.ndim != 2 || operand.scales.shape[0] < 1
        || operand.scales.shape[1] < 1 || operand.codes.shape[0] % operand.scales.shape[0] != 0
        || operand.codes.shape[1] % operand.scales.shape[1] != 0) {
        fail_malformed(file, "gemm codes and scales must be 2-d, each scale dimension dividing the codes'");
    }
    for (i = 0; i < operand.codes.count; i++) {
        if (operand.codes.data[i] >> (operand.format->exponent_bits + operand.format->mantissa_bits + 1) != 0) {
            fail_malformed(file, "a gemm code has bits above its format's width");
        }
    }
    operand.block_rows = operand.codes.shape[0] / operand.scales.shape[0];
    operand.block_columns = operand.codes.shape[1] / operand.scales.shape[1];
    return operand;
}

/* The scale of element (row, column): the scale of its block. */
static long scale_index(const Operand *operand, long row, long column)
{
    return row / operand->block_rows * operand->scales.shape[1] + column / operand->block_columns;
}

/* Decode the operand's scale codes (E8M0 or E4M3) into *decoded (one float a scale, as the stored
 * scales) and compare each with the stored scale value, bit for bit (NaN with NaN). */
static void decode_scale_codes(Tally *tally, const Operand *operand, const Array *scale_codes, const char *codes_name,
                               const char *scales_name, const Format *scale_format, float *decoded)
{
    long i;
    if (scale_codes->ndim != 2 || scale_codes->shape[0] != operand->scales.shape[0]
        || scale_codes->shape[1] != operand->scales.shape[1]) {
        fail_malformed(tally->file, "gemm scale codes and scale values differ in shape");
    }
    for (i = 0; i < scale_codes->count; i++) {
        const unsigned code = scale_codes->data[i];
        const float stored = float_of_bits((uint32_t)float_bits_at(&operand->scales, i));
        decoded[i] = code_value(code, scale_format);
        tally->checked++;
        if (is_nan_float(decoded[i]) ? !is_nan_float(stored) : bits_of_float(decoded[i]) != bits_of_float(stored)) {
            if (++tally->mismatches <= MAX_REPORTED_MISMATCHES) {
                printf("  mismatch %s:%s[%ld, %ld]: code 0x%02X is %.9g, but %s holds %.9g\n", tally->file,
                       codes_name, i / scale_codes->shape[1], i % scale_codes->shape[1], code,
                       (double)decoded[i], scales_name, (double)stored);
            }
        }
    }
}

static void report_output(Tally *tally, const char *array, long row, long column, const char *what)
{
    if (++tally->mismatches <= MAX_REPORTED_MISMATCHES) {
        printf("  mismatch %s:%s[%ld, %ld]: %s\n", tally->file, array, row, column, what);
    }
}

/* Whether a double this consumer computed is the file's: bit for bit where double arithmetic rounds
 * each operation to double (FLT_EVAL_METHOD 0: SSE2, every 64-bit platform); within a few units in
 * the last place where it computes in a wider format first (x87's 64-bit significands, then double:
 * a double rounding that, unlike float's, is not innocuous for double). */
static int same_double(double got, double expected)
{
#if FLT_EVAL_METHOD == 0
    return got == expected;
#else
    return magnitude_of(got - expected) <= magnitude_of(expected) * 0x1p-50;
#endif
}

/* x rounded to double and stored: a product passed through it is never fused with the addition that
 * follows (GCC's -ffp-contract=fast, its default outside ISO C modes, fuses across statements). */
static double stored(double x)
{
    volatile double kept = x;
    return kept;
}

/* The "gemm" note's tolerance of one output, and (in *reference_bound) the reference's error bound, in
 * the note's order with one operation a statement: each result is rounded to double before the next
 * (x87 keeps no wider intermediate past an assignment in ISO C), and each product that an addition
 * follows goes through `stored`, so no compiler fuses the two (clang does within one expression by
 * default, GCC across statements outside ISO C modes). 0 for both where the reference is NaN or Inf. */
static double note_tolerance(double expected, double s, double c, long inner, double gamma_k, double acc,
                             double *reference_bound)
{
    double one_less_gamma, bound, exact_magnitude, accumulated, spacing_term, carried, before, rounded;
    if (!is_finite_double(expected)) {
        *reference_bound = 0.0;
        return 0.0;
    }
    one_less_gamma = 1.0 - gamma_k;
    bound = gamma_k * s;
    bound = bound / one_less_gamma;
    exact_magnitude = s / one_less_gamma;
    accumulated = exact_magnitude > 0.0 ? stored(acc * exact_magnitude) : 0.0;
    spacing_term = (double)(4 * inner + 4) * 0x1p-149;
    accumulated = accumulated + spacing_term;
    if (c > 0.0) {
        carried = 1.0 + acc;
        carried = stored(carried * c);
        accumulated = accumulated + carried;
    }
    before = magnitude_of(expected);
    before = before + bound;
    before = before + accumulated;
    rounded = stored(0x1p-24 * before);
    rounded = rounded + 0x1p-150;
    rounded = rounded + accumulated;
    rounded = rounded + bound;
    *reference_bound = bound;
    return rounded;
}

/* One GEMM entry (the "gemm" note): the scale codes' values; a float64 GEMM, whose sums are exact
 * for these inputs, against the reference and S, bit for bit; and a float32 kernel (dequantise in
 * float32, multiply and add in float32, k in order; NVFP4's tensor scales in the epilogue) against
 * the reference within the stored tolerance, NaN where it is NaN. */
static Tally check_gemm(const char *directory, char **arguments, char **options, int option_count)
{
    static const char *const allowed[] = {"scale_format", "a_scale_codes", "b_scale_codes", "a_tensor_scale",
                                          "b_tensor_scale", NULL};
    const char *file = arguments[0];
    const char *reference_name = arguments[7], *magnitude_name = arguments[8], *error_bound_name = arguments[9];
    const char *tolerance_name = arguments[10], *underflow_name = arguments[11];
    const char *scale_format_name = option(options, option_count, "scale_format", NULL);
    const char *a_scale_codes_name = option(options, option_count, "a_scale_codes", NULL);
    const char *b_scale_codes_name = option(options, option_count, "b_scale_codes", NULL);
    const char *a_tensor_name = option(options, option_count, "a_tensor_scale", NULL);
    const char *b_tensor_name = option(options, option_count, "b_tensor_scale", NULL);
    const Format *a_format = element_format_named(arguments[2]), *b_format = element_format_named(arguments[5]);
    const Format *scale_format = NULL;
    Tally tally = {0, 0, 0};
    char path[4096], what[256];
    long size, rows, inner, columns, i, j, k;
    unsigned char *zip;
    Operand a, b;
    Array reference, magnitude, error_bound, tolerance, underflow;
    double gamma_k, accumulator_bound;
    float *a_scales, *b_scales, *a32, *b32, a_tensor = 1.0f, b_tensor = 1.0f, alpha;
    double *a64, *b64;
    check_option_names(options, option_count, allowed);
    if ((a_scale_codes_name == NULL) != (b_scale_codes_name == NULL)
        || (a_scale_codes_name == NULL) != (scale_format_name == NULL)
        || (a_tensor_name == NULL) != (b_tensor_name == NULL)) {
        fail_usage("a gemm entry takes a_scale_codes, b_scale_codes and scale_format together, and "
                   "a_tensor_scale and b_tensor_scale together", file);
    }
    if (scale_format_name != NULL) {
        scale_format = format_named(scale_format_name);
        if (strcmp(scale_format->name, "E8M0") != 0 && strcmp(scale_format->name, "E4M3") != 0) {
            fail_usage("scale_format must be E8M0 or E4M3", scale_format_name);
        }
    }
    tally.file = file;
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    a = read_operand(file, zip, size, arguments[1], a_format, arguments[3]);
    b = read_operand(file, zip, size, arguments[4], b_format, arguments[6]);
    rows = a.codes.shape[0];
    inner = a.codes.shape[1];
    columns = b.codes.shape[1];
    reference = read_array(file, zip, size, reference_name, "<f8", 8);
    magnitude = read_array(file, zip, size, magnitude_name, "<f8", 8);
    error_bound = read_array(file, zip, size, error_bound_name, "<f8", 8);
    tolerance = read_array(file, zip, size, tolerance_name, "<f8", 8);
    underflow = read_array(file, zip, size, underflow_name, "<f8", 8);
    if (b.codes.shape[0] != inner || reference.ndim != 2 || reference.shape[0] != rows
        || reference.shape[1] != columns || magnitude.count != reference.count || error_bound.count != reference.count
        || tolerance.count != reference.count || underflow.count != reference.count) {
        fail_malformed(file, "gemm shapes: a_codes M x K, b_codes K x N, reference, magnitude, reference_error_bound, "
                       "tolerance and underflow_term M x N");
    }
    /* Higham's gamma_n = n u / (1 - n u): K roundings in float64 (u = 2**-53), and the float32 kernel's K + 3 */
    gamma_k = (double)inner * 0x1p-53 / (1.0 - (double)inner * 0x1p-53);
    accumulator_bound = (double)(inner + 3) * 0x1p-24 / (1.0 - (double)(inner + 3) * 0x1p-24);
    a_scales = malloc(sizeof *a_scales * (size_t)a.scales.count);
    b_scales = malloc(sizeof *b_scales * (size_t)b.scales.count);
    a32 = malloc(sizeof *a32 * (size_t)a.codes.count);
    b32 = malloc(sizeof *b32 * (size_t)b.codes.count);
    a64 = malloc(sizeof *a64 * (size_t)a.codes.count);
    b64 = malloc(sizeof *b64 * (size_t)b.codes.count);
    if (a_scales == NULL || b_scales == NULL || a32 == NULL || b32 == NULL || a64 == NULL || b64 == NULL) {
        fail_malformed(file, "out of memory");
    }

    /* the scales: decoded from their codes where the entry has them, else the stored float32 values */
    if (scale_format != NULL) {
        Array a_codes = read_array(file, zip, size, a_scale_codes_name, "|u1", 1);
        Array b_codes = read_array(file, zip, size, b_scale_codes_name, "|u1", 1);
        decode_scale_codes(&tally, &a, &a_codes, a_scale_codes_name, arguments[3], scale_format, a_scales);
        decode_scale_codes(&tally, &b, &b_codes, b_scale_codes_name, arguments[6], scale_format, b_scales);
    } else {
        for (i = 0; i < a.scales.count; i++) {
            a_scales[i] = float_of_bits((uint32_t)float_bits_at(&a.scales, i));
        }
        for (i = 0; i < b.scales.count; i++) {
            b_scales[i] = float_of_bits((uint32_t)float_bits_at(&b.scales, i));
        }
    }
    if (a_tensor_name != NULL) {
        Array a_tensor_array = read_array(file, zip, size, a_tensor_name, "<f4", 4);
        Array b_tensor_array = read_array(file, zip, size, b_tensor_name, "<f4", 4);
        if (a_tensor_array.ndim != 0 || b_tensor_array.ndim != 0) {
            fail_malformed(file, "gemm tensor scales must be 0-d");
        }
        a_tensor = float_of_bits((uint32_t)float_bits_at(&a_tensor_array, 0));
        b_tensor = float_of_bits((uint32_t)float_bits_at(&b_tensor_array, 0));
    }

    /* dequantised operands: exactly in double (code value * scale * tensor scale: at most 4 + 24 + 24
     * significant bits here, as the note's "exactly" needs), and as a float32 kernel does (the tensor
     * scales left to the epilogue) */
    for (i = 0; i < a.codes.count; i++) {
        const float decoded = code_value(a.codes.data[i], a.format);
        const float scale = a_scales[scale_index(&a, i / inner, i % inner)];
        a32[i] = dequantized_float32(decoded, scale);
        a64[i] = (double)decoded * (double)scale * (double)a_tensor;
    }
    for (i = 0; i < b.codes.count; i++) {
        const float decoded = code_value(b.codes.data[i], b.format);
        const float scale = b_scales[scale_index(&b, i / columns, i % columns)];
        b32[i] = dequantized_float32(decoded, scale);
        b64[i] = (double)decoded * (double)scale * (double)b_tensor;
    }
    alpha = a_tensor * b_tensor;

    for (i = 0; i < rows; i++) {
        for (j = 0; j < columns; j++) {
            const long at = i * columns + j;
            const double expected = read_f64(&reference, at), bound = read_f64(&tolerance, at);
            double sum = 0.0, sum_of_magnitudes = 0.0, error;
            float accumulator = 0.0f, output;
            for (k = 0; k < inner; k++) {
                const float product = a32[i * inner + k] * b32[k * columns + j];
                const double exact_product = a64[i * inner + k] * b64[k * columns + j];
                accumulator = accumulator + product;
                sum += exact_product;
                if (is_finite_double(a64[i * inner + k]) && is_finite_double(b64[k * columns + j])) {
                    sum_of_magnitudes += magnitude_of(exact_product);
                }
            }
            output = accumulator * alpha;
            tally.checked += 3;
            if (is_finite_double(expected) ? sum != expected : (expected != expected) != (sum != sum)) {
                snprintf(what, sizeof what, "the float64 GEMM gives %.17g, expected %.17g", sum, expected);
                report_output(&tally, reference_name, i, j, what);
            }
            if (sum_of_magnitudes != read_f64(&magnitude, at)) {
                snprintf(what, sizeof what, "sum |a b| is %.17g, expected %.17g", sum_of_magnitudes,
                         read_f64(&magnitude, at));
                report_output(&tally, magnitude_name, i, j, what);
            }
            {   /* the reference's error bound and the tolerance, from the note's formulas; the underflow
                 * term C is the file's (its derivation is minifp8.gemm's, not the note's) */
                const double c = read_f64(&underflow, at);
                double reference_bound;
                const double rebuilt = note_tolerance(expected, read_f64(&magnitude, at), c, inner, gamma_k,
                                                      accumulator_bound, &reference_bound);
                tally.checked += 2;
                if (!(c >= 0.0) || !same_double(reference_bound, read_f64(&error_bound, at))) {
                    snprintf(what, sizeof what, "the reference's error bound is %.17g, expected %.17g (C %.3g)",
                             reference_bound, read_f64(&error_bound, at), c);
                    report_output(&tally, error_bound_name, i, j, what);
                }
                if (!same_double(rebuilt, bound)) {
                    snprintf(what, sizeof what, "the note's tolerance is %.17g, expected %.17g", rebuilt, bound);
                    report_output(&tally, tolerance_name, i, j, what);
                }
            }
            error = magnitude_of((double)output - expected);
            if (expected != expected ? !is_nan_float(output) : !(error <= bound)) {
                snprintf(what, sizeof what, "the float32 kernel gives %.9g, reference %.17g: error %.3g, "
                         "tolerance %.3g", (double)output, expected, error, bound);
                report_output(&tally, tolerance_name, i, j, what);
            }
        }
    }
    printf("%s gemm %sx%s %ldx%ldx%ld %s:%s: %ld outputs, %ld values checked, %ld mismatches\n",
           tally.mismatches ? "FAIL" : "ok", a.format->name, b.format->name, rows, inner, columns, file,
           reference_name, rows * columns, tally.checked, tally.mismatches);
    free(a_scales);
    free(b_scales);
    free(a32);
    free(b32);
    free(a64);
    free(b64);
    free(zip);
    return tally;
}

/* ---------------------------------------------------------------------------------- main -- */

int main(int argc, char **argv)
{
    long entries = 0, checked = 0, mismatches = 0;
    int next = 2;
    if (argc < 3) {
        fprintf(stderr, "usage: golden_consumer DIR ENTRY...  (ENTRY: decode FILE CODES VALUES FORMAT | "
                "codec FILE INPUT CODES FORMAT SATURATE "
                "[OPTION=VALUE...] | mx FILE INPUT SCALES CODES ELEMENT_FORMAT BLOCK_SIZE [OPTION=VALUE...] | "
                "nvfp4 FILE INPUT SCALES CODES GLOBAL_AMAX ENCODE_SCALE GIVEN DEQUANTIZED | gemm FILE A_CODES A_FORMAT "
                "A_SCALES B_CODES B_FORMAT B_SCALES REFERENCE MAGNITUDE ERROR_BOUND TOLERANCE UNDERFLOW_TERM "
                "[OPTION=VALUE...]; see golden_consumer.c)\n");
        return 2;
    }
    while (next < argc) {
        const char *kind = argv[next];
        const int fixed = strcmp(kind, "decode") == 0 ? 4 : strcmp(kind, "codec") == 0 ? 5 : strcmp(kind, "mx") == 0 ? 6
                          : strcmp(kind, "nvfp4") == 0 ? 8 : strcmp(kind, "gemm") == 0 ? 12 : -1;
        int options = 0;
        Tally tally;
        if (fixed < 0 || next + 1 + fixed > argc) {
            fprintf(stderr, "golden_consumer: error: expected an entry (decode with 4 arguments, codec with 5, "
                    "mx with 6, nvfp4 with 8, gemm with 12) at argument %d, got %s\n", next, kind);
            return 2;
        }
        while (next + 1 + fixed + options < argc && strchr(argv[next + 1 + fixed + options], '=') != NULL) {
            options++;
        }
        if (strcmp(kind, "decode") == 0) {
            if (options != 0) {
                fail_usage("a decode entry takes no options", argv[next + 1 + fixed]);
            }
            tally = check_decode(argv[1], argv + next + 1);
        } else if (strcmp(kind, "codec") == 0) {
            tally = check_codec(argv[1], argv + next + 1, argv + next + 1 + fixed, options);
        } else if (strcmp(kind, "mx") == 0) {
            tally = check_mx(argv[1], argv + next + 1, argv + next + 1 + fixed, options);
        } else if (strcmp(kind, "gemm") == 0) {
            tally = check_gemm(argv[1], argv + next + 1, argv + next + 1 + fixed, options);
        } else {
            if (options != 0) {
                fail_usage("an nvfp4 entry takes no options", argv[next + 1 + fixed]);
            }
            tally = check_nvfp4(argv[1], argv + next + 1);
        }
        if (tally.checked == 0) {
            fail_malformed(tally.file, "the entry holds no value to check");
        }
        checked += tally.checked;
        mismatches += tally.mismatches;
        next += 1 + fixed + options;
        entries++;
    }
    printf("summary: %ld entries, %ld values checked, %ld mismatches\n", entries, checked, mismatches);
    return mismatches == 0 ? 0 : 1;
}
