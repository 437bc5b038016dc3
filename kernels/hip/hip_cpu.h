// The part of the HIP runtime and device API the kernels in this folder use, on the CPU.
//
// Each kernel body runs as written: a launch runs every work-group (block) in turn, and each
// thread of a block is a fiber (its own stack) on one OS thread. A thread runs until it waits
// at a barrier; __syncthreads() waits for every thread of the block, a wave shuffle for every
// lane of the wave (two barriers: all lanes publish, then all lanes read). The wave size is a
// run-time parameter (set_warp_size), so one binary runs waves of 64 (CDNA) and 32 (RDNA,
// NVIDIA). A barrier some thread can never reach (divergent __syncthreads, a thread that
// returned early) aborts with a message instead of hanging: on a GPU it is undefined.
//
// Under AddressSanitizer every fiber switch is announced with __sanitizer_start_switch_fiber /
// __sanitizer_finish_switch_fiber, so stack accesses on fiber stacks are checked too.
//
// Not provided: streams beyond the null stream, device memory distinct from host memory (the
// driver passes host pointers), cooperative groups, dynamic shared memory.
#pragma once

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define HIPCPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HIPCPU_ASAN 1
#endif
#endif
#ifdef HIPCPU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// One block runs at a time on one OS thread, so a function-local static is the block's LDS.
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

using hipStream_t = struct hipcpu_stream*;
enum hipError_t { hipSuccess = 0, hipErrorInvalidConfiguration = 9 };

namespace hipcpu {

[[noreturn]] inline void fail(const char* message) {
  std::fprintf(stderr, "hip-cpu: %s\n", message);
  std::fflush(stderr);
  std::abort();
}

// A fiber switch must not make a system call (ucontext's swapcontext saves the signal mask
// with one, which costs microseconds in a sandbox and dominates a launch): on x86-64 the switch
// is a few instructions saving the callee-saved registers, MXCSR and the x87 control word on
// the old stack. Elsewhere ucontext is used.
#if defined(__x86_64__)
extern "C" void hipcpu_switch(void** save_stack_pointer, void* load_stack_pointer);
// Weak: every translation unit that includes this header defines it; the linker keeps one.
asm(R"(
  .text
  .weak hipcpu_switch
  .type hipcpu_switch, @function
hipcpu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size hipcpu_switch, .-hipcpu_switch
)");
struct Context {
  void* stack_pointer = nullptr;
};
#else
using Context = ucontext_t;
#endif

struct Fiber {
  Context context;
  dim3 thread_idx;
  unsigned linear_id = 0;
  std::vector<unsigned char> stack;
  bool done = false;
  // The barrier this fiber waits at (nullptr: runnable) and the generation it arrived in.
  const unsigned* waiting_generation = nullptr;
  unsigned arrived_in = 0;
};

struct Barrier {
  unsigned expected = 0;
  unsigned arrived = 0;
  unsigned generation = 0;
};

struct Launch {
  dim3 grid, block, block_idx;
  unsigned warp_size = 64;
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  Context scheduler;
  Barrier block_barrier;
  std::vector<Barrier> wave_barriers;
  std::vector<uint64_t> lane_slots;  // one per thread: the value a lane publishes to its wave
#ifdef HIPCPU_ASAN
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
#endif
};

inline Launch& state() {
  static Launch launch;
  return launch;
}

inline unsigned& configured_warp_size() {
  static unsigned size = 64;
  return size;
}

/// The wave size of the next launches: 64 (CDNA) or 32 (RDNA, NVIDIA).
inline void set_warp_size(unsigned size) {
  if (size != 32 && size != 64) fail("the wave size must be 32 or 64");
  configured_warp_size() = size;
}

inline Fiber& current_fiber() {
  Fiber* f = state().current;
  if (f == nullptr) fail("device code called outside a kernel launch");
  return *f;
}

// -- switching between the scheduler and a fiber -------------------------------------------

inline void switch_context(Context& save, Context& load) {
#if defined(__x86_64__)
  hipcpu_switch(&save.stack_pointer, load.stack_pointer);
#else
  swapcontext(&save, &load);
#endif
}

inline void switch_to_scheduler(Fiber& f, bool finished) {
  Launch& L = state();
#ifdef HIPCPU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake_stack, L.scheduler_stack_bottom,
                                 L.scheduler_stack_size);
#endif
  switch_context(f.context, L.scheduler);
  if (finished) fail("a finished thread was resumed");
#ifdef HIPCPU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, &L.scheduler_stack_bottom, &L.scheduler_stack_size);
#endif
}

[[noreturn]] inline void fiber_entry() {
  Launch& L = state();
#ifdef HIPCPU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &L.scheduler_stack_bottom, &L.scheduler_stack_size);
#endif
  (*L.body)();
  Fiber& f = current_fiber();
  f.done = true;
  switch_to_scheduler(f, true);
  fail("unreachable");
}

/// Make ``f`` start at fiber_entry on its own stack when next resumed.
inline void prepare(Fiber& f) {
#if defined(__x86_64__)
  // The frame hipcpu_switch pops: MXCSR and x87 control word, six registers, the return
  // address (fiber_entry), then a dummy slot so fiber_entry starts with the ABI's alignment.
  auto top = reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size()) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top) - 9;
  frame[0] = 0x037F00001F80ull;  // MXCSR default (round to nearest, no FTZ), x87 default CW
  for (int r = 1; r <= 6; ++r) frame[r] = 0;
  frame[7] = reinterpret_cast<uint64_t>(&fiber_entry);
  frame[8] = 0;
  f.context.stack_pointer = frame;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.data();
  f.context.uc_stack.ss_size = f.stack.size();
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_entry, 0);
#endif
}

inline void resume(Fiber& f) {
  Launch& L = state();
  L.current = &f;
#ifdef HIPCPU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f.stack.data(), f.stack.size());
#endif
  switch_context(L.scheduler, f.context);
#ifdef HIPCPU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  L.current = nullptr;
}

// -- barriers ------------------------------------------------------------------------------

/// Wait until every participant of ``b`` has arrived (the last one to arrive does not yield).
inline void arrive_and_wait(Barrier& b) {
  Fiber& f = current_fiber();
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  f.waiting_generation = &b.generation;
  f.arrived_in = b.generation;
  switch_to_scheduler(f, false);
}

inline void syncthreads() { arrive_and_wait(state().block_barrier); }

inline unsigned lane_id() { return current_fiber().linear_id % state().warp_size; }

// -- wave shuffles (HIP semantics: a source lane outside the caller's width segment reads the
// caller's own value for __shfl_down/__shfl_xor; __shfl takes the source modulo width) -------

template <class T>
T shuffle_from(T value, unsigned source_lane_in_wave) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value,
                "shuffles move at most 64-bit values");
  Launch& L = state();
  Fiber& f = current_fiber();
  const unsigned wave = f.linear_id / L.warp_size;
  uint64_t slot = 0;
  std::memcpy(&slot, &value, sizeof(T));
  L.lane_slots[f.linear_id] = slot;
  arrive_and_wait(L.wave_barriers[wave]);
  T result;
  std::memcpy(&result, &L.lane_slots[wave * L.warp_size + source_lane_in_wave], sizeof(T));
  arrive_and_wait(L.wave_barriers[wave]);
  return result;
}

inline void check_width(int width) {
  if (width <= 0 || (width & (width - 1)) != 0 || static_cast<unsigned>(width) > state().warp_size)
    fail("shuffle width must be a power of two no larger than the wave size");
}

template <class T>
T shfl(T value, int source_lane, int width) {
  check_width(width);
  const unsigned self = lane_id();
  const unsigned segment = self & ~static_cast<unsigned>(width - 1);
  return shuffle_from(value, segment + (static_cast<unsigned>(source_lane) & (width - 1)));
}

template <class T>
T shfl_down(T value, unsigned delta, int width) {
  check_width(width);
  const unsigned self = lane_id();
  const bool inside = (self & (width - 1)) + delta < static_cast<unsigned>(width);
  return shuffle_from(value, inside ? self + delta : self);
}

template <class T>
T shfl_xor(T value, int lane_mask, int width) {
  check_width(width);
  const unsigned self = lane_id();
  const unsigned other = self ^ static_cast<unsigned>(lane_mask);
  const unsigned segment_end = (self + width) & ~static_cast<unsigned>(width - 1);
  return shuffle_from(value, other >= segment_end ? self : other);
}

// -- launching -----------------------------------------------------------------------------

/// Stack per fiber: generous, because sanitised code keeps redzones around every local.
constexpr size_t kFiberStack = 256 * 1024;

inline void run_block() {
  Launch& L = state();
  for (Fiber& f : L.fibers) {
    f.done = false;
    f.waiting_generation = nullptr;
    prepare(f);
  }
  size_t finished = 0;
  while (finished < L.fibers.size()) {
    bool progressed = false;
    for (Fiber& f : L.fibers) {
      if (f.done) continue;
      if (f.waiting_generation != nullptr) {
        if (*f.waiting_generation == f.arrived_in) continue;  // its barrier has not opened yet
        f.waiting_generation = nullptr;
      }
      resume(f);
      progressed = true;
      if (f.done) ++finished;
    }
    if (!progressed) {
      fail(finished ? "a barrier (__syncthreads or a wave shuffle) waits for a thread that "
                      "has returned"
                    : "deadlock: threads wait at different barriers");
    }
  }
}

inline void launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  Launch& L = state();
  if (L.body != nullptr) fail("kernel launched from device code");
  const unsigned threads = block.x * block.y * block.z;
  L.warp_size = configured_warp_size();
  if (threads == 0 || threads > 1024 || threads % L.warp_size != 0)
    fail("a block needs 1..1024 threads, a multiple of the wave size");
  L.grid = grid;
  L.block = block;
  L.body = &body;
  L.fibers.resize(threads);
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = L.fibers[i];
    f.linear_id = i;
    f.thread_idx = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
    if (f.stack.size() != kFiberStack) f.stack.assign(kFiberStack, 0);
  }
  L.block_barrier = Barrier{threads, 0, 0};
  L.wave_barriers.assign(threads / L.warp_size, Barrier{L.warp_size, 0, 0});
  L.lane_slots.assign(threads, 0);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        L.block_idx = dim3(x, y, z);
        run_block();
      }
  L.body = nullptr;
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned shared_bytes,
                   hipStream_t, Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
  if (shared_bytes != 0) fail("dynamic shared memory is not supported");
  const std::function<void()> body = [=] { kernel(static_cast<Params>(args)...); };
  launch(grid, block, body);
}

}  // namespace hipcpu

#define threadIdx (::hipcpu::current_fiber().thread_idx)
#define blockIdx (::hipcpu::state().block_idx)
#define blockDim (::hipcpu::state().block)
#define gridDim (::hipcpu::state().grid)
#define warpSize (static_cast<int>(::hipcpu::state().warp_size))

inline void __syncthreads() { ::hipcpu::syncthreads(); }

inline unsigned atomicMax(unsigned* address, unsigned value) {
  const unsigned old = *address;  // one OS thread: no other thread can interleave here
  if (value > old) *address = value;
  return old;
}

#define hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, ...) \
  ::hipcpu::launch_kernel(kernel, dim3(grid), dim3(block), shared_bytes, stream, __VA_ARGS__)

inline hipError_t hipGetLastError() { return hipSuccess; }

inline hipError_t hipMemsetAsync(void* p, int value, size_t bytes, hipStream_t) {
  std::memset(p, value, bytes);
  return hipSuccess;
}
