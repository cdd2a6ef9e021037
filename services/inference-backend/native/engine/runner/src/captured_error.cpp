#include "strata/captured_error.h"

#include <exception>
#include <new>

#include "strata/coded_error.h"

namespace strata {

CapturedError capture_current_error() {
  try {
    throw;
  } catch (const CodedError& e) {
    return {e.code(), e.what()};
  } catch (const std::bad_alloc&) {
    return {"STRATA_OUT_OF_MEMORY", "the engine ran out of host memory"};
  } catch (const std::exception& e) {
    return {"STRATA_ENGINE_ERROR", e.what()};
  } catch (...) {
    return {"STRATA_ENGINE_ERROR", "unknown native exception"};
  }
}

}  // namespace strata
