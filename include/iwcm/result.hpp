// Result<T>: the value of an operation that can fail for operating reasons.
//
// Read first: docs/design.md "Code style" ("Errors"). tl::expected is used because g++ 12 has
// std::expected only in C++2b; switching is this one line.
#pragma once

#include <tl/expected.hpp>

namespace iwcm {

template <typename T, typename E>
using Expected = tl::expected<T, E>;

template <typename E>
using Unexpected = tl::unexpected<E>;

template <typename E>
[[nodiscard]] constexpr Unexpected<E> fail(E error) {
    return Unexpected<E>(std::move(error));
}

}  // namespace iwcm
