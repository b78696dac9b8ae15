// braidpy's cuDNN convolutions: per-device handles, per-shape plans
// (descriptors, pinned algorithms, workspace sizes; conv_plan.hpp's cache), the
// algorithms chosen by cuDNN's heuristics or, for a Problem with benchmark set, by
// measurement (cudnnFind*AlgorithmEx, once per shape), and
// thin calls of cudnnConvolutionForward / BackwardData / BackwardFilter /
// BackwardBias on the caller's stream with the caller's workspace. No Python, no
// CUDA runtime: the binding layer checks the device and picks the stream.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "conv_plan.hpp"
#include "cudnn_loader.hpp"

namespace braidpy {
namespace cudnn {

// A cuDNN call failed: its status, the call, and cudnnGetErrorString's text.
struct StatusError : std::runtime_error {
  Status status;
  StatusError(Status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

// What cuDNN itself answers about a problem's descriptors, no GPU needed.
struct Described {
  int x_dtype = -1;
  convplan::Tensor4 x, bias;
  int w_dtype = -1, w_format = -1;
  convplan::Filter4 w;
  convplan::Conv2 conv;
  int mode = -1, compute_type = -1;
  int out2d[4] = {0, 0, 0, 0};    // cudnnGetConvolution2dForwardOutputDim
  int out_nd[4] = {0, 0, 0, 0};   // cudnnGetConvolutionNdForwardOutputDim
};

// The algorithms a plan pinned, whether each was chosen by measurement (in the order
// forward, backward data, backward filter: conv_plan.hpp's Op), and the workspace each
// needs.
struct Chosen {
  int fwd = -1, bwd_data = -1, bwd_filter = -1;
  bool measured[convplan::kOps] = {false, false, false};
  convplan::Workspace workspace;
};

// Sets the descriptors of a checked problem, reads them back from cuDNN and asks
// it for the output size (descriptor calls only: no handle, no GPU).
Described describe(const Library& lib, const convplan::Problem& p);

// The plan of p on `device` (made and cached at first use): pinned algorithms
// and workspace sizes. Needs a GPU (cudnnCreate). A p with benchmark set has the
// plan measure() made; std::invalid_argument when there is none (never measured, or
// evicted from the cache).
Chosen plan(const Library& lib, int device, const convplan::Problem& p);

// The cudnnFind*AlgorithmEx functions `lib` lacks, by name ("" when it has all): the
// measured choice needs them, the heuristic one does not.
std::string lacks_measuring(const Library& lib);

// Whether p's measured plan (p.benchmark ignored) is cached on `device`. Needs a GPU.
bool measured(const Library& lib, int device, const convplan::Problem& p);

// The workspace bytes measure() offers cuDNN for p: the most any algorithm of the three
// operations asks for, within convplan::kMeasureWorkspaceLimit. Needs a GPU.
std::size_t measure_workspace(const Library& lib, int device, const convplan::Problem& p);

// The caller's device buffers for measuring p: x (input), w (filter) and y (output) of
// p's shapes and dtype, all three overwritten (y by the forward, x by the backward data,
// w by the backward filter runs), and a workspace of `bytes` (measure_workspace's).
struct Scratch {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  void* workspace = nullptr;
  std::size_t bytes = 0;
  Stream stream = nullptr;
};

// Times every algorithm of the three operations on the scratch buffers (queued on
// scratch.stream, and waited for: cuDNN's measurement blocks the host), and caches the
// plan of p with benchmark set: per operation the fastest algorithm that ran, fits the
// offered workspace, is deterministic and has the plan's math type (convplan::fastest),
// else the heuristic choice (measured false). Replaces an earlier measured plan of p.
Chosen measure(const Library& lib, int device, const convplan::Problem& p, const Scratch& s);

// y <- conv(x, w); dx <- backward data (w, dy); dw <- backward filter (x, dy);
// db <- sum of dy over (n, h, w). Arrays are packed NCHW device arrays of p's
// shapes and dtype; workspace/bytes from the caller (at least plan().workspace
// asks for the operation); the calls are queued on `stream`.
void forward(const Library& lib, int device, const convplan::Problem& p, const void* x,
             const void* w, void* y, void* workspace, std::size_t bytes, Stream stream);
void backward_data(const Library& lib, int device, const convplan::Problem& p, const void* w,
                   const void* dy, void* dx, void* workspace, std::size_t bytes, Stream stream);
void backward_filter(const Library& lib, int device, const convplan::Problem& p, const void* x,
                     const void* dy, void* dw, void* workspace, std::size_t bytes,
                     Stream stream);
void backward_bias(const Library& lib, int device, const convplan::Problem& p, const void* dy,
                   void* db, Stream stream);

// Plans cached on every device, and the cache's hits and misses.
struct CacheStats {
  std::size_t plans = 0, hits = 0, misses = 0;
};
CacheStats cache_stats();

}  // namespace cudnn
}  // namespace braidpy
