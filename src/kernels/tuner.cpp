// The autotuner (kernels/tuner.h).
#include "kernels/tuner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace basalt::kernels {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// max|a - b| <= tol · max|a| (and no NaN where a has none).
bool close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  if (a.size() != b.size()) return false;
  double amax = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i]) && !std::isnan(a[i])) return false;
    amax = std::max(amax, double(std::fabs(a[i])));
    err = std::max(err, double(std::fabs(a[i] - b[i])));
  }
  return err <= tol * std::max(amax, 1e-30);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

class Progress {
 public:
  Progress(int total, double budget, bool on)
      : total_(std::max(total, 1)), budget_(budget), on_(on), tty_(::isatty(2)) {}
  void step(double elapsed, const std::string& what) {
    ++done_;
    if (!on_) return;
    const int pct = done_ * 100 / total_;
    if (tty_) {
      const int w = 30, fill = done_ * w / total_;
      std::fprintf(stderr, "\r[tune] [%s%s] %3d%% %d/%d  %.0f/%.0f s  %-48.48s",
                   std::string(size_t(fill), '#').c_str(),
                   std::string(size_t(w - fill), '.').c_str(), pct, done_, total_, elapsed, budget_,
                   what.c_str());
      if (done_ == total_) std::fputc('\n', stderr);
    } else if (pct / 10 != last_ / 10 || done_ == total_) {
      std::fprintf(stderr, "[tune] %3d%% %d/%d  %.0f/%.0f s\n", pct, done_, total_, elapsed,
                   budget_);
    }
    last_ = pct;
  }
  void finish() {
    if (on_ && tty_ && done_ != total_) std::fputc('\n', stderr);
  }

 private:
  int total_, done_ = 0, last_ = -1;
  double budget_;
  bool on_, tty_;
};

struct Timed {
  double median_us = 0;
  std::vector<float> out;  // the first run's output
};

// One variant at one shape: a short first run (with its output) sizes the repetitions to about
// opt.rep_time_s.
Timed time_variant(Backend& be, const OpShape& s, const KernelVariant& v, const TuneOptions& opt) {
  VariantRun first = be.run_variant(s, v, opt.warmup, 1, true);
  const double one = std::max(first.us.empty() ? 1.0 : first.us[0], 1.0);
  const int reps = std::clamp(int(opt.rep_time_s * 1e6 / one), 3, std::max(opt.reps, 3));
  const VariantRun r = be.run_variant(s, v, 0, reps, false);
  return Timed{median(r.us), std::move(first.output)};
}

}  // namespace

TuneReport tune(Backend& be, std::vector<OpShape> shapes, const TuneOptions& opt) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const std::vector<OpKernels> reg = be.kernel_registry();
  auto op_of = [&](const std::string& op) -> const OpKernels* {
    for (const OpKernels& k : reg)
      if (k.op == op) return &k;
    return nullptr;
  };
  // Order: order-changing ops first (the others are timed under their choice), then by T (decode
  // before prefill, so a short budget keeps the shapes decode runs), then the rest of the key.
  std::sort(shapes.begin(), shapes.end(), [&](const OpShape& a, const OpShape& b) {
    const OpKernels *ka = op_of(a.op), *kb = op_of(b.op);
    const bool oa = ka && ka->changes_order, ob = kb && kb->changes_order;
    if (oa != ob) return oa;
    if (a.T != b.T) return a.T < b.T;
    return a < b;
  });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());

  TuneReport rep;
  rep.recipe.device = be.identity();
  rep.recipe.created = utc_now();
  rep.shapes_total = int(shapes.size());
  be.set_kernel_choices(opt.base);
  KernelChoices choices = opt.base;

  Progress bar(int(shapes.size()), opt.budget_s, opt.progress);
  auto timed = [&](const OpShape& s, const KernelVariant& v) {
    ++rep.variants_timed;
    return time_variant(be, s, v, opt);
  };
  // The median of every candidate at one shape (cands[0] the default; excluded ones keep 0 and
  // ok = false). Each output must be the default's bit for bit (`exact`) or within 1e-4 of it.
  // The default is timed before and after the others and keeps the faster median: the first
  // timing of a shape runs right after its inputs were made, the GPU idle and its clocks down
  // (on the H200 the first variant timed of a shape read 5-20 % slow), so a single timing would
  // let a variant equal to the default "beat" it.
  auto measure = [&](const OpShape& at, const std::vector<const KernelVariant*>& cands,
                     std::vector<bool>& ok, bool exact) {
    std::vector<double> us(cands.size(), 0.0);
    const Timed def = timed(at, *cands[0]);
    const std::string where =
        fmt::format("{}{}", at.str(), exact ? "" : fmt::format(" at T={}", at.T));
    for (size_t c = 1; c < cands.size(); ++c) {
      if (!ok[c]) continue;
      const Timed m = timed(at, *cands[c]);
      if (exact ? !same_bits(def.out, m.out) : !close(def.out, m.out, 1e-4)) {
        ok[c] = false;
        rep.rejected.push_back(fmt::format(
            "{}: {} {}", where, cands[c]->name,
            exact ? "does not give the default's bits" : "is not within 1e-4 of the default"));
        continue;
      }
      us[c] = m.median_us;
    }
    const Timed again = timed(at, *cands[0]);
    if (!same_bits(def.out, again.out))
      rep.rejected.push_back(fmt::format("{}: the default gives other bits run to run", where));
    us[0] = std::min(def.median_us, again.median_us);
    return us;
  };

  for (const OpShape& s : shapes) {
    if (elapsed() > opt.budget_s) {
      rep.budget_hit = true;
      break;
    }
    const OpKernels* k = op_of(s.op);
    if (!k || k->variants.empty()) {
      bar.step(elapsed(), s.str());
      continue;
    }
    std::vector<const KernelVariant*> cands;
    for (const KernelVariant& v : k->variants)
      if (!k->supports || k->supports(v, s)) cands.push_back(&v);
    if (cands.empty() || !(*cands[0] == k->variants[0])) {
      bar.step(elapsed(), s.str());
      continue;  // the default must run (it handles every shape; a registry bug otherwise)
    }
    RecipeEntry best;
    best.shape = s;
    best.variant = k->variants[0];
    std::vector<bool> ok(cands.size(), true);
    try {
      if (k->changes_order) {
        // Each candidate at every probe T; one wins only if never slower than the default.
        std::vector<std::vector<double>> t;  // [probe][candidate]
        for (int64_t T : opt.split_probe_T) {
          OpShape at = s;
          at.T = T;  // run_variant's convention: a matmul_split shape timed at T rows
          t.push_back(measure(at, cands, ok, false));
        }
        size_t win = 0;
        double def_sum = 0, best_sum = 0;
        for (const auto& p : t) def_sum += p[0];
        best_sum = def_sum;
        for (size_t c = 1; c < cands.size(); ++c) {
          if (!ok[c]) continue;
          double sum = 0;
          bool never_slower = true;
          for (const auto& p : t) sum += p[c], never_slower = never_slower && p[c] <= p[0];
          if (never_slower && sum < best_sum && sum <= def_sum * (1 - opt.min_gain))
            win = c, best_sum = sum;
        }
        best.variant = *cands[win];
        best.time_us = best_sum;
        best.default_us = def_sum;
        for (size_t p = 0; p < t.size(); ++p)
          best.probes.push_back({opt.split_probe_T[p], t[p][win], t[p][0]});
        choices.set(s, best.variant);
        be.set_kernel_choices(choices);  // the other ops are timed under this choice
      } else {
        const std::vector<double> us = measure(s, cands, ok, true);
        size_t win = 0;
        for (size_t c = 1; c < cands.size(); ++c)
          if (ok[c] && us[c] < us[win] && us[c] <= us[0] * (1 - opt.min_gain)) win = c;
        best.variant = *cands[win];
        best.time_us = us[win];
        best.default_us = us[0];
      }
    } catch (const Error& e) {  // e.g. a dtype the backend cannot make synthetic weights of
      rep.skipped.push_back(e.what());
      bar.step(elapsed(), s.str());
      continue;
    }
    rep.recipe.entries.push_back(std::move(best));
    ++rep.shapes_tuned;
    bar.step(elapsed(), s.str());
  }
  bar.finish();
  // The recipe's choices, complete (the bit-neutral ones too), over the base, in force from now
  // on.
  KernelChoices done = opt.base;
  const KernelChoices tuned = rep.recipe.choices();
  for (const auto& [shape, v] : tuned.all()) done.set(shape, v);
  be.set_kernel_choices(done);
  rep.elapsed_s = elapsed();
  return rep;
}

VerifyReport verify(Backend& be, const Recipe& r, const TuneOptions& opt) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const std::vector<OpKernels> reg = be.kernel_registry();
  VerifyReport rep;
  rep.entries = int(r.entries.size());
  be.set_kernel_choices(r.choices());
  std::vector<std::pair<const RecipeEntry*, const OpKernels*>> todo;  // the non-default choices
  for (const RecipeEntry& e : r.entries) {
    auto k = std::find_if(reg.begin(), reg.end(),
                          [&](const OpKernels& o) { return o.op == e.shape.op; });
    if (k == reg.end())
      rep.skipped.push_back(e.shape.str() + ": no such op on this backend");
    else if (!(e.variant == k->variants[0]))
      todo.push_back({&e, &*k});
  }
  Progress bar(int(todo.size()), opt.budget_s, opt.progress);
  for (const auto& [e, k] : todo) {
    if (elapsed() > opt.budget_s) {
      rep.budget_hit = true;
      break;
    }
    std::vector<int64_t> at;
    if (k->changes_order) {
      for (const RecipeProbe& p : e->probes) at.push_back(p.T);
      if (at.empty()) at = opt.split_probe_T;
    } else {
      at.push_back(e->shape.T);
    }
    VerifyRow row;
    row.entry = *e;
    try {
      for (int64_t T : at) {
        OpShape s = e->shape;
        s.T = T;
        double d[2], c[2];
        for (int i = 0; i < 2; ++i) {
          d[i] = time_variant(be, s, k->variants[0], opt).median_us;
          c[i] = time_variant(be, s, e->variant, opt).median_us;
        }
        row.default_us += std::min(d[0], d[1]);
        row.tuned_us += std::min(c[0], c[1]);
      }
    } catch (const Error& x) {
      rep.skipped.push_back(x.what());
      bar.step(elapsed(), e->shape.str());
      continue;
    }
    rep.rows.push_back(std::move(row));
    bar.step(elapsed(), e->shape.str());
  }
  bar.finish();
  rep.elapsed_s = elapsed();
  return rep;
}

Recipe prune_slower(const Recipe& r, const VerifyReport& rep,
                    const std::vector<OpKernels>& registry, double tolerance,
                    std::vector<std::string>* pruned) {
  Recipe out = r;
  for (const VerifyRow& v : rep.rows) {
    if (!(v.tuned_us > v.default_us * (1.0 + tolerance))) continue;
    auto k = std::find_if(registry.begin(), registry.end(),
                          [&](const OpKernels& o) { return o.op == v.entry.shape.op; });
    if (k == registry.end() || k->variants.empty()) continue;
    for (RecipeEntry& e : out.entries) {
      if (!(e.shape == v.entry.shape) || !(e.variant == v.entry.variant)) continue;
      e.variant = k->variants[0];
      e.time_us = e.default_us = v.default_us;
      e.probes.clear();
      if (pruned) pruned->push_back(e.shape.str());
    }
  }
  return out;
}

}  // namespace basalt::kernels
