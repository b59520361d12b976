// Handles and events: what the application holds and what it is told.
//
// Shaped after rdma_cm (librdmacm): a connect request is a value the
// application accepts or rejects; event types and their status values map
// the way the kernel's rdma_cm maps iWARP connection-manager results
// (drivers/infiniband/core/cma.c, cma_iw_handler):
//   status 0                          -> kEstablished
//   -ECONNREFUSED (MPA reject), -ECONNRESET (reset while connecting) -> kRejected
//   -ETIMEDOUT                        -> kUnreachable
//   any other negative errno          -> kConnectError
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "iwcm/address.hpp"
#include "iwcm/state.hpp"

namespace iwcm {

constexpr std::uint16_t kNoVlan = 0xFFFF;

// A connection as the application names it: an index and a generation. A
// handle whose connection is gone is stale; every command checks.
struct ConnHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    constexpr bool valid() const { return index != UINT32_MAX; }
    friend constexpr bool operator==(ConnHandle, ConnHandle) = default;
};

struct ListenHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    constexpr bool valid() const { return index != UINT32_MAX; }
    friend constexpr bool operator==(ListenHandle, ListenHandle) = default;
};

enum class RtrType : std::uint8_t { kNone, kSend, kWrite, kRead };
std::string_view to_string(RtrType type) noexcept;

// MPA parameters: in a connect request, what the peer offered; in
// kEstablished, what was negotiated.
struct MpaInfo {
    std::uint8_t revision = 0;
    bool crc = false;
    bool markers = false;
    bool peer_to_peer = false;
    std::uint16_t ird = 0;         // responder resources
    std::uint16_t ord = 0;         // initiator depth
    std::uint8_t rtr_offered = 0;  // set of rtr::k* the peer offered (request)
    RtrType rtr = RtrType::kNone;  // the RTR chosen (established)
};

enum class EventType : std::uint8_t {
    kConnectRequest,  // irdma MPA_REQ: a request arrived; accept() or reject()
    kEstablished,     // irdma MPA_CONNECT (initiator) / ESTABLISHED (responder)
    kRejected,        // irdma MPA_REJECT (peer's private data) or reset while connecting
    kUnreachable,     // no answer: retransmissions or an MPA timer ran out
    kConnectError,    // any other failure before established (TERMINATE, bad MPA, ...)
    kDisconnected,    // an established connection ended (FIN, RST, abort, address down)
    // Listener events (conn is not valid; listener and local name it). As in
    // the driver (irdma_if_notify), a listener outlives its address: it stops
    // serving when the address goes and serves again when it comes back.
    kAddressDown,  // a specific-address listener's address was removed (-ENETDOWN)
    kAddressUp,    // ... and added again (0)
    // Byte stream events (a connection handed off in HandoffMode::kStream).
    // At most one of each kind waits in the queue per connection.
    kReadable,  // received bytes wait for recv() / peek()
    kWritable,  // send() was short and the send buffer has room again
};
std::string_view to_string(EventType type) noexcept;

struct Event {
    EventType type = EventType::kConnectError;
    ConnHandle conn;
    ListenHandle listener;  // for passive connections
    int status = 0;         // 0 or a negative errno (see the table above)
    Endpoint local;
    Endpoint remote;
    std::uint16_t vlan = kNoVlan;
    CmState state = CmState::kUnknown;
    MpaInfo mpa;
    // The peer's private data (MPA request, reply or reject), without the
    // revision-2 IRD/ORD word. Valid until the next poll_event().
    std::span<const std::byte> private_data;
    // A terminal event (a connection's failure or end: kRejected,
    // kUnreachable, kConnectError, kDisconnected) ends
    // the application's handle: it is stale once the event is polled. For a
    // byte stream, bytes received before the end stay readable (peek, recv)
    // until the next poll_event() after the terminal event.
    constexpr bool terminal() const {
        return type == EventType::kRejected || type == EventType::kUnreachable ||
               type == EventType::kConnectError || type == EventType::kDisconnected;
    }
};

}  // namespace iwcm
