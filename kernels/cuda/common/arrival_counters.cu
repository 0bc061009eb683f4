// Arrival counters kept per device and stream (arrival_counters.h).
#include "cuda/common/arrival_counters.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

namespace tiledmm {

unsigned* arrival_counters(int device, cudaStream_t stream, int64_t count) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  STD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  struct Counters {
    // Every buffer handed out stays allocated: another host thread may still launch on an older one.
    std::vector<torch::stable::Tensor> memory;
    int64_t count = 0;
  };
  static std::mutex mutex;
  // Never destroyed: at exit the CUDA context may be gone before static destructors run.
  static auto* kept = new std::map<std::pair<int, cudaStream_t>, Counters>();
  std::lock_guard<std::mutex> lock(mutex);
  Counters& c = (*kept)[{device, stream}];
  if (c.count < count) {  // zeroed once, in stream order
    c.count = std::max<int64_t>({count, 2 * c.count, 4096});
    c.memory.push_back(torch::stable::empty({c.count}, torch::headeronly::ScalarType::Int, std::nullopt,
                                            torch::stable::Device(torch::headeronly::DeviceType::CUDA, device)));
    STD_CUDA_CHECK(cudaMemsetAsync(c.memory.back().mutable_data_ptr(), 0, c.count * sizeof(unsigned), stream));
  }
  return static_cast<unsigned*>(c.memory.back().mutable_data_ptr());
}

}  // namespace tiledmm
