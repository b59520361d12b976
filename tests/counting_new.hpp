// Replaces the global operator new of a test binary with one that counts, so a test can
// show what a path allocates: read test::allocations() before and after it. Include this
// header in exactly one source file of the binary (it defines the replacements).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace iwcm::test {
inline std::atomic<std::size_t> g_allocations{0};
// Every allocation through operator new or new[] so far.
inline std::size_t allocations() {
    return g_allocations.load(std::memory_order_relaxed);
}
}  // namespace iwcm::test

// The project uses no exceptions, so running out of memory aborts here. GCC sees malloc
// inside operator new and free inside operator delete and warns of a mismatch that
// replacing both is exactly meant to make.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
    iwcm::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    void* p = std::malloc(n == 0 ? 1 : n);
    if (p == nullptr) std::abort();
    return p;
}
// new[] too: the default one calls operator new, but a sanitizer's runtime brings its own.
void* operator new[](std::size_t n) {
    return ::operator new(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
#pragma GCC diagnostic pop
