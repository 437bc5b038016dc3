// NVFP4: E2M1 codes, an E4M3FN scale per 16 elements, one float32 global scale per tensor
// (ModelOpt weight_scale_2, compressed-tensors weight_global_scale), and its dequantization.
//
// Reference: mxformats.schemes.nvfp4 (spec/nvfp4.md). Nothing here is keyed by profile: the
// arguments are the fields of mxformats.kernels.nvfp4_plan.NVFP4QuantizePlan /
// NVFP4DequantizePlan, derived from the producer's and consumer's records; that module's
// docstring lists the arithmetic step by step. Every float operation is one IEEE operation
// rounded once: the tensor's and each block's (global and block scales, into the arithmetic
// dtype) with integer arithmetic (mx_numerics.h); each element's quotient by the block's
// divisor is one hardware float32 division rounded to nearest-even (div_rn: no contraction,
// approximate division or flush to zero on any target), and its E2M1 code one float32
// addition (e2m1_magnitude_code), as the Triton kernel and the plan do.
//
// The tensor maximum is a two-pass reduction of |x|'s float32 bits as integers (NaN above Inf
// above every finite value, as torch.amax): pass 1, ``groups`` work-groups each store the
// maximum of the lanes they stride over; pass 2, one work-group takes the maximum of those
// partials. An integer maximum has one answer in any order, so the bytes are the same whatever
// ``groups`` is. The quantize kernel derives the global scale from that maximum (or from the
// caller's global_amax) in every thread; the caller refuses a tensor whose maximum is not
// finite, as the reference does.
//
// Layout: x [count] contiguous with the quantized axis last (blocks of 16 consecutive
// elements); codes [count] one per byte; scales [count / 16]. Dequantize: codes [count] or
// packed [count / 2] (element 2k in the low nibble), scales [count / 16]. A thread takes one
// block of 16 (two 16-byte loads of 16-bit input where aligned).
#include "mx_numerics.h"

namespace mxf {

constexpr int kNvfp4Threads = 256;
constexpr int kNvfp4Block = 16;

/// NVFP4QuantizePlan's fields (nvfp4_plan.py), in the order mxformats.kernels.hip passes them.
struct Nvfp4Rules {
  Binary arithmetic;     // the dtype of the global scale and of b / 6
  bool inverse_global;   // the stored global is 6M / amax (a divisor), else amax / 6M
  uint32_t six_m;        // float32 bits
  uint32_t amax_floor;   // float32 bits of the floor under amax before 1 / amax
  bool has_nonfinite_global;
  uint32_t nonfinite_global;
  uint32_t scale_floor, scale_clamp, zero_block_scale;  // float32 bits
  bool zero_after_cast;
  int nan_scale_byte, element_nan_code;
  E2m1Addition e2m1;
  Binary scale;
  int scale_max_code;
  uint32_t element_max;  // float32 bits of the largest element magnitude (6)
};

MXF_HD uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

MXF_HD bool is_nan_f32(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

/// The stored float32 global scale for the tensor maximum ``amax`` (float32 bits of a value of
/// the input dtype).
MXF_HD uint32_t global_scale(uint32_t amax, const Nvfp4Rules& r) {
  const Binary f32 = f32_layout();
  uint64_t value;
  if (r.inverse_global) {
    // torch's 6M / t: the reciprocal of max(t, tiny), then times 6M, each rounded into the
    // arithmetic dtype (through float32).
    const uint32_t floored = is_nan_f32(amax) ? amax : max_u32(amax, r.amax_floor);
    const uint64_t reciprocal = convert(
        divide_ieee(integer_parts(1), unpack(floored, f32), f32), f32, r.arithmetic);
    const uint64_t product = multiply(unpack(widen_to_f32(reciprocal, r.arithmetic), f32),
                                      unpack(r.six_m, f32), f32);
    value = convert(product, f32, r.arithmetic);
  } else {
    value = convert(divide_ieee(unpack(amax, f32), unpack(r.six_m, f32), f32), f32,
                    r.arithmetic);
  }
  uint32_t stored = widen_to_f32(value, r.arithmetic);
  if (r.has_nonfinite_global && (stored & 0x7FFFFFFFu) >= 0x7F800000u)
    stored = r.nonfinite_global;
  return stored;
}

/// The block scale's E4M3 byte and its float32 value for block maximum ``b``.
struct BlockScale {
  uint8_t byte;
  uint32_t value;
};

MXF_HD BlockScale block_scale(uint32_t b, uint32_t global, const Nvfp4Rules& r) {
  const Binary f32 = f32_layout();
  uint64_t s;
  if (r.inverse_global) {
    const uint64_t sixth = convert(divide_ieee(unpack(b, f32), unpack(r.element_max, f32), f32),
                                   f32, r.arithmetic);
    s = multiply(unpack(widen_to_f32(sixth, r.arithmetic), f32), unpack(global, f32), f32);
  } else {
    const uint64_t divisor = multiply(unpack(r.element_max, f32), unpack(global, f32), f32);
    s = divide_ieee(unpack(b, f32), unpack(divisor, f32), f32);
  }
  uint32_t scale = static_cast<uint32_t>(s);
  if (!r.zero_after_cast && (scale & 0x7FFFFFFFu) == 0) scale = r.zero_block_scale;
  if (is_nan_f32(scale)) return BlockScale{static_cast<uint8_t>(r.nan_scale_byte), scale};
  // np.clip to [floor, clamp] (NaN returned above; the floor is >= 0, so it is the result
  // for a negative scale), then E4M3FN nearest-even.
  const uint32_t magnitude = scale & 0x7FFFFFFFu;
  scale = (scale >> 31) && magnitude ? r.scale_floor
        : max_u32(magnitude, r.scale_floor) > r.scale_clamp ? r.scale_clamp
                                                            : max_u32(magnitude, r.scale_floor);
  const Parts p = unpack(scale, f32);
  uint64_t code = round_to_code(p.sig, p.exp, r.scale.mbits, r.scale.bias);
  if (code > static_cast<uint64_t>(r.scale_max_code)) code = r.scale_max_code;
  const Parts q = unpack(code, r.scale);
  uint32_t value = static_cast<uint32_t>(round_to_ieee(false, q.sig, q.exp, f32));
  uint8_t byte = static_cast<uint8_t>(code);
  if (r.zero_after_cast && code == 0) {
    value = r.zero_block_scale;
    const Parts z = unpack(value, f32);
    byte = static_cast<uint8_t>(round_to_code(z.sig, z.exp, r.scale.mbits, r.scale.bias));
  }
  return BlockScale{byte, value};
}

/// The E2M1 code of float32 quotient ``q``: nearest, ties to even, saturating (±Inf too);
/// NaN gives the plan's NaN code; the sign bit iff q < 0. The magnitude is
/// e2m1_magnitude_code of |q| clamped to 6.0 on the bits.
MXF_HD uint8_t e2m1_code(float q, const Nvfp4Rules& r) {
  const uint32_t magnitude = float_bits(q) & 0x7FFFFFFFu;
  const uint32_t code = e2m1_magnitude_code(
      magnitude < r.e2m1.six_bits ? magnitude : r.e2m1.six_bits, false, r.e2m1);
  return static_cast<uint8_t>(q != q ? r.element_nan_code : code | (q < 0 ? 8 : 0));
}

/// The 16 elements of block ``block`` as float32 bits.
template <class T>
MXF_HD void load_block(const T* x, int64_t block, Binary in, uint32_t (&v)[kNvfp4Block]) {
  uint32_t half[kFp8Lane];
  for (int h = 0; h < kNvfp4Block / kFp8Lane; ++h) {
    const int64_t first = block * kNvfp4Block + h * kFp8Lane;
    load_lane(x, first, first + kFp8Lane, in, half);
    for (int i = 0; i < kFp8Lane; ++i) v[h * kFp8Lane + i] = half[i];
  }
}

/// Pass 1: work-group g stores the maximum of |x| over the lanes g, g + groups, ...
template <class T>
__global__ __launch_bounds__(kNvfp4Threads) void amax_partial_kernel(
    const T* __restrict__ x, int64_t count, Binary in, uint32_t* __restrict__ partials) {
  __shared__ uint32_t wave_max[kNvfp4Threads / kMinWave];
  const int64_t lanes = (count + kFp8Lane - 1) / kFp8Lane;
  uint32_t m = 0;
  uint32_t v[kFp8Lane];
  for (int64_t lane = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       lane < lanes; lane += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    load_lane(x, lane * kFp8Lane, count, in, v);
    for (int i = 0; i < kFp8Lane; ++i) m = max_u32(m, v[i] & 0x7FFFFFFFu);
  }
  m = block_max(m, wave_max);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

/// Pass 2: one work-group, the maximum of the partials.
__global__ __launch_bounds__(kNvfp4Threads) void amax_final_kernel(
    const uint32_t* __restrict__ partials, int64_t groups, uint32_t* __restrict__ amax) {
  __shared__ uint32_t wave_max[kNvfp4Threads / kMinWave];
  uint32_t m = 0;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) m = max_u32(m, partials[g]);
  m = block_max(m, wave_max);
  if (threadIdx.x == 0) *amax = m;
}

template <class T>
__global__ __launch_bounds__(kNvfp4Threads) void quantize_nvfp4_kernel(
    const T* __restrict__ x, int64_t blocks, Binary in, const uint32_t* __restrict__ amax,
    bool has_global_amax, uint32_t global_amax, Nvfp4Rules r, uint8_t* __restrict__ codes,
    uint8_t* __restrict__ scales, uint32_t* __restrict__ global_out) {
  const int64_t block = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint32_t global = global_scale(has_global_amax ? global_amax : *amax, r);
  if (block == 0) *global_out = global;
  if (block >= blocks) return;
  uint32_t v[kNvfp4Block];
  load_block(x, block, in, v);
  uint32_t b = 0;
  for (int i = 0; i < kNvfp4Block; ++i) b = max_u32(b, v[i] & 0x7FFFFFFFu);
  const BlockScale s = block_scale(b, global, r);
  scales[block] = s.byte;
  const float divisor = r.inverse_global ? div_rn(as_float(s.value), as_float(global))
                                          : mul_rn(as_float(s.value), as_float(global));
  uint8_t out[kFp8Lane];
  for (int h = 0; h < kNvfp4Block / kFp8Lane; ++h) {
    for (int i = 0; i < kFp8Lane; ++i)
      out[i] = e2m1_code(div_rn(as_float(v[h * kFp8Lane + i]), divisor), r);
    const int64_t first = block * kNvfp4Block + h * kFp8Lane;
    store_lane(codes, first, first + kFp8Lane, out);
  }
}

enum GlobalOp : int { kMultiply = 0, kReciprocal = 1, kDivide = 2 };

/// nvfp4_plan.NVFP4DequantizePlan's fields.
struct Nvfp4Decode {
  int global_op;
  Binary element, scale;
  int element_specials, scale_specials;
  Binary out;
};

template <class O>
__global__ __launch_bounds__(kNvfp4Threads) void dequantize_nvfp4_kernel(
    const uint8_t* __restrict__ codes, bool packed, const uint8_t* __restrict__ scales,
    const uint32_t* __restrict__ global_bits, int64_t blocks, Nvfp4Decode d,
    O* __restrict__ out) {
  const int64_t block = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (block >= blocks) return;
  const float global = as_float(*global_bits);
  const float s = as_float(decode_to_f32(scales[block], d.scale,
                                         1 + d.scale.ebits + d.scale.mbits, d.scale_specials));
  // The factor the element is multiplied by, besides the scale (multiply, reciprocal), or the
  // element's whole factor s / g (divide).
  const float factor = d.global_op == kReciprocal ? div_rn(1.0f, global)
                     : d.global_op == kDivide     ? div_rn(s, global)
                                                  : global;
  uint8_t c[kNvfp4Block];
  const uint8_t* src = codes + block * (packed ? kNvfp4Block / 2 : kNvfp4Block);
  for (int i = 0; i < kNvfp4Block; ++i)
    c[i] = packed ? (src[i / 2] >> (4 * (i & 1))) & 0xF : src[i];
  O v[kNvfp4Block];
  for (int i = 0; i < kNvfp4Block; ++i) {
    float e = as_float(decode_to_f32(c[i], d.element, 1 + d.element.ebits + d.element.mbits,
                                     d.element_specials));
    if (d.global_op != kDivide) e = mul_rn(e, s);  // exact: at most 6 significant bits
    v[i] = static_cast<O>(round_from_f32(float_bits(mul_rn(e, factor)), d.out));
  }
  O* dst = out + block * kNvfp4Block;
  if (vector_aligned(dst, kNvfp4Block, sizeof(O))) {
    load_vectors(v, dst, kNvfp4Block, sizeof(O));
  } else {
    for (int i = 0; i < kNvfp4Block; ++i) dst[i] = v[i];
  }
}

inline dim3 nvfp4_grid(int64_t threads) {
  return dim3(static_cast<unsigned>((threads + kNvfp4Threads - 1) / kNvfp4Threads));
}

template <class T>
hipError_t launch_quantize_nvfp4(const void* x, int64_t count, Binary in, int64_t groups,
                                 bool has_global_amax, uint32_t global_amax,
                                 const Nvfp4Rules& r, uint8_t* codes, uint8_t* scales,
                                 uint32_t* global_out, uint32_t* amax, uint32_t* partials,
                                 hipStream_t stream) {
  const T* data = static_cast<const T*>(x);
  hipLaunchKernelGGL(amax_partial_kernel<T>, dim3(static_cast<unsigned>(groups)),
                     dim3(kNvfp4Threads), 0, stream, data, count, in, partials);
  hipLaunchKernelGGL(amax_final_kernel, dim3(1), dim3(kNvfp4Threads), 0, stream,
                     static_cast<const uint32_t*>(partials), groups, amax);
  const int64_t blocks = count / kNvfp4Block;
  hipLaunchKernelGGL(quantize_nvfp4_kernel<T>, nvfp4_grid(blocks > 0 ? blocks : 1),
                     dim3(kNvfp4Threads), 0, stream, data, blocks, in,
                     static_cast<const uint32_t*>(amax), has_global_amax, global_amax, r,
                     codes, scales, global_out);
  return hipGetLastError();
}

template <class O>
hipError_t launch_dequantize_nvfp4(const uint8_t* codes, bool packed, const uint8_t* scales,
                                   const uint32_t* global_bits, int64_t blocks,
                                   const Nvfp4Decode& d, void* out, hipStream_t stream) {
  hipLaunchKernelGGL(dequantize_nvfp4_kernel<O>, nvfp4_grid(blocks), dim3(kNvfp4Threads), 0,
                     stream, codes, packed, scales, global_bits, blocks, d,
                     static_cast<O*>(out));
  return hipGetLastError();
}

}  // namespace mxf

/// quantize_nvfp4: ``x`` [count] of ``dtype`` (float32, bfloat16, float16), count a multiple
/// of 16 (0: only the global scale, from ``global_amax``); pass 1 runs ``groups`` work-groups (>= 1) writing ``partials`` [groups].
/// ``rules`` (host memory), NVFP4QuantizePlan's fields: arithmetic dtype (mxf::Dtype), inverse
/// global, float32 bits of six_m, amax_floor, has nonfinite global, float32 bits of
/// nonfinite_global, scale_floor, scale_clamp, zero_block_scale, zero after cast, NaN scale
/// byte, element NaN code, the four E2m1Addition constants, scale ebits, mbits, bias,
/// largest code, float32 bits of the largest element. Outputs: codes [count], scales
/// [count / 16], the float32 global scale, the tensor maximum's float32 bits.
MXF_LAUNCHER mxf_quantize_nvfp4(const void* x, int dtype, int64_t count, int64_t groups,
                                int has_global_amax, uint32_t global_amax,
                                const int32_t* rules, uint8_t* codes, uint8_t* scales,
                                uint32_t* global_out, uint32_t* amax, uint32_t* partials,
                                hipStream_t stream) {
  if (count < 0 || count % mxf::kNvfp4Block || groups < 1) return hipErrorInvalidConfiguration;
  mxf::Nvfp4Rules r;
  r.arithmetic = mxf::binary_of(rules[0]);
  r.inverse_global = rules[1] != 0;
  r.six_m = static_cast<uint32_t>(rules[2]);
  r.amax_floor = static_cast<uint32_t>(rules[3]);
  r.has_nonfinite_global = rules[4] != 0;
  r.nonfinite_global = static_cast<uint32_t>(rules[5]);
  r.scale_floor = static_cast<uint32_t>(rules[6]);
  r.scale_clamp = static_cast<uint32_t>(rules[7]);
  r.zero_block_scale = static_cast<uint32_t>(rules[8]);
  r.zero_after_cast = rules[9] != 0;
  r.nan_scale_byte = rules[10];
  r.element_nan_code = rules[11];
  r.e2m1 = mxf::E2m1Addition{static_cast<uint32_t>(rules[12]), static_cast<uint32_t>(rules[13]),
                             static_cast<uint32_t>(rules[14]), static_cast<uint32_t>(rules[15])};
  r.scale = mxf::Binary{rules[16], rules[17], rules[18]};
  r.scale_max_code = rules[19];
  r.element_max = static_cast<uint32_t>(rules[20]);
  const mxf::Binary in = mxf::binary_of(dtype);
  if (mxf::width_of(dtype) == 2)
    return mxf::launch_quantize_nvfp4<uint16_t>(x, count, in, groups, has_global_amax != 0,
                                                global_amax, r, codes, scales, global_out,
                                                amax, partials, stream);
  return mxf::launch_quantize_nvfp4<uint32_t>(x, count, in, groups, has_global_amax != 0,
                                              global_amax, r, codes, scales, global_out, amax,
                                              partials, stream);
}

/// dequantize_nvfp4: ``codes`` [count] (or packed [count / 2]), ``scales`` [count / 16], the
/// float32 global scale; ``layouts`` (host memory): global op (nvfp4_plan.GLOBAL_OP_IDS),
/// element ebits, mbits, bias, specials, scale ebits, mbits, bias, specials. Output [count] of
/// ``out_dtype``.
MXF_LAUNCHER mxf_dequantize_nvfp4(const uint8_t* codes, int packed, const uint8_t* scales,
                                  const uint32_t* global_scale, int64_t count,
                                  const int32_t* layouts, int out_dtype, void* out,
                                  hipStream_t stream) {
  if (count % mxf::kNvfp4Block) return hipErrorInvalidConfiguration;
  if (count == 0) return hipSuccess;
  const mxf::Nvfp4Decode d{layouts[0], mxf::Binary{layouts[1], layouts[2], layouts[3]},
                           mxf::Binary{layouts[5], layouts[6], layouts[7]}, layouts[4],
                           layouts[8], mxf::binary_of(out_dtype)};
  const int64_t blocks = count / mxf::kNvfp4Block;
  switch (mxf::width_of(out_dtype)) {
    case 2:
      return mxf::launch_dequantize_nvfp4<uint16_t>(codes, packed != 0, scales, global_scale,
                                                    blocks, d, out, stream);
    case 4:
      return mxf::launch_dequantize_nvfp4<uint32_t>(codes, packed != 0, scales, global_scale,
                                                    blocks, d, out, stream);
    default:
      return mxf::launch_dequantize_nvfp4<uint64_t>(codes, packed != 0, scales, global_scale,
                                                    blocks, d, out, stream);
  }
}
