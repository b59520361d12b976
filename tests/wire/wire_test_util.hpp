// Helpers of the wire tests: golden fixtures, a small pcap reader and writer, payloads cut
// into pieces.
//
// Read first: docs/fixtures.md (where the fixtures come from) and the pcap
// file format (a 24-byte global header whose magic number gives the byte order
// and the time unit, then records with a 16-byte header each; see
// https://wiki.wireshark.org/Development/LibpcapFileFormat).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "wire/bytes.hpp"
#include "wire/checksum.hpp"
#include "wire/frame.hpp"
#include "wire/ipv4.hpp"

namespace iwcm::wire::test {

using Buffer = std::vector<std::byte>;

// Cuts `payload` at `cuts` (ascending offsets; one twice makes an empty piece) into pieces.
inline std::vector<Bytes> pieces_of(const Buffer& payload, const std::vector<std::size_t>& cuts) {
    std::vector<Bytes> out;
    std::size_t from = 0;
    for (std::size_t at : cuts) {
        out.push_back(Bytes(payload).subspan(from, at - from));
        from = at;
    }
    out.push_back(Bytes(payload).subspan(from));
    return out;
}

inline std::string fixture_path(const std::string& name) {
    return std::string(IWCM_SOURCE_DIR) + "/tests/fixtures/" + name;
}

inline std::optional<std::string> read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// A fixture written as hex with '#' comments (tests/fixtures/NAME.hex).
inline Buffer read_hex_fixture(const std::string& name) {
    auto text = read_text(fixture_path(name + ".hex"));
    if (!text) return {};
    return hex_bytes(*text);
}

// A 32-bit field of the file in the byte order its magic number announced.
inline std::uint32_t pcap_u32(const Buffer& b, std::size_t off, bool big_endian) {
    return big_endian ? load_be32(b, off) : load_le32(b, off);
}

struct Pcap {
    std::uint32_t link_type = 0;
    std::vector<Buffer> frames;
};

// Reads a classic pcap file in either byte order, microsecond or nanosecond
// magic. Returns nullopt for a missing or malformed file.
inline std::optional<Pcap> read_pcap(const std::string& path) {
    auto text = read_text(path);
    if (!text || text->size() < 24) return std::nullopt;
    const Buffer b(reinterpret_cast<const std::byte*>(text->data()),
                   reinterpret_cast<const std::byte*>(text->data()) + text->size());
    const std::uint32_t magic_be = load_be32(b, 0);
    bool big_endian = false;
    if (magic_be == 0xA1B2C3D4u || magic_be == 0xA1B23C4Du)
        big_endian = true;
    else if (magic_be != 0xD4C3B2A1u && magic_be != 0x4D3CB2A1u)
        return std::nullopt;
    Pcap p;
    p.link_type = pcap_u32(b, 20, big_endian);
    std::size_t off = 24;
    while (off + 16 <= b.size()) {
        const std::uint32_t incl = pcap_u32(b, off + 8, big_endian);
        off += 16;
        if (off + incl > b.size()) return std::nullopt;
        p.frames.emplace_back(b.begin() + static_cast<std::ptrdiff_t>(off),
                              b.begin() + static_cast<std::ptrdiff_t>(off + incl));
        off += incl;
    }
    if (off != b.size()) return std::nullopt;
    return p;
}

// Recomputes the TCP checksum of an Ethernet/IPv4/TCP frame in place (in the siw captures,
// frames from 10.231.0.1 were recorded before checksum offload filled it in).
inline void repair_tcp_checksum(Buffer& f) {
    auto ip = parse_ipv4(Bytes(f).subspan(14));
    IWCM_ASSERT(ip.has_value());
    const std::size_t seg_off = 14 + Ipv4Repr::kHeaderLen;
    MutBytes seg = MutBytes(f).subspan(seg_off, ip->payload.size());
    store_be16(seg, 16, 0);
    store_be16(seg, 16, tcp_checksum(ip->repr.src, ip->repr.dst, seg));
}

// Writes a little-endian, microsecond pcap with link type Ethernet (1).
class PcapWriter {
public:
    void add(Bytes frame) { frames_.emplace_back(frame.begin(), frame.end()); }

    bool write(const std::string& path) const {
        std::string out;
        put32(out, 0xA1B2C3D4u);
        put16(out, 2);
        put16(out, 4);
        put32(out, 0);
        put32(out, 0);
        put32(out, 65535);
        put32(out, 1);
        std::uint32_t usec = 0;
        for (const auto& f : frames_) {
            put32(out, 1700000000u);
            put32(out, usec += 1000);
            put32(out, static_cast<std::uint32_t>(f.size()));
            put32(out, static_cast<std::uint32_t>(f.size()));
            out.append(reinterpret_cast<const char*>(f.data()), f.size());
        }
        std::ofstream file(path, std::ios::binary);
        file.write(out.data(), static_cast<std::streamsize>(out.size()));
        return static_cast<bool>(file);
    }

private:
    static void put16(std::string& s, std::uint16_t v) {
        s.push_back(static_cast<char>(v & 0xFF));
        s.push_back(static_cast<char>(v >> 8));
    }
    static void put32(std::string& s, std::uint32_t v) {
        put16(s, static_cast<std::uint16_t>(v & 0xFFFF));
        put16(s, static_cast<std::uint16_t>(v >> 16));
    }
    std::vector<Buffer> frames_;
};

inline Bytes view(const Buffer& b) {
    return Bytes(b.data(), b.size());
}

// The repr of a captured Linux segment (a fixture: an ACK over IPv4, a SYN over IPv6, say)
// as the header of a data segment (ACK and PSH).
inline FrameRepr data_repr_of(const std::string& fixture) {
    const Buffer frame = read_hex_fixture(fixture);
    auto f = parse_tcp_frame(frame);
    EXPECT_TRUE(f);
    FrameRepr r = f->repr;
    r.tcp.flags = tcp_flags::kAck | tcp_flags::kPsh;
    return r;
}

// n bytes of a pattern that no offset repeats within 256 bytes.
inline Buffer payload_of(std::size_t n) {
    Buffer b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 7 + 3);
    return b;
}

}  // namespace iwcm::wire::test
