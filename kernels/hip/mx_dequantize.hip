// MX dequantization: E2M1 (two codes per byte) or one-byte element codes times E8M0 scales.
//
// Reference: mxformats.mx.dequantize_mx (spec/mx.md, "Consumers"). The arguments are the
// fields of mxformats.kernels._mx_plan.DequantizePlan: the consumer's decoded scale of every
// byte (a 256-entry table: 2**k, 0, +Inf or NaN), its arithmetic type ("own"), the output type
// (own or exactly wider), the clamp and 0xFF rules. element * scale is rounded once into own
// with integer arithmetic (overflow to Inf); NaN is own's canonical quiet NaN.
// Where the plan's ``product`` holds (DequantizePlan.product: measured against the reference
// on every E2M1 code and scale byte), an element is instead one hardware float32 product,
// f32(2 |e|) (from the nibble table 0xC8643210) times the byte's half factor (a second
// 256-entry table), signed, rounded once into own and widened to the output type, as the
// Triton kernel does.
// Layout: codes [rows, n / 2] or [rows, n], scales [rows, ceil(n / block)], out [rows, n].
// Each thread decodes 8 elements: one 4- or 8-byte load of codes, 16-byte stores of the output.
#include "mx_numerics.h"

namespace mxf {

constexpr int kDequantLane = 8;
constexpr int kDequantThreads = 256;
constexpr int kDequantKOffset = 128;
constexpr int kDequantPow2 = 0, kDequantZero = 1, kDequantNan = 2, kDequantInf = 3;

/// DequantizePlan's constants.
struct DequantizeRules {
  Binary elem;
  int elem_bits, elem_specials;
  Binary own;
  int own_bits;
  uint64_t own_max, own_inf, own_nan;
  Binary out;
  int out_bits;
  uint64_t out_inf, out_nan;
  int clamp, nan_on_ff;
  int product;  // DequantizePlan.product: decode by decode_product
};

/// Twice each E2M1 magnitude (0, 1, 2, 3, 4, 6, 8, 12), a nibble each from the lowest.
constexpr uint32_t kTwiceE2m1 = 0xC8643210u;

/// E2M1 ``code`` under a scale byte whose half factor is ``half`` (DequantizePlan.product):
/// one float32 product, signed, rounded once into own, then widened exactly to the output type.
MXF_HD uint64_t decode_product(int code, float half, const DequantizeRules& r) {
  const float twice = static_cast<float>((kTwiceE2m1 >> (4 * (code & 7))) & 0xF);
  const float product = mul_rn(twice, half);
  const uint32_t bits = float_bits(code & 8 ? -product : product);
  return round_through(bits, r.own, r.out);
}

/// An element code taken apart, with the NaN/Inf encodings of its format.
MXF_HD Parts decode_element(int code, const DequantizeRules& r) {
  return decode_code(code, r.elem, r.elem_bits, r.elem_specials);
}

MXF_HD uint64_t decode_value(int code, int byte, int32_t entry, const DequantizeRules& r) {
  const int k = ((entry >> 8) & 0xFF) - kDequantKOffset;
  const int kind = (entry >> 16) & 3;
  const Parts p = decode_element(code, r);
  uint64_t magnitude = round_to_code(kind == kDequantPow2 ? p.sig : 0, p.exp + k, r.own.mbits,
                                     r.own.bias);
  const bool zero = p.sig == 0 && !p.inf && !p.nan;
  const bool infinite = magnitude > r.own_max || (p.inf && kind != kDequantZero) ||
                        (kind == kDequantInf && !zero);
  bool nan = p.nan || kind == kDequantNan || (kind == kDequantInf && zero) ||
             (kind == kDequantZero && p.inf);
  if (infinite) magnitude = r.own_inf;
  if (r.clamp && magnitude > r.own_max) magnitude = r.own_max;
  if (r.nan_on_ff && byte == 0xFF) nan = true;
  if (nan) return r.out_nan;
  const uint64_t value = magnitude | (static_cast<uint64_t>(p.negative) << (r.own_bits - 1));
  if (r.own_bits == r.out_bits) return value;
  // Widening into the requested type is exact.
  const Parts w = unpack(value, r.own);
  if (w.inf) return r.out_inf | (static_cast<uint64_t>(w.negative) << (r.out_bits - 1));
  return round_to_ieee(w.negative, w.sig, w.exp, r.out);
}

template <class T>
__global__ __launch_bounds__(kDequantThreads) void dequantize_mx_kernel(
    const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
    const int32_t* __restrict__ table, const float* __restrict__ half_factors,
    T* __restrict__ out, int64_t rows, int64_t n, int block_size, DequantizeRules r) {
  const int64_t chunks_per_row = (n + kDequantLane - 1) / kDequantLane;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chunk >= rows * chunks_per_row) return;
  const int64_t row = chunk / chunks_per_row;
  const int64_t col = (chunk % chunks_per_row) * kDequantLane;
  const bool whole = col + kDequantLane <= n;
  const int per_byte = r.elem_bits == 4 ? 2 : 1;
  const int bytes = kDequantLane / per_byte;

  const uint8_t* src = codes + (row * n + col) / per_byte;
  uint8_t packed[kDequantLane] = {};
  if (whole && (reinterpret_cast<uintptr_t>(src) & (bytes - 1)) == 0) {
    if (bytes == 8) {
      const uint2 word = *reinterpret_cast<const uint2*>(src);
      __builtin_memcpy(packed, &word, sizeof word);
    } else {
      const uint32_t word = *reinterpret_cast<const uint32_t*>(src);
      __builtin_memcpy(packed, &word, sizeof word);
    }
  } else {
    for (int j = 0; j < bytes; ++j) packed[j] = col + per_byte * j < n ? src[j] : 0;
  }
  const int64_t blocks_per_row = (n + block_size - 1) / block_size;
  T v[kDequantLane];
  for (int i = 0; i < kDequantLane; ++i) {
    const int64_t c = col + i < n ? col + i : col;  // a padding lane repeats a real one
    const int byte = scales[row * blocks_per_row + c / block_size];
    const int code = per_byte == 2 ? (packed[i / 2] >> (4 * (i & 1))) & 0xF : packed[i];
    v[i] = static_cast<T>(r.product ? decode_product(code, half_factors[byte], r)
                                    : decode_value(code, byte, table[byte], r));
  }
  T* dst = out + row * n + col;
  if (whole && vector_aligned(dst, kDequantLane, sizeof(T))) {
    load_vectors(v, dst, kDequantLane, sizeof(T));
  } else {
    for (int i = 0; i < kDequantLane; ++i)
      if (col + i < n) dst[i] = v[i];
  }
}

template <class T>
hipError_t launch_dequantize(const uint8_t* codes, const uint8_t* scales, const int32_t* table,
                             const float* half_factors, void* out, int64_t rows, int64_t n,
                             int block_size, const DequantizeRules& r, hipStream_t stream) {
  const int64_t threads = rows * ((n + kDequantLane - 1) / kDequantLane);
  if (threads == 0) return hipSuccess;
  const dim3 grid(static_cast<unsigned>((threads + kDequantThreads - 1) / kDequantThreads));
  hipLaunchKernelGGL(dequantize_mx_kernel<T>, grid, dim3(kDequantThreads), 0, stream, codes,
                     scales, table, half_factors, static_cast<T*>(out), rows, n, block_size, r);
  return hipGetLastError();
}

/// IEEE layout of a float dtype: the largest finite code, Inf, the canonical quiet NaN.
inline void ieee_codes(Binary f, uint64_t& max, uint64_t& inf, uint64_t& nan) {
  inf = ((uint64_t{1} << f.ebits) - 1) << f.mbits;
  max = inf - 1;
  nan = quiet_nan(f);
}

}  // namespace mxf

/// dequantize_mx: ``rules`` holds the plan's elem_bits, elem_ebits, elem_mbits, elem_bias,
/// elem_specials, own_dtype, out_dtype (mxf::Dtype), clamp, nan_on_ff, product; ``table`` the
/// plan's 256 int32 scale entries and ``half_factors`` its 256 float32 half factors (read only
/// with product) in device memory. Output [rows, n] of out_dtype.
MXF_LAUNCHER mxf_dequantize_mx(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                               int64_t n, int block_size, const int32_t* table,
                               const float* half_factors, const int32_t* rules, void* out,
                               hipStream_t stream) {
  if (block_size < 1) return hipErrorInvalidConfiguration;
  mxf::DequantizeRules r;
  r.elem_bits = rules[0];
  r.elem = mxf::Binary{rules[1], rules[2], rules[3]};
  r.elem_specials = rules[4];
  r.own = mxf::binary_of(rules[5]);
  r.own_bits = 8 * mxf::width_of(rules[5]);
  r.out = mxf::binary_of(rules[6]);
  r.out_bits = 8 * mxf::width_of(rules[6]);
  mxf::ieee_codes(r.own, r.own_max, r.own_inf, r.own_nan);
  uint64_t out_max = 0;
  mxf::ieee_codes(r.out, out_max, r.out_inf, r.out_nan);
  r.clamp = rules[7];
  r.nan_on_ff = rules[8];
  r.product = rules[9];
  switch (r.out_bits) {
    case 16:
      return mxf::launch_dequantize<uint16_t>(codes, scales, table, half_factors, out, rows, n,
                                              block_size, r, stream);
    default:
      return mxf::launch_dequantize<uint32_t>(codes, scales, table, half_factors, out, rows, n,
                                              block_size, r, stream);
  }
}
