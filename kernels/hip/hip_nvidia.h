// HIP -> CUDA: the few HIP names the kernels in this folder use, for nvcc.
//
// Debian's HIP-on-NVIDIA headers (HIP 5.2) do not build with CUDA 13, so the kernels are
// compiled with `nvcc -x cu -arch=sm_90 --fmad=false` against this header instead
// (hip_platform.h picks it when __CUDACC__ is defined).
#pragma once

#include <cuda_runtime.h>

using hipStream_t = cudaStream_t;
using hipError_t = cudaError_t;
#define hipSuccess cudaSuccess
#define hipGetLastError cudaGetLastError
#define hipMemsetAsync cudaMemsetAsync
#define hipErrorInvalidConfiguration cudaErrorInvalidConfiguration

#define hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, ...) \
  (kernel)<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)
