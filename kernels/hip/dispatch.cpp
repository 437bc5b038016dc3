// One C entry point for every kernel, by name: mxf_run. The CPU driver (driver.cpp) calls it
// with host buffers; on a GPU, Python calls it through ctypes with device pointers (the
// shared library built by nvcc or by torch.utils.cpp_extension on ROCm), so the argument
// order of each operation is written once, here. ``params`` are host integers, ``inputs`` and
// ``outputs`` device pointers, in the order listed for each operation.
#include <cstring>

#include "launchers.h"

namespace {

struct Call {
  const int64_t* p;
  const void* const* in;
  void* const* out;
  hipStream_t stream;
};

int dtype_of(int64_t v) { return static_cast<int>(v); }

template <class T>
const T* input(const Call& c, int i) { return static_cast<const T*>(c.in[i]); }

template <class T>
T* output(const Call& c, int i) { return static_cast<T*>(c.out[i]); }

/// Integer fields (a plan's rules, a format's layout), from params[first] on, for a launcher.
struct Rules {
  int32_t values[24];
  Rules(const int64_t* p, int first, int count) {
    for (int i = 0; i < count; ++i) values[i] = static_cast<int32_t>(p[first + i]);
  }
};

constexpr int kQuantizeRules = 20;
constexpr int kDequantizeRules = 10;
constexpr int kFp8Target = 8;
constexpr int kNibbleLayout = 9;
constexpr int kBlockRules = 17;
constexpr int kElementLayout = 4;
constexpr int kNvfp4Rules = 21;
constexpr int kNvfp4Layouts = 9;

// params: dtype, rows, n, block size, the 20 rules; in: x, table; out: codes, scales.
hipError_t quantize_mx(const Call& c) {
  const Rules rules(c.p, 4, kQuantizeRules);
  return mxf_quantize_mx(c.in[0], dtype_of(c.p[0]), c.p[1], c.p[2], static_cast<int>(c.p[3]),
                         input<int32_t>(c, 1), rules.values, output<uint8_t>(c, 0),
                         output<uint8_t>(c, 1), c.stream);
}

// params: rows, n, block size, the 10 rules; in: codes, scales, table, half factors;
// out: values.
hipError_t dequantize_mx(const Call& c) {
  const Rules rules(c.p, 3, kDequantizeRules);
  return mxf_dequantize_mx(input<uint8_t>(c, 0), input<uint8_t>(c, 1), c.p[0], c.p[1],
                           static_cast<int>(c.p[2]), input<int32_t>(c, 2), input<float>(c, 3),
                           rules.values, c.out[0], c.stream);
}

// params: scale dtype, out dtype, rows, n, group; in: q (int8), scales; out: values.
hipError_t dequantize_int4(const Call& c) {
  return mxf_dequantize_int4(input<int8_t>(c, 0), c.in[1], c.p[2], c.p[3], c.p[4],
                             dtype_of(c.p[0]), dtype_of(c.p[1]), c.out[0], c.stream);
}

// params: out dtype, rows, words, the 9 layout fields; in: weight (int32), weight_scale,
// weight_scale_2; out: values.
hipError_t dequantize_w4a8(const Call& c) {
  const Rules layout(c.p, 3, kNibbleLayout);
  return mxf_dequantize_w4a8(input<uint32_t>(c, 0), input<uint32_t>(c, 1),
                             input<uint32_t>(c, 2), c.p[1], c.p[2], layout.values,
                             dtype_of(c.p[0]), c.out[0], c.stream);
}

// params: dtype, count, the 8 target fields; in: x; out: codes, scale, amax bits.
hipError_t quantize_fp8(const Call& c) {
  const Rules target(c.p, 2, kFp8Target);
  return mxf_quantize_fp8(c.in[0], dtype_of(c.p[0]), c.p[1], target.values,
                          output<uint32_t>(c, 2), output<uint8_t>(c, 0), output<uint32_t>(c, 1),
                          c.stream);
}

// params: count, scale count; in: codes, scales; out: codes, scales.
hipError_t e4m3fn_to_fnuz(const Call& c) {
  return mxf_e4m3fn_to_fnuz(input<uint8_t>(c, 0), c.p[0], input<uint32_t>(c, 1), c.p[1],
                            output<uint8_t>(c, 0), output<uint32_t>(c, 1), c.stream);
}

// params: dtype, rows, cols, bm, bn, the 17 rules; in: x; out: codes, scales.
hipError_t quantize_fp8_block(const Call& c) {
  const Rules rules(c.p, 5, kBlockRules);
  return mxf_quantize_fp8_block(c.in[0], dtype_of(c.p[0]), c.p[1], c.p[2], c.p[3], c.p[4],
                                rules.values, output<uint8_t>(c, 0), c.out[1], c.stream);
}

// params: scale dtype, out dtype, rows, cols, bm, bn, the 4 element fields (ebits, mbits, bias,
// specials); in: codes, scales; out: values.
hipError_t dequantize_fp8_block(const Call& c) {
  const Rules element(c.p, 6, kElementLayout);
  return mxf_dequantize_fp8_block(input<uint8_t>(c, 0), c.in[1], c.p[2], c.p[3], c.p[4], c.p[5],
                                  element.values, dtype_of(c.p[0]), dtype_of(c.p[1]), c.out[0],
                                  c.stream);
}

// params: dtype, count, pass-1 groups, has global_amax, its float32 bits, the 21 rules;
// in: x; out: codes, scales, global scale, amax bits, pass-1 partials [groups].
hipError_t quantize_nvfp4(const Call& c) {
  const Rules rules(c.p, 5, kNvfp4Rules);
  return mxf_quantize_nvfp4(c.in[0], dtype_of(c.p[0]), c.p[1], c.p[2], static_cast<int>(c.p[3]),
                            static_cast<uint32_t>(c.p[4]), rules.values, output<uint8_t>(c, 0),
                            output<uint8_t>(c, 1), output<uint32_t>(c, 2),
                            output<uint32_t>(c, 3), output<uint32_t>(c, 4), c.stream);
}

// params: packed, count, out dtype, the 9 layout fields; in: codes, scales, global scale;
// out: values.
hipError_t dequantize_nvfp4(const Call& c) {
  const Rules layouts(c.p, 3, kNvfp4Layouts);
  return mxf_dequantize_nvfp4(input<uint8_t>(c, 0), static_cast<int>(c.p[0]),
                              input<uint8_t>(c, 1), input<uint32_t>(c, 2), c.p[1],
                              layouts.values, dtype_of(c.p[2]), c.out[0], c.stream);
}

struct Op {
  const char* name;
  int64_t params, inputs, outputs;
  hipError_t (*run)(const Call&);
};

const Op kOps[] = {
    {"quantize_mx", 4 + kQuantizeRules, 2, 2, quantize_mx},
    {"dequantize_mx", 3 + kDequantizeRules, 4, 1, dequantize_mx},
    {"dequantize_int4", 5, 2, 1, dequantize_int4},
    {"dequantize_w4a8", 3 + kNibbleLayout, 3, 1, dequantize_w4a8},
    {"quantize_fp8", 2 + kFp8Target, 1, 3, quantize_fp8},
    {"e4m3fn_to_fnuz", 2, 2, 2, e4m3fn_to_fnuz},
    {"quantize_fp8_block", 5 + kBlockRules, 1, 2, quantize_fp8_block},
    {"dequantize_fp8_block", 6 + kElementLayout, 2, 1, dequantize_fp8_block},
    {"quantize_nvfp4", 5 + kNvfp4Rules, 1, 5, quantize_nvfp4},
    {"dequantize_nvfp4", 3 + kNvfp4Layouts, 3, 1, dequantize_nvfp4},
};

}  // namespace

/// Run operation ``op``; hipErrorInvalidConfiguration for an unknown name or wrong counts.
extern "C" hipError_t mxf_run(const char* op, const int64_t* params, int64_t param_count,
                              const void* const* inputs, int64_t input_count,
                              void* const* outputs, int64_t output_count, hipStream_t stream) {
  for (const Op& candidate : kOps) {
    if (std::strcmp(candidate.name, op) != 0) continue;
    if (candidate.params != param_count || candidate.inputs != input_count ||
        candidate.outputs != output_count)
      return hipErrorInvalidConfiguration;
    return candidate.run(Call{params, inputs, outputs, stream});
  }
  return hipErrorInvalidConfiguration;
}
