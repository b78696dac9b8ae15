// cuDNN convolution calls (cudnn_conv.hpp). Every status is checked and turned
// into a StatusError naming the call; descriptors are owned by the plans.
#include "cudnn_conv.hpp"

#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace braidpy {
namespace cudnn {

namespace {

namespace cp = convplan;

void check(const Library& lib, Status s, const char* call) {
  if (s == kSuccess) return;
  const char* text = lib.api.GetErrorString(s);
  throw StatusError(s, std::string(call) + " failed: " + (text ? text : "unknown status") +
                           " (cudnnStatus_t " + std::to_string(s) + ")");
}

#define BRAIDPY_CUDNN(lib, call, ...) check(lib, (lib).api.call(__VA_ARGS__), "cudnn" #call)

int data_type(int dtype) { return dtype == cp::kF64 ? kDataDouble : kDataFloat; }

static_assert(cp::kMathDefault == kDefaultMath && cp::kMathTensorOp == kTensorOpMath &&
                  cp::kMathFma == kFmaMath,
              "conv_plan.hpp's math types are cuDNN's cudnnMathType_t values");

// A problem's descriptors, destroyed with it.
struct Descriptors {
  const Library* lib = nullptr;
  TensorDesc x = nullptr, y = nullptr, bias = nullptr;
  FilterDesc w = nullptr;
  ConvDesc conv = nullptr;

  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (!lib) return;  // statuses ignored: nothing to do about a failed destroy
    if (x) lib->api.DestroyTensorDescriptor(x);
    if (y) lib->api.DestroyTensorDescriptor(y);
    if (bias) lib->api.DestroyTensorDescriptor(bias);
    if (w) lib->api.DestroyFilterDescriptor(w);
    if (conv) lib->api.DestroyConvolutionDescriptor(conv);
  }
};

void set_tensor(const Library& lib, TensorDesc d, int dt, const cp::Tensor4& t) {
  BRAIDPY_CUDNN(lib, SetTensor4dDescriptorEx, d, dt, t.n, t.c, t.h, t.w, t.ns, t.cs, t.hs, t.ws);
}

std::unique_ptr<Descriptors> make_descriptors(const Library& lib, const cp::Problem& p) {
  const std::string bad = cp::check(p);
  if (!bad.empty()) throw std::invalid_argument(bad);
  auto d = std::make_unique<Descriptors>();
  d->lib = &lib;
  const int dt = data_type(p.dtype);
  BRAIDPY_CUDNN(lib, CreateTensorDescriptor, &d->x);
  BRAIDPY_CUDNN(lib, CreateTensorDescriptor, &d->y);
  BRAIDPY_CUDNN(lib, CreateTensorDescriptor, &d->bias);
  BRAIDPY_CUDNN(lib, CreateFilterDescriptor, &d->w);
  BRAIDPY_CUDNN(lib, CreateConvolutionDescriptor, &d->conv);
  set_tensor(lib, d->x, dt, cp::input_desc(p));
  set_tensor(lib, d->y, dt, cp::output_desc(p));
  set_tensor(lib, d->bias, dt, cp::bias_desc(p));
  const cp::Filter4 f = cp::filter_desc(p);
  BRAIDPY_CUDNN(lib, SetFilter4dDescriptor, d->w, dt, kFormatNCHW, f.k, f.c, f.h, f.w);
  const cp::Conv2 c = cp::conv_desc(p);
  // Accumulate in the data's own precision (float64 stays float64).
  BRAIDPY_CUDNN(lib, SetConvolution2dDescriptor, d->conv, c.pad_h, c.pad_w, c.stride_h,
                c.stride_w, c.dil_h, c.dil_w, kCrossCorrelation, dt);
  BRAIDPY_CUDNN(lib, SetConvolutionGroupCount, d->conv, c.groups);
  // float32: no TF32 tensor-core rounding (braidpy's float32 tolerance is 1e-5) unless the
  // problem allows it (BRAIDPY_TF32=1); float64: the default.
  BRAIDPY_CUDNN(lib, SetConvolutionMathType, d->conv, cp::math_type(p.dtype, p.tf32));
  return d;
}

// The first deterministic algorithm the heuristics rank as usable, else `pinned`.
// Chosen once per plan, so every call of a shape runs the same algorithm.
int pick(const std::vector<AlgoPerf>& perf, int returned, int pinned) {
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == kSuccess && perf[i].determinism == kDeterministic) return perf[i].algo;
  return pinned;
}

struct Plan {
  std::unique_ptr<Descriptors> d;
  Chosen chosen;
};

// One device's cuDNN handle and plans. Handles are never destroyed: they live
// until the process ends (cuDNN's teardown order at exit is not ours to pick).
struct DeviceState {
  Handle handle = nullptr;
  cp::PlanCache<Plan> plans{64};
};

// Calls come with the GIL held (one at a time), so the map and caches need no lock.
std::map<int, DeviceState> devices;

DeviceState& device_state(const Library& lib, int device) {
  DeviceState& s = devices[device];
  if (s.handle == nullptr) BRAIDPY_CUDNN(lib, Create, &s.handle);
  return s;
}

// cuDNN's heuristic choice of the three algorithms (deterministic ones; see pick).
void choose_by_heuristics(const Library& lib, Handle h, const Descriptors& d, Chosen& c) {
  int n = 0;
  std::vector<AlgoPerf> perf(kFwdAlgoCount);
  BRAIDPY_CUDNN(lib, GetConvolutionForwardAlgorithm_v7, h, d.x, d.w, d.conv, d.y, kFwdAlgoCount,
                &n, perf.data());
  c.fwd = pick(perf, n, kFwdImplicitGemm);
  perf.assign(kBwdDataAlgoCount, AlgoPerf{});
  BRAIDPY_CUDNN(lib, GetConvolutionBackwardDataAlgorithm_v7, h, d.w, d.y, d.conv, d.x,
                kBwdDataAlgoCount, &n, perf.data());
  c.bwd_data = pick(perf, n, kBwdDataAlgo1);
  perf.assign(kBwdFilterAlgoCount, AlgoPerf{});
  BRAIDPY_CUDNN(lib, GetConvolutionBackwardFilterAlgorithm_v7, h, d.x, d.y, d.conv, d.w,
                kBwdFilterAlgoCount, &n, perf.data());
  c.bwd_filter = pick(perf, n, kBwdFilterAlgo1);
}

// The workspace each chosen algorithm needs.
void record_workspace(const Library& lib, Handle h, const Descriptors& d, Chosen& c) {
  std::size_t bytes = 0;
  BRAIDPY_CUDNN(lib, GetConvolutionForwardWorkspaceSize, h, d.x, d.w, d.conv, d.y, c.fwd, &bytes);
  c.workspace.record(cp::kForward, bytes);
  BRAIDPY_CUDNN(lib, GetConvolutionBackwardDataWorkspaceSize, h, d.w, d.y, d.conv, d.x,
                c.bwd_data, &bytes);
  c.workspace.record(cp::kBackwardData, bytes);
  BRAIDPY_CUDNN(lib, GetConvolutionBackwardFilterWorkspaceSize, h, d.x, d.y, d.conv, d.w,
                c.bwd_filter, &bytes);
  c.workspace.record(cp::kBackwardFilter, bytes);
}

Plan& get_plan(const Library& lib, int device, const cp::Problem& p) {
  DeviceState& s = device_state(lib, device);
  if (Plan* found = s.plans.find(p)) return *found;
  if (p.benchmark)
    throw std::invalid_argument("no measured plan of this shape is cached (never measured, or "
                                "evicted); conv_measure makes one");
  Plan plan;
  plan.d = make_descriptors(lib, p);
  choose_by_heuristics(lib, s.handle, *plan.d, plan.chosen);
  record_workspace(lib, s.handle, *plan.d, plan.chosen);
  return s.plans.insert(p, std::move(plan), [](Plan&) {});
}

// Records of a measurement as conv_plan.hpp's Timed (what fastest() reads).
std::vector<cp::Timed> as_timed(const std::vector<AlgoPerf>& perf, int returned) {
  std::vector<cp::Timed> t(static_cast<std::size_t>(returned));
  for (int i = 0; i < returned; ++i) {
    const AlgoPerf& r = perf[static_cast<std::size_t>(i)];
    cp::Timed& e = t[static_cast<std::size_t>(i)];
    e.algo = r.algo;
    e.ran = r.status == kSuccess;
    e.ms = r.time;
    e.workspace = r.memory;
    e.deterministic = r.determinism == kDeterministic;
    e.math_type = r.math_type;
  }
  return t;
}

// Takes the fastest qualifying measured algorithm of operation op, if any, into c.
void take_fastest(const std::vector<AlgoPerf>& perf, int returned, std::size_t offered,
                  int math, cp::Op op, int* algo, Chosen& c) {
  const std::vector<cp::Timed> t = as_timed(perf, returned);
  const int best = cp::fastest(t.data(), returned, offered, math);
  if (best < 0) return;  // the heuristic choice stays, measured false
  *algo = best;
  c.measured[op] = true;
}

void require_measuring(const Library& lib) {
  const std::string lacks = lacks_measuring(lib);
  if (!lacks.empty())
    throw std::runtime_error("choosing cuDNN's algorithms by measurement needs " + lacks +
                             ", which " + lib.path + " lacks");
}

// The handle on the caller's stream, and the plan; refuses too small a workspace.
Plan& ready(const Library& lib, int device, const cp::Problem& p, cp::Op op, std::size_t bytes,
            Stream stream, Handle* handle) {
  Plan& plan = get_plan(lib, device, p);
  if (!plan.chosen.workspace.enough(op, bytes))
    throw std::invalid_argument("workspace of " + std::to_string(bytes) + " bytes is smaller "
                                "than the " + std::to_string(plan.chosen.workspace.need[op]) +
                                " bytes cuDNN asks for");
  *handle = devices[device].handle;
  BRAIDPY_CUDNN(lib, SetStream, *handle, stream);
  return plan;
}

// alpha = 1, beta = 0 in the data's precision (cuDNN reads them as such).
struct Scalars {
  double d1 = 1.0, d0 = 0.0;
  float f1 = 1.0f, f0 = 0.0f;
  const void* one(int dtype) const { return dtype == cp::kF64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(int dtype) const { return dtype == cp::kF64 ? static_cast<const void*>(&d0) : &f0; }
};
const Scalars scalars;

}  // namespace

Described describe(const Library& lib, const cp::Problem& p) {
  std::unique_ptr<Descriptors> d = make_descriptors(lib, p);
  Described r;
  cp::Tensor4& x = r.x;
  BRAIDPY_CUDNN(lib, GetTensor4dDescriptor, d->x, &r.x_dtype, &x.n, &x.c, &x.h, &x.w, &x.ns,
                &x.cs, &x.hs, &x.ws);
  cp::Tensor4& b = r.bias;
  int bdt = 0;
  BRAIDPY_CUDNN(lib, GetTensor4dDescriptor, d->bias, &bdt, &b.n, &b.c, &b.h, &b.w, &b.ns, &b.cs,
                &b.hs, &b.ws);
  BRAIDPY_CUDNN(lib, GetFilter4dDescriptor, d->w, &r.w_dtype, &r.w_format, &r.w.k, &r.w.c,
                &r.w.h, &r.w.w);
  cp::Conv2& c = r.conv;
  BRAIDPY_CUDNN(lib, GetConvolution2dDescriptor, d->conv, &c.pad_h, &c.pad_w, &c.stride_h,
                &c.stride_w, &c.dil_h, &c.dil_w, &r.mode, &r.compute_type);
  BRAIDPY_CUDNN(lib, GetConvolutionGroupCount, d->conv, &c.groups);
  BRAIDPY_CUDNN(lib, GetConvolution2dForwardOutputDim, d->conv, d->x, d->w, &r.out2d[0],
                &r.out2d[1], &r.out2d[2], &r.out2d[3]);
  BRAIDPY_CUDNN(lib, GetConvolutionNdForwardOutputDim, d->conv, d->x, d->w, 4, r.out_nd);
  return r;
}

Chosen plan(const Library& lib, int device, const cp::Problem& p) {
  return get_plan(lib, device, p).chosen;
}

std::string lacks_measuring(const Library& lib) {
  const std::pair<bool, const char*> needed[] = {
      {lib.api.FindConvolutionForwardAlgorithmEx != nullptr,
       "cudnnFindConvolutionForwardAlgorithmEx"},
      {lib.api.FindConvolutionBackwardDataAlgorithmEx != nullptr,
       "cudnnFindConvolutionBackwardDataAlgorithmEx"},
      {lib.api.FindConvolutionBackwardFilterAlgorithmEx != nullptr,
       "cudnnFindConvolutionBackwardFilterAlgorithmEx"}};
  std::string lacks;
  for (const auto& f : needed)
    if (!f.first) lacks += (lacks.empty() ? "" : ", ") + std::string(f.second);
  return lacks;
}

bool measured(const Library& lib, int device, const cp::Problem& p) {
  cp::Problem key = p;
  key.benchmark = true;
  return device_state(lib, device).plans.contains(key);
}

std::size_t measure_workspace(const Library& lib, int device, const cp::Problem& p) {
  require_measuring(lib);
  const Handle h = device_state(lib, device).handle;
  const std::unique_ptr<Descriptors> d = make_descriptors(lib, p);
  // Every algorithm cuDNN defines for each operation; one it does not support for these
  // descriptors answers with a non-success status and is no candidate.
  std::vector<std::size_t> needs;
  std::size_t bytes = 0;
  for (int a = 0; a < kFwdAlgoCount; ++a)
    if (lib.api.GetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, a, &bytes) ==
        kSuccess)
      needs.push_back(bytes);
  for (int a = 0; a < kBwdDataAlgoCount; ++a)
    if (lib.api.GetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->conv, d->x, a,
                                                        &bytes) == kSuccess)
      needs.push_back(bytes);
  for (int a = 0; a < kBwdFilterAlgoCount; ++a)
    if (lib.api.GetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->conv, d->w, a,
                                                          &bytes) == kSuccess)
      needs.push_back(bytes);
  return cp::measure_offer(needs.data(), static_cast<int>(needs.size()),
                           cp::kMeasureWorkspaceLimit);
}

// The Ex forms of cudnnFind*Algorithm, not the plain ones: Ex runs on the caller's
// buffers and workspace (from CuPy's pool, like every other braidpy conv call), while
// the plain forms cudaMalloc their own tensors and workspace behind the pool's back,
// which fails or evicts where the pool holds most of the device's memory.
Chosen measure(const Library& lib, int device, const cp::Problem& p, const Scratch& b) {
  require_measuring(lib);
  DeviceState& s = device_state(lib, device);
  BRAIDPY_CUDNN(lib, SetStream, s.handle, b.stream);
  cp::Problem key = p;
  key.benchmark = true;
  Plan plan;
  plan.d = make_descriptors(lib, key);
  const Descriptors& d = *plan.d;
  Chosen& c = plan.chosen;
  choose_by_heuristics(lib, s.handle, d, c);  // what an operation keeps if nothing qualifies
  const int math = cp::math_type(key.dtype, key.tf32);
  // Twice the enum's count: cuDNN may report an algorithm once per math type.
  int n = 0;
  std::vector<AlgoPerf> perf(2 * kFwdAlgoCount);
  BRAIDPY_CUDNN(lib, FindConvolutionForwardAlgorithmEx, s.handle, d.x, b.x, d.w, b.w, d.conv, d.y,
                b.y, static_cast<int>(perf.size()), &n, perf.data(), b.workspace, b.bytes);
  take_fastest(perf, n, b.bytes, math, cp::kForward, &c.fwd, c);
  perf.assign(2 * kBwdDataAlgoCount, AlgoPerf{});
  BRAIDPY_CUDNN(lib, FindConvolutionBackwardDataAlgorithmEx, s.handle, d.w, b.w, d.y, b.y, d.conv,
                d.x, b.x, static_cast<int>(perf.size()), &n, perf.data(), b.workspace, b.bytes);
  take_fastest(perf, n, b.bytes, math, cp::kBackwardData, &c.bwd_data, c);
  perf.assign(2 * kBwdFilterAlgoCount, AlgoPerf{});
  BRAIDPY_CUDNN(lib, FindConvolutionBackwardFilterAlgorithmEx, s.handle, d.x, b.x, d.y, b.y,
                d.conv, d.w, b.w, static_cast<int>(perf.size()), &n, perf.data(), b.workspace,
                b.bytes);
  take_fastest(perf, n, b.bytes, math, cp::kBackwardFilter, &c.bwd_filter, c);
  record_workspace(lib, s.handle, d, c);
  return s.plans.insert(key, std::move(plan), [](Plan&) {}).chosen;
}

void forward(const Library& lib, int device, const cp::Problem& p, const void* x, const void* w,
             void* y, void* workspace, std::size_t bytes, Stream stream) {
  Handle h = nullptr;
  Plan& plan = ready(lib, device, p, cp::kForward, bytes, stream, &h);
  const Descriptors& d = *plan.d;
  BRAIDPY_CUDNN(lib, ConvolutionForward, h, scalars.one(p.dtype), d.x, x, d.w, w, d.conv,
                plan.chosen.fwd, workspace, bytes, scalars.zero(p.dtype), d.y, y);
}

void backward_data(const Library& lib, int device, const cp::Problem& p, const void* w,
                   const void* dy, void* dx, void* workspace, std::size_t bytes, Stream stream) {
  Handle h = nullptr;
  Plan& plan = ready(lib, device, p, cp::kBackwardData, bytes, stream, &h);
  const Descriptors& d = *plan.d;
  BRAIDPY_CUDNN(lib, ConvolutionBackwardData, h, scalars.one(p.dtype), d.w, w, d.y, dy, d.conv,
                plan.chosen.bwd_data, workspace, bytes, scalars.zero(p.dtype), d.x, dx);
}

void backward_filter(const Library& lib, int device, const cp::Problem& p, const void* x,
                     const void* dy, void* dw, void* workspace, std::size_t bytes,
                     Stream stream) {
  Handle h = nullptr;
  Plan& plan = ready(lib, device, p, cp::kBackwardFilter, bytes, stream, &h);
  const Descriptors& d = *plan.d;
  BRAIDPY_CUDNN(lib, ConvolutionBackwardFilter, h, scalars.one(p.dtype), d.x, x, d.y, dy,
                d.conv, plan.chosen.bwd_filter, workspace, bytes, scalars.zero(p.dtype), d.w, dw);
}

void backward_bias(const Library& lib, int device, const cp::Problem& p, const void* dy,
                   void* db, Stream stream) {
  Handle h = nullptr;
  Plan& plan = ready(lib, device, p, cp::kForward, ~std::size_t(0), stream, &h);
  const Descriptors& d = *plan.d;
  BRAIDPY_CUDNN(lib, ConvolutionBackwardBias, h, scalars.one(p.dtype), d.y, dy,
                scalars.zero(p.dtype), d.bias, db);
}

CacheStats cache_stats() {
  CacheStats s;
  for (const auto& kv : devices) {
    s.plans += kv.second.plans.size();
    s.hits += kv.second.plans.hits();
    s.misses += kv.second.plans.misses();
  }
  return s;
}

}  // namespace cudnn
}  // namespace braidpy
