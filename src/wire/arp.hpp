// ARP for IPv4 over Ethernet: requests and replies.
//
// Read first: RFC 826 (the packet: hardware type, protocol type, address
// lengths, opcode, sender and target hardware and protocol addresses; the
// "merge" rule: a receiver that is the target learns the sender's mapping),
// RFC 5227 section 2.1 (ARP probes use sender address 0.0.0.0). Only the
// Ethernet / IPv4 combination (hardware type 1, protocol 0x0800, lengths 6
// and 4) is accepted: anything else is not for a connection manager.
//
// Layout (28 bytes, big-endian):
//   0 htype 1 | 2 ptype 0x0800 | 4 hlen 6 | 5 plen 4 | 6 opcode (1 request, 2 reply)
//   8 sender MAC | 14 sender IPv4 | 18 target MAC | 24 target IPv4
#pragma once

#include <cstdint>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"

namespace iwcm::wire {

constexpr std::size_t kArpLen = 28;

enum class ArpOp : std::uint16_t { kRequest = 1, kReply = 2 };

struct ArpRepr {
    ArpOp op = ArpOp::kRequest;
    MacAddr sender_mac;
    Ipv4Addr sender_ip;
    MacAddr target_mac;  // zero in a request
    Ipv4Addr target_ip;

    // Writes kArpLen bytes at the start of out.
    void emit(MutBytes out) const;
    friend bool operator==(const ArpRepr&, const ArpRepr&) = default;
};

// Parses the ARP payload of an Ethernet frame (longer input is Ethernet
// padding and ignored). Refuses a short packet, a hardware or protocol type
// other than Ethernet / IPv4, wrong address lengths and opcodes other than 1 and 2.
ParseResult<ArpRepr> parse_arp(Bytes packet);

}  // namespace iwcm::wire
