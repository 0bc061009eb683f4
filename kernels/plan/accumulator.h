// The type each input dtype accumulates in: float32 and float64 in their own type, the 16-bit
// types in float32. Host and device types alike.
#pragma once

namespace tiledmm {

template <typename T>
struct Accumulator {
  using type = float;  // float, and every 16-bit type
};

template <>
struct Accumulator<double> {
  using type = double;
};

}  // namespace tiledmm
