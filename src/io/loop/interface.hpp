// Where a CM sits on a real wire: our address and prefix, our MAC, VLAN and
// gateway on a TAP device, or an interface shared with the kernel (--dev),
// parsed and checked from the options the command line and the runtime's
// environment give (tools/wire_cli.hpp, include/iwcm/runtime.hpp).
#pragma once

#include <optional>
#include <string>

#include "iwcm/address.hpp"
#include "iwcm/events.hpp"
#include "iwcm/result.hpp"

namespace iwcm::io {

struct InterfaceOptions {
    std::string tap;
    std::string dev;      // shared-address mode on this interface
    std::string ip;       // ADDR/PREFIX (tap), ADDR (dev: which of its addresses)
    std::string mac;      // tap: default 02:00 and the address's last four bytes
    std::string gateway;  // tap: the router for off-link peers
    int vlan = -1;        // tap: -1 none
};

struct Interface {
    IpAddr addr;
    unsigned prefix = 0;
    MacAddr mac;
    std::uint16_t vlan = kNoVlan;
    std::optional<IpAddr> gateway;
    std::string dev;  // shared mode: the kernel's routes and neighbours, not ours
    bool in_subnet(const IpAddr& other) const;
    // Whose MAC a frame to `dest` goes to: dest itself when on-link, else the
    // gateway (none without one).
    std::optional<IpAddr> next_hop(const IpAddr& dest) const;
};

// Parses ip, mac, vlan, gateway (in our subnet, unicast, not our address);
// with dev, reads the interface's MAC and addresses from the kernel (ip must
// be one of them; default its first global one). The error is the one-line
// reason, naming the option as the command line spells it (--ip, --dev...).
Expected<Interface, std::string> parse_interface(const InterfaceOptions& o);
// Why `addr` cannot be a connection's end on `iface` (our own, a peer or a
// gateway): the unspecified address, loopback (127.0.0.0/8, ::1), multicast,
// the limited broadcast, or within the prefix of `iface` the subnet's
// broadcast or network address; an empty string when it can. Every address
// the command line and the runtime's environment take is checked here.
std::string not_unicast(const IpAddr& addr, const Interface& iface);

}  // namespace iwcm::io
