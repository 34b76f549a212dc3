#pragma once
// What the CUDA optimizer tests share: the CPU optimizer of each rule run on
// the same tensors, with its states read back through the allocator that
// made them (backend/cpu keeps them private), and the tensors: odd sizes,
// not multiples of a quantization block, with gradients that are zero in
// places on the first step (an all-zero 8-bit block, ν = 0 in SM3, a zero
// gradient norm in LARS).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/allocator.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/tensor.hpp"

namespace strata::backend::cuda::test {

using sim::MemTag;

// Forwards to a TrackingAllocator and remembers every optimizer-state buffer
// in the order it was allocated (the CPU optimizers never free one early).
class StateRecorder final : public cpu::Allocator {
 public:
  void* allocate(Bytes bytes, MemTag tag) override {
    void* p = inner_.allocate(bytes, tag);
    if (tag == MemTag::OptimizerStates) states_.emplace_back(p, bytes);
    return p;
  }
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept override { inner_.deallocate(p, bytes, tag); }
  // Every state buffer's bytes now.
  std::vector<std::vector<std::uint8_t>> states() const {
    std::vector<std::vector<std::uint8_t>> out;
    for (const auto& [p, n] : states_) {
      const auto* b = static_cast<const std::uint8_t*>(p);
      out.emplace_back(b, b + n);
    }
    return out;
  }
  Bytes state_bytes() const { return inner_.stats().current[static_cast<std::size_t>(MemTag::OptimizerStates)]; }

 private:
  cpu::TrackingAllocator inner_;
  std::vector<std::pair<void*, Bytes>> states_;
};

enum class Rule { Adam8bit, Lars, Lamb, Adafactor, Sm3 };

// The rules with the options the tests use: weight decay where the rule has
// it, learning rates large enough to move the parameters, and 8-bit Adam at
// its default block (2048) and at 100 (many blocks, some short).
struct RuleCase {
  std::string name;
  Rule rule;
  backend::Adam8bitOptions adam8bit{.lr = 1e-2f, .weight_decay = 0.1f};
  backend::LarsOptions lars{.lr = 0.5f, .weight_decay = 1e-2f};
  backend::LambOptions lamb{.lr = 1e-2f, .weight_decay = 0.1f};
  backend::AdafactorOptions adafactor{.lr = 1e-2f};
  backend::Sm3Options sm3{.lr = 0.1f};
};

inline std::vector<RuleCase> rule_cases() {
  std::vector<RuleCase> c = {{"adam8bit", Rule::Adam8bit}, {"adam8bit block 100", Rule::Adam8bit},
                             {"lars", Rule::Lars},         {"lamb", Rule::Lamb},
                             {"adafactor", Rule::Adafactor}, {"sm3", Rule::Sm3}};
  c[1].adam8bit.block = 100;
  return c;
}

inline std::unique_ptr<cpu::Optimizer> make_cpu(const RuleCase& c, cpu::Allocator& a) {
  switch (c.rule) {
    case Rule::Adam8bit: return std::make_unique<cpu::Adam8bit>(a, c.adam8bit);
    case Rule::Lars: return std::make_unique<cpu::Lars>(a, c.lars);
    case Rule::Lamb: return std::make_unique<cpu::Lamb>(a, c.lamb);
    case Rule::Adafactor: return std::make_unique<cpu::Adafactor>(a, c.adafactor);
    case Rule::Sm3: return std::make_unique<cpu::Sm3>(a, c.sm3);
  }
  return nullptr;
}

// Matrices (factored in Adafactor and SM3, one of a single element), a
// vector and a rank-3 tensor (full statistics), and 4099 elements: three
// blocks of 2048, the last of 3.
inline std::vector<Shape> odd_shapes() {
  return {Shape{37, 29}, Shape{301}, Shape{3, 5, 7}, Shape{4099}, Shape{1, 1},
          Shape{1, 13}};
}

inline std::vector<std::vector<float>> random_tensors(const std::vector<Shape>& shapes, backend::Rng& rng,
                                                      double sd) {
  std::vector<std::vector<float>> out;
  for (const auto& s : shapes) {
    std::vector<float> v(static_cast<std::size_t>(s.numel()));
    for (auto& x : v) x = static_cast<float>(sd * rng.normal());
    out.push_back(std::move(v));
  }
  return out;
}

// The gradients of step `step` (0-based): random, their scale changing from
// step to step; on step 0 row 0 of the first matrix, the first 100 entries
// of the vector and the whole 1 × 1 matrix are zero.
inline std::vector<std::vector<float>> step_grads(const std::vector<Shape>& shapes, backend::Rng& rng,
                                                  int step) {
  auto g = random_tensors(shapes, rng, 0.05 * (1 + step % 3));
  if (step == 0) {
    for (std::int64_t b = 0; b < shapes[0].numel() / shapes[0][0]; ++b) g[0][static_cast<std::size_t>(b)] = 0.0f;
    for (std::size_t j = 0; j < 100; ++j) g[1][j] = 0.0f;
    g[4][0] = 0.0f;
  }
  return g;
}

// The CPU optimizer of a rule on host tensors.
struct CpuRun {
  StateRecorder alloc;
  std::vector<cpu::Tensor> p, g;
  std::unique_ptr<cpu::Optimizer> opt;

  CpuRun(const RuleCase& c, const std::vector<Shape>& shapes, const std::vector<std::vector<float>>& p0) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      p.emplace_back(alloc, shapes[i], MemTag::Params);
      g.emplace_back(alloc, shapes[i], MemTag::Grads);
      std::memcpy(p.back().data(), p0[i].data(), p0[i].size() * sizeof(float));
    }
    opt = make_cpu(c, alloc);
  }
  void step(const std::vector<std::vector<float>>& grads) {
    for (std::size_t i = 0; i < g.size(); ++i)
      std::memcpy(g[i].data(), grads[i].data(), grads[i].size() * sizeof(float));
    opt->step(p, g);
  }
  std::vector<float> param(std::size_t i) const { return {p[i].data(), p[i].data() + p[i].numel()}; }
};

}  // namespace strata::backend::cuda::test
