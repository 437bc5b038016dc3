// FP8 per-tensor casts: Quark's static and vLLM's dynamic quantization, vLLM's fn -> fnuz
// normalisation.
//
// quantize_fp8 (reference mxformats.fp8.quantize_fp8, spec/w4a8.md "FP8 per-tensor"), with M
// the profile's limit: amax over the tensor, s = float32(amax) / M, then
// - static (Quark; M = fmt.max; s = 2**-23 when amax is 0): codes = fmt(clamp(dtype(x / s),
//   +-M)), the float32 quotient rounded to the input's dtype before the FP8 rounding;
// - dynamic (vLLM dynamic_scaled_fp8_quant; M = 448 or 224): amax skips NaN (fmaxf),
//   codes = fmt(fmaxf(-M, fminf(float32(x) * (1 / s), M))), so a NaN product becomes +M.
// Two launches: a wave-shuffle + LDS max reduction into one float32 word, then the
// element-wise cast (every thread derives s from that word).
// e4m3fn_to_fnuz (mxformats.conversions.e4m3fn_to_fnuz, spec/e4m3fnuz.md): the same bits,
// 0x80 -> 0x00, every float32 scale doubled.
#include "mx_numerics.h"

namespace mxf {

constexpr int kFp8Threads = 256;

/// The FP8 format written and the profile's arithmetic, from mxformats.formats and
/// mxformats.fp8 (no number typed here).
struct Fp8Target {
  Binary fmt;
  int max_code;          // largest finite magnitude code
  uint32_t limit_bits;   // float32 bits of M: the scale's divisor and the clamp
  uint32_t zero_scale;   // float32 bits of the scale of an all-zero tensor (static: 2**-23)
  bool signed_zero;      // false for FNUZ: a zero result is +0
  bool dynamic;          // vLLM's arithmetic (see the top of this file); else Quark's static
};

template <class T>
__global__ __launch_bounds__(kFp8Threads) void amax_kernel(const T* __restrict__ x,
                                                           int64_t count, Binary in,
                                                           bool ignore_nan,
                                                           uint32_t* __restrict__ amax_bits) {
  __shared__ uint32_t wave_max[kFp8Threads / kMinWave];
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kFp8Lane;
  uint32_t v[kFp8Lane];
  load_lane(x, first < count ? first : count, count, in, v);
  uint32_t m = 0;
  for (int i = 0; i < kFp8Lane; ++i) {
    uint32_t magnitude = v[i] & 0x7FFFFFFFu;
    if (ignore_nan && magnitude > 0x7F800000u) magnitude = 0;  // fmaxf skips NaN
    m = magnitude > m ? magnitude : m;
  }
  m = block_max(m, wave_max);
  if (threadIdx.x == 0) {
    atomicMax(amax_bits, m);
  }
}

/// The per-tensor scale as float32 bits: float32(amax) / M (Inf for an infinite amax, which
/// only the dynamic profiles accept), ``zero_scale`` where that is 0.
MXF_HD uint32_t tensor_scale(uint32_t amax_bits, const Fp8Target& t) {
  const Binary f32 = f32_layout();
  if (unpack(amax_bits, f32).inf) return amax_bits;
  const uint64_t s = divide(unpack(amax_bits, f32), unpack(t.limit_bits, f32), f32);
  return s == 0 ? t.zero_scale : static_cast<uint32_t>(s);
}

template <class T>
__global__ __launch_bounds__(kFp8Threads) void quantize_fp8_kernel(
    const T* __restrict__ x, int64_t count, Binary in, Fp8Target target,
    const uint32_t* __restrict__ amax_bits, uint8_t* __restrict__ codes,
    uint32_t* __restrict__ scale_out) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kFp8Lane;
  const uint32_t scale_bits = tensor_scale(*amax_bits, target);
  if (first == 0) *scale_out = scale_bits;  // an empty tensor still gets its scale
  if (first >= count) return;
  // Each element's product or quotient is one hardware float32 operation (mx_numerics.h).
  const float s = as_float(scale_bits);
  const float reciprocal = div_rn(1.0f, s);  // vLLM's 1 / s (1 / 0 = Inf, 1 / Inf = 0)
  uint32_t v[kFp8Lane];
  load_lane(x, first, count, in, v);
  uint8_t out[kFp8Lane];
  for (int i = 0; i < kFp8Lane; ++i) {
    Parts q;
    if (target.dynamic) {
      uint32_t product = float_bits(mul_rn(as_float(v[i]), reciprocal));
      if ((product & 0x7FFFFFFFu) > 0x7F800000u) product = target.limit_bits;  // NaN -> +M
      if ((product & 0x7FFFFFFFu) > target.limit_bits)
        product = (product & 0x80000000u) | target.limit_bits;  // clamp to +-M
      q = unpack(product, f32_layout());
    } else {
      // x / s in float32, then rounded to the input's own type (torch's bfloat16 division).
      q = unpack(round_from_f32(float_bits(div_rn(as_float(v[i]), s)), in), in);
    }
    uint64_t magnitude = round_to_code(q.sig, q.exp, target.fmt.mbits, target.fmt.bias);
    if (magnitude > static_cast<uint64_t>(target.max_code)) magnitude = target.max_code;
    const bool negative = q.negative && (target.signed_zero || magnitude != 0);
    out[i] = static_cast<uint8_t>(magnitude | (static_cast<uint64_t>(negative)
                                               << (target.fmt.ebits + target.fmt.mbits)));
  }
  store_lane(codes, first, count, out);
}

constexpr int kFnuzLane = 16;

__global__ __launch_bounds__(kFp8Threads) void e4m3fn_to_fnuz_kernel(
    const uint8_t* __restrict__ codes, int64_t count, const uint32_t* __restrict__ scales,
    int64_t scale_count, uint8_t* __restrict__ codes_out, uint32_t* __restrict__ scales_out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < scale_count) {
    scales_out[index] = static_cast<uint32_t>(
        multiply(unpack(scales[index], f32_layout()), integer_parts(2), f32_layout()));
  }
  const int64_t first = index * kFnuzLane;
  if (first >= count) return;
  uint8_t c[kFnuzLane];
  const bool whole = first + kFnuzLane <= count;
  if (whole && vector_aligned(codes + first, kFnuzLane, 1)) {
    load_vectors(codes + first, c, kFnuzLane, 1);
  } else {
    for (int i = 0; i < kFnuzLane; ++i) c[i] = first + i < count ? codes[first + i] : 0;
  }
  for (int i = 0; i < kFnuzLane; ++i) c[i] = c[i] == 0x80 ? 0 : c[i];  // -0 is the FNUZ NaN
  if (whole && vector_aligned(codes_out + first, kFnuzLane, 1)) {
    load_vectors(c, codes_out + first, kFnuzLane, 1);
  } else {
    for (int i = 0; i < kFnuzLane && first + i < count; ++i) codes_out[first + i] = c[i];
  }
}

inline dim3 fp8_grid(int64_t lanes) {
  return dim3(static_cast<unsigned>((lanes + kFp8Threads - 1) / kFp8Threads));
}

template <class T>
hipError_t launch_fp8(const void* x, int64_t count, Binary in, const Fp8Target& target,
                      uint32_t* amax_bits,
                      uint8_t* codes, uint32_t* scale, hipStream_t stream) {
  const int64_t lanes = (count + kFp8Lane - 1) / kFp8Lane;
  const dim3 grid = fp8_grid(lanes > 0 ? lanes : 1);  // an empty tensor still writes its scale
  const hipError_t cleared = hipMemsetAsync(amax_bits, 0, sizeof(uint32_t), stream);
  if (cleared != hipSuccess) return cleared;
  hipLaunchKernelGGL(amax_kernel<T>, grid, dim3(kFp8Threads), 0, stream,
                     static_cast<const T*>(x), count, in, target.dynamic, amax_bits);
  hipLaunchKernelGGL(quantize_fp8_kernel<T>, grid, dim3(kFp8Threads), 0, stream,
                     static_cast<const T*>(x), count, in, target,
                     static_cast<const uint32_t*>(amax_bits), codes, scale);
  return hipGetLastError();
}

}  // namespace mxf

/// Pass 1 of quantize_fp8: float32 bits of amax into ``*amax_bits``, then pass 2 writes the
/// codes and the float32 scale. ``dtype``: float32, bfloat16 or float16. ``target`` (host
/// memory): the FP8 format's ebits, mbits, bias, largest magnitude code, float32 bits of M,
/// float32 bits of the all-zero scale, signed zero (0/1), dynamic (0/1). For the static
/// profile the caller checks amax for NaN/Inf (refused by the reference) after.
MXF_LAUNCHER mxf_quantize_fp8(const void* x, int dtype, int64_t count, const int32_t* target,
                              uint32_t* amax_bits, uint8_t* codes, uint32_t* scale,
                              hipStream_t stream) {
  const mxf::Binary in = mxf::binary_of(dtype);
  const mxf::Fp8Target t{mxf::Binary{target[0], target[1], target[2]}, target[3],
                         static_cast<uint32_t>(target[4]), static_cast<uint32_t>(target[5]),
                         target[6] != 0, target[7] != 0};
  if (mxf::width_of(dtype) == 2)
    return mxf::launch_fp8<uint16_t>(x, count, in, t, amax_bits, codes, scale, stream);
  return mxf::launch_fp8<uint32_t>(x, count, in, t, amax_bits, codes, scale, stream);
}

/// e4m3fn_to_fnuz: codes [count] and float32 scales [scale_count].
MXF_LAUNCHER mxf_e4m3fn_to_fnuz(const uint8_t* codes, int64_t count, const uint32_t* scales,
                                int64_t scale_count, uint8_t* codes_out, uint32_t* scales_out,
                                hipStream_t stream) {
  const int64_t threads_for_codes = (count + mxf::kFnuzLane - 1) / mxf::kFnuzLane;
  const int64_t threads = threads_for_codes > scale_count ? threads_for_codes : scale_count;
  if (threads == 0) return hipSuccess;
  hipLaunchKernelGGL(mxf::e4m3fn_to_fnuz_kernel, mxf::fp8_grid(threads), dim3(mxf::kFp8Threads),
                     0, stream, codes, count, scales, scale_count, codes_out, scales_out);
  return hipGetLastError();
}
