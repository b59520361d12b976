// The host loop over a frame device. Read first: event_loop.hpp.
#include "io/loop/event_loop.hpp"

#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "iwcm/assert.hpp"
#include "wire/checksum.hpp"
#include "wire/ethernet.hpp"
#include "wire/frame.hpp"

namespace iwcm::io {

namespace {

constexpr std::uint64_t kTapTag = 1;
constexpr std::uint64_t kTimerTag = 2;
constexpr std::uint64_t kSignalTag = 3;
constexpr std::uint64_t kWatchTag = 16;  // + the watch's index
// Frames handled per wake-up before timers get their turn.
constexpr int kMaxFramesPerWake = 256;

std::string errno_text(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

int block_signals_to_fd() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return -1;
    return ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

Instant TapHost::now() {
    return Instant{
        std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now().time_since_epoch())};
}

TapHost::TapHost(std::unique_ptr<FrameDevice> dev, Core& core, std::uint16_t vlan,
                 const TapHostConfig& config)
    : dev_(std::move(dev)),
      kernel_neighbors_(config.kernel_neighbors),
      core_(core),
      vlan_(vlan),
      neighbors_(core.config().mac, vlan, config.neighbors) {}

std::optional<std::string> offload_refused(const CoreConfig& core, const std::string& device,
                                           const DeviceOffloads& offloads) {
    if (core.checksum_offload)
        return "checksum offload is only for the in-memory link, not " + device;
    if (core.checksum_partial && !offloads.checksum)
        return "checksums left partial need a device that finishes them, not " + device;
    if (core.stream.segment_offload == 0) return std::nullopt;
    if (offloads.max_segment == 0)
        return "segment offload is only for the in-memory link or a TAP with the virtio-net "
               "header, not " +
               device;
    if (core.stream.segment_offload > offloads.max_segment || !core.stream.offload_mss_pieces ||
        !core.checksum_partial)
        return "segment offload on " + device + " needs segments of at most " +
               std::to_string(offloads.max_segment) +
               " bytes cut at the MSS, their checksums left partial";
    return std::nullopt;
}

void tap_offload_config(CoreConfig& core) {
    core.checksum_partial = true;
    core.stream.segment_offload = static_cast<std::uint16_t>(TapDevice::kMaxSegment);
    core.stream.offload_mss_pieces = true;
}

Expected<std::unique_ptr<TapHost>, std::string> TapHost::open(const TapHostConfig& config,
                                                              Core& core, std::uint16_t vlan) {
    const char* env = std::getenv("IWCM_TAP_RING");
    const std::string_view ring_env = env != nullptr ? env : "";
    if (!ring_env.empty() && ring_env != "0" && ring_env != "1")
        return fail("IWCM_TAP_RING=" + std::string(ring_env) + ": 0 or 1");
    const bool ring = config.ring && ring_env != "0";
    auto tap = TapDevice::open(config.tap, false, config.offload, ring);
    if (!tap) return fail(tap.error());
    return open_device(std::make_unique<TapDevice>(std::move(*tap)), config, core, vlan);
}

Expected<std::unique_ptr<TapHost>, std::string> TapHost::open_device(
    std::unique_ptr<FrameDevice> device, const TapHostConfig& config, Core& core,
    std::uint16_t vlan) {
    IWCM_ASSERT(device != nullptr);
    if (core.config().mac.is_multicast()) return fail(std::string("the CM's MAC must be unicast"));
    if (auto why = offload_refused(core.config(), device->name(), device->offloads()))
        return fail(*why);
    std::unique_ptr<TapHost> host(new TapHost(std::move(device), core, vlan, config));
    if (!host->setup(config)) return fail(host->error_);
    return host;
}

bool TapHost::watch(int fd, std::function<void(Instant)> on_ready) {
    IWCM_ASSERT(fd >= 0);
    if (watches_.size() >= static_cast<std::size_t>(kMaxWatches)) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWatchTag + watches_.size();
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    watches_.emplace_back(fd, std::move(on_ready));
    return true;
}

bool TapHost::setup(const TapHostConfig& config) {
    if (!config.pcap_path.empty()) {
        auto p = PcapWriter::open(config.pcap_path);
        if (!p) {
            error_ = p.error();
            return false;
        }
        pcap_ = std::move(*p);
    }
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epoll_fd_ < 0 || timer_fd_ < 0) {
        error_ = errno_text("epoll/timerfd");
        return false;
    }
    auto add = [&](int fd, std::uint64_t tag) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = tag;
        return ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
    };
    if (config.handle_signals) {
        if ((signal_fd_ = block_signals_to_fd()) < 0 || !add(signal_fd_, kSignalTag)) {
            error_ = errno_text("signalfd");
            return false;
        }
    }
    if (!add(dev_->fd(), kTapTag) || !add(timer_fd_, kTimerTag)) {
        error_ = errno_text("epoll_ctl");
        return false;
    }
    return true;
}

TapHost::~TapHost() {
    for (int fd : {epoll_fd_, timer_fd_, signal_fd_})
        if (fd >= 0) ::close(fd);
}

Result<void> TapHost::add_address(IpAddr addr) {
    auto r = core_.add_address(addr, vlan_);
    if (!r) return r;
    neighbors_.add_address(addr);
    if (kernel_neighbors_) return {};  // the kernel answers for the address
    // Tell the link at once (RFC 5227 section 2.3, RFC 4861 section 7.2.6):
    // a peer that still holds another MAC for the address updates it.
    neighbors_.announce(now(), addr);
    return {};
}

// ---------------------------------------------------------------- output

void TapHost::capture(std::span<const std::byte> frame,
                      std::span<const std::span<const std::byte>> rest, bool unfinished) {
    if (!pcap_) return;
    const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    if (unfinished) {
        // Joined and its TCP checksum computed over the whole segment (a long one stays one
        // frame), so that a reader of the capture finds it good. Only while capturing.
        captured_.assign(frame.begin(), frame.end());
        wire::append(captured_, rest);
        const auto h = vnet_header(captured_, captured_.size(), {true, 0});
        const std::size_t tcp = std::to_integer<std::size_t>(h[6]) |
                                (std::to_integer<std::size_t>(h[7]) << 8);  // csum_start
        if (auto p = wire::parse_tcp_frame(captured_, wire::Checksums::kOffload); p && tcp != 0) {
            const IpAddr src = p->repr.ip.src;
            const IpAddr dst = p->repr.ip.dst;
            captured_[tcp + 16] = captured_[tcp + 17] = std::byte{0};
            const std::uint16_t sum =
                wire::tcp_checksum(src, dst, std::span<const std::byte>(captured_).subspan(tcp));
            captured_[tcp + 16] = static_cast<std::byte>(sum >> 8);
            captured_[tcp + 17] = static_cast<std::byte>(sum & 0xFF);
        }
        (void)pcap_->write(wall.count(), captured_, {});
        return;
    }
    (void)pcap_->write(wall.count(), frame, rest);
}

void TapHost::send(std::span<const std::byte> headers,
                   std::span<const std::span<const std::byte>> payload) {
    capture(headers, payload);
    ++counters_.frames_out;
    if (dev_->write_parts(headers, payload) != 0) ++counters_.write_errors;
}

void TapHost::flush() {
    // The neighbour table first: a reply it owes may be what the peer needs
    // before it can answer anything the core sends. The core's stream segments come in
    // two parts, their payload read from the stream's memory by the device (no copy into
    // the core's frame first).
    for (int round = 0; round < 2; ++round) {
        while (auto f = neighbors_.poll_transmit()) send(*f);
        while (auto f = core_.poll_transmit_parts()) send_core(*f);
    }
    dev_->flush();
    counters_.write_errors += dev_->take_failed_writes();
}

void TapHost::send_core(const TransmitParts& f) {
    if (!core_.config().checksum_partial) {
        send(f.headers, f.payload);
        return;
    }
    capture(f.headers, f.payload, true);
    ++counters_.frames_out;
    if (dev_->write_offload(f.headers, f.payload, {true, f.segment_size}) != 0)
        ++counters_.write_errors;
}

// ---------------------------------------------------------------- input

bool frame_for_core(std::span<const std::byte> frame, const MacAddr& mac, std::uint16_t vlan) {
    auto eth = wire::parse_ethernet(frame);
    if (!eth) return false;
    const std::uint16_t id = eth->repr.vlan ? eth->repr.vlan->id : kNoVlan;
    if (id != vlan || eth->repr.dst != mac) return false;
    return eth->repr.ethertype == wire::kEtherTypeIpv4 ||
           eth->repr.ethertype == wire::kEtherTypeIpv6;
}

bool TapHost::for_core(std::span<const std::byte> frame) const {
    return frame_for_core(frame, core_.config().mac, vlan_);
}

void TapHost::handle_frame(Instant now, std::span<const std::byte> frame) {
    ++counters_.frames_in;
    capture(frame, {}, dev_->checksum_vouched());
    if (neighbors_.receive(now, frame)) {
        ++counters_.to_neighbors;
    } else if (for_core(frame)) {
        ++counters_.to_core;
        if (dev_->checksum_vouched())
            core_.receive_vouched(now, frame);
        else
            core_.receive(now, frame);
    } else {
        ++counters_.ignored;
    }
}

void TapHost::fire_timers(Instant now) {
    if (auto d = core_.next_deadline(); d && *d <= now) core_.on_timer(now);
    if (auto d = neighbors_.next_deadline(); d && *d <= now) neighbors_.on_timer(now);
}

// Sets the timer once per deadline: a step whose deadline has not moved (most steps
// of a busy connection) makes no system call. A deadline already due is set again,
// since the expiry it caused may have been read.
bool TapHost::arm_timer(Instant at) {
    if (at == armed_ && at > now()) return true;
    itimerspec spec{};
    const auto ns = std::max<std::int64_t>(at.time_since_epoch().count(), 1);
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    if (::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) return false;
    armed_ = at;
    return true;
}

bool TapHost::poll_frames() {
    if (!reads_without_syscall()) return false;
    int n = 0;
    for (; n < kMaxFramesPerWake; ++n) {
        std::span<const std::byte> frame;
        const long len = dev_->read_view(frame);
        IWCM_ASSERT(len >= 0);  // a ring read fails with nothing but "none waiting"
        if (len <= 0) break;
        handle_frame(now(), frame);
    }
    if (n == 0) return false;
    for (const auto& hook : after_step_) hook(now());
    flush();
    return true;
}

void TapHost::set_busy_poll(bool on) {
    busy_poll_ = on;
    sleeping_until_.store(on ? Instant::min() : kInstantNever, std::memory_order_release);
}

bool TapHost::read_frames() {
    for (int k = 0; k < kMaxFramesPerWake; ++k) {
        std::span<const std::byte> frame;
        const long len = dev_->read_view(frame);
        if (len < 0) {
            errno = static_cast<int>(-len);
            error_ = errno_text(("reading " + dev_->name()).c_str());
            return false;
        }
        if (len == 0) break;
        handle_frame(now(), frame);
    }
    return true;
}

Wake TapHost::step(Instant until) {
    flush();
    Instant wake = until;
    if (auto d = core_.next_deadline()) wake = std::min(wake, *d);
    if (auto d = neighbors_.next_deadline()) wake = std::min(wake, *d);
    // Busy polling fires the timers by looking at the clock every round: no timerfd.
    if (!busy_poll_ && !arm_timer(wake)) {
        error_ = errno_text("timerfd_settime");
        return Wake::kError;
    }
    // Frames the device read before and still holds: handled this round, without sleeping.
    const bool held = dev_->holds_frames();
    const int timeout = busy_poll_ || held ? 0 : -1;
    epoll_event events[4 + kMaxWatches];
    int n = 0;
    if (wait_lock_ != nullptr) {
        if (!busy_poll_) sleeping_until_.store(wake, std::memory_order_release);
        wait_lock_->unlock();
        n = ::epoll_wait(epoll_fd_, events, 4 + kMaxWatches, timeout);
        wait_lock_->lock();
        if (!busy_poll_) sleeping_until_.store(kInstantNever, std::memory_order_release);
    } else {
        n = ::epoll_wait(epoll_fd_, events, 4 + kMaxWatches, timeout);
    }
    if (n < 0) {
        if (errno == EINTR) return Wake::kOk;
        error_ = errno_text("epoll_wait");
        return Wake::kError;
    }
    Wake result = Wake::kOk;
    // A busy poller reads the device every round: an AF_XDP socket that prefers busy
    // polling has its frames moved by the read itself, not by an interrupt epoll sees.
    bool read = false;
    if (busy_poll_ || held) {
        if (!read_frames()) return Wake::kError;
        read = true;
    }
    for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == kTapTag) {
            if (!read && !read_frames()) return Wake::kError;
        } else if (events[i].data.u64 == kTimerTag) {
            std::uint64_t expirations = 0;
            (void)!::read(timer_fd_, &expirations, sizeof expirations);
        } else if (events[i].data.u64 >= kWatchTag) {
            const auto w = static_cast<std::size_t>(events[i].data.u64 - kWatchTag);
            IWCM_ASSERT(w < watches_.size());
            watches_[w].second(now());
        } else if (events[i].data.u64 == kSignalTag) {
            signalfd_siginfo info{};
            while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
                result = Wake::kSignal;
                last_signal_ = static_cast<int>(info.ssi_signo);
            }
        }
    }
    fire_timers(now());
    for (const auto& hook : after_step_) hook(now());
    flush();
    return result;
}

}  // namespace iwcm::io
