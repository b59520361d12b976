// Byte-stream throughput on one thread: two cores wired back to back and a
// connection handed off as a stream on both, against a Linux TCP connection
// over loopback driven the same way (one thread, non-blocking, same MSS).
//
// Read first: bench/setup_pair.hpp (the wiring), include/iwcm/core.hpp
// ("byte stream"). Used by `iwarp-cm bench` and bench/stream_bench.cpp.
//
// One unit of work: A's application writes into its send buffer what it
// takes, frames cross to B without a copy (payloads read from A's buffer), B's application reads
// what is readable (peek + consume: no copy out of the stream's buffer), B's ACKs cross back. Time
// is the real clock, so that delayed ACKs and the RTO run as they would (nothing is lost, so
// neither fires in practice).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "iwcm/core.hpp"

namespace iwcm::bench {

struct StreamSample {
    std::uint64_t bytes = 0;   // delivered to the reader
    std::uint64_t frames = 0;  // moved between the cores (or 0 for the kernel)
    double seconds = 0;        // wall
    bool error = false;
    double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
};

inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline StreamSample failed(StreamSample s) {
    s.error = true;
    return s;
}

// Two cores wired back to back: A at 10.0.0.<1> connects to B's listener
// at 10.0.0.2:5000 and frames cross without a copy (StreamPair, and the
// RDMA pair of bench/rdma_pair.hpp). Frames arrive at `now`, the time of
// the run: a frame received at any other time confuses the receiver's
// timers (frames at time 0 made the stream retransmit 40 % of its segments).
inline IpAddr pair_ip(std::uint8_t last) {
    return Ipv4Addr{{10, 0, 0, last}};
}

// Bytes copied per byte delivered (docs/perf.md "Copies"): the sending
// stream's copies into its buffer and into frames, the receiving stream's
// into its buffer, and `placed` more (a device's copies into memory), over
// `delivered`. What a sink took in order it did not copy into the buffer. `framing`:
// bytes of those copies that are not message bytes (an RDMA sender's FPDU headers and
// CRCs, Device::framing_sent), left out.
inline double copies_per_byte(const Core& from, ConnHandle tx, const Core& to, ConnHandle rx,
                              std::uint64_t placed, std::uint64_t delivered,
                              std::uint64_t framing = 0) {
    auto s = from.stream_info(tx);
    auto r = to.stream_info(rx);
    if (!s || !r || delivered == 0) return 0;
    const std::uint64_t copied =
        s->copied_in + s->copied_to_frames + r->copied_received + placed - framing;
    return static_cast<double>(copied) / static_cast<double>(delivered);
}

// Moves every queued frame across as a NIC's DMA would: a stream segment's payload read
// where it lies in the sender's memory (Core::poll_transmit_parts), straight into the
// receiver's buffer or sink (Core::receive_parts), with the sender's flow hash.
inline std::uint64_t ferry(Core& from, Core& to, Instant now) {
    std::uint64_t n = 0;
    while (auto f = from.poll_transmit_parts()) {
        to.receive_parts(now, f->headers, f->payload, f->flow_hash);
        ++n;
    }
    return n;
}

// Connects A to B and runs the exchange until both are established.
inline bool connect_pair(Core& a, Core& b, Instant now, ConnHandle& conn_a, ConnHandle& conn_b) {
    ListenParams lp;
    lp.local = {pair_ip(2), 5000};
    if (!b.listen(lp)) return false;
    ConnectParams cp;
    cp.local = {pair_ip(1), 0};
    cp.remote = {pair_ip(2), 5000};
    cp.remote_mac = b.config().mac;
    auto c = a.connect(now, cp);
    if (!c) return false;
    conn_a = *c;
    bool a_up = false, b_up = false;
    for (int round = 0; round < 100 && !(a_up && b_up); ++round) {
        ferry(a, b, now);
        while (auto e = b.poll_event()) {
            if (e->type == EventType::kConnectRequest) {
                conn_b = e->conn;
                if (!b.accept(now, e->conn, {})) return false;
            }
            if (e->type == EventType::kEstablished) b_up = true;
        }
        ferry(b, a, now);
        while (auto e = a.poll_event())
            if (e->type == EventType::kEstablished) a_up = true;
    }
    return a_up && b_up;
}

// The segmentation offload of the pairs' streams when one is asked for
// (StreamConfig::segment_offload): 44 segments of 1460 bytes, as Linux's
// GSO on loopback sends up to 64 KiB at once.
constexpr std::uint32_t kPairOffload = 44 * 1460;

// A reader that takes the bytes from the arriving segments (Core::set_stream_sink)
// instead of peeking the receive buffer: it counts them, as the peeking reader does.
class CountingSink final : public StreamSink {
public:
    std::size_t on_in_order(ConnHandle, std::span<const std::byte> bytes) override {
        taken += bytes.size();
        return bytes.size();
    }
    std::uint64_t taken = 0;
};

class StreamPair {
public:
    // `sink`: B's reader takes the bytes as they arrive in order (CountingSink).
    // `by_ref`: A sends with Core::send_ref (the chunk it sends never changes,
    // so the memory stays valid and unchanged however long the bytes wait).
    // `checksum_offload`: neither core computes or verifies the IPv4 and TCP
    // checksums (CoreConfig::checksum_offload), as Linux's loopback skips the TCP one.
    explicit StreamPair(std::uint32_t buffer = 256 * 1024, std::uint32_t offload = 0,
                        bool sink = false, bool by_ref = false, bool checksum_offload = false)
        : a_(config(0x0a, 1, buffer, offload, checksum_offload)),
          b_(config(0x0b, 2, buffer, offload, checksum_offload)),
          by_ref_(by_ref) {
        chunk_.resize(64 * 1024);
        for (std::size_t i = 0; i < chunk_.size(); ++i) chunk_[i] = static_cast<std::byte>(i * 7);
        ok_ = a_.add_address(pair_ip(1)).has_value() && b_.add_address(pair_ip(2)).has_value() &&
              connect() && (!sink || b_.set_stream_sink(conn_b_, &sink_).has_value());
    }

    bool ok() const { return ok_; }

    // Moves at least `bytes` from A to B, or for at most `max_seconds`.
    StreamSample transfer(std::uint64_t bytes, double max_seconds) {
        StreamSample s;
        const auto start = std::chrono::steady_clock::now();
        std::uint64_t sent = 0;
        std::uint32_t spins = 0;
        while (s.bytes < bytes) {
            now_ = Instant(std::chrono::duration_cast<Duration>(
                std::chrono::steady_clock::now().time_since_epoch()));
            if (sent < bytes) {
                auto n =
                    by_ref_ ? a_.send_ref(now_, conn_a_, chunk_) : a_.send(now_, conn_a_, chunk_);
                if (!n) return failed(s);
                sent += *n;
            }
            s.frames += ferry(a_, b_, now_);
            s.bytes += sink_.taken;
            sink_.taken = 0;
            while (true) {
                auto view = b_.peek(conn_b_);
                if (!view) return failed(s);
                if (view->empty()) break;
                s.bytes += view->size();
                if (!b_.consume(now_, conn_b_, view->size())) return failed(s);
            }
            s.frames += ferry(b_, a_, now_);
            for (Core* c : {&a_, &b_})
                if (auto d = c->next_deadline(); d && *d <= now_) c->on_timer(now_);
            while (a_.poll_event()) {
            }
            while (b_.poll_event()) {
            }
            if ((++spins & 255) == 0 && seconds_since(start) > max_seconds) break;
        }
        s.seconds = seconds_since(start);
        return s;
    }

    // Copies per byte of the `delivered` bytes read so far (the reader
    // peeks in place or is the sink: no copy of its own).
    double copies_per_byte(std::uint64_t delivered) const {
        return bench::copies_per_byte(a_, conn_a_, b_, conn_b_, 0, delivered);
    }

private:
    static CoreConfig config(std::uint8_t mac_last, std::uint8_t secret, std::uint32_t buffer,
                             std::uint32_t offload, bool checksum_offload) {
        CoreConfig c;
        c.mac = MacAddr{{0x02, 0, 0, 0, 0, mac_last}};
        c.isn_secret.fill(secret);
        c.rcv_wscale = 7;
        c.checksum_offload = checksum_offload;
        c.stream.send_buffer = buffer;
        c.stream.segment_offload = static_cast<std::uint16_t>(offload);
        c.stream.recv_buffer = buffer;
        return c;
    }
    bool connect() {
        return connect_pair(a_, b_, now_, conn_a_, conn_b_) && a_.handoff(conn_a_).has_value() &&
               b_.handoff(conn_b_).has_value();
    }

    Core a_;
    Core b_;
    Instant now_{};
    ConnHandle conn_a_, conn_b_;
    std::vector<std::byte> chunk_;
    CountingSink sink_;
    bool by_ref_ = false;
    bool ok_ = false;
};

// A kernel TCP connection on 127.0.0.1 with both ends in this process, the
// MSS clamped to 1460 (TCP_MAXSEG) like the cores': the listening socket,
// the connecting end and the accepted end. False if any step failed (the
// descriptors opened so far are left for the caller to close).
inline bool open_loopback_pair(int& listen_fd, int& connected, int& accepted) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int mss = 1460;
    ::setsockopt(listen_fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss);
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    if (::listen(listen_fd, 1) != 0) return false;
    socklen_t len = sizeof a;
    if (::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
    connected = ::socket(AF_INET, SOCK_STREAM, 0);
    if (connected < 0) return false;
    ::setsockopt(connected, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss);
    if (::connect(connected, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    accepted = ::accept(listen_fd, nullptr, nullptr);
    return accepted >= 0;
}

// The same over a kernel TCP connection on 127.0.0.1: one thread writes and
// reads non-blocking, the MSS clamped to 1460 (TCP_MAXSEG) like the cores'.
class KernelStream {
public:
    KernelStream() {
        chunk_.resize(64 * 1024);
        buf_.resize(256 * 1024);
        ok_ = open();
    }
    ~KernelStream() {
        for (int fd : {listen_fd_, tx_, rx_})
            if (fd >= 0) ::close(fd);
    }
    KernelStream(const KernelStream&) = delete;
    KernelStream& operator=(const KernelStream&) = delete;
    bool ok() const { return ok_; }

    StreamSample transfer(std::uint64_t bytes, double max_seconds) {
        StreamSample s;
        const auto start = std::chrono::steady_clock::now();
        std::uint32_t spins = 0;
        std::uint64_t sent = 0;
        while (s.bytes < bytes) {
            if (sent < bytes) {
                ssize_t n = ::send(tx_, chunk_.data(), chunk_.size(), MSG_DONTWAIT);
                if (n > 0)
                    sent += static_cast<std::uint64_t>(n);
                else if (n < 0 && errno != EAGAIN)
                    return failed(s);
            }
            while (true) {
                ssize_t n = ::recv(rx_, buf_.data(), buf_.size(), MSG_DONTWAIT);
                if (n > 0) {
                    s.bytes += static_cast<std::uint64_t>(n);
                    continue;
                }
                if (n < 0 && errno != EAGAIN) return failed(s);
                break;
            }
            if ((++spins & 255) == 0 && seconds_since(start) > max_seconds) break;
        }
        s.seconds = seconds_since(start);
        return s;
    }

private:
    bool open() { return open_loopback_pair(listen_fd_, tx_, rx_); }

    int listen_fd_ = -1;
    int tx_ = -1;
    int rx_ = -1;
    std::vector<std::byte> chunk_;
    std::vector<std::byte> buf_;
    bool ok_ = false;
};

}  // namespace iwcm::bench
