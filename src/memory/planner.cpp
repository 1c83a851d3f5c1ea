#include "memory/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "core/error.h"

namespace basalt::memory {
namespace {

size_t align_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

bool lifetimes_overlap(const Value& a, const Value& b) {
  return a.first <= b.last && b.first <= a.last;
}

void check_values(std::span<const Value> values, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail("[memory] alignment {} is not a power of two", alignment);
  for (const Value& v : values) {
    if (v.first < 0 || v.last < 0)
      fail("[memory] value '{}': negative op index (ops {}..{})", v.name, v.first, v.last);
    if (v.first > v.last)
      fail("[memory] value '{}': first op {} is after last op {}", v.name, v.first, v.last);
    if (v.bytes > std::numeric_limits<size_t>::max() - alignment)
      fail("[memory] value '{}': {} bytes overflow when aligned", v.name, v.bytes);
  }
}

// Max over ops of the bytes live there: a sweep over lifetime starts and ends, so op indices
// may be sparse and large.
size_t live_peak(std::span<const Value> values, const std::vector<size_t>& sizes) {
  std::vector<std::pair<int64_t, int64_t>> events;  // (op, +size at first / -size after last)
  events.reserve(2 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (sizes[i] == 0) continue;
    events.emplace_back(values[i].first, int64_t(sizes[i]));
    events.emplace_back(int64_t(values[i].last) + 1, -int64_t(sizes[i]));
  }
  std::sort(events.begin(), events.end());  // at one op, ends (negative) come before starts
  int64_t live = 0, best = 0;
  for (const auto& [op, delta] : events) {
    live += delta;
    best = std::max(best, live);
  }
  return size_t(best);
}

std::string format_bytes(size_t n) {
  if (n >= (size_t(1) << 30)) return fmt::format("{:.2f} GiB", double(n) / double(1 << 30));
  if (n >= (size_t(1) << 20)) return fmt::format("{:.2f} MiB", double(n) / double(1 << 20));
  if (n >= (size_t(1) << 10)) return fmt::format("{:.2f} KiB", double(n) / double(1 << 10));
  return fmt::format("{} B", n);
}

}  // namespace

Plan plan(std::span<const Value> values, size_t alignment, Reuse reuse) {
  check_values(values, alignment);
  const size_t n = values.size();
  Plan p;
  p.alignment = alignment;
  p.offsets.assign(n, 0);
  std::vector<size_t> sizes(n);
  for (size_t i = 0; i < n; ++i) {
    sizes[i] = align_up(values[i].bytes, alignment);
    p.naive_sum += sizes[i];
  }
  p.lower_bound = live_peak(values, sizes);

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return values[a].first < values[b].first;
  });

  std::vector<size_t> placed;                   // indices of placed values, by increasing offset
  std::vector<std::pair<size_t, size_t>> gaps;  // (offset, size) between neighbours
  for (size_t i : order) {
    const size_t s = sizes[i];
    if (s == 0) continue;  // offset 0, no bytes
    // Neighbours in offset order leave bounded gaps; `top` is the end of the highest.
    gaps.clear();
    size_t top = 0;
    for (size_t j : placed) {
      if (!lifetimes_overlap(values[i], values[j])) continue;
      if (p.offsets[j] > top) gaps.emplace_back(top, p.offsets[j] - top);
      top = std::max(top, p.offsets[j] + sizes[j]);
    }
    auto lowest_gap = [&](size_t max_gap) -> const std::pair<size_t, size_t>* {
      for (const auto& g : gaps)
        if (g.second >= s && g.second <= max_gap) return &g;
      return nullptr;
    };
    const size_t snug = s > std::numeric_limits<size_t>::max() / 2 ? s : 2 * s;
    size_t at = top;  // step 4
    if (const auto* g = lowest_gap(snug)) {
      at = g->first;  // step 1
    } else if (top + s <= p.peak) {
      at = top;  // step 2
    } else if (reuse == Reuse::SnugFirst) {
      if (const auto* big = lowest_gap(std::numeric_limits<size_t>::max())) at = big->first;
    }
    p.offsets[i] = at;
    p.peak = std::max(p.peak, at + s);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), at,
                                   [&](size_t off, size_t j) { return off < p.offsets[j]; }),
                  i);
  }
  return p;
}

std::string describe(std::span<const Value> values, const Plan& p) {
  std::string out =
      fmt::format("peak {} (lower bound {}, naive {}) over {} values\n", format_bytes(p.peak),
                  format_bytes(p.lower_bound), format_bytes(p.naive_sum), values.size());
  if (p.offsets.size() != values.size()) return out;
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.offsets[a] < p.offsets[b]; });
  for (size_t i : order) {
    const Value& v = values[i];
    out += fmt::format("  [{}, {}) {}, ops {}..{}\n", p.offsets[i], p.offsets[i] + v.bytes, v.name,
                       v.first, v.last);
  }
  return out;
}

std::string verify(std::span<const Value> values, const Plan& p) {
  if (p.offsets.size() != values.size())
    return fmt::format("{} offsets for {} values", p.offsets.size(), values.size());
  if (p.alignment == 0 || (p.alignment & (p.alignment - 1)) != 0)
    return fmt::format("alignment {} is not a power of two", p.alignment);
  const size_t n = values.size();
  std::vector<size_t> sizes(n);
  for (size_t i = 0; i < n; ++i) {
    const Value& v = values[i];
    sizes[i] = align_up(v.bytes, p.alignment);
    if (p.offsets[i] % p.alignment != 0)
      return fmt::format("'{}' at offset {} is not aligned to {}", v.name, p.offsets[i],
                         p.alignment);
    if (sizes[i] > 0 && (p.offsets[i] > p.peak || sizes[i] > p.peak - p.offsets[i]))
      return fmt::format("'{}' [{}, {}) ends past the peak {}", v.name, p.offsets[i],
                         p.offsets[i] + sizes[i], p.peak);
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (sizes[i] == 0 || sizes[j] == 0 || !lifetimes_overlap(values[i], values[j])) continue;
      if (p.offsets[i] < p.offsets[j] + sizes[j] && p.offsets[j] < p.offsets[i] + sizes[i])
        return fmt::format("'{}' [{}, {}) and '{}' [{}, {}) are live together and share bytes",
                           values[i].name, p.offsets[i], p.offsets[i] + sizes[i], values[j].name,
                           p.offsets[j], p.offsets[j] + sizes[j]);
    }
  }
  return "";
}

int Program::value(std::string name, size_t bytes) {
  if (last_op_ < 0) fail("[memory] value '{}' defined before the first op()", name);
  values_.push_back(Value{std::move(name), bytes, last_op_, last_op_});
  return int(values_.size()) - 1;
}

void Program::use(int id) {
  if (id < 0 || size_t(id) >= values_.size())
    fail("[memory] use of value id {}: the program has {} values", id, values_.size());
  values_[size_t(id)].last = std::max(values_[size_t(id)].last, last_op_);
}

}  // namespace basalt::memory
