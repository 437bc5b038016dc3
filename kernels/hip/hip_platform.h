// One include for every kernel: the HIP runtime on AMD (hipcc, or a host compiler given
// -D__HIP_PLATFORM_AMD__ as torch.utils.cpp_extension does on ROCm), the CUDA mapping under nvcc,
// the project's CPU runtime elsewhere (g++/clang++), plus the wave shuffles the kernels use
// under one set of names (HIP's __shfl family; CUDA only has the *_sync forms).
#pragma once

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#define MXF_SHFL(value, lane, width) __shfl((value), (lane), (width))
#define MXF_SHFL_DOWN(value, delta, width) __shfl_down((value), (delta), (width))
#define MXF_SHFL_XOR(value, mask, width) __shfl_xor((value), (mask), (width))
#elif defined(__CUDACC__)
#include "hip_nvidia.h"
#define MXF_SHFL(value, lane, width) __shfl_sync(0xffffffffu, (value), (lane), (width))
#define MXF_SHFL_DOWN(value, delta, width) __shfl_down_sync(0xffffffffu, (value), (delta), (width))
#define MXF_SHFL_XOR(value, mask, width) __shfl_xor_sync(0xffffffffu, (value), (mask), (width))
#else
#include "hip_cpu.h"
#define MXF_SHFL(value, lane, width) ::hipcpu::shfl((value), (lane), (width))
#define MXF_SHFL_DOWN(value, delta, width) ::hipcpu::shfl_down((value), (delta), (width))
#define MXF_SHFL_XOR(value, mask, width) ::hipcpu::shfl_xor((value), (mask), (width))
#endif

#include <stdint.h>

// Launchers are plain C symbols so the CPU driver, ctypes (NVIDIA) and the ROCm extension all
// call them the same way: device pointers in, hipError_t out.
#define MXF_LAUNCHER extern "C" hipError_t
