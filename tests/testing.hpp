#pragma once
// Helpers shared by the unit tests.
#include <string>

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

}  // namespace strata::testing
