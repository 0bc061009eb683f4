// Stands in for torch's header of the same path when tests/test_core_rule.py compiles the Hopper
// GEMM core's rule (gemm_core_plan.cpp) alone: the rule reads a problem's dtype and nothing else of
// torch. Values as torch numbers them.
#pragma once

#include <cstdint>

namespace torch::headeronly {
enum class ScalarType : int8_t { Half = 5, Float = 6, Double = 7, BFloat16 = 15 };
}  // namespace torch::headeronly
