// Launch helpers shared by the .cu files: the stream handle from Python's integer, the
// grid of an element-per-thread kernel, and its grid-stride loop.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.hpp"

namespace braidpy {
namespace cuda {

constexpr int kThreads = 256;

inline cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// Blocks of kThreads for n elements, at most max_blocks (the loop strides over the rest).
inline unsigned blocks_for(kern::Index n, kern::Index max_blocks) {
  const kern::Index b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

}  // namespace cuda
}  // namespace braidpy

// for (i = this thread's first element; i < n; i += the grid's threads)
#define BRAIDPY_GRID_LOOP(i, n)                                                                  \
  for (::braidpy::kern::Index i = blockIdx.x * static_cast<::braidpy::kern::Index>(blockDim.x) + \
                                  threadIdx.x;                                                   \
       i < (n); i += static_cast<::braidpy::kern::Index>(gridDim.x) * blockDim.x)
