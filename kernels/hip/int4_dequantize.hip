// INT4 dequantization: group scales, and Quark W4A8 (two scales).
//
// dequantize_int4 (reference mxformats.int4.dequantize_int4, spec/int4-schemes.md
// "Dequantization"): q int8 [rows, n] in [-8, 7], scales [rows, n / group]; q * scale rounded
// once into the scale's dtype (compressed-tensors: the checkpoint's dtype; Quark: float32),
// then once into the output dtype. dequantize_w4a8 (vLLM fold; mxformats.fp8.dequantize_w4a8,
// spec/w4a8.md): int32 words [rows, words] in Quark's nibble layout (passed in), weight_scale
// s1 (float32 scalar) and weight_scale_2 s2 (float32 [rows]); f = float32(s2 * s1),
// out = float32(q * f) rounded to the output dtype. Each thread handles 8 values: one 8-byte
// load of q, or one word. Every product is one hardware float32 multiplication (mul_rn), as in
// the Triton kernels: q (at most 4 bits) times a bfloat16 or float16 scale is exact in float32,
// so rounding that product once into the scale's dtype is the reference's one rounding; a
// float32 scale's product is rounded once by the multiplication itself.
#include "mx_numerics.h"

namespace mxf {

constexpr int kInt4Lane = 8;
constexpr int kInt4Threads = 256;
/// A word layout (mxformats.int4.NIBBLE_ORDER / NIBBLE_OFFSET): nibble i of a word holds
/// element ``element[i]`` of its eight, stored as (q + offset) & 0xF.
struct NibbleLayout {
  uint8_t element[8];
  int offset;
};

template <class T>
MXF_HD void store_lane(T* dst, const T (&v)[kInt4Lane], bool whole, int64_t left) {
  if (whole && vector_aligned(dst, kInt4Lane, sizeof(T))) {
    load_vectors(v, dst, kInt4Lane, sizeof(T));
  } else {
    for (int i = 0; i < kInt4Lane && i < left; ++i) dst[i] = v[i];
  }
}

template <class T>
__global__ __launch_bounds__(kInt4Threads) void dequantize_int4_kernel(
    const int8_t* __restrict__ q, const void* __restrict__ scales, T* __restrict__ out,
    int64_t rows, int64_t n, int64_t group, int scale_dtype, Binary to) {
  const int64_t chunks_per_row = (n + kInt4Lane - 1) / kInt4Lane;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chunk >= rows * chunks_per_row) return;
  const int64_t row = chunk / chunks_per_row;
  const int64_t col = (chunk % chunks_per_row) * kInt4Lane;
  const bool whole = col + kInt4Lane <= n;
  const int8_t* src = q + row * n + col;
  int8_t values[kInt4Lane];
  if (whole && (reinterpret_cast<uintptr_t>(src) & 7) == 0) {
    const uint2 word = *reinterpret_cast<const uint2*>(src);
    __builtin_memcpy(values, &word, sizeof word);
  } else {
    for (int i = 0; i < kInt4Lane; ++i) values[i] = col + i < n ? src[i] : 0;
  }
  const Binary own = binary_of(scale_dtype);
  const int64_t row_groups = row * (n / group);
  int64_t group_index = col / group;  // the lane's groups, one division for all eight
  int64_t group_end = (group_index + 1) * group;
  float scale = as_float(widen_to_f32(load_bits(scales, row_groups + group_index, scale_dtype),
                                      own));
  T v[kInt4Lane];
  for (int i = 0; i < kInt4Lane && col + i < n; ++i) {
    if (col + i >= group_end) {
      group_index = (col + i) / group;
      group_end = (group_index + 1) * group;
      scale = as_float(widen_to_f32(load_bits(scales, row_groups + group_index, scale_dtype),
                                    own));
    }
    const uint32_t product = float_bits(mul_rn(static_cast<float>(values[i]), scale));
    v[i] = static_cast<T>(round_through(product, own, to));
  }
  store_lane(out + row * n + col, v, whole, n - col);
}

template <class T>
__global__ __launch_bounds__(kInt4Threads) void dequantize_w4a8_kernel(
    const uint32_t* __restrict__ weight, const uint32_t* __restrict__ weight_scale,
    const uint32_t* __restrict__ weight_scale_2, T* __restrict__ out, int64_t rows,
    int64_t words, NibbleLayout layout, Binary to) {
  const int64_t word_index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (word_index >= rows * words) return;
  const int64_t row = word_index / words;
  // vLLM folds the two scales first: f = float32(s2 * s1).
  const float f = mul_rn(as_float(weight_scale_2[row]), as_float(*weight_scale));
  const uint32_t word = weight[word_index];
  T v[kInt4Lane];
  for (int nibble = 0; nibble < kInt4Lane; ++nibble) {
    const int raw = ((word >> (4 * nibble)) - layout.offset) & 0xF;
    const int value = raw >= 8 ? raw - 16 : raw;  // two's complement nibble
    v[layout.element[nibble]] =
        static_cast<T>(round_from_f32(float_bits(mul_rn(static_cast<float>(value), f)), to));
  }
  store_lane(out + word_index * kInt4Lane, v, true, kInt4Lane);
}

inline dim3 int4_grid(int64_t threads) {
  return dim3(static_cast<unsigned>((threads + kInt4Threads - 1) / kInt4Threads));
}

template <class T>
hipError_t launch_int4(const int8_t* q, const void* scales, void* out, int64_t rows, int64_t n,
                       int64_t group, int scale_dtype, Binary to, hipStream_t stream) {
  const int64_t threads = rows * ((n + kInt4Lane - 1) / kInt4Lane);
  if (threads == 0) return hipSuccess;
  hipLaunchKernelGGL(dequantize_int4_kernel<T>, int4_grid(threads), dim3(kInt4Threads), 0,
                     stream, q, scales, static_cast<T*>(out), rows, n, group, scale_dtype, to);
  return hipGetLastError();
}

template <class T>
hipError_t launch_w4a8(const uint32_t* weight, const uint32_t* s1, const uint32_t* s2,
                       void* out, int64_t rows, int64_t words, const NibbleLayout& layout,
                       Binary to, hipStream_t stream) {
  if (rows * words == 0) return hipSuccess;
  hipLaunchKernelGGL(dequantize_w4a8_kernel<T>, int4_grid(rows * words), dim3(kInt4Threads), 0,
                     stream, weight, s1, s2, static_cast<T*>(out), rows, words, layout, to);
  return hipGetLastError();
}

}  // namespace mxf

/// dequantize_int4: q [rows, n], scales [rows, n / group] of scale_dtype, the product rounded
/// into scale_dtype (compressed-tensors; Quark's float32 arithmetic with float32 scales).
MXF_LAUNCHER mxf_dequantize_int4(const int8_t* q, const void* scales, int64_t rows, int64_t n,
                                 int64_t group, int scale_dtype, int out_dtype, void* out,
                                 hipStream_t stream) {
  const mxf::Binary to = mxf::binary_of(out_dtype);
  switch (mxf::width_of(out_dtype)) {
    case 2:
      return mxf::launch_int4<uint16_t>(q, scales, out, rows, n, group, scale_dtype, to, stream);
    case 4:
      return mxf::launch_int4<uint32_t>(q, scales, out, rows, n, group, scale_dtype, to, stream);
    default:
      return mxf::launch_int4<uint64_t>(q, scales, out, rows, n, group, scale_dtype, to, stream);
  }
}

/// dequantize_w4a8 (vLLM fold): weight [rows, words] int32, s1 float32 [1], s2 float32 [rows];
/// ``layout`` (host memory): the element of each of the 8 nibbles, then the nibble offset.
MXF_LAUNCHER mxf_dequantize_w4a8(const uint32_t* weight, const uint32_t* weight_scale,
                                 const uint32_t* weight_scale_2, int64_t rows, int64_t words,
                                 const int32_t* layout, int out_dtype, void* out,
                                 hipStream_t stream) {
  const mxf::Binary to = mxf::binary_of(out_dtype);
  mxf::NibbleLayout nibbles;
  for (int i = 0; i < mxf::kInt4Lane; ++i) nibbles.element[i] = static_cast<uint8_t>(layout[i]);
  nibbles.offset = layout[mxf::kInt4Lane];
  switch (mxf::width_of(out_dtype)) {
    case 2:
      return mxf::launch_w4a8<uint16_t>(weight, weight_scale, weight_scale_2, out, rows, words,
                                        nibbles, to, stream);
    case 4:
      return mxf::launch_w4a8<uint32_t>(weight, weight_scale, weight_scale_2, out, rows, words,
                                        nibbles, to, stream);
    default:
      return mxf::launch_w4a8<uint64_t>(weight, weight_scale, weight_scale_2, out, rows, words,
                                        nibbles, to, stream);
  }
}
