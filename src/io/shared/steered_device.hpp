// A frame device on an interface shared with the kernel (shared-address
// mode): besides moving frames, it takes the segments of chosen ports away
// from the kernel. Two kinds: the AF_XDP socket of the one process that owns
// the interface (xsk.hpp), and a client of the interface's switch, which owns
// that socket for several processes (switch.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "io/loop/frame_device.hpp"
#include "iwcm/address.hpp"
#include "iwcm/result.hpp"

namespace iwcm::io {

class SteeredDevice : public FrameDevice {
public:
    // Segments to addr:port (an unspecified addr: any address of its family)
    // come to this device from now on; remove_port() gives them back to the
    // kernel.
    virtual Expected<void, std::string> add_port(const IpAddr& addr, std::uint16_t port) = 0;
    virtual void remove_port(const IpAddr& addr, std::uint16_t port) = 0;
    // Where the XDP program runs ("native" or "generic").
    virtual const char* attach_mode() const = 0;
    // The frames reach this process without a copy.
    virtual bool zero_copy() const = 0;
    // "" for the owner of the interface's socket, "switch" through the switch.
    virtual const char* path() const { return ""; }
};

}  // namespace iwcm::io
