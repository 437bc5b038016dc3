// MX quantization along the last axis: E2M1 (two codes per byte) or E4M3FN codes, E8M0 scales.
//
// Reference: mxformats.mx.quantize_mx (spec/mx.md). Nothing here is keyed by profile: the
// arguments are the fields of mxformats.kernels._mx_plan.QuantizePlan, so the kernel computes
// every profile that plan describes. The scale is a lookup in the plan's table by the float32
// exponent field of the block maximum (threshold, entry below, entry at or above); an entry
// holds the E8M0 byte, the factor 2**k (or 0 or NaN) the elements are multiplied by, and the
// NaN-block flag. E2M1 elements of a block whose k lies in the plan's fast range
// [fast_k_min, fast_k_limit) are one float32 product by 2**k and one float32 addition that
// rounds (e2m1_magnitude_code; mx_plan.fast_k_limit checks those steps against the reference
// for every k); every other element is scaled by adding k to its exponent and rounded by
// shifting its significand, with integer arithmetic only.
//
// Layout: x [rows, n] contiguous; codes [rows, n / 2] (E2M1, element 2k in the low nibble) or
// [rows, n]; scales [rows, ceil(n / block)]. A short last block is padded with +0.
//
// Work split: a lane loads up to 8 consecutive elements (16-byte vector loads where aligned and
// whole); the lanes of one MX block are consecutive in a wave. The block maximum is reduced
// onto the first lane of the block with wave shuffles and broadcast back from it by its index
// in the wave (threadIdx.x % warpSize: 64 on CDNA, 32 on RDNA and NVIDIA).
#include "mx_numerics.h"

namespace mxf {

constexpr int kLaneElements = 8;
constexpr int kThreads = 256;
constexpr int kMaxLanesPerBlock = 32;  // blocks of up to 256 elements, never wider than a wave
// Scale entry fields (mxformats.kernels._mx_plan: SCALE_* and KIND_*).
constexpr int kKOffset = 128;
constexpr int kKindZero = 1, kKindNan = 2, kKindNegNan = 3;  // kind 0: a power of two

/// QuantizePlan's constants (source layout, element layout, element rules).
struct QuantizeRules {
  Binary source;
  int source_bits;
  Binary elem;
  int elem_bits;
  int elem_max_code;
  int nan_ignoring_max;
  int round_away;
  int zero_sign;  // 0 keep, 1 positive, 2 sign-function
  int arith_zero_exp;
  int inf_codes[2];  // positive, negative
  int nan_codes[2];
  int generated_nan_negative;
  int factor_nan_wins;
  int fast_k_min, fast_k_limit;  // E2M1 blocks with fast_k_min <= k < fast_k_limit: e2m1_fast
  E2m1Addition e2m1;
};

/// The plan's packed scale entry for a block maximum (magnitude bits of the source type).
MXF_HD int32_t scale_entry(uint64_t amax, const int32_t* table, Binary source) {
  const Parts a = unpack(amax, source);
  // The maximum as float32 bits (exact: float32 holds every value of the source types).
  const uint32_t bits = a.nan ? 0x7FC00000u
                      : a.inf ? 0x7F800000u
                              : static_cast<uint32_t>(round_to_ieee(false, a.sig, a.exp,
                                                                    f32_layout()));
  const uint32_t field = bits >> 23;
  return static_cast<int>(bits & 0x7FFFFF) >= table[field] ? table[512 + field]
                                                           : table[256 + field];
}

/// The element code with magnitude code ``magnitude`` of source value ``p`` scaled by 2**k
/// (``scaled``: p's significand, or 0 in a zero-factor block): the sign by the profile's
/// zero-sign rule.
MXF_HD uint8_t signed_code(uint64_t magnitude, Parts p, int k, uint64_t scaled,
                           const QuantizeRules& r) {
  bool negative = p.negative;
  if (r.zero_sign == 1) {
    negative = negative && magnitude != 0;
  } else if (r.zero_sign == 2) {
    // sign(q) * |rounded|: -0 only where q is nonzero in the producer's arithmetic type,
    // |q| > 2**arith_zero_exp, that is scaled > 2**below.
    const int below = r.arith_zero_exp - (p.exp + k);
    const bool nonzero = below < 0 || (below < 62 && scaled > (uint64_t{1} << below));
    negative = negative && scaled > 0 && nonzero;
  }
  return static_cast<uint8_t>(magnitude | (static_cast<uint64_t>(negative) << (r.elem_bits - 1)));
}

/// The E2M1 code of finite source bits ``bits`` in a block of factor 2**k, k in the plan's
/// fast range: |x| * 2**k as one float32 product, clamped to 6.0 on the bits, then rounded by
/// one addition (ties up where the profile rounds them away).
MXF_HD uint8_t e2m1_fast(uint32_t bits, int k, const QuantizeRules& r) {
  const uint32_t magnitude = bits & ((1u << (r.source_bits - 1)) - 1);
  const float factor = as_float(static_cast<uint32_t>(k + 127) << 23);
  const uint32_t q = float_bits(mul_rn(as_float(widen_to_f32(magnitude, r.source)), factor));
  const uint32_t code =
      e2m1_magnitude_code(q < r.e2m1.six_bits ? q : r.e2m1.six_bits, r.round_away != 0, r.e2m1);
  const Parts p = unpack(bits, r.source);
  return signed_code(code, p, k, p.sig, r);
}

MXF_HD uint8_t element_code(Parts p, int32_t entry, const QuantizeRules& r) {
  const int k = ((entry >> 8) & 0xFF) - kKOffset;
  const int kind = (entry >> 16) & 3;
  if ((entry >> 18) & 1) return 0;  // a NaN block: every code 0x00
  const bool factor_nan = kind >= kKindNan;
  const bool q_nan = p.nan || factor_nan || (p.inf && kind == kKindZero);
  if (q_nan) {
    const bool x_wins = p.nan && !(r.factor_nan_wins && factor_nan);
    const bool negative = x_wins ? p.negative
                        : factor_nan ? kind == kKindNegNan
                                     : r.generated_nan_negative != 0;
    return static_cast<uint8_t>(r.nan_codes[negative]);
  }
  if (p.inf) return static_cast<uint8_t>(r.inf_codes[p.negative]);
  // q = x * 2**k rounded once into the element format, saturating.
  const uint64_t scaled = kind == kKindZero ? 0 : p.sig;
  uint64_t magnitude = round_to_code(scaled, p.exp + k, r.elem.mbits, r.elem.bias,
                                     r.round_away != 0);
  if (magnitude > static_cast<uint64_t>(r.elem_max_code)) magnitude = r.elem_max_code;
  return signed_code(magnitude, p, k, scaled, r);
}

template <class T>
__global__ __launch_bounds__(kThreads) void quantize_mx_kernel(
    const T* __restrict__ x, uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
    const int32_t* __restrict__ table, int64_t rows, int64_t n, int block_size,
    QuantizeRules r) {
  const int lane_elements = block_size < kLaneElements ? block_size : kLaneElements;
  const int lanes_per_block = block_size / lane_elements;
  const int64_t blocks_per_row = (n + block_size - 1) / block_size;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t block = thread / lanes_per_block;
  const int part = static_cast<int>(thread % lanes_per_block);
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  // Every lane takes part in the shuffles; lanes past the last block only contribute zeros.
  const bool active = block < rows * blocks_per_row;
  const int64_t row = active ? block / blocks_per_row : 0;
  const int64_t col = (active ? block % blocks_per_row : 0) * block_size + part * lane_elements;
  const T* src = x + row * n + col;

  T v[kLaneElements] = {};
  if (active && lane_elements == kLaneElements && col + kLaneElements <= n &&
      vector_aligned(src, kLaneElements, sizeof(T))) {
    load_vectors(src, v, kLaneElements, sizeof(T));
  } else {
    for (int i = 0; i < lane_elements; ++i) v[i] = active && col + i < n ? src[i] : T(0);
  }

  // |x| as integer bits: NaN above Inf above every finite value, so the integer maximum
  // propagates NaN; a NaN-ignoring maximum (__hmax) counts NaN lanes as -1.
  const uint64_t magnitude_bits = (uint64_t{1} << (r.source_bits - 1)) - 1;
  const uint64_t inf_bits = ((uint64_t{1} << r.source.ebits) - 1) << r.source.mbits;
  int64_t amax = r.nan_ignoring_max ? -1 : 0;
  for (int i = 0; i < lane_elements; ++i) {
    const uint64_t m = static_cast<uint64_t>(v[i]) & magnitude_bits;
    const int64_t candidate = r.nan_ignoring_max && m > inf_bits ? -1 : static_cast<int64_t>(m);
    amax = candidate > amax ? candidate : amax;
  }
  for (int delta = lanes_per_block / 2; delta > 0; delta /= 2) {
    const int64_t other = MXF_SHFL_DOWN(amax, delta, warpSize);
    amax = other > amax ? other : amax;
  }
  amax = MXF_SHFL(amax, lane - part, warpSize);
  if (amax < 0) amax = static_cast<int64_t>(quiet_nan(r.source));  // every lane NaN
  const int32_t entry = scale_entry(static_cast<uint64_t>(amax), table, r.source);

  // A power-of-two factor (kind 0, no NaN block) with k in the fast range: finite elements
  // take e2m1_fast.
  const int k = ((entry >> 8) & 0xFF) - kKOffset;
  const bool fast = ((entry >> 16) & 7) == 0 && k >= r.fast_k_min && k < r.fast_k_limit;
  uint8_t out[kLaneElements];
  if (fast) {
    for (int i = 0; i < lane_elements; ++i) {
      const bool finite = (static_cast<uint64_t>(v[i]) & magnitude_bits) < inf_bits;
      out[i] = finite ? e2m1_fast(static_cast<uint32_t>(v[i]), k, r)
                      : element_code(unpack(v[i], r.source), entry, r);
    }
  } else {
    for (int i = 0; i < lane_elements; ++i)
      out[i] = element_code(unpack(v[i], r.source), entry, r);
  }
  if (!active) return;
  if (part == 0) scales[block] = static_cast<uint8_t>(entry & 0xFF);
  const int per_byte = r.elem_bits == 4 ? 2 : 1;
  const int bytes = lane_elements / per_byte;
  uint8_t packed[kLaneElements];
  for (int j = 0; j < bytes; ++j)
    packed[j] = per_byte == 2 ? static_cast<uint8_t>(out[2 * j] | (out[2 * j + 1] << 4)) : out[j];
  uint8_t* dst = codes + (row * n + col) / per_byte;
  if (lane_elements == kLaneElements && col + kLaneElements <= n &&
      (reinterpret_cast<uintptr_t>(dst) & (bytes - 1)) == 0) {
    if (bytes == 8) {
      uint2 word;
      __builtin_memcpy(&word, packed, sizeof word);
      *reinterpret_cast<uint2*>(dst) = word;
    } else {
      uint32_t word;
      __builtin_memcpy(&word, packed, sizeof word);
      *reinterpret_cast<uint32_t*>(dst) = word;
    }
  } else {
    for (int j = 0; j < bytes; ++j)
      if (col + per_byte * j < n) dst[j] = packed[j];
  }
}

template <class T>
hipError_t launch_quantize(const void* x, int64_t rows, int64_t n, int block_size,
                           const int32_t* table, const QuantizeRules& r, uint8_t* codes,
                           uint8_t* scales, hipStream_t stream) {
  const int lane_elements = block_size < kLaneElements ? block_size : kLaneElements;
  const int64_t threads =
      rows * ((n + block_size - 1) / block_size) * (block_size / lane_elements);
  if (threads == 0) return hipSuccess;
  const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads));
  hipLaunchKernelGGL(quantize_mx_kernel<T>, grid, dim3(kThreads), 0, stream,
                     static_cast<const T*>(x), codes, scales, table, rows, n, block_size, r);
  return hipGetLastError();
}

}  // namespace mxf

/// quantize_mx: x [rows, n] of ``dtype`` (float32, bfloat16, float16); ``block_size`` a power
/// of two up to 256; ``table`` the plan's int32 [3, 256] scale table (device memory); ``rules``
/// the plan's other fields, in the order of mxf::QuantizeRules after the two layouts:
/// elem_bits, elem_mbits, elem_bias, elem_max_code, nan_ignoring_max, round_away, zero_sign,
/// arith_zero_exp, inf_pos, inf_neg, nan_pos, nan_neg, generated_nan_negative, factor_nan_wins,
/// fast_k_min, fast_k_limit, then the four E2m1Addition constants.
MXF_LAUNCHER mxf_quantize_mx(const void* x, int dtype, int64_t rows, int64_t n, int block_size,
                             const int32_t* table, const int32_t* rules, uint8_t* codes,
                             uint8_t* scales, hipStream_t stream) {
  if (block_size < 1 || block_size > mxf::kLaneElements * mxf::kMaxLanesPerBlock ||
      (block_size & (block_size - 1)) != 0)
    return hipErrorInvalidConfiguration;
  mxf::QuantizeRules r;
  r.source = mxf::binary_of(dtype);
  r.source_bits = 8 * mxf::width_of(dtype);
  r.elem_bits = rules[0];
  r.elem = mxf::Binary{r.elem_bits - 1 - rules[1], rules[1], rules[2]};
  r.elem_max_code = rules[3];
  r.nan_ignoring_max = rules[4];
  r.round_away = rules[5];
  r.zero_sign = rules[6];
  r.arith_zero_exp = rules[7];
  r.inf_codes[0] = rules[8];
  r.inf_codes[1] = rules[9];
  r.nan_codes[0] = rules[10];
  r.nan_codes[1] = rules[11];
  r.generated_nan_negative = rules[12];
  r.factor_nan_wins = rules[13];
  r.fast_k_min = rules[14];
  r.fast_k_limit = rules[15];
  r.e2m1 = mxf::E2m1Addition{static_cast<uint32_t>(rules[16]), static_cast<uint32_t>(rules[17]),
                             static_cast<uint32_t>(rules[18]), static_cast<uint32_t>(rules[19])};
  if (mxf::width_of(dtype) == 2)
    return mxf::launch_quantize<uint16_t>(x, rows, n, block_size, table, r, codes, scales,
                                          stream);
  return mxf::launch_quantize<uint32_t>(x, rows, n, block_size, table, r, codes, scales, stream);
}
