// The CPU driver: runs the kernels on the CPU runtime (hip_cpu.h), one request at a time, for
// mxformats.kernels.hip, which starts it as a subprocess and keeps it running.
//
// Request on stdin, one text line then the input bytes:
//     <op> <wave size> <n> <params...> <n> <input byte sizes...> <n> <output byte sizes...>\n
// Reply on stdout: "ok\n" then the output bytes, or "error <message>\n". Every input and
// output lives in its own heap block of exactly its size, so AddressSanitizer reports any
// access past the end of a tensor; outputs start filled with 0xA5, so an element the kernel
// forgets to write shows up as a wrong byte. A sanitizer report ends the process
// (-fno-sanitize-recover); the Python side reads it from stderr.
#include <cstdio>
#include <cstring>
#include <vector>

#include "launchers.h"

/// The runtime probes (runtime_probe.hip, linked into this driver only).
extern "C" hipError_t mxf_probe_run(const char* op, const int64_t* params, int32_t* out);

namespace {

using Buffer = std::vector<unsigned char>;

template <class T>
bool read_counted(std::vector<T>& values) {
  unsigned long long count = 0;
  if (std::scanf("%llu", &count) != 1 || count > 64) return false;
  values.resize(count);
  long long v = 0;
  for (auto& value : values) {
    if (std::scanf("%lld", &v) != 1) return false;
    value = static_cast<T>(v);
  }
  return true;
}

void reply_error(const char* message) {
  std::fprintf(stdout, "error %s\n", message);
  std::fflush(stdout);
}

}  // namespace

int main() {
  char op[64];
  long long warp = 0;
  while (std::scanf("%63s %lld", op, &warp) == 2) {
    std::vector<int64_t> params;
    std::vector<size_t> input_sizes, output_sizes;
    if (!read_counted(params) || !read_counted(input_sizes) || !read_counted(output_sizes) ||
        std::fgetc(stdin) != '\n')
      return 2;
    std::vector<Buffer> inputs, outputs;
    std::vector<const void*> input_pointers;
    std::vector<void*> output_pointers;
    for (auto size : input_sizes) {
      inputs.emplace_back(size);
      if (size && std::fread(inputs.back().data(), 1, size, stdin) != size) return 2;
    }
    for (auto size : output_sizes) outputs.emplace_back(size, 0xA5);
    for (auto& b : inputs) input_pointers.push_back(b.data());
    for (auto& b : outputs) output_pointers.push_back(b.data());
    if (warp != 32 && warp != 64) {
      reply_error("the wave size must be 32 or 64");
      continue;
    }
    hipcpu::set_warp_size(static_cast<unsigned>(warp));
    const bool probe = std::strncmp(op, "probe_", 6) == 0 && !params.empty() &&
                       output_pointers.size() == 1;
    const hipError_t status =
        probe ? mxf_probe_run(op, params.data(), static_cast<int32_t*>(output_pointers[0]))
              : mxf_run(op, params.data(), params.size(), input_pointers.data(),
                        input_pointers.size(), output_pointers.data(), output_pointers.size(),
                        nullptr);
    if (status != hipSuccess) {
      reply_error("unknown operation, wrong argument count or invalid launch");
      continue;
    }
    std::fputs("ok\n", stdout);
    for (const Buffer& b : outputs) std::fwrite(b.data(), 1, b.size(), stdout);
    std::fflush(stdout);
  }
  return 0;
}
