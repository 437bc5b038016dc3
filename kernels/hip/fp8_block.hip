// FP8 block scaling: E4M3 codes with one scale per bm x bn tile (DeepSeek-V3 / DeepGEMM
// weight_scale_inv, compressed-tensors FP8_BLOCK weight_scale), and its dequantization.
//
// Reference: mxformats.schemes.fp8_block (spec/fp8-block.md). Nothing here is keyed by profile:
// the arguments are the fields of mxformats.kernels.fp8_block_plan.FP8BlockPlan, derived from
// the producer's FP8BlockProfile record. Every float operation is one IEEE operation rounded
// once: a tile's scale with integer arithmetic, each element's product or quotient with one
// hardware float32 operation (mx_numerics.h: no contraction, approximate division or flush to
// zero on any target), its FP8 code with the integer encoder:
// - tile maximum: max |x| over the tile, NaN above Inf above every finite value (torch.amax);
//   partial edge tiles are read only where they hold elements (padding with +0.0, as DeepGEMM
//   and compressed-tensors pad, leaves that maximum unchanged);
// - scale = round(S, float32(max(amax, floor)) / fmt_max) in the scale dtype S, then
//   DeepGEMM's ceil_to_ue8m0 if the record says so, a 0 replaced by the plan's zero scale;
// - the scaled element, by the record's multiplier: x * float32(float32(1 / max(amax, floor))
//   * fmt_max) (torch's 448 / amax is a reciprocal, then a multiply), x * float32(1 / scale),
//   or x / scale correctly rounded in float32 then rounded to the quotient dtype; clamped to
//   +-fmt_max if the record says so (NaN passes);
// - the code: nearest-even, saturating; a NaN element gives the reference's NaN code; then
//   vLLM's fnuz normalisation where the plan says so (the fn -0 code becomes 0x00, the float32
//   scale doubled).
//
// Layout: x [rows, cols] contiguous (float32, bfloat16, float16); codes [rows, cols];
// scales [ceil(rows / bm), ceil(cols / bn)] in the scale dtype. Work split: one work-group per
// tile; a lane takes up to 8 consecutive elements of one tile row (16-byte vector loads where
// they are whole and aligned), reads them once for the maximum (reduced over waves, then LDS)
// and again for the codes.
#include "mx_numerics.h"

namespace mxf {

constexpr int kTileThreads = 256;
/// Codes per dequantize lane (one 16-byte load where whole and aligned).
constexpr int kCodeLane = 16;

/// FP8BlockPlan's fields (fp8_block_plan.py), in the order mxformats.kernels.hip passes them.
struct BlockRules {
  Binary scale;        // the scale dtype
  int scale_bytes;
  Binary quotient;     // divide-by-scale: the dtype x / scale is rounded to
  uint32_t fmt_max;    // float32 bits
  bool has_floor;
  uint32_t floor;      // float32 bits of the floor rounded to the scale dtype
  uint32_t multiplier_floor;  // float32 bits of the floor the max-over-amax multiplier takes
  bool power_of_two;
  bool has_zero_scale;
  uint64_t zero_scale;  // bits in the scale dtype
  int multiplier;       // fp8_block_plan.MULTIPLIER_IDS
  bool clamp;
  Binary elem;
  int elem_max_code;
  int nan_code;
  bool fnuz;
};

enum Multiplier : int { kMaxOverAmax = 0, kReciprocalOfScale = 1, kDivideByScale = 2 };

MXF_HD uint32_t max_bits(uint32_t a, uint32_t b) { return a > b ? a : b; }

/// DeepGEMM ceil_to_ue8m0 on float32 bits: 2**(exponent field + (mantissa != 0)) of |scale|,
/// the field clamped to [1, 254].
MXF_HD uint32_t ceil_to_ue8m0(uint32_t scale) {
  const uint32_t magnitude = scale & 0x7FFFFFFFu;
  int field = static_cast<int>(magnitude >> 23) + ((magnitude & 0x7FFFFF) != 0);
  field = field < 1 ? 1 : field > 254 ? 254 : field;
  return static_cast<uint32_t>(field) << 23;
}

/// What every element of a tile needs: the scale as stored (scale dtype bits, before the fnuz
/// doubling) and the float32 operand of the multiplier.
struct TileScale {
  uint64_t scale;
  uint32_t operand;
};

/// The tile's scale from its maximum ``amax`` (float32 magnitude bits).
MXF_HD TileScale tile_scale(uint32_t amax, const BlockRules& r) {
  const Binary f32 = f32_layout();
  const bool nan = amax > 0x7F800000u;
  const uint32_t tile_max = r.has_floor && !nan ? max_bits(amax, r.floor) : amax;
  const uint64_t quotient = divide_ieee(unpack(tile_max, f32), unpack(r.fmt_max, f32), f32);
  uint64_t scale = convert(quotient, f32, r.scale);
  if (r.power_of_two) scale = convert(ceil_to_ue8m0(widen_to_f32(scale, r.scale)), f32, r.scale);
  const Parts s = unpack(scale, r.scale);
  if (r.has_zero_scale && s.sig == 0 && !s.inf) scale = r.zero_scale;
  if (s.nan) scale = quiet_nan(r.scale);
  uint32_t operand = widen_to_f32(scale, r.scale);  // divide-by-scale: the divisor
  if (r.multiplier == kMaxOverAmax) {
    const uint32_t floored = nan ? amax : max_bits(amax, r.multiplier_floor);
    const uint64_t reciprocal = divide_ieee(integer_parts(1), unpack(floored, f32), f32);
    operand = static_cast<uint32_t>(multiply(unpack(reciprocal, f32), unpack(r.fmt_max, f32),
                                             f32));
  } else if (r.multiplier == kReciprocalOfScale) {
    operand = static_cast<uint32_t>(divide_ieee(integer_parts(1), unpack(operand, f32), f32));
  }
  return TileScale{scale, operand};
}

/// The FP8 code of one element (float32 bits ``x``) under its tile's scale.
MXF_HD uint8_t element_code(uint32_t x, const TileScale& t, const BlockRules& r) {
  uint64_t value;
  Binary layout = f32_layout();
  if (r.multiplier == kDivideByScale) {
    value = round_from_f32(float_bits(div_rn(as_float(x), as_float(t.operand))), r.quotient);
    layout = r.quotient;
  } else {
    value = float_bits(mul_rn(as_float(x), as_float(t.operand)));
  }
  const uint64_t sign = uint64_t{1} << (layout.ebits + layout.mbits);
  if (r.clamp) {  // torch.clamp to +-fmt_max in the value's dtype (exact there); NaN passes
    const uint64_t limit = round_from_f32(r.fmt_max, layout);
    if (!unpack(value, layout).nan && (value & (sign - 1)) > limit) value = (value & sign) | limit;
  }
  const Parts v = unpack(value, layout);
  if (v.nan) return static_cast<uint8_t>(r.nan_code);
  // Nearest-even, saturating (Inf included).
  uint64_t magnitude = v.inf ? static_cast<uint64_t>(r.elem_max_code)
                             : round_to_code(v.sig, v.exp, r.elem.mbits, r.elem.bias);
  if (magnitude > static_cast<uint64_t>(r.elem_max_code)) magnitude = r.elem_max_code;
  uint8_t code = static_cast<uint8_t>(
      magnitude | (static_cast<uint64_t>(v.negative) << (r.elem.ebits + r.elem.mbits)));
  const uint8_t negative_zero = static_cast<uint8_t>(1u << (r.elem.ebits + r.elem.mbits));
  if (r.fnuz && code == negative_zero) code = 0;  // the fn -0 is the fnuz NaN
  return code;
}

template <class T>
__global__ __launch_bounds__(kTileThreads) void quantize_fp8_block_kernel(
    const T* __restrict__ x, int64_t rows, int64_t cols, int64_t bm, int64_t bn,
    int64_t grid_cols, Binary in, BlockRules r, uint8_t* __restrict__ codes,
    void* __restrict__ scales) {
  __shared__ uint32_t wave_max[kTileThreads / kMinWave];
  const int64_t tile = blockIdx.x;
  const int64_t row0 = tile / grid_cols * bm, col0 = tile % grid_cols * bn;
  // The edge tiles: only the rows and columns the tensor has.
  const int64_t height = rows - row0 < bm ? rows - row0 : bm;
  const int64_t width = cols - col0 < bn ? cols - col0 : bn;
  const int64_t lanes_per_row = (width + kFp8Lane - 1) / kFp8Lane;
  const int64_t lanes = height * lanes_per_row;

  uint32_t amax = 0;
  uint32_t v[kFp8Lane];
  for (int64_t lane = threadIdx.x; lane < lanes; lane += blockDim.x) {
    const int64_t row = row0 + lane / lanes_per_row;
    load_lane(x + row * cols + col0, lane % lanes_per_row * kFp8Lane, width, in, v);
    for (int i = 0; i < kFp8Lane; ++i) amax = max_bits(amax, v[i] & 0x7FFFFFFFu);
  }
  amax = block_max(amax, wave_max);
  const TileScale t = tile_scale(amax, r);

  uint8_t out[kFp8Lane];
  for (int64_t lane = threadIdx.x; lane < lanes; lane += blockDim.x) {
    const int64_t row = row0 + lane / lanes_per_row;
    const int64_t first = lane % lanes_per_row * kFp8Lane;
    load_lane(x + row * cols + col0, first, width, in, v);
    for (int i = 0; i < kFp8Lane; ++i) out[i] = element_code(v[i], t, r);
    store_lane(codes + row * cols + col0, first, width, out);
  }
  if (threadIdx.x == 0) {
    uint64_t scale = t.scale;
    if (r.fnuz)  // vLLM normalize_e4m3fn_to_e4m3fnuz doubles the float32 scale
      scale = multiply(unpack(scale, f32_layout()), integer_parts(2), f32_layout());
    if (r.scale_bytes == 4) {
      static_cast<uint32_t*>(scales)[tile] = static_cast<uint32_t>(scale);
    } else {
      static_cast<uint16_t*>(scales)[tile] = static_cast<uint16_t>(scale);
    }
  }
}

/// vLLM scaled_dequantize: float32(code) * float32(scale) rounded to float32, then to the
/// output dtype ``out`` (float64: exact).
template <class S, class O>
__global__ __launch_bounds__(kTileThreads) void dequantize_fp8_block_kernel(
    const uint8_t* __restrict__ codes, const S* __restrict__ scales, int64_t rows,
    int64_t cols, int64_t bm, int64_t bn, int64_t grid_cols, Binary elem, int elem_specials,
    Binary scale_layout, Binary out_layout, O* __restrict__ out) {
  const int64_t count = rows * cols;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) *
                        kCodeLane;
  if (first >= count) return;
  const bool whole = first + kCodeLane <= count;
  uint8_t c[kCodeLane];
  if (whole && vector_aligned(codes + first, kCodeLane, 1)) {
    load_vectors(codes + first, c, kCodeLane, 1);
  } else {
    for (int i = 0; i < kCodeLane; ++i) c[i] = first + i < count ? codes[first + i] : 0;
  }
  // The lane's position, and its tile's scale, advanced element by element (no division
  // per element): the scale is reloaded where a row or a tile column begins.
  int64_t row = first / cols, col = first % cols;
  int64_t next_tile_col = (col / bn + 1) * bn;
  float scale = as_float(widen_to_f32(scales[row / bm * grid_cols + col / bn], scale_layout));
  O v[kCodeLane];
  for (int i = 0; i < kCodeLane && first + i < count; ++i) {
    if (col == cols) {
      col = 0;
      ++row;
      next_tile_col = bn;
      scale = as_float(widen_to_f32(scales[row / bm * grid_cols], scale_layout));
    } else if (col == next_tile_col) {
      next_tile_col += bn;
      scale = as_float(widen_to_f32(scales[row / bm * grid_cols + col / bn], scale_layout));
    }
    const float value = as_float(decode_to_f32(c[i], elem, 1 + elem.ebits + elem.mbits,
                                               elem_specials));
    v[i] = static_cast<O>(round_from_f32(float_bits(mul_rn(value, scale)), out_layout));
    ++col;
  }
  if (whole && vector_aligned(out + first, kCodeLane, sizeof(O))) {
    load_vectors(v, out + first, kCodeLane, sizeof(O));
  } else {
    for (int i = 0; i < kCodeLane && first + i < count; ++i) out[first + i] = v[i];
  }
}

template <class S, class O>
hipError_t launch_dequantize_block(const uint8_t* codes, const void* scales, int64_t rows,
                                   int64_t cols, int64_t bm, int64_t bn, Binary elem,
                                   int elem_specials, Binary scale_layout, Binary out_layout,
                                   void* out, hipStream_t stream) {
  const int64_t lanes = (rows * cols + kCodeLane - 1) / kCodeLane;
  const dim3 grid(static_cast<unsigned>((lanes + kTileThreads - 1) / kTileThreads));
  hipLaunchKernelGGL((dequantize_fp8_block_kernel<S, O>), grid, dim3(kTileThreads), 0, stream,
                     codes, static_cast<const S*>(scales), rows, cols, bm, bn,
                     (cols + bn - 1) / bn, elem, elem_specials, scale_layout, out_layout,
                     static_cast<O*>(out));
  return hipGetLastError();
}

template <class S>
hipError_t dequantize_block_to(int out_dtype, const uint8_t* codes, const void* scales,
                               int64_t rows, int64_t cols, int64_t bm, int64_t bn, Binary elem,
                               int elem_specials, Binary scale_layout, void* out,
                               hipStream_t stream) {
  const Binary out_layout = binary_of(out_dtype);
  switch (width_of(out_dtype)) {
    case 2:
      return launch_dequantize_block<S, uint16_t>(codes, scales, rows, cols, bm, bn, elem,
                                                  elem_specials, scale_layout, out_layout, out,
                                                  stream);
    case 4:
      return launch_dequantize_block<S, uint32_t>(codes, scales, rows, cols, bm, bn, elem,
                                                  elem_specials, scale_layout, out_layout, out,
                                                  stream);
    default:
      return launch_dequantize_block<S, uint64_t>(codes, scales, rows, cols, bm, bn, elem,
                                                  elem_specials, scale_layout, out_layout, out,
                                                  stream);
  }
}

}  // namespace mxf

/// quantize_fp8_block: ``x`` [rows, cols] of ``dtype`` (float32, bfloat16, float16) in tiles
/// of ``bm`` x ``bn``. ``rules`` (host memory), FP8BlockPlan's fields: scale dtype, quotient
/// dtype (mxf::Dtype), float32 bits of fmt_max, has floor, float32 bits of the floor, float32
/// bits of the multiplier's floor, power-of-two scale, has zero scale, the zero scale's bits
/// (scale dtype), multiplier, clamp, element ebits, mbits, bias, largest magnitude code, NaN
/// code, fnuz.
MXF_LAUNCHER mxf_quantize_fp8_block(const void* x, int dtype, int64_t rows, int64_t cols,
                                    int64_t bm, int64_t bn, const int32_t* rules,
                                    uint8_t* codes, void* scales, hipStream_t stream) {
  if (rows < 1 || cols < 1 || bm < 1 || bn < 1) return hipErrorInvalidConfiguration;
  mxf::BlockRules r;
  r.scale = mxf::binary_of(rules[0]);
  r.scale_bytes = mxf::width_of(rules[0]);
  r.quotient = mxf::binary_of(rules[1]);
  r.fmt_max = static_cast<uint32_t>(rules[2]);
  r.has_floor = rules[3] != 0;
  r.floor = static_cast<uint32_t>(rules[4]);
  r.multiplier_floor = static_cast<uint32_t>(rules[5]);
  r.power_of_two = rules[6] != 0;
  r.has_zero_scale = rules[7] != 0;
  r.zero_scale = static_cast<uint32_t>(rules[8]);
  r.multiplier = rules[9];
  r.clamp = rules[10] != 0;
  r.elem = mxf::Binary{rules[11], rules[12], rules[13]};
  r.elem_max_code = rules[14];
  r.nan_code = rules[15];
  r.fnuz = rules[16] != 0;
  const int64_t grid_rows = (rows + bm - 1) / bm, grid_cols = (cols + bn - 1) / bn;
  const dim3 grid(static_cast<unsigned>(grid_rows * grid_cols));
  const mxf::Binary in = mxf::binary_of(dtype);
  if (mxf::width_of(dtype) == 2) {
    hipLaunchKernelGGL(mxf::quantize_fp8_block_kernel<uint16_t>, grid, dim3(mxf::kTileThreads),
                       0, stream, static_cast<const uint16_t*>(x), rows, cols, bm, bn,
                       grid_cols, in, r, codes, scales);
  } else {
    hipLaunchKernelGGL(mxf::quantize_fp8_block_kernel<uint32_t>, grid, dim3(mxf::kTileThreads),
                       0, stream, static_cast<const uint32_t*>(x), rows, cols, bm, bn,
                       grid_cols, in, r, codes, scales);
  }
  return hipGetLastError();
}

/// dequantize_fp8_block: codes [rows, cols] of the element format (ebits, mbits, bias,
/// specials: mx_numerics.h Specials), scales [ceil(rows / bm), ceil(cols / bn)] of
/// ``scale_dtype`` (float32, bfloat16, float16), out [rows, cols] of ``out_dtype``.
MXF_LAUNCHER mxf_dequantize_fp8_block(const uint8_t* codes, const void* scales, int64_t rows,
                                      int64_t cols, int64_t bm, int64_t bn,
                                      const int32_t* element, int scale_dtype, int out_dtype,
                                      void* out, hipStream_t stream) {
  if (bm < 1 || bn < 1) return hipErrorInvalidConfiguration;
  if (rows < 1 || cols < 1) return hipSuccess;
  const mxf::Binary elem{element[0], element[1], element[2]};
  const mxf::Binary scale_layout = mxf::binary_of(scale_dtype);
  if (mxf::width_of(scale_dtype) == 2)
    return mxf::dequantize_block_to<uint16_t>(out_dtype, codes, scales, rows, cols, bm, bn, elem,
                                              element[3], scale_layout, out, stream);
  return mxf::dequantize_block_to<uint32_t>(out_dtype, codes, scales, rows, cols, bm, bn, elem,
                                            element[3], scale_layout, out, stream);
}
