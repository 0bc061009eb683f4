// The one place that chooses the path for a problem (with_family): which arithmetic (exact
// CUDA-core float32, 3xTF32, TF32, 16-bit or float64 tensor cores) on which kernel family, from
// the dtype, the precision argument, the GPU and the problem's shape. Each family's tile table and
// tile rules sit with its kernel (cuda/sm80/exact_float_family.cuh, cuda/sm80/mma_family.cuh,
// cuda/sm90/wgmma_family.cuh; the Hopper GEMM core's in cuda/sm90/gemm_core_plan.h), and
// run_family.cuh plans the tile shape, K splits, load width and operand layouts, launches them,
// and says what it chose and why (tiledmm.explain). Each path is instantiated in its own file
// (gemm_cuda_<path>.cu) so that they compile in parallel.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/dispatch/family.cuh"
#include "cuda/dispatch/run_family.cuh"
#include "cuda/sm80/exact_float_family.cuh"
#include "cuda/sm80/mma_family.cuh"
#include "cuda/sm90/gemm_core_plan.h"
#include "cuda/sm90/wgmma_family.cuh"
#include "plan/gemm_problem.h"

namespace tiledmm {

// 'highest' (float32 accuracy by the fastest path that has it), on Hopper: 3xTF32 on wgmma
// (1.5-1.8x cuBLAS's float32 on the anchors), except where its accuracy falls short
// (Wgmma3xTf32Family::is_as_accurate: small outputs with K < 4096 run 3xTF32 on mma.sync).
// Elsewhere it runs the exact kernel where that
// is both as accurate as cuBLAS and faster than 3xTF32 (on an H200, mma.sync's TF32 rate caps
// 3xTF32 at 108 TFLOP/s, and it ran at 0.64-0.81x of the exact kernel: bench/NOTES.md): outputs
// at least a tile wide and tall that fill the GPU (both libraries sum them along K in one pass)
// or whose K is long enough to be split for accuracy. Elsewhere 3xTF32: small outputs, where
// cuBLAS splits K and one sequential sum was 2-3.5x less accurate, and narrow ones, where the
// exact kernel's wide tiles run partly empty. Below kMin3xTf32K the exact kernel again: 3xTF32's
// dropped small x small product and truncated tensor-core sums do not average out over so few
// products.
constexpr int64_t kMin3xTf32K = 32;

// 'highest' at short K on Hopper: one float16 product of the operands' scaled splits (3 K long,
// scaled_split.cuh), where the output's writes take as long as 3xTF32's products. On an H200,
// 32768 x 64 x 32768: 1.31-1.39 ms against 3xTF32's 1.69-1.80 (torch 4.04-4.44), error 1.3e-7
// against torch's 1.4e-7 on randn and 1.9e-7 against 1.2e-7 on rand; K = 48 and 33: 2.7x and 2.5x
// torch against 3xTF32's 2.1x and 1.7x (bench/NOTES.md items 148-149). At K = 32 its product
// alone was no faster than 3xTF32, and at K = 128 slower and 2.9x torch's error on rand (longer
// chains of truncating tensor-core additions): 32 < K <= 64, outputs that fill the GPU, one K slice.
struct ScaledSplitPath {};
constexpr int64_t kMinScaledSplitK = 33, kMaxScaledSplitK = 64;
inline bool scaled_split_fits(const GemmProblem& p, int num_sms) {
  using Tile = std::tuple_element_t<kShortK, WgmmaTileTable<WgmmaHalfInput<__half>>::Tiles>;
  return p.k >= kMinScaledSplitK && p.k <= kMaxScaledSplitK && p.tile_override < 0 && p.splits_override < 1 &&
         p.m >= Tile::BM && p.n >= Tile::BN && output_tiles(p, Tile::BM, Tile::BN) >= 2 * num_sms;
}
template <>
void run_family<ScaledSplitPath>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device);
template <>
std::string describe_family<ScaledSplitPath>(const GemmProblem& p, const DeviceLimits& device);

// The Hopper GEMM core (gemm_core_sm90.cuh, configured by gemm_core_plan.h) for 16-bit operands and
// TF32 (T = float): its run_family and describe_family are defined with its kernels
// (gemm_cuda_core_<type>_sm90.cu).
template <typename T>
struct CorePath {};
#define TILEDMM_CORE_PATH(T)                                                                                   \
  template <>                                                                                                   \
  void run_family<CorePath<T>>(const GemmProblem& p, cudaStream_t stream, const DeviceLimits& device);          \
  template <>                                                                                                   \
  std::string describe_family<CorePath<T>>(const GemmProblem& p, const DeviceLimits& device);
TILEDMM_CORE_PATH(__half)
TILEDMM_CORE_PATH(__nv_bfloat16)
TILEDMM_CORE_PATH(float)
#undef TILEDMM_CORE_PATH

inline bool exact_is_faster_and_as_accurate(const GemmProblem& p, int num_sms) {
  using Medium = std::tuple_element_t<kMedium, ExactFloatFamily::Tiles>;
  if (p.m < Medium::BM || p.n < Medium::BN) return false;
  return output_tiles(p, Medium::BM, Medium::BN) >= num_sms || accuracy_splits<float>(p) > 1;
}

// The path of a problem: calls f(Family{}, why) for the family its dtype and precision select.
// T: the device storage type.
template <typename T, typename F>
void with_family(const GemmProblem& p, const DeviceLimits& device, F&& f) {
  const int num_sms = device.num_sms;
  if constexpr (std::is_same_v<T, float>) {
    switch (p.precision) {
      case Precision::k3xTf32:
        if (device.wgmma && Wgmma3xTf32Family::is_as_accurate(p, num_sms))
          return f(Wgmma3xTf32Family{}, "precision 3xtf32: float32 accuracy on TF32 tensor cores");
        return f(MmaFamily<Split3xTf32Math>{}, "precision 3xtf32: float32 accuracy on TF32 tensor cores");
      case Precision::kTf32:
        if (device.wgmma && core_takes(p))
          return f(CorePath<float>{}, "precision tf32: inputs rounded to TF32; A row-major (x @ W^T, or dy @ W "
                                      "computed transposed), 16-byte aligned, K > " + std::to_string(kCoreMinK - 1) +
                                      ": the Hopper GEMM core");
        if (device.wgmma) return f(WgmmaTf32Family{}, "precision tf32: inputs rounded to TF32");
        return f(MmaFamily<Tf32Math>{}, "precision tf32: inputs rounded to TF32");
      case Precision::kHighest:
        if (p.k < kMin3xTf32K)
          return f(ExactFloatFamily{}, "precision highest: K < " + std::to_string(kMin3xTf32K) +
                                           " is too short for 3xTF32 to keep float32 accuracy: exact kernel");
        // One output row or column: memory-bound, where 3xTF32 buys no speed, and a single dot
        // product with cancellation showed 3xTF32's dropped remainder product (5.4e-6 against
        // torch's 1.2e-6 at 1 x 257 x 1).
        if (p.m == 1 || p.n == 1)
          return f(ExactFloatFamily{}, "precision highest: a single output row or column (memory-bound): "
                                       "exact kernel");
        if (device.wgmma && scaled_split_fits(p, num_sms))
          return f(ScaledSplitPath{}, "precision highest: short K (" + std::to_string(kMinScaledSplitK) + " ... " +
                                          std::to_string(kMaxScaledSplitK) +
                                          ") with an output that fills the GPU: float32 accuracy from one float16 "
                                          "product of the operands' scaled big and remainder parts");
        if (device.wgmma && Wgmma3xTf32Family::is_as_accurate(p, num_sms))
          return f(Wgmma3xTf32Family{}, "precision highest: 3xTF32 on Hopper's warpgroup tensor "
                                        "cores, float32 accuracy faster than the exact kernel");
        if (device.wgmma)
          return f(MmaFamily<Split3xTf32Math>{},
                   "precision highest: a small output with K too short to split finely, where 3xTF32 on "
                   "mma.sync (float32 sums every 8 of K) keeps float32 accuracy");
        if (exact_is_faster_and_as_accurate(p, num_sms))
          return f(ExactFloatFamily{},
                   "precision highest: an output that fills the GPU (or a K split for accuracy), "
                   "where the exact kernel is as accurate as cuBLAS and faster than 3xTF32 on mma.sync");
        return f(MmaFamily<Split3xTf32Math>{},
                 "precision highest: a small or narrow output, where 3xTF32 keeps float32 accuracy "
                 "however K is split, and is faster than the exact kernel's wide tiles");
      default:
        return f(ExactFloatFamily{}, "precision ieee: exact float32 arithmetic");
    }
  } else if constexpr (std::is_same_v<T, double>) {
    f(MmaFamily<DoubleMath>{}, "float64: IEEE double fused multiply-adds on the FP64 tensor cores");
  } else if (device.wgmma && core_takes(p)) {
    f(CorePath<T>{}, "16-bit inputs on Hopper, 16-byte aligned: the Hopper GEMM core");
  } else if (device.wgmma) {
    f(WgmmaFamily<WgmmaHalfInput<T>>{}, "16-bit inputs on Hopper: warpgroup tensor cores, float32 accumulation");
  } else {
    f(MmaFamily<HalfMath<T>>{}, "16-bit inputs: tensor cores, float32 accumulation");
  }
}

// Each family is instantiated once, in its own file (gemm_cuda_<path>.cu):
//   namespace tiledmm { TILEDMM_FAMILY_TEMPLATES(, MmaFamily<Tf32Math>) }
#define TILEDMM_FAMILIES(X)                                                                 \
  X(ExactFloatFamily) X(MmaFamily<Split3xTf32Math>) X(MmaFamily<Tf32Math>)                \
  X(MmaFamily<DoubleMath>) X(MmaFamily<HalfMath<__half>>) X(MmaFamily<HalfMath<__nv_bfloat16>>) \
  X(WgmmaFamily<WgmmaHalfInput<__half>>) X(WgmmaFamily<WgmmaHalfInput<__nv_bfloat16>>)       \
  X(WgmmaTf32Family) X(Wgmma3xTf32Family)
#define TILEDMM_FAMILY_TEMPLATES(prefix, Family)                                 \
  prefix template void run_family<Family>(const GemmProblem&, cudaStream_t, const DeviceLimits&); \
  prefix template std::string describe_family<Family>(const GemmProblem&, const DeviceLimits&);
#define TILEDMM_EXTERN_FAMILY(Family) TILEDMM_FAMILY_TEMPLATES(extern, Family)
TILEDMM_FAMILIES(TILEDMM_EXTERN_FAMILY)

}  // namespace tiledmm
