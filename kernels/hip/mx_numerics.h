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

// -- float32 arithmetic ---------------------------------------------------------------------
// Where a plan says one correctly rounded float32 operation suffices (mxformats.kernels
// mx_plan.fast_k_limit, DequantizePlan.product, the NVFP4 quotient), the kernels use the
// hardware's: IEEE 754 binary32 addition, subtraction, multiplication and division rounded to
// nearest-even, subnormals kept. On NVIDIA, the __f*_rn intrinsics, which nvcc never contracts
// or approximates (CUDA C++ Programming Guide, "Intrinsic Functions"); on AMD, HIP's __f*_rn
// (amd_math_functions.h: the plain operator) under -ffp-contract=off, with HIP-Clang's default
// IEEE denormal mode and correctly rounded division; on the CPU, SSE arithmetic under
// -ffp-contract=off. A NaN result's payload differs between them, so callers test NaN-ness
// only, never store those bits.

MXF_HD float as_float(uint32_t bits) {
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
}

MXF_HD uint32_t float_bits(float value) {
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  return bits;
}

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
MXF_HD float add_rn(float a, float b) { return __fadd_rn(a, b); }
MXF_HD float sub_rn(float a, float b) { return __fsub_rn(a, b); }
MXF_HD float mul_rn(float a, float b) { return __fmul_rn(a, b); }
MXF_HD float div_rn(float a, float b) { return __fdiv_rn(a, b); }
#else
MXF_HD float add_rn(float a, float b) { return a + b; }
MXF_HD float sub_rn(float a, float b) { return a - b; }
MXF_HD float mul_rn(float a, float b) { return a * b; }
MXF_HD float div_rn(float a, float b) { return a / b; }
#endif

/// The constants of E2M1 rounding by one float32 addition, from
/// mxformats.kernels.mx_plan (E2M1_ONE_BITS, E2M1_SIX_BITS, E2M1_ADDEND_OFFSET,
/// E2M1_HALF_STEP_BELOW_ADDEND): the front ends pass them, so they are defined once.
struct E2m1Addition {
  uint32_t one_bits, six_bits, addend_offset, half_step_below_addend;
};

/// The E2M1 magnitude code (0 to 7) of ``a``, the bits of a float32 magnitude in [+0, 6.0]
/// (callers clamp): the nearest E2M1 value, ties to the even code, or up with ``round_away``.
/// ``a`` plus ``M = 2**(e + 22)`` (``e`` its binade, 0 below 1) plus 6 units of M's last place
/// rounds ``a`` once to E2M1's spacing in that binade; the sum's bits ``t`` give the code as
/// ``(t + (t >> 22)) mod 8``. A tie the addition rounded down is one where ``a`` exceeds
/// ``sum - addend`` by exactly half a step (both subtractions exact, Sterbenz). The numpy
/// mirror, checked against the reference for every MX factor, is
/// mxformats.kernels.mx_plan.addition_code (the Triton kernels' _e2m1.e2m1_magnitude_code).
MXF_HD uint32_t e2m1_magnitude_code(uint32_t a, bool round_away, const E2m1Addition& c) {
  const uint32_t binade = a & 0x7F800000u;
  const uint32_t addend = (binade > c.one_bits ? binade : c.one_bits) + c.addend_offset;
  const float total = add_rn(as_float(a), as_float(addend));
  const uint32_t bits = float_bits(total);
  uint32_t code = (bits + (bits >> 22)) & 7;
  if (round_away) {
    const float excess = sub_rn(as_float(a), sub_rn(total, as_float(addend)));
    code += excess == as_float(addend - c.half_step_below_addend) ? 1 : 0;
  }
  return code;
}

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

/// IEEE a / b rounded once to nearest-even into ``f``, every operand allowed: NaN (the
/// canonical quiet NaN) for a NaN operand, 0 / 0 and Inf / Inf; x / 0 and Inf / y are Inf,
/// y / Inf is 0, each with the sign of the quotient.
MXF_HD uint64_t divide_ieee(Parts a, Parts b, Binary f) {
  const uint64_t sign = static_cast<uint64_t>(a.negative != b.negative) << (f.ebits + f.mbits);
  const uint64_t inf = ((uint64_t{1} << f.ebits) - 1) << f.mbits;
  if (a.nan || b.nan || (a.inf && b.inf) || (a.sig == 0 && !a.inf && b.sig == 0 && !b.inf))
    return quiet_nan(f);
  if (a.inf || (b.sig == 0 && !b.inf)) return inf | sign;
  if (b.inf) return sign;
  return divide(a, b, f);
}

/// The float32 bits of the finite magnitude ``magnitude`` (its exponent and mantissa fields)
/// of format ``f``, no wider than float32 (exact), on the bits: a shift where the exponent
/// field is float32's (float32, bfloat16), a rebias for a normal value of a narrower one, one
/// exact float32 product by 2**(1 - bias - mbits) for its subnormals.
MXF_HD uint32_t finite_to_f32(uint32_t magnitude, Binary f) {
  if (f.ebits == 8) return magnitude << (23 - f.mbits);
  if (magnitude >> f.mbits)
    return (magnitude + (static_cast<uint32_t>(127 - f.bias) << f.mbits)) << (23 - f.mbits);
  const float quantum = as_float(static_cast<uint32_t>(127 + 1 - f.bias - f.mbits) << 23);
  return float_bits(mul_rn(static_cast<float>(magnitude), quantum));
}

/// Raw bits of a float32, bfloat16 or float16 value ``in`` widened to float32 (exact; NaN
/// becomes the canonical quiet NaN, so NaN and Inf keep their order above every finite value).
MXF_HD uint32_t widen_to_f32(uint64_t raw, Binary in) {
  const int sign_at = in.ebits + in.mbits;
  const uint32_t sign = static_cast<uint32_t>((raw >> sign_at) & 1) << 31;
  const uint32_t magnitude = static_cast<uint32_t>(raw & ((uint64_t{1} << sign_at) - 1));
  const uint32_t inf = ((1u << in.ebits) - 1) << in.mbits;
  if (magnitude > inf) return 0x7FC00000u;
  if (magnitude == inf) return sign | 0x7F800000u;
  return sign | finite_to_f32(magnitude, in);
}

/// Float32 bits ``bits`` rounded once to nearest-even into ``to`` (overflow to Inf; NaN:
/// ``to``'s canonical quiet NaN, whatever the payload a hardware operation gave it). Float32
/// as it is, bfloat16 by one integer rounding on the bits (the carry of 0x7FFF plus the kept
/// lowest bit; overflow carries into Inf's code), other types by ``convert``.
MXF_HD uint64_t round_from_f32(uint32_t bits, Binary to) {
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return quiet_nan(to);
  if (to.ebits != 8) return convert(bits, f32_layout(), to);
  const int drop = 23 - to.mbits;
  if (drop == 0) return bits;
  return (bits + ((1u << (drop - 1)) - 1) + ((bits >> drop) & 1)) >> drop;
}

/// Float32 bits ``bits`` rounded once into the arithmetic type ``own``, then from ``own`` into
/// ``out`` (exact where ``out`` is wider): a consumer that computes in ``own`` and writes
/// ``out``.
MXF_HD uint64_t round_through(uint32_t bits, Binary own, Binary out) {
  return round_from_f32(widen_to_f32(round_from_f32(bits, own), own), out);
}

/// Elements one lane of the FP8 kernels loads and stores at once.
constexpr int kFp8Lane = 8;

/// The ``kFp8Lane`` elements from ``x + first`` (16-bit or float32 input), zero from ``count``
/// on, as float32 bits: one vector load where they are whole and aligned.
template <class T>
MXF_HD void load_lane(const T* x, int64_t first, int64_t count, Binary in,
                      uint32_t (&v)[kFp8Lane]) {
  T raw[kFp8Lane];
  const T* src = x + first;
  if (first + kFp8Lane <= count && vector_aligned(src, kFp8Lane, sizeof(T))) {
    load_vectors(src, raw, kFp8Lane, sizeof(T));
  } else {
    for (int i = 0; i < kFp8Lane; ++i) raw[i] = first + i < count ? src[i] : T(0);
  }
  for (int i = 0; i < kFp8Lane; ++i) v[i] = widen_to_f32(raw[i], in);
}

/// The first ``count - first`` (at most ``kFp8Lane``) of ``codes`` to ``dst + first``: one
/// 8-byte store where they are whole and aligned.
MXF_HD void store_lane(uint8_t* dst, int64_t first, int64_t count,
                       const uint8_t (&codes)[kFp8Lane]) {
  uint8_t* to = dst + first;
  if (first + kFp8Lane <= count && (reinterpret_cast<uintptr_t>(to) & 7) == 0) {
    uint2 word;
    __builtin_memcpy(&word, codes, sizeof word);
    *reinterpret_cast<uint2*>(to) = word;
  } else {
    for (int i = 0; i < kFp8Lane && first + i < count; ++i) to[i] = codes[i];
  }
}

/// Element NaN/Inf encodings (mxformats.kernels.mx_plan.SPECIALS_IDS): none, IEEE, fn, fnuz.
enum Specials : int { kNoSpecials = 0, kIeee = 1, kFn = 2, kFnuz = 3 };

/// A ``bits``-wide element code of format ``f`` taken apart, with the NaN/Inf encodings
/// ``specials``: IEEE's, fn's (every magnitude bit set is NaN, no Inf), fnuz's (-0 is NaN).
MXF_HD Parts decode_code(int code, Binary f, int bits, int specials) {
  Parts p = unpack(static_cast<uint64_t>(code), f);
  const int magnitude = code & ((1 << (bits - 1)) - 1);
  p.inf = specials == kIeee && p.inf;
  p.nan = specials == kIeee ? p.nan
        : specials == kFn   ? magnitude == (1 << (bits - 1)) - 1
        : specials == kFnuz ? magnitude == 0 && p.negative
                            : false;
  return p;
}

/// A ``bits``-wide code of format ``f`` (no wider than float32) with the NaN/Inf encodings
/// ``specials``, as float32 bits (exact; NaN the canonical quiet NaN).
MXF_HD uint32_t decode_to_f32(int code, Binary f, int bits, int specials) {
  const Parts p = decode_code(code, f, bits, specials);
  const uint32_t sign = static_cast<uint32_t>(p.negative) << 31;
  if (p.nan) return 0x7FC00000u;
  if (p.inf) return sign | 0x7F800000u;
  return sign | finite_to_f32(static_cast<uint32_t>(code) & ((1u << (bits - 1)) - 1), f);
}


/// The smallest wave of any target (RDNA, NVIDIA): LDS for a work-group's wave maxima is sized
/// by it.
constexpr int kMinWave = 32;

/// The maximum of ``m`` over the work-group (blockDim.x a multiple of the wave size), returned
/// to every thread: a butterfly over each wave, then the waves' maxima through ``wave_max``
/// (LDS of blockDim.x / kMinWave words). Every thread of the group must call it.
__device__ __forceinline__ uint32_t block_max(uint32_t m, uint32_t* wave_max) {
  for (int mask = warpSize / 2; mask > 0; mask /= 2) {
    const uint32_t other = MXF_SHFL_XOR(m, mask, warpSize);
    m = other > m ? other : m;
  }
  if (threadIdx.x % warpSize == 0) wave_max[threadIdx.x / warpSize] = m;
  __syncthreads();
  for (int w = 0; w < static_cast<int>(blockDim.x / warpSize); ++w)
    m = wave_max[w] > m ? wave_max[w] : m;
  return m;
}

}  // namespace mxf
