// Errors returned by the Core's commands (API misuse and operating limits).
// A bad frame from the network is never an error for the caller: it is
// dropped or answered as TCP says, and counted in Stats.
#pragma once

#include <cstdint>
#include <string_view>

namespace iwcm {

enum class ApiError : std::uint8_t {
    kStaleHandle,         // the handle names a connection or listener that no longer exists
    kInvalidHandle,       // the handle was never issued by this core
    kWrongState,          // e.g. accept on a connection that is not waiting for accept
    kAddressNotLocal,     // the local address was not added with add_address
    kAddressInUse,        // listen on an address/port/VLAN already taken; connect on a used 4-tuple
    kPrivateDataTooLong,  // more than 512 bytes (508 at revision 2, whose IRD/ORD word counts)
    kInvalidArgument,     // a parameter out of range (port 0, revision not 1/2, ...)
    kFamilyMismatch,      // local and remote address of different families
    kTooManyConnections,  // CoreConfig::max_connections reached
    kNoPorts,             // no free ephemeral port for this local/remote pair
    kEventQueueFull,      // CoreConfig::max_events events wait: poll_event() them first
};

std::string_view to_string(ApiError error) noexcept;

}  // namespace iwcm
