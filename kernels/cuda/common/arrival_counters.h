// Arrival counters that a launch finds zeroed without a memset on the stream before it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tiledmm {

// `count` counters for stream-K's ranges to count their arrivals on, kept per device and stream
// between launches: the kernel leaves each counter it used at zero again (its tile's last range
// resets it), so launches on one stream, which run in turn, share them. A memset before each launch
// was one more operation on the stream for every stream-K product. Returns nullptr while the stream
// is being captured into a CUDA graph (a graph may replay on another stream, beside launches that
// use these): the caller then zeroes counters of its own.
unsigned* arrival_counters(int device, cudaStream_t stream, int64_t count);

}  // namespace tiledmm
