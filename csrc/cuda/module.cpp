// braidpy._cuda: the optional CUDA module. It imports with no driver and no GPU;
// info() says what was compiled and found; device_ops() hands braidpy._core the
// kernels' table; sum/copy/gather/row_norms call the kernels directly on CUDA
// arrays (tests compare them with CuPy). Every failing CUDA call raises
// braidpy.NoGPUError (no driver, no device) or braidpy.CudaError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <string>
#include <vector>

#include "../bindings/cuda_array.hpp"
#include "cuda_api.hpp"
#include "conv_direct_shapes.hpp"
#include "cudnn_bindings.hpp"
#include "kernels.hpp"

namespace py = pybind11;

namespace braidpy {
namespace {

void translate(const CudaFailure& f) {
  const DeviceOps* ops = cuda::device_ops();
  const bool no_gpu = f.code == kCudaNoDriver || f.code == kCudaNoDevice;
  const std::string name = ops->error_name(f.code);
  const std::string text = ops->error_string(f.code);
  std::string msg = f.where + ": ";
  msg += no_gpu ? "no usable GPU (" + name + ", CUDA error " + std::to_string(f.code) + ": " +
                      text + "); braidpy.cuda_info() shows what was found"
                : "CUDA error " + std::to_string(f.code) + " (" + name + ": " + text + ")";
  py::object errors = py::module_::import("braidpy._errors");
  py::object cls = errors.attr(no_gpu ? "NoGPUError" : "CudaError");
  py::object exc = cls(msg, f.code);
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

CudaArrayView view(py::handle a, const char* where, bool writable) {
  CudaArrayView v;
  if (!cuda_array_view(a.ptr(), v))
    throw py::type_error(std::string(where) +
                         ": expected a C-contiguous float64 or float32 CUDA array "
                         "(__cuda_array_interface__), got " +
                         std::string(py::str(py::type::of(a).attr("__name__"))));
  if (writable && v.readonly) throw py::value_error(std::string(where) + ": read-only array");
  return v;
}

void same(const CudaArrayView& a, const CudaArrayView& b, const char* where) {
  if (a.dtype != b.dtype || a.size != b.size)
    throw py::value_error(std::string(where) + ": arrays differ in dtype or size");
}

// Whether the element ranges of two arrays overlap without being the same array.
bool partly_overlap(const CudaArrayView& a, const CudaArrayView& b) {
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  const bool overlap = a0 < b0 + b.size * b.itemsize() && b0 < a0 + a.size * a.itemsize();
  return overlap && (a0 != b0 || a.size != b.size);
}

// dense_step / dense_slope: Z (rows, width) with b (width,) and h a number, or Z
// (m, rows, width) with b (m, width) and h (m,) a CUDA array; X (U or W) and out Z's shape.
void dense_finish_call(const char* where, bool slope, py::handle Z, py::handle X, py::handle b,
                       py::handle h, py::handle out, int act) {
  if (act != kern::kActTanh && act != kern::kActRelu && act != kern::kActSmoothRelu)
    throw py::value_error(std::string(where) +
                          ": act must be 1 (tanh), 2 (relu) or 3 (smooth_relu), got " +
                          std::to_string(act));
  const CudaArrayView z = view(Z, where, false), x = view(X, where, false),
                      bv = view(b, where, false), o = view(out, where, true);
  const std::size_t nd = z.shape.size();
  if (nd != 2 && nd != 3)
    throw py::value_error(std::string(where) + ": Z must be (rows, width) or (m, rows, width)");
  const std::int64_t m = nd == 3 ? z.shape[0] : 1, rows = z.shape[nd - 2],
                     width = z.shape[nd - 1];
  const char* xname = slope ? "W" : "U";
  if (x.shape != z.shape || o.shape != z.shape)
    throw py::value_error(std::string(where) + ": " + xname + " and out must have Z's shape");
  const std::vector<std::int64_t> bshape =
      nd == 3 ? std::vector<std::int64_t>{m, width} : std::vector<std::int64_t>{width};
  if (bv.shape != bshape)
    throw py::value_error(std::string(where) + ": b must be " +
                          (nd == 3 ? "(m, width)" : "(width,)") + " for Z's shape");
  for (const CudaArrayView* v : {&x, &bv, &o})
    if (v->dtype != z.dtype) throw py::value_error(std::string(where) + ": dtypes differ");
  if (partly_overlap(o, z) || partly_overlap(o, x) || partly_overlap(z, x))
    throw py::value_error(std::string(where) + ": Z, " + xname +
                          " and out must be the same array or not overlap");
  const void* hp = nullptr;
  double h0 = 0.0;
  if (nd == 3) {
    const CudaArrayView hv = view(h, where, false);
    if (hv.dtype != z.dtype || hv.shape != std::vector<std::int64_t>{m})
      throw py::value_error(std::string(where) + ": h must be Z's dtype, shaped (m,)");
    hp = hv.data;
  } else {
    try {
      h0 = py::cast<double>(h);  // one step's size, a number
    } catch (const py::cast_error&) {
      throw py::type_error(std::string(where) + ": h must be a number for a 2-D Z, got " +
                           std::string(py::str(py::type::of(h).attr("__name__"))));
    }
  }
  check(cuda::dense_finish(z.dtype, slope, act, z.data, x.data, bv.data, hp, h0, o.data, m,
                           rows, width, o.stream),
        where);
}

py::dict info() {
  py::dict d;
  int runtime = 0, driver = 0, count = 0;
  d["compiled"] = true;
  d["cuda_runtime"] = cuda::runtime_version(&runtime) == 0 ? runtime : 0;
  d["driver"] = cuda::driver_version(&driver) == 0 ? driver : 0;
  const int e = cuda::device_count(&count);
  d["devices"] = count;
  d["error"] = e == 0 ? py::object(py::none())
                      : py::object(py::str(std::string(cuda::device_ops()->error_name(e)) +
                                           " (" + std::to_string(e) + "): " +
                                           cuda::device_ops()->error_string(e)));
  py::list names;
  for (int k = 0; k < count; ++k) {
    char name[256];
    int major = 0, minor = 0;
    if (cuda::device_properties(k, name, sizeof name, &major, &minor) == 0)
      names.append(std::string(name) + " (sm_" + std::to_string(major) + std::to_string(minor) +
                   ")");
  }
  d["device_names"] = names;
  d["architectures"] = BRAIDPY_CUDA_ARCHITECTURES;
  return d;
}

}  // namespace
}  // namespace braidpy

PYBIND11_MODULE(_cuda, m) {
  using namespace braidpy;
  m.doc() = "braidpy's optional CUDA kernels (private; see braidpy.cuda_info()).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CudaFailure& f) {
      translate(f);
    }
  });

  m.def("info", &info, "What was compiled and what the runtime finds (never raises).");
  bind_cudnn(m);
  m.def("device_ops",
        []() {
          return py::capsule(const_cast<DeviceOps*>(cuda::device_ops()), kDeviceOpsCapsule);
        },
        "The kernels' table for braidpy._core (a PyCapsule).");
  m.def("check_device", []() {
        check(cuda::check_device(), "check_device");
        int count = 0;
        check(cuda::device_count(&count), "check_device");
        return count;
      }, "The number of devices; NoGPUError when there is none.");
  m.def("sum", [](double a, py::handle x, double b, py::handle y) {
        const CudaArrayView Y = view(y, "sum", true);
        const CudaArrayView X = x.is(y) ? Y : view(x, "sum", false);
        same(X, Y, "sum");
        check(cuda::device_ops()->sum(Y.dtype, a, X.data, b, Y.data, Y.size, Y.stream), "sum");
      }, py::arg("a"), py::arg("x"), py::arg("b"), py::arg("y"), "y <- a*x + b*y on the GPU.");
  m.def("copy", [](py::handle src, py::handle dst) {
        const CudaArrayView S = view(src, "copy", false), D = view(dst, "copy", true);
        same(S, D, "copy");
        check(cuda::device_ops()->copy(S.data, D.data, S.size * S.itemsize(), D.stream), "copy");
      }, py::arg("src"), py::arg("dst"), "dst <- src on the GPU.");
  m.def("gather", [](py::sequence srcs, py::handle block) {
        const CudaArrayView B = view(block, "gather", true);
        const auto n = static_cast<std::int64_t>(py::len(srcs));
        if (B.shape.empty() || B.shape[0] != n)
          throw py::value_error("gather: block must have one row per source");
        const std::int64_t len = n > 0 ? B.size / n : 0;
        std::vector<const void*> ptrs;
        for (py::handle s : srcs) {
          if (s.is_none()) {
            ptrs.push_back(nullptr);
            continue;
          }
          const CudaArrayView S = view(s, "gather", false);
          if (S.dtype != B.dtype || S.size != len)
            throw py::value_error("gather: a source differs from the block's rows");
          ptrs.push_back(S.data);
        }
        check(cuda::device_ops()->gather(B.dtype, ptrs.data(), n, len, B.data, B.stream),
              "gather");
      }, py::arg("srcs"), py::arg("block"), "block[r] <- srcs[r] (None: zeros) on the GPU.");
  m.def("step_epilogue", [](py::handle U, py::handle Y, py::handle b, py::handle h,
                            py::handle out, int act) {
        const char* where = "step_epilogue";
        const CudaArrayView u = view(U, where, false), y = view(Y, where, false),
                            bv = view(b, where, false), hv = view(h, where, false),
                            o = view(out, where, true);
        if (act != kern::kActTanh && act != kern::kActRelu)
          throw py::value_error("step_epilogue: act must be 1 (tanh) or 2 (relu), got " +
                                std::to_string(act));
        if (u.shape.size() != 5 || y.shape.size() != 4)
          throw py::value_error("step_epilogue: U must be (m, N, C, H, W) and Y (N, m*C, H, W)");
        const std::int64_t m = u.shape[0], N = u.shape[1], C = u.shape[2];
        const std::int64_t HW = u.shape[3] * u.shape[4];
        if (y.shape != std::vector<std::int64_t>{N, m * C, u.shape[3], u.shape[4]} ||
            bv.size != m * C || hv.size != m || o.shape != u.shape)
          throw py::value_error("step_epilogue: Y, b, h or out does not match U's shape");
        for (const CudaArrayView* v : {&y, &bv, &hv, &o})
          if (v->dtype != u.dtype) throw py::value_error("step_epilogue: dtypes differ");
        check(cuda::step_epilogue(u.dtype, act, u.data, y.data, bv.data, hv.data, o.data, m, N,
                                  C, HW, o.stream),
              where);
      }, py::arg("U"), py::arg("Y"), py::arg("b"), py::arg("h"), py::arg("out"), py::arg("act"),
      "out <- U + h * act(Y + b) of a batched conv step in one kernel (see kernels.hpp).");
  // The dense steps' elementwise half after cuBLAS's product (kern::dense_finish_at).
  m.def("dense_step", [](py::handle Z, py::handle U, py::handle b, py::handle h,
                         py::handle out, int act) {
        dense_finish_call("dense_step", false, Z, U, b, h, out, act);
      }, py::arg("Z"), py::arg("U"), py::arg("b"), py::arg("h"), py::arg("out"), py::arg("act"),
      "out <- U + h * act(Z + b) in one kernel (Z = U @ K^T; out may be Z or U).");
  m.def("dense_slope", [](py::handle Z, py::handle W, py::handle b, py::handle h,
                          py::handle out, int act) {
        dense_finish_call("dense_slope", true, Z, W, b, h, out, act);
      }, py::arg("Z"), py::arg("W"), py::arg("b"), py::arg("h"), py::arg("out"), py::arg("act"),
      "out <- (act'(Z + b) * W) * h in one kernel (Z = U @ K^T; out may be Z or W).");
  // The direct convolution steps (conv_direct.hpp), on stacked (m, N, C, H, W) states.
  struct Operands {
    std::vector<CudaArrayView> v;
    kern::ConvDims d;
  };
  // Views of arrays (the last `written` are written), the dims from arrays[iU], arrays[iK].
  auto operands = [](const char* where, std::initializer_list<py::handle> arrays,
                     std::size_t written, std::size_t iU, std::size_t iK) {
    Operands o;
    std::size_t k = 0;
    for (py::handle a : arrays) o.v.push_back(view(a, where, k++ >= arrays.size() - written));
    o.d = conv_direct_dims(where, o.v[iU].shape, o.v[iK].shape);
    for (const CudaArrayView& x : o.v)
      if (x.dtype != o.v[0].dtype)
        throw py::value_error(std::string(where) + ": the arrays' dtypes differ");
    return o;
  };
  auto shape = [](const kern::ConvDims& d) { return cuda::ConvShape{d.m, d.N, d.C, d.H, d.W, d.k}; };
  auto act_code = [](const char* where, int act) {
    if (act != kern::kActTanh && act != kern::kActRelu && act != kern::kActSmoothRelu)
      throw py::value_error(std::string(where) +
                            ": act must be 1 (tanh), 2 (relu) or 3 (smooth_relu), got " +
                            std::to_string(act));
  };
  m.def("conv_direct_step", [=](py::handle U, py::handle K, py::handle b, py::handle h,
                                py::handle out, int act) {
        const char* where = "conv_direct_step";
        act_code(where, act);
        const Operands o = operands(where, {U, K, b, h, out}, 1, 0, 1);
        const Shape u = o.v[0].shape;
        conv_direct_expect_step(where, o.d, o.v[2].shape, o.v[3].shape);
        conv_direct_expect(where, "out", o.v[4].shape, u);
        check(cuda::conv_direct_step(o.v[0].dtype, act, o.v[0].data, o.v[1].data, o.v[2].data,
                                     o.v[3].data, o.v[4].data, shape(o.d), o.v[4].stream),
              where);
      }, py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("out"), py::arg("act"),
      "out <- U + h * act(conv(U, K) + b), every interval's step in one kernel.");
  m.def("conv_direct_g", [=](py::handle W, py::handle U, py::handle K, py::handle b,
                             py::handle h, py::handle G, int act) {
        const char* where = "conv_direct_g";
        act_code(where, act);
        const Operands o = operands(where, {W, U, K, b, h, G}, 1, 1, 2);
        const Shape u = o.v[1].shape;
        conv_direct_expect(where, "W", o.v[0].shape, u);
        conv_direct_expect_step(where, o.d, o.v[3].shape, o.v[4].shape);
        conv_direct_expect(where, "G", o.v[5].shape, u);
        check(cuda::conv_direct_g(o.v[0].dtype, act, o.v[0].data, o.v[1].data, o.v[2].data,
                                  o.v[3].data, o.v[4].data, o.v[5].data, shape(o.d),
                                  o.v[5].stream),
              where);
      }, py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("G"),
      py::arg("act"), "G <- h * (W * act'(conv(U, K) + b)) in one kernel.");
  m.def("conv_direct_transpose_add", [=](py::handle W, py::handle G, py::handle K,
                                         py::handle out) {
        const char* where = "conv_direct_transpose_add";
        const Operands o = operands(where, {W, G, K, out}, 1, 1, 2);
        conv_direct_expect(where, "W", o.v[0].shape, o.v[1].shape);
        conv_direct_expect(where, "out", o.v[3].shape, o.v[1].shape);
        check(cuda::conv_direct_transpose_add(o.v[0].dtype, o.v[0].data, o.v[1].data,
                                              o.v[2].data, o.v[3].data, shape(o.d),
                                              o.v[3].stream),
              where);
      }, py::arg("W"), py::arg("G"), py::arg("K"), py::arg("out"),
      "out <- W + conv^T(G, K) in one kernel.");
  m.def("conv_direct_param_grads", [=](py::handle G, py::handle U, py::handle dK,
                                       py::handle db) {
        const char* where = "conv_direct_param_grads";
        const Operands o = operands(where, {G, U, dK, db}, 2, 1, 2);
        conv_direct_expect(where, "G", o.v[0].shape, o.v[1].shape);
        conv_direct_expect(where, "db", o.v[3].shape, Shape{o.d.m, o.d.C});
        check(cuda::conv_direct_param_grads(o.v[0].dtype, o.v[0].data, o.v[1].data,
                                            o.v[2].data, o.v[3].data, shape(o.d),
                                            o.v[3].stream),
              where);
      }, py::arg("G"), py::arg("U"), py::arg("dK"), py::arg("db"),
      "dK, db <- the parameter gradients of the steps from G and U (fixed-order sums).");
  m.def("row_norms", [](py::sequence rows) {
        std::vector<const void*> ptrs;
        int dtype = 0;
        std::int64_t len = -1;
        std::uintptr_t stream = 0;
        for (py::handle r : rows) {
          const CudaArrayView R = view(r, "row_norms", false);
          if (len >= 0 && (R.dtype != dtype || R.size != len))
            throw py::value_error("row_norms: rows differ in dtype or size");
          dtype = R.dtype;
          len = R.size;
          stream = R.stream;
          ptrs.push_back(R.data);
        }
        std::vector<double> out(ptrs.size());
        if (!ptrs.empty())
          check(cuda::device_ops()->row_norms(dtype, ptrs.data(),
                                              static_cast<std::int64_t>(ptrs.size()), len,
                                              out.data(), stream),
                "row_norms");
        return out;
      }, py::arg("rows"), "The norm of each row, in one kernel (fixed summation order).");
}
