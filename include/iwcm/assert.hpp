// Always-on assertions for programmer errors (docs/design.md, "Code style", "Errors").
//
// A failed IWCM_ASSERT means the code itself is wrong, never that a peer sent
// something odd: bad input is data and is dropped, counted and traced instead.
// The check stays on in release builds because a connection manager that goes
// on after its own invariant broke corrupts other connections' state.
#pragma once

namespace iwcm::detail {
[[noreturn]] void assert_failed(const char* expr, const char* file, int line) noexcept;
}  // namespace iwcm::detail

#define IWCM_ASSERT(cond)                                             \
    do {                                                              \
        if (!(cond)) [[unlikely]]                                     \
            ::iwcm::detail::assert_failed(#cond, __FILE__, __LINE__); \
    } while (0)
