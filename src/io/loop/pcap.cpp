// pcap writer. Read first: pcap.hpp.
#include "io/loop/pcap.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "iwcm/assert.hpp"
#include "wire/pieces.hpp"

namespace iwcm::io {

namespace {

// Native byte order: the magic number tells readers which one it is.
bool put(std::FILE* f, const void* data, std::size_t len) {
    return std::fwrite(data, 1, len, f) == len;
}

}  // namespace

Expected<std::unique_ptr<PcapWriter>, std::string> PcapWriter::open(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return fail("cannot create pcap file " + path + ": " + std::strerror(errno));
    struct {
        std::uint32_t magic = kMagicNanoseconds;
        std::uint16_t major = 2;
        std::uint16_t minor = 4;
        std::int32_t thiszone = 0;
        std::uint32_t sigfigs = 0;
        std::uint32_t snaplen = kSnapLen;
        std::uint32_t linktype = kLinkTypeEthernet;
    } header;
    static_assert(sizeof header == 24);
    if (!put(f, &header, sizeof header) || std::fflush(f) != 0) {
        std::fclose(f);
        return fail("cannot write pcap file " + path + ": " + std::strerror(errno));
    }
    return std::unique_ptr<PcapWriter>(new PcapWriter(f));
}

PcapWriter::~PcapWriter() {
    IWCM_ASSERT(file_ != nullptr);
    std::fclose(file_);
}

bool PcapWriter::write(std::int64_t unix_ns, std::span<const std::byte> frame) {
    return write(unix_ns, frame, {});
}

bool PcapWriter::write(std::int64_t unix_ns, std::span<const std::byte> frame,
                       std::span<const std::span<const std::byte>> rest) {
    IWCM_ASSERT(file_ != nullptr);
    IWCM_ASSERT(unix_ns >= 0);
    const std::size_t len = frame.size() + wire::total_size(rest);
    const auto caplen = static_cast<std::uint32_t>(std::min<std::size_t>(len, kSnapLen));
    const std::uint32_t record[4] = {static_cast<std::uint32_t>(unix_ns / 1'000'000'000),
                                     static_cast<std::uint32_t>(unix_ns % 1'000'000'000), caplen,
                                     static_cast<std::uint32_t>(len)};
    bool ok = put(file_, record, sizeof record);
    // The first caplen bytes of the parts, in order.
    std::size_t left = caplen;
    const auto part = [&](std::span<const std::byte> p) {
        const std::size_t n = std::min(left, p.size());
        if (n == 0) return;  // an empty part may have no address at all
        ok = ok && put(file_, p.data(), n);
        left -= n;
    };
    part(frame);
    for (auto piece : rest) part(piece);
    ok = ok && std::fflush(file_) == 0;
    if (ok) ++frames_;
    return ok;
}

}  // namespace iwcm::io
