// Mutated golden frames: every parser either refuses cleanly or yields values
// that survive an emit and a second parse unchanged. Run under the sanitizer
// build (IWCM_SANITIZE=ON) this also shows the parsers never read out of bounds.
//
// Read first: docs/design.md "Code style" ("Errors": bad input is data),
// src/wire/frame.hpp, mpa.hpp, fpdu.hpp.
#include <gtest/gtest.h>

#include <random>

#include "wire/checksum.hpp"
#include "wire/fpdu.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

// Flips one to three random bytes in [from, to) of a copy of `seed`.
Buffer mutate(const Buffer& seed, std::size_t from, std::size_t to, std::mt19937& rng) {
    Buffer b = seed;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
        const std::size_t at = from + rng() % (to - from);
        b[at] = static_cast<std::byte>(rng());
    }
    if (rng() % 8 == 0) b.resize(rng() % (b.size() + 1));
    return b;
}

// Makes the IPv4 header and TCP checksums right again where the lengths allow,
// so that mutations reach the option and flag parsing behind them.
void repair_checksums(Buffer& f) {
    if (f.size() < 34) return;
    store_be16(f, 24, 0);
    store_be16(f, 24, internet_checksum(Bytes(f).subspan(14, 20)));
    const std::size_t total = load_be16(f, 16);
    if (total < 40 || 14 + total > f.size()) return;
    MutBytes seg = MutBytes(f).subspan(34, total - 20);
    const IpAddr src =
        Ipv4Addr{{static_cast<std::uint8_t>(f[26]), static_cast<std::uint8_t>(f[27]),
                  static_cast<std::uint8_t>(f[28]), static_cast<std::uint8_t>(f[29])}};
    const IpAddr dst =
        Ipv4Addr{{static_cast<std::uint8_t>(f[30]), static_cast<std::uint8_t>(f[31]),
                  static_cast<std::uint8_t>(f[32]), static_cast<std::uint8_t>(f[33])}};
    store_be16(seg, 16, 0);
    store_be16(seg, 16, tcp_checksum(src, dst, seg));
}

TEST(Mutation, TcpFramesRefuseOrRoundTrip) {
    std::mt19937 rng(20240601);
    const Buffer seed = test::read_hex_fixture("linux_syn");
    ASSERT_EQ(seed.size(), 74u);
    int accepted = 0;
    for (int i = 0; i < 20000; ++i) {
        Buffer b = mutate(seed, 14, seed.size(), rng);
        if (i % 2 == 0) repair_checksums(b);
        auto f = parse_tcp_frame(b);
        if (!f) {
            ASSERT_LE(f.error().offset, b.size()) << f.error().to_string();
            continue;
        }
        ++accepted;
        Buffer out(tcp_frame_len(f->repr, f->payload.size()));
        ASSERT_EQ(emit_tcp_frame(f->repr, f->payload, out), out.size());
        auto again = parse_tcp_frame(out);
        ASSERT_TRUE(again) << again.error().to_string();
        EXPECT_EQ(again->repr, f->repr);
        EXPECT_EQ(to_hex(again->payload), to_hex(f->payload));
    }
    EXPECT_GT(accepted, 1000);  // the repaired half mostly parses: the test reaches the options
}

TEST(Mutation, MpaFramesRefuseOrRoundTrip) {
    std::mt19937 rng(7);
    const Buffer seed = hex_bytes(
        "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 d0 02 00 07 c0 05 ff ff ab cd ef");
    int accepted = 0;
    for (int i = 0; i < 20000; ++i) {
        const Buffer b = mutate(seed, i % 4 == 0 ? 0 : 16, seed.size(), rng);
        auto m = parse_mpa(b);
        if (!m) {
            ASSERT_LE(m.error().offset, b.size());
            continue;
        }
        ++accepted;
        ASSERT_LE(m->buffer_len(), b.size());
        Buffer out(m->buffer_len());
        m->emit(out);
        auto again = parse_mpa(out);
        ASSERT_TRUE(again) << again.error().to_string();
        EXPECT_EQ(again->kind, m->kind);
        EXPECT_EQ(again->revision, m->revision);
        EXPECT_EQ(again->crc, m->crc);
        EXPECT_EQ(again->reject, m->reject);
        EXPECT_EQ(again->v2, m->v2);
        EXPECT_EQ(to_hex(again->private_data), to_hex(m->private_data));
    }
    EXPECT_GT(accepted, 1000);
}

TEST(Mutation, FpdusNeverReadPastTheirLength) {
    std::mt19937 rng(99);
    Buffer seed(rtr_fpdu_len(RtrType::kRead));
    emit_rtr_fpdu(RtrParams{RtrType::kRead, 5}, true, seed);
    for (int i = 0; i < 20000; ++i) {
        const Buffer b = mutate(seed, 0, seed.size(), rng);
        auto f = parse_fpdu(b, true);
        if (!f) continue;
        ASSERT_LE(f->total_len, b.size());
        // Whatever the bytes, the RTR and TERMINATE readers answer without crashing.
        (void)parse_rtr(f->ulpdu);
        (void)parse_terminate(f->ulpdu);
    }
}

}  // namespace
}  // namespace iwcm::wire
