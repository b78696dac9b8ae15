// dlopen/dlsym of cuDNN (see cudnn_loader.hpp). The library is never unloaded:
// cuDNN keeps CUDA resources whose teardown order at exit is not ours to pick.
#include "cudnn_loader.hpp"

#include <dlfcn.h>

#include <memory>

namespace braidpy {
namespace cudnn {

namespace {

std::unique_ptr<Library> the_library;

// Resolves "cudnn" + name into *slot; false (and *missing = the symbol) if absent.
template <class F>
bool resolve(void* h, const char* name, F* slot, std::string* missing) {
  const std::string symbol = std::string("cudnn") + name;
  void* p = dlsym(h, symbol.c_str());
  if (p == nullptr) {
    *missing = symbol;
    return false;
  }
  *slot = reinterpret_cast<F>(p);
  return true;
}

bool resolve_all(void* h, Api& a, std::string* missing) {
#define BRAIDPY_RESOLVE(name) resolve(h, #name, &a.name, missing)
  return BRAIDPY_RESOLVE(GetVersion) && BRAIDPY_RESOLVE(GetErrorString) &&
         BRAIDPY_RESOLVE(Create) && BRAIDPY_RESOLVE(Destroy) && BRAIDPY_RESOLVE(SetStream) &&
         BRAIDPY_RESOLVE(CreateTensorDescriptor) && BRAIDPY_RESOLVE(DestroyTensorDescriptor) &&
         BRAIDPY_RESOLVE(SetTensor4dDescriptorEx) && BRAIDPY_RESOLVE(GetTensor4dDescriptor) &&
         BRAIDPY_RESOLVE(CreateFilterDescriptor) && BRAIDPY_RESOLVE(DestroyFilterDescriptor) &&
         BRAIDPY_RESOLVE(SetFilter4dDescriptor) && BRAIDPY_RESOLVE(GetFilter4dDescriptor) &&
         BRAIDPY_RESOLVE(CreateConvolutionDescriptor) &&
         BRAIDPY_RESOLVE(DestroyConvolutionDescriptor) &&
         BRAIDPY_RESOLVE(SetConvolution2dDescriptor) &&
         BRAIDPY_RESOLVE(GetConvolution2dDescriptor) &&
         BRAIDPY_RESOLVE(SetConvolutionGroupCount) && BRAIDPY_RESOLVE(GetConvolutionGroupCount) &&
         BRAIDPY_RESOLVE(SetConvolutionMathType) &&
         BRAIDPY_RESOLVE(GetConvolution2dForwardOutputDim) &&
         BRAIDPY_RESOLVE(GetConvolutionNdForwardOutputDim) &&
         BRAIDPY_RESOLVE(GetConvolutionForwardAlgorithm_v7) &&
         BRAIDPY_RESOLVE(GetConvolutionForwardWorkspaceSize) &&
         BRAIDPY_RESOLVE(ConvolutionForward) &&
         BRAIDPY_RESOLVE(GetConvolutionBackwardDataAlgorithm_v7) &&
         BRAIDPY_RESOLVE(GetConvolutionBackwardDataWorkspaceSize) &&
         BRAIDPY_RESOLVE(ConvolutionBackwardData) &&
         BRAIDPY_RESOLVE(GetConvolutionBackwardFilterAlgorithm_v7) &&
         BRAIDPY_RESOLVE(GetConvolutionBackwardFilterWorkspaceSize) &&
         BRAIDPY_RESOLVE(ConvolutionBackwardFilter) && BRAIDPY_RESOLVE(ConvolutionBackwardBias);
#undef BRAIDPY_RESOLVE
}

// The optional functions (cudnn_api.hpp): resolved where present, left nullptr where not,
// so that a cuDNN without them still serves the heuristic choice of algorithms.
void resolve_optional(void* h, Api& a) {
  std::string absent;  // no reason to refuse: cudnn_conv.cpp names it where it is needed
#define BRAIDPY_OPTIONAL(name) resolve(h, #name, &a.name, &absent)
  BRAIDPY_OPTIONAL(FindConvolutionForwardAlgorithmEx);
  BRAIDPY_OPTIONAL(FindConvolutionBackwardDataAlgorithmEx);
  BRAIDPY_OPTIONAL(FindConvolutionBackwardFilterAlgorithmEx);
#undef BRAIDPY_OPTIONAL
}

// One candidate: the library, or nullptr and *why.
std::unique_ptr<Library> try_one(const std::string& path, std::string* why) {
  dlerror();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *why = e ? e : "dlopen failed";
    return nullptr;
  }
  auto lib = std::make_unique<Library>();
  std::string missing;
  if (!resolve_all(h, lib->api, &missing)) {
    *why = "loaded but lacks " + missing + " (not cuDNN 9's legacy convolution API)";
    dlclose(h);
    return nullptr;
  }
  resolve_optional(h, lib->api);
  lib->version = lib->api.GetVersion();
  if (lib->version / 10000 != kMajor) {
    *why = "cuDNN version " + std::to_string(lib->version) + " is not " +
           std::to_string(kMajor) + ".x";
    dlclose(h);
    return nullptr;
  }
  lib->path = path;
  lib->handle = h;
  return lib;
}

}  // namespace

const Library* load(const std::vector<std::string>& candidates, std::string* why) {
  if (the_library) return the_library.get();
  std::string reasons;
  for (const std::string& c : candidates) {
    std::string w;
    std::unique_ptr<Library> lib = try_one(c, &w);
    if (lib) {
      the_library = std::move(lib);
      return the_library.get();
    }
    reasons += (reasons.empty() ? "" : "; ") + c + ": " + w;
  }
  if (why) *why = candidates.empty() ? "no candidate library was given" : reasons;
  return nullptr;
}

const Library* loaded() { return the_library.get(); }

}  // namespace cudnn
}  // namespace braidpy
