// Recorded conversations with Linux soft-iWARP (tests/fixtures/siw, docs/
// fixtures.md) as the engine's replay tests need them: each side's TCP
// payload after the MPA exchange (and after the initiator's RTR when
// peer-to-peer mode was agreed), cut into FPDUs, with siw's TCP segment
// boundaries kept so its bytes reach the engine as they reached us.
//
// Read first: tests/wire/wire_test_util.hpp (the pcap reader), RFC 5044
// section 7 (MPA request and reply), siw_replay_test.cpp (the replays).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipe.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::rdma::test {

// The guest running siw in every recording.
constexpr std::uint32_t kSiwAddr = 0x0AE70002;  // 10.231.0.2

struct Side {
    ByteVec stream;                   // every FPDU byte after MPA, in order
    std::vector<std::size_t> ends;    // where each TCP segment's payload ends in stream
    std::vector<ByteVec> fpdus;       // stream cut into FPDUs
    std::vector<std::size_t> starts;  // each FPDU's offset in stream
};

struct Conversation {
    Side siw, peer;  // peer: the recorded other end, whose role the engine plays
    bool crc = false;
    bool siw_initiated = false;
};

inline std::uint32_t be(const ByteVec& v, std::size_t off, int bytes) {
    std::uint32_t x = 0;
    for (int i = 0; i < bytes; ++i) x = x << 8 | static_cast<std::uint8_t>(v[off + i]);
    return x;
}

inline std::uint64_t be64(const ByteVec& v, std::size_t off) {
    return std::uint64_t{be(v, off, 4)} << 32 | be(v, off + 4, 4);
}

// An FPDU's whole length from its first two bytes: length, ULPDU, pad, CRC.
inline std::size_t fpdu_size(std::size_t ulpdu_len) {
    return (2 + ulpdu_len + 3) / 4 * 4 + 4;
}

// Drops the first n bytes of a side (MPA frames, the RTR).
inline void drop_front(Side& s, std::size_t n) {
    EXPECT_LE(n, s.stream.size());
    s.stream.erase(s.stream.begin(), s.stream.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<std::size_t> ends;
    for (std::size_t e : s.ends)
        if (e > n) ends.push_back(e - n);
    s.ends = ends;
}

inline void cut_fpdus(Side& s) {
    std::size_t off = 0;
    while (off + 2 <= s.stream.size()) {
        const std::size_t n = fpdu_size(be(s.stream, off, 2));
        if (off + n > s.stream.size()) break;
        s.starts.push_back(off);
        s.fpdus.emplace_back(s.stream.begin() + static_cast<std::ptrdiff_t>(off),
                             s.stream.begin() + static_cast<std::ptrdiff_t>(off + n));
        off += n;
    }
    EXPECT_EQ(off, s.stream.size()) << "a partial FPDU at the end of a recording";
}

// Appends one frame's TCP payload to its side (retransmitted bytes skipped).
inline void add_frame(const wire::test::Buffer& f, Side& siw, Side& peer,
                      std::optional<std::uint32_t> next_seq[2]) {
    ByteVec v(f.begin(), f.end());
    if (v.size() < 54 || be(v, 12, 2) != 0x0800 || static_cast<std::uint8_t>(v[23]) != 6) return;
    const std::size_t ip = 14;
    const std::size_t ihl = (static_cast<std::uint8_t>(v[ip]) & 0xF) * 4u;
    const std::size_t total = be(v, ip + 2, 2);
    const std::size_t tcp = ip + ihl;
    const std::size_t data = tcp + (static_cast<std::uint8_t>(v[tcp + 12]) >> 4) * 4u;
    if (ip + total > v.size() || data > ip + total) return;
    const bool from_siw = be(v, ip + 12, 4) == kSiwAddr;
    std::uint32_t seq = be(v, tcp + 4, 4);
    std::size_t begin = data;
    const std::size_t end = ip + total;
    auto& next = next_seq[from_siw ? 0 : 1];
    if (begin == end) return;
    if (next) {
        const auto behind = static_cast<std::int32_t>(*next - seq);
        if (behind >= static_cast<std::int32_t>(end - begin)) return;
        if (behind > 0) begin += static_cast<std::size_t>(behind);
        seq = *next;
    }
    next = seq + static_cast<std::uint32_t>(end - begin);
    Side& s = from_siw ? siw : peer;
    s.stream.insert(s.stream.end(), v.begin() + static_cast<std::ptrdiff_t>(begin),
                    v.begin() + static_cast<std::ptrdiff_t>(end));
    s.ends.push_back(s.stream.size());
}

// Reads tests/fixtures/siw/NAME: both sides' FPDU streams, CRC as the MPA
// reply set it, the RTR (the initiator's first FPDU when the reply's IRD
// has the peer-to-peer bit) left out.
inline std::optional<Conversation> load_conversation(const std::string& name) {
    auto pcap = wire::test::read_pcap(wire::test::fixture_path("siw/" + name));
    if (!pcap) return std::nullopt;
    Conversation c;
    std::optional<std::uint32_t> next_seq[2];
    for (const auto& f : pcap->frames) add_frame(f, c.siw, c.peer, next_seq);
    if (c.siw.stream.size() < 20 || c.peer.stream.size() < 20) return std::nullopt;
    const auto is_request = [](const Side& s) { return s.stream[9] == std::byte{'q'}; };
    c.siw_initiated = is_request(c.siw);
    EXPECT_NE(c.siw_initiated, is_request(c.peer)) << "one MPA request and one reply";
    Side& reply = c.siw_initiated ? c.peer : c.siw;
    Side& initiator = c.siw_initiated ? c.siw : c.peer;
    const std::uint8_t flags = static_cast<std::uint8_t>(reply.stream[16]);
    const std::size_t pd = be(reply.stream, 18, 2);
    c.crc = (flags & 0x40) != 0;
    const bool p2p = reply.stream[17] == std::byte{2} && (flags & 0x10) != 0 && pd >= 4 &&
                     (static_cast<std::uint8_t>(reply.stream[20]) & 0x80) != 0;
    drop_front(reply, 20 + pd);
    drop_front(initiator, 20 + be(initiator.stream, 18, 2));
    if (p2p) drop_front(initiator, fpdu_size(be(initiator.stream, 0, 2)));
    cut_fpdus(c.siw);
    cut_fpdus(c.peer);
    return c;
}

// Fields of an FPDU record (offsets count its 2-byte length field).
struct Fpdu {
    const ByteVec& r;
    bool tagged() const { return (static_cast<std::uint8_t>(r[2]) & 0x80) != 0; }
    std::uint8_t opcode() const { return static_cast<std::uint8_t>(r[3]) & 0x0F; }
    std::uint32_t stag() const { return be(r, 4, 4); }
    std::uint64_t to() const { return be64(r, 8); }
    std::uint32_t qn() const { return be(r, 8, 4); }
    std::size_t payload() const { return tagged() ? 16 : 20; }
    std::size_t crc_at() const { return r.size() - 4; }
};

// RDMAP opcodes (RFC 5040 section 4.3).
constexpr std::uint8_t kOpWrite = 0, kOpReadRequest = 1, kOpReadResponse = 2, kOpSend = 3,
                       kOpTerminate = 7;

}  // namespace iwcm::rdma::test
