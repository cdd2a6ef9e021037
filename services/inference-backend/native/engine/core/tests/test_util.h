// Helpers the core tests share on top of ../../tests/check.h (whose CHECK_EQ needs std::to_string).
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include "../../tests/check.h"
#include "strata/errors.h"

#define CHECK_STR_EQ(a, b)                                                                     \
  do {                                                                                         \
    const std::string _sa = (a), _sb = (b);                                                    \
    if (_sa != _sb) {                                                                          \
      std::printf("  %s:%d: CHECK_STR_EQ(%s, %s) failed:\n    \"%s\"\n vs \"%s\"\n", __FILE__, \
                  __LINE__, #a, #b, _sa.c_str(), _sb.c_str());                                 \
      ++strata_test::failures();                                                               \
    }                                                                                          \
  } while (0)

// (code, message) of the EngineError f throws; ("", "") when it throws nothing.
template <class F>
std::pair<std::string, std::string> error_of(F f) {
  try {
    f();
  } catch (const strata::EngineError& e) {
    return {e.code(), e.what()};
  }
  return {"", ""};
}
