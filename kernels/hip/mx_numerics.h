// Device arithmetic shared by the kernels: IEEE binary formats taken apart and rounded with
// integer operations only, so the result is the same bits on the CPU, on AMD and on NVIDIA,
// whatever the compiler does with floating point (contraction, flush-to-zero).
// Spec: spec/README.md ("Encoding floats": round to nearest-even on the format's quantum,
// carry into the next binade), spec/mx.md, spec/e4m3fn.md, spec/e4m3fnuz.md.
#pragma once

#include "hip_platform.h"

// Helpers run on the device and, for launch arithmetic, on the host.
#define MXF_HD __host__ __device__ __forceinline__

namespace mxf {

/// Element dtypes a kernel reads or writes (the Python side passes these numbers).
enum Dtype : int { kFloat32 = 0, kBfloat16 = 1, kFloat16 = 2, kFloat64 = 3 };

/// An IEEE-style binary format: exponent and mantissa widths, bias.
struct Binary {
  int ebits, mbits, bias;
};

// Functions rather than constants: nvcc does not let device code read namespace-scope
// constexpr objects.
MXF_HD constexpr Binary f32_layout() { return {8, 23, 127}; }
MXF_HD constexpr Binary bf16_layout() { return {8, 7, 127}; }
MXF_HD constexpr Binary f16_layout() { return {5, 10, 15}; }
MXF_HD constexpr Binary f64_layout() { return {11, 52, 1023}; }

MXF_HD int msb64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(static_cast<long long>(v));
#else
  return 63 - __builtin_clzll(v);
#endif
}

/// A finite value taken apart: |value| = sig * 2**exp (sig 0 for zero).
struct Parts {
  bool negative;
  bool nan;
  bool inf;
  uint64_t sig;
  int exp;
};

/// ``bits`` (the low 1 + ebits + mbits bits) of format ``f`` taken apart.
MXF_HD Parts unpack(uint64_t bits, Binary f) {
  const uint64_t mantissa = bits & ((uint64_t{1} << f.mbits) - 1);
  const int field = static_cast<int>((bits >> f.mbits) & ((1u << f.ebits) - 1));
  Parts p;
  p.negative = (bits >> (f.ebits + f.mbits)) & 1;
  const bool top = field == (1 << f.ebits) - 1;
  p.nan = top && mantissa != 0;
  p.inf = top && mantissa == 0;
  p.sig = field ? mantissa | (uint64_t{1} << f.mbits) : mantissa;
  p.exp = (field ? field : 1) - f.bias - f.mbits;
  return p;
}

/// floor(log2(sig * 2**exp)) for sig > 0.
MXF_HD int floor_log2(uint64_t sig, int exp) { return msb64(sig) + exp; }

/// The magnitude code of sig * 2**exp (sig < 2**62) rounded to nearest (ties to even, or away
/// from zero with ``away``) on the grid of a format with ``mbits`` mantissa bits and bias
/// ``bias`` (subnormals included), with an unbounded exponent field: codes are ordered like
/// values, so the caller compares the result with the format's largest code to saturate or to
/// make Inf.
MXF_HD uint64_t round_to_code(uint64_t sig, int exp, int mbits, int bias, bool away = false) {
  if (sig == 0) return 0;
  int e = floor_log2(sig, exp);
  if (e < 1 - bias) e = 1 - bias;  // below the normal range the quantum stays 2**(1-bias-mbits)
  const int shift = (e - mbits) - exp;  // right shift that puts the quantum at bit 0
  uint64_t q;
  if (shift <= 0) {
    q = sig << -shift;
  } else if (shift > 62) {
    q = 0;  // less than half the smallest quantum
  } else {
    q = sig >> shift;
    const uint64_t rest = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (away || (q & 1)))) ++q;
  }
  const uint64_t implicit = uint64_t{1} << mbits;
  if (q < implicit) return q;  // subnormal (or zero): exponent field 0
  // A significand that carried to 2**(mbits+1) adds one to the exponent field by itself.
  return (static_cast<uint64_t>(e + bias - 1) << mbits) + q;
}

/// sig * 2**exp rounded to nearest-even into IEEE format ``f`` (overflow to Inf), as bits.
MXF_HD uint64_t round_to_ieee(bool negative, uint64_t sig, int exp, Binary f) {
  const uint64_t inf = ((uint64_t{1} << f.ebits) - 1) << f.mbits;
  uint64_t code = round_to_code(sig, exp, f.mbits, f.bias);
  if (code > inf) code = inf;
  return code | (static_cast<uint64_t>(negative) << (f.ebits + f.mbits));
}

/// The canonical quiet NaN of ``f`` (sign clear): exponent all ones, mantissa MSB set.
MXF_HD uint64_t quiet_nan(Binary f) {
  return (((uint64_t{1} << f.ebits) - 1) << f.mbits) | (uint64_t{1} << (f.mbits - 1));
}

MXF_HD Binary binary_of(int dtype) {
  return dtype == kFloat32    ? f32_layout()
       : dtype == kBfloat16 ? bf16_layout()
       : dtype == kFloat16  ? f16_layout()
                            : f64_layout();
}

/// Bytes per element of ``dtype``.
MXF_HD int width_of(int dtype) {
  return dtype == kFloat32 ? 4 : dtype == kFloat64 ? 8 : 2;
}

/// Element ``i`` of an array of ``dtype`` as raw bits.
MXF_HD uint64_t load_bits(const void* base, int64_t i, int dtype) {
  switch (width_of(dtype)) {
    case 2: return static_cast<const uint16_t*>(base)[i];
    case 4: return static_cast<const uint32_t*>(base)[i];
    default: return static_cast<const uint64_t*>(base)[i];
  }
}

/// True when ``count`` elements of ``bytes`` each from ``p`` can move as 16-byte vectors.
MXF_HD bool vector_aligned(const void* p, int count, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0 && (count * bytes) % 16 == 0;
}

/// ``count * bytes`` bytes (a multiple of 16, 16-byte aligned) as 16-byte loads.
MXF_HD void load_vectors(const void* p, void* out, int count, int bytes) {
  const uint4* src = static_cast<const uint4*>(p);
  uint4* dst = static_cast<uint4*>(out);
  for (int v = 0; v < count * bytes / 16; ++v) dst[v] = src[v];
}

}  // namespace mxf

namespace mxf {

/// ``|value| = magnitude`` as Parts (an integer such as an INT4 value).
MXF_HD Parts integer_parts(int value) {
  return Parts{value < 0, false, false, static_cast<uint64_t>(value < 0 ? -value : value), 0};
}

/// a * b rounded once to nearest-even into ``f`` (IEEE: 0 * Inf is NaN; NaN is the canonical
/// quiet NaN). Operands of up to 31 significant bits each.
MXF_HD uint64_t multiply(Parts a, Parts b, Binary f) {
  const bool negative = a.negative != b.negative;
  const uint64_t sign = static_cast<uint64_t>(negative) << (f.ebits + f.mbits);
  if (a.nan || b.nan || (a.inf && b.sig == 0) || (b.inf && a.sig == 0)) return quiet_nan(f);
  if (a.inf || b.inf) return (((uint64_t{1} << f.ebits) - 1) << f.mbits) | sign;
  return round_to_ieee(negative, a.sig * b.sig, a.exp + b.exp, f);
}

/// ``value`` (bits of format ``from``) rounded once into ``to`` (NaN: canonical quiet NaN).
MXF_HD uint64_t convert(uint64_t value, Binary from, Binary to) {
  const Parts p = unpack(value, from);
  if (p.nan) return quiet_nan(to);
  if (p.inf) return (((uint64_t{1} << to.ebits) - 1) << to.mbits) |
                    (static_cast<uint64_t>(p.negative) << (to.ebits + to.mbits));
  return round_to_ieee(p.negative, p.sig, p.exp, to);
}

/// a / b rounded once to nearest-even into ``f``, for finite a and finite nonzero b (long
/// division of the significands with a sticky bit: exact rounding, no floating point).
MXF_HD uint64_t divide(Parts a, Parts b, Binary f) {
  const bool negative = a.negative != b.negative;
  if (a.sig == 0) return static_cast<uint64_t>(negative) << (f.ebits + f.mbits);
  const int shift = 62 - msb64(a.sig);
  const uint64_t numerator = a.sig << shift;
  const uint64_t quotient = numerator / b.sig;
  const uint64_t sticky = numerator % b.sig != 0;
  return round_to_ieee(negative, (quotient << 1) | sticky, a.exp - b.exp - shift - 1, f);
}

}  // namespace mxf
