/* Check an E2M1 decoder against spec/vectors/e2m1/decode.json.
 * Build and run from the repository root:
 *   cc -std=c99 -o e2m1_decode docs/snippets/e2m1_decode.c && ./e2m1_decode spec/vectors/e2m1/decode.json
 * The vector files hold one case per line, so a line-based scanf reads them without a JSON
 * library; values are hex floats, which strtod parses exactly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* E2M1: sign bit, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal. */
static float e2m1_decode(unsigned code) {
    unsigned sign = (code >> 3) & 1, exponent = (code >> 1) & 3, mantissa = code & 1;
    float magnitude = exponent == 0 ? mantissa * 0.5f
                                    : (1.0f + mantissa * 0.5f) * (float)(1u << (exponent - 1));
    return sign ? -magnitude : magnitude;
}

int main(int argc, char **argv) {
    FILE *file = fopen(argc > 1 ? argv[1] : "spec/vectors/e2m1/decode.json", "r");
    if (!file) { perror("decode.json"); return 2; }
    char line[512], value[64];
    unsigned code, want_bits;
    int cases = 0, failures = 0;
    while (fgets(line, sizeof line, file)) {
        if (sscanf(line, " {\"code\": \"%x\", \"value\": \"%63[^\"]\", \"float32_bits\": \"%x\"",
                   &code, value, &want_bits) != 3)
            continue; /* not a case line */
        float got = e2m1_decode(code);
        uint32_t got_bits;
        memcpy(&got_bits, &got, sizeof got_bits); /* compare bit patterns, never values */
        if (got_bits != want_bits || (double)got != strtod(value, NULL)) {
            printf("code 0x%X: got 0x%08X, want 0x%08X (%s)\n", code, got_bits, want_bits, value);
            failures++;
        }
        cases++;
    }
    fclose(file);
    printf("%d cases, %d failures\n", cases, failures);
    return failures != 0 || cases == 0;
}
