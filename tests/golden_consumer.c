/*
 * golden_consumer.c: a consumer of minifp8's golden files in C99, standard library only.
 *
 * It proves that the files of `python -m minifp8.golden` can be read and checked without Python:
 * it opens each .npz (a zip archive) with its own zip reader, parses the .npy headers, and
 * compares the expected codes in the file with the codes of its own FP8 encoder, written from the
 * OCP 8-bit Floating Point Specification (OFP8) rev 1.0 and, for MX scales, the OCP Microscaling
 * Formats (MX) v1.0 specification, section 6.3. tests/test_golden_c.py compiles and runs it.
 *
 * Usage: golden_consumer DIR ENTRY...   where each ENTRY is one of
 *   codec FILE INPUT CODES FORMAT SATURATE
 *       FORMAT is E4M3 or E5M2 and SATURATE is 0 or 1; INPUT is a float32 array and CODES the
 *       uint8 codes of rounding to nearest, ties to even
 *   mx FILE INPUT SCALES CODES ELEMENT_FORMAT BLOCK_SIZE
 *       the "floor" scale mode: INPUT float32 rows, blocked along the last axis, SCALES the E8M0
 *       scale codes, CODES the element codes (don't care in a block whose scale is 0xFF)
 * FILE is relative to DIR; the array names are those of manifest.json's "arrays" (without .npy).
 *
 * Output: one line per entry, then "summary: N entries, M values checked, K mismatches".
 * Exit status: 0 every code matches, 1 some code differs, 2 bad usage or a malformed file.
 */
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
        if ((long)offset + 46 > end || read_u32(central) != 0x02014b50u) {
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
    int ndim;
    long count; /* the product of shape */
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

/* ------------------------------------------------------------------- the FP8 encoder (OFP8) -- */

typedef struct {
    const char *name;
    int mantissa_bits; /* M */
    int emin;          /* exponent of the smallest normal: 1 - bias */
    int emax;          /* exponent of the largest normal */
    unsigned max_code; /* the largest finite magnitude: E4M3 S.1111.110 (448), E5M2 S.11110.11 (57344) */
    unsigned nan_code; /* the NaN minifp8 writes (manifest notes): E4M3 S.1111.111, E5M2 S.11111.10 */
    int has_inf;       /* E5M2: S.11111.00; E4M3 has no Inf */
} Format;

static const Format E4M3 = {"E4M3", 3, -6, 8, 0x7E, 0x7F, 0};
static const Format E5M2 = {"E5M2", 2, -14, 15, 0x7B, 0x7E, 1};

static int floor_log2(uint32_t n) /* n > 0 */
{
    int result = -1;
    while (n != 0) {
        n >>= 1;
        result++;
    }
    return result;
}

/* The code of (float32 with bits BITS) * 2**SCALE_EXPONENT, exactly, rounded to nearest, ties to
 * even. OFP8 rev 1.0: round to the format's precision first, then a rounded magnitude above the
 * largest finite value overflows, to max with saturation, else to Inf (E5M2) or NaN (E4M3, which
 * has no Inf); Inf saturates to max too; NaN stays NaN; the sign bit is always the input's. */
static unsigned encode_fp8(uint32_t bits, int scale_exponent, const Format *format, int saturate)
{
    const unsigned sign = (bits >> 31) << 7;
    const uint32_t exponent_field = (bits >> 23) & 0xFF, fraction = bits & 0x7FFFFF;
    const int m = format->mantissa_bits;
    uint32_t significand, n, code;
    int lsb_exponent, exponent, quantum_exponent, shift;
    if (exponent_field == 0xFF) {
        if (fraction != 0) {
            return sign | format->nan_code;
        }
        return sign | (saturate ? format->max_code : format->has_inf ? 0x7Cu : format->nan_code);
    }
    /* |x| * 2**scale_exponent = significand * 2**lsb_exponent exactly */
    significand = exponent_field == 0 ? fraction : fraction | 0x800000u;
    if (significand == 0) {
        return sign; /* +-0 */
    }
    lsb_exponent = (exponent_field == 0 ? -149 : (int)exponent_field - 150) + scale_exponent;
    exponent = lsb_exponent + floor_log2(significand); /* floor(log2 |x|) */
    /* the spacing of the format's values at |x|: 2**(max(exponent, emin) - M) (subnormals below emin) */
    quantum_exponent = (exponent > format->emin ? exponent : format->emin) - m;
    shift = quantum_exponent - lsb_exponent;
    if (shift <= 0) {
        n = significand << -shift; /* exact: n < 2**(M + 1) */
    } else {
        uint32_t remainder, half;
        if (shift > 25) {
            shift = 25; /* significand < 2**24 <= half: rounds to 0 either way */
        }
        n = significand >> shift;
        remainder = significand & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (remainder > half || (remainder == half && (n & 1u))) {
            n++; /* to nearest, ties to even */
        }
    }
    /* |x| rounds to n * 2**quantum_exponent. Codes count up with the magnitude: subnormals are
     * codes 0 to 2**M - 1 (quantum 2**(emin - M)), and each binade above adds 2**M codes, so the
     * code is n plus 2**M for every binade above emin; a carry of n to 2**(M+1) lands right. */
    code = ((uint32_t)(quantum_exponent - (format->emin - m)) << m) + n;
    if (code > format->max_code) {
        return sign | (saturate ? format->max_code : format->has_inf ? 0x7Cu : format->nan_code);
    }
    return sign | code;
}

static const Format *format_named(const char *name)
{
    if (strcmp(name, "E4M3") == 0) {
        return &E4M3;
    }
    if (strcmp(name, "E5M2") == 0) {
        return &E5M2;
    }
    fprintf(stderr, "golden_consumer: error: format must be E4M3 or E5M2, got %s\n", name);
    exit(2);
}

static void report_mismatch(long *mismatches, const char *file, const char *array, long index,
                            uint32_t input_bits, unsigned expected, unsigned got)
{
    if (++*mismatches <= MAX_REPORTED_MISMATCHES) {
        float input;
        memcpy(&input, &input_bits, sizeof input);
        printf("  mismatch %s:%s[%ld]: input 0x%08lX (%.9g): expected 0x%02X, this encoder gives 0x%02X\n",
               file, array, index, (unsigned long)input_bits, (double)input, expected, got);
    }
}

/* ------------------------------------------------------------------------------ the checks -- */

/* One codec entry; returns its number of mismatches and adds its inputs to *checked. */
static long check_codec(const char *directory, char **arguments, long *checked)
{
    const char *file = arguments[0], *input_name = arguments[1], *codes_name = arguments[2];
    const Format *format = format_named(arguments[3]);
    int saturate = strcmp(arguments[4], "1") == 0;
    char path[4096];
    long size, i, mismatches = 0;
    unsigned char *zip;
    Array input, codes;
    if (!saturate && strcmp(arguments[4], "0") != 0) {
        fprintf(stderr, "golden_consumer: error: SATURATE must be 0 or 1, got %s\n", arguments[4]);
        exit(2);
    }
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    input = read_array(file, zip, size, input_name, "<f4", 4);
    codes = read_array(file, zip, size, codes_name, "|u1", 1);
    if (codes.count != input.count) {
        fail_malformed(file, "the codes and the inputs differ in size");
    }
    for (i = 0; i < input.count; i++) {
        uint32_t bits = read_u32(input.data + 4 * i);
        unsigned got = encode_fp8(bits, 0, format, saturate);
        if (got != codes.data[i]) {
            report_mismatch(&mismatches, file, codes_name, i, bits, codes.data[i], got);
        }
    }
    printf("%s codec %s saturate=%d %s:%s: %ld inputs, %ld mismatches\n", mismatches ? "FAIL" : "ok",
           format->name, saturate, file, codes_name, input.count, mismatches);
    free(zip);
    *checked += input.count;
    return mismatches;
}

/* One MX entry, scale mode floor (OCP MX v1.0 section 6.3): shared_exp = floor(log2(amax)) -
 * emax_elem, from the amax's exponent bits, clamped to [-127, 127]; scale code shared_exp + 127;
 * an all-zero block gets 0x00; a NaN or Inf in the block gives 0xFF (and don't-care codes).
 * Elements are x * 2**-shared_exp, exact, encoded with saturation. Checks scales and codes. */
static long check_mx(const char *directory, char **arguments, long *checked)
{
    const char *file = arguments[0], *input_name = arguments[1];
    const char *scales_name = arguments[2], *codes_name = arguments[3];
    const Format *format = format_named(arguments[4]);
    long block_size = strtol(arguments[5], NULL, 10), size, rows, length, blocks_per_row, row, block;
    long mismatches = 0, blocks_checked = 0;
    char path[4096];
    unsigned char *zip;
    Array input, scales, codes;
    if (block_size <= 0) {
        fprintf(stderr, "golden_consumer: error: BLOCK_SIZE must be a positive integer, got %s\n", arguments[5]);
        exit(2);
    }
    zip = read_whole_file(join_path(path, sizeof path, directory, file), &size);
    input = read_array(file, zip, size, input_name, "<f4", 4);
    scales = read_array(file, zip, size, scales_name, "|u1", 1);
    codes = read_array(file, zip, size, codes_name, "|u1", 1);
    if (input.ndim != 2 || scales.ndim != 2 || codes.count != input.count) {
        fail_malformed(file, "MX arrays must be 2-d, with one code per input");
    }
    rows = input.shape[0];
    length = input.shape[1];
    blocks_per_row = (length + block_size - 1) / block_size; /* a short last block, as if zero-padded */
    if (scales.shape[0] != rows || scales.shape[1] != blocks_per_row) {
        fail_malformed(file, "the scales' shape does not match the blocks of the input");
    }
    for (row = 0; row < rows; row++) {
        for (block = 0; block < blocks_per_row; block++) {
            long start = row * length + block * block_size, stop = start + block_size, i;
            uint32_t amax_bits = 0; /* |x| as bits: for non-negative floats the order of bits is the order of values */
            int shared_exponent;
            unsigned expected_scale = scales.data[row * blocks_per_row + block], scale;
            if (stop > (row + 1) * length) {
                stop = (row + 1) * length;
            }
            for (i = start; i < stop; i++) {
                uint32_t magnitude = read_u32(input.data + 4 * i) & 0x7FFFFFFFu;
                amax_bits = magnitude > amax_bits ? magnitude : amax_bits; /* Inf and NaN above every finite */
            }
            if (amax_bits >= 0x7F800000u) {
                scale = 0xFF;
                shared_exponent = 0;
            } else if (amax_bits == 0) {
                scale = 0x00;
                shared_exponent = -127;
            } else {
                int amax_exponent = (amax_bits >> 23) != 0 ? (int)(amax_bits >> 23) - 127 : floor_log2(amax_bits) - 149;
                shared_exponent = amax_exponent - format->emax;
                shared_exponent = shared_exponent < -127 ? -127 : shared_exponent > 127 ? 127 : shared_exponent;
                scale = (unsigned)(shared_exponent + 127);
            }
            blocks_checked++;
            if (scale != expected_scale) {
                if (++mismatches <= MAX_REPORTED_MISMATCHES) {
                    printf("  mismatch %s:%s[%ld, %ld]: block amax bits 0x%08lX: expected scale 0x%02X, this "
                           "encoder gives 0x%02X\n", file, scales_name, row, block, (unsigned long)amax_bits,
                           expected_scale, scale);
                }
                continue;
            }
            if (scale == 0xFF) {
                continue; /* the block decodes to NaN: its codes are don't care */
            }
            for (i = start; i < stop; i++) {
                uint32_t bits = read_u32(input.data + 4 * i);
                unsigned got = encode_fp8(bits, -shared_exponent, format, 1);
                if (got != codes.data[i]) {
                    report_mismatch(&mismatches, file, codes_name, i, bits, codes.data[i], got);
                }
            }
        }
    }
    printf("%s mx %s block_size=%ld %s:%s,%s: %ld blocks, %ld elements, %ld mismatches\n",
           mismatches ? "FAIL" : "ok", format->name, block_size, file, scales_name, codes_name,
           blocks_checked, input.count, mismatches);
    free(zip);
    *checked += input.count;
    return mismatches;
}

int main(int argc, char **argv)
{
    long entries = 0, checked = 0, mismatches = 0;
    int next = 2;
    if (argc < 3) {
        fprintf(stderr, "usage: golden_consumer DIR ENTRY...  (ENTRY: codec FILE INPUT CODES FORMAT SATURATE |"
                " mx FILE INPUT SCALES CODES ELEMENT_FORMAT BLOCK_SIZE)\n");
        return 2;
    }
    while (next < argc) {
        if (strcmp(argv[next], "codec") == 0 && next + 6 <= argc) {
            mismatches += check_codec(argv[1], argv + next + 1, &checked);
            next += 6;
        } else if (strcmp(argv[next], "mx") == 0 && next + 7 <= argc) {
            mismatches += check_mx(argv[1], argv + next + 1, &checked);
            next += 7;
        } else {
            fprintf(stderr, "golden_consumer: error: expected an entry (codec with 5 arguments, mx with 6) at "
                    "argument %d, got %s\n", next, argv[next]);
            return 2;
        }
        entries++;
    }
    printf("summary: %ld entries, %ld values checked, %ld mismatches\n", entries, checked, mismatches);
    return mismatches == 0 ? 0 : 1;
}
