//! Links llguidance's C API (llg_* symbols, see its llguidance.h) into one static library for the
//! engine's C++ grammar module. Nothing of our own lives here.
pub use llguidance;
