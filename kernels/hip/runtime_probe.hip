// Probes of the CPU runtime's semantics (hip_cpu.h), linked into the CPU driver only and run by
// tests/kernels/test_hip_build.py: wave shuffles with every width, __syncthreads through LDS,
// and a barrier that a returned thread can never reach (the runtime must abort, not hang).
#include <cstring>

#include "hip_platform.h"

namespace {

constexpr int kProbeFields = 6;
constexpr int kMaxThreads = 256;

// Per thread: its lane, __shfl from lane + 3 (mod width), __shfl_down by 1, __shfl_xor 1
// (each of the thread id), the id of the mirror thread read from LDS after __syncthreads, and
// the sum of the ids of its width segment by a xor butterfly.
__global__ void probe_wave_kernel(int32_t* out, int width) {
  __shared__ int32_t ids[kMaxThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % warpSize;
  ids[tid] = tid;
  __syncthreads();
  int32_t* mine = out + tid * kProbeFields;
  mine[0] = lane;
  mine[1] = MXF_SHFL(tid, (lane + 3) % width, width);
  mine[2] = MXF_SHFL_DOWN(tid, 1u, width);
  mine[3] = MXF_SHFL_XOR(tid, 1, width);
  mine[4] = ids[blockDim.x - 1 - tid];
  int sum = tid;
  for (int mask = width / 2; mask > 0; mask /= 2) sum += MXF_SHFL_XOR(sum, mask, width);
  mine[5] = sum;
}

__global__ void probe_divergent_barrier_kernel(int32_t* out) {
  if (threadIdx.x % 2) return;  // half the threads never reach the barrier below
  __syncthreads();
  out[threadIdx.x] = 1;
}

}  // namespace

/// params: threads, width (probe_wave); threads (probe_divergent_barrier). out: int32 values.
extern "C" hipError_t mxf_probe_run(const char* op, const int64_t* params, int32_t* out) {
  const dim3 block(static_cast<unsigned>(params[0]));
  if (std::strcmp(op, "probe_wave") == 0) {
    hipLaunchKernelGGL(probe_wave_kernel, dim3(1), block, 0, nullptr, out,
                       static_cast<int>(params[1]));
    return hipGetLastError();
  }
  if (std::strcmp(op, "probe_divergent_barrier") == 0) {
    hipLaunchKernelGGL(probe_divergent_barrier_kernel, dim3(1), block, 0, nullptr, out);
    return hipGetLastError();
  }
  return hipErrorInvalidConfiguration;
}
