// tcp::SmallVec: a vector of trivially copyable elements whose first N live in the object.
//
// Read first: src/tcp/stream.hpp (the reference queue, its one user). A stream that
// sends a few frames by reference (the MPA exchange, a request and its answer) holds a
// handful of references and gathers a handful of pieces per segment; in std::vector each
// list is an allocation of its own on top of the queue's. Here the first N elements sit in
// the queue's block, and only a longer list takes heap memory, doubling as it grows and
// kept afterwards, as a vector keeps its capacity.
//
// The elements are copied with memcpy, so T must be trivially copyable. The object is never
// copied or moved: its data pointer points into it while the list is short.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "iwcm/assert.hpp"

namespace iwcm::tcp {

template <class T, std::uint32_t N>
class SmallVec {
    static_assert(std::is_trivially_copyable_v<T> && N > 0);

public:
    SmallVec() = default;
    SmallVec(const SmallVec&) = delete;
    SmallVec& operator=(const SmallVec&) = delete;

    T* data() { return data_; }
    const T* data() const { return data_; }
    T* begin() { return data(); }
    T* end() { return data() + size_; }
    const T* begin() const { return data(); }
    const T* end() const { return data() + size_; }
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    std::size_t capacity() const { return cap_; }
    bool on_heap() const { return heap_ != nullptr; }

    T& operator[](std::size_t i) {
        IWCM_ASSERT(i < size_);
        return data()[i];
    }
    const T& operator[](std::size_t i) const {
        IWCM_ASSERT(i < size_);
        return data()[i];
    }

    void push_back(const T& value) {
        if (size_ == cap_) [[unlikely]]
            grow();
        data()[size_++] = value;
    }
    template <class... Args>
    void emplace_back(Args&&... args) {
        push_back(T(std::forward<Args>(args)...));
    }
    // Keeps the capacity, on the heap if the list went there.
    void clear() { size_ = 0; }
    // Drops the first n elements; the rest move to the front.
    void erase_front(std::size_t n) {
        IWCM_ASSERT(n <= size_);
        std::memmove(data(), data() + n, (size_ - n) * sizeof(T));
        size_ -= static_cast<std::uint32_t>(n);
    }

private:
    [[gnu::noinline, gnu::cold]] void grow() {
        IWCM_ASSERT(size_ == cap_ && cap_ <= UINT32_MAX / 2);
        auto bigger = std::make_unique_for_overwrite<T[]>(std::size_t{cap_} * 2);
        std::memcpy(bigger.get(), data(), size_ * sizeof(T));
        heap_ = std::move(bigger);
        data_ = heap_.get();
        cap_ *= 2;
        IWCM_ASSERT(size_ < cap_);
    }

    std::array<T, N> inline_{};  // first: data_ starts as its address
    std::unique_ptr<T[]> heap_;
    T* data_ = inline_.data();  // inline_ or heap_: one load on the paths that read it
    std::uint32_t size_ = 0;
    std::uint32_t cap_ = N;
};

}  // namespace iwcm::tcp
