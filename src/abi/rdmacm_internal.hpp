// What rdmacm.cpp offers abi.cpp besides the handler's entry points of abi.hpp.
//
// Read first: src/abi/abi.hpp.
#pragma once

#include <cstddef>

#include "iwcm/runtime.hpp"

namespace iwcm::abi {

// Under the lock, at process exit: every connection of an rdma_cm id that
// is still open is closed gracefully (one not yet established is reset), so
// that the peers hear DISCONNECTED. Returns how many were asked to close.
std::size_t rdmacm_close_all(Session& s);

}  // namespace iwcm::abi
