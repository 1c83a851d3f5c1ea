// Scratch planner: the intermediates of one pass get lifetimes from the op sequence and offsets
// in one arena, so a forward pass of T rows needs one allocation sized by `Plan::peak`.
//
// Placement (greedy by size, as TFLite's offset planner): values are taken largest aligned size
// first (ties: earlier first op, then input order). Each is placed among the already placed values
// whose lifetimes overlap its own (call them its neighbours; values whose lifetimes are disjoint
// may share bytes). Sorted by offset, the neighbours leave bounded gaps between them and one
// unbounded gap above the highest of them, its "top". With s the value's aligned size and `peak`
// the arena so far, the value goes to the first of:
//   1. the lowest bounded gap of size in [s, 2s] (a snug gap);
//   2. the top, if top + s <= peak (the arena does not grow);
//   3. the lowest bounded gap larger than 2s (Reuse::SnugFirst only);
//   4. the top (the arena grows).
// Steps 1-2 are issue 3's rule that a freed slot is reused only by a value at most twice its
// size: a small value does not pin a big gap while a snug gap or free space at the top exists.
// The default (SnugOnly) applies that rule strictly. Step 3 (SnugFirst) prefers an oversized gap
// to growing the arena: values come in decreasing size, so what is left of the gap stays larger
// than any value placed after this one, and nothing larger is kept out. It is offered because it
// is measurably tighter: a Llama-3.1-8B layer needs 156 KiB of scratch per row with it (the lower
// bound) and 188 KiB with the strict rule (tests/unit/test_memory_planner.cpp).
//
// Greedy by size is a heuristic (the exact problem is NP-hard). It meets the lower bound on the
// Llama layer, on any stack of such layers and on chains whose sizes do not increase; on chains of
// random sizes it exceeds it in about a third of cases (by 7 % on average, 46 % at worst, 2000
// chains). Sizes are per pass: a plan for T rows does not depend on the context length.
//
// Zero-byte values take offset 0 and no bytes. Sizes count in whole multiples of `alignment`.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace basalt::memory {

// One intermediate of a program: live from op `first` to op `last` inclusive (op indices in
// program order); the op that writes it and the last op that reads it both count.
struct Value {
  std::string name;
  size_t bytes = 0;
  int first = 0;
  int last = 0;
};

struct Plan {
  std::vector<size_t> offsets;  // per value, in input order; multiples of `alignment`
  size_t alignment = 256;
  size_t peak = 0;         // arena bytes needed: max over values of offset + aligned size
  size_t lower_bound = 0;  // max over ops of the aligned bytes live at that op (no plan does less)
  size_t naive_sum = 0;    // sum of aligned sizes (one buffer each)
};

enum class Reuse {
  SnugOnly,   // steps 1, 2, 4: a gap larger than 2s is never used (issue 3's rule; default)
  SnugFirst,  // steps 1-4 above: an oversized gap before growing the arena
};

// Throws basalt::Error for first > last, a negative op index, an alignment that is not a power
// of two, or a size that overflows when aligned.
Plan plan(std::span<const Value> values, size_t alignment = 256, Reuse reuse = Reuse::SnugOnly);

// "peak X (lower bound Y, naive Z) over N values", then one line per value in offset order:
// "  [offset, end) name, ops first..last".
std::string describe(std::span<const Value> values, const Plan& p);

// "" if the plan is sound: one offset per value, each aligned, every value inside [0, peak),
// no two values with overlapping lifetimes sharing a byte; otherwise the first problem found.
std::string verify(std::span<const Value> values, const Plan& p);

// Records a program's values as its ops are appended:
//   Program p; p.op(); int x = p.value("x", bytes); p.op(); int y = p.value("y", n); p.use(x);
class Program {
 public:
  int op() { return ++last_op_; }  // starts a new op; returns its index (0, 1, ...)
  // A value written by the current op, live there; returns its id (index into values()).
  int value(std::string name, size_t bytes);
  // The current op reads value `id`: it lives at least until here.
  void use(int id);
  std::span<const Value> values() const { return values_; }
  int ops() const { return last_op_ + 1; }

 private:
  std::vector<Value> values_;
  int last_op_ = -1;
};

}  // namespace basalt::memory
