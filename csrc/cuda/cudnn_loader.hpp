// Loading cuDNN at first use: dlopen of a libcudnn.so.9 from a list of
// candidates (braidpy/_cudnn.py builds it: BRAIDPY_CUDNN_LIBRARY, the
// nvidia-cudnn-cu13 wheel, the system loader), every function of cudnn_api.hpp
// resolved (the optional ones where present), the major version checked. No Python,
// no CUDA.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cudnn_api.hpp"

namespace braidpy {
namespace cudnn {

// The cuDNN major version braidpy's declarations describe.
constexpr std::size_t kMajor = 9;

struct Library {
  Api api{};
  std::string path;          // the candidate that loaded
  std::size_t version = 0;   // cudnnGetVersion(), e.g. 92801 for 9.28.1
  void* handle = nullptr;    // dlopen's
};

// The library, loading it from `candidates` (tried in order) if not yet loaded;
// nullptr when none loads, *why then saying for each candidate why not. A
// loaded library stays loaded for the life of the process.
const Library* load(const std::vector<std::string>& candidates, std::string* why);

// The library if already loaded, else nullptr.
const Library* loaded();

}  // namespace cudnn
}  // namespace braidpy
