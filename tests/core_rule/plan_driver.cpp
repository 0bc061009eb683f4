// Prints the Hopper GEMM core's plan (plan_core_run, gemm_core_plan.cpp) for each problem read from
// standard input, one JSON object a line, so that tests/test_core_rule.py can check the rule on a
// machine without a GPU. Input lines: m n k batch dtype num_sms tile_override splits_override; dtype
// bf16, f16 or f32 (x @ W^T: A row-major, B column-major), with a layout after a colon (bf16:tn: A
// column-major, B row-major, as dW = dy^T x; f32:nn, TF32 dy @ W, which the core runs transposed), or
// f32t: TF32 with A MN-major and B K-major (the problem the core runs for dy @ W, planned as given);
// a further ":b" after the layout makes B one matrix that the batch broadcasts (batch stride 0).
// The first output line gives the core's tile table.
#include <iostream>
#include <string>

#include "cuda/sm90/gemm_core_plan.h"

using namespace tiledmm;

int main() {
  std::cout << "{\"tile_base\": " << kCoreTileBase << ", \"bm\": [";
  for (int t = 0; t < kCoreTiles; ++t) std::cout << (t ? ", " : "") << kCoreBM[t];
  std::cout << "], \"bn\": [";
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
    const std::string type = dtype.substr(0, dtype.find(':'));
    const std::string rest = dtype.find(':') == std::string::npos ? "nt" : dtype.substr(dtype.find(':') + 1);
    const std::string layout = rest.substr(0, 2);
    const bool broadcast_b = rest.size() > 2 && rest.substr(2) == ":b";
    p.dtype = type.rfind("f32", 0) == 0 ? ScalarType::Float : type == "f16" ? ScalarType::Half : ScalarType::BFloat16;
    p.a.row_major = type != "f32t" && layout[0] == 'n';
    p.b.row_major = layout[1] == 'n';
    // Dense operands: lines k long where K-major, else m or n.
    p.a.ld = p.a.row_major ? p.k : p.m;
    p.b.ld = p.b.row_major ? p.n : p.k;
    p.a.batch_stride = p.m * p.k;
    p.b.batch_stride = broadcast_b ? 0 : p.k * p.n;
    const CoreRun run = plan_core_run(p, sms);
    const CorePlan& c = run.plan;
    std::cout << "{\"tile\": " << c.tile << ", \"tiles\": " << c.tiles << ", \"dp_tiles\": " << c.dp_tiles
              << ", \"clusters\": " << c.clusters << ", \"max_parts\": " << c.max_parts
              << ", \"group_rows\": " << c.group_rows << ", \"fits\": " << (c.fits ? "true" : "false")
              << ", \"transposed\": " << (run.problem.c_transposed ? "true" : "false")
              << ", \"time_us\": " << c.time * 1e6 << ", \"fit_us\": " << c.fit_time * 1e6 << "}\n";
  }
  return 0;
}
