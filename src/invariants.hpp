// IWCM_CHECK_INVARIANTS: whether the per-call invariant checks of the core
// (src/cm/check.cpp) and the stream (tcp::Stream::check_invariants) run.
//
// Read first: docs/design.md "Code style". Debug builds check them; the
// sanitizer and fuzz builds define the macro to 1; release builds leave them out.
#pragma once

#if !defined(IWCM_CHECK_INVARIANTS)
#if defined(NDEBUG)
#define IWCM_CHECK_INVARIANTS 0
#else
#define IWCM_CHECK_INVARIANTS 1
#endif
#endif
