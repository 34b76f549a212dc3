#pragma once
// Helpers shared by the unit tests.
#include <string>

#include "costmodel/model.hpp"
#include "sim/error.hpp"

namespace strata::testing {

// The message of the InputError `fn` throws, or "no error".
template <class Fn>
std::string input_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// The tiny GPT the gradient, optimizer and training tests share: 2 layers,
// hidden 16, 2 heads, ffn 64, vocabulary 11, sequence 8 (GPT-style defaults
// otherwise: GeLU, layer norm, biases, learned positions, tied embeddings).
inline cost::ModelSpec tiny_gpt() {
  cost::ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 16;
  m.heads = 2;
  m.kv_heads = 2;
  m.ffn_hidden = 64;
  m.vocab = 11;
  m.seq_len = 8;
  return m;
}

}  // namespace strata::testing
