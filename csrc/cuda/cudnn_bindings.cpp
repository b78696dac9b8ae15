// braidpy._cuda's cuDNN entry points. Order of checks in every array call: the
// arrays and their shapes (TypeError/ValueError), cuDNN loadable and, for measuring,
// having the cudnnFind*AlgorithmEx functions (CudnnError, code None), a usable GPU
// (NoGPUError), then cuDNN's statuses (CudnnError with the cudnnStatus_t). Arrays come through __cuda_array_interface__; the stream
// is the output array's; the workspace is the caller's (CuPy's pool).
#include "cudnn_bindings.hpp"

#include <pybind11/stl.h>

#include <stdexcept>
#include <vector>

#include "../bindings/cuda_array.hpp"
#include "conv_plan.hpp"
#include "cuda_api.hpp"
#include "cudnn_conv.hpp"

namespace py = pybind11;

namespace braidpy {
namespace {

namespace cp = convplan;

// cuDNN could not be loaded.
struct CudnnMissing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> candidates() {
  return py::module_::import("braidpy._cudnn").attr("candidates")().cast<std::vector<std::string>>();
}

// The loaded library, or CudnnMissing saying what was tried.
const cudnn::Library& library(const std::string& where) {
  if (const cudnn::Library* lib = cudnn::loaded()) return *lib;
  std::string why;
  if (const cudnn::Library* lib = cudnn::load(candidates(), &why)) return *lib;
  throw CudnnMissing(where + ": cuDNN is not available (" + why + "); install "
                     "nvidia-cudnn-cu13 or set BRAIDPY_CUDNN_LIBRARY to a libcudnn.so.9 "
                     "(braidpy.cuda_info() shows what was found)");
}

// The current device, checked usable (NoGPUError otherwise).
int device(const char* where) {
  check(cuda::check_device(), where);
  int dev = 0;
  check(cuda::current_device(&dev), where);
  return dev;
}

int dtype_code(const std::string& dtype, const char* where) {
  if (dtype == "float64") return cp::kF64;
  if (dtype == "float32") return cp::kF32;
  throw py::value_error(std::string(where) + ": dtype must be 'float64' or 'float32', got '" +
                        dtype + "'");
}

cp::Problem problem(const char* where, std::int64_t n, std::int64_t c_in, std::int64_t c_out,
                    std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t groups,
                    int dtype, bool tf32 = false, bool benchmark = false) {
  cp::Problem p;
  p.dtype = dtype;
  p.tf32 = tf32;
  p.benchmark = benchmark;
  p.n = n; p.c_in = c_in; p.c_out = c_out; p.h = h; p.w = w; p.k = k; p.groups = groups;
  const std::string bad = cp::check(p);
  if (!bad.empty()) throw py::value_error(std::string(where) + ": " + bad);
  return p;
}

py::tuple tensor(const cp::Tensor4& t) {
  return py::make_tuple(py::make_tuple(t.n, t.c, t.h, t.w), py::make_tuple(t.ns, t.cs, t.hs, t.ws));
}
py::tuple filter(const cp::Filter4& f) { return py::make_tuple(f.k, f.c, f.h, f.w); }
py::tuple conv(const cp::Conv2& c) {
  return py::make_tuple(py::make_tuple(c.pad_h, c.pad_w), py::make_tuple(c.stride_h, c.stride_w),
                        py::make_tuple(c.dil_h, c.dil_w), c.groups);
}

CudaArrayView view(py::handle a, const char* where, const char* name, bool writable) {
  CudaArrayView v;
  if (!cuda_array_view(a.ptr(), v))
    throw py::type_error(std::string(where) + ": " + name + " must be a C-contiguous float64 "
                         "or float32 CUDA array (__cuda_array_interface__), got " +
                         std::string(py::str(py::type::of(a).attr("__name__"))));
  if (writable && v.readonly) throw py::value_error(std::string(where) + ": " + name +
                                                    " is read-only");
  if (v.shape.size() != 4)
    throw py::value_error(std::string(where) + ": " + name + " must be 4-D (NCHW), got " +
                          std::to_string(v.shape.size()) + " dimensions");
  return v;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// The problem of images (N, Cin, H, W), filter (Cout, Cin / groups, k, k) and
// result (N, Cout, H, W), every shape and dtype checked against the others.
cp::Problem from_arrays(const char* where, const CudaArrayView& x, const char* xn,
                        const CudaArrayView& f, const char* fn, const CudaArrayView& y,
                        const char* yn, std::int64_t groups, bool tf32, bool benchmark) {
  if (x.dtype != f.dtype || x.dtype != y.dtype)
    throw py::value_error(std::string(where) + ": " + xn + ", " + fn + " and " + yn +
                          " must have one dtype (float64 or float32)");
  if (groups < 1) throw py::value_error(std::string(where) + ": groups must be positive, got " +
                                        std::to_string(groups));
  const auto& xs = x.shape;
  const auto& fs = f.shape;
  const auto& ys = y.shape;
  const std::vector<std::int64_t> want_f = {ys[1], groups > 0 ? xs[1] / groups : 0, fs[2], fs[2]};
  if (fs != want_f || xs[1] % groups != 0)
    throw py::value_error(std::string(where) + ": " + fn + " has shape " + shape_str(fs) + " but " +
                          xn + " is " + shape_str(xs) + " and " + yn + " " + shape_str(ys) +
                          " with " + std::to_string(groups) + " groups; " + fn + " must be " +
                          "(Cout, Cin / groups, k, k) = " + shape_str(want_f));
  if (ys[0] != xs[0] || ys[2] != xs[2] || ys[3] != xs[3])
    throw py::value_error(std::string(where) + ": " + yn + " has shape " + shape_str(ys) +
                          " but " + xn + " has shape " + shape_str(xs) + "; 'same' padding "
                          "keeps batch, H and W");
  return problem(where, xs[0], xs[1], ys[1], xs[2], xs[3], fs[2], groups, x.dtype, tf32,
                 benchmark);
}

// The loaded library, refused (CudnnMissing, named) when it lacks what measuring needs.
const cudnn::Library& measuring_library(const char* where) {
  const cudnn::Library& lib = library(where);
  const std::string lacks = cudnn::lacks_measuring(lib);
  if (!lacks.empty())
    throw CudnnMissing(std::string(where) + ": choosing cuDNN's algorithms by measurement "
                       "(BRAIDPY_CUDNN_BENCHMARK=1) needs " + lacks + ", which " + lib.path +
                       " lacks; the heuristic choice (BRAIDPY_CUDNN_BENCHMARK unset or 0) "
                       "does not need it");
  return lib;
}

// A plan's algorithms and workspace, as conv_workspace and conv_measure return them.
py::dict chosen_dict(const cudnn::Chosen& c) {
  py::dict d;
  d["forward"] = c.workspace.need[cp::kForward];
  d["backward_data"] = c.workspace.need[cp::kBackwardData];
  d["backward_filter"] = c.workspace.need[cp::kBackwardFilter];
  d["request"] = c.workspace.request();
  d["algorithms"] = py::make_tuple(c.fwd, c.bwd_data, c.bwd_filter);
  d["measured"] = py::make_tuple(c.measured[cp::kForward], c.measured[cp::kBackwardData],
                                 c.measured[cp::kBackwardFilter]);
  return d;
}

void* pointer(std::uintptr_t p) { return reinterpret_cast<void*>(p); }
cudnn::Stream stream_of(const CudaArrayView& v) { return reinterpret_cast<cudnn::Stream>(v.stream); }

py::dict info() {
  py::dict d;
  d["version"] = py::none();
  d["library"] = py::none();
  d["error"] = py::none();
  try {
    const cudnn::Library& lib = library("cudnn_info");
    d["version"] = lib.version;
    d["library"] = lib.path;
  } catch (const CudnnMissing& e) {
    d["error"] = e.what();
  } catch (const py::error_already_set& e) {
    d["error"] = std::string("cudnn_info: ") + e.what();
  }
  return d;
}

void translate(const cudnn::StatusError& e) {
  py::object cls = py::module_::import("braidpy._errors").attr("CudnnError");
  py::object exc = cls(e.what(), e.status);
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

void translate_missing(const CudnnMissing& e) {
  py::object cls = py::module_::import("braidpy._errors").attr("CudnnError");
  py::object exc = cls(e.what(), py::none());
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

void bind_cudnn(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const cudnn::StatusError& e) {
      translate(e);
    } catch (const CudnnMissing& e) {
      translate_missing(e);
    }
  });

  m.def("cudnn_info", &info,
        "cuDNN as loaded at first use: {'version', 'library', 'error'} (never raises).");
  m.def("conv_plan",
        [](std::int64_t n, std::int64_t c_in, std::int64_t c_out, std::int64_t h, std::int64_t w,
           std::int64_t k, std::int64_t groups, const std::string& dtype, bool tf32) {
          const cp::Problem p = problem("conv_plan", n, c_in, c_out, h, w, k, groups,
                                        dtype_code(dtype, "conv_plan"), tf32);
          py::dict d;
          d["x"] = tensor(cp::input_desc(p));
          d["y"] = tensor(cp::output_desc(p));
          d["bias"] = tensor(cp::bias_desc(p));
          d["w"] = filter(cp::filter_desc(p));
          d["conv"] = conv(cp::conv_desc(p));
          d["math_type"] = cp::math_type(p.dtype, p.tf32);
          return d;
        },
        py::arg("n"), py::arg("c_in"), py::arg("c_out"), py::arg("h"), py::arg("w"), py::arg("k"),
        py::arg("groups"), py::arg("dtype"), py::arg("tf32") = false,
        "The descriptors' parameters braidpy computes for a problem, and the convolution "
        "descriptor's cudnnMathType_t (no cuDNN needed).");
  m.def("cudnn_describe",
        [](std::int64_t n, std::int64_t c_in, std::int64_t c_out, std::int64_t h, std::int64_t w,
           std::int64_t k, std::int64_t groups, const std::string& dtype) {
          const cp::Problem p = problem("cudnn_describe", n, c_in, c_out, h, w, k, groups,
                                        dtype_code(dtype, "cudnn_describe"));
          const cudnn::Described r = cudnn::describe(library("cudnn_describe"), p);
          py::dict d;
          d["x"] = tensor(r.x);
          d["bias"] = tensor(r.bias);
          d["w"] = filter(r.w);
          d["conv"] = conv(r.conv);
          d["data_type"] = py::make_tuple(r.x_dtype, r.w_dtype, r.compute_type);
          d["format"] = r.w_format;
          d["mode"] = r.mode;
          d["out2d"] = py::make_tuple(r.out2d[0], r.out2d[1], r.out2d[2], r.out2d[3]);
          d["out_nd"] = py::make_tuple(r.out_nd[0], r.out_nd[1], r.out_nd[2], r.out_nd[3]);
          return d;
        },
        py::arg("n"), py::arg("c_in"), py::arg("c_out"), py::arg("h"), py::arg("w"), py::arg("k"),
        py::arg("groups"), py::arg("dtype"),
        "The same descriptors set in cuDNN and read back, and cuDNN's output size (no GPU "
        "needed; cuDNN needed).");
  m.def("conv_workspace",
        [](std::int64_t n, std::int64_t c_in, std::int64_t c_out, std::int64_t h, std::int64_t w,
           std::int64_t k, std::int64_t groups, const std::string& dtype, bool tf32,
           bool benchmark) {
          const char* where = "conv_workspace";
          const cp::Problem p = problem(where, n, c_in, c_out, h, w, k, groups,
                                        dtype_code(dtype, where), tf32, benchmark);
          const cudnn::Library& lib = library(where);
          const int dev = device(where);
          if (benchmark && !cudnn::measured(lib, dev, p))
            throw py::value_error(std::string(where) + ": no measured plan of this shape is "
                                  "cached; conv_measure makes one");
          return chosen_dict(cudnn::plan(lib, dev, p));
        },
        py::arg("n"), py::arg("c_in"), py::arg("c_out"), py::arg("h"), py::arg("w"), py::arg("k"),
        py::arg("groups"), py::arg("dtype"), py::arg("tf32") = false,
        py::arg("benchmark") = false,
        "Workspace bytes per operation, the one request (bytes), the pinned algorithms "
        "(forward, backward data, backward filter) and whether each was measured; "
        "benchmark=True: the plan conv_measure made (ValueError if none is cached).");
  m.def("conv_measured",
        [](std::int64_t n, std::int64_t c_in, std::int64_t c_out, std::int64_t h, std::int64_t w,
           std::int64_t k, std::int64_t groups, const std::string& dtype, bool tf32) {
          const char* where = "conv_measured";
          const cp::Problem p = problem(where, n, c_in, c_out, h, w, k, groups,
                                        dtype_code(dtype, where), tf32, true);
          const cudnn::Library& lib = library(where);
          return cudnn::measured(lib, device(where), p);
        },
        py::arg("n"), py::arg("c_in"), py::arg("c_out"), py::arg("h"), py::arg("w"), py::arg("k"),
        py::arg("groups"), py::arg("dtype"), py::arg("tf32") = false,
        "Whether the problem's measured plan is cached on the current device.");
  m.def("conv_measure_workspace",
        [](std::int64_t n, std::int64_t c_in, std::int64_t c_out, std::int64_t h, std::int64_t w,
           std::int64_t k, std::int64_t groups, const std::string& dtype, bool tf32) {
          const char* where = "conv_measure_workspace";
          const cp::Problem p = problem(where, n, c_in, c_out, h, w, k, groups,
                                        dtype_code(dtype, where), tf32, true);
          const cudnn::Library& lib = measuring_library(where);
          return cudnn::measure_workspace(lib, device(where), p);
        },
        py::arg("n"), py::arg("c_in"), py::arg("c_out"), py::arg("h"), py::arg("w"), py::arg("k"),
        py::arg("groups"), py::arg("dtype"), py::arg("tf32") = false,
        "The workspace bytes conv_measure offers cuDNN for the problem (the most any "
        "algorithm asks for, at most 1 GiB).");
  m.def("conv_measure",
        [](py::handle x, py::handle w, py::handle y, std::int64_t groups, std::uintptr_t ws,
           std::size_t ws_bytes, bool tf32) {
          const char* where = "conv_measure";
          const CudaArrayView X = view(x, where, "x", true), W = view(w, where, "w", true),
                              Y = view(y, where, "y", true);
          const cp::Problem p = from_arrays(where, X, "x", W, "w", Y, "y", groups, tf32, true);
          const cudnn::Library& lib = measuring_library(where);
          cudnn::Scratch s;
          s.x = X.data; s.w = W.data; s.y = Y.data;
          s.workspace = pointer(ws);
          s.bytes = ws_bytes;
          s.stream = stream_of(Y);
          return chosen_dict(cudnn::measure(lib, device(where), p, s));
        },
        py::arg("x"), py::arg("w"), py::arg("y"), py::arg("groups"), py::arg("workspace"),
        py::arg("workspace_bytes"), py::arg("tf32") = false,
        "Times cuDNN's algorithms of the problem of x, w, y (scratch arrays, all three "
        "overwritten) with the given workspace, caches the measured plan and returns it "
        "as conv_workspace does.");
  m.def("conv_forward",
        [](py::handle x, py::handle w, py::handle y, std::int64_t groups, std::uintptr_t ws,
           std::size_t ws_bytes, bool tf32, bool benchmark) {
          const char* where = "conv_forward";
          const CudaArrayView X = view(x, where, "x", false), W = view(w, where, "w", false),
                              Y = view(y, where, "y", true);
          const cp::Problem p =
              from_arrays(where, X, "x", W, "w", Y, "y", groups, tf32, benchmark);
          const cudnn::Library& lib = library(where);
          cudnn::forward(lib, device(where), p, X.data, W.data, Y.data, pointer(ws), ws_bytes,
                         stream_of(Y));
        },
        py::arg("x"), py::arg("w"), py::arg("y"), py::arg("groups"), py::arg("workspace"),
        py::arg("workspace_bytes"), py::arg("tf32") = false, py::arg("benchmark") = false,
        "y <- conv2d(x, w) (cross-correlation, 'same' padding).");
  m.def("conv_backward_data",
        [](py::handle w, py::handle dy, py::handle dx, std::int64_t groups, std::uintptr_t ws,
           std::size_t ws_bytes, bool tf32, bool benchmark) {
          const char* where = "conv_backward_data";
          const CudaArrayView W = view(w, where, "w", false), DY = view(dy, where, "dy", false),
                              DX = view(dx, where, "dx", true);
          const cp::Problem p =
              from_arrays(where, DX, "dx", W, "w", DY, "dy", groups, tf32, benchmark);
          const cudnn::Library& lib = library(where);
          cudnn::backward_data(lib, device(where), p, W.data, DY.data, DX.data, pointer(ws),
                               ws_bytes, stream_of(DX));
        },
        py::arg("w"), py::arg("dy"), py::arg("dx"), py::arg("groups"), py::arg("workspace"),
        py::arg("workspace_bytes"), py::arg("tf32") = false, py::arg("benchmark") = false,
        "dx <- the input VJP of conv2d(., w) applied to dy.");
  m.def("conv_backward_filter",
        [](py::handle x, py::handle dy, py::handle dw, std::int64_t groups, std::uintptr_t ws,
           std::size_t ws_bytes, bool tf32, bool benchmark) {
          const char* where = "conv_backward_filter";
          const CudaArrayView X = view(x, where, "x", false), DY = view(dy, where, "dy", false),
                              DW = view(dw, where, "dw", true);
          const cp::Problem p =
              from_arrays(where, X, "x", DW, "dw", DY, "dy", groups, tf32, benchmark);
          const cudnn::Library& lib = library(where);
          cudnn::backward_filter(lib, device(where), p, X.data, DY.data, DW.data, pointer(ws),
                                 ws_bytes, stream_of(DW));
        },
        py::arg("x"), py::arg("dy"), py::arg("dw"), py::arg("groups"), py::arg("workspace"),
        py::arg("workspace_bytes"), py::arg("tf32") = false, py::arg("benchmark") = false,
        "dw <- the weight VJP of conv2d(x, .) applied to dy.");
  m.def("conv_backward_bias",
        [](py::handle dy, py::handle db) {
          const char* where = "conv_backward_bias";
          const CudaArrayView DY = view(dy, where, "dy", false), DB = view(db, where, "db", true);
          const auto& s = DY.shape;
          if (DB.dtype != DY.dtype || DB.shape != std::vector<std::int64_t>{1, s[1], 1, 1})
            throw py::value_error(std::string(where) + ": db has shape " + shape_str(DB.shape) +
                                  " but dy has shape " + shape_str(s) + "; db must be (1, " +
                                  std::to_string(s[1]) + ", 1, 1) of dy's dtype");
          const cp::Problem p = problem(where, s[0], s[1], s[1], s[2], s[3], 1, 1, DY.dtype);
          const cudnn::Library& lib = library(where);
          cudnn::backward_bias(lib, device(where), p, DY.data, DB.data, stream_of(DB));
        },
        py::arg("dy"), py::arg("db"), "db <- dy summed over batch, H and W.");
  m.def("cudnn_cache",
        []() {
          const cudnn::CacheStats s = cudnn::cache_stats();
          py::dict d;
          d["plans"] = s.plans;
          d["hits"] = s.hits;
          d["misses"] = s.misses;
          return d;
        },
        "Per-shape plans cached on all devices, hits and misses.");
}

}  // namespace braidpy
