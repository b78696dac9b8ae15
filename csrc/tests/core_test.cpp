// Tests of the MGRIT core without Python: scalar backward Euler (XBraid's
// ex-01) through a plain C++ Ops. Prints one line per check; exit code 1 on
// any failure. Built with -DBRAIDPY_BUILD_TESTS=ON (tests/test_core_cpp.py).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "../core/solver.hpp"

namespace {

using braid::CallInfo;
using braid::Vec;

// Vectors are heap doubles; u' = -u with backward Euler as XBraid's ex-01.
class ScalarOps final : public braid::Ops {
 public:
  explicit ScalarOps(double guess, bool batched = false, bool out_of_place = false,
                     bool sharing = false)
      : guess_(guess), batched_(batched), out_of_place_(out_of_place), sharing_(sharing) {}
  // Sharing: share() hands out the vector itself, counted; free() drops one count. No
  // fused_sums: the core's fallback for shared v (interp.cpp) runs.
  Vec share(Vec u) override {
    if (!sharing_ || u == nullptr) return nullptr;
    ++shares_[u];
    ++shared;
    return u;
  }
  // Batched: the core's lock-step sweeps, through Ops' default step_batch.
  bool batched() const override { return batched_; }
  // Out of place: blocks are tokens (the rows stay separate doubles), so that the core
  // takes its block paths: clone_block and step_batch_to.
  Vec clone_block(const Vec* srcs, braid::Index n, Vec* out) override {
    copies += n;
    braid::Ops::clone_block(srcs, n, out);
    return out_of_place_ ? token() : nullptr;
  }
  bool steps_to() const override { return out_of_place_; }
  bool step_batch_to(const Vec* us, braid::Index n, braid::Index first, braid::Index rows,
                     const braid::BatchItem* items, CallInfo& info, Vec* new_block,
                     Vec* out) override {
    if (!out_of_place_) return false;
    for (braid::Index r = 0; r < rows; ++r) out[r] = make(-1.0);  // "unspecified"
    for (braid::Index k = 0; k < n; ++k) {
      info.set_step(items[k]);
      val(out[first + k]) = val(us[k]);
      step(out[first + k], info);
    }
    *new_block = token();
    ++to_calls;
    return true;
  }
  Vec init(const CallInfo& info) override { return make(info.t == 0.0 ? 1.0 : guess_); }
  void step(Vec& u, const CallInfo& info) override {
    ++steps;
    val(u) = 1.0 / (1.0 + info.t1 - info.t0) * val(u);
  }
  Vec clone(Vec u) override {
    ++copies;
    return make(val(u));
  }
  void sum(double a, Vec x, double b, Vec y) override { val(y) = a * val(x) + b * val(y); }
  double norm(Vec u) override { return std::sqrt(val(u) * val(u)); }
  void access(Vec u, const CallInfo& info) override {
    if (info.index >= static_cast<braid::Index>(seen.size())) seen.resize(info.index + 1);
    seen[info.index] = val(u);
  }
  void free(Vec u) override {
    if (u == nullptr) return;
    auto it = shares_.find(u);
    if (it != shares_.end()) {  // a shared handle: the vector lives on
      if (--it->second == 0) shares_.erase(it);
      return;
    }
    if (tokens_.erase(u) == 1) {  // a block
      delete static_cast<char*>(u);
      return;
    }
    --live;
    delete static_cast<double*>(u);
  }
  void progress(int, double, bool) override {}
  bool failed() const override { return false; }

  long long steps = 0;
  long long live = 0;
  long long copies = 0;    // clone and clone_block rows
  long long to_calls = 0;  // step_batch_to calls
  long long shared = 0;    // share calls that shared
  std::vector<double> seen;
  std::size_t blocks() const { return tokens_.size(); }

 private:
  Vec token() {
    Vec b = new char;
    tokens_.insert(b);
    return b;
  }
  static double& val(Vec u) { return *static_cast<double*>(u); }
  Vec make(double v) {
    ++live;
    return new double(v);
  }
  double guess_;
  bool batched_, out_of_place_, sharing_;
  std::set<Vec> tokens_;
  std::map<Vec, int> shares_;
};

std::vector<double> grid(double t0, double t1, long n) {
  std::vector<double> t(n + 1);
  for (long i = 0; i <= n; ++i) t[i] = t0 + (static_cast<double>(i) / n) * (t1 - t0);
  return t;
}

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

void test_one_level_is_serial() {
  ScalarOps ops(0.456);
  braid::SerialComm comm;
  braid::Options o;
  o.max_levels = 1;
  {
    braid::Solver s(ops, comm, o, grid(0.0, 5.0, 10));
    s.solve();
    double u = 1.0;
    bool same = true;
    for (int i = 1; i <= 10; ++i) {
      u = 1.0 / (1.0 + (0.5 * i) - 0.5 * (i - 1)) * u;
      same = same && ops.seen[i] == u;
    }
    check(s.iterations() == 0 && same, "max_levels=1 equals serial stepping bitwise");
  }
  check(ops.live == 0, "every vector freed after one-level solve");
}

void test_xbraid_golden() {
  // XBraid test/ode1D.saved, ex-01-expanded -ntime 24 -ml 3 -mi 2 -nu0 1 -nu 2 -skip 0.
  ScalarOps ops(0.456);
  braid::SerialComm comm;
  braid::Options o;
  o.max_levels = 3;
  o.max_iter = 2;
  o.abs_tol = 1e-6;
  o.skip = false;
  o.nrelax_level = {{0, 1}, {1, 2}, {2, 5}};
  braid::Solver s(ops, comm, o, grid(0.0, 12.0, 24));
  s.solve();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%e", s.residuals().back().second);
  check(s.iterations() == 2 && std::string(buf) == "1.420885e-02",
        std::string("XBraid ex-01-expanded golden residual 1.420885e-02, got ") + buf);
}

void test_converges_and_overhead() {
  ScalarOps ops(0.0);
  braid::SerialComm comm;
  braid::Options o;
  o.cfactor = 4;
  o.abs_tol = 1e-9;
  const long n = 1L << 14;
  braid::Solver s(ops, comm, o, grid(0.0, 5.0, n));
  const auto start = std::chrono::steady_clock::now();
  s.solve();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double want = std::pow(1.0 + 5.0 / n, -static_cast<double>(n));
  check(std::fabs(ops.seen[n] - want) < 1e-9, "MGRIT converges to the serial solution");
  check(s.nlevels() == 7, "ntime 2^14, cf 4 builds 7 levels");
  std::printf("info %lld step calls, %.3f ns per step call (core + trivial C++ callbacks)\n",
              ops.steps, 1e9 * secs / ops.steps);
}

void test_batched_equals_unbatched() {
  // Lock-step sweeps (every phase: relax, restrict, interp, final) give the same bits.
  braid::SerialComm comm;
  braid::Options o;
  o.cfactor = 3;
  o.nrelax = 2;
  o.abs_tol = 1e-12;
  o.access_level = 2;
  ScalarOps plain(0.3), batched(0.3, true);
  std::vector<std::pair<int, double>> histories[2];
  int k = 0;
  for (ScalarOps* ops : {&plain, &batched}) {
    braid::Solver s(*ops, comm, o, grid(0.0, 3.0, 100));
    s.solve();
    histories[k++] = s.residuals();
  }
  check(plain.seen == batched.seen && histories[0] == histories[1] && !histories[0].empty(),
        "lock-step (batched) sweeps equal chain-by-chain bitwise");
  check(plain.live == 0 && batched.live == 0, "every vector freed after batched solves");
}

void test_out_of_place_steps_equal_in_place() {
  // Ops::step_batch_to: sweeps start without copying their C-points, the storing final
  // sweep writes each position where it is kept; the values, stored states and residual
  // histories are the in-place ones, bit for bit, with fewer copies.
  braid::SerialComm comm;
  braid::Options o;
  o.cfactor = 4;
  o.abs_tol = 1e-12;
  o.access_level = 2;
  o.store_all = true;
  const long n = 96;
  ScalarOps in_place(0.3, true), out_of_place(0.3, true, true);
  std::vector<std::pair<int, double>> histories[2];
  std::vector<double> stored[2];
  int k = 0;
  for (ScalarOps* ops : {&in_place, &out_of_place}) {
    braid::Solver s(*ops, comm, o, grid(0.0, 3.0, n));
    s.solve();
    histories[k] = s.residuals();
    for (long i = 0; i <= n; ++i)
      stored[k].push_back(s.stored(i) ? *static_cast<double*>(s.stored(i)) : -2.0);
    ++k;
  }
  check(in_place.seen == out_of_place.seen && histories[0] == histories[1] &&
            stored[0] == stored[1] && !histories[0].empty() && out_of_place.to_calls > 0,
        "out-of-place batched steps (step_batch_to) equal in-place ones bitwise, stored "
        "states too");
  check(out_of_place.copies < in_place.copies,
        "out-of-place steps copy less: " + std::to_string(out_of_place.copies) + " < " +
            std::to_string(in_place.copies) + " copied states");
  check(in_place.live == 0 && out_of_place.live == 0 && out_of_place.blocks() == 0,
        "every vector and block freed after out-of-place solves");
}

void test_shared_injection_equals_copies() {
  // Ops::share: the coarse levels' v are the fine C-points themselves; without fused_sums
  // the interpolation computes u - v apart. The same values and residuals as copies, at
  // 2 and 3 levels, F- and FCF-relaxation, batched or not; nothing leaked.
  bool same = true, used = true, freed = true;
  for (int levels : {2, 3})
    for (int nrelax : {0, 1})
      for (bool batched : {false, true}) {
        braid::SerialComm comm;
        braid::Options o;
        o.cfactor = 4;
        o.max_levels = levels;
        o.nrelax = nrelax;
        o.abs_tol = 1e-12;
        o.access_level = 2;
        ScalarOps copies(0.3, batched), sharing(0.3, batched, false, true);
        std::vector<std::pair<int, double>> histories[2];
        int k = 0;
        for (ScalarOps* ops : {&copies, &sharing}) {
          braid::Solver s(*ops, comm, o, grid(0.0, 3.0, 96));
          s.solve();
          histories[k++] = s.residuals();
        }
        same = same && copies.seen == sharing.seen && histories[0] == histories[1] &&
               !histories[0].empty();
        used = used && sharing.shared > 0 && sharing.copies < copies.copies;
        freed = freed && sharing.live == 0;
      }
  check(same, "shared injected values (Ops::share) equal copies bitwise");
  check(used && freed, "sharing replaces copies, and every vector is freed once");
}

// What the Solver constructor throws for options, or "" if it accepts them.
std::string rejection(const braid::Options& o, const std::vector<double>& t) {
  ScalarOps ops(0.0);
  braid::SerialComm comm;
  try {
    braid::Solver s(ops, comm, o, t);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void test_impossible_options_are_rejected() {
  const auto t = grid(0.0, 1.0, 8);
  bool all = rejection(braid::Options{}, t).empty();
  auto expect = [&](braid::Options o, const std::string& name, std::vector<double> times) {
    const std::string msg = rejection(o, times);
    const bool ok = msg.find(name) != std::string::npos;
    if (!ok) std::printf("info expected '%s' in '%s'\n", name.c_str(), msg.c_str());
    all = all && ok;
  };
  braid::Options o;
  o.cfactor = 1;
  expect(o, "cfactor = 1", t);
  o = braid::Options{};
  o.max_levels = 0;
  expect(o, "max_levels = 0", t);
  o = braid::Options{};
  o.tnorm = 3;
  expect(o, "tnorm = 3", t);
  o = braid::Options{};
  o.cfactor_level = {{2, 0}};
  expect(o, "cfactor_level[2] = 0", t);
  o = braid::Options{};
  o.fine_ranges = {{0, 3}, {5, 8}};
  expect(o, "fine_ranges (count)", t);
  expect(braid::Options{}, "times (count) = 1", {0.0});
  expect(braid::Options{}, "times[2]", {0.0, 1.0, 1.0});
  check(all, "impossible options and grids throw invalid_argument naming the value");
}

}  // namespace

int main() {
  test_one_level_is_serial();
  test_xbraid_golden();
  test_converges_and_overhead();
  test_batched_equals_unbatched();
  test_out_of_place_steps_equal_in_place();
  test_shared_injection_equals_copies();
  test_impossible_options_are_rejected();
  return failures == 0 ? 0 : 1;
}
