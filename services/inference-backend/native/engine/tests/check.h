// A minimal test harness for the engine's C++ tests: each test file is one executable
// registered with ctest; CHECK failures print file:line and make the executable exit 1.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace strata_test {

struct Case {
  const char* name;
  std::function<void()> fn;
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

inline int& failures() {
  static int n = 0;
  return n;
}

struct Register {
  Register(const char* name, std::function<void()> fn) { cases().push_back({name, std::move(fn)}); }
};

// A case that cannot run here (its model is missing) calls skip(reason) and returns. The
// executable exits kSkipExitCode (ctest: SKIP_RETURN_CODE) only when every case was skipped;
// otherwise its last line's "N skipped" carries the count (scripts/summarize-tests.mjs reads it).
inline constexpr int kSkipExitCode = 77;
inline std::string& skip_reason() {
  static std::string reason;
  return reason;
}
// With STRATA_REQUIRE_MODELS=1 (CI, which always has the models) a skip is a failure instead.
inline void skip(const std::string& reason) {
  const char* require = std::getenv("STRATA_REQUIRE_MODELS");
  if (require != nullptr && std::string(require) == "1") {
    std::printf("  %s, and STRATA_REQUIRE_MODELS=1 makes that a failure\n", reason.c_str());
    ++failures();
    return;
  }
  skip_reason() = reason;
}

inline int run_all() {
  int failed_cases = 0, skipped_cases = 0;
  for (auto& c : cases()) {
    int before = failures();
    skip_reason().clear();
    c.fn();
    bool ok = failures() == before;
    if (!ok) ++failed_cases;
    if (ok && !skip_reason().empty()) {
      ++skipped_cases;
      std::printf("skip %s: %s\n", c.name, skip_reason().c_str());
      continue;
    }
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", c.name);
  }
  std::printf("%zu passed, %d failed, %d skipped\n", cases().size() - failed_cases - skipped_cases, failed_cases, skipped_cases);
  if (failed_cases > 0) return 1;
  return skipped_cases > 0 && static_cast<size_t>(skipped_cases) == cases().size() ? kSkipExitCode : 0;
}

}  // namespace strata_test

#define STRATA_CAT2(a, b) a##b
#define STRATA_CAT(a, b) STRATA_CAT2(a, b)
#define TEST_CASE(name)                                                              \
  static void STRATA_CAT(test_fn_, __LINE__)();                                      \
  static strata_test::Register STRATA_CAT(test_reg_, __LINE__)(name, STRATA_CAT(test_fn_, __LINE__)); \
  static void STRATA_CAT(test_fn_, __LINE__)()

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);         \
      ++strata_test::failures();                                                     \
    }                                                                                \
  } while (0)

#define CHECK_EQ(a, b)                                                               \
  do {                                                                               \
    auto _va = (a);                                                                  \
    auto _vb = (b);                                                                  \
    if (!(_va == _vb)) {                                                             \
      std::printf("  %s:%d: CHECK_EQ(%s, %s) failed: %s vs %s\n", __FILE__, __LINE__, #a, #b, \
                  std::to_string(_va).c_str(), std::to_string(_vb).c_str());         \
      ++strata_test::failures();                                                     \
    }                                                                                \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                        \
  do {                                                                               \
    double _va = (a), _vb = (b);                                                     \
    if (!(std::fabs(_va - _vb) <= (tol))) {                                          \
      std::printf("  %s:%d: CHECK_NEAR(%s, %s) failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b, _va, _vb); \
      ++strata_test::failures();                                                     \
    }                                                                                \
  } while (0)

#define CHECK_THROWS(expr)                                                           \
  do {                                                                               \
    bool _threw = false;                                                             \
    try { (void)(expr); } catch (...) { _threw = true; }                             \
    if (!_threw) {                                                                   \
      std::printf("  %s:%d: CHECK_THROWS(%s) did not throw\n", __FILE__, __LINE__, #expr); \
      ++strata_test::failures();                                                     \
    }                                                                                \
  } while (0)

#define TEST_MAIN() int main() { return strata_test::run_all(); }
