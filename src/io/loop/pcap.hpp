// A pcap capture file: every frame the connection manager sends or receives.
//
// Read first: the classic libpcap file format (a 24-byte global header whose
// magic 0xA1B23C4D announces nanosecond timestamps in the writer's byte
// order, then one 16-byte record header per frame: seconds, nanoseconds,
// captured length, original length), link type 1 (Ethernet, LINKTYPE_ETHERNET).
// The format is small and stable, so it is written here directly instead of
// through libpcap (one dependency fewer; tshark and libpcap read the result).
// Every record is flushed at once, so a capture cut short by a signal or a
// crash is still a valid file up to its last frame.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "iwcm/result.hpp"

namespace iwcm::io {

class PcapWriter {
public:
    static constexpr std::uint32_t kMagicNanoseconds = 0xA1B23C4Du;
    static constexpr std::uint32_t kLinkTypeEthernet = 1;
    static constexpr std::uint32_t kSnapLen = 65535;

    // Creates (truncates) the file and writes the global header. The error
    // says which file and why.
    static Expected<std::unique_ptr<PcapWriter>, std::string> open(const std::string& path);
    ~PcapWriter();
    PcapWriter(const PcapWriter&) = delete;
    PcapWriter& operator=(const PcapWriter&) = delete;

    // One record; `unix_ns` is the wall-clock time of the frame in
    // nanoseconds since 1970. Frames longer than kSnapLen are cut. Returns
    // false when the write failed (disk full): the capture is then incomplete.
    bool write(std::int64_t unix_ns, std::span<const std::byte> frame);
    // The same for a frame in parts, `frame` then the `rest` pieces (Core::poll_transmit_parts).
    bool write(std::int64_t unix_ns, std::span<const std::byte> frame,
               std::span<const std::span<const std::byte>> rest);
    std::uint64_t frames() const { return frames_; }

private:
    explicit PcapWriter(std::FILE* file) : file_(file) {}
    std::FILE* file_;
    std::uint64_t frames_ = 0;
};

}  // namespace iwcm::io
