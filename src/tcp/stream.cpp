// TEMPORARY stub so the engine compiles while tcp::Stream is written (not committed).
#include "tcp/stream.hpp"
namespace iwcm::tcp {
Stream::Stream(const StreamConfig&, const StreamInit&, Instant) {}
std::size_t Stream::write(std::span<const std::byte>) { return 0; }
std::size_t Stream::send_space() const { return 0; }
void Stream::close() {}
std::span<const std::byte> Stream::readable() const { return {}; }
std::size_t Stream::readable_bytes() const { return 0; }
void Stream::consume(std::size_t) {}
Arrival Stream::on_segment(Instant, const SegmentIn&) { return {}; }
bool Stream::acceptable(wire::SeqNumber, std::uint32_t) const { return true; }
std::optional<SegmentOut> Stream::poll_segment(Instant) { return {}; }
void Stream::force_ack() {}
std::optional<Instant> Stream::next_deadline() const { return {}; }
Stream::Timeout Stream::on_timer(Instant) { return Timeout::kNone; }
wire::SeqNumber Stream::snd_una() const { return {}; }
wire::SeqNumber Stream::snd_nxt() const { return {}; }
wire::SeqNumber Stream::snd_max() const { return {}; }
wire::SeqNumber Stream::rcv_nxt() const { return {}; }
std::uint32_t Stream::snd_wnd() const { return 0; }
std::uint32_t Stream::rcv_wnd() const { return 0; }
std::uint32_t Stream::cwnd() const { return 0; }
std::uint32_t Stream::ssthresh() const { return 0; }
std::optional<Duration> Stream::srtt() const { return {}; }
Duration Stream::rto() const { return {}; }
std::size_t Stream::bytes_in_flight() const { return 0; }
std::size_t Stream::bytes_queued() const { return 0; }
std::size_t Stream::out_of_order_bytes() const { return 0; }
bool Stream::fin_sent() const { return false; }
bool Stream::fin_acked() const { return false; }
bool Stream::fin_received() const { return false; }
bool Stream::idle() const { return true; }
std::uint64_t Stream::retransmitted_segments() const { return 0; }
void Stream::check_invariants() const {}
}
