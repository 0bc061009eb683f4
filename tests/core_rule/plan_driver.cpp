// Prints the Hopper GEMM core's plan (plan_core, gemm_core_plan.cpp) for each problem read from
// standard input, one JSON object a line, so that tests/test_core_rule.py can check the rule on a
// machine without a GPU. Input lines: m n k batch dtype(bf16|f16|f32|f32t) num_sms tile_override
// splits_override; f32t: TF32 run transposed (A MN-major, through registers), the others x @ W^T. The
// first output line gives the core's tile table.
#include <iostream>
#include <string>

#include "cuda/sm90/gemm_core_plan.h"

using namespace tiledmm;

int main() {
  std::cout << "{\"tile_base\": " << kCoreTileBase << ", \"bm\": " << kCoreBM << ", \"bn\": [";
  for (int t = 0; t < kCoreTiles; ++t) std::cout << (t ? ", " : "") << kCoreBN[t];
  std::cout << "], \"cluster\": [";
  for (int t = 0; t < kCoreTiles; ++t) std::cout << (t ? ", " : "") << kCoreCluster[t];
  std::cout << "], \"pingpong\": [";
  for (int t = 0; t < kCoreTiles; ++t) std::cout << (t ? ", " : "") << (kCorePingPong[t] ? "true" : "false");
  std::cout << "]}\n";
  GemmProblem p{};
  std::string dtype;
  int sms = 0;
  while (std::cin >> p.m >> p.n >> p.k >> p.batch >> dtype >> sms >> p.tile_override >> p.splits_override) {
    using torch::headeronly::ScalarType;
    p.dtype = dtype.rfind("f32", 0) == 0 ? ScalarType::Float : dtype == "f16" ? ScalarType::Half : ScalarType::BFloat16;
    p.a.row_major = dtype != "f32t";
    const CorePlan c = plan_core(p, sms);
    std::cout << "{\"tile\": " << c.tile << ", \"tiles\": " << c.tiles << ", \"dp_tiles\": " << c.dp_tiles
              << ", \"clusters\": " << c.clusters << ", \"max_parts\": " << c.max_parts
              << ", \"group_rows\": " << c.group_rows << ", \"fits\": " << (c.fits ? "true" : "false") << "}\n";
  }
  return 0;
}
