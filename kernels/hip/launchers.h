// The kernels' C entry points (defined in the .hip files beside this header). Pointers are
// device pointers (host pointers under the CPU runtime) except ``rules``, a host array of the
// plan's integer fields; dtypes are mxf::Dtype numbers
// (0 float32, 1 bfloat16, 2 float16, 3 float64). Each returns hipSuccess or the launch error.
#pragma once

#include "hip_platform.h"

MXF_LAUNCHER mxf_quantize_mx(const void* x, int dtype, int64_t rows, int64_t n, int block_size,
                             const int32_t* table, const int32_t* rules, uint8_t* codes,
                             uint8_t* scales, hipStream_t stream);
MXF_LAUNCHER mxf_dequantize_mx(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                               int64_t n, int block_size, const int32_t* table,
                               const float* half_factors, const int32_t* rules, void* out,
                               hipStream_t stream);
MXF_LAUNCHER mxf_dequantize_int4(const int8_t* q, const void* scales, int64_t rows, int64_t n,
                                 int64_t group, int scale_dtype, int out_dtype, void* out,
                                 hipStream_t stream);
MXF_LAUNCHER mxf_dequantize_w4a8(const uint32_t* weight, const uint32_t* weight_scale,
                                 const uint32_t* weight_scale_2, int64_t rows, int64_t words,
                                 const int32_t* layout, int out_dtype, void* out,
                                 hipStream_t stream);
MXF_LAUNCHER mxf_quantize_fp8(const void* x, int dtype, int64_t count, const int32_t* target,
                              uint32_t* amax_bits, uint8_t* codes, uint32_t* scale,
                              hipStream_t stream);
MXF_LAUNCHER mxf_e4m3fn_to_fnuz(const uint8_t* codes, int64_t count, const uint32_t* scales,
                                int64_t scale_count, uint8_t* codes_out, uint32_t* scales_out,
                                hipStream_t stream);
MXF_LAUNCHER mxf_quantize_fp8_block(const void* x, int dtype, int64_t rows, int64_t cols,
                                    int64_t bm, int64_t bn, const int32_t* rules,
                                    uint8_t* codes, void* scales, hipStream_t stream);
MXF_LAUNCHER mxf_dequantize_fp8_block(const uint8_t* codes, const void* scales, int64_t rows,
                                      int64_t cols, int64_t bm, int64_t bn,
                                      const int32_t* element, int scale_dtype, int out_dtype,
                                      void* out, hipStream_t stream);
MXF_LAUNCHER mxf_quantize_nvfp4(const void* x, int dtype, int64_t count, int64_t groups,
                                int has_global_amax, uint32_t global_amax,
                                const int32_t* rules, uint8_t* codes, uint8_t* scales,
                                uint32_t* global_out, uint32_t* amax, uint32_t* partials,
                                hipStream_t stream);
MXF_LAUNCHER mxf_dequantize_nvfp4(const uint8_t* codes, int packed, const uint8_t* scales,
                                  const uint32_t* global_scale, int64_t count,
                                  const int32_t* layouts, int out_dtype, void* out,
                                  hipStream_t stream);
extern "C" hipError_t mxf_run(const char* op, const int64_t* params, int64_t param_count,
                              const void* const* inputs, int64_t input_count,
                              void* const* outputs, int64_t output_count, hipStream_t stream);
